#include "fusesim/sched/symmetry.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fusesim/sched/generate.hpp"
#include "fusesim/topo/rings.hpp"

namespace fusesim::sched {

topo::Route proxy_route(const topo::Cluster& cluster, const TaskGraph& graph, int src, int dst,
                        const topo::Route& real) {
  const std::vector<int>& aliases = graph.load_alias();
  if (aliases.empty()) return {};
  const int alias = aliases[static_cast<std::size_t>(dst)];
  if (alias == dst) return {};
  // A stage transfer into a proxy (pipeline stages of a mirrored graph) comes from another stage: its
  // mirrored sender stays in that stage, shifted there as dst is in its own.
  // With TP images (TaskGraph::alias_tp_images) dst is its alias turned within its TP group and
  // shifted by whole groups: the sender is turned and shifted back as much, each within its own.
  const int period = graph.alias_stage_ranks(), first = src / period * period, tp = graph.alias_tp_images();
  const auto mod = [](int x, int m) { return (x % m + m) % m; };
  const int turn = dst % tp - alias % tp, shift = (dst - dst % tp) - (alias - alias % tp);
  const int local = src - first;
  const int mirrored_src = first + mod(local - local % tp - shift, period) + mod(local % tp - turn, tp);
  if (mirrored_src == alias || mirrored_src >= cluster.num_ranks() || real.links.empty()) return {};
  // The mirrored route is the real one's image under the replica shift (check_mirror_fabric
  // requires images as long as the original), so the two join where they visit the same vertex at the
  // same hop: the top of both (the leaf or switch). A shared vertex at different hops is no join: with
  // two replicas the mirrored sender sits on the proxy's node, and joining there would route the
  // transfer into that node and back out.
  const topo::Route other = cluster.route(mirrored_src, alias);
  if (other.links.size() != real.links.size()) return {};
  const auto to = [&](topo::LinkId l) { return cluster.links[static_cast<std::size_t>(l)].to; };
  for (std::size_t i = real.links.size() - 1; i-- > 0;) {  // the vertices before the destination, last first
    if (to(real.links[i]) != to(other.links[i])) continue;
    topo::Route out;
    out.links.assign(real.links.begin(), real.links.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    out.links.insert(out.links.end(), other.links.begin() + static_cast<std::ptrdiff_t>(i) + 1, other.links.end());
    for (topo::LinkId l : out.links) out.latency_ps += cluster.links[static_cast<std::size_t>(l)].latency_ps;
    return out;
  }
  return {};
}

FabricCheck check_mirror_fabric(const Schedule& s, const topo::Cluster& cluster, std::size_t max_routes) {
  FabricCheck out;
  if (s.simulated_ranks <= 0 || s.replicas * std::max(1, s.tp_images) <= 1) return out;
  const TaskGraph& g = s.graph;
  const int n = g.num_ranks(), stages = std::max(1, s.pipeline_stages), tp = std::max(1, s.tp_images);
  const int stage_ranks = n / stages, block = s.simulated_ranks / stages * tp;
  // Rank r shifted by j replica groups within its stage, and turned by k within its TP group (TP
  // images: image k of the simulated TP rank is the k-th of its group).
  const auto image = [&](int r, int j, int k = 0) {
    const int first = r / stage_ranks * stage_ranks, local = r - first;
    return first + (local - local % tp + j * block) % stage_ranks + (local % tp + k) % tp;
  };
  const int images = s.replicas * tp;
  const auto image_at = [&](int r, int i) { return image(r, i / tp, i % tp); };
  // The pairs the simulated ranks send on.
  std::set<std::pair<int, int>> pairs;
  std::map<std::vector<int>, std::vector<std::vector<int>>> rings_of;
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (const auto* send = std::get_if<SendTask>(&t.kind)) {
      pairs.emplace(t.rank, send->peer);
    } else if (const auto* c = std::get_if<CollectiveTask>(&t.kind)) {
      const int size = static_cast<int>(c->group.size());
      if (size < 2) continue;
      int pos = 0;
      while (c->group[static_cast<std::size_t>(pos)] != t.rank) ++pos;
      if (c->kind == CollectiveKind::all_to_all) {
        for (int other : c->group)
          if (other != t.rank) pairs.emplace(t.rank, other);
        continue;
      }
      auto it = rings_of.find(c->group);
      if (it == rings_of.end()) it = rings_of.emplace(c->group, topo::collective_rings(c->group, cluster)).first;
      for (const std::vector<int>& ring : it->second)
        for (int i = 0; i < size; ++i)
          if (ring[static_cast<std::size_t>(i)] == pos)
            pairs.emplace(t.rank, c->group[static_cast<std::size_t>(ring[static_cast<std::size_t>((i + 1) % size)])]);
    }
  }
  // A pair inside one node, when the simulated group holds whole nodes, has its images inside other
  // nodes, on their links alone: only pairs that leave a node can meet another group's traffic.
  const int node_ranks = [&] {
    int count = 0;
    for (int r = 0; r < cluster.num_ranks(); ++r) count += cluster.node_of(r) == cluster.node_of(0) ? 1 : 0;
    return count;
  }();
  // TP images stay inside their node, on links the simulated rank's transfers may share: kept, but
  // only their turns within the simulated group's nodes (the images in other replica groups are
  // inside other nodes, as above).
  const bool whole_nodes = node_ranks > 0 && block % node_ranks == 0;
  if (whole_nodes && tp == 1)
    for (auto it = pairs.begin(); it != pairs.end();)
      it = cluster.node_of(it->first) == cluster.node_of(it->second) ? pairs.erase(it) : std::next(it);
  // The images checked of a pair: every one, or for a pair inside a node of whole nodes' groups its TP
  // turns alone (the images of the simulated replica group, i < tp).
  const auto images_of = [&](const std::pair<int, int>& p) {
    return whole_nodes && cluster.node_of(p.first) == cluster.node_of(p.second) ? tp : images;
  };
  // Searched together by A*, a route costs about 16 us on a fabric of 2048 nodes (a millisecond each
  // by the plain search): beyond the budget the fabric is taken to repeat unchecked, as it was before
  // this check (docs/schedules.md "Symmetry").
  out.image_routes = 0;
  for (const auto& p : pairs) out.image_routes += static_cast<std::size_t>(images_of(p));
  if (out.image_routes > max_routes) {
    out.checked = false;
    return out;
  }
  // Each pair's route in every replica group (j = 0: the simulated one's own), and the load of each
  // link in the whole job; then the routes the mirrored run takes and the load it puts on each link.
  // Searched together: many routes between nodes take A* (topo::Cluster::routes), ten times faster
  // than a plain search each on dgx-h100-128node.
  std::map<std::pair<int, int>, topo::Route> routes;
  {
    std::vector<std::pair<int, int>> wanted;
    for (const auto& p : pairs)
      for (int i = 0; i < images_of(p); ++i) {
        const std::pair<int, int> image{image_at(p.first, i), image_at(p.second, i)};
        if (routes.emplace(image, topo::Route{}).second) wanted.push_back(image);
      }
    std::vector<topo::Route> found = cluster.routes(wanted);
    for (std::size_t i = 0; i < wanted.size(); ++i) routes[wanted[i]] = std::move(found[i]);
  }
  const auto route = [&](int a, int b) -> const topo::Route& { return routes.at({a, b}); };
  std::map<topo::LinkId, int> job, mirrored;
  for (const auto& p : pairs)
    for (int i = 0; i < images_of(p); ++i)
      for (topo::LinkId l : route(image_at(p.first, i), image_at(p.second, i)).links) ++job[l];
  for (const auto& [a, b] : pairs) {
    const topo::Route& real = route(a, b);
    const topo::Route proxy = proxy_route(cluster, g, a, b, real);
    for (topo::LinkId l : (proxy.links.empty() ? real : proxy).links) ++mirrored[l];
  }
  const auto link_name = [&](topo::LinkId l) {
    return fmt::format("link {}", cluster.links[static_cast<std::size_t>(l)].name);
  };
  const auto reason = [&]() -> std::string {
    for (const auto& p : pairs) {
      const auto [a, b] = p;
      const topo::Route& own = route(a, b);
      for (int i = 1; i < images_of(p); ++i) {
        const int j = i / tp;
        const std::string turned = i % tp == 0 ? std::string() : fmt::format(", turned by {} in its TP group", i % tp);
        const topo::Route& other = route(image_at(a, i), image_at(b, i));
        bool alike = other.links.size() == own.links.size();
        for (std::size_t h = 0; alike && h < own.links.size(); ++h) {
          const topo::Link& x = cluster.links[static_cast<std::size_t>(own.links[h])];
          const topo::Link& y = cluster.links[static_cast<std::size_t>(other.links[h])];
          alike = job[own.links[h]] == job[other.links[h]] && x.bandwidth_bytes_per_s == y.bandwidth_bytes_per_s &&
                  x.latency_ps == y.latency_ps;
          if (!alike)
            return fmt::format("the transfers from rank {} to {} and from {} to {} (its image {} replica group{} on{}) "
                               "cross {} and {}, which carry {} and {} of the job's transfers",
                               a, b, image_at(a, i), image_at(b, i), j, j == 1 ? "" : "s", turned,
                               link_name(own.links[h]), link_name(other.links[h]), job[own.links[h]],
                               job[other.links[h]]);
        }
        if (!alike)
          return fmt::format("the route from rank {} to {} has {} links, its image {} replica group{} on{} ({} to {}) {}",
                             a, b, own.links.size(), j, j == 1 ? "" : "s", turned, image_at(a, i), image_at(b, i),
                             other.links.size());
      }
    }
    for (const auto& [l, count] : mirrored)
      if (job[l] != count)
        return fmt::format("{} carries {} of the job's transfers but {} of the mirrored run's: replica groups share it",
                           link_name(l), job[l], count);
    return {};
  };
  out.asymmetry = reason();
  return out;
}

}  // namespace fusesim::sched
