#include <random>
#include <stdexcept>

#include <catch2/catch.hpp>

#include "fixtures.hpp"
#include "fusesim/analysis/metrics.hpp"

using namespace fusesim;
using namespace fusesim::testing;
using analysis::AnalysisInput;
using analysis::StepMetrics;

namespace {

constexpr TimePs U = kPsPerMicrosecond;  // the scenario is written in microseconds

// Two ranks, two regions, every kind of task. Times in microseconds:
//
//   rank 0: C0 collective [0,30) r0 | A gemm m=100 [10,50) r0 | S send->1 [40,70) r0
//           B gemm m=100 recompute [60,100) | E0 collective [90,95) r1
//   rank 1: C1 collective [0,30) r0 | D gemm m=200 [30,90) r0 | R recv<-0 [40,70) r0
//           E1 collective [90,95) r1
struct Scenario {
  sched::TaskGraph graph{2};
  sim::SimResult result;
  topo::Cluster cluster = make_cluster(2, 8, 1e9);
  FakeCosts costs;

  Scenario() {
    graph.add_region({"L0/fwd/ag+fc1", sched::Parallelism::tpsp});
    graph.add_region({"dp-sync", sched::Parallelism::dp});
    auto add = [&](sched::Task t, TimePs start_us, TimePs end_us) {
      const sched::TaskId id = graph.add(std::move(t));
      if (result.tasks.size() <= id) result.tasks.resize(id + 1);
      result.tasks[id] = timing(start_us * U, end_us * U);
      return id;
    };
    add(compute_task("A", 0, 100, false, 0), 10, 50);                 // id 0
    add(compute_task("B", 0, 100, true, -1), 60, 100);                // id 1
    add(collective_task("C0", 0, {0, 1}, 7, 0), 0, 30);               // id 2
    const auto s = add(send_task("S", 0, 1, 5, 0), 40, 70);           // id 3
    add(collective_task("C1", 1, {0, 1}, 7, 0), 0, 30);               // id 4
    add(compute_task("D", 1, 200, false, 0), 30, 90);                 // id 5
    const auto r = add(recv_task("R", 1, 0, 5, 0), 40, 70);           // id 6
    add(collective_task("E0", 0, {0, 1}, 8, 1), 90, 95);              // id 7
    add(collective_task("E1", 1, {0, 1}, 8, 1), 90, 95);              // id 8
    result.transfers.push_back({s, r, 0, 1, 1024, -1, model::CommEngine::copy_engine, 40 * U, 70 * U});
    // A collective ring step: must not be counted twice (the collective tasks already cover it).
    result.transfers.push_back({2, 4, 0, 1, 2048, 0, model::CommEngine::sm_kernel, 5 * U, 25 * U});
    result.makespan_ps = 100 * U;
  }

  StepMetrics run(std::int64_t tokens = 1000) const {
    AnalysisInput in{graph, result, cluster, costs, topo::Dtype::bf16, tokens, 2, "commfuse", "tpsp", "layer"};
    return analysis::analyze(in);
  }
};

}  // namespace

TEST_CASE("per-rank compute and comm and overlap and exposed communication derived by hand", "[metrics]") {
  Scenario s;
  const StepMetrics m = s.run();
  REQUIRE(m.ranks.size() == 2);
  REQUIRE(m.step_time_ps == 100 * U);

  // Rank 0: compute = [10,50) u [60,100) = 40 + 40 = 80.
  //         comm    = [0,30) u [40,70) (the send, from its transfer record) u [90,95) = 30 + 30 + 5 = 65.
  //         overlap = [10,30) + [40,50) + [60,70) + [90,95) = 20 + 10 + 10 + 5 = 45.
  //         exposed = [0,10) + [50,60) = 20 (= 65 - 45).
  const auto& r0 = m.ranks[0];
  CHECK(r0.compute_ps == 80 * U);
  CHECK(r0.comm_ps == 65 * U);
  CHECK(r0.overlap_ps == 45 * U);
  CHECK(r0.exposed_comm_ps == 20 * U);
  CHECK(r0.overlap_ratio == Approx(45.0 / 65.0).epsilon(1e-15));
  CHECK(r0.last_end_ps == 100 * U);

  // Rank 1: compute = [30,90) = 60; comm = [0,30) u [40,70) (the receive) u [90,95) = 65;
  //         overlap = [40,70) = 30; exposed = [0,30) + [90,95) = 35.
  const auto& r1 = m.ranks[1];
  CHECK(r1.compute_ps == 60 * U);
  CHECK(r1.comm_ps == 65 * U);
  CHECK(r1.overlap_ps == 30 * U);
  CHECK(r1.exposed_comm_ps == 35 * U);
  CHECK(r1.overlap_ratio == Approx(30.0 / 65.0).epsilon(1e-15));
  CHECK(r1.last_end_ps == 95 * U);

  // Rank 0 ends at T = 100, rank 1 at 95: rank 0 is critical.
  CHECK(m.critical_rank == 0);
}

