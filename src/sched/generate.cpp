#include "fusesim/sched/generate.hpp"

#include "fusesim/sched/dataflow.hpp"
#include "fusesim/sched/tpsp.hpp"

namespace fusesim::sched {

// Only TPSP is generated so far: tpsp_request() refuses Ulysses (up > 1) at $.parallel.up, and DP
// replicas (dp > 1) are generated as independent TP groups with no gradient synchronisation.
Schedule generate(const model::Workload& workload, const std::string& workload_label, const topo::Cluster& cluster,
                  model::ScheduleKind kind, const GenerateOptions& options) {
  TpspRequest r = tpsp_request(workload, workload_label, cluster, kind, options);
  // The embedding and the LM head are built with Megatron's padded vocabulary (a multiple of
  // $.model.vocab_divisible_by x tp): their FLOPs, bytes and gradient rows, and so MFU, count the
  // padding rows, as Megatron's own num_floating_point_operations does with args.padded_vocab_size
  // (megatron/training/training.py).
  r.step.vocab = workload.arch.padded_vocab(workload.parallel.tp);
  return generate_tpsp(r);
}

}  // namespace fusesim::sched
