#pragma once
// Hand-built clusters, a transparent cost model and graph-building shorthands for the sim tests. The
// tests depend only on the contracts (topo::Cluster fields + finalize(), model::KernelCostModel),
// never on the shipped topologies or the roofline model, so every expected time can be derived by
// hand from the figures set here.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "fusesim/model/kernel.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/topo/cluster.hpp"

namespace sim_test {

using namespace fusesim;

constexpr int kSms = 100;                  // SMs per test device
constexpr double kHbmBytesPerS = 1e12;     // HBM bandwidth of the test device
constexpr int kDefaultCommSms = 20;        // device default for sm_kernel transfers with sms = -1

// Duration at rate 1: one flop per picosecond (gemm: 2 m n k batch flops; element-wise: its flops).
// Speed under load: (1 - held SMs / SMs) x (1 - comm HBM traffic / HBM bandwidth), so an SM-holding
// transfer and an HBM-hungry one each slow compute by an amount that is easy to derive by hand.
class TestCostModel final : public model::KernelCostModel {
 public:
  model::KernelCost cost(const model::Kernel& kernel, topo::Dtype, const topo::DeviceModel&) const override {
    model::KernelCost c;
    if (const auto* g = std::get_if<model::GemmKernel>(&kernel))
      c.flops = 2.0 * static_cast<double>(g->m) * static_cast<double>(g->n) * static_cast<double>(g->k) *
                static_cast<double>(g->batch);
    else if (const auto* e = std::get_if<model::ElementwiseKernel>(&kernel))
      c.flops = e->flops;
    else
      throw std::logic_error("TestCostModel: attention not supported");
    c.duration_ps = static_cast<TimePs>(std::llround(c.flops));
    return c;
  }
  double rate(const model::KernelCost&, const topo::DeviceModel& device, const model::DeviceLoad& load) const override {
    const double sm_part = 1.0 - static_cast<double>(load.sms_held_by_comm) / device.sm_count;
    const double hbm_part = 1.0 - load.comm_hbm_bytes_per_s / device.hbm_bandwidth_bytes_per_s.value;
    return sm_part * hbm_part;
  }
};

inline topo::DeviceModel test_device(double hbm_traffic_factor = 0.0) {
  topo::DeviceModel d;
  d.name = "test-gpu";
  d.vendor = "test";
  d.peak_flops_per_s[topo::Dtype::bf16] = {1e15, "test"};
  d.hbm_bytes = {8e10, "test"};
  d.hbm_bandwidth_bytes_per_s = {kHbmBytesPerS, "test"};
  d.sm_count = kSms;
  d.sm_count_source = "test";
  d.copy_engines = 2;
  d.efficiency = {{1.0, "test"}, {1.0, "test"}, {1.0, "test"}};
  d.contention = {{static_cast<double>(kDefaultCommSms), "test"}, {hbm_traffic_factor, "test"}};
  return d;
}

// Communication constants of the test clusters (picoseconds once converted).
constexpr TimePs kBasePs = 5'000'000;      // collective base latency 5 us
constexpr TimePs kSmStepPs = 1'000'000;    // SM-kernel step latency 1 us
constexpr TimePs kCeStepPs = 2'000'000;    // copy-engine step latency 2 us

struct ClusterBuilder {
  topo::Cluster c;
  explicit ClusterBuilder(double hbm_traffic_factor = 0.0, double sm_eff = 1.0, double ce_eff = 1.0) {
    c.name = "test";
    c.device_models["test-gpu"] = test_device(hbm_traffic_factor);
    c.comm.collective_base_latency_s = {ps_to_seconds(kBasePs), "test"};
    c.comm.sm_step_latency_s = {ps_to_seconds(kSmStepPs), "test"};
    c.comm.copy_engine_step_latency_s = {ps_to_seconds(kCeStepPs), "test"};
    c.comm.sm_kernel_efficiency = {sm_eff, "test"};
    c.comm.copy_engine_efficiency = {ce_eff, "test"};
  }
  topo::VertexId gpu() {
    const int rank = static_cast<int>(c.rank_vertex.size());
    topo::Vertex v;
    v.name = "gpu" + std::to_string(rank);
    v.kind = topo::VertexKind::accelerator;
    v.node = 0;
    v.rank = rank;
    c.vertices.push_back(v);
    const auto id = static_cast<topo::VertexId>(c.vertices.size() - 1);
    c.rank_vertex.push_back(id);
    c.rank_model.push_back("test-gpu");
    return id;
  }
  topo::VertexId sw(const std::string& name) {
    topo::Vertex v;
    v.name = name;
    v.kind = topo::VertexKind::switch_;
    v.node = 0;
    c.vertices.push_back(v);
    return static_cast<topo::VertexId>(c.vertices.size() - 1);
  }
  topo::LinkId link(topo::VertexId a, topo::VertexId b, double bytes_per_s, TimePs latency_ps) {
    topo::Link l;
    l.name = c.vertices[a].name + "->" + c.vertices[b].name;
    l.from = a;
    l.to = b;
    l.line_rate_bytes_per_s = bytes_per_s;
    l.efficiency = 1.0;
    l.bandwidth_bytes_per_s = bytes_per_s;
    l.latency_ps = latency_ps;
    c.links.push_back(l);
    return static_cast<topo::LinkId>(c.links.size() - 1);
  }
  void cable(topo::VertexId a, topo::VertexId b, double bytes_per_s, TimePs latency_ps) {
    link(a, b, bytes_per_s, latency_ps);
    link(b, a, bytes_per_s, latency_ps);
  }
  topo::Cluster done() {
    c.num_nodes = 1;
    c.devices_per_node = c.num_ranks();
    c.finalize();
    return c;
  }
};

// n ranks on one switch; every link `bytes_per_s` with `link_latency_ps`, so a rank-to-rank route
// is two links with latency 2 x link_latency_ps.
inline topo::Cluster star(int n, double bytes_per_s = 1e11, TimePs link_latency_ps = 500'000,
                          double hbm_traffic_factor = 0.0, double sm_eff = 1.0, double ce_eff = 1.0) {
  ClusterBuilder b(hbm_traffic_factor, sm_eff, ce_eff);
  std::vector<topo::VertexId> gpus;
  for (int i = 0; i < n; ++i) gpus.push_back(b.gpu());
  const auto s = b.sw("switch");
  for (auto g : gpus) b.cable(g, s, bytes_per_s, link_latency_ps);
  return b.done();
}

// Graph-building shorthands.
inline sched::Task compute(sched::TaskName name, int rank, double work_ps, int stream = 0) {
  sched::Task t;
  t.name = name;
  t.rank = rank;
  t.stream = {sched::StreamKind::compute, stream};
  model::ElementwiseKernel k;
  k.op = "test";
  k.flops = work_ps;
  t.kind = sched::ComputeTask{k, topo::Dtype::bf16, false};
  return t;
}

inline sched::Task send(sched::TaskName name, int rank, int peer, Bytes bytes, std::int64_t tag,
                        model::CommEngine engine = model::CommEngine::copy_engine, int sms = -1, int stream = 0) {
  sched::Task t;
  t.name = name;
  t.rank = rank;
  t.stream = {engine == model::CommEngine::copy_engine ? sched::StreamKind::copy : sched::StreamKind::comm, stream};
  t.kind = sched::SendTask{peer, bytes, tag, engine, sms};
  return t;
}

inline sched::Task recv(sched::TaskName name, int rank, int peer, Bytes bytes, std::int64_t tag) {
  sched::Task t;
  t.name = name;
  t.rank = rank;
  t.stream = {sched::StreamKind::comm, 0};
  t.kind = sched::RecvTask{peer, bytes, tag};
  return t;
}

// One collective task per member of `group`; returns their ids in group order.
inline std::vector<sched::TaskId> collective(sched::TaskGraph& g, const std::string& name, sched::CollectiveKind kind,
                                             const std::vector<int>& group, Bytes bytes, std::int64_t instance,
                                             model::CommEngine engine = model::CommEngine::sm_kernel, int sms = -1) {
  std::vector<sched::TaskId> ids;
  for (int r : group) {
    const std::string member_name = name + "/r" + std::to_string(r);
    sched::Task t;
    t.name = member_name;
    t.rank = r;
    t.stream = {sched::StreamKind::comm, 0};
    t.kind = sched::CollectiveTask{kind, group, bytes, instance, engine, sms};
    ids.push_back(g.add(t));
  }
  return ids;
}

inline std::vector<int> iota_ranks(int n) {
  std::vector<int> r;
  for (int i = 0; i < n; ++i) r.push_back(i);
  return r;
}

}  // namespace sim_test
