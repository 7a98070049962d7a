// DP gradient synchronisation (sched/dp.hpp): bucket boundaries and task counts derived by hand, and
// exactness of every sharding and schedule against the sum over replicas (sched/verify.hpp).
#include <catch2/catch.hpp>

#include "fusesim/sched/dp.hpp"
#include "fusesim/sched/verify.hpp"

using namespace fusesim;
using namespace fusesim::sched;
using model::DpSharding;
using model::ScheduleKind;

TEST_CASE("DP buckets close once they hold at least the cap, in production order", "[dp]") {
  // 192 < 200, 192 + 72 = 264 >= 200 closes {0, 1}; 144 alone is the rest.
  CHECK(dp_buckets({192, 72, 144}, 200) == std::vector<std::vector<int>>{{0, 1}, {2}});
  // 300 >= 100 alone; 50 + 50 = 100 closes {1, 2}; {3} is the rest.
  CHECK(dp_buckets({300, 50, 50, 100}, 100) == std::vector<std::vector<int>>{{0}, {1, 2}, {3}});
  // A cap above the total: one bucket.
  CHECK(dp_buckets({1, 2, 3}, 1000) == std::vector<std::vector<int>>{{0, 1, 2}});
  CHECK(dp_buckets({}, 10).empty());
}

TEST_CASE("DP row parts cover the rows once, near-equal", "[dp]") {
  // 9 rows over 4: floor(9p/4) = 0, 2, 4, 6, 9.
  CHECK(row_part(9, 4, 0).row0 == 0);
  CHECK(row_part(9, 4, 0).rows == 2);
  CHECK(row_part(9, 4, 3).row0 == 6);
  CHECK(row_part(9, 4, 3).rows == 3);
}

// CommFuse piece GEMMs over all replicas and the three gradients (16, 9 and 24 rows) with pieces of at
// least 5 rows (dp_verify.cpp): a gradient whose parts have rows/dp >= 5 rows is computed part by
// part (dp GEMMs per replica), a thinner one in one GEMM.
//   dp 2: parts of 8, 4, 12 rows -> 2 + 1 + 2 = 5 per replica, 10 in all.
//   dp 4: 4, 2, 6 rows -> 1 + 1 + 4 = 6 per replica, 24.
//   dp 8: 2, 1, 3 rows -> 1 + 1 + 1 = 3 per replica, 24.
int commfuse_pieces(int dp) { return dp == 2 ? 10 : 24; }

TEST_CASE("DP piece task counts per gradient and replica", "[dp]") {
  // Per replica and gradient: the first wgrad step (1 task). Then
  //   baseline/bucketed: the last step (1) and the collectives: baseline 1 per replica (all three
  //     gradients), bucketed 2 (buckets {g0, g1}, {g2}); ZeRO-1 adds the parameter all-gathers (1 or 2);
  //   commfuse: the piece GEMMs (commfuse_pieces), (dp-1) recv + (dp-1) add + (dp-1) send of the
  //     Fuse-RS ring, and for ddp (dp-1) send + (dp-1) recv of the all-gather ring.
  for (int dp : {2, 4, 8}) {
    const auto tasks = [&](DpSharding s, ScheduleKind k) {
      return static_cast<int>(generate_dp_piece(DpPieceRequest{dp, s, k, {}}).graph.size());
    };
    CHECK(tasks(DpSharding::ddp, ScheduleKind::baseline) == dp * (3 * 2 + 1));
    CHECK(tasks(DpSharding::ddp, ScheduleKind::slice) == dp * (3 * 2 + 2));
    CHECK(tasks(DpSharding::zero1, ScheduleKind::baseline) == dp * (3 * 2 + 2));
    CHECK(tasks(DpSharding::zero1, ScheduleKind::slice) == dp * (3 * 2 + 4));
    CHECK(tasks(DpSharding::ddp, ScheduleKind::commfuse) == dp * 3 * (1 + 5 * (dp - 1)) + commfuse_pieces(dp));
    CHECK(tasks(DpSharding::zero1, ScheduleKind::commfuse) ==
          dp * 3 * (1 + 3 * (dp - 1)) + commfuse_pieces(dp) + dp * 2);
  }
}

