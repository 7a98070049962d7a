// Routing over the link graph, as NCCL chooses paths (src/graph/paths.cpp: the path type first,
// NVLink before PCIe, then its speed): the search key of a path is (PCIe links on it, sum of link
// latencies, number of links, bottleneck bandwidth), compared lexicographically. Scale-up links
// (NVLink, HCCS, xGMI) and the network cost nothing in the first term, PCIe one per link: two GPUs of
// a node with both an NVLink and a shared PCIe switch talk over NVLink even where the PCIe switch is
// the lower latency (it was, in the documented 4-NIC example, and a Qwen2-72B layer ran 2x slower).
// Between nodes every path crosses the same PCIe links to its NIC, so latency decides as before.
// Then latency; among equally fast paths the one with fewer hops wins, so a zero-latency link still
// costs something and no path loops; then the wider bottleneck. Every term of the key is preserved by
// extending two paths with the same link (the bottleneck only as a last tie-break, where it is), so
// Dijkstra's label setting stays exact. Boost.Graph's Dijkstra
// computes the keys; the predecessor of each vertex is then chosen explicitly among the in-neighbours
// that lie on a shortest path, ordered by vertex id (then link id for parallel links), which makes the
// tie-break a property of the graph and not of the order in which the heap happened to pop vertices.
// Inside a node the first of them is taken. At a fabric switch (a leaf reached from several spines)
// the choice spreads destinations over the equal paths as InfiniBand fat-tree routing does: D-mod-K
// (Zahavi et al., "Optimized InfiniBand fat-tree routing for shift all-to-all communication
// patterns", 2010; OpenSM's ftree engine), the candidate at position (destination node mod number
// of candidates). Taking the first everywhere sent every cross-rail flow of a rail-optimized fabric
// through spine 0 and made four 400 Gb/s spines one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dijkstra_shortest_paths.hpp>
#include <boost/graph/filtered_graph.hpp>
#include <boost/property_map/function_property_map.hpp>
#include <boost/property_map/property_map.hpp>

#include "fusesim/topo/cluster.hpp"

namespace fusesim::topo {

namespace {

struct EdgeData {
  LinkId link = 0;
};

using BaseGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, boost::no_property, EdgeData>;
using VertexDesc = boost::graph_traits<BaseGraph>::vertex_descriptor;
using EdgeDesc = boost::graph_traits<BaseGraph>::edge_descriptor;

// Path key: PCIe links, then latency, then hop count, then (wider first) bottleneck bandwidth.
struct Distance {
  std::int64_t pcie_links = 0;
  TimePs latency_ps = 0;
  std::int64_t hops = 0;
  std::int64_t bottleneck_bytes_per_s = std::numeric_limits<std::int64_t>::max();
  friend bool operator==(const Distance&, const Distance&) = default;
};

struct DistanceLess {
  bool operator()(const Distance& a, const Distance& b) const {
    if (a.pcie_links != b.pcie_links) return a.pcie_links < b.pcie_links;
    if (a.latency_ps != b.latency_ps) return a.latency_ps < b.latency_ps;
    if (a.hops != b.hops) return a.hops < b.hops;
    return a.bottleneck_bytes_per_s > b.bottleneck_bytes_per_s;
  }
};

constexpr Distance kUnreached{std::numeric_limits<std::int64_t>::max(), std::numeric_limits<TimePs>::max(),
                              std::numeric_limits<std::int64_t>::max(), 0};

// Saturates so that combining with "unreached" stays unreached instead of overflowing.
struct DistanceCombine {
  Distance operator()(const Distance& a, const Distance& b) const {
    if (a == kUnreached || b == kUnreached) return kUnreached;
    return Distance{a.pcie_links + b.pcie_links, a.latency_ps + b.latency_ps, a.hops + b.hops,
                    std::min(a.bottleneck_bytes_per_s, b.bottleneck_bytes_per_s)};
  }
};

// Stops the search once the one destination we want has its final distance.
struct FoundTarget {};
struct StopAtTarget : boost::default_dijkstra_visitor {
  VertexDesc target;
  explicit StopAtTarget(VertexDesc t) : target(t) {}
  template <class G>
  void examine_vertex(VertexDesc u, const G&) const {
    if (u == target) throw FoundTarget{};
  }
};

}  // namespace

struct Cluster::Graph {
  BaseGraph g;
  std::vector<char> is_accelerator;    // by vertex
  std::vector<char> is_fabric;         // by vertex: a switch outside every node (leaf, spine)
  std::vector<int> vertex_node;        // by vertex: its node, -1 outside every node
  std::vector<TimePs> link_latency_ps;  // by link
  std::vector<char> link_is_pcie;       // by link
  std::vector<std::int64_t> link_bandwidth;  // by link, bytes/s rounded
  std::vector<VertexId> link_from;      // by link
  std::vector<VertexId> rank_vertex;

