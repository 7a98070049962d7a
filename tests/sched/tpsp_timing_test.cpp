// Generated TPSP schedules run on the real simulator (sim/engine.hpp) on hand-built clusters, with
// expected makespans and exposed communication derived by hand from the engine's rules
// (docs/engine.md) and the design note's schedules.
//
// Common set-up. The test cost model (tests/sim/sim_test_util.hpp) makes a GEMM last 2 m n k ps and an
// element-wise kernel its flops in ps; nothing contends (copy-engine transfers hold no SMs, the HBM
// traffic factor is 0, and the collectives of the schedules with overlap run on copy engines too), so
// every duration is exact. Ranks hang off one switch: a hop crosses two links, so a transfer of b
// bytes takes alpha + b/B with alpha = 2 x link latency + engine step latency and B the link
// bandwidth; a ring collective of buffer n on t ranks takes base + (t-1)(alpha + n/(tB)).
// Pieces: AG+GEMM and GEMM+RS alone, sequence of 16 t rows (batch 1), chunk n = 16 rows, bf16:
//   AG+GEMM: K = 32, N = 16 t (16 columns per rank). One chunk: T_c = 2 x 16 x 16 x 32 = 16384 ps;
//            the chunk moved is 16 x 32 x 2 = 1024 bytes.
//   GEMM+RS: K = 32 t (32 per rank), N = 32. One chunk's partial: T_c = 2 x 16 x 32 x 32 = 32768 ps;
//            the chunk moved is 16 x 32 x 2 = 1024 bytes; the Fuse-RS add has n x N = 512 flops:
//            T_add = 512 ps.
#include <catch2/catch.hpp>

#include <numeric>

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

constexpr TimePs kAgTc = 16384, kRsTc = 32768, kAdd = 512;
constexpr Bytes kChunkBytes = 1024;

struct Net {
  double bytes_per_s;
  TimePs link_ps, step_ps, base_ps;
  TimePs alpha() const { return 2 * link_ps + step_ps; }
  // b / B in ps; exact for the bandwidths used here (1e12 / B is an integer).
  TimePs drain(Bytes b) const { return b * static_cast<TimePs>(1e12 / bytes_per_s); }
  TimePs hop(Bytes b) const { return alpha() + drain(b); }
  TimePs collective(int t, Bytes n) const { return base_ps + (t - 1) * hop(n / t); }
};
// Compute dominates: a chunk hop is 2 x 100 + 300 + 1024 x 10 = 10740 ps < T_c of both pieces.
constexpr Net kComputeBound{1e11, 100, 300, 1000};
// Communication dominates: a hop is 500 + 1024 x 40 = 41460 ps > T_c of both pieces.
constexpr Net kCommBound{2.5e10, 100, 300, 1000};

topo::Cluster cluster(int t, double bytes_per_s, TimePs link_ps, TimePs step_ps, TimePs base_ps) {
  sim_test::ClusterBuilder b;
  std::vector<topo::VertexId> gpus;
  for (int i = 0; i < t; ++i) gpus.push_back(b.gpu());
  const auto sw = b.sw("switch");
  for (auto g : gpus) b.cable(g, sw, bytes_per_s, link_ps);
  b.c.comm.collective_base_latency_s = {ps_to_seconds(base_ps), "test"};
  b.c.comm.sm_step_latency_s = {ps_to_seconds(step_ps), "test"};
  b.c.comm.copy_engine_step_latency_s = {ps_to_seconds(step_ps), "test"};
  return b.done();
}
topo::Cluster cluster(int t, const Net& net) {
  return cluster(t, net.bytes_per_s, net.link_ps, net.step_ps, net.base_ps);
}
// Free communication: no latency anywhere and a bandwidth that drains any of these buffers in far
// less than the engine's rounding slack of 1e-6 ps, so every transfer takes 0 ps.
topo::Cluster free_cluster(int t) { return cluster(t, 1e30, 0, 0, 0); }

TpspRequest piece(TpspPiece p, int t, ScheduleKind kind, int k = 1, CommEngine collective = CommEngine::copy_engine) {
  TpspRequest r;
  r.shape.tp = t;
  r.shape.seq = 16 * t;
  r.shape.batch = 1;
  r.kind = kind;
  r.schedule.kind = kind;
  r.schedule.slices = k;
  r.schedule.collective_engine = collective;
  r.schedule.p2p_engine = CommEngine::copy_engine;
  r.piece = p;
  r.piece_k = p == TpspPiece::ag_gemm ? 32 : 32 * t;
  r.piece_n = p == TpspPiece::ag_gemm ? 16 * t : 32;
  return r;
}

