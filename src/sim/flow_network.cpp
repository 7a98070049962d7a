#include "fusesim/sim/flow_network.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace fusesim::sim {

FlowNetwork::FlowNetwork(std::vector<BytesPerSecond> link_capacity_bytes_per_s)
    : capacity_(std::move(link_capacity_bytes_per_s)),
      link_flows_(capacity_.size()),
      link_visit_(capacity_.size(), 0),
      cap_left_(capacity_.size(), 0.0),
      unfrozen_(capacity_.size(), 0) {
  for (std::size_t l = 0; l < capacity_.size(); ++l)
    if (!(capacity_[l] >= 0.0) || !std::isfinite(capacity_[l]))
      throw std::invalid_argument("link " + std::to_string(l) + " has an invalid capacity");
}

RouteId FlowNetwork::add_route(std::span<const topo::LinkId> links) {
  for (topo::LinkId l : links)
    if (l < 0 || static_cast<std::size_t>(l) >= capacity_.size())
      throw std::invalid_argument("route names link " + std::to_string(l) + ", which does not exist");
  route_links_.insert(route_links_.end(), links.begin(), links.end());
  route_offset_.push_back(static_cast<std::uint32_t>(route_links_.size()));
  bool simple = true;
  for (std::size_t i = 0; i < links.size(); ++i)
    for (std::size_t j = 0; j < i; ++j) simple &= links[i] != links[j];
  route_simple_.push_back(simple);
  return static_cast<RouteId>(route_offset_.size() - 2);
}

void FlowNetwork::set_capacity(topo::LinkId link, BytesPerSecond capacity_bytes_per_s) {
  if (link < 0 || static_cast<std::size_t>(link) >= capacity_.size())
    throw std::invalid_argument("set_capacity: link " + std::to_string(link) + " does not exist");
  if (!(capacity_bytes_per_s >= 0.0) || !std::isfinite(capacity_bytes_per_s))
    throw std::invalid_argument("set_capacity: link " + std::to_string(link) + " given an invalid capacity");
  if (capacity_[static_cast<std::size_t>(link)] == capacity_bytes_per_s) return;
  capacity_[static_cast<std::size_t>(link)] = capacity_bytes_per_s;
  if (!link_flows_[static_cast<std::size_t>(link)].empty()) dirty_links_.push_back(link);
}

FlowId FlowNetwork::create(RouteId route, double bytes) {
  if (route + 1 >= route_offset_.size()) throw std::invalid_argument("unknown route");
  if (!(bytes > 0.0) || !std::isfinite(bytes)) throw std::invalid_argument("a flow needs a positive size");
  FlowId id;
  if (!free_slots_.empty()) {
    id = free_slots_.back();
    free_slots_.pop_back();
  } else {
    id = static_cast<FlowId>(flows_.size());
    flows_.emplace_back();
    new_rate_.push_back(0.0);
  }
  Flow& f = flows_[id];
  // The version survives slot reuse so that events of the slot's previous flow stay stale.
  f.remaining_bytes = bytes;
  f.rate = 0.0;
  f.last_update_ps = 0;
  f.completion_ps = kTimeNever;
  f.route = route;
  f.state = FlowState::latency;
  ++active_;
  return id;
}

void FlowNetwork::start_transfer(FlowId id, TimePs now) {
  Flow& f = flows_.at(id);
  if (f.state != FlowState::latency) throw std::logic_error("flow started twice");
  f.state = FlowState::transferring;
  f.last_update_ps = now;
  const auto links = route_links(f.route);
  if (links.empty()) {
    instant_.push_back(id);
    return;
  }
  for (topo::LinkId l : links) {
    auto& on_link = link_flows_[l];
    on_link.insert(std::upper_bound(on_link.begin(), on_link.end(), id), id);
    dirty_links_.push_back(l);
  }
}

void FlowNetwork::finish(FlowId id, TimePs now) {
  Flow& f = flows_.at(id);
  if (f.state == FlowState::done) throw std::logic_error("flow finished twice");
  if (f.state == FlowState::transferring) {
    for (topo::LinkId l : route_links(f.route)) {
      auto& on_link = link_flows_[l];
      on_link.erase(std::find(on_link.begin(), on_link.end(), id));
      dirty_links_.push_back(l);
    }
  }
  advance(f, now);
  f.state = FlowState::done;
  f.rate = 0.0;
  f.completion_ps = kTimeNever;
  ++f.version;
  --active_;
  free_slots_.push_back(id);
}

