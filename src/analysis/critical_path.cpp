#include "fusesim/analysis/critical_path.hpp"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>
#include <variant>

#include <fmt/format.h>

namespace fusesim::analysis {

CriticalPath critical_path(const sched::TaskGraph& graph, const sim::SimResult& result, int stages) {
  if (result.tasks.size() != graph.size())
    throw std::logic_error("critical path: the result does not belong to the graph");
  const int parts = std::max(1, stages);
  if (graph.num_ranks() % parts != 0) throw std::logic_error("critical path: ranks do not split into the stages");
  const int stage_ranks = graph.num_ranks() / parts;
  CriticalPath out;
  out.stage_compute_ps.assign(static_cast<std::size_t>(parts), 0);
  const TimePs T = result.makespan_ps;
  if (graph.size() == 0 || T <= 0) return out;

  // Each task's stream predecessor (the inverse of sched::stream_successors) and its explicit ones.
  const sched::PredecessorIndex before = graph.predecessor_index();
  std::vector<sched::TaskId> stream_prev(graph.size(), sched::kNoTask);
  {
    const std::vector<sched::TaskId> next = sched::stream_successors(graph);
    for (sched::TaskId id = 0; id < graph.size(); ++id)
      if (next[id] != sched::kNoTask) stream_prev[next[id]] = id;
  }
  // A P2P transfer's two ends (from the transfer records), and the members of each collective.
  std::vector<sched::TaskId> partner(graph.size(), sched::kNoTask);
  for (const sim::TransferRecord& tr : result.transfers)
    if (tr.step < 0 && tr.task < graph.size() && tr.peer_task < graph.size()) {
      partner[tr.task] = tr.peer_task;
      partner[tr.peer_task] = tr.task;
    }
  std::unordered_map<std::int64_t, std::vector<sched::TaskId>> members;  // looked up, never walked
  for (sched::TaskId id = 0; id < graph.size(); ++id)
    if (const auto* k = std::get_if<sched::CollectiveTask>(&graph.task(id).kind)) members[k->instance].push_back(id);
  const auto& at = result.tasks;

  // The last task to end, lowest id first.
  sched::TaskId cur = 0;
  while (at[cur].end_ps != T) ++cur;
  TimePs now = T;
  bool whole = true;  // false: arrived at the task's ready time through a transfer's other end
  const auto wait = [&](TimePs from) {
    if (from < now) {
      out.wait_ps += now - from;
      now = from;
    }
  };
  for (;;) {
    const sim::TaskTiming& t = at[cur];
    if (whole) {
      ++out.tasks;
      const TimePs s = t.start_ps, e = std::min(now, t.end_ps);
      if (e > s) {
        const sched::Task& task = graph.task(cur);
        if (std::holds_alternative<sched::ComputeTask>(task.kind)) {
          out.compute_ps += e - s;
          out.stage_compute_ps[static_cast<std::size_t>(std::min(task.rank / stage_ranks, parts - 1))] += e - s;
        } else {
          out.comm_ps += e - s;
        }
      }
      now = std::min(now, s);
      // A transfer that started after it was ready waited for its other end.
      sched::TaskId other = sched::kNoTask;
      TimePs other_ready = t.ready_ps;
      const auto consider = [&](sched::TaskId p) {
        if (p == sched::kNoTask || p == cur) return;
        const TimePs r = at[p].ready_ps;
        if (r > other_ready && r <= t.start_ps) {
          other = p;
          other_ready = r;
        }
      };
      consider(partner[cur]);
      if (const auto* k = std::get_if<sched::CollectiveTask>(&graph.task(cur).kind))
        for (sched::TaskId m : members.at(k->instance)) consider(m);
      if (other != sched::kNoTask) {
        wait(other_ready);
        cur = other;
        whole = false;
        continue;
      }
      wait(t.ready_ps);
    }
    // What made the task ready: the predecessor that ended last (lowest id on ties).
    sched::TaskId best = sched::kNoTask;
    const auto better = [&](sched::TaskId p) {
      if (p == sched::kNoTask) return;
      if (best == sched::kNoTask || at[p].end_ps > at[best].end_ps || (at[p].end_ps == at[best].end_ps && p < best))
        best = p;
    };
    for (sched::TaskId p : before.of(cur)) better(p);
    better(stream_prev[cur]);
    if (best == sched::kNoTask || at[best].end_ps <= 0) {
      wait(0);
      break;
    }
    wait(at[best].end_ps);
    cur = best;
    whole = true;
  }
  if (out.compute_ps + out.comm_ps + out.wait_ps != T)
    throw std::logic_error(fmt::format("critical path: {} + {} + {} ps is not the step's {} ps", out.compute_ps,
                                       out.comm_ps, out.wait_ps, T));
  return out;
}

}  // namespace fusesim::analysis
