// DP synchronisation on the real simulator (sim/engine.hpp), times derived by hand from the engine's
// rules (docs/engine.md): a transfer takes route latency + engine step latency, then bytes / the
// smallest bandwidth of its route, links shared max-min fairly; a collective adds its base latency
// once; a ring all-reduce of n bytes on t ranks takes 2(t-1) steps of n/t, a reduce-scatter t-1.
// The test cost model (tests/sim/sim_test_util.hpp): a GEMM lasts 2 m n k ps, an element-wise kernel
// its flops in ps; base latency 5 us, SM step 1 us, copy-engine step 2 us; no HBM contention.
#include <catch2/catch.hpp>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "../sim/sim_test_util.hpp"
#include "fusesim/analysis/metrics.hpp"
#include "fusesim/sched/dp.hpp"
#include "fusesim/sim/engine.hpp"

using namespace fusesim;
using namespace fusesim::sched;
using model::DpSharding;
using model::ScheduleKind;

namespace {

// Two "nodes" of one GPU each: gpu - nic (PCIe-like 1e12 B/s, 100 ps) - leaf switch (the NIC link,
// 5e10 B/s = 400 Gb/s, 1000 ps). A DP route gpu0 -> gpu1 crosses four links: latency 2200 ps,
// bottleneck the NIC link.
constexpr double kNicBytesPerS = 5e10;
constexpr TimePs kRoutePs = 100 + 1000 + 1000 + 100;
topo::Cluster two_nodes() {
  sim_test::ClusterBuilder b;
  const auto g0 = b.gpu(), g1 = b.gpu();
  const auto n0 = b.sw("nic0"), n1 = b.sw("nic1"), leaf = b.sw("leaf");
  b.cable(g0, n0, 1e12, 100);
  b.cable(g1, n1, 1e12, 100);
  b.cable(n0, leaf, kNicBytesPerS, 1000);
  b.cable(n1, leaf, kNicBytesPerS, 1000);
  return b.done();
}

TaskId gemm(TaskGraph& g, int rank, const std::string& name, std::int64_t m, std::int64_t n, std::int64_t k,
            const std::vector<TaskId>& deps = {}, int region = -1) {
  const std::string full_name = fmt::format("r{}/{}", rank, name);
  Task t;
  t.name = full_name;
  t.rank = rank;
  t.kind = ComputeTask{model::GemmKernel{m, n, k, 1}, topo::Dtype::bf16, false};
  t.labels.region = region;
  const TaskId id = g.add(std::move(t));
  for (TaskId d : deps) g.depend(d, id);
  return id;
}

DpConfig config(ScheduleKind kind, DpSharding sharding) {
  DpConfig c;
  c.dp = 2;
  c.members = 1;
  c.kind = kind;
  c.sharding = sharding;
  c.schedule.collective_engine = model::CommEngine::sm_kernel;
  c.schedule.p2p_engine = model::CommEngine::copy_engine;
  // Gradients reduced in bf16 ($.training.grad_reduce_dtype "bf16"), 2 bytes per element: the
  // derivations below count 1e6 bytes per 5e5-element gradient. The fp32 default has its own test.
  c.grad_dtype = topo::Dtype::bf16;
  return c;
}

// One gradient of 1000 x 500 bf16 = 1e6 bytes per rank, produced by a GEMM of 1000 x 500 x 80
// (T = 2 x 1000 x 500 x 80 = 8e7 ps), synchronised over the two nodes.
constexpr std::int64_t kRows = 1000, kCols = 500, kK = 80;
constexpr TimePs kGemmPs = 2 * kRows * kCols * kK;

struct Run {
  TaskGraph graph{2};
  sim::SimResult result;
  TimePs makespan = 0;
};

Run run(ScheduleKind kind, DpSharding sharding, topo::Dtype grad_dtype = topo::Dtype::bf16) {
  Run r;
  const topo::Cluster c = two_nodes();
  DpConfig cfg = config(kind, sharding);
  cfg.grad_dtype = grad_dtype;
  DpSync dp(r.graph, nullptr, cfg);
  for (int rank = 0; rank < 2; ++rank) {
    const DpGradient g{"L0/bwd/w", 0, kRows, kCols, -1};
    std::vector<TaskId> last;
    if (dp.fused()) {
      // The GEMM cut into two row pieces of 500 rows: 4e7 ps each.
      last = {dp.fused_gradient(
          rank, g,
          [&](std::int64_t row0, std::int64_t rows, int step, int region, const std::vector<TaskId>& deps) {
            return gemm(r.graph, rank, fmt::format("w/p{}/{}", step, row0), rows, kCols, kK, deps, region);
          },
          std::vector<TaskId>{})};
    } else {
      last = {gemm(r.graph, rank, "w", kRows, kCols, kK)};
      dp.gradient(rank, g, last[0]);
    }
    dp.finish_backward(rank, last);
  }
  validate(r.graph);
  const sim_test::TestCostModel costs;
  sim::Simulator s(c, costs);
  r.result = s.run(r.graph);
  for (const auto& t : r.result.tasks) r.makespan = std::max(r.makespan, t.end_ps);
  return r;
}

}  // namespace

