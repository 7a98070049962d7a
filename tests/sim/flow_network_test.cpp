#include <algorithm>
#include <vector>

#include <catch2/catch.hpp>

#include "fusesim/sim/flow_network.hpp"

using fusesim::TimePs;
using fusesim::sim::FlowId;
using fusesim::sim::FlowNetwork;
using fusesim::sim::FlowState;
using fusesim::topo::LinkId;

namespace {
bool contains(const std::vector<FlowId>& v, FlowId f) { return std::find(v.begin(), v.end(), f) != v.end(); }
}  // namespace

TEST_CASE("flow network: progressive filling, max-min differs from an equal split", "[sim][flow]") {
  // Link 0 (A) 100 GB/s, link 1 (B) 40 GB/s. f1 crosses A, f2 crosses A and B, f3 crosses B.
  // Round 1: A offers 1e11/2 = 5e10 per flow, B 4e10/2 = 2e10: B is the bottleneck, f2 = f3 = 2e10.
  // Round 2: A has 1e11 - 2e10 = 8e10 left for f1 alone: f1 = 8e10 (an equal split would give 5e10).
  FlowNetwork net({1e11, 4e10});
  const LinkId a[] = {0}, ab[] = {0, 1}, b[] = {1};
  const auto ra = net.add_route(a), rab = net.add_route(ab), rb = net.add_route(b);
  const FlowId f1 = net.create(ra, 1.6e6), f2 = net.create(rab, 4e5), f3 = net.create(rb, 2e5);
  REQUIRE(net.state(f1) == FlowState::latency);
  for (FlowId f : {f1, f2, f3}) net.start_transfer(f, 0);
  const auto changed = net.settle(0);
  REQUIRE(changed.size() == 3);
  REQUIRE(net.rate(f1) == 8e10);
  REQUIRE(net.rate(f2) == 2e10);
  REQUIRE(net.rate(f3) == 2e10);
  // f3: 2e5 B / 2e10 B/s = 1e-5 s = 10,000,000 ps; f2 4e5 / 2e10 = 20,000,000; f1 1.6e6 / 8e10 = 20,000,000.
  REQUIRE(net.completion_ps(f3) == 10'000'000);
  REQUIRE(net.completion_ps(f2) == 20'000'000);
  REQUIRE(net.completion_ps(f1) == 20'000'000);

  // f3 lands at 10 us. Re-solve: A: 1e11/2 = 5e10, B: 4e10/1 = 4e10 -> f2 = 4e10 (B), f1 = 1e11 - 4e10 = 6e10.
  // Remaining: f1 1.6e6 - 8e10 x 1e-5 = 8e5 -> 8e5 / 6e10 s = 13,333,333.3 ps -> ceil 13,333,334 -> 23,333,334;
  // f2 4e5 - 2e10 x 1e-5 = 2e5 -> 2e5 / 4e10 = 5e-6 s -> 15,000,000.
  net.finish(f3, 10'000'000);
  REQUIRE(net.state(f3) == FlowState::done);
  const auto changed2 = net.settle(10'000'000);
  REQUIRE(changed2.size() == 2);
  REQUIRE(net.rate(f1) == 6e10);
  REQUIRE(net.rate(f2) == 4e10);
  REQUIRE(net.remaining_bytes(f1, 10'000'000) == 8e5);
  REQUIRE(net.completion_ps(f1) == 23'333'334);
  REQUIRE(net.completion_ps(f2) == 15'000'000);

  // f2 lands at 15 us; f1 has 8e5 - 6e10 x 5e-6 = 5e5 left, now at the full 1e11: 5e-6 s -> 20,000,000.
  net.finish(f2, 15'000'000);
  net.settle(15'000'000);
  REQUIRE(net.rate(f1) == 1e11);
  REQUIRE(net.remaining_bytes(f1, 15'000'000) == 5e5);
  REQUIRE(net.completion_ps(f1) == 20'000'000);
  net.finish(f1, 20'000'000);
  REQUIRE(net.active_flows() == 0);
}

TEST_CASE("flow network: only the touched component is re-solved", "[sim][flow]") {
  // Two disjoint pairs of links. A flow joining link 2 must not disturb the flow on links 0-1.
  FlowNetwork net({1e11, 1e11, 5e10, 5e10});
  const LinkId left[] = {0, 1}, right[] = {2, 3}, right_part[] = {3};
  const auto rl = net.add_route(left), rr = net.add_route(right), rp = net.add_route(right_part);
  const FlowId f = net.create(rl, 1e6);
  net.start_transfer(f, 0);
  net.settle(0);
  const auto version = net.version(f);
  const FlowId g = net.create(rr, 1e6);
  net.start_transfer(g, 1000);
  const auto changed = net.settle(1000);
  REQUIRE(changed == std::vector<FlowId>{g});
  REQUIRE(net.version(f) == version);  // untouched: its completion event stays valid
  REQUIRE(net.rate(g) == 5e10);
  // A third flow on link 3 only: it shares with g (5e10 / 2 each), f is still untouched.
  const FlowId h = net.create(rp, 1e6);
  net.start_transfer(h, 2000);
  const auto changed2 = net.settle(2000);
  REQUIRE(changed2.size() == 2);
  REQUIRE(contains(changed2, g));
  REQUIRE(contains(changed2, h));
  REQUIRE(net.rate(g) == 2.5e10);
  REQUIRE(net.rate(h) == 2.5e10);
  REQUIRE(net.version(f) == version);
}

TEST_CASE("flow network: a reused slot does not revive stale versions", "[sim][flow]") {
  FlowNetwork net({1e11});
  const LinkId l[] = {0};
  const auto r = net.add_route(l);
  const FlowId f = net.create(r, 1e6);
  net.start_transfer(f, 0);
  net.settle(0);
  const auto old_version = net.version(f);
  net.finish(f, 10'000'000);
  const FlowId g = net.create(r, 1e6);
  REQUIRE(g == f);  // the slot is reused...
  net.start_transfer(g, 10'000'000);
  net.settle(10'000'000);
  REQUIRE(net.version(g) > old_version);  // ...but an event of the old flow stays stale
}

TEST_CASE("flow network: bad input is refused", "[sim][flow]") {
  REQUIRE_THROWS_AS(FlowNetwork({-1.0}), std::invalid_argument);
  FlowNetwork net({1e9});
  const LinkId bad[] = {3};
  REQUIRE_THROWS_AS(net.add_route(bad), std::invalid_argument);
  const LinkId ok[] = {0};
  const auto r = net.add_route(ok);
  REQUIRE_THROWS_AS(net.create(r, 0.0), std::invalid_argument);
}