// The sim tests' model, plus attention (4 b h s_q s_kv d ps forward, 2.5x that backward, counted on
// every key: only non-causal layers are timed here), for whole layers.
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

struct Timed {
  sim::SimResult result;
  analysis::StepMetrics metrics;
};
Timed run(const Schedule& s, const topo::Cluster& c, const model::KernelCostModel& costs) {
  sim::Simulator sim(c, costs);
  Timed out;
  out.result = sim.run(s.graph);
  out.metrics = analysis::analyze(s, out.result, c, costs, topo::Dtype::bf16);
  return out;
}

// Sum of the alone-on-the-device durations of the compute tasks of one rank.
TimePs compute_sum(const Schedule& s, int rank, const topo::Cluster& c, const model::KernelCostModel& costs) {
  TimePs total = 0;
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.rank != rank) continue;
    if (const auto* ct = std::get_if<ComputeTask>(&t.kind)) total += costs.cost(ct->kernel, ct->dtype, c.device(rank)).duration_ps;
  }
  return total;
}

std::string name(ScheduleKind kind, int t, int k) {
  return model::to_string(kind) + " t=" + std::to_string(t) + " k=" + std::to_string(k);
}

}  // namespace

TEST_CASE("free communication: every schedule takes exactly the compute time", "[sched][timing]") {
  const sim_test::TestCostModel costs;
  for (int t : {2, 3, 4, 8}) {
    const topo::Cluster c = free_cluster(t);
    for (auto kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse})
      for (int k : {1, 2, 4}) {
        if (kind != ScheduleKind::slice && k > 1) continue;
        INFO(name(kind, t, k));
        // AG+GEMM: the t chunks' GEMMs back to back whatever the cut (slices of 16/k rows of every
        // chunk sum to the same 2 m n k): t x 16384 ps.
        const Timed ag = run(generate_tpsp(piece(TpspPiece::ag_gemm, t, kind, k)), c, costs);
        CHECK(ag.result.makespan_ps == t * kAgTc);
        CHECK(ag.metrics.critical().exposed_comm_ps == 0);
        // GEMM+RS: t x 32768 ps, plus, for CommFuse, the t-1 reduction adds of 512 ps that replace
        // the collective's own arithmetic.
        const Timed rs = run(generate_tpsp(piece(TpspPiece::gemm_rs, t, kind, k)), c, costs);
        CHECK(rs.result.makespan_ps == t * kRsTc + (kind == ScheduleKind::commfuse ? (t - 1) * kAdd : 0));
        CHECK(rs.metrics.critical().exposed_comm_ps == 0);
      }
  }
}

TEST_CASE("free communication: a whole layer, forward and backward, takes its compute time", "[sched][timing]") {
  // Every rank runs the same kernels (non-causal attention: the query chunks of query-split cost the
  // same), so with free transfers nothing ever waits on another rank and the one compute stream never
  // idles: the makespan is the sum of the rank's compute durations.
  const LayerCostModel costs;
  for (int t : {2, 4}) {
    const topo::Cluster c = free_cluster(t);
    for (auto kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse})
      for (bool qs : {false, true}) {
        if (qs && kind != ScheduleKind::commfuse) continue;
        TpspRequest r;
        r.shape = TpspShape{t, 1, 1, 8 * t, 2, 32, 2 * t, t, 8, 16 * t, true, false, 1, topo::Dtype::bf16, false};
        r.kind = kind;
        r.schedule.slices = 4;
        r.schedule.query_split_attention = qs;
        const Schedule s = generate_tpsp(r);
        const Timed out = run(s, c, costs);
        INFO(name(kind, t, 4) << (qs ? " query-split" : ""));
        for (int rank = 0; rank < t; ++rank) CHECK(compute_sum(s, rank, c, costs) == compute_sum(s, 0, c, costs));
        CHECK(out.result.makespan_ps == compute_sum(s, 0, c, costs));
        CHECK(out.metrics.critical().compute_ps == out.result.makespan_ps);
        CHECK(out.metrics.critical().exposed_comm_ps == 0);
      }
  }
}

