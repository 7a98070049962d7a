// Routing rules: fewest PCIe links (NVLink first), then least latency, then fewest hops, then lowest vertex ids; never through a third
// accelerator; routes_from agrees with route and scales to 1024 ranks.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"
#include "topo_test_util.hpp"

using namespace fusesim;
using namespace fusesim::topo;
using topo_test::check_route_invariants;
using topo_test::link_names;

namespace {

// A hand-built cluster: accelerators first (vertex id == rank), then the given switches.
struct HandBuilt {
  Cluster c;
  VertexId add(const std::string& name, VertexKind kind) {
    Vertex v;
    v.name = name;
    v.kind = kind;
    v.node = 0;
    if (kind == VertexKind::accelerator) {
      v.rank = static_cast<int>(c.rank_vertex.size());
      c.rank_vertex.push_back(static_cast<VertexId>(c.vertices.size()));
      c.rank_model.push_back("m");
    }
    c.vertices.push_back(v);
    return static_cast<VertexId>(c.vertices.size() - 1);
  }
  void duplex(VertexId a, VertexId b, TimePs latency_ps) {
    for (auto [f, t] : {std::pair{a, b}, std::pair{b, a}}) {
      Link l;
      l.name = c.vertices[static_cast<std::size_t>(f)].name + "->" + c.vertices[static_cast<std::size_t>(t)].name;
      l.from = f;
      l.to = t;
      l.line_rate_bytes_per_s = 1e9;
      l.bandwidth_bytes_per_s = 1e9;
      l.latency_ps = latency_ps;
      c.links.push_back(l);
    }
  }
};

Cluster parse(const nlohmann::json& j) { return parse_cluster(JsonDocument::from_json(j, "test.json")); }

}  // namespace

TEST_CASE("equal routes are broken by the lowest vertex id, not by insertion order") {
  // gpu0 and gpu1 joined through two switches of equal latency. swA is added before swB (vertex ids
  // 2 and 3) but swB's links are inserted first, so a tie-break by insertion order would pick swB.
  HandBuilt h;
  const VertexId g0 = h.add("gpu0", VertexKind::accelerator);
  const VertexId g1 = h.add("gpu1", VertexKind::accelerator);
  const VertexId swa = h.add("swA", VertexKind::switch_);
  const VertexId swb = h.add("swB", VertexKind::switch_);
  h.duplex(g0, swb, 100);
  h.duplex(swb, g1, 100);
  h.duplex(g0, swa, 100);
  h.duplex(swa, g1, 100);
  h.c.finalize();
  CHECK(link_names(h.c, h.c.route(0, 1)) == std::vector<std::string>{"gpu0->swA", "swA->gpu1"});
  CHECK(link_names(h.c, h.c.route(1, 0)) == std::vector<std::string>{"gpu1->swA", "swA->gpu0"});
  CHECK(h.c.route(0, 1).latency_ps == 200);
  CHECK(link_names(h.c, h.c.routes_from(0)[1]) == std::vector<std::string>{"gpu0->swA", "swA->gpu1"});
}

TEST_CASE("latency decides before hop count, hop count before vertex id") {
  HandBuilt h;
  const VertexId g0 = h.add("gpu0", VertexKind::accelerator);
  const VertexId g1 = h.add("gpu1", VertexKind::accelerator);
  const VertexId s2 = h.add("s2", VertexKind::switch_);
  const VertexId s3 = h.add("s3", VertexKind::switch_);
  const VertexId s4 = h.add("s4", VertexKind::switch_);
  // Path A: gpu0-s2-gpu1, latency 300 + 300 = 600, 2 hops.
  h.duplex(g0, s2, 300);
  h.duplex(s2, g1, 300);
  // Path B: gpu0-s3-s4-gpu1, latency 100 x 3 = 300, 3 hops: faster, so it wins despite more hops.
  h.duplex(g0, s3, 100);
  h.duplex(s3, s4, 100);
  h.duplex(s4, g1, 100);
  h.c.finalize();
  CHECK(link_names(h.c, h.c.route(0, 1)) == std::vector<std::string>{"gpu0->s3", "s3->s4", "s4->gpu1"});
  CHECK(h.c.route(0, 1).latency_ps == 300);

  // Same latency (600 vs 600) with more hops loses: slow path B down to 200 per link -> 600, 3 hops.
  for (auto& l : h.c.links)
    if (l.latency_ps == 100) l.latency_ps = 200;
  h.c.finalize();
  CHECK(link_names(h.c, h.c.route(0, 1)) == std::vector<std::string>{"gpu0->s2", "s2->gpu1"});
}