TEST_CASE("DP all-reduce after the backward crosses the NICs: base + 2 steps of n/2 at the NIC rate", "[dp][timing]") {
  // GEMM 8e7 ps, then the all-reduce of n = 1e6 bytes on t = 2: base 5e6 + 2 x (SM step 1e6 + route
  // 2200 + (n/2) / 5e10 B/s = 5e5 B / 0.05 B/ps = 1e7 ps) = 5e6 + 2 x 11,002,200.
  const Run r = run(ScheduleKind::baseline, DpSharding::ddp);
  CHECK(r.makespan == kGemmPs + 5'000'000 + 2 * (1'000'000 + kRoutePs + 10'000'000));
}

TEST_CASE("ZeRO reduce-scatter after the backward: one step of n/2", "[dp][timing]") {
  const Run r = run(ScheduleKind::baseline, DpSharding::zero1);
  CHECK(r.makespan == kGemmPs + 5'000'000 + (1'000'000 + kRoutePs + 10'000'000));
}

TEST_CASE("Gradients reduced in fp32 (the bf16 default) carry twice the bytes of bf16 ones", "[dp][timing]") {
  // As the two tests above with 4-byte gradients, n = 2e6 bytes: each step moves n/2 = 1e6 B over the
  // NIC link at 0.05 B/ps = 2e7 ps. All-reduce: base 5e6 + 2 x (1e6 + 2200 + 2e7); reduce-scatter: one
  // such step.
  CHECK(run(ScheduleKind::baseline, DpSharding::ddp, topo::Dtype::fp32).makespan ==
        kGemmPs + 5'000'000 + 2 * (1'000'000 + kRoutePs + 20'000'000));
  CHECK(run(ScheduleKind::baseline, DpSharding::zero1, topo::Dtype::fp32).makespan ==
        kGemmPs + 5'000'000 + (1'000'000 + kRoutePs + 20'000'000));
  // Megatron-LM's and torchtitan's rule: fp32 unless the training type is fp16.
  CHECK(model::default_grad_reduce_dtype(topo::Dtype::bf16) == topo::Dtype::fp32);
  CHECK(model::default_grad_reduce_dtype(topo::Dtype::fp8) == topo::Dtype::fp32);
  CHECK(model::default_grad_reduce_dtype(topo::Dtype::fp16) == topo::Dtype::fp16);
}

TEST_CASE("CommFuse DP hides the reduce-scatter when the wgrad piece outlasts a hop", "[dp][timing]") {
  // Rank r: step 0 computes part (r - 1) mod 2 (4e7 ps) and sends it (copy engine: 2e6 + 2200 +
  // 1e7 = 12,002,200 ps, landing at 52,002,200); step 1 computes its own part [4e7, 8e7], the
  // received running sum is there already, the add (250,000 elements = 250,000 ps) ends at
  // 80,250,000. ZeRO keeps the reduced own part: nothing after the add, tail 0.
  const Run r = run(ScheduleKind::commfuse, DpSharding::zero1);
  const TimePs end = kGemmPs + 250'000;
  CHECK(r.makespan == end);
  const auto m = analysis::analyze({r.graph, r.result, two_nodes(), sim_test::TestCostModel{}, topo::Dtype::bf16,
                                    0, 2, "commfuse", "dp", "layer"});
  REQUIRE(m.critical().regions.size() == 1);
  CHECK(m.critical().regions[0].tail_ps == 0);
  CHECK(m.critical().regions[0].head_ps == 0);
  // DDP adds the all-gather ring: one more copy-engine hop of the reduced part after the add.
  const Run ddp = run(ScheduleKind::commfuse, DpSharding::ddp);
  CHECK(ddp.makespan == end + 2'000'000 + kRoutePs + 10'000'000);
}