TEST_CASE("baseline: compute plus collective time, exactly", "[sched][timing]") {
  // Nothing overlaps: the AG (GEMM) waits for the whole collective (GEMM), so the makespan is
  // T_coll + t T_c with T_coll = base + (t-1)(alpha + n/(tB)), n = t x 1024 bytes (the whole gathered
  // or reduced buffer). Compute-bound net: 1000 + (t-1) x 10740; communication-bound: 1000 + (t-1) x
  // 41460. The SM-kernel collective holds SMs, but only while no compute runs: same time.
  // All of it is exposed: AG is the region's head, RS its tail.
  const sim_test::TestCostModel costs;
  for (const Net& net : {kComputeBound, kCommBound})
    for (int t : {2, 3, 4, 8})
      for (auto engine : {CommEngine::sm_kernel, CommEngine::copy_engine}) {
        const topo::Cluster c = cluster(t, net);
        const TimePs coll = net.collective(t, t * kChunkBytes);
        INFO("t=" << t << " B=" << net.bytes_per_s << " " << model::to_string(engine) << " T_coll=" << coll);
        const Timed ag = run(generate_tpsp(piece(TpspPiece::ag_gemm, t, ScheduleKind::baseline, 1, engine)), c, costs);
        CHECK(ag.result.makespan_ps == coll + t * kAgTc);
        CHECK(ag.metrics.critical().exposed_comm_ps == coll);
        REQUIRE(ag.metrics.critical().regions.size() == 1);
        CHECK(ag.metrics.critical().regions[0].head_ps == coll);
        CHECK(ag.metrics.critical().regions[0].tail_ps == 0);
        const Timed rs = run(generate_tpsp(piece(TpspPiece::gemm_rs, t, ScheduleKind::baseline, 1, engine)), c, costs);
        CHECK(rs.result.makespan_ps == t * kRsTc + coll);
        CHECK(rs.metrics.critical().exposed_comm_ps == coll);
        CHECK(rs.metrics.critical().regions[0].head_ps == 0);
        CHECK(rs.metrics.critical().regions[0].tail_ps == coll);
      }
}

TEST_CASE("compute-bound: CommFuse hides every hop, slice-overlap leaves one slice's collective", "[sched][timing]") {
  // T_h = 10740 ps < T_c.
  // Fuse-AG, rank r: the step-i GEMM waits for the receive of step i-1, which lands at i T_h (hops
  // back to back on the copy engine, every rank in step) <= i T_c: the GEMMs run back to back,
  // makespan t T_c = sum_{i<t-1} max(T_c, T_h) + T_c. Communication [0, (t-1) T_h) lies under the
  // compute [0, t T_c): exposed 0 (<= one hop, the bound of the issue).
  // Fuse-RS: step i's add waits for its GEMM and for the running sum sent at the end of r-1's add
  // i-1, landing T_h later; the next GEMM follows the add on the compute stream. With E_i the end of
  // add i (E_0 = T_c): E_i = E_{i-1} + max(T_c, T_h) + T_add, so the makespan is
  // T_c + (t-1)(T_c + T_add), the rank's whole compute; each hop [E_i, E_i + T_h) is under GEMM i+1.
  // Slice GEMM+RS, k slices: GEMM slices of T_g = t T_c / k back to back; RS j (base + (t-1)(alpha +
  // 1024/k x 10 ps)) starts at the end of GEMM j and ends before GEMM j+1 does (T_rs <= T_g for
  // every t, k here: at most 22420 <= 65536 for k = 4, 76180 <= 262144 for k = 1), so only the last
  // RS is exposed: tail = exposed = T_rs, makespan t T_c + T_rs.
  // Slice AG+GEMM: AG slices back to back from 0 (nothing to wait for), GEMM j after AG j: head =
  // exposed = T_ag (the first slice), makespan T_ag + t T_c when T_ag <= T_g (22420 <= 32768 at
  // worst, t = 8, k = 4).
  const sim_test::TestCostModel costs;
  const Net& net = kComputeBound;
  const TimePs hop = net.hop(kChunkBytes);
  REQUIRE(hop == 10740);
  for (int t : {2, 3, 4, 8}) {
    const topo::Cluster c = cluster(t, net);
    INFO("t=" << t);
    const Timed ag = run(generate_tpsp(piece(TpspPiece::ag_gemm, t, ScheduleKind::commfuse)), c, costs);
    CHECK(ag.result.makespan_ps == (t - 1) * std::max(kAgTc, hop) + kAgTc);
    CHECK(ag.metrics.critical().exposed_comm_ps == 0);
    CHECK(ag.metrics.critical().exposed_comm_ps <= hop);
    CHECK(ag.metrics.critical().comm_ps == (t - 1) * hop);
    CHECK(ag.metrics.critical().regions.at(0).head_ps == 0);
    CHECK(ag.metrics.critical().regions.at(0).tail_ps == 0);
    const Timed rs = run(generate_tpsp(piece(TpspPiece::gemm_rs, t, ScheduleKind::commfuse)), c, costs);
    CHECK(rs.result.makespan_ps == kRsTc + (t - 1) * (std::max(kRsTc, hop) + kAdd));
    CHECK(rs.metrics.critical().exposed_comm_ps == 0);
    CHECK(rs.metrics.critical().regions.at(0).tail_ps == 0);
    for (int k : {1, 2, 4}) {
      INFO("k=" << k);
      const TimePs t_rs = net.collective(t, t * kChunkBytes / k);
      const TimePs t_ag = net.collective(t, t * kChunkBytes / k);
      REQUIRE(t_rs <= t * kRsTc / k);
      REQUIRE(t_ag <= t * kAgTc / k);
      const Timed srs = run(generate_tpsp(piece(TpspPiece::gemm_rs, t, ScheduleKind::slice, k)), c, costs);
      CHECK(srs.result.makespan_ps == t * kRsTc + t_rs);
      CHECK(srs.metrics.critical().regions.at(0).tail_ps == t_rs);
      CHECK(srs.metrics.critical().exposed_comm_ps == t_rs);
      const Timed sag = run(generate_tpsp(piece(TpspPiece::ag_gemm, t, ScheduleKind::slice, k)), c, costs);
      CHECK(sag.result.makespan_ps == t_ag + t * kAgTc);
      CHECK(sag.metrics.critical().regions.at(0).head_ps == t_ag);
      CHECK(sag.metrics.critical().exposed_comm_ps == t_ag);
    }
  }
}