TEST_CASE("a route never passes through a third accelerator") {
  HandBuilt h;
  const VertexId g0 = h.add("gpu0", VertexKind::accelerator);
  const VertexId g1 = h.add("gpu1", VertexKind::accelerator);
  const VertexId g2 = h.add("gpu2", VertexKind::accelerator);
  const VertexId sw = h.add("sw", VertexKind::switch_);
  // Direct links gpu0-gpu1-gpu2 (1 ps each) and a slow switch path gpu0-sw-gpu2 (1000 ps each).
  h.duplex(g0, g1, 1);
  h.duplex(g1, g2, 1);
  h.duplex(g0, sw, 1000);
  h.duplex(sw, g2, 1000);
  h.c.finalize();
  // Via gpu1 would take 2 ps; the switch path takes 2000 ps and is the only legal one.
  const Route r = h.c.route(0, 2);
  CHECK(link_names(h.c, r) == std::vector<std::string>{"gpu0->sw", "sw->gpu2"});
  CHECK(r.latency_ps == 2000);
  check_route_invariants(h.c, 0, 2, r);
  // The direct neighbour is still reached directly.
  CHECK(link_names(h.c, h.c.route(0, 1)) == std::vector<std::string>{"gpu0->gpu1"});

  SECTION("without the switch there is no route at all") {
    HandBuilt chain;
    const VertexId a = chain.add("gpu0", VertexKind::accelerator);
    const VertexId b = chain.add("gpu1", VertexKind::accelerator);
    const VertexId d = chain.add("gpu2", VertexKind::accelerator);
    chain.duplex(a, b, 1);
    chain.duplex(b, d, 1);
    chain.c.finalize();
    CHECK_THROWS_AS(chain.c.route(0, 2), std::runtime_error);
    CHECK_THROWS_AS(chain.c.routes_from(0), std::runtime_error);
  }
}

TEST_CASE("misuse of route() is a programming error, not an InputError") {
  HandBuilt h;
  h.add("gpu0", VertexKind::accelerator);
  h.add("gpu1", VertexKind::accelerator);
  h.duplex(0, 1, 5);
  CHECK_THROWS_AS(h.c.route(0, 1), std::logic_error);  // before finalize()
  h.c.finalize();
  CHECK_THROWS_AS(h.c.route(1, 1), std::invalid_argument);
  CHECK_THROWS_AS(h.c.route(0, 2), std::out_of_range);
}

TEST_CASE("base topology: NVSwitch before a shared PCIe switch, then network routes by latency") {
  const Cluster c = parse(topo_test::base_json());
  REQUIRE(c.num_ranks() == 8);
  // Vertices: 8 GPUs, per node 1 switch + 2 x (PCIe switch + NIC) = 5, 2 nodes -> 10, 1 fabric switch.
  CHECK(c.vertices.size() == 19);
  CHECK(c.device(0).gemm_tile_m == 64);
  CHECK(c.device(0).gemm_tile_n == 128);
  CHECK(c.device(0).peak(Dtype::fp8) == 2e15);

  // gpu0 and gpu1 share PCIe switch pcie0 (2 x 0.5 us = 1 us) and the NVSwitch (2 x 1 us). NCCL takes
  // NVLink whatever the latency (its path type decides first), and so does the route: 2 us over the
  // NVSwitch. By latency alone it took PCIe, a fifth of the bandwidth (issue 13: a Qwen2-72B layer
  // with 4 NICs per 8 GPUs took 209.5 ms instead of 98.5).
  const Route r01 = c.route(0, 1);
  CHECK(link_names(c, r01) == std::vector<std::string>{"node0/gpu0->node0/nvswitch", "node0/nvswitch->node0/gpu1"});
  CHECK(r01.latency_ps == 2000000);
  CHECK(link_names(c, c.routes_from(0)[1]) == link_names(c, r01));
  CHECK(link_names(c, c.route(1, 0)) == std::vector<std::string>{"node0/gpu1->node0/nvswitch", "node0/nvswitch->node0/gpu0"});
  // gpu0 and gpu2 are behind different PCIe switches: NVSwitch, 2 us (via the NICs: 0.5+0.5+2+2+0.5+0.5 = 6 us).
  const Route r02 = c.route(0, 2);
  CHECK(link_names(c, r02) == std::vector<std::string>{"node0/gpu0->node0/nvswitch", "node0/nvswitch->node0/gpu2"});
  CHECK(r02.latency_ps == 2000000);
  // Cross node: gpu0 -> pcie0 -> nic0 -> fabric -> node1/nic1 -> node1/pcie1 -> node1/gpu3 (rank 7):
  // 4 x 0.5 + 2 x 2 = 6 us.
  const Route r07 = c.route(0, 7);
  CHECK(link_names(c, r07) == std::vector<std::string>{"node0/gpu0->node0/pcie0", "node0/pcie0->node0/nic0",
                                                       "node0/nic0->fabric-switch", "fabric-switch->node1/nic1",
                                                       "node1/nic1->node1/pcie1", "node1/pcie1->node1/gpu3"});
  CHECK(r07.latency_ps == 6000000);
  // Link figures: bandwidth = line rate x efficiency.
  const Link& pcie = c.links.at(static_cast<std::size_t>(r07.links[0]));
  CHECK(pcie.bandwidth_bytes_per_s == 6e10 * 0.5);
  CHECK(c.links.at(static_cast<std::size_t>(r02.links[0])).bandwidth_bytes_per_s == 4e11 * 0.75);
  CHECK(c.vertices.at(static_cast<std::size_t>(c.links.at(static_cast<std::size_t>(r07.links[2])).to)).switch_kind ==
        SwitchKind::infiniband);
}