  // Edges leaving an accelerator other than the source are hidden: a route never relays through a
  // third device (that would be a store-and-forward by a program, not a path in the fabric).
  struct NoTransit {
    const Graph* graph = nullptr;
    VertexDesc source = 0;
    bool operator()(const EdgeDesc& e) const {
      const VertexDesc u = boost::source(e, graph->g);
      return u == source || !graph->is_accelerator[u];
    }
  };

  Distance weight(const EdgeDesc& e) const {
    const auto l = static_cast<std::size_t>(g[e].link);
    return Distance{link_is_pcie[l], link_latency_ps[l], 1, link_bandwidth[l]};
  }

  // Distances from `source` over the no-transit subgraph; with `target` set, stops as soon as the
  // target is final (every vertex on one of its shortest paths is then final too: each lies strictly
  // closer, since a hop adds at least one to the key).
  std::vector<Distance> search(VertexDesc source, std::optional<VertexDesc> target) const {
    boost::filtered_graph<BaseGraph, NoTransit> view(g, NoTransit{this, source});
    std::vector<Distance> dist(boost::num_vertices(g), kUnreached);
    auto weight_map = boost::make_function_property_map<EdgeDesc, Distance>(
        [this](const EdgeDesc& e) { return weight(e); });
    auto index = boost::get(boost::vertex_index, g);
    auto dist_map = boost::make_iterator_property_map(dist.begin(), index);
    auto params = boost::weight_map(weight_map)
                      .distance_map(dist_map)
                      .distance_compare(DistanceLess{})
                      .distance_combine(DistanceCombine{})
                      .distance_inf(kUnreached)
                      .distance_zero(Distance{});
    if (target) {
      try {
        boost::dijkstra_shortest_paths(view, source, params.visitor(StopAtTarget(*target)));
      } catch (const FoundTarget&) {
      }
    } else {
      boost::dijkstra_shortest_paths(view, source, params);
    }
    return dist;
  }

  // The links by which shortest paths from `source` enter `v`, ordered by predecessor id, then link
  // id. Empty when no path reaches v.
  std::vector<LinkId> predecessor_links(VertexDesc source, VertexDesc v, const std::vector<Distance>& dist) const {
    std::vector<std::pair<VertexDesc, LinkId>> found;
    if (dist[v] == kUnreached) return {};
    const DistanceCombine combine;
    for (auto [it, end] = boost::in_edges(v, g); it != end; ++it) {
      const VertexDesc u = boost::source(*it, g);
      if (u != source && is_accelerator[u]) continue;
      if (dist[u] == kUnreached || !(combine(dist[u], weight(*it)) == dist[v])) continue;
      found.emplace_back(u, g[*it].link);
    }
    std::sort(found.begin(), found.end());
    std::vector<LinkId> links;
    links.reserve(found.size());
    for (const auto& [u, link] : found) links.push_back(link);
    return links;
  }

  // The one of `candidates` a route towards a destination on node `dest_node` takes into `v`.
  LinkId choose(VertexDesc v, const std::vector<LinkId>& candidates, int dest_node) const {
    if (candidates.empty()) return -1;
    if (candidates.size() == 1 || !is_fabric[v] || dest_node < 0) return candidates.front();
    return candidates[static_cast<std::size_t>(dest_node) % candidates.size()];
  }

