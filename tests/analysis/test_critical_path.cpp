// The critical path of a simulated step (analysis/critical_path.hpp) on a graph small enough to
// follow by hand.
#include <catch2/catch.hpp>

#include "../sim/sim_test_util.hpp"
#include "fusesim/analysis/critical_path.hpp"

using namespace fusesim;

TEST_CASE("the critical path follows the latest predecessor and a transfer's other end", "[analysis][pipeline]") {
  // rank 0: A (10 us), then Send of 2.5 MB to rank 1. rank 1: C (30 us); Recv posted at 0; B (20 us)
  // after C (stream order) and after the Recv. The transfer, 25 us at 1e11 B/s plus the route's
  // latency, ends after C: B waits for it, not for C. Walking back from B: B (compute), the Recv
  // (communication from the transfer's start), which started after it was posted because its Send was
  // not ready: to the Send's ready time, then A, which ends when the Send becomes ready (no cross-stream
  // wait on the test device). So the path is A, transfer, B: compute 30 us, communication the Recv's
  // span, and the rest (between A's end and the transfer's start) waiting.
  const topo::Cluster c = sim_test::star(2);
  const sim_test::TestCostModel costs;
  constexpr TimePs U = kPsPerMicrosecond;
  sched::TaskGraph g(2);
  const auto a = g.add(sim_test::compute("r0/A", 0, 10.0 * U));
  const auto s = g.add(sim_test::send("r0/send", 0, 1, 2'500'000, 0));
  const auto cc = g.add(sim_test::compute("r1/C", 1, 30.0 * U));
  const auto r = g.add(sim_test::recv("r1/recv", 1, 0, 2'500'000, 0));
  const auto b = g.add(sim_test::compute("r1/B", 1, 20.0 * U));
  g.depend(a, s);
  g.depend(r, b);
  const sim::SimResult res = sim::Simulator(c, costs).run(g);
  const sim::TaskTiming& recv = res.tasks[r];
  REQUIRE(recv.end_ps > 30 * U);  // the transfer, not C, holds B back
  CHECK(res.tasks[b].start_ps == recv.end_ps);
  CHECK(res.makespan_ps == recv.end_ps + 20 * U);

  const analysis::CriticalPath cp = analysis::critical_path(g, res, 2);
  CHECK(cp.compute_ps == 30 * U);  // A and B; C is off the path
  CHECK(cp.comm_ps == recv.end_ps - recv.start_ps);
  CHECK(cp.wait_ps == recv.start_ps - 10 * U);
  CHECK(cp.compute_ps + cp.comm_ps + cp.wait_ps == res.makespan_ps);
  CHECK(cp.tasks == 3);  // B, the Recv, A (the Send is passed through at its ready time)
  REQUIRE(cp.stage_compute_ps.size() == 2);
  CHECK(cp.stage_compute_ps[0] == 10 * U);
  CHECK(cp.stage_compute_ps[1] == 20 * U);
  (void)cc;

  // Make C longer than the transfer: now B waits for C, and the path is C then B, all compute.
  sched::TaskGraph g2(2);
  const auto a2 = g2.add(sim_test::compute("r0/A", 0, 10.0 * U));
  const auto s2 = g2.add(sim_test::send("r0/send", 0, 1, 2'500'000, 0));
  g2.add(sim_test::compute("r1/C", 1, 80.0 * U));
  const auto r2 = g2.add(sim_test::recv("r1/recv", 1, 0, 2'500'000, 0));
  const auto b2 = g2.add(sim_test::compute("r1/B", 1, 20.0 * U));
  g2.depend(a2, s2);
  g2.depend(r2, b2);
  const sim::SimResult res2 = sim::Simulator(c, costs).run(g2);
  CHECK(res2.makespan_ps == 100 * U);
  const analysis::CriticalPath cp2 = analysis::critical_path(g2, res2, 1);
  CHECK(cp2.compute_ps == 100 * U);
  CHECK(cp2.comm_ps == 0);
  CHECK(cp2.wait_ps == 0);
  CHECK(cp2.tasks == 2);
  CHECK(cp2.stage_compute_ps == std::vector<TimePs>{100 * U});
}