TEST_CASE("scale-up kinds: pcie switch, full mesh, none") {
  auto j = topo_test::base_json();
  j.erase("scale_out");
  j["nodes"] = 1;
  j["node"].erase("nics");

  SECTION("pcie: one PCIe switch per node") {
    j["node"]["scale_up"]["kind"] = "pcie";
    const Cluster c = parse(j);
    CHECK(link_names(c, c.route(3, 1)) == std::vector<std::string>{"node0/gpu3->node0/pcie-switch", "node0/pcie-switch->node0/gpu1"});
    CHECK(c.links[0].kind == LinkKind::pcie);
    CHECK(c.vertices.at(4).switch_kind == SwitchKind::pcie);
  }
  SECTION("switch with hccs links") {
    j["node"]["scale_up"]["link_kind"] = "hccs";
    const Cluster c = parse(j);
    CHECK(link_names(c, c.route(0, 1)) == std::vector<std::string>{"node0/gpu0->node0/hccs-switch", "node0/hccs-switch->node0/gpu1"});
    CHECK(c.links[0].kind == LinkKind::hccs);
  }
  SECTION("full mesh: 4 x 3 = 12 directed links, every route one hop") {
    j["node"]["scale_up"]["kind"] = "full_mesh";
    const Cluster c = parse(j);
    CHECK(c.links.size() == 12);
    for (int s = 0; s < 4; ++s)
      for (int d = 0; d < 4; ++d)
        if (s != d) CHECK(c.route(s, d).links.size() == 1);
  }
  SECTION("full mesh beats a shared PCIe switch, even a faster one") {
    // Direct link 1 us vs gpu0 -> pcie0 -> gpu1 at 2 x 0.5 us: equal latency; and with the mesh link
    // slowed to 5 us, still the mesh (no PCIe link on it).
    j["node"]["scale_up"]["kind"] = "full_mesh";
    j["node"]["nics"] = topo_test::base_json()["node"]["nics"];
    CHECK(link_names(parse(j), parse(j).route(0, 1)) == std::vector<std::string>{"node0/gpu0->node0/gpu1"});
    j["node"]["scale_up"]["link"]["latency_s"]["value"] = 5e-6;
    const Cluster c = parse(j);
    CHECK(link_names(c, c.route(0, 1)) == std::vector<std::string>{"node0/gpu0->node0/gpu1"});
    CHECK(c.route(0, 1).latency_ps == 5000000);
  }
  SECTION("full mesh of xGMI links (MI300X); xGMI through a switch is refused") {
    j["node"]["scale_up"]["kind"] = "full_mesh";
    j["node"]["scale_up"]["link_kind"] = "xgmi";
    const Cluster c = parse(j);
    CHECK(c.full_mesh_scale_up);
    for (const Link& l : c.links) CHECK(l.kind == LinkKind::xgmi);
    CHECK(is_scale_up(LinkKind::xgmi));
    CHECK(to_string(LinkKind::xgmi) == "xgmi");
    j["node"]["scale_up"]["kind"] = "switch";
    try {
      (void)parse(j);
      FAIL("xgmi through a switch was accepted");
    } catch (const InputError& e) {
      CHECK(e.json_path() == "$.node.scale_up.link_kind");
    }
  }
  SECTION("none: a node of one device") {
    j["node"]["devices_per_node"] = 1;
    j["node"]["scale_up"] = {{"kind", "none"}};
    j["nodes"] = 3;
    j["node"]["nics"] = topo_test::base_json()["node"]["nics"];
    j["node"]["nics"]["count"] = 1;
    j["scale_out"] = {{"kind", "single_switch"}, {"fabric", "ethernet"}};
    const Cluster c = parse(j);
    CHECK(c.num_ranks() == 3);
    CHECK(c.route(0, 2).links.size() == 6);
    CHECK(c.vertices.back().switch_kind == SwitchKind::ethernet);
  }
}

