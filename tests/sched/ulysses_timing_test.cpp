// Ulysses schedules on the real simulator (sim/engine.hpp), on t ranks hanging off one switch, with
// times derived by hand from the engine's rules (docs/engine.md) and the test cost model
// (tests/sim/sim_test_util.hpp: a GEMM lasts 2 m n k ps, an element-wise kernel its flops in ps).
//
// Shape (tp 1, up t, forward only): sequence 16 t positions, batch 1, hidden 32, 2t query heads and
// 2t kv heads of 8: each UP rank holds S/up = 16 rows and, after the all-to-all, 2 query heads and 2
// kv heads, so a head group has W = (2 + 2 x 2) x 8 = 48 columns:
//   one group's QKV GEMM: T_g = 2 x 16 x 48 x 32 = 49152 ps;
//   one group's rows sent to a peer: 16 x 48 x 2 = 1536 bytes;
//   the baseline all-to-all's buffer: t groups, n = 1536 t bytes, t-1 steps of n/t = 1536 bytes.
// A transfer of b bytes takes alpha + b/B, alpha = 2 x link latency + step latency (two links via
// the switch); on the switch every rank sends one and receives one flow per step, so nothing shares.
#include <catch2/catch.hpp>

#include <cmath>

#include <fmt/format.h>

#include "../sim/sim_test_util.hpp"
#include "fusesim/analysis/metrics.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/sched/tpsp.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/topo/cluster.hpp"

using namespace fusesim;
using namespace fusesim::sched;
using model::CommEngine;
using model::ScheduleKind;

namespace {

constexpr TimePs kTg = 49152;
constexpr Bytes kGroupBytes = 1536;

struct Net {
  double bytes_per_s;
  TimePs link_ps, step_ps, base_ps;
  TimePs hop(Bytes b) const { return 2 * link_ps + step_ps + b * static_cast<TimePs>(1e12 / bytes_per_s); }
};
// Compute dominates: a group hop is 2 x 100 + 300 + 1536 x 10 = 15860 ps < T_g.
constexpr Net kComputeBound{1e11, 100, 300, 1000};
// Communication dominates: 500 + 1536 x 40 = 61940 ps > T_g.
constexpr Net kCommBound{2.5e10, 100, 300, 1000};

topo::Cluster cluster(int t, const Net& net) {
  sim_test::ClusterBuilder b;
  std::vector<topo::VertexId> gpus;
  for (int i = 0; i < t; ++i) gpus.push_back(b.gpu());
  const auto sw = b.sw("switch");
  for (auto g : gpus) b.cable(g, sw, net.bytes_per_s, net.link_ps);
  b.c.comm.collective_base_latency_s = {ps_to_seconds(net.base_ps), "test"};
  b.c.comm.sm_step_latency_s = {ps_to_seconds(net.step_ps), "test"};
  b.c.comm.copy_engine_step_latency_s = {ps_to_seconds(net.step_ps), "test"};
  return b.done();
}

// Attention costs 4 b h s_q s_kv d ps (2.5x backward), as in tpsp_timing_test.cpp.
class LayerCostModel final : public model::KernelCostModel {
 public:
  model::KernelCost cost(const model::Kernel& kernel, topo::Dtype dtype, const topo::DeviceModel& device) const override {
    if (const auto* a = std::get_if<model::AttentionKernel>(&kernel)) {
      model::KernelCost c;
      c.flops = 4.0 * static_cast<double>(a->batch * a->heads * a->seq_q * a->seq_kv * a->head_dim);
      if (a->pass == model::Pass::backward) c.flops *= 2.5;
      c.duration_ps = static_cast<TimePs>(std::llround(c.flops));
      return c;
    }
    return base_.cost(kernel, dtype, device);
  }
  double rate(const model::KernelCost& c, const topo::DeviceModel& d, const model::DeviceLoad& l) const override {
    return base_.rate(c, d, l);
  }