  Route build(VertexDesc source, VertexDesc dest, const std::vector<Distance>& dist,
              std::vector<std::vector<LinkId>>* pred_cache, std::vector<char>* cached) const {
    Route r;
    if (dist[dest] == kUnreached)
      throw std::runtime_error("no route between vertices " + std::to_string(source) + " and " +
                               std::to_string(dest) + " (disconnected topology)");
    const int dest_node = vertex_node[dest];
    VertexDesc v = dest;
    while (v != source) {
      LinkId l = -1;
      if (pred_cache) {
        if (!(*cached)[v]) {
          (*pred_cache)[v] = predecessor_links(source, v, dist);
          (*cached)[v] = 1;
        }
        l = choose(v, (*pred_cache)[v], dest_node);
      } else {
        l = choose(v, predecessor_links(source, v, dist), dest_node);
      }
      if (l < 0) throw std::logic_error("route reconstruction lost its way");
      r.links.push_back(l);
      v = static_cast<VertexDesc>(link_from[static_cast<std::size_t>(l)]);
    }
    std::reverse(r.links.begin(), r.links.end());
    r.latency_ps = dist[dest].latency_ps;
    return r;
  }
};

void Cluster::finalize() {
  auto graph = std::make_shared<Graph>();
  const std::size_t nv = vertices.size();
  graph->g = BaseGraph(nv);
  graph->is_accelerator.resize(nv, 0);
  graph->is_fabric.resize(nv, 0);
  graph->vertex_node.resize(nv, -1);
  for (std::size_t v = 0; v < nv; ++v) {
    graph->is_accelerator[v] = vertices[v].kind == VertexKind::accelerator ? 1 : 0;
    graph->is_fabric[v] = vertices[v].kind == VertexKind::switch_ && vertices[v].node < 0 ? 1 : 0;
    graph->vertex_node[v] = vertices[v].node;
  }
  graph->link_latency_ps.reserve(links.size());
  for (std::size_t i = 0; i < links.size(); ++i) {
    const Link& l = links[i];
    if (l.from < 0 || l.to < 0 || static_cast<std::size_t>(l.from) >= nv || static_cast<std::size_t>(l.to) >= nv)
      throw std::logic_error("link " + l.name + " names a vertex that does not exist");
    if (l.latency_ps < 0) throw std::logic_error("link " + l.name + " has a negative latency");
    boost::add_edge(static_cast<VertexDesc>(l.from), static_cast<VertexDesc>(l.to),
                    EdgeData{static_cast<LinkId>(i)}, graph->g);
    graph->link_latency_ps.push_back(l.latency_ps);
    graph->link_is_pcie.push_back(l.kind == LinkKind::pcie ? 1 : 0);
    graph->link_bandwidth.push_back(static_cast<std::int64_t>(std::llround(std::min(l.bandwidth_bytes_per_s, 9e18))));
    graph->link_from.push_back(l.from);
  }
  for (VertexId v : rank_vertex)
    if (v < 0 || static_cast<std::size_t>(v) >= nv || !graph->is_accelerator[static_cast<std::size_t>(v)])
      throw std::logic_error("rank_vertex names a vertex that is not an accelerator");
  graph->rank_vertex = rank_vertex;
  graph_ = std::move(graph);
}

Route Cluster::route(int src_rank, int dst_rank) const {
  if (!graph_) throw std::logic_error("Cluster::route called before finalize()");
  if (src_rank == dst_rank) throw std::invalid_argument("Cluster::route: source and destination are the same rank");
  const auto s = static_cast<VertexDesc>(graph_->rank_vertex.at(static_cast<std::size_t>(src_rank)));
  const auto d = static_cast<VertexDesc>(graph_->rank_vertex.at(static_cast<std::size_t>(dst_rank)));
  const auto dist = graph_->search(s, d);
  return graph_->build(s, d, dist, nullptr, nullptr);
}

std::vector<Route> Cluster::routes_from(int src_rank) const {
  if (!graph_) throw std::logic_error("Cluster::routes_from called before finalize()");
  const auto s = static_cast<VertexDesc>(graph_->rank_vertex.at(static_cast<std::size_t>(src_rank)));
  const auto dist = graph_->search(s, std::nullopt);
  // Routes to many ranks share their first hops; each vertex's predecessors are worked out once.
  std::vector<std::vector<LinkId>> pred(boost::num_vertices(graph_->g));
  std::vector<char> cached(boost::num_vertices(graph_->g), 0);
  std::vector<Route> out(graph_->rank_vertex.size());
  for (std::size_t r = 0; r < out.size(); ++r) {
    if (static_cast<int>(r) == src_rank) continue;
    out[r] = graph_->build(s, static_cast<VertexDesc>(graph_->rank_vertex[r]), dist, &pred, &cached);
  }
  return out;
}

}  // namespace fusesim::topo
