#pragma once
// Hand-made clusters, cost models and runs for the analysis tests: no topology file, no simulator,
// so that every expected number can be derived on paper.
#include <string>

#include "fusesim/model/kernel.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/topo/cluster.hpp"

namespace fusesim::testing {

// `ranks` accelerators, `per_node` to a node, all of device model "test-gpu" with the given bf16 peak.
inline topo::Cluster make_cluster(int ranks, int per_node, double peak_bf16_flops_per_s) {
  topo::Cluster c;
  c.name = "hand-made";
  topo::DeviceModel d;
  d.name = "test-gpu";
  d.peak_flops_per_s[topo::Dtype::bf16] = {peak_bf16_flops_per_s, "test fixture"};
  d.sm_count = 100;
  c.device_models[d.name] = d;
  c.num_nodes = (ranks + per_node - 1) / per_node;
  c.devices_per_node = per_node;
  for (int r = 0; r < ranks; ++r) {
    topo::Vertex v;
    v.name = "node" + std::to_string(r / per_node) + "/gpu" + std::to_string(r % per_node);
    v.kind = topo::VertexKind::accelerator;
    v.node = r / per_node;
    v.rank = r;
    c.vertices.push_back(v);
    c.rank_vertex.push_back(r);
    c.rank_model.push_back(d.name);
  }
  return c;
}

// FLOPs 2mnk per GEMM (batch times), as any GEMM cost model counts them; other kernels carry their own.
class FakeCosts final : public model::KernelCostModel {
 public:
  model::KernelCost cost(const model::Kernel& kernel, topo::Dtype, const topo::DeviceModel&) const override {
    model::KernelCost c;
    if (const auto* g = std::get_if<model::GemmKernel>(&kernel)) {
      c.flops = 2.0 * static_cast<double>(g->m * g->n * g->k * g->batch);
      c.hbm_bytes = 2.0 * static_cast<double>(g->m * g->k + g->k * g->n + g->m * g->n);
    } else if (const auto* e = std::get_if<model::ElementwiseKernel>(&kernel)) {
      c.flops = e->flops;
      c.hbm_bytes = static_cast<double>(e->bytes);
    }
    return c;
  }
  double rate(const model::KernelCost&, const topo::DeviceModel&, const model::DeviceLoad&) const override {
    return 1.0;
  }
};

inline sched::Task compute_task(sched::TaskName name, int rank, std::int64_t m, bool recompute = false,
                                int region = -1) {
  sched::Task t;
  t.name = name;
  t.rank = rank;
  t.stream = {sched::StreamKind::compute, 0};
  sched::ComputeTask c;
  c.kernel = model::GemmKernel{m, 10, 5, 1};
  c.recompute = recompute;
  t.kind = c;
  t.labels.region = region;
  t.labels.op = "fc1";
  t.labels.layer = 0;
  return t;
}

inline sched::Task collective_task(sched::TaskName name, int rank, std::vector<int> group, std::int64_t instance,
                                   int region = -1) {
  sched::Task t;
  t.name = name;
  t.rank = rank;
  t.stream = {sched::StreamKind::comm, 0};
  sched::CollectiveTask c;
  c.kind = sched::CollectiveKind::all_gather;
  c.group = std::move(group);
  c.bytes = 4096;
  c.instance = instance;
  t.kind = c;
  t.labels.region = region;
  t.labels.op = "ag";
  return t;
}

inline sched::Task send_task(sched::TaskName name, int rank, int peer, std::int64_t tag, int region = -1) {
  sched::Task t;
  t.name = name;
  t.rank = rank;
  t.stream = {sched::StreamKind::copy, 0};
  sched::SendTask s;
  s.peer = peer;
  s.bytes = 1024;
  s.tag = tag;
  t.kind = s;
  t.labels.region = region;
  t.labels.chunk = 1;
  t.labels.step = 0;
  return t;
}

inline sched::Task recv_task(sched::TaskName name, int rank, int peer, std::int64_t tag, int region = -1) {
  sched::Task t;
  t.name = name;
  t.rank = rank;
  t.stream = {sched::StreamKind::copy, 0};
  sched::RecvTask r;
  r.peer = peer;
  r.bytes = 1024;
  r.tag = tag;
  t.kind = r;
  t.labels.region = region;
  return t;
}

inline sim::TaskTiming timing(TimePs start, TimePs end) { return {start, start, end}; }

}  // namespace fusesim::testing
