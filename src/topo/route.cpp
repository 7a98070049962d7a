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
// Dijkstra's label setting stays exact. The Dijkstra that computes the keys is written here, over
// arrays finalize() builds once (each vertex's outgoing links with their key terms, its incoming
// links sorted by source vertex): Boost.Graph's dijkstra_shortest_paths over a filtered graph, its
// key computed through property maps and its heap and colour maps allocated per call, took 25 ms a
// route on a 16,384-GPU rail fabric (tools/make_rail_topology.py --nodes 2048 --spines 64) where this
// takes 0.8 ms, and 0.3 ms where this takes 0.045 on dgx-h100-128node (same routes, bit for bit).
// The predecessor of each vertex is then chosen explicitly among the in-neighbours that lie on a
// shortest path, ordered by vertex id (then link id for parallel links), which makes the tie-break a
// property of the graph and not of the order in which the heap happened to pop vertices. Inside a
// node the first of them is taken. At a fabric switch (a leaf reached from several spines) the
// choice spreads destinations over the equal paths as InfiniBand fat-tree routing does: D-mod-K
// (Zahavi et al., "Optimized InfiniBand fat-tree routing for shift all-to-all communication
// patterns", 2010; OpenSM's ftree engine), the candidate at position (destination node mod number
// of candidates). Taking the first everywhere sent every cross-rail flow of a rail-optimized fabric
// through spine 0 and made four 400 Gb/s spines one.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fusesim/topo/cluster.hpp"

namespace fusesim::topo {

namespace {

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

}  // namespace

struct Cluster::Graph {
  // A link as the search follows it: where it leads and what it adds to a path's key (one hop).
  struct OutArc {
    TimePs latency_ps = 0;
    std::int64_t bandwidth_bytes_per_s = 0;
    VertexId to = 0;
    std::int32_t pcie = 0;  // 1 for a PCIe link
  };
  // A link as route reconstruction walks it back.
  struct InArc {
    VertexId from = 0;
    LinkId link = 0;
  };

  // Compressed rows: vertex v's outgoing links are out_arcs[out_begin[v] .. out_begin[v + 1]), its
  // incoming ones in_arcs[in_begin[v] .. in_begin[v + 1]), these sorted by source vertex, then link
  // id (the tie-break order of predecessor_links).
  std::vector<std::size_t> out_begin;
  std::vector<OutArc> out_arcs;
  std::vector<std::size_t> in_begin;
  std::vector<InArc> in_arcs;
  std::vector<char> is_accelerator;    // by vertex
  std::vector<char> is_fabric;         // by vertex: a switch outside every node (leaf, spine)
  std::vector<int> vertex_node;        // by vertex: its node, -1 outside every node
  std::vector<TimePs> link_latency_ps;  // by link
  std::vector<char> link_is_pcie;       // by link
  std::vector<std::int64_t> link_bandwidth;  // by link, bytes/s rounded
  std::vector<VertexId> link_from;      // by link
  std::vector<VertexId> rank_vertex;

  std::size_t num_vertices() const { return is_accelerator.size(); }

  // Edges leaving an accelerator other than the source are not followed: a route never relays
  // through a third device (that would be a store-and-forward by a program, not a path in the fabric).
  bool transits(VertexId u, VertexId source) const {
    return u == source || !is_accelerator[static_cast<std::size_t>(u)];
  }

  Distance weight(LinkId link) const {
    const auto l = static_cast<std::size_t>(link);
    return Distance{link_is_pcie[l], link_latency_ps[l], 1, link_bandwidth[l]};
  }