TEST_CASE("DP piece in the ring P2P form: task counts, and every transfer carries data", "[dp]") {
  // Per replica: the two wgrad steps of each of the 3 gradients (6), then each collective as ring
  // steps of one Send and one Recv: all-reduce 2(dp-1) steps, reduce-scatter and all-gather dp-1
  // each. Baseline: one sync (ZeRO-1: and one parameter gather); bucketed: two buckets of each.
  // CommFuse is P2P already: its counts stay those of the collective form, but the ZeRO-1 parameter
  // gathers (2 buckets) become 2(dp-1) tasks each.
  for (int dp : {2, 4, 8}) {
    const auto tasks = [&](DpSharding s, ScheduleKind k) {
      const Schedule sch = generate_dp_piece(DpPieceRequest{dp, s, k, {}, true});
      int untagged = 0;
      for (TaskId id = 0; id < sch.graph.size(); ++id) {
        const Task& t = sch.graph.task(id);
        REQUIRE_FALSE(std::holds_alternative<CollectiveTask>(t.kind));
        untagged += t.data_op < 0 ? 1 : 0;
      }
      CHECK(untagged == 0);  // every task, transfers included, has a data op for the executor
      return static_cast<int>(sch.graph.size());
    };
    const int ring = 2 * (dp - 1);  // tasks of one reduce-scatter or all-gather
    CHECK(tasks(DpSharding::ddp, ScheduleKind::baseline) == dp * (6 + 2 * ring));
    CHECK(tasks(DpSharding::ddp, ScheduleKind::slice) == dp * (6 + 2 * 2 * ring));
    CHECK(tasks(DpSharding::zero1, ScheduleKind::baseline) == dp * (6 + 2 * ring));
    CHECK(tasks(DpSharding::zero1, ScheduleKind::slice) == dp * (6 + 2 * 2 * ring));
    CHECK(tasks(DpSharding::zero3, ScheduleKind::baseline) == dp * (6 + ring));
    CHECK(tasks(DpSharding::zero3, ScheduleKind::slice) == dp * (6 + 2 * ring));
    CHECK(tasks(DpSharding::ddp, ScheduleKind::commfuse) == dp * 3 * (1 + 5 * (dp - 1)) + commfuse_pieces(dp));
    CHECK(tasks(DpSharding::zero1, ScheduleKind::commfuse) ==
          dp * 3 * (1 + 3 * (dp - 1)) + commfuse_pieces(dp) + dp * 2 * ring);
  }
}

TEST_CASE("DP syncs equal the sum over replicas - an injected fault fails every case", "[dp][verify]") {
  VerifyOptions o;
  o.dps = {2, 4, 8};
  VerifyReport ok;
  verify_dp(o, ok);
  REQUIRE(ok.cases.size() == 2 * 3 * 3 * 3);  // (collectives, ring P2P) x dp x sharding x schedule
  int p2p = 0;
  for (const VerifyCase& c : ok.cases) p2p += c.schedule.size() > 4 && c.schedule.substr(c.schedule.size() - 4) == "-p2p";
  CHECK(p2p == 27);
  for (const VerifyCase& c : ok.cases) {
    INFO(c.name << ": " << c.result.error);
    CHECK(c.result.passed);
  }
  o.dp_fault = DpFault{1, 0, 1};  // DP index 1 swaps parts 0 and 1 (or reads the next gradient)
  // ... in the P2P form too (ring chunks 0 and 1 of its own gradient and own reduced part).
  VerifyReport bad;
  verify_dp(o, bad);
  for (const VerifyCase& c : bad.cases) {
    INFO(c.name);
    CHECK_FALSE(c.result.passed);
  }
}