namespace {

// The test model with a reduction add that costs nothing (the Fuse-RS add fused into the GEMM's
// epilogue, say): isolates the per-hop add from the hop itself.
class FreeAddCostModel final : public model::KernelCostModel {
 public:
  model::KernelCost cost(const model::Kernel& kernel, topo::Dtype dtype, const topo::DeviceModel& device) const override {
    model::KernelCost c = base_.cost(kernel, dtype, device);
    if (const auto* e = std::get_if<model::ElementwiseKernel>(&kernel); e != nullptr && e->op == "add") c.duration_ps = 0;
    return c;
  }
  double rate(const model::KernelCost& c, const topo::DeviceModel& d, const model::DeviceLoad& l) const override {
    return base_.rate(c, d, l);
  }

 private:
  sim_test::TestCostModel base_;
};

}  // namespace

TEST_CASE("communication-bound: CommFuse meets the hop-time bound of the design note", "[sched][timing]") {
  // T_h = 41460 ps > T_c.
  // Fuse-AG: hops back to back, receive i lands at (i+1) T_h; GEMM i starts at i T_h (its GEMM
  // predecessor ended at (i-1) T_h + T_c < i T_h) and the last one ends at
  // (t-1) T_h + T_c = sum_{i<t-1} max(T_c, T_h) + T_c, the design note's bound, exactly.
  // Exposed: communication covers [0, (t-1) T_h), compute covers T_c of each of its t-1 hops:
  // (t-1)(T_h - T_c).
  // Fuse-RS: E_i = E_{i-1} + T_h + T_add (the add waits for the running sum, which can only leave
  // after the previous rank's add), so the fused op takes T_c + (t-1)(T_h + T_add). The design note
  // writes T_c + sum_{i=1}^{t-1} max(T_c, T_h) + T_add: it counts one add where the ring of
  // separate add kernels puts one on every hop's path, (t-2) T_add more. With a free add (T_add = 0)
  // both agree exactly: T_c + (t-1) T_h.
  const sim_test::TestCostModel costs;
  const FreeAddCostModel free_add;
  const Net& net = kCommBound;
  const TimePs hop = net.hop(kChunkBytes);
  REQUIRE(hop == 41460);
  for (int t : {2, 3, 4, 8}) {
    const topo::Cluster c = cluster(t, net);
    INFO("t=" << t);
    const Timed ag = run(generate_tpsp(piece(TpspPiece::ag_gemm, t, ScheduleKind::commfuse)), c, costs);
    CHECK(ag.result.makespan_ps == (t - 1) * std::max(kAgTc, hop) + kAgTc);
    CHECK(ag.metrics.critical().exposed_comm_ps == (t - 1) * (hop - kAgTc));
    const Timed rs = run(generate_tpsp(piece(TpspPiece::gemm_rs, t, ScheduleKind::commfuse)), c, costs);
    CHECK(rs.result.makespan_ps == kRsTc + (t - 1) * (std::max(kRsTc, hop) + kAdd));
    const Timed rs0 = run(generate_tpsp(piece(TpspPiece::gemm_rs, t, ScheduleKind::commfuse)), c, free_add);
    CHECK(rs0.result.makespan_ps == kRsTc + (t - 1) * std::max(kRsTc, hop) + 0);
    // Either way far below the baseline's t T_c + T_coll.
    CHECK(rs.result.makespan_ps < t * kRsTc + net.collective(t, t * kChunkBytes) + (t - 1) * kAdd);
  }
}

