#include "fusesim/topo/rings.hpp"

#include <cstddef>
#include <numeric>
#include <unordered_set>

namespace fusesim::topo {

std::vector<std::vector<int>> collective_rings(const std::vector<int>& group, const Cluster& cluster) {
  const int t = static_cast<int>(group.size());
  std::vector<int> flat(static_cast<std::size_t>(t));
  std::iota(flat.begin(), flat.end(), 0);
  if (cluster.full_mesh_scale_up && t >= 3) {
    if (cluster.on_one_node(group)) {
      std::vector<std::vector<int>> rings;
      for (int stride = 1; stride < t; ++stride) {
        if (std::gcd(stride, t) != 1) continue;
        std::vector<int> ring(static_cast<std::size_t>(t));
        for (int i = 0; i < t; ++i) ring[static_cast<std::size_t>(i)] = (i * stride) % t;
        rings.push_back(std::move(ring));
      }
      return rings;
    }
  }
  std::vector<int> member_nodes;
  member_nodes.reserve(group.size());
  for (int r : group) member_nodes.push_back(cluster.node_of(r));
  return rail_rings(member_nodes);
}

std::vector<std::vector<int>> rail_rings(const std::vector<int>& member_nodes) {
  const int t = static_cast<int>(member_nodes.size());
  std::vector<int> flat(static_cast<std::size_t>(t));
  std::iota(flat.begin(), flat.end(), 0);
  if (t < 4) return {flat};
  // Nodes in group order, each with the positions of its members; the group must list them node by
  // node (a node that comes back later breaks the pattern) with the same count on every node.
  std::vector<std::vector<int>> nodes;
  std::unordered_set<int> seen;  // a 2,048-node group checked node by node against every earlier one took seconds
  int last_node = -2;
  for (int m = 0; m < t; ++m) {
    const int node = member_nodes[static_cast<std::size_t>(m)];
    if (node != last_node) {
      if (!seen.insert(node).second) return {flat};
      nodes.emplace_back();
      last_node = node;
    }
    nodes.back().push_back(m);
  }
  const int n = static_cast<int>(nodes.size());
  const int g = static_cast<int>(nodes.front().size());
  if (n < 2 || g < 2) return {flat};
  for (const auto& members : nodes)
    if (static_cast<int>(members.size()) != g) return {flat};

  const auto mod = [g](int x) { return ((x % g) + g) % g; };
  std::vector<std::vector<int>> rings(static_cast<std::size_t>(g));
  for (int r = 0; r < g; ++r) {
    auto& ring = rings[static_cast<std::size_t>(r)];
    ring.reserve(static_cast<std::size_t>(t));
    for (int j = 0; j < n; ++j) {
      const auto& members = nodes[static_cast<std::size_t>(j)];
      for (int i = 0; i < g; ++i) {
        const int local = j % 2 == 0 ? mod(r + i) : mod(r - 1 - i);
        ring.push_back(members[static_cast<std::size_t>(local)]);
      }
    }
  }
  return rings;
}

}  // namespace fusesim::topo
