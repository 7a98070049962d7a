// Ring orders of collectives across nodes (topo/rings.hpp) and their timing: one ring per member a
// node holds, each inter-node hop on one rail, each NIC direction under one ring.
//
// Test cluster (rail(nodes) below): 4 devices per node on a switch (400 GB/s, 1 us per link), one
// NIC per device behind its own PCIe switch (PCIe 100 GB/s, 0.5 us; NIC link 50 GB/s, 1 us), a
// rail-optimized fabric with 2 spines (50 GB/s, 1 us). Every efficiency is 1; collective base
// latency 8 us, SM step latency 3 us.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "fusesim/topo/rings.hpp"
#include "fusesim/util/json_reader.hpp"
#include "sim_test_util.hpp"

using namespace sim_test;
using fusesim::topo::collective_rings;

namespace {

nlohmann::json rail_json(int nodes) {
  auto sourced = [](double v) { return nlohmann::json{{"value", v}, {"source", "test"}}; };
  auto sourced_int = [](int v) { return nlohmann::json{{"value", v}, {"source", "test"}}; };
  auto make_link = [&](double rate, double latency) {
    return nlohmann::json{{"line_rate_bytes_per_s", sourced(rate)}, {"efficiency", sourced(1.0)}, {"latency_s", sourced(latency)}};
  };
  nlohmann::json j = {
      {"schema_version", 1},
      {"name", "rings-test"},
      {"description", "4 devices per node, one NIC each, rail-optimized"},
      {"device_models",
       {{"g",
         {{"vendor", "nvidia"},
          {"peak_flops_per_s", {{"bf16", sourced(1e15)}}},
          {"hbm_bytes", sourced(8e10)},
          {"hbm_bandwidth_bytes_per_s", sourced(3e12)},
          {"sm_count", sourced_int(100)},
          {"copy_engines", sourced_int(2)},
          {"gemm_tile", {{"m", 64}, {"n", 128}}},
          {"efficiency", {{"gemm", sourced(0.8)}, {"attention", sourced(0.5)}, {"hbm", sourced(0.9)}}},
          {"contention", {{"default_comm_sms", sourced_int(16)}, {"comm_hbm_traffic_factor", sourced(1.0)}}}}}}},
      {"node",
       {{"device_model", "g"},
        {"devices_per_node", 4},
        {"scale_up", {{"kind", "switch"}, {"link", make_link(4e11, 1e-6)}}},
        {"nics", {{"count", 4}, {"pcie_link", make_link(1e11, 0.5e-6)}, {"nic_link", make_link(5e10, 1e-6)}}}}},
      {"nodes", nodes},
      {"scale_out", {{"kind", "rail_optimized"}, {"fabric", "infiniband"}, {"spines", 2}, {"spine_link", make_link(5e10, 1e-6)}}},
      {"communication",
       {{"collective_base_latency_s", sourced(8e-6)},
        {"sm_step_latency_s", sourced(3e-6)},
        {"copy_engine_step_latency_s", sourced(2e-6)},
        {"sm_kernel_efficiency", sourced(1.0)},
        {"copy_engine_efficiency", sourced(1.0)}}}};
  return j;
}

topo::Cluster rail(int nodes) { return topo::parse_cluster(JsonDocument::from_json(rail_json(nodes), "rings-test.json")); }

// One node of `devices` joined pairwise (400 GB/s, 1 us per link), no NICs.
topo::Cluster mesh(int devices) {
  nlohmann::json j = rail_json(1);
  j["node"]["devices_per_node"] = devices;
  j["node"]["scale_up"]["kind"] = "full_mesh";
  j["node"]["scale_up"]["link_kind"] = "xgmi";
  j["node"].erase("nics");
  j.erase("scale_out");
  return topo::parse_cluster(JsonDocument::from_json(j, "mesh-test.json"));
}

std::vector<int> ranks(int from, int to) {
  std::vector<int> r;
  for (int i = from; i < to; ++i) r.push_back(i);
  return r;
}

void require_permutation(const std::vector<int>& ring, int t) {
  std::vector<int> sorted = ring;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(sorted == ranks(0, t));
}

}  // namespace