void FlowNetwork::advance(Flow& f, TimePs now) {
  if (now > f.last_update_ps && f.rate > 0.0) {
    f.remaining_bytes -= f.rate * static_cast<double>(now - f.last_update_ps) / static_cast<double>(kPsPerSecond);
    if (f.remaining_bytes < 0.0) f.remaining_bytes = 0.0;
  }
  f.last_update_ps = now;
}

double FlowNetwork::remaining_bytes(FlowId id, TimePs now) const {
  const Flow& f = flows_.at(id);
  if (f.state != FlowState::transferring || now <= f.last_update_ps) return f.remaining_bytes;
  const double left =
      f.remaining_bytes - f.rate * static_cast<double>(now - f.last_update_ps) / static_cast<double>(kPsPerSecond);
  return left < 0.0 ? 0.0 : left;
}

const std::vector<FlowId>& FlowNetwork::settle(TimePs now) {
  changed_.clear();
  for (FlowId id : instant_) {
    Flow& f = flows_[id];
    if (f.state != FlowState::transferring) continue;
    f.rate = std::numeric_limits<double>::infinity();
    f.remaining_bytes = 0.0;
    f.last_update_ps = now;
    f.completion_ps = now;
    ++f.version;
    changed_.push_back(id);
  }
  instant_.clear();

  ++visit_stamp_;
  if (visit_stamp_ == 0) {  // wrapped: old stamps could collide with new ones
    std::fill(link_visit_.begin(), link_visit_.end(), 0);
    for (Flow& f : flows_) f.visit = 0;
    visit_stamp_ = 1;
  }
  const std::uint32_t stamp = visit_stamp_;
  for (topo::LinkId seed : dirty_links_) {
    if (link_visit_[seed] == stamp) continue;
    // A link a finished flow left empty (a third of the seeds on a ring of single hops): nothing to
    // re-rate; stamped as the search would stamp it. finish() still lists such a link, because a flow
    // started on it later in the same instant must be solved at this place in the list (the order of
    // the flows whose rates change orders their end events).
    if (link_flows_[seed].empty()) {
      link_visit_[seed] = stamp;
      continue;
    }
    if (solve_closed_route(seed, stamp, now)) continue;
    comp_links_.clear();
    comp_flows_.clear();
    // Breadth-first over link -> flows on it -> links of those flows.
    link_visit_[seed] = stamp;
    comp_links_.push_back(seed);
    for (std::size_t i = 0; i < comp_links_.size(); ++i) {
      for (FlowId fid : link_flows_[comp_links_[i]]) {
        Flow& f = flows_[fid];
        if (f.visit == stamp) continue;
        f.visit = stamp;
        comp_flows_.push_back(fid);
        for (topo::LinkId l : route_links(f.route)) {
          if (link_visit_[l] == stamp) continue;
          link_visit_[l] = stamp;
          comp_links_.push_back(l);
        }
      }
    }
    if (!comp_flows_.empty()) solve(now);
  }
  dirty_links_.clear();
  return changed_;
}

// Inlined into the solves' loops: a ring's components re-rate millions of flows a run.
[[gnu::always_inline]] inline void FlowNetwork::apply(FlowId fid, double r, TimePs now) {
  Flow& f = flows_[fid];
  if (r == f.rate) return;  // unchanged: its scheduled completion still holds
  advance(f, now);
  f.rate = r;
  const TimePs duration = r > 0.0 ? ceil_ps(f.remaining_bytes * static_cast<double>(kPsPerSecond) / r) : kTimeNever;
  f.completion_ps = duration >= kTimeNever - now ? kTimeNever : now + duration;
  ++f.version;
  changed_.push_back(fid);
}

namespace {
// Components hold a handful of flows and links: insertion sort, without std::sort's set-up.
template <class T>
void sort_small(std::vector<T>& v) {
  if (v.size() > 16) {
    std::sort(v.begin(), v.end());
    return;
  }
  for (std::size_t i = 1; i < v.size(); ++i) {
    const T x = v[i];
    std::size_t j = i;
    for (; j > 0 && x < v[j - 1]; --j) v[j] = v[j - 1];
    v[j] = x;
  }
}
}  // namespace

