// What the schedule tests share: the small TP shape whose counts they derive by hand, task counts
// per rank by kind, and a graph's FLOPs.
#pragma once

#include <map>
#include <variant>

#include "fusesim/model/kernel.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/sched/tpsp.hpp"

namespace fusesim::sched::test {

// t ranks, 8 positions per TP chunk, 2 layers of hidden 32: 2 query heads and 1 key/value head per
// rank of head dim 8, a gated FFN of 16 per rank. Small enough for the reference executor, every
// dimension divisible by what the schedules split it by (slices up to 8, TE's 4 pipeline splits).
inline TpspShape small_tp_shape(int t, std::int64_t batch = 1) {
  TpspShape s;
  s.tp = t;
  s.seq = 8 * t;
  s.batch = batch;
  s.hidden = 32;
  s.heads = 2 * t;
  s.kv_heads = t;
  s.head_dim = 8;
  s.ffn = 16 * t;
  s.gated = true;
  s.layers = 2;
  return s;
}

// The FLOPs of every compute task of `g` (model::kernel_flops).
inline double graph_flops(const TaskGraph& g) {
  double flops = 0.0;
  for (TaskId id = 0; id < g.size(); ++id)
    if (const auto* c = std::get_if<ComputeTask>(&g.task(id).kind)) flops += model::kernel_flops(c->kernel);
  return flops;
}

struct TaskCount {
  int compute = 0, adds = 0, sends = 0, recvs = 0, collectives = 0, all_gathers = 0, reduce_scatters = 0;
};

inline void count_task(const Task& task, TaskCount& c) {
  if (std::holds_alternative<ComputeTask>(task.kind)) ++c.compute;
  if (task.labels.op == "add") ++c.adds;
  if (std::holds_alternative<SendTask>(task.kind)) ++c.sends;
  if (std::holds_alternative<RecvTask>(task.kind)) ++c.recvs;
  if (const auto* col = std::get_if<CollectiveTask>(&task.kind)) {
    ++c.collectives;
    if (col->kind == CollectiveKind::all_gather) ++c.all_gathers;
    if (col->kind == CollectiveKind::reduce_scatter) ++c.reduce_scatters;
  }
}

inline TaskCount count_on_rank(const TaskGraph& g, int rank) {
  TaskCount c;
  for (TaskId id = 0; id < g.size(); ++id)
    if (g.task(id).rank == rank) count_task(g.task(id), c);
  return c;
}

inline std::map<int, TaskCount> count_per_rank(const TaskGraph& g) {
  std::map<int, TaskCount> m;
  for (TaskId id = 0; id < g.size(); ++id) count_task(g.task(id), m[g.task(id).rank]);
  return m;
}

}  // namespace fusesim::sched::test