 private:
  sim_test::TestCostModel base_;
};

TpspRequest request(int tp, int up, ScheduleKind kind, bool backward) {
  TpspRequest r;
  TpspShape& s = r.shape;
  s.tp = tp;
  s.up = up;
  s.seq = 16 * tp * up;
  s.batch = 1;
  s.hidden = 32;
  s.heads = 2 * tp * up;
  s.kv_heads = 2 * tp * up;
  s.head_dim = 8;
  s.ffn = 16 * tp;
  s.gated = true;
  s.causal = false;  // every query chunk costs the same: ranks stay in step
  r.kind = kind;
  r.up_kind = kind;
  r.schedule.kind = kind;
  r.schedule.slices = 2;
  r.schedule.collective_engine = CommEngine::copy_engine;  // holds no SMs: compute is never slowed
  r.schedule.p2p_engine = CommEngine::copy_engine;
  r.options.backward = backward;
  return r;
}

struct Timed {
  Schedule s;
  sim::SimResult result;
  analysis::StepMetrics metrics;
};
Timed run(const TpspRequest& r, const topo::Cluster& c, const model::KernelCostModel& costs) {
  Timed out{generate_tpsp(r), {}, {}};
  sim::Simulator sim(c, costs);
  out.result = sim.run(out.s.graph);
  out.metrics = analysis::analyze(out.s, out.result, c, costs, topo::Dtype::bf16);
  return out;
}

const sim::TaskTiming& timing(const Timed& t, const std::string& name) {
  for (TaskId id = 0; id < t.s.graph.size(); ++id)
    if (t.s.graph.task(id).name == name) return t.result.tasks[id];
  FAIL("no task " << name);
  return t.result.tasks.front();
}
const analysis::RegionMetrics& region(const Timed& t, int rank, const std::string& name) {
  for (const auto& r : t.metrics.ranks[static_cast<std::size_t>(rank)].regions)
    if (r.name == name) return r;
  FAIL("no region " << name);
  return t.metrics.ranks.front().regions.front();
}

TimePs compute_sum(const Schedule& s, int rank, const topo::Cluster& c, const model::KernelCostModel& costs) {
  TimePs total = 0;
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.rank != rank) continue;
    if (const auto* ct = std::get_if<ComputeTask>(&t.kind)) total += costs.cost(ct->kernel, ct->dtype, c.device(rank)).duration_ps;
  }
  return total;
}

}  // namespace

TEST_CASE("UP baseline: the all-to-all takes base + one hop's latency + (t-1) transfers of n/t", "[sched][ulysses][timing]") {
  // Every member sends its t-1 groups at once (NCCL's grouped send/recv): each pays the hop's latency
  // (2 links + step) together, then its uplink carries t-1 groups and each downlink receives t-1, all
  // sharing alike, so the last lands (t-1) transfer times later. t=4 compute-bound: 1000 + 500 + 3 x
  // 15360 = 47,580 ps (one hop after another: 1000 + 3 x 15860 = 48,580).
  const LayerCostModel costs;
  for (const Net& net : {kComputeBound, kCommBound})
    for (int t : {2, 4, 8}) {
      const topo::Cluster c = cluster(t, net);
      const Timed out = run(request(1, t, ScheduleKind::baseline, false), c, costs);
      const TimePs latency = net.hop(0);
      const TimePs a2a = net.base_ps + latency + (t - 1) * (net.hop(kGroupBytes) - latency);
      INFO("t=" << t << " B=" << net.bytes_per_s << " expected " << a2a);
      for (int r = 0; r < t; ++r) {
        const sim::TaskTiming& x = timing(out, fmt::format("r{}/L0/fwd/qkv+a2a/a2a", r));
        CHECK(x.end_ps - x.start_ps == a2a);
        // Nothing computes beside it: the whole exchange is the region's head.
        CHECK(region(out, r, "L0/fwd/qkv+a2a").head_ps == a2a);
      }
    }
}