// The common component, a ring's hop: the flows on `seed` all take one route, and every link of that
// route carries as many flows as `seed` does, hence those same flows and no others (the NVLink hop
// of several rings between the same two GPUs; a NIC hop alone: in issue 14's four training steps
// every component but a few thousand of 2.3 million). It is solved as solve() would solve it, without
// the breadth-first search: k flows on one route take min(capacity) / k (see solve(); x / 1 is x),
// applied in increasing flow id order, the order of the link's list. Its links are stamped as the
// search would stamp them; no other component can reach its flows. Returns false, having done
// nothing, for any other shape.
bool FlowNetwork::solve_closed_route(topo::LinkId seed, std::uint32_t stamp, TimePs now) {
  const auto& on_seed = link_flows_[seed];  // not empty (settle())
  const RouteId route = flows_[on_seed.front()].route;
  if (!route_simple_[route]) return false;  // a link twice: its list holds each flow twice
  for (FlowId fid : on_seed)
    if (flows_[fid].route != route) return false;
  const auto links = route_links(route);
  for (topo::LinkId l : links)
    if (link_flows_[l].size() != on_seed.size()) return false;
  double min_capacity = std::numeric_limits<double>::infinity();
  for (topo::LinkId l : links) {
    link_visit_[l] = stamp;
    min_capacity = std::min(min_capacity, capacity_[l]);
  }
  const double share = min_capacity / static_cast<double>(on_seed.size());
  for (FlowId fid : on_seed) apply(fid, share, now);
  return true;
}

// Progressive filling on the component in comp_flows_/comp_links_. Each round finds the link whose
// remaining capacity divided among its unfrozen flows is smallest (ties: lowest link id), gives that
// share to its unfrozen flows and freezes them, taking the share off every link they cross. A flow
// frozen on its bottleneck gets exactly the share computed there, so equal splits stay exact
// (capacity / n is one correctly rounded division).
void FlowNetwork::solve(TimePs now) {
  if (comp_flows_.size() == 1) {  // alone on its links (the common case of a ring hop): their minimum
    const FlowId fid = comp_flows_.front();
    double rate = std::numeric_limits<double>::infinity();
    for (topo::LinkId l : comp_links_) rate = std::min(rate, capacity_[l]);
    apply(fid, rate, now);
    return;
  }
  sort_small(comp_flows_);
  // k flows on one and the same route (a P2P hop and a collective step between the same two ranks):
  // the first round of the filling below freezes them all at the smallest capacity / k of the route,
  // and rounding is monotone, so that share is min(capacity) / k. Same value, no sort of the links.
  const RouteId route = flows_[comp_flows_.front()].route;
  bool one_route = true;
  for (FlowId fid : comp_flows_) one_route &= flows_[fid].route == route;
  if (one_route) {
    double min_capacity = std::numeric_limits<double>::infinity();
    for (topo::LinkId l : comp_links_) min_capacity = std::min(min_capacity, capacity_[l]);
    const double share = min_capacity / static_cast<double>(comp_flows_.size());
    for (FlowId fid : comp_flows_) apply(fid, share, now);
    return;
  }
  sort_small(comp_links_);
  for (topo::LinkId l : comp_links_) {
    cap_left_[l] = capacity_[l];
    unfrozen_[l] = static_cast<std::uint32_t>(link_flows_[l].size());
  }
  for (FlowId fid : comp_flows_) new_rate_[fid] = -1.0;

  std::size_t left = comp_flows_.size();
  while (left > 0) {
    topo::LinkId best = -1;
    double best_share = std::numeric_limits<double>::infinity();
    std::size_t keep = 0;
    for (topo::LinkId l : comp_links_) {
      if (unfrozen_[l] == 0) continue;  // saturated or emptied: drop it from later rounds
      comp_links_[keep++] = l;
      const double share = cap_left_[l] / static_cast<double>(unfrozen_[l]);
      if (share < best_share) {
        best_share = share;
        best = l;
      }
    }
    comp_links_.resize(keep);
    if (best < 0) break;  // unreachable: every unfrozen flow crosses a link with unfrozen flows
    for (FlowId fid : link_flows_[best]) {
      if (new_rate_[fid] >= 0.0) continue;
      new_rate_[fid] = best_share;
      --left;
      for (topo::LinkId l : route_links(flows_[fid].route)) {
        cap_left_[l] -= best_share;
        if (cap_left_[l] < 0.0) cap_left_[l] = 0.0;
        --unfrozen_[l];
      }
    }
  }

  for (FlowId fid : comp_flows_) apply(fid, new_rate_[fid], now);
}

}  // namespace fusesim::sim