  // Distances from `source` over the no-transit subgraph; with `target` set, stops as soon as the
  // target is final (every vertex on one of its shortest paths is then final too: each lies strictly
  // closer, since a hop adds at least one to the key). Only final distances are read afterwards
  // (predecessor_links: an in-neighbour whose distance plus the link equals a final distance is
  // strictly closer, hence final), so the order in which equal keys leave the heap changes nothing.
  std::vector<Distance> search(VertexId source, std::optional<VertexId> target) const {
    // Vertices wait in runs: consecutive relaxations that give one key (a leaf reaching its 2048
    // NICs, then each of those its PCIe switch) share one heap entry, so that the heap holds tens of
    // keys where it would hold thousands of vertices. Which of a key's vertices leaves first changes
    // nothing (above).
    struct Run {
      Distance d;
      std::size_t begin = 0;  // waiting[begin .. end)
      std::size_t end = 0;
    };
    // std::priority_queue keeps its greatest entry on top: "after" puts the least key there.
    const auto after = [](const Run& a, const Run& b) { return DistanceLess{}(b.d, a.d); };
    std::priority_queue<Run, std::vector<Run>, decltype(after)> heap(after);
    std::vector<VertexId> waiting;
    std::vector<Distance> dist(num_vertices(), kUnreached);
    dist[static_cast<std::size_t>(source)] = Distance{};
    waiting.push_back(source);
    heap.push(Run{Distance{}, 0, 1});
    while (!heap.empty()) {
      const Run run = heap.top();
      heap.pop();
      Run next{kUnreached, waiting.size(), waiting.size()};
      for (std::size_t w = run.begin; w < run.end; ++w) {
        const VertexId v = waiting[w];
        const auto u = static_cast<std::size_t>(v);
        // A vertex waits again each time its key drops (no decrease-key); only its wait under its
        // current key counts, the others are stale.
        if (!(run.d == dist[u])) continue;
        if (target && v == *target) return dist;
        if (!transits(v, source)) continue;
        for (std::size_t i = out_begin[u]; i < out_begin[u + 1]; ++i) {
          const OutArc& a = out_arcs[i];
          const Distance d{run.d.pcie_links + a.pcie, run.d.latency_ps + a.latency_ps, run.d.hops + 1,
                           std::min(run.d.bottleneck_bytes_per_s, a.bandwidth_bytes_per_s)};
          Distance& to = dist[static_cast<std::size_t>(a.to)];
          if (!DistanceLess{}(d, to)) continue;
          to = d;
          // An accelerator other than the source relays nothing, so unless it is the target its key
          // is final once every vertex before it is: it need not wait (16,384 of them on a
          // 2048-node fabric).
          if (!transits(a.to, source) && !(target && a.to == *target)) continue;
          if (!(d == next.d)) {
            if (next.begin < next.end) heap.push(next);
            next = Run{d, waiting.size(), waiting.size()};
          }
          waiting.push_back(a.to);
          ++next.end;
        }
      }
      if (next.begin < next.end) heap.push(next);
    }
    return dist;
  }

  // The links by which shortest paths from `source` enter `v`, appended to `out` ordered by
  // predecessor id, then link id; returns how many. None when no path reaches v.
  std::size_t predecessor_links(VertexId source, VertexId v, const std::vector<Distance>& dist,
                                std::vector<LinkId>& out) const {
    const auto vi = static_cast<std::size_t>(v);
    if (dist[vi] == kUnreached) return 0;
    const std::size_t before = out.size();
    const DistanceCombine combine;
    for (std::size_t i = in_begin[vi]; i < in_begin[vi + 1]; ++i) {
      const InArc& a = in_arcs[i];
      if (!transits(a.from, source)) continue;
      const Distance& du = dist[static_cast<std::size_t>(a.from)];
      if (du == kUnreached || !(combine(du, weight(a.link)) == dist[vi])) continue;
      out.push_back(a.link);
    }
    return out.size() - before;
  }