TEST_CASE("1024 ranks on a rail-optimized fabric: one search per source, routes as constructed") {
  // 128 DGX H100 nodes (the 4-node file with more nodes): 1024 ranks.
  auto doc = JsonDocument::load(std::string(FUSESIM_SOURCE_DIR) + "/topologies/dgx-h100-4node.json");
  nlohmann::json j = doc.raw();
  j["nodes"] = 128;
  const Cluster c = parse(j);
  REQUIRE(c.num_ranks() == 1024);
  // From any source: 7 same-node peers (2 links), 127 same-rail peers on other nodes (6 links),
  // 127 x 7 = 889 cross-rail peers (8 links): 14 + 762 + 7112 = 7888 links per source.
  std::int64_t total_links = 0;
  for (int s = 0; s < 1024; ++s) {
    const auto routes = c.routes_from(s);
    for (int d = 0; d < 1024; ++d) {
      if (d == s) continue;
      const auto& r = routes[static_cast<std::size_t>(d)];
      total_links += static_cast<std::int64_t>(r.links.size());
      const std::size_t expected = (d / 8 == s / 8) ? 2 : (d % 8 == s % 8 ? 6 : 8);
      if (r.links.size() != expected) FAIL("route " << s << "->" << d << " has " << r.links.size() << " links");
    }
    if (s % 97 == 0) {  // full invariant checks and agreement with route() on a sample of sources
      for (int d = 0; d < 1024; d += 13) {
        if (d == s) continue;
        check_route_invariants(c, s, d, routes[static_cast<std::size_t>(d)]);
        CHECK(c.route(s, d).links == routes[static_cast<std::size_t>(d)].links);
      }
    }
  }
  CHECK(total_links == 7888LL * 1024);
}

namespace {

// Every route from the given sources to every `stride`-th rank, by routes() (A* between nodes once
// they are more than the vertices outside every node, src/topo/route.cpp) and by routes_from() (one
// plain search from the source): link for link. Then route(), which takes A* too once the bounds'
// table is built, on a few.
void check_route_matches_plain_search(const Cluster& c, const std::vector<int>& sources, int stride) {
  std::vector<std::pair<int, int>> pairs;
  for (int s : sources)
    for (int d = 0; d < c.num_ranks(); d += stride)
      if (d != s) pairs.emplace_back(s, d);
  const std::vector<Route> found = c.routes(pairs);
  REQUIRE(found.size() == pairs.size());
  int last_source = -1;
  std::vector<Route> plain;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto [s, d] = pairs[i];
    if (s != last_source) plain = c.routes_from(last_source = s);
    const Route& p = plain[static_cast<std::size_t>(d)];
    if (found[i].links != p.links || found[i].latency_ps != p.latency_ps)
      FAIL(c.name << ": route " << s << " -> " << d << " by A* differs from the plain search");
    if (i % 97 == 0) CHECK(c.route(s, d).links == p.links);
  }
}

// The first and last rank of the first, second, a middle and the last node.
std::vector<int> sample_sources(const Cluster& c) {
  const int per = c.devices_per_node, last = c.num_ranks() / per - 1;
  std::vector<int> out;
  for (int node : {0, 1, last / 2, last})
    for (int local : {0, per - 1}) out.push_back(node * per + local);
  return out;
}

}  // namespace