TEST_CASE("CommFuse DP: the backward goes on while a slow hop holds back a running-sum add", "[dp][timing]") {
  // The gradient's last step is now a GEMM of 1000 x 500 x 8 (8e6 ps: pieces of 4e6), and the
  // backward has one more GEMM after it, 1000 x 500 x 40 = 4e7 ps, following the last piece.
  // Rank r: piece 0 [0, 4e6], its send lands 4e6 + 12,002,200 = 16,002,200; piece 1 [4e6, 8e6]; the
  // next GEMM starts at 8e6 on the compute stream. The add (250,000 ps alone) waits for the receive
  // on compute stream 1, from 16,002,200, beside the GEMM: the two split the device, so the add
  // takes 500,000 ps (ends 16,502,200) and the GEMM loses 250,000 ps: it ends 8e6 + 4e7 + 250,000 =
  // 48,250,000. With the add on the backward's own stream the GEMM would wait for it: 56,252,200.
  TaskGraph graph(2);
  const topo::Cluster c = two_nodes();
  DpSync dp(graph, nullptr, config(ScheduleKind::commfuse, DpSharding::zero1));
  TaskId next_gemm[2] = {0, 0};
  TaskId add[2] = {0, 0};
  for (int rank = 0; rank < 2; ++rank) {
    const DpGradient g{"L0/bwd/w", 0, kRows, kCols, -1};
    const TaskId last_piece = dp.fused_gradient(
        rank, g,
        [&](std::int64_t row0, std::int64_t rows, int step, int region, const std::vector<TaskId>& deps) {
          return gemm(graph, rank, fmt::format("w/p{}/{}", step, row0), rows, kCols, 8, deps, region);
        },
        {});
    next_gemm[rank] = gemm(graph, rank, "next", kRows, kCols, 40, {last_piece});
    dp.finish_backward(rank, {next_gemm[rank]});
    for (TaskId id = 0; id < graph.size(); ++id)
      if (graph.task(id).rank == rank && graph.task(id).labels.op == "dp_add") add[rank] = id;
  }
  validate(graph);
  const sim_test::TestCostModel costs;
  const sim::SimResult res = sim::Simulator(c, costs).run(graph);
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(graph.task(add[rank]).stream == StreamRef{StreamKind::compute, 1});
    CHECK(res.tasks[next_gemm[rank]].start_ps == 8'000'000);
    CHECK(res.tasks[add[rank]].start_ps == 16'002'200);
    CHECK(res.tasks[add[rank]].end_ps == 16'502'200);
    CHECK(res.tasks[next_gemm[rank]].end_ps == 48'250'000);
  }
}