  // Routes from one source to many ranks share their first hops: each vertex's predecessor links
  // are worked out once, vertex v's being links[first[v] .. first[v] + count[v]) once a route has
  // asked for them (first[v] is kNotAsked until then).
  struct PredecessorCache {
    static constexpr std::size_t kNotAsked = std::numeric_limits<std::size_t>::max();
    std::vector<LinkId> links;
    std::vector<std::size_t> first;
    std::vector<std::size_t> count;
    explicit PredecessorCache(std::size_t num_vertices) : first(num_vertices, kNotAsked), count(num_vertices, 0) {}
  };

  // The one of `candidates` a route towards a destination on node `dest_node` takes into `v`.
  LinkId choose(VertexId v, std::span<const LinkId> candidates, int dest_node) const {
    if (candidates.empty()) return -1;
    if (candidates.size() == 1 || !is_fabric[static_cast<std::size_t>(v)] || dest_node < 0) return candidates.front();
    return candidates[static_cast<std::size_t>(dest_node) % candidates.size()];
  }

  Route build(VertexId source, VertexId dest, const std::vector<Distance>& dist, PredecessorCache* cache) const {
    Route r;
    if (dist[static_cast<std::size_t>(dest)] == kUnreached)
      throw std::runtime_error("no route between vertices " + std::to_string(source) + " and " +
                               std::to_string(dest) + " (disconnected topology)");
    const int dest_node = vertex_node[static_cast<std::size_t>(dest)];
    // Each link back towards the source takes one hop off the key: the route has exactly `hops`
    // links, filled from the destination end.
    auto k = static_cast<std::size_t>(dist[static_cast<std::size_t>(dest)].hops);
    r.links.resize(k);
    std::vector<LinkId> scratch;  // without a cache: the current vertex's predecessor links
    VertexId v = dest;
    while (v != source) {
      std::span<const LinkId> candidates;
      if (cache) {
        const auto vi = static_cast<std::size_t>(v);
        if (cache->first[vi] == PredecessorCache::kNotAsked) {
          cache->first[vi] = cache->links.size();
          cache->count[vi] = predecessor_links(source, v, dist, cache->links);
        }
        candidates = std::span<const LinkId>(cache->links).subspan(cache->first[vi], cache->count[vi]);
      } else {
        scratch.clear();
        predecessor_links(source, v, dist, scratch);
        candidates = scratch;
      }
      const LinkId l = choose(v, candidates, dest_node);
      if (l < 0 || k == 0) throw std::logic_error("route reconstruction lost its way");
      r.links[--k] = l;
      v = link_from[static_cast<std::size_t>(l)];
    }
    if (k != 0) throw std::logic_error("route reconstruction lost its way");
    r.latency_ps = dist[static_cast<std::size_t>(dest)].latency_ps;
    return r;
  }
};

void Cluster::finalize() {
  auto graph = std::make_shared<Graph>();
  const std::size_t nv = vertices.size();
  graph->is_accelerator.resize(nv, 0);
  graph->is_fabric.resize(nv, 0);
  graph->vertex_node.resize(nv, -1);
  for (std::size_t v = 0; v < nv; ++v) {
    graph->is_accelerator[v] = vertices[v].kind == VertexKind::accelerator ? 1 : 0;
    graph->is_fabric[v] = vertices[v].kind == VertexKind::switch_ && vertices[v].node < 0 ? 1 : 0;
    graph->vertex_node[v] = vertices[v].node;
  }
  graph->link_latency_ps.reserve(links.size());
  graph->out_begin.assign(nv + 1, 0);
  graph->in_begin.assign(nv + 1, 0);
  for (std::size_t i = 0; i < links.size(); ++i) {
    const Link& l = links[i];
    if (l.from < 0 || l.to < 0 || static_cast<std::size_t>(l.from) >= nv || static_cast<std::size_t>(l.to) >= nv)
      throw std::logic_error("link " + l.name + " names a vertex that does not exist");
    if (l.latency_ps < 0) throw std::logic_error("link " + l.name + " has a negative latency");
    ++graph->out_begin[static_cast<std::size_t>(l.from) + 1];
    ++graph->in_begin[static_cast<std::size_t>(l.to) + 1];
    graph->link_latency_ps.push_back(l.latency_ps);
    graph->link_is_pcie.push_back(l.kind == LinkKind::pcie ? 1 : 0);
    graph->link_bandwidth.push_back(static_cast<std::int64_t>(std::llround(std::min(l.bandwidth_bytes_per_s, 9e18))));
    graph->link_from.push_back(l.from);
  }
  for (std::size_t v = 0; v < nv; ++v) {
    graph->out_begin[v + 1] += graph->out_begin[v];
    graph->in_begin[v + 1] += graph->in_begin[v];
  }
  graph->out_arcs.resize(links.size());
  graph->in_arcs.resize(links.size());
  std::vector<std::size_t> out_next(graph->out_begin.begin(), graph->out_begin.end() - 1);
  std::vector<std::size_t> in_next(graph->in_begin.begin(), graph->in_begin.end() - 1);
  for (std::size_t i = 0; i < links.size(); ++i) {
    const Link& l = links[i];
    graph->out_arcs[out_next[static_cast<std::size_t>(l.from)]++] =
        Graph::OutArc{graph->link_latency_ps[i], graph->link_bandwidth[i], l.to, graph->link_is_pcie[i]};
    // Links are visited in id order, so each vertex's incoming links are sorted by link id already;
    // the stable sort below orders them by source vertex without disturbing that.
    graph->in_arcs[in_next[static_cast<std::size_t>(l.to)]++] = Graph::InArc{l.from, static_cast<LinkId>(i)};
  }
  for (std::size_t v = 0; v < nv; ++v)
    std::stable_sort(graph->in_arcs.begin() + static_cast<std::ptrdiff_t>(graph->in_begin[v]),
                     graph->in_arcs.begin() + static_cast<std::ptrdiff_t>(graph->in_begin[v + 1]),
                     [](const Graph::InArc& a, const Graph::InArc& b) { return a.from < b.from; });
  for (VertexId v : rank_vertex)
    if (v < 0 || static_cast<std::size_t>(v) >= nv || !graph->is_accelerator[static_cast<std::size_t>(v)])
      throw std::logic_error("rank_vertex names a vertex that is not an accelerator");
  graph->rank_vertex = rank_vertex;
  graph_ = std::move(graph);
}

double Cluster::bottleneck_bytes_per_s(const Route& route) const {
  double b = std::numeric_limits<double>::infinity();
  for (LinkId l : route.links) b = std::min(b, links[static_cast<std::size_t>(l)].bandwidth_bytes_per_s);
  return b;
}

Route Cluster::route(int src_rank, int dst_rank) const {
  if (!graph_) throw std::logic_error("Cluster::route called before finalize()");
  if (src_rank == dst_rank) throw std::invalid_argument("Cluster::route: source and destination are the same rank");
  const VertexId s = graph_->rank_vertex.at(static_cast<std::size_t>(src_rank));
  const VertexId d = graph_->rank_vertex.at(static_cast<std::size_t>(dst_rank));
  const auto dist = graph_->search(s, d);
  return graph_->build(s, d, dist, nullptr);
}

std::vector<Route> Cluster::routes_from(int src_rank) const {
  if (!graph_) throw std::logic_error("Cluster::routes_from called before finalize()");
  const VertexId s = graph_->rank_vertex.at(static_cast<std::size_t>(src_rank));
  const auto dist = graph_->search(s, std::nullopt);
  Graph::PredecessorCache cache(graph_->num_vertices());
  std::vector<Route> out(graph_->rank_vertex.size());
  for (std::size_t r = 0; r < out.size(); ++r) {
    if (static_cast<int>(r) == src_rank) continue;
    out[r] = graph_->build(s, graph_->rank_vertex[r], dist, &cache);
  }
  return out;
}

}  // namespace fusesim::topo