TEST_CASE("a group inside one node, one member per node or interleaved nodes: one ring in group order",
          "[sim][rings]") {
  const topo::Cluster c = rail(4);
  CHECK(collective_rings({0, 1, 2, 3}, c) == std::vector<std::vector<int>>{{0, 1, 2, 3}});
  CHECK(collective_rings({3, 1, 0, 2}, c) == std::vector<std::vector<int>>{{0, 1, 2, 3}});
  CHECK(collective_rings({0, 4, 8, 12}, c) == std::vector<std::vector<int>>{{0, 1, 2, 3}});
  // Node 0, node 1, node 0 again: not listed node by node.
  CHECK(collective_rings({0, 1, 4, 5, 2, 3}, c).size() == 1);
  // Unequal counts per node (3 on node 0, 1 on node 1).
  CHECK(collective_rings({0, 1, 2, 4}, c).size() == 1);
}

TEST_CASE("16 ranks on 4 nodes: 4 rings, every inter-node hop on one rail, one ring per NIC direction",
          "[sim][rings]") {
  const topo::Cluster c = rail(4);
  const std::vector<int> group = ranks(0, 16);
  const auto rings = collective_rings(group, c);
  REQUIRE(rings.size() == 4);
  // Ring 1: node 0 ascending from local 1 (1 2 3 0), node 1 descending from local 0 (4+0 4+3 4+2 4+1),
  // node 2 as node 0, node 3 as node 1.
  CHECK(rings[1] == std::vector<int>{1, 2, 3, 0, 4, 7, 6, 5, 9, 10, 11, 8, 12, 15, 14, 13});
  std::set<std::pair<int, int>> out_nic, in_nic;  // (node, local) of inter-node sends and receives
  for (const auto& ring : rings) {
    require_permutation(ring, 16);
    int crossings = 0;
    for (std::size_t i = 0; i < ring.size(); ++i) {
      const int from = group[static_cast<std::size_t>(ring[i])];
      const int to = group[static_cast<std::size_t>(ring[(i + 1) % ring.size()])];
      if (c.node_of(from) == c.node_of(to)) continue;
      ++crossings;
      CHECK(from % 4 == to % 4);  // same local index: same NIC, same leaf (rail)
      CHECK(out_nic.insert({c.node_of(from), from % 4}).second);
      CHECK(in_nic.insert({c.node_of(to), to % 4}).second);
    }
    CHECK(crossings == 4);
  }
  // 4 rings x 4 crossings: 16 NIC directions out and 16 in, each used once.
  CHECK(out_nic.size() == 16);
  CHECK(in_nic.size() == 16);
}

TEST_CASE("an odd number of nodes: only the hop back to the first node changes rail", "[sim][rings]") {
  const topo::Cluster c = rail(3);
  const auto rings = collective_rings(ranks(0, 12), c);
  REQUIRE(rings.size() == 4);
  for (const auto& ring : rings) {
    require_permutation(ring, 12);
    int cross_rail = 0;
    for (std::size_t i = 0; i < ring.size(); ++i) {
      const int from = ring[i], to = ring[(i + 1) % ring.size()];
      if (from / 4 != to / 4 && from % 4 != to % 4) {
        ++cross_rail;
        CHECK(from / 4 == 2);  // last node back to node 0
        CHECK(to / 4 == 0);
      }
    }
    CHECK(cross_rail == 1);
  }
}

