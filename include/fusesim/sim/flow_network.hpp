#pragma once
// Bandwidth sharing between concurrent transfers. Every directed link has a capacity (bytes/s); a
// flow is a SimGrid-style action with remaining bytes, a current rate and an explicit state, and the
// active flows share every link of their route with max-min fairness, computed by progressive
// filling (raise every unfrozen flow's rate together until a link saturates, freeze the flows
// crossing it, repeat).
//
// Only what changed is re-solved: a flow joining or leaving marks its links, and settle() solves the
// connected components (flows linked by shared links) that contain a marked link. Flows elsewhere
// keep their rate and their remaining bytes are advanced lazily from the time of their last change,
// so a 1024-rank ring whose hops share nothing costs one tiny solve per hop, not one global solve.
//
// Determinism: components are solved in the order their links were marked, and inside a component
// flows and links are visited in increasing id order, so the same sequence of calls gives the same
// rates bit for bit, whatever the history of slot reuse.
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/units.hpp"

namespace fusesim::sim {

// Rounds a non-negative duration in (fractional) picoseconds up to whole picoseconds: work that ends
// inside a picosecond is not done before it. Floating-point noise must not add a picosecond to an
// exact result (800000 / 0.8 may evaluate to 1000000.0000000001), so values within 1e-12 relative
// (plus 1e-6 ps absolute) above an integer round down to it. Values far beyond int64 give kTimeNever.
// The ceiling is taken through an integer conversion (exact below 2^63) rather than std::ceil, which
// without SSE4.1 is a library call: this runs once per rate change of every kernel and flow.
inline TimePs ceil_ps(double ps) {
  if (!(ps > 0.0)) return 0;
  const double x = ps - (ps * 1e-12 + 1e-6);
  if (!(x < 9.0e18)) return kTimeNever;  // also an infinite duration (x is then NaN)
  if (x <= 0.0) return 0;
  const auto down = static_cast<TimePs>(x);  // truncation: the floor, x being positive
  return static_cast<double>(down) < x ? down + 1 : down;
}

enum class FlowState : std::uint8_t {
  latency,       // created, waiting out its latency: holds no link
  transferring,  // on its links, draining at `rate`
  done,          // landed; the slot is free for reuse
};

using FlowId = std::uint32_t;
using RouteId = std::uint32_t;

class FlowNetwork {
 public:
  // Capacity of each directed link, indexed by topo::LinkId.
  explicit FlowNetwork(std::vector<BytesPerSecond> link_capacity_bytes_per_s);

  // Registers a route (links in order from source to destination). Routes never change.
  RouteId add_route(std::span<const topo::LinkId> links);
  std::span<const topo::LinkId> route_links(RouteId route) const {
    return {route_links_.data() + route_offset_[route], route_offset_[route + 1] - route_offset_[route]};
  }

  // Changes a link's capacity (finite, >= 0); the flows on it are re-solved at the next settle().
  void set_capacity(topo::LinkId link, BytesPerSecond capacity_bytes_per_s);
  BytesPerSecond capacity(topo::LinkId link) const { return capacity_[static_cast<std::size_t>(link)]; }

  // A new flow of `bytes` (> 0) in the latency phase.
  FlowId create(RouteId route, double bytes);
  // End of the latency phase: the flow takes its share of its links from the next settle().
  void start_transfer(FlowId flow, TimePs now);
  // The data landed: the flow leaves its links (its neighbours speed up at the next settle()).
  void finish(FlowId flow, TimePs now);
  // Re-solves the components touched since the last call. Returns the flows whose rate changed;
  // each has a fresh completion_ps() and a bumped version(). The reference stays valid until the
  // next call.
  const std::vector<FlowId>& settle(TimePs now);
  bool needs_settle() const { return !dirty_links_.empty() || !instant_.empty(); }

  FlowState state(FlowId f) const { return flows_[f].state; }
  BytesPerSecond rate(FlowId f) const { return flows_[f].rate; }
  RouteId route(FlowId f) const { return flows_[f].route; }
  double remaining_bytes(FlowId f, TimePs now) const;
  // When the flow lands at its current rate (kTimeNever while its rate is zero).
  TimePs completion_ps(FlowId f) const { return flows_[f].completion_ps; }
  // Bumped whenever completion_ps changes or the flow finishes (each such change is also in what
  // settle() returns, which is how the engine learns to move the flow's end event).
  std::uint32_t version(FlowId f) const { return flows_[f].version; }
  std::size_t num_slots() const { return flows_.size(); }
  std::size_t active_flows() const { return active_; }

 private:
  struct Flow {
    double remaining_bytes = 0.0;  // as of last_update_ps
    double rate = 0.0;             // bytes/s
    TimePs last_update_ps = 0;
    TimePs completion_ps = kTimeNever;
    RouteId route = 0;
    std::uint32_t version = 0;
    std::uint32_t visit = 0;       // component search stamp
    FlowState state = FlowState::done;
  };

  void advance(Flow& f, TimePs now);
  bool solve_closed_route(topo::LinkId seed, std::uint32_t stamp, TimePs now);
  void solve(TimePs now);
  void apply(FlowId flow, double rate, TimePs now);

  std::vector<BytesPerSecond> capacity_;
  // Transferring flows on each link, in increasing id order: a component that is one route's flows
  // is then already in the order its rates are applied (solve_closed_route()). Nothing else depends
  // on the order: the search sorts what it gathers, and the flows progressive filling freezes in one
  // round all take the same share off each link, in whatever order.
  std::vector<std::vector<FlowId>> link_flows_;
  std::vector<std::uint32_t> link_visit_;
  std::vector<topo::LinkId> route_links_;
  std::vector<std::uint32_t> route_offset_{0};
  std::vector<char> route_simple_;  // by route: no link twice
  std::vector<Flow> flows_;
  std::vector<FlowId> free_slots_;
  std::size_t active_ = 0;

  std::vector<topo::LinkId> dirty_links_;
  std::vector<FlowId> instant_;  // started flows with an empty route: nothing limits them
  std::uint32_t visit_stamp_ = 0;
  // Scratch of settle()/solve(), kept to avoid allocating per call.
  std::vector<FlowId> changed_;
  std::vector<FlowId> comp_flows_;
  std::vector<topo::LinkId> comp_links_;
  std::vector<double> cap_left_;
  std::vector<std::uint32_t> unfrozen_;
  std::vector<double> new_rate_;
};

}  // namespace fusesim::sim