TEST_CASE("Fuse-A2A: compute-bound, only the projection's time - comm-bound, T_g + (t-1) hops", "[sched][ulysses][timing]") {
  // Rank u computes group u+1, sends it (one hop) while computing u+2, ..., and its own group last.
  // Every rank does the same at the same time, so the Recv of step i lands when the sender's step-i
  // Send ends. The Sends queue on one copy engine: Send i starts at max(end of GEMM i, end of Send
  // i-1). Attention waits for the own GEMM and the last Recv:
  //   hop <= T_g: Send i ends at i T_g + hop <= (i+1) T_g; the last (i = t-1) ends by t T_g, when the
  //               own GEMM ends: attention starts t T_g after the first GEMM; nothing exposed (tail 0);
  //   hop >  T_g: Send i ends at T_g + i hop; the last at T_g + (t-1) hop: the region's tail is
  //               T_g + (t-1) hop - t T_g = (t-1)(hop - T_g).
  const LayerCostModel costs;
  for (const Net& net : {kComputeBound, kCommBound})
    for (int t : {2, 4, 8}) {
      const topo::Cluster c = cluster(t, net);
      const Timed out = run(request(1, t, ScheduleKind::commfuse, false), c, costs);
      const TimePs hop = net.hop(kGroupBytes);
      const TimePs span = hop <= kTg ? t * kTg : kTg + (t - 1) * hop;
      INFO("t=" << t << " hop=" << hop << " T_g=" << kTg);
      for (int r = 0; r < t; ++r) {
        const std::string p = fmt::format("r{}/L0/fwd/", r);
        const sim::TaskTiming& first = timing(out, fmt::format("{}qkv/g{}/r0", p, (r + 1) % t));
        const sim::TaskTiming& own = timing(out, fmt::format("{}qkv/g{}/r0", p, r));
        const sim::TaskTiming& att = timing(out, fmt::format("{}attention/q{}", p, (r + 1) % t));
        CHECK(own.end_ps - first.start_ps == t * kTg);
        CHECK(att.start_ps - first.start_ps == span);
        const auto& reg = region(out, r, "L0/fwd/qkv+a2a");
        CHECK(reg.head_ps == 0);
        CHECK(reg.tail_ps == (hop <= kTg ? 0 : (t - 1) * (hop - kTg)));
      }
    }
}

TEST_CASE("Fuse-A2A after attention: with free links the own chunk ends the region", "[sched][ulysses][timing]") {
  // Compute-bound net: attention of one query chunk (16 rows x 16 t keys, 2 heads of 8) takes
  // 4 x 2 x 16 x 16t x 8 = 4096 t ps; a chunk's output (16 x 16 x 2 = 512 bytes) hops in
  // 500 + 5120 = 5620 ps < 8192 ps (t = 2). The own chunk comes last and every Recv has landed by its
  // end: the region's tail is 0 and the out-projection starts as the own chunk's attention ends (plus
  // the copy that keeps the head-sharded output for the backward: 2 x 16 x 16 x 2 bytes, 0 flops).
  const LayerCostModel costs;
  for (int t : {2, 4, 8}) {
    const topo::Cluster c = cluster(t, kComputeBound);
    const Timed out = run(request(1, t, ScheduleKind::commfuse, false), c, costs);
    INFO("t=" << t);
    for (int r = 0; r < t; ++r) {
      const auto& reg = region(out, r, "L0/fwd/attn+a2a");
      CHECK(reg.tail_ps == 0);
      CHECK(reg.compute_tasks == t + 1);  // t query chunks and the copy
    }
  }
}

TEST_CASE("TP x UP with free links: a whole layer takes its compute time", "[sched][ulysses][timing]") {
  // Zero-latency, unlimited links: every transfer takes 0 ps, every rank runs the same kernels, so
  // the compute stream never idles and the makespan is one rank's compute sum, for every schedule.
  const LayerCostModel costs;
  const Net free{1e30, 0, 0, 0};
  for (auto [tp, up] : {std::pair{1, 4}, std::pair{2, 2}, std::pair{2, 4}})
    for (auto kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse}) {
      INFO("tp=" << tp << " up=" << up << " " << model::to_string(kind));
      const topo::Cluster c = cluster(tp * up, free);
      const Timed out = run(request(tp, up, kind, true), c, costs);
      for (int r = 0; r < tp * up; ++r) CHECK(compute_sum(out.s, r, c, costs) == compute_sum(out.s, 0, c, costs));
      CHECK(out.result.makespan_ps == compute_sum(out.s, 0, c, costs));
      CHECK(out.metrics.critical().exposed_comm_ps == 0);
    }
}

