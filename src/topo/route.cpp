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
//
// A route between two nodes is searched as A* (Hart, Nilsson and Raphael, 1968), not as a plain
// Dijkstra: the PCIe-first key makes every NIC of the fabric (two PCIe links from the source) and
// every PCIe switch (three) final before a GPU of another node (four), so a plain search from one GPU
// to one other explored the whole 128-node fabric (3,200 vertices) for a route of eight links, and
// the mirror check's 392 such searches were a third of a default 32B step's instructions. The lower
// bound on the rest of a path from a vertex to the target comes from the fabric's shape: every link
// joins two vertices of one node or touches a vertex outside every node (leaves, spines), so a path
// from outside into the target's node ends with its last outside vertex b and a tail inside the node:
// the least key from each outside vertex to each other (once per cluster: the links between them and
// the least way through any node, closed over) and the least tail from each outside vertex (a search
// over the target's node) give each outside vertex's exact distance to the target, and a vertex of a
// third node is at least its node's way out (the least link out of any node) plus the least of those.
// With the source's side searched inside its node, that gives the shortest key itself: a vertex past
// it is on no shortest path and is not even reached (a leaf follows one of its 2048 links down, into
// the target's node, not all of them). The search stops only once every waiting
// key (distance so far plus bound) exceeds the target's: every vertex of every shortest path to the
// target is then final with its exact key, which is all that route reconstruction reads, so the
// routes (ties and D-mod-K choices included) are those of the plain search, link for link
// (tests/topo/test_routing.cpp compares them on every shipped cluster and on perturbed fabrics).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
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

// The additive terms of a key (PCIe links, latency, hops): what a lower bound on the rest of a path
// gives. The bottleneck has no bound to add: a key plus a bound keeps the key's bottleneck.
struct Additive {
  std::int64_t pcie_links = 0;
  TimePs latency_ps = 0;
  std::int64_t hops = 0;
  friend bool operator==(const Additive&, const Additive&) = default;
};

constexpr Additive kNoPath{std::numeric_limits<std::int64_t>::max(), std::numeric_limits<TimePs>::max(),
                           std::numeric_limits<std::int64_t>::max()};

bool additive_less(const Additive& a, const Additive& b) {
  if (a.pcie_links != b.pcie_links) return a.pcie_links < b.pcie_links;
  if (a.latency_ps != b.latency_ps) return a.latency_ps < b.latency_ps;
  return a.hops < b.hops;
}

// The searches inside one node (its ways out, a target's tail): vertices by least key first.
using KeyedVertex = std::pair<Additive, VertexId>;
struct LeastKeyOnTop {  // std::priority_queue keeps its greatest entry on top
  bool operator()(const KeyedVertex& x, const KeyedVertex& y) const { return additive_less(y.first, x.first); }
};
using KeyHeap = std::priority_queue<KeyedVertex, std::vector<KeyedVertex>, LeastKeyOnTop>;

Additive plus(const Additive& a, const Additive& b) {
  if (a == kNoPath || b == kNoPath) return kNoPath;
  return Additive{a.pcie_links + b.pcie_links, a.latency_ps + b.latency_ps, a.hops + b.hops};
}

Additive additive_of(const Distance& d) {
  if (d == kUnreached) return kNoPath;
  return Additive{d.pcie_links, d.latency_ps, d.hops};
}

// A key so far plus a lower bound on the rest: the order in which A* takes vertices.
Distance with_bound(const Distance& d, const Additive& bound) {
  if (d == kUnreached || bound == kNoPath) return kUnreached;
  return Distance{d.pcie_links + bound.pcie_links, d.latency_ps + bound.latency_ps, d.hops + bound.hops,
                  d.bottleneck_bytes_per_s};
}

