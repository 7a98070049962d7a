// schedule_fingerprint: one line per generated configuration with a hash of its task graph (the DAG
// JSON `fusesim generate` writes) and of the size of its dataflow program, for checking that a
// refactor of the schedule generators changes nothing (docs/extending.md, "Checking that a refactor
// changes nothing"). Build it at the old and the new revision, run both, diff the outputs.
//
// The matrix: shipped workloads x (tp, up, dp) shapes x schedule x scope x compared parallelism x
// option variants, each shrunk to 2 layers and a short sequence so that the whole matrix runs in about
// two minutes on two cores. A configuration the generator refuses prints its error instead: refusals
// must not change either.
#include <fmt/format.h>

#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "fusesim/model/workload.hpp"
#include "fusesim/sched/dag_json.hpp"
#include "fusesim/sched/dataflow.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/topo/cluster.hpp"

namespace {

using namespace fusesim;

// FNV-1a, 64 bits: stable across runs and platforms (std::hash is not).
std::uint64_t fnv1a(const std::string& s, std::uint64_t h = 14695981039346656037ull) {
  for (const unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

struct Shape {
  int tp, up, dp;
};

// What each variant changes of the workload and the options; returns false when it does not apply.
bool apply_variant(int v, model::Workload& w, sched::GenerateOptions& o) {
  switch (v) {
    case 0:  // as shipped
      return true;
    case 1:  // DP sync as ring P2P steps
      o.dp_as_p2p = true;
      return w.parallel.dp > 1;
    case 2:  // mirrored DP replicas
      o.mirror_dp = true;
      return w.parallel.dp > 1;
    case 3:  // FSDP and selective recomputation
      w.parallel.dp_sharding = model::DpSharding::zero3;
      w.recompute = model::Recompute::selective;
      return true;
    case 4:  // distributed optimizer with overlapped parameter gather, full recompute, query split
      w.parallel.dp_sharding = model::DpSharding::zero1;
      w.parallel.overlap_param_gather = true;
      w.recompute = model::Recompute::full;
      w.schedule.query_split_attention = true;
      return o.scope == sched::Scope::step;
    case 5:  // forward only, P2P on SM kernels, fp8, serial DP
      o.backward = false;
      w.schedule.p2p_engine = model::CommEngine::sm_kernel;
      w.dtype = topo::Dtype::fp8;
      w.schedule.dp_serial_baseline = true;
      return true;
    case 6:  // torchtitan-style: FSDP, per-op recomputation, fp8 with fp8 parameter gathers
      w.parallel.dp_sharding = model::DpSharding::zero3;
      w.recompute = model::Recompute::op;
      w.dtype = topo::Dtype::fp8;
      w.fp8_param_gather = true;
      return true;
    default:
      return false;
  }
}

}  // namespace

int main() {
  const std::vector<std::string> workloads{"llama-3-8b", "llama-3-8b-ulysses", "llama-3-70b-4node",
                                           "commfuse-tpsp-block", "gpt-3-175b"};
  const std::vector<Shape> shapes{{2, 1, 1}, {4, 1, 2}, {2, 2, 1}, {2, 2, 2}, {1, 1, 2}, {8, 1, 2}, {1, 2, 2}, {4, 2, 1}};
  const std::vector<std::optional<sched::Parallelism>> compared{
      std::nullopt, sched::Parallelism::tpsp, sched::Parallelism::up, sched::Parallelism::dp};
  const topo::Cluster cluster = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  std::uint64_t all = 14695981039346656037ull;
  int configs = 0;
  for (const std::string& name : workloads) {
    const model::Workload shipped = model::load_workload(name);
    for (const Shape& s : shapes)
      for (const model::ScheduleKind kind :
           {model::ScheduleKind::baseline, model::ScheduleKind::slice, model::ScheduleKind::commfuse})
        for (const sched::Scope scope : {sched::Scope::layer, sched::Scope::stack, sched::Scope::step})
          for (const auto& par : compared)
            for (int v = 0; v <= 6; ++v) {
              model::Workload w = shipped;
              w.arch.layers = 2;
              w.parallel.tp = s.tp;
              w.parallel.up = s.up;
              w.parallel.dp = s.dp;
              w.sequence_length = 64 * s.tp * s.up;
              w.schedule.slices = 2;
              w.grad_accumulation = scope == sched::Scope::step ? 2 : 1;
              sched::GenerateOptions o;
              o.scope = scope;
              o.parallelism = par;
              if (!apply_variant(v, w, o)) continue;
              const std::string key =
                  fmt::format("{} tp{} up{} dp{} {} {} {} v{}", name, s.tp, s.up, s.dp, model::to_string(kind),
                              sched::to_string(scope), par ? sched::to_string(*par) : "all", v);
              std::string line;
              try {
                const sched::Schedule g = sched::generate(w, name, cluster, kind, o);
                sched::DagFile f{g.graph, w.dtype, g.tokens, model::to_string(kind), g.parallelism, "dgx-h100-4node",
                                 g.gpus, g.simulated_ranks, g.replicas};
                const std::uint64_t dag = fnv1a(sched::dag_to_json(f).dump());
                std::string flow = "none";
                if (g.dataflow)
                  flow = fmt::format("{} buffers {} ops {} outputs {} elements", g.dataflow->buffers.size(),
                                     g.dataflow->ops.size(), g.dataflow->outputs.size(), g.dataflow->buffer_elements());
                line = fmt::format("{}: dag {:016x} tasks {} dataflow {}", key, dag, g.graph.size(), flow);
              } catch (const std::exception& e) {
                line = fmt::format("{}: refused: {}", key, e.what());
              }
              std::cout << line << '\n';
              all = fnv1a(line + "\n", all);
              ++configs;
            }
  }
  std::cout << fmt::format("{} configurations, fingerprint {:016x}\n", configs, all);
  return 0;
}