TEST_CASE("CommFuse DP computes thin ring parts in one GEMM before the ring", "[dp][timing]") {
  // 1000 rows over dp 2: parts of 500 rows. With dp_fuse_min_rows 501 they are too thin: each rank
  // computes its whole last step (8e7 ps) first, then sends part (r - 1) mod 2 (lands at 8e7 +
  // 12,002,200 = 92,002,200) and adds the received running sum to its own part: 250,000 ps, ends
  // 92,252,200. With 500 (parts not thinner than the minimum) the parts are fused as in the test
  // above: 80,250,000.
  for (const auto& [min_rows, pieces_per_rank, end] :
       {std::tuple{std::int64_t{501}, 1, TimePs{92'252'200}}, std::tuple{std::int64_t{500}, 2, TimePs{80'250'000}}}) {
    TaskGraph graph(2);
    DpConfig cfg = config(ScheduleKind::commfuse, DpSharding::zero1);
    cfg.schedule.dp_fuse_min_rows = min_rows;
    DpSync dp(graph, nullptr, cfg);
    std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>> pieces;  // rank -> (row0, rows)
    for (int rank = 0; rank < 2; ++rank) {
      const TaskId last = dp.fused_gradient(
          rank, DpGradient{"L0/bwd/w", 0, kRows, kCols, -1},
          [&](std::int64_t row0, std::int64_t rows, int step, int region, const std::vector<TaskId>& deps) {
            pieces[rank].emplace_back(row0, rows);
            return gemm(graph, rank, fmt::format("w/p{}", step), rows, kCols, kK, deps, region);
          },
          {});
      dp.finish_backward(rank, {last});
    }
    for (int rank = 0; rank < 2; ++rank) CHECK(static_cast<int>(pieces[rank].size()) == pieces_per_rank);
    if (pieces_per_rank == 1) CHECK(pieces[0] == std::vector<std::pair<std::int64_t, std::int64_t>>{{0, kRows}});
    validate(graph);
    const sim_test::TestCostModel costs;
    const sim::SimResult res = sim::Simulator(two_nodes(), costs).run(graph);
    CHECK(res.makespan_ps == end);
  }
}

TEST_CASE("DP traffic on a shared link slows a TP transfer by the max-min share", "[dp][timing][contention]") {
  // Four GPUs on one switch (1e11 B/s, 500,000 ps per link): TP pair {0, 1}, DP group {0, 2}. A TP
  // copy-engine send 0 -> 1 of 1e7 bytes starts draining at 2 x 500,000 + 2e6 = 3e6 ps; alone it takes
  // 1e7 / 0.1 B/ps = 1e8 ps and ends at 1.03e8. The DP all-reduce's first step (after a 1 ps
  // gradient, base 5e6, SM step 1e6 + route 1e6) drains 0 -> 2 from 7,000,001 ps on the same link
  // gpu0 -> switch: from then on the two flows get 0.05 B/ps each. The TP send has 1e7 - 4,000,001 x
  // 0.1 = 9,599,999.9 bytes left, which take 191,999,998 ps more: it ends at 198,999,999.
  auto build = [](bool with_dp) {
    TaskGraph g(4);
    Task send;
    send.name = "r0/tp/send";
    send.rank = 0;
    send.stream = StreamRef{StreamKind::copy, 0};
    send.kind = SendTask{1, 10'000'000, 7, model::CommEngine::copy_engine, -1};
    const TaskId s = g.add(send);
    Task recv;
    recv.name = "r1/tp/recv";
    recv.rank = 1;
    recv.kind = RecvTask{0, 10'000'000, 7};
    g.add(recv);
    if (with_dp) {
      DpConfig c;
      c.dp = 2;
      c.members = 2;  // ranks 0 and 2 form the DP group of member 0, 1 and 3 that of member 1
      c.kind = ScheduleKind::baseline;
      for (int rank : {0, 2}) {
        const std::string grad_name = fmt::format("r{}/grad", rank);
        Task grad;
        grad.name = grad_name;
        grad.rank = rank;
        grad.kind = ComputeTask{model::ElementwiseKernel{"add", 2, 1.0}, topo::Dtype::bf16, false};
        const TaskId id = g.add(grad);
        static_cast<void>(id);
      }
      DpSync dp(g, nullptr, c);
      // 1e7 x 1 bf16 = 2e7 bytes: steps of 1e7 bytes.
      dp.gradient(0, DpGradient{"w", 0, 10'000'000, 1, -1}, s + 2);
      dp.gradient(2, DpGradient{"w", 0, 10'000'000, 1, -1}, s + 3);
      dp.finish_backward(0, {s + 2});
      dp.finish_backward(2, {s + 3});
    }
    return g;
  };
  const topo::Cluster c = sim_test::star(4, 1e11, 500'000);
  const sim_test::TestCostModel costs;
  auto tp_end = [&](bool with_dp) {
    const TaskGraph g = build(with_dp);
    validate(g);
    sim::Simulator s(c, costs);
    return s.run(g).tasks[0].end_ps;
  };
  CHECK(tp_end(false) == 103'000'000);
  CHECK(tp_end(true) == Approx(198'999'999).margin(2));
}
