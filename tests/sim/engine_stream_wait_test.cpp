// Cross-stream event waits (DeviceModel::stream_wait_s, docs/engine.md section 3), with TestCostModel:
// a kernel of W flops lasts W ps. The test device waits 2 us (2e6 ps) at each cross-stream edge.
#include <catch2/catch.hpp>

#include "sim_test_util.hpp"

using namespace sim_test;
using fusesim::sched::TaskGraph;
using fusesim::sim::Simulator;

namespace {
constexpr fusesim::TimePs kWaitPs = 2'000'000;

fusesim::topo::Cluster waiting_star(int n) {
  auto cluster = star(n);
  cluster.device_models.at("test-gpu").stream_wait_s = {fusesim::ps_to_seconds(kWaitPs), "test"};
  return cluster;
}
}  // namespace

TEST_CASE("an edge between two streams of a rank is released a stream wait after its source ends", "[sim][stream_wait]") {
  // Rank 0: a (stream 0, 3e6) -> b (stream 1, 1e6): b ready at 3e6 + 2e6 = 5e6, ends 6e6.
  // a -> c, both on stream 0 (an explicit edge beside stream order): no wait, c runs 3e6-4e6.
  // p (rank 1, 1e6) -> q (rank 0, stream 0 after c): an edge between ranks is no event wait; q is held
  // by stream order alone and runs 4e6-5e6.
  const auto cluster = waiting_star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto a = g.add(compute("a", 0, 3'000'000, 0));
  const auto b = g.add(compute("b", 0, 1'000'000, 1));
  const auto c = g.add(compute("c", 0, 1'000'000, 0));
  const auto p = g.add(compute("p", 1, 1'000'000, 0));
  const auto q = g.add(compute("q", 0, 1'000'000, 0));
  g.depend(a, b);
  g.depend(a, c);
  g.depend(p, q);
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[b].ready_ps == 5'000'000);
  REQUIRE(res.tasks[b].end_ps == 6'000'000);
  REQUIRE(res.tasks[c].start_ps == 3'000'000);
  REQUIRE(res.tasks[q].start_ps == 4'000'000);
  REQUIRE(res.makespan_ps == 6'000'000);

  // The same graph on a device that charges nothing: b starts right after a, beside c, and the two
  // split the device (1e6 each at 1/2: both end at 5e6); q then runs 5e6-6e6.
  const auto free_res = Simulator(star(2), costs).run(g);
  REQUIRE(free_res.tasks[b].start_ps == 3'000'000);
  REQUIRE(free_res.tasks[b].end_ps == 5'000'000);
  REQUIRE(free_res.tasks[q].start_ps == 5'000'000);
}

TEST_CASE("a task is ready at the latest of its plain and its delayed releases", "[sim][stream_wait]") {
  // y (stream 0) follows x (stream 0, 5e6) in stream order and waits for z (stream 1). x and z share
  // the device from 0, at 1/2 each (test kernels are bound alike).
  // z of 4e6: z ends at 8e6, x (4e6 done) ends at 9e6; z's edge is released at 8e6 + 2e6 = 10e6.
  // z of 2e6: z ends at 4e6, x (2e6 done, then alone) at 7e6; z's edge is released at 6e6, before
  // x's end: the wait is hidden and y is ready at 7e6.
  const auto cluster = waiting_star(1);
  TestCostModel costs;
  for (const auto& [z_work, ready] : {std::pair{4'000'000.0, 10'000'000}, std::pair{2'000'000.0, 7'000'000}}) {
    TaskGraph g(1);
    g.add(compute("x", 0, 5'000'000, 0));
    const auto z = g.add(compute("z", 0, z_work, 1));
    const auto y = g.add(compute("y", 0, 1'000'000, 0));
    g.depend(z, y);
    const auto res = Simulator(cluster, costs).run(g);
    CAPTURE(z_work);
    REQUIRE(res.tasks[y].ready_ps == ready);
  }
}

TEST_CASE("a kernel waiting for a receive pays a stream wait, a send forwarding it does not", "[sim][stream_wait]") {
  // Rank 0 copy-engine send of 1e5 B to rank 1: route latency 2 x 0.5e6 + copy-engine step 2e6 = 3e6,
  // then 1e5 B at 1e11 B/s = 1e6: the data lands at 4e6. Rank 1's kernel k (stream 0, 1e6) waits for the
  // recv: ready 4e6 + 2e6 = 6e6, ends 7e6. Rank 1 forwards the data to rank 0 with a send that waits for
  // the recv (communication side, no wait): it starts at 4e6 and lands at 8e6. A kernel k0 on rank 0
  // (stream 0, 1e6) feeds rank 0's first send: that edge is an event wait, so the send is ready at
  // 1e6 + 2e6 = 3e6 and everything above moves 3e6 later.
  const auto cluster = waiting_star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto k0 = g.add(compute("k0", 0, 1'000'000, 0));
  const auto s01 = g.add(send("s01", 0, 1, 100'000, 1));
  const auto r01 = g.add(recv("r01", 1, 0, 100'000, 1));
  const auto k = g.add(compute("k", 1, 1'000'000, 0));
  const auto s10 = g.add(send("s10", 1, 0, 100'000, 2));
  const auto r10 = g.add(recv("r10", 0, 1, 100'000, 2));
  g.depend(k0, s01);
  g.depend(r01, k);
  g.depend(r01, s10);
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[s01].start_ps == 3'000'000);
  REQUIRE(res.tasks[r01].end_ps == 7'000'000);
  REQUIRE(res.tasks[k].start_ps == 9'000'000);
  REQUIRE(res.tasks[k].end_ps == 10'000'000);
  REQUIRE(res.tasks[s10].start_ps == 7'000'000);
  REQUIRE(res.tasks[r10].end_ps == 11'000'000);
}

TEST_CASE("a collective member after a kernel on another stream is ready a stream wait later", "[sim][stream_wait]") {
  // Two ranks; on rank 0 a kernel (stream 0, 3e6) precedes its member of an all-gather (comm stream);
  // rank 1's member has no predecessor. The rendezvous happens when rank 0's member is ready: 3e6 + 2e6.
  const auto cluster = waiting_star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto k = g.add(compute("k", 0, 3'000'000, 0));
  const auto members = collective(g, "ag", fusesim::sched::CollectiveKind::all_gather, iota_ranks(2), 200'000, 1);
  g.depend(k, members[0]);
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[members[0]].ready_ps == 5'000'000);
  REQUIRE(res.tasks[members[1]].start_ps == 5'000'000);
}