TEST_CASE("head and tail per region and rank derived by hand", "[metrics]") {
  Scenario s;
  const StepMetrics m = s.run();
  const auto& r0 = m.ranks[0];
  REQUIRE(r0.regions.size() == 2);
  // Head and tail count only the time no compute runs on the rank (rank 0 computes [10,50) u [60,100)).
  // Rank 0, region 0: tasks C0 [0,30), A [10,50), S [40,70): start 0, end 70;
  //   head = [0, first compute start 10) with no compute = 10;
  //   tail = [last compute end 50, 70) less B's recompute [60,100) = [50,60) = 10: the send's last
  //   10 us run beside B, hidden, not waited for.
  CHECK(r0.regions[0].region == 0);
  CHECK(r0.regions[0].name == "L0/fwd/ag+fc1");
  CHECK(r0.regions[0].start_ps == 0);
  CHECK(r0.regions[0].end_ps == 70 * U);
  CHECK(r0.regions[0].head_ps == 10 * U);
  CHECK(r0.regions[0].tail_ps == 10 * U);
  CHECK(r0.regions[0].compute_tasks == 1);
  // Rank 0, region 1: only E0 [90,95), no compute of its own, but B (no region) computes all through
  // it: a pure communication region beside compute waits for nothing, head 0 and tail 0.
  CHECK(r0.regions[1].head_ps == 0);
  CHECK(r0.regions[1].tail_ps == 0);
  CHECK(r0.regions[1].compute_tasks == 0);
  // Sums: head 10 + 0 = 10, tail 10 + 0 = 10.
  CHECK(r0.head_ps == 10 * U);
  CHECK(r0.tail_ps == 10 * U);

  // Rank 1 computes D [30,90) only. Region 0: C1 [0,30), D [30,90), R [40,70): head [0,30) = 30,
  // tail 90 - 90 = 0. Region 1: E1 [90,95) with nothing computing: its whole span 5 is head.
  const auto& r1 = m.ranks[1];
  REQUIRE(r1.regions.size() == 2);
  CHECK(r1.regions[0].head_ps == 30 * U);
  CHECK(r1.regions[0].tail_ps == 0);
  CHECK(r1.regions[1].head_ps == 5 * U);
  CHECK(r1.head_ps == 35 * U);  // 30 + 5
  CHECK(r1.tail_ps == 0);
}

TEST_CASE("a communication-only region beside another region's compute waits only where nothing computes",
          "[metrics]") {
  // The DP shape of issue 13: a bucket all-reduce (region 1, no compute task) runs [20,80) on rank 0
  // while the backward GEMM of region 0 runs [0,50). Waiting is [50,80) = 30, not the span 60.
  sched::TaskGraph graph{1};
  sim::SimResult result;
  const topo::Cluster cluster = make_cluster(1, 8, 1e9);
  FakeCosts costs;
  graph.add_region({"L0/bwd/gemm", sched::Parallelism::tpsp});
  graph.add_region({"dp/bucket0", sched::Parallelism::dp});
  graph.add(compute_task("G", 0, 100, false, 0));
  graph.add(collective_task("AR", 0, {0}, 8, 1));
  result.tasks = {timing(0, 50 * U), timing(20 * U, 80 * U)};
  result.makespan_ps = 80 * U;
  AnalysisInput in{graph, result, cluster, costs, topo::Dtype::bf16, 1000, 1, "slice", "dp", "layer"};
  const StepMetrics m = analysis::analyze(in);
  REQUIRE(m.ranks[0].regions.size() == 2);
  CHECK(m.ranks[0].regions[1].head_ps == 30 * U);
  CHECK(m.ranks[0].regions[1].tail_ps == 0);
  // Head and tail never exceed the exposed communication here: [50,80) is all of it.
  CHECK(m.ranks[0].exposed_comm_ps == 30 * U);
  CHECK(m.ranks[0].head_ps + m.ranks[0].tail_ps == 30 * U);
}