TEST_CASE("all-reduce over 2 nodes x 4: the rings stream through the NICs, n/(t x 4) at NIC speed", "[sim][rings]") {
  // t = 8 ranks, 4 rings, 2(t-1) = 14 steps; n = 32e6 B, so every flow moves n / t / 4 = 1e6 B.
  // On each ring one hop leaves node 0 and one leaves node 1 (a member at local r-1 on ring r; every
  // member is that on exactly one ring), GPU -> PCIe -> NIC -> leaf -> NIC -> PCIe -> GPU: route
  // latency 4 x 0.5 + 2 x 1 = 4 us, + SM step latency 3 us; 1e6 B at min(100, 50) GB/s = 20 us. Each
  // NIC direction carries one ring, and that ring's 14 chunks all cross it: the first starts draining
  // at base 8 + 7 = 15 us (the sender's own chunk). A member sends its next step once its receive has
  // landed, its own send possibly still in flight, and a connection's chunks drain one after the other:
  // the intra-node hops (at most 2 + 3 + 10 = 15 us even with the uplink shared four ways) bring each
  // chunk to the NIC's sender before the NIC has drained the one before (20 us), whose latency is paid
  // meanwhile, so the NIC drains all 14 back to back: the last lands at 15 + 14 x 20 = 295 us, and
  // every member is done by then. A ring whose members waited for their own sends to land (before
  // 2026-11-28) paid the 7 us latency before each drain: 8 + 14 x 27 = 386 us. (A flat ring in rank
  // order would move n/t = 4e6 B per step through one NIC, across the rails by a spine:
  // 8 + 14 x (6 + 3 + 80) = 1254 us.) Rings forced: NCCL's tree would take this all-reduce (below).
  topo::Cluster c = rail(2);
  c.comm.tree_all_reduce = false;
  TestCostModel costs;
  sched::TaskGraph g(8);
  const auto ids = collective(g, "ar", sched::CollectiveKind::all_reduce, ranks(0, 8), 32'000'000, 1);
  const sim::SimResult r = sim::Simulator(c, costs).run(g);
  CHECK(r.makespan_ps == 295'000'000);
  for (auto id : ids) CHECK(r.tasks[id].end_ps <= 295'000'000);
  // 8 members x 14 steps x 4 rings flows, each recorded as a quarter of the 4e6 B chunk.
  REQUIRE(r.transfers.size() == 8 * 14 * 4);
  for (const auto& x : r.transfers) CHECK(x.bytes == 1'000'000);
}

TEST_CASE("all-reduce over 2 nodes x 4, latency-bound: a chunk pays each hop's latency once", "[sim][rings]") {
  // n = 32 B: every flow moves 1 B (20 ps at 50 GB/s, at most 10 ps on a shared 400 GB/s uplink) and
  // is, to within that, its latency alone: 7 us across the nodes (route 4 us + step 3 us),
  // 5 us inside one (route 2 x 1 us + step 3 us). Ring r's 8 hops: 6 inside the nodes, 2 across them,
  // 4 hops apart. On its ring a member sends step s + 1 when step s from its predecessor lands, so a
  // member's last send (step 13) lands 14 consecutive hops after base: the whole ring (2 x 7 + 6 x 5)
  // and 6 more, which hold both crossings when the 2 hops left out are inside a node: 8 + 4 x 7 + 10
  // x 5 = 86 us, as NCCL's tuning model counts a ring (intra-node steps x intra-node latency +
  // inter-node steps x network latency). Each member's last receive is such a window too. A ring whose
  // members waited for their own sends would pay the crossing at every step: 8 + 14 x 7 = 106 us.
  // Rings forced (NCCL_ALGO=Ring): the tree's case follows.
  topo::Cluster c = rail(2);
  c.comm.tree_all_reduce = false;
  TestCostModel costs;
  sched::TaskGraph g(8);
  collective(g, "ar", sched::CollectiveKind::all_reduce, ranks(0, 8), 32, 1);
  const sim::SimResult r = sim::Simulator(c, costs).run(g);
  CHECK(r.makespan_ps >= 86'000'000);
  CHECK(r.makespan_ps <= 86'000'000 + 14 * 20 + 14);  // 14 drains of at most 20 ps, each rounded up
}

