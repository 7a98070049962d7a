// Routing over the link graph. The search key of a path is (sum of link latencies, number of links),
// compared lexicographically: latency decides, and among equally fast paths the one with fewer hops
// wins, so a zero-latency link still costs something and no path loops. Boost.Graph's Dijkstra
// computes the keys; the predecessor of each vertex is then chosen explicitly as the lowest-id
// in-neighbour that lies on a shortest path (lowest link id for parallel links), which makes the
// tie-break a property of the graph and not of the order in which the heap happened to pop vertices.
#include <algorithm>
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

// Path key: latency first, then hop count.
struct Distance {
  TimePs latency_ps = 0;
  std::int64_t hops = 0;
  friend bool operator==(const Distance&, const Distance&) = default;
};

struct DistanceLess {
  bool operator()(const Distance& a, const Distance& b) const {
    return a.latency_ps != b.latency_ps ? a.latency_ps < b.latency_ps : a.hops < b.hops;
  }
};

constexpr Distance kUnreached{std::numeric_limits<TimePs>::max(), std::numeric_limits<std::int64_t>::max()};

// Saturates so that combining with "unreached" stays unreached instead of overflowing.
struct DistanceCombine {
  Distance operator()(const Distance& a, const Distance& b) const {
    if (a == kUnreached || b == kUnreached) return kUnreached;
    return Distance{a.latency_ps + b.latency_ps, a.hops + b.hops};
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
  std::vector<TimePs> link_latency_ps;  // by link
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

  Distance weight(const EdgeDesc& e) const { return Distance{link_latency_ps[g[e].link], 1}; }

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
                      .distance_zero(Distance{0, 0});
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

  // The link by which a shortest path from `source` enters `v`: lowest predecessor id, then lowest
  // link id. -1 when no path reaches v.
  LinkId predecessor_link(VertexDesc source, VertexDesc v, const std::vector<Distance>& dist) const {
    if (dist[v] == kUnreached) return -1;
    VertexDesc best_u = 0;
    LinkId best_link = -1;
    const DistanceCombine combine;
    for (auto [it, end] = boost::in_edges(v, g); it != end; ++it) {
      const VertexDesc u = boost::source(*it, g);
      if (u != source && is_accelerator[u]) continue;
      if (dist[u] == kUnreached || !(combine(dist[u], weight(*it)) == dist[v])) continue;
      const LinkId link = g[*it].link;
      if (best_link < 0 || u < best_u || (u == best_u && link < best_link)) {
        best_u = u;
        best_link = link;
      }
    }
    return best_link;
  }

  Route build(VertexDesc source, VertexDesc dest, const std::vector<Distance>& dist,
              std::vector<LinkId>* pred_cache) const {
    Route r;
    if (dist[dest] == kUnreached)
      throw std::runtime_error("no route between vertices " + std::to_string(source) + " and " +
                               std::to_string(dest) + " (disconnected topology)");
    VertexDesc v = dest;
    while (v != source) {
      LinkId l = -1;
      if (pred_cache) {
        LinkId& cached = (*pred_cache)[v];
        if (cached == -2) cached = predecessor_link(source, v, dist);
        l = cached;
      } else {
        l = predecessor_link(source, v, dist);
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
  for (std::size_t v = 0; v < nv; ++v)
    graph->is_accelerator[v] = vertices[v].kind == VertexKind::accelerator ? 1 : 0;
  graph->link_latency_ps.reserve(links.size());
  for (std::size_t i = 0; i < links.size(); ++i) {
    const Link& l = links[i];
    if (l.from < 0 || l.to < 0 || static_cast<std::size_t>(l.from) >= nv || static_cast<std::size_t>(l.to) >= nv)
      throw std::logic_error("link " + l.name + " names a vertex that does not exist");
    if (l.latency_ps < 0) throw std::logic_error("link " + l.name + " has a negative latency");
    boost::add_edge(static_cast<VertexDesc>(l.from), static_cast<VertexDesc>(l.to),
                    EdgeData{static_cast<LinkId>(i)}, graph->g);
    graph->link_latency_ps.push_back(l.latency_ps);
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
  return graph_->build(s, d, dist, nullptr);
}

std::vector<Route> Cluster::routes_from(int src_rank) const {
  if (!graph_) throw std::logic_error("Cluster::routes_from called before finalize()");
  const auto s = static_cast<VertexDesc>(graph_->rank_vertex.at(static_cast<std::size_t>(src_rank)));
  const auto dist = graph_->search(s, std::nullopt);
  // Routes to many ranks share their first hops; each vertex's predecessor is worked out once.
  std::vector<LinkId> pred(boost::num_vertices(graph_->g), -2);
  std::vector<Route> out(graph_->rank_vertex.size());
  for (std::size_t r = 0; r < out.size(); ++r) {
    if (static_cast<int>(r) == src_rank) continue;
    out[r] = graph_->build(s, static_cast<VertexDesc>(graph_->rank_vertex[r]), dist, &pred);
  }
  return out;
}

}  // namespace fusesim::topo