TEST_CASE("MFU and HFU and throughput derived by hand", "[metrics]") {
  Scenario s;
  const StepMetrics m = s.run(1000);
  // Model FLOPs: A 2*100*10*5 = 10,000 + D 2*200*10*5 = 20,000 = 30,000; HFU adds B (recompute) 10,000.
  CHECK(m.model_flops == 30000.0);
  CHECK(m.hardware_flops == 40000.0);
  // Peak 1e9 FLOP/s x 2 GPUs = 2e9; T = 100 us = 1e-4 s -> 2e5 FLOPs available.
  CHECK(m.peak_flops_per_s == 2e9);
  CHECK(m.mfu == Approx(30000.0 / 2e5));  // 0.15
  CHECK(m.hfu == Approx(40000.0 / 2e5));  // 0.20
  // 1000 tokens / 1e-4 s = 1e7 tokens/s, 5e6 per GPU.
  CHECK(m.tokens_per_s == Approx(1e7));
  CHECK(m.tokens_per_s_per_gpu == Approx(5e6));
}

TEST_CASE("P2P time comes from transfer records or else from the Send and Recv timings", "[metrics]") {
  Scenario with_records;
  Scenario without;
  without.result.transfers.clear();
  // Without records the Send [40,70) counts on rank 0 and the Recv [40,70) on rank 1: same sets.
  const auto a = with_records.run();
  const auto b = without.run();
  for (int r = 0; r < 2; ++r) {
    CHECK(a.ranks[r].comm_ps == b.ranks[r].comm_ps);
    CHECK(a.ranks[r].exposed_comm_ps == b.ranks[r].exposed_comm_ps);
  }
  // A record narrower than the tasks wins: transfer [45,70) -> rank 0 comm = 30 + 25 + 5 = 60,
  // rank 1 comm = 30 + 25 + 5 = 60.
  Scenario narrow;
  narrow.result.transfers[0].start_ps = 45 * U;
  const auto c = narrow.run();
  CHECK(c.ranks[0].comm_ps == 60 * U);
  CHECK(c.ranks[1].comm_ps == 60 * U);
}

TEST_CASE("critical rank is the one whose last task ends at T with the lowest index on ties", "[metrics]") {
  auto build = [](TimePs end0, TimePs end1, TimePs end2) {
    sched::TaskGraph g(3);
    sim::SimResult res;
    g.add(compute_task("a", 0, 10));
    g.add(compute_task("b", 1, 10));
    g.add(compute_task("c", 2, 10));
    res.tasks = {timing(0, end0), timing(0, end1), timing(0, end2)};
    res.makespan_ps = std::max({end0, end1, end2});
    static const topo::Cluster cluster = make_cluster(3, 8, 1e12);
    static const FakeCosts costs;
    AnalysisInput in{g, res, cluster, costs, topo::Dtype::bf16, 0, 0, "baseline", "tpsp", ""};
    return analysis::analyze(in);
  };
  CHECK(build(5, 9, 7).critical_rank == 1);
  CHECK(build(9, 5, 9).critical_rank == 0);  // tie between 0 and 2
  CHECK(build(5, 9, 9).critical_rank == 1);  // tie between 1 and 2
  CHECK(build(1, 2, 3).critical_rank == 2);
  // gpus = 0 means every rank of the graph.
  CHECK(build(1, 2, 3).gpus == 3);
}