TEST_CASE("across nodes the protocol is chosen by the ring's mean hop and its slowest link, not its first hop",
          "[sim][rings]") {
  // 2 nodes x 4 (above), n = 16e6 B: all-reduce chunks of n / 8 / 4 = c = 500 kB per ring and step, 14
  // steps. An LL-like protocol: base 1 us, no step latency, half the payload per wire byte.
  // Ring 0's hops: 6 inside the nodes (route 2 us, 400 GB/s) and 2 across (route 4 us, 50 GB/s at the
  // NIC): mean route 2.5 us, slowest 50 GB/s.
  //   Simple: 8 + 14 x (2.5 + 3) + 14 x c / 50 GB/s = 85 + 140 = 225 us;
  //   LL:     1 + 14 x 2.5 + 14 x c / 25 GB/s = 36 + 280 = 316 us: Simple.
  // By the first hop alone (member 0 to 1, inside node 0: 2 us, 400 GB/s) it would have been
  //   Simple 8 + 14 x 5 + 14 x 1.25 = 95.5 us against LL 1 + 14 x 2 + 14 x 2.5 = 64 us: LL.
  // Run, with Simple the NIC drains the ring's 14 chunks of 10 us back to back from 8 + 4 + 3 = 15 us
  // (its intra-node feeders take at most 2 + 3 + 5 = 10 us each): 15 + 140 = 155 us; LL would have
  // drained 14 chunks of 20 us from 1 + 4 = 5 us: 285 us.
  auto c = rail(2);
  c.comm.tree_all_reduce = false;  // the rings' protocol choice
  c.comm.protocols.push_back({"ll", {1e-6, "test"}, {0.0, "test"}, {0.5, "test"}});
  TestCostModel costs;
  sched::TaskGraph g(8);
  collective(g, "ar", sched::CollectiveKind::all_reduce, ranks(0, 8), 16'000'000, 1);
  const sim::SimResult r = sim::Simulator(c, costs).run(g);
  CHECK(r.makespan_ps == 155'000'000);
}