TEST_CASE("Llama-3-70B on a DGX H100: exposed communication CommFuse < slice < baseline", "[sched][timing]") {
  // The shipped cluster and workload with the roofline model: one layer forward and backward at TP 8,
  // sequence 8192. CommFuse hides the hops under the chunk GEMMs where they are shorter (FC1, FC2,
  // the wgrads), slice-overlap leaves the first AG and last RS slice of every region exposed, the
  // baseline all of every collective. (At the time of writing: exposed 3.58 ms baseline, 1.80 ms
  // slice, 0.62 ms CommFuse. CommFuse does not hide everything: the forward AG+QKV region, for one,
  // takes 7 hops of 16 MiB, longer than its 8 chunk GEMMs of N = 1280.)
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100");
  const model::Workload w = model::load_workload("llama-3-70b");
  const model::RooflineCostModel costs;
  std::map<ScheduleKind, TimePs> exposed, step;
  for (auto kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse}) {
    const Schedule s = generate(w, "llama-3-70b", c, kind, GenerateOptions{Scope::layer, true, true, std::nullopt});
    const Timed out = run(s, c, costs);
    exposed[kind] = out.metrics.critical().exposed_comm_ps;
    step[kind] = out.result.makespan_ps;
  }
  INFO("exposed baseline " << exposed[ScheduleKind::baseline] << " slice " << exposed[ScheduleKind::slice]
                           << " commfuse " << exposed[ScheduleKind::commfuse] << " ps; step "
                           << step[ScheduleKind::baseline] << " " << step[ScheduleKind::slice] << " "
                           << step[ScheduleKind::commfuse]);
  CHECK(exposed[ScheduleKind::commfuse] < exposed[ScheduleKind::slice]);
  CHECK(exposed[ScheduleKind::slice] < exposed[ScheduleKind::baseline]);
  CHECK(step[ScheduleKind::commfuse] < step[ScheduleKind::baseline]);
}

TEST_CASE("baseline backward as Megatron-LM runs it: the re-gather beside the dgrad, its RS beside the wgrad",
          "[sched][timing]") {
  // Megatron without --tp-comm-overlap (LinearWithGradAccumulationAndAsyncCommunication.backward,
  // sequence parallel) launches the all-gather of the saved input before the dgrad GEMM and the dgrad's
  // reduce-scatter before the wgrad GEMM, both asynchronously. So on every rank, for the column-parallel
  // QKV and FC1: AG starts with the dgrad (both wait only for the gradient of their output), the RS
  // starts when the dgrad ends, and the wgrad starts at max(dgrad end, AG end). Before, the baseline
  // issued the AG after the RS had finished: AG start == RS end.
  const LayerCostModel costs;
  const int t = 2;
  const topo::Cluster c = cluster(t, kCommBound);
  TpspRequest r;
  r.shape = TpspShape{t, 1, 1, 8 * t, 2, 32, 2 * t, t, 8, 16 * t, true, false, 1, topo::Dtype::bf16, false};
  r.kind = ScheduleKind::baseline;
  const Schedule s = generate_tpsp(r);
  const Timed out = run(s, c, costs);
  auto find = [&](const std::string& name) {
    for (TaskId id = 0; id < s.graph.size(); ++id)
      if (s.graph.task(id).name == name) return id;
    FAIL("no task " << name);
    return TaskId{0};
  };
  for (int rank = 0; rank < t; ++rank)
    for (const std::string op : {"fc1", "qkv"}) {
      INFO("rank " << rank << " " << op);
      const std::string p = "r" + std::to_string(rank) + "/L0/bwd/";
      const auto& dgrad = out.result.tasks[find(p + op + "_dgrad")];
      const auto& rs = out.result.tasks[find(p + op + "_dgrad+rs/rs")];
      const TaskId ag_id = find(p + "ag+" + op + "_wgrad/ag");
      const auto& ag = out.result.tasks[ag_id];
      const auto& wgrad = out.result.tasks[find(p + op + "_wgrad")];
      CHECK(s.graph.task(ag_id).stream.index == 1);  // a second comm stream: not queued behind the RS
      CHECK(ag.start_ps == dgrad.start_ps);
      CHECK(rs.start_ps == dgrad.end_ps);
      CHECK(wgrad.start_ps == std::max(dgrad.end_ps, ag.end_ps));
      CHECK(ag.start_ps < rs.end_ps);  // the two no longer run one after the other
    }
}