TEST_CASE("invariants hold on random runs", "[metrics]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<TimePs> t(0, 1000);
  std::uniform_int_distribution<int> kind(0, 2), rank(0, 3);
  const topo::Cluster cluster = make_cluster(4, 4, 1e12);
  const FakeCosts costs;
  for (int trial = 0; trial < 50; ++trial) {
    sched::TaskGraph g(4);
    sim::SimResult res;
    g.add_region({"r", sched::Parallelism::tpsp});
    for (int i = 0; i < 40; ++i) {
      TimePs a = t(rng), b = t(rng);
      if (a > b) std::swap(a, b);
      const int r = rank(rng);
      const int k = kind(rng);
      if (k == 0)
        g.add(compute_task("c", r, 10, false, i % 2 ? 0 : -1));
      else
        g.add(collective_task("m", r, {r}, i, i % 2 ? 0 : -1));
      res.tasks.push_back(timing(a, b));
      res.makespan_ps = std::max(res.makespan_ps, b);
    }
    AnalysisInput in{g, res, cluster, costs, topo::Dtype::bf16, 0, 4, "baseline", "tpsp", ""};
    const StepMetrics m = analysis::analyze(in);
    for (const auto& rm : m.ranks) {
      // |M| = |C n M| + |M \ C|; and |C u M| = |C| + |M \ C| cannot exceed T.
      REQUIRE(rm.overlap_ps + rm.exposed_comm_ps == rm.comm_ps);
      REQUIRE(rm.compute_ps + rm.exposed_comm_ps <= m.step_time_ps);
      REQUIRE(rm.overlap_ratio >= 0.0);
      REQUIRE(rm.overlap_ratio <= 1.0);
      for (const auto& reg : rm.regions) {
        REQUIRE(reg.head_ps >= 0);
        REQUIRE(reg.tail_ps >= 0);
        REQUIRE(reg.head_ps + reg.tail_ps <= reg.end_ps - reg.start_ps);
      }
    }
    REQUIRE(m.ranks[static_cast<std::size_t>(m.critical_rank)].last_end_ps == m.step_time_ps);
  }
}

TEST_CASE("a result that does not belong to the graph is an internal error", "[metrics]") {
  Scenario s;
  s.result.tasks.pop_back();
  CHECK_THROWS_AS(s.run(), std::logic_error);
  Scenario never_ran;
  never_ran.result.tasks[3].start_ps = -1;
  CHECK_THROWS_AS(never_ran.run(), std::logic_error);
  Scenario bad_makespan;
  bad_makespan.result.makespan_ps = 99 * U;
  CHECK_THROWS_AS(bad_makespan.run(), std::logic_error);
}

TEST_CASE("JSON row carries the design-note keys in seconds", "[metrics]") {
  Scenario s;
  const nlohmann::json row = analysis::to_json(s.run());
  for (const char* key : {"step_time_s", "compute_s", "comm_s", "exposed_comm_s", "overlap_ratio", "head_latency_s",
                          "tail_latency_s", "mfu", "hfu", "tokens_per_s", "tokens_per_s_per_gpu", "critical_rank",
                          "schedule", "parallelism", "regions", "ranks"})
    CHECK(row.contains(key));
  CHECK(row["schedule"].get<std::string>() == "commfuse");
  CHECK(row["parallelism"].get<std::string>() == "tpsp");
  // Critical rank 0: T = 100 us, compute 80 us, comm 65 us, exposed 20 us, head 10 us, tail 10 us,
  // head + tail = 20 us (also under its deprecated name tail_latency_s).
  CHECK(row["step_time_s"].get<double>() == Approx(100e-6));
  CHECK(row["compute_s"].get<double>() == Approx(80e-6));
  CHECK(row["comm_s"].get<double>() == Approx(65e-6));
  CHECK(row["exposed_comm_s"].get<double>() == Approx(20e-6));
  CHECK(row["head_latency_s"].get<double>() == Approx(10e-6));
  CHECK(row["tail_only_latency_s"].get<double>() == Approx(10e-6));
  CHECK(row["head_plus_tail_latency_s"].get<double>() == Approx(20e-6));
  CHECK(row["tail_latency_s"].get<double>() == Approx(20e-6));
  CHECK(row["mfu"].get<double>() == Approx(0.15));
  CHECK(row["regions"].size() == 2);
  CHECK(row["regions"][0]["tail_s"].get<double>() == Approx(10e-6));
  CHECK(row["ranks"].size() == 2);
  CHECK(row["ranks"][1]["exposed_comm_s"].get<double>() == Approx(35e-6));
}

TEST_CASE("table output has aligned columns with units", "[metrics]") {
  Scenario s;
  const std::string table = analysis::format_table({s.run()});
  // Header, rule, one row.
  std::vector<std::string> lines;
  std::size_t pos = 0;
  while (pos < table.size()) {
    const auto nl = table.find('\n', pos);
    lines.push_back(table.substr(pos, nl - pos));
    pos = nl + 1;
  }
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].find("step (ms)") != std::string::npos);
  CHECK(lines[0].find("exposed comm (ms)") != std::string::npos);
  // Right-aligned numeric columns end where their header ends: T = 100 us = 0.100 ms.
  const auto header_end = lines[0].find("step (ms)") + std::string("step (ms)").size();
  CHECK(lines[2].substr(header_end - 5, 5) == "0.100");
  CHECK(lines[1].find_first_not_of("- ") == std::string::npos);
}