TEST_CASE("LL across two DGX H100 nodes: a small all-reduce pays NCCL's ring latency, eight chunks in flight",
          "[sim][rings]") {
  // The shipped dgx-h100-128node, ranks 0-15 (two nodes of 8): 8 rings, 2(16-1) = 30 steps, 8 KiB, so
  // 64 B per ring and step: LL (base 8.474 us fitted on nccl-tests, no step latency beyond the route)
  // beats LL128 (base 7.977 us + 30 x 1.3 us of steps) and Simple (base 8.4 us + 30 x (2.8 + ...) us).
  // Route latencies: inside a node GPU -> NVSwitch -> GPU 2 x 0.3 = 0.6 us; across, GPU -> PCIe -> PCIe
  // -> NIC -> leaf -> NIC -> PCIe -> PCIe -> GPU 4 x 0.25 + 2 x 0.85 = 2.7 us, which is NCCL's LL
  // network hop too (network_tuning: max(2.7 + 0, 2.7)). On each ring 14 hops inside the nodes and 2
  // across; a member's last send lands 30 consecutive hops after the base, the most that hold 4
  // crossings: 8.474 + 26 x 0.6 + 4 x 2.7 = 34.874 us (NCCL's form, intra steps x intra latency +
  // inter steps x network latency), plus at most 30 drains of 64 B. Across two nodes LL moves at most
  // the hosts' 39 GB/s of bus bandwidth (network_tuning, NCCL's llMaxBw for Intel): 8 rings x
  // 49.61 GB/s x 0.4334 = 172.0 GB/s, so its efficiency is scaled by 39 / 172.0 = 0.2267 and a drain
  // takes 64 / (49.61e9 x 0.4334 x 0.2267) = 13.1 ns, where uncapped it took 3.0 ns. LL keeps up to 8
  // chunks of a ring in flight: with Simple's 2 a member at a node boundary, whose sends take 2.7 us
  // where its receives come every ~0.6 us, would hold the ring back.
  topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-128node");
  c.comm.tree_all_reduce = false;  // NCCL_ALGO=Ring: by default NCCL's tree takes it
  c.comm.network_tuning->collective_model.reset();  // the simulated ring's own latency (NCCL's model: below)
  TestCostModel costs;
  sched::TaskGraph g(16);
  collective(g, "ar", sched::CollectiveKind::all_reduce, ranks(0, 16), 8192, 1);
  const sim::SimResult r = sim::Simulator(c, costs).run(g);
  CHECK(r.makespan_ps >= 34'874'000);
  CHECK(r.makespan_ps <= 34'874'000 + 30 * 13'200);
  CHECK(r.makespan_ps > 34'874'000 + 30 * 3'000);  // the cap drains slower than the protocol alone would
}

TEST_CASE("Between nodes a ring step costs at least NCCL's network hop for its protocol", "[sim][rings]") {
  // Ranks 0 and 8 of dgx-h100-128node (one on each of two nodes, both on rail 0), Simple alone (the
  // topology's LL and LL128 removed) and no tree: an all-reduce of 2 ranks is 2 steps, each a hop
  // between the nodes. The route is 2.7 us and Simple's step 2.8 us, 5.5 us together; NCCL's tuning
  // model prices Simple's network hop at 14 us (network_tuning.ring_hop_latency_s.simple), which the
  // step takes: 8.4 + 2 x 14 = 36.4 us, plus two drains of 32 B (0.7 ns each). Without the topology's
  // network_tuning: 8.4 + 2 x 5.5 = 19.4 us.
  topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-128node");
  c.comm.protocols.clear();
  c.comm.tree_all_reduce = false;
  TestCostModel costs;
  sched::TaskGraph g(16);
  collective(g, "ar", sched::CollectiveKind::all_reduce, {0, 8}, 64, 1);
  const sim::SimResult r = sim::Simulator(c, costs).run(g);
  CHECK(r.makespan_ps >= 36'400'000);
  CHECK(r.makespan_ps <= 36'400'000 + 2 * 1'000);
  c.comm.network_tuning.reset();
  const sim::SimResult plain = sim::Simulator(c, costs).run(g);
  CHECK(plain.makespan_ps >= 19'400'000);
  CHECK(plain.makespan_ps <= 19'400'000 + 2 * 1'000);
}

TEST_CASE("NCCL's tree between two nodes: its network hops at NCCL's tree latency, LL within the hosts' cap, "
          "its size's correction",
          "[sim][rings]") {
  // Ranks 0-15 of dgx-h100-128node (two nodes of 8), 1 KiB, the tree allowed. The ring picks LL (its
  // time 8.474 + 30 x (14 x 0.6 + 2 x 2.7) / 16 = 34.349 us and little data); the tree, with LL's
  // constants, crosses 2 x (7 hops inside a node at 0.6 us + 1 between nodes at NCCL's tree LL hop,
  // max(2.7, 5.0) = 5.0 us) = 18.4 us after the base: 26.874 us. Its data: the ring's, 30 steps of
  // 1024 / 16 / 8 = 8 B per ring at 49.61 GB/s x 0.4334, halved on two nodes, over 0.92, over the cap's
  // share of the tree's bus bandwidth, 39 / (8 x 49.61 x 0.4334 x 0.92 x 2) = 0.12323, over NCCL's
  // tree correction for LL at log2(1024 / 64) = 4, 0.9 (network_tuning.tree_size_factors).
  topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-128node");
  c.comm.network_tuning->collective_model.reset();  // the simulated tree (NCCL's model: below)
  TestCostModel costs;
  sched::TaskGraph g(16);
  collective(g, "ar", sched::CollectiveKind::all_reduce, ranks(0, 16), 1024, 1);
  const sim::SimResult r = sim::Simulator(c, costs).run(g);
  REQUIRE(r.best_tree_all_reduce.has_value());
  const double bus = 8 * 49.61e9 * 0.4334 * 0.92 * 2;
  const double data = 30 * 8.0 / (49.61e9 * 0.4334) * 0.5 / 0.92 / (39e9 / bus) / 0.9;
  CHECK(r.best_tree_all_reduce->tree_s == Approx(26.874e-6 + data).epsilon(1e-9));
  CHECK(r.best_tree_all_reduce->ring_s == Approx(34.349e-6 + 30 * 8.0 / (49.61e9 * 0.4334) / (39e9 / (8 * 49.61e9 * 0.4334)))
                                               .epsilon(1e-9));
}

TEST_CASE("all-reduce over 2 nodes x 4 runs as NCCL's tree: its latency on the ring's flows", "[sim][rings]") {
  // The latency-bound all-reduce above (n = 32 B) by default. NCCL's tree (g = 4 per node, N = 2):
  // 2 x ((g - 1) x (2 + 3) + ceil(log2 2) x (4 + 3)) = 44 us of hops against the ring's 14 x 5.5 = 77;
  // its data (1 B flows) is nothing, so it is taken. The ring's flows carry it, each step's latency
  // 44e6 / 14 = 3,142,857.14 -> 3,142,857 ps: a member's last send lands 14 steps after the base,
  // 8e6 + 14 x 3,142,857 = 51,999,998 ps, plus 14 drains of at most 20 ps, each rounded up.
  const topo::Cluster c = rail(2);
  TestCostModel costs;
  sched::TaskGraph g(8);
  collective(g, "ar", sched::CollectiveKind::all_reduce, ranks(0, 8), 32, 1);
  const sim::SimResult r = sim::Simulator(c, costs).run(g);
  CHECK(r.makespan_ps >= 51'999'998);
  CHECK(r.makespan_ps <= 51'999'998 + 14 * 20 + 14);
  REQUIRE(r.best_tree_all_reduce.has_value());
  CHECK(r.best_tree_all_reduce->nodes == 2);
  // 8 + 44 us, and the ring's data, 14 x 20 ps, halved over 0.92.
  CHECK(r.best_tree_all_reduce->tree_s == Approx(52e-6 + 14 * 20e-12 * 0.5 / 0.92).epsilon(1e-12));
  // Bandwidth-bound (32e6 B, the first case): on two nodes each node sends its reduced half once, n / g
  // per NIC, half a ring's bytes, at 0.92: the NIC's 14 chunks of 1e6 B drain as 1e6 / (50 GB/s x 0.92
  // x 2) = 10.87 us each, about half the ring's 295 us.
  sched::TaskGraph big(8);
  collective(big, "ar", sched::CollectiveKind::all_reduce, ranks(0, 8), 32'000'000, 1);
  const sim::SimResult rb = sim::Simulator(c, costs).run(big);
  CHECK(rb.makespan_ps < 295'000'000 * 0.6);
  CHECK(rb.makespan_ps > 14 * 10'869'565);
}

TEST_CASE("all-gather inside one node keeps the single ring (unchanged timing)", "[sim][rings]") {
  // 4 ranks of node 0, n = 4e6 B: 3 steps of 1e6 B at 400 GB/s = 2.5 us, alpha = 2 x 1 us + 3 us.
  // base 8 + 3 x 7.5 = 30.5 us.
  const topo::Cluster c = rail(2);
  TestCostModel costs;
  sched::TaskGraph g(8);
  collective(g, "ag", sched::CollectiveKind::all_gather, ranks(0, 4), 4'000'000, 1);
  const sim::SimResult r = sim::Simulator(c, costs).run(g);
  CHECK(r.makespan_ps == 30'500'000);
  CHECK(r.transfers.size() == 4 * 3);
}

TEST_CASE("a group inside a full mesh runs one ring per stride coprime to its size, on distinct links",
          "[sim][rings]") {
  // 8 devices: strides 1, 3, 5, 7 (phi(8) = 4 of each device's 7 links); 5 devices (prime): all 4.
  const topo::Cluster c8 = mesh(8);
  const auto rings8 = collective_rings(ranks(0, 8), c8);
  REQUIRE(rings8.size() == 4);
  CHECK(rings8[0] == ranks(0, 8));                                         // stride 1: the group order
  CHECK(rings8[1] == std::vector<int>{0, 3, 6, 1, 4, 7, 2, 5});            // stride 3
  std::set<std::pair<int, int>> used;
  for (const auto& ring : rings8) {
    require_permutation(ring, 8);
    for (std::size_t i = 0; i < ring.size(); ++i)
      CHECK(used.insert({ring[i], ring[(i + 1) % ring.size()]}).second);  // no directed link twice
  }
  CHECK(collective_rings(ranks(0, 5), mesh(5)).size() == 4);
  // Two members: one ring (the only link).
  CHECK(collective_rings({0, 1}, c8).size() == 1);
}

TEST_CASE("all-gather inside a 4-device full mesh: two rings, each half of a step on its own link",
          "[sim][rings]") {
  // Strides 1 and 3 (0->1->2->3 and 0->3->2->1): each step moves n/(t x 2) = 0.5e6 B per ring on a
  // link of its own at 400 GB/s = 1.25 us, + 1 us link + 3 us SM step latency = 5.25 us.
  // base 8 + 3 x 5.25 = 23.75 us (one ring: 8 + 3 x (2.5 + 4) = 27.5 us).
  const topo::Cluster c = mesh(4);
  TestCostModel costs;
  sched::TaskGraph g(4);
  collective(g, "ag", sched::CollectiveKind::all_gather, ranks(0, 4), 4'000'000, 1);
  const sim::SimResult r = sim::Simulator(c, costs).run(g);
  CHECK(r.makespan_ps == 23'750'000);
  CHECK(r.transfers.size() == 4 * 3 * 2);
}