TEST_CASE("Fuse-A2A backward: the QKV dgrad and wgrad consume dQKV block by block as it lands",
          "[sched][ulysses][timing]") {
  // tp 1, up t, with the backward. After the attention backward (ends at A), rank r sends its dQKV
  // rows of member r+d at ring step d = 1..t-1 (16 rows x W 48 x 2 bytes = kGroupBytes: one hop),
  // the Sends queued on one copy engine, so the block from r-d lands at R_d = A + d hop (R_0 = A: the
  // own group, no transfer). The compute stream runs, per block in ring order (own group, then r-1,
  // r-2, ...), its dgrad (2 x 16 x hidden 32 x W 48 = T_g, adding into dX) and then its weight
  // gradient's column block (hidden 32 x W 48 over 16 rows: T_g), which needs nothing but that block,
  // so it fills the time until the next block lands. The dgrad of block d starts at
  //   s_0 = A, s_d = max(s_{d-1} + 2 T_g, A + d hop), its wgrad at s_d + T_g, ending at s_d + 2 T_g:
  //   hop <= 2 T_g: s_d = A + 2d T_g, all 2t GEMMs back to back, the last ends at A + 2t T_g;
  //   hop >  2 T_g: s_d = A + d hop (each dgrad follows its block's arrival), the last ends at
  //                 A + (t-1) hop + 2 T_g.
  // (Before: the t dgrad GEMMs, then the t wgrad GEMMs, ending at max(t T_g, (t-1) hop + T_g) + t T_g:
  // with kCommBound and t = 8, 875948 ps instead of 16 T_g = 786432 ps.) kComputeBound (hop 15860)
  // and kCommBound (61940) are both below 2 T_g = 98304; kSlow's hop is 500 + 1536 x 80 = 123380.
  // With tp 1 the GEMMs belong to the exchange's region: its compute is the attention backward and
  // 2t block GEMMs, and nothing of the exchange is left after them (tail 0).
  constexpr Net kSlow{1.25e10, 100, 300, 1000};
  const LayerCostModel costs;
  for (const Net& net : {kComputeBound, kCommBound, kSlow})
    for (int t : {2, 4, 8}) {
      const topo::Cluster c = cluster(t, net);
      const Timed out = run(request(1, t, ScheduleKind::commfuse, true), c, costs);
      const TimePs hop = net.hop(kGroupBytes);
      auto s = [&](int d) { return hop <= 2 * kTg ? 2 * d * kTg : d * hop; };  // s_d - A
      INFO("t=" << t << " hop=" << hop << " T_g=" << kTg);
      for (int r = 0; r < t; ++r) {
        const std::string p = fmt::format("r{}/L0/bwd/", r);
        const TimePs a = timing(out, p + "attention_bwd").end_ps;
        for (int d = 0; d < t; ++d) {
          const int member = (r - d + t) % t;
          INFO("block " << d << " (member " << member << ")");
          CHECK(timing(out, fmt::format("{}qkv_dgrad/g{}", p, member)).start_ps - a == s(d));
          CHECK(timing(out, fmt::format("{}qkv_wgrad/g{}", p, member)).start_ps - a == s(d) + kTg);
        }
        const TimePs end = hop <= 2 * kTg ? 2 * t * kTg : (t - 1) * hop + 2 * kTg;
        CHECK(timing(out, fmt::format("{}qkv_wgrad/g{}", p, (r + 1) % t)).end_ps - a == end);
        const auto& reg = region(out, r, "L0/bwd/attn_bwd+a2a");
        CHECK(reg.compute_tasks == 1 + 2 * t);
        CHECK(reg.tail_ps == 0);
      }
    }
}