// Above this many vertices outside every node, the table of their distances (cubic in their number)
// is not built and routes between nodes take the plain search.
constexpr std::size_t kMaxOutsideVertices = 512;

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
  std::vector<VertexId> link_to;        // by link
  std::vector<VertexId> rank_vertex;
  std::size_t outside_count = 0;  // vertices outside every node

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

  // A search's distances by vertex (kUnreached where none), kept between searches so that a search
  // that reaches few vertices (A*) costs what it reaches, not the fabric's size: `touched` lists the
  // vertices whose distance was set, which clear() resets.
  // `reached` holds a bit per vertex, set with its distance, so that reconstruction can pass over the
  // many in-neighbours a search never reached (a leaf's 2048 NICs) without reading their distances.
  struct Workspace {
    std::vector<Distance> dist;
    std::vector<VertexId> touched;
    std::vector<std::uint64_t> reached;
    explicit Workspace(std::size_t num_vertices) : dist(num_vertices, kUnreached), reached((num_vertices + 63) / 64, 0) {}
    void reach(VertexId v) {
      touched.push_back(v);
      reached[static_cast<std::size_t>(v) / 64] |= std::uint64_t{1} << (static_cast<std::size_t>(v) % 64);
    }
    bool was_reached(VertexId v) const {
      return (reached[static_cast<std::size_t>(v) / 64] >> (static_cast<std::size_t>(v) % 64)) & 1U;
    }
    void clear() {
      for (VertexId v : touched) {
        dist[static_cast<std::size_t>(v)] = kUnreached;
        reached[static_cast<std::size_t>(v) / 64] = 0;
      }
      touched.clear();
    }
  };

  struct NodeArc {
    int node = 0;
    std::size_t arc = 0;  // into out_arcs
  };

  // What A* needs of the fabric (the header comment).
  struct Outside {
    bool usable = false;                  // every link inside one node or touching an outside vertex
    std::vector<VertexId> vertices;       // the vertices outside every node
    std::vector<std::int32_t> index;      // by vertex: its position in `vertices`, -1 inside a node
    std::vector<Additive> between;        // [i * size + j]: the least key from vertices[i] to vertices[j]
    Additive least_exit = kNoPath;        // the least link from a vertex of a node to an outside one
    std::vector<std::size_t> node_begin;  // vertices of node n: node_vertices[node_begin[n] .. node_begin[n + 1])
    std::vector<VertexId> node_vertices;
    std::vector<std::int32_t> node_position;  // by vertex: its position among its node's vertices
    // By outside index: its links to outside vertices (indices into out_arcs), its links into nodes
    // ordered by node, and the least of those.
    std::vector<std::size_t> fabric_begin, fabric_arcs;
    std::vector<std::size_t> node_begin_arcs;
    std::vector<NodeArc> node_arcs;
    std::vector<Additive> least_node_arc;
  };
  mutable std::once_flag outside_once;
  mutable Outside outside_table;
  mutable std::atomic<bool> outside_built{false};

  // Builds the table on the first call (a small search from each vertex of a node entered from
  // outside, then the outside vertices' distances over the links between them and the ways through
  // nodes: 50 M instructions on a 2048-node rail fabric): worth it for many routes between nodes
  // (Cluster::routes), not for one.
  const Outside& outside() const {
    std::call_once(outside_once, [this] {
      outside_table = build_outside();
      outside_built.store(true, std::memory_order_release);
    });
    return outside_table;
  }
  // The table if built, else null.
  const Outside* outside_if_built() const {
    return outside_built.load(std::memory_order_acquire) ? &outside_table : nullptr;
  }

  // The least key from `start`, a vertex of a node, to each outside vertex (by outside index; kNoPath
  // where none), along vertices of that node (none a device but `start`) and the link out of it. `inside`
  // is scratch.
  void least_ways_out(const Outside& o, VertexId start, std::vector<Additive>& inside,
                      std::vector<Additive>& out_to) const {
    const int node = vertex_node[static_cast<std::size_t>(start)];
    const auto n = static_cast<std::size_t>(node);
    const auto pos = [&](VertexId v) { return static_cast<std::size_t>(o.node_position[static_cast<std::size_t>(v)]); };
    inside.assign(o.node_begin[n + 1] - o.node_begin[n], kNoPath);
    out_to.assign(o.vertices.size(), kNoPath);
    KeyHeap heap;
    inside[pos(start)] = Additive{};
    heap.push({Additive{}, start});
    while (!heap.empty()) {
      const auto [d, v] = heap.top();
      heap.pop();
      if (!(d == inside[pos(v)]) || !transits(v, start)) continue;
      const auto vi = static_cast<std::size_t>(v);
      for (std::size_t k = out_begin[vi]; k < out_begin[vi + 1]; ++k) {
        const OutArc& a = out_arcs[k];
        const Additive through = plus(d, Additive{a.pcie, a.latency_ps, 1});
        const auto to = static_cast<std::size_t>(a.to);
        if (o.index[to] >= 0) {
          Additive& out = out_to[static_cast<std::size_t>(o.index[to])];
          if (additive_less(through, out)) out = through;
        } else if (vertex_node[to] == node) {
          Additive& at = inside[pos(a.to)];
          if (!additive_less(through, at)) continue;
          at = through;
          heap.push({through, a.to});
        }
      }
    }
  }

  Outside build_outside() const {
    Outside o;
    const std::size_t nv = num_vertices();
    o.index.assign(nv, -1);
    o.node_position.assign(nv, -1);
    int nodes = 0;
    for (std::size_t v = 0; v < nv; ++v) {
      if (vertex_node[v] < 0) {
        if (is_accelerator[v]) return o;  // a device outside every node: no node's way out bounds it
        o.index[v] = static_cast<std::int32_t>(o.vertices.size());
        o.vertices.push_back(static_cast<VertexId>(v));
      }
      nodes = std::max(nodes, vertex_node[v] + 1);
    }
    if (o.vertices.empty() || o.vertices.size() > kMaxOutsideVertices) return o;
    for (std::size_t l = 0; l < link_from.size(); ++l) {
      const int a = vertex_node[static_cast<std::size_t>(link_from[l])];
      const int b = vertex_node[static_cast<std::size_t>(link_to[l])];
      if (a >= 0 && b >= 0 && a != b) return o;  // two nodes joined directly: no outside vertex between them
      if (a >= 0 && b < 0) {
        const Additive exit{link_is_pcie[l], link_latency_ps[l], 1};
        if (additive_less(exit, o.least_exit)) o.least_exit = exit;
      }
    }
    o.node_begin.assign(static_cast<std::size_t>(nodes) + 1, 0);
    for (std::size_t v = 0; v < nv; ++v)
      if (vertex_node[v] >= 0) ++o.node_begin[static_cast<std::size_t>(vertex_node[v]) + 1];
    for (std::size_t n = 0; n < static_cast<std::size_t>(nodes); ++n) o.node_begin[n + 1] += o.node_begin[n];
    o.node_vertices.resize(o.node_begin.back());
    std::vector<std::size_t> next(o.node_begin.begin(), o.node_begin.end() - 1);
    for (std::size_t v = 0; v < nv; ++v) {
      if (vertex_node[v] < 0) continue;
      const auto n = static_cast<std::size_t>(vertex_node[v]);
      o.node_position[v] = static_cast<std::int32_t>(next[n] - o.node_begin[n]);
      o.node_vertices[next[n]++] = static_cast<VertexId>(v);
    }
    const std::size_t size = o.vertices.size();
    // Each outside vertex's links, split by where they lead.
    o.fabric_begin.assign(size + 1, 0);
    o.node_begin_arcs.assign(size + 1, 0);
    o.least_node_arc.assign(size, kNoPath);
    for (std::size_t x = 0; x < size; ++x) {
      const auto u = static_cast<std::size_t>(o.vertices[x]);
      const std::size_t first_node_arc = o.node_arcs.size();
      for (std::size_t k = out_begin[u]; k < out_begin[u + 1]; ++k) {
        const OutArc& a = out_arcs[k];
        const int node = vertex_node[static_cast<std::size_t>(a.to)];
        if (node < 0) {
          o.fabric_arcs.push_back(k);
          continue;
        }
        o.node_arcs.push_back(NodeArc{node, k});
        const Additive w{a.pcie, a.latency_ps, 1};
        if (additive_less(w, o.least_node_arc[x])) o.least_node_arc[x] = w;
      }
      std::stable_sort(o.node_arcs.begin() + static_cast<std::ptrdiff_t>(first_node_arc), o.node_arcs.end(),
                       [](const NodeArc& a, const NodeArc& b) { return a.node < b.node; });
      o.fabric_begin[x + 1] = o.fabric_arcs.size();
      o.node_begin_arcs[x + 1] = o.node_arcs.size();
    }
    // The least key between outside vertices: a path between two is links between outside vertices
    // and ways through nodes (in from one outside vertex, along the node's own vertices, none of them a
    // device, out to another), so the least direct link and the least way through any node between
    // each two, closed over (Floyd-Warshall on the outside vertices), give every distance exactly.
    o.between.assign(size * size, kNoPath);
    const auto lower = [](Additive& to, const Additive& from) {
      if (additive_less(from, to)) to = from;
    };
    for (std::size_t x = 0; x < size; ++x) {
      o.between[x * size + x] = Additive{};
      for (std::size_t k = o.fabric_begin[x]; k < o.fabric_begin[x + 1]; ++k) {
        const OutArc& a = out_arcs[o.fabric_arcs[k]];
        lower(o.between[x * size + static_cast<std::size_t>(o.index[static_cast<std::size_t>(a.to)])],
              Additive{a.pcie, a.latency_ps, 1});
      }
    }
    std::vector<Additive> inside, out_to;
    for (std::size_t n = 0; n + 1 < o.node_begin.size(); ++n) {
      const std::size_t first = o.node_begin[n], count = o.node_begin[n + 1] - first;
      for (std::size_t e = 0; e < count; ++e) {
        const VertexId entry = o.node_vertices[first + e];
        const auto ei = static_cast<std::size_t>(entry);
        if (is_accelerator[ei]) continue;  // a device relays nothing
        bool entered = false;
        for (std::size_t i = in_begin[ei]; i < in_begin[ei + 1] && !entered; ++i)
          entered = o.index[static_cast<std::size_t>(in_arcs[i].from)] >= 0;
        if (!entered) continue;
        least_ways_out(o, entry, inside, out_to);
        for (std::size_t i = in_begin[ei]; i < in_begin[ei + 1]; ++i) {
          const std::int32_t from = o.index[static_cast<std::size_t>(in_arcs[i].from)];
          if (from < 0) continue;
          const auto l = static_cast<std::size_t>(in_arcs[i].link);
          const Additive in{link_is_pcie[l], link_latency_ps[l], 1};
          for (std::size_t y = 0; y < size; ++y)
            if (!(out_to[y] == kNoPath)) lower(o.between[static_cast<std::size_t>(from) * size + y], plus(in, out_to[y]));
        }
      }
    }
    for (std::size_t k = 0; k < size; ++k)
      for (std::size_t x = 0; x < size; ++x) {
        const Additive xk = o.between[x * size + k];
        if (xk == kNoPath) continue;
        for (std::size_t y = 0; y < size; ++y) lower(o.between[x * size + y], plus(xk, o.between[k * size + y]));
      }
    o.usable = true;
    return o;
  }

  // A lower bound on the key of the rest of a path from any vertex to one target (A*'s heuristic).
  struct Bounds {
    int target_node = -1;
    std::vector<Additive> outside_to_target;  // by outside index: exact
    Additive other_nodes = kNoPath;           // any vertex of a node other than the target's
    // The least additive key from the source to the target (exact: shortest_between), kNoPath if not
    // known. A vertex whose key plus bound exceeds it lies on no shortest path: its distance is not set.
    Additive shortest = kNoPath;
  };

  Bounds bounds_toward(VertexId target) const {
    const Outside& o = outside();
    Bounds b;
    b.target_node = vertex_node[static_cast<std::size_t>(target)];
    const auto node = static_cast<std::size_t>(b.target_node);
    const std::size_t first = o.node_begin[node], count = o.node_begin[node + 1] - first;
    // The least key from each vertex of the target's node to the target along that node's vertices,
    // searched backwards; a device other than the target relays nothing, so no tail runs through one.
    std::vector<Additive> inside(count, kNoPath);
    const auto pos = [&](VertexId v) { return static_cast<std::size_t>(o.node_position[static_cast<std::size_t>(v)]); };
    KeyHeap heap;
    inside[pos(target)] = Additive{};
    heap.push({Additive{}, target});
    while (!heap.empty()) {
      const auto [d, v] = heap.top();
      heap.pop();
      if (!(d == inside[pos(v)])) continue;
      if (v != target && is_accelerator[static_cast<std::size_t>(v)]) continue;
      const auto vi = static_cast<std::size_t>(v);
      for (std::size_t i = in_begin[vi]; i < in_begin[vi + 1]; ++i) {
        const InArc& a = in_arcs[i];
        if (vertex_node[static_cast<std::size_t>(a.from)] != b.target_node) continue;
        const auto l = static_cast<std::size_t>(a.link);
        const Additive through = plus(Additive{link_is_pcie[l], link_latency_ps[l], 1}, d);
        Additive& to = inside[pos(a.from)];
        if (!additive_less(through, to)) continue;
        to = through;
        heap.push({through, a.from});
      }
    }
    // The least tail from each outside vertex: one link into the node, then the node's own way.
    const std::size_t size = o.vertices.size();
    std::vector<Additive> tail(size, kNoPath);
    for (std::size_t k = 0; k < count; ++k) {
      const VertexId v = o.node_vertices[first + k];
      const auto vi = static_cast<std::size_t>(v);
      if (inside[k] == kNoPath || (v != target && is_accelerator[vi])) continue;
      for (std::size_t i = in_begin[vi]; i < in_begin[vi + 1]; ++i) {
        const InArc& a = in_arcs[i];
        const std::int32_t x = o.index[static_cast<std::size_t>(a.from)];
        if (x < 0) continue;
        const auto l = static_cast<std::size_t>(a.link);
        const Additive through = plus(Additive{link_is_pcie[l], link_latency_ps[l], 1}, inside[k]);
        if (additive_less(through, tail[static_cast<std::size_t>(x)])) tail[static_cast<std::size_t>(x)] = through;
      }
    }
    // Only the outside vertices with a link into the node end a path there (a rail fabric: its leaves).
    std::vector<std::size_t> entries;
    for (std::size_t j = 0; j < size; ++j)
      if (!(tail[j] == kNoPath)) entries.push_back(j);
    b.outside_to_target.assign(size, kNoPath);
    Additive least = kNoPath;
    for (std::size_t i = 0; i < size; ++i) {
      Additive& best = b.outside_to_target[i];
      for (std::size_t j : entries) {
        const Additive through = plus(o.between[i * size + j], tail[j]);
        if (additive_less(through, best)) best = through;
      }
      if (additive_less(best, least)) least = best;
    }
    b.other_nodes = plus(o.least_exit, least);
    return b;
  }

  // The additive key of the shortest path from `source` to the target of `b` on another node: a path
  // leaves the source's node by a link to its first outside vertex y, the part before it inside the
  // node (searched here), the rest y's exact distance to the target. Exact, as that decomposition
  // covers every path.
  Additive shortest_between(VertexId source, const Bounds& b) const {
    std::vector<Additive> inside, out_to;
    least_ways_out(outside(), source, inside, out_to);
    Additive best = kNoPath;
    for (std::size_t y = 0; y < out_to.size(); ++y) {
      const Additive path = plus(out_to[y], b.outside_to_target[y]);
      if (additive_less(path, best)) best = path;
    }
    return best;
  }

  Additive bound(const Bounds& b, VertexId v) const {
    const int node = vertex_node[static_cast<std::size_t>(v)];
    if (node == b.target_node) return Additive{};
    if (node < 0) return b.outside_to_target[static_cast<std::size_t>(outside_table.index[static_cast<std::size_t>(v)])];
    return b.other_nodes;
  }

  // Distances from `source` over the no-transit subgraph. With `target` set and no bounds, stops as
  // soon as the target is final (every vertex on one of its shortest paths is then final too: each
  // lies strictly closer, since a hop adds at least one to the key). With bounds toward the target,
  // takes vertices by key plus bound (A*) and stops once the least waiting one exceeds the target's
  // key (the header comment). Only final distances are read afterwards (predecessor_links: an
  // in-neighbour whose distance plus the link equals a final distance is strictly closer, hence
  // final), so the order in which equal keys leave the heap changes nothing.
  // `ws` must be clear on entry; it holds the distances on return.
  void search(VertexId source, std::optional<VertexId> target, const Bounds* bounds, Workspace& ws) const {
    // Vertices wait in runs: consecutive relaxations that give one key (a leaf reaching its 2048
    // NICs, then each of those its PCIe switch) share one heap entry, so that the heap holds tens of
    // keys where it would hold thousands of vertices. Which of a key's vertices leaves first changes
    // nothing (above). With bounds, a run's key is the distance plus the bound.
    struct Run {
      Distance d;
      std::size_t begin = 0;  // waiting[begin .. end)
      std::size_t end = 0;
    };
    // std::priority_queue keeps its greatest entry on top: "after" puts the least key there.
    const auto after = [](const Run& a, const Run& b) { return DistanceLess{}(b.d, a.d); };
    std::priority_queue<Run, std::vector<Run>, decltype(after)> heap(after);
    std::vector<VertexId> waiting;
    std::vector<Distance>& dist = ws.dist;
    const auto order = [&](const Distance& d, VertexId v) { return bounds ? with_bound(d, bound(*bounds, v)) : d; };
    dist[static_cast<std::size_t>(source)] = Distance{};
    ws.reach(source);
    waiting.push_back(source);
    heap.push(Run{order(Distance{}, source), 0, 1});
    while (!heap.empty()) {
      const Run run = heap.top();
      heap.pop();
      if (bounds && target && DistanceLess{}(dist[static_cast<std::size_t>(*target)], run.d)) return;
      Run next{kUnreached, waiting.size(), waiting.size()};
      for (std::size_t w = run.begin; w < run.end; ++w) {
        const VertexId v = waiting[w];
        const auto u = static_cast<std::size_t>(v);
        // A vertex waits again each time its key drops (no decrease-key); only its wait under its
        // current key counts, the others are stale.
        if (!(run.d == order(dist[u], v))) continue;
        if (!bounds && target && v == *target) return;
        if (!transits(v, source)) continue;
        const Distance here = dist[u];
        const auto relax = [&](const OutArc& a) {
          const Distance d{here.pcie_links + a.pcie, here.latency_ps + a.latency_ps, here.hops + 1,
                           std::min(here.bottleneck_bytes_per_s, a.bandwidth_bytes_per_s)};
          // On no shortest path to the target (a rail's leaf reaching the NICs of every other node):
          // its distance is never read, so it is not even set.
          if (bounds && additive_less(bounds->shortest, additive_of(with_bound(d, bound(*bounds, a.to))))) return;
          Distance& to = dist[static_cast<std::size_t>(a.to)];
          if (!DistanceLess{}(d, to)) return;
          if (to == kUnreached) ws.reach(a.to);
          to = d;
          // An accelerator other than the source relays nothing, so unless it is the target its key
          // is final once every vertex before it is: it need not wait (16,384 of them on a
          // 2048-node fabric).
          if (!transits(a.to, source) && !(target && a.to == *target)) return;
          const Distance key = order(d, a.to);
          if (key == kUnreached) return;  // the target is out of its reach
          if (!(key == next.d)) {
            if (next.begin < next.end) heap.push(next);
            next = Run{key, waiting.size(), waiting.size()};
          }
          waiting.push_back(a.to);
          ++next.end;
        };
        // An outside vertex whose every link into a node other than the target's would lead past the
        // shortest key (all of them bounded alike) follows only its links to outside vertices and
        // into the target's node: a leaf of 2048 nodes follows one link down, not 2048.
        const std::int32_t x = bounds ? outside_table.index[u] : -1;
        if (x >= 0 && additive_less(bounds->shortest,
                                    plus(plus(additive_of(here), outside_table.least_node_arc[static_cast<std::size_t>(x)]),
                                         bounds->other_nodes))) {
          const auto xi = static_cast<std::size_t>(x);
          for (std::size_t k = outside_table.fabric_begin[xi]; k < outside_table.fabric_begin[xi + 1]; ++k)
            relax(out_arcs[outside_table.fabric_arcs[k]]);
          const auto first = outside_table.node_arcs.begin() + static_cast<std::ptrdiff_t>(outside_table.node_begin_arcs[xi]);
          const auto last = outside_table.node_arcs.begin() + static_cast<std::ptrdiff_t>(outside_table.node_begin_arcs[xi + 1]);
          const auto by_node = [](const NodeArc& a, int node) { return a.node < node; };
          for (auto it = std::lower_bound(first, last, bounds->target_node, by_node);
               it != last && it->node == bounds->target_node; ++it)
            relax(out_arcs[it->arc]);
          continue;
        }
        for (std::size_t i = out_begin[u]; i < out_begin[u + 1]; ++i) relax(out_arcs[i]);
      }
      if (next.begin < next.end) heap.push(next);
    }
  }

  // The links by which shortest paths from `source` enter `v`, appended to `out` ordered by
  // predecessor id, then link id; returns how many. None when no path reaches v.
  std::size_t predecessor_links(VertexId source, VertexId v, const Workspace& ws, std::vector<LinkId>& out) const {
    const std::vector<Distance>& dist = ws.dist;
    const auto vi = static_cast<std::size_t>(v);
    if (dist[vi] == kUnreached) return 0;
    const std::size_t before = out.size();
    const DistanceCombine combine;
    for (std::size_t i = in_begin[vi]; i < in_begin[vi + 1]; ++i) {
      const InArc& a = in_arcs[i];
      if (!ws.was_reached(a.from) || !transits(a.from, source)) continue;
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

  Route build(VertexId source, VertexId dest, const Workspace& ws, PredecessorCache* cache) const {
    const std::vector<Distance>& dist = ws.dist;
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
          cache->count[vi] = predecessor_links(source, v, ws, cache->links);
        }
        candidates = std::span<const LinkId>(cache->links).subspan(cache->first[vi], cache->count[vi]);
      } else {
        scratch.clear();
        predecessor_links(source, v, ws, scratch);
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

  // One route by rank: between nodes by A* where the bounds' table is built (the header comment),
  // else by the plain search, which inside a node ends at the node's own links, before the fabric.
  Route route(int src_rank, int dst_rank, Workspace& ws) const {
    if (src_rank == dst_rank) throw std::invalid_argument("Cluster::route: source and destination are the same rank");
    const VertexId s = rank_vertex.at(static_cast<std::size_t>(src_rank));
    const VertexId d = rank_vertex.at(static_cast<std::size_t>(dst_rank));
    const Outside* o = outside_if_built();
    const int from = vertex_node[static_cast<std::size_t>(s)], to = vertex_node[static_cast<std::size_t>(d)];
    if (o && o->usable && from != to && to >= 0) {
      Bounds bounds = bounds_toward(d);
      bounds.shortest = shortest_between(s, bounds);
      search(s, d, &bounds, ws);
    } else {
      search(s, d, nullptr, ws);
    }
    Route r = build(s, d, ws, nullptr);
    ws.clear();
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
    graph->outside_count += vertices[v].node < 0 ? 1 : 0;
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
    graph->link_to.push_back(l.to);
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
  Graph::Workspace ws(graph_->num_vertices());
  return graph_->route(src_rank, dst_rank, ws);
}

std::vector<Route> Cluster::routes(const std::vector<std::pair<int, int>>& pairs) const {
  if (!graph_) throw std::logic_error("Cluster::routes called before finalize()");
  // The bounds' table costs a plain search per outside vertex: built when more routes between nodes
  // are asked for than that.
  std::size_t between_nodes = 0;
  for (const auto& [a, b] : pairs) between_nodes += node_of(a) != node_of(b) ? 1 : 0;
  if (between_nodes > graph_->outside_count) graph_->outside();
  Graph::Workspace ws(graph_->num_vertices());
  std::vector<Route> out;
  out.reserve(pairs.size());
  for (const auto& [a, b] : pairs) out.push_back(graph_->route(a, b, ws));
  return out;
}

std::vector<Route> Cluster::routes_from(int src_rank) const {
  if (!graph_) throw std::logic_error("Cluster::routes_from called before finalize()");
  const VertexId s = graph_->rank_vertex.at(static_cast<std::size_t>(src_rank));
  Graph::Workspace ws(graph_->num_vertices());
  graph_->search(s, std::nullopt, nullptr, ws);
  Graph::PredecessorCache cache(graph_->num_vertices());
  std::vector<Route> out(graph_->rank_vertex.size());
  for (std::size_t r = 0; r < out.size(); ++r) {
    if (static_cast<int>(r) == src_rank) continue;
    out[r] = graph_->build(s, graph_->rank_vertex[r], ws, &cache);
  }
  return out;
}

}  // namespace fusesim::topo
