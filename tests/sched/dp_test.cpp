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

TEST_CASE("DP piece task counts per gradient and replica", "[dp]") {
  // Per replica and gradient: the first wgrad step (1 task). Then
  //   baseline/bucketed: the last step (1) and the collectives: baseline 1 per replica (all three
  //     gradients), bucketed 2 (buckets {g0, g1}, {g2}); ZeRO-1 adds the parameter all-gathers (1 or 2);
  //   commfuse: dp pieces, (dp-1) recv + (dp-1) add + (dp-1) send of the Fuse-RS ring, and for ddp
  //     (dp-1) send + (dp-1) recv of the all-gather ring.
  for (int dp : {2, 4, 8}) {
    const auto tasks = [&](DpSharding s, ScheduleKind k) {
      return static_cast<int>(generate_dp_piece(DpPieceRequest{dp, s, k, {}}).graph.size());
    };
    CHECK(tasks(DpSharding::ddp, ScheduleKind::baseline) == dp * (3 * 2 + 1));
    CHECK(tasks(DpSharding::ddp, ScheduleKind::slice) == dp * (3 * 2 + 2));
    CHECK(tasks(DpSharding::zero1, ScheduleKind::baseline) == dp * (3 * 2 + 2));
    CHECK(tasks(DpSharding::zero1, ScheduleKind::slice) == dp * (3 * 2 + 4));
    CHECK(tasks(DpSharding::ddp, ScheduleKind::commfuse) == dp * 3 * (1 + dp + 5 * (dp - 1)));
    CHECK(tasks(DpSharding::zero1, ScheduleKind::commfuse) == dp * 3 * (1 + dp + 3 * (dp - 1)) + dp * 2);
  }
}

TEST_CASE("DP syncs equal the sum over replicas; an injected fault fails every case", "[dp][verify]") {
  VerifyOptions o;
  o.dps = {2, 4, 8};
  VerifyReport ok;
  verify_dp(o, ok);
  REQUIRE(ok.cases.size() == 3 * 3 * 3);  // dp x sharding x schedule
  for (const VerifyCase& c : ok.cases) {
    INFO(c.name << ": " << c.result.error);
    CHECK(c.result.passed);
  }
  o.dp_fault = DpFault{1, 0, 1};  // DP index 1 swaps parts 0 and 1 (or reads the next gradient)
  VerifyReport bad;
  verify_dp(o, bad);
  for (const VerifyCase& c : bad.cases) {
    INFO(c.name);
    CHECK_FALSE(c.result.passed);
  }
}