TEST_CASE("routes between nodes by A* are those of the plain search on every shipped cluster of several nodes") {
  // The lower bounds only prune; a bound that over-estimated anywhere on a shortest path, or a stop
  // before every tie was final, would change a link here (D-mod-K picks among the ties).
  for (const char* name : {"dgx-h100-4node", "dgx-h100-128node", "dgx-h100-768node", "dgx-a100-32node",
                           "dgx-a100-192node", "dgx-a100-320node", "dgx-b200-4node", "grand-teton-h100-64node",
                           "hgx-h200-8node"}) {
    const Cluster c = load_cluster_by_name_or_path(name);
    REQUIRE(c.num_nodes > 1);
    // Up to 512 ranks every destination; beyond, every 7th (a prime stride: every local index).
    check_route_matches_plain_search(c, sample_sources(c), c.num_ranks() <= 512 ? 1 : 7);
  }
}

TEST_CASE("routes between nodes by A* are those of the plain search on perturbed fabrics") {
  // dgx-h100-4node with every link's latency drawn again (0-3 values, so that many paths tie, and
  // zero latencies that leave the hop count to decide) and a third of the links outside the NVLink
  // domain turned PCIe (so that the first term of the key moves too): all pairs, 40 draws. In half of
  // them each node's PCIe switches are also joined in a chain, so that a path may cross a third node
  // from one rail to another (NIC, PCIe switch, PCIe switch, NIC), which the bounds' table must
  // count. In a quarter, one link joins two nodes directly, which no outside vertex separates: the
  // bounds are not built and the plain search answers.
  auto doc = JsonDocument::load(std::string(FUSESIM_SOURCE_DIR) + "/topologies/dgx-h100-4node.json");
  const Cluster base = parse(doc.raw());
  std::uint64_t state = 0x9E3779B97F4A7C15ULL;
  const auto draw = [&state](std::uint64_t n) {  // splitmix64
    state += 0x9E3779B97F4A7C15ULL;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return (z ^ (z >> 31)) % n;
  };
  std::vector<int> all(static_cast<std::size_t>(base.num_ranks()));
  for (int r = 0; r < base.num_ranks(); ++r) all[static_cast<std::size_t>(r)] = r;
  for (int round = 0; round < 40; ++round) {
    Cluster c = base;
    for (Link& l : c.links) {
      l.latency_ps = static_cast<TimePs>(draw(4)) * 250000;
      if (!is_scale_up(l.kind) && draw(3) == 0) l.kind = LinkKind::pcie;
    }
    if (round % 2 == 0) {  // each node's PCIe switches in a chain
      std::vector<VertexId> previous(static_cast<std::size_t>(c.num_nodes), -1);
      const std::size_t vertices = c.vertices.size();
      for (std::size_t v = 0; v < vertices; ++v) {
        const Vertex& x = c.vertices[v];
        if (x.kind != VertexKind::switch_ || x.switch_kind != SwitchKind::pcie || x.node < 0) continue;
        VertexId& before = previous[static_cast<std::size_t>(x.node)];
        if (before >= 0)
          for (auto [f, t] : {std::pair{before, static_cast<VertexId>(v)}, std::pair{static_cast<VertexId>(v), before}}) {
            Link l = c.links.front();
            l.name = "chain" + std::to_string(f) + "-" + std::to_string(t);
            l.from = f;
            l.to = t;
            l.kind = draw(2) == 0 ? LinkKind::pcie : LinkKind::network;
            l.latency_ps = static_cast<TimePs>(draw(4)) * 250000;
            c.links.push_back(l);
          }
        before = static_cast<VertexId>(v);
      }
    }
    if (round % 4 == 3) {  // node 0's first PCIe switch joined to node 1's
      VertexId a = -1, b = -1;
      for (std::size_t v = 0; v < c.vertices.size(); ++v) {
        const Vertex& x = c.vertices[v];
        if (x.kind != VertexKind::switch_ || x.switch_kind != SwitchKind::pcie) continue;
        if (x.node == 0 && a < 0) a = static_cast<VertexId>(v);
        if (x.node == 1 && b < 0) b = static_cast<VertexId>(v);
      }
      REQUIRE(a >= 0);
      REQUIRE(b >= 0);
      for (auto [f, t] : {std::pair{a, b}, std::pair{b, a}}) {
        Link l = c.links.front();
        l.name = "direct" + std::to_string(f);
        l.from = f;
        l.to = t;
        l.kind = LinkKind::pcie;
        l.latency_ps = 0;
        c.links.push_back(l);
      }
    }
    c.finalize();
    check_route_matches_plain_search(c, all, 1);
  }
}

