#include "fusesim/sched/generate.hpp"

#include "fusesim/sched/dataflow.hpp"
#include "fusesim/sched/tpsp.hpp"

namespace fusesim::sched {

// The TPSP builder generates every parallelism (Ulysses inside its layers, the DP gradient sync and the
// step around them); tpsp_request() turns the workload and cluster into its request.
Schedule generate(const model::Workload& workload, const std::string& workload_label, const topo::Cluster& cluster,
                  model::ScheduleKind kind, const GenerateOptions& options) {
  TpspRequest r = tpsp_request(workload, workload_label, cluster, kind, options);
  // The embedding and the LM head are built with Megatron's padded vocabulary (a multiple of
  // $.model.vocab_divisible_by x tp): their FLOPs, bytes and gradient rows, and so MFU, count the
  // padding rows, as Megatron's own num_floating_point_operations does with args.padded_vocab_size
  // (megatron/training/training.py).
  r.step.vocab = workload.arch.padded_vocab(workload.parallel.tp);
  Schedule s = generate_tpsp(r);
  s.network_sends_on_sm = network_sends_to_sm_kernels(s.graph, cluster);
  return s;
}

namespace {
bool crosses_nodes(const Task& t, const SendTask& send, const topo::Cluster& cluster) {
  const int ranks = cluster.num_ranks();
  return t.rank < ranks && send.peer < ranks && cluster.node_of(t.rank) != cluster.node_of(send.peer);
}
}  // namespace

std::int64_t network_sends_to_sm_kernels(TaskGraph& graph, const topo::Cluster& cluster) {
  std::int64_t turned = 0;
  for (TaskId id = 0; id < graph.size(); ++id) {
    Task& t = graph.task(id);
    auto* send = std::get_if<SendTask>(&t.kind);
    if (send == nullptr || send->engine != model::CommEngine::copy_engine || !crosses_nodes(t, *send, cluster)) continue;
    send->engine = model::CommEngine::sm_kernel;
    send->sms = -1;
    ++turned;
  }
  return turned;
}

std::optional<TaskId> first_network_copy_send(const TaskGraph& graph, const topo::Cluster& cluster) {
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    const auto* send = std::get_if<SendTask>(&t.kind);
    if (send != nullptr && send->engine == model::CommEngine::copy_engine && crosses_nodes(t, *send, cluster)) return id;
  }
  return std::nullopt;
}

}  // namespace fusesim::sched