TEST_CASE("a route between rails through a third node: the bounds count the ways through nodes") {
  // dgx-h100-4node without its spines' links, so that no switch joins rail 0 to rail 1. Node 2's
  // rail-0 and rail-1 PCIe switches are joined and its NIC links to them are not PCIe; node 0's two are
  // joined by a PCIe link. From node 0's GPU 0 (rail 0) to node 1's GPU 1 (rail 1) the way through
  // node 2 crosses 4 PCIe links (node 0's two, node 1's two), through node 0's own join 5: the route
  // leaves by leaf 0 and crosses node 2. A table of the leaves' distances that missed the ways
  // through nodes would find leaf 0 no way to the target, never follow it, and route through node 0's
  // join.
  auto doc = JsonDocument::load(std::string(FUSESIM_SOURCE_DIR) + "/topologies/dgx-h100-4node.json");
  Cluster c = parse(doc.raw());
  const auto id = [&c](const std::string& name) {
    for (std::size_t v = 0; v < c.vertices.size(); ++v)
      if (c.vertices[v].name == name) return static_cast<VertexId>(v);
    FAIL("no vertex " << name);
    return VertexId{-1};
  };
  std::vector<Link> kept;
  for (const Link& l : c.links)
    if (c.vertices[static_cast<std::size_t>(l.from)].name.rfind("spine", 0) != 0 &&
        c.vertices[static_cast<std::size_t>(l.to)].name.rfind("spine", 0) != 0)
      kept.push_back(l);
  REQUIRE(kept.size() < c.links.size());
  c.links = kept;
  for (Link& l : c.links)
    if (l.name.rfind("node2/nic", 0) == 0 || (l.name.rfind("node2/pcie", 0) == 0 && l.name.find("nic") != std::string::npos))
      l.kind = LinkKind::network;
  const auto join = [&c](VertexId a, VertexId b, LinkKind kind) {
    for (auto [f, t] : {std::pair{a, b}, std::pair{b, a}}) {
      Link l = c.links.front();
      l.name = c.vertices[static_cast<std::size_t>(f)].name + "->" + c.vertices[static_cast<std::size_t>(t)].name;
      l.from = f;
      l.to = t;
      l.kind = kind;
      l.latency_ps = 0;
      c.links.push_back(l);
    }
  };
  join(id("node2/pcie0"), id("node2/pcie1"), LinkKind::network);
  join(id("node0/pcie0"), id("node0/pcie1"), LinkKind::pcie);
  c.finalize();
  // Between the GPUs of rails 0 and 1 of different nodes (the other rails reach nothing off their
  // node): more routes between nodes than outside vertices, so routes() takes A*. Each route alone
  // first, by the plain search (no bounds' table yet).
  std::vector<std::pair<int, int>> pairs;
  for (int s = 0; s < c.num_ranks(); ++s)
    for (int d = 0; d < c.num_ranks(); ++d)
      if (s % 8 < 2 && d % 8 < 2 && s / 8 != d / 8) pairs.emplace_back(s, d);
  std::vector<Route> plain;
  for (const auto& [s, d] : pairs) plain.push_back(c.route(s, d));
  const std::vector<Route> found = c.routes(pairs);
  REQUIRE(pairs.size() == 48);
  for (std::size_t i = 0; i < pairs.size(); ++i) CHECK(found[i].links == plain[i].links);
  REQUIRE(pairs[1] == std::pair{0, 9});
  CHECK(link_names(c, found[1]) ==
        std::vector<std::string>{"node0/gpu0->node0/pcie0", "node0/pcie0->node0/nic0", "node0/nic0->leaf0",
                                 "leaf0->node2/nic0", "node2/nic0->node2/pcie0", "node2/pcie0->node2/pcie1",
                                 "node2/pcie1->node2/nic1", "node2/nic1->leaf1", "leaf1->node1/nic1",
                                 "node1/nic1->node1/pcie1", "node1/pcie1->node1/gpu1"});
}
