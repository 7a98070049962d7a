// The clusters shipped in topologies/: they load by name (embedded copy) and by path, have the
// expected shape, and their routes follow the documented construction.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"
#include "topo_test_util.hpp"

using namespace fusesim;
using namespace fusesim::topo;
using topo_test::check_route_invariants;
using topo_test::link_names;

namespace {

struct Expected {
  const char* name;
  int nodes;
  int devices_per_node;
  const char* model;
  double bf16_peak;
  int sm_count;
  bool estimate;
};

// Figures as written in the files (from /work/shared/reference/measurements.md).
const std::vector<Expected> kShipped = {
    {"dgx-h100", 1, 8, "h100-sxm", 989e12, 132, false},
    {"dgx-a100", 1, 8, "a100-sxm-80gb", 312e12, 108, false},
    {"hgx-h200", 1, 8, "h200-sxm", 989e12, 132, false},
    {"dgx-h100-4node", 4, 8, "h100-sxm", 989e12, 132, false},
    {"dgx-h100-128node", 128, 8, "h100-sxm", 989e12, 132, false},
    {"ascend-910b-8", 1, 8, "ascend-910b", 320e12, 24, true},
    // Not in measurements.md: 148 SMs (Chips and Cheese, 2 dies x 74); the rest is.
    {"dgx-b200", 1, 8, "b200-sxm", 2250e12, 148, false},
    {"dgx-b200-4node", 4, 8, "b200-sxm", 2250e12, 148, false},
    // Selene-like (the SC21 and Korthikanti et al. runs of docs/validation.md): 32 DGX A100 nodes.
    {"dgx-a100-32node", 32, 8, "a100-sxm-80gb", 312e12, 108, false},
    // The SC21 runs with pipeline stages (39.1B-145.6B on 512-1536 GPUs): 192 nodes.
    {"dgx-a100-192node", 192, 8, "a100-sxm-80gb", 312e12, 108, false},
    // The SC21 310B run on 1,920 GPUs (240 nodes).
    {"dgx-a100-320node", 320, 8, "a100-sxm-80gb", 312e12, 108, false},
    // The Megatron-Core r0.8 runs of 119B-462B parameters on 1,536-6,144 H100s: 768 nodes.
    {"dgx-h100-768node", 768, 8, "h100-sxm", 989e12, 132, false},
    // Device variants of published runs (issue 12): the H800 (NVLink cut to 400 GB/s), the A100 40 GB.
    {"dgx-h800", 1, 8, "h800-sxm", 989e12, 132, false},
    {"dgx-a100-40gb", 1, 8, "a100-sxm-40gb", 312e12, 108, false},
    // Trainy's H200 hosts of torchtitan's H200 benchmark: hgx-h200 boards with a 400 Gb/s NIC per GPU.
    {"hgx-h200-8node", 8, 8, "h200-sxm", 989e12, 132, false},
    // H100 PCIe cards (issue 12's device variants): 1,513 TFLOPS bf16 with sparsity, 114 SMs.
    {"h100-pcie", 1, 8, "h100-pcie", 756.5e12, 114, false},
    // Meta's Grand Teton hosts of torchtitan's H100 benchmarks: H100 SXM with 96 GB HBM2e at 500 W.
    {"grand-teton-h100", 1, 8, "h100-sxm-96gb-500w", 989e12, 132, false},
    {"grand-teton-h100-64node", 64, 8, "h100-sxm-96gb-500w", 989e12, 132, false},
};

std::string shipped_path(const std::string& name) {
  return std::string(FUSESIM_SOURCE_DIR) + "/topologies/" + name + ".json";
}

}  // namespace

TEST_CASE("every shipped topology is embedded and listed by the test") {
  // Every shipped file; a new one must be added to kShipped so that it is checked too.
  const auto files = embedded_files("topologies");
  std::vector<std::string> expected;
  for (const auto& e : kShipped) expected.push_back(std::string("topologies/") + e.name + ".json");
  std::sort(expected.begin(), expected.end());
  REQUIRE(files == expected);
}

TEST_CASE("shipped topologies load by name and by path with the expected shape") {
  for (const auto& e : kShipped) {
    SECTION(e.name) {
      const Cluster by_name = load_cluster_by_name_or_path(e.name);
      const Cluster by_path = load_cluster(shipped_path(e.name));
      for (const Cluster* c : {&by_name, &by_path}) {
        CHECK(c->name == e.name);
        CHECK(c->num_nodes == e.nodes);
        CHECK(c->devices_per_node == e.devices_per_node);
        CHECK(c->num_ranks() == e.nodes * e.devices_per_node);
        CHECK(c->device(0).name == e.model);
        CHECK(c->device(0).peak(Dtype::bf16) == e.bf16_peak);
        CHECK(c->device(0).sm_count == e.sm_count);
        CHECK(c->device(0).estimate == e.estimate);
        CHECK_FALSE(c->device(0).sm_count_source.empty());
        // Ranks are node-major: rank = node * devices_per_node + local index.
        for (int r = 0; r < c->num_ranks(); ++r) {
          CHECK(c->node_of(r) == r / e.devices_per_node);
          CHECK(c->vertices.at(static_cast<std::size_t>(c->rank_vertex[static_cast<std::size_t>(r)])).rank == r);
          CHECK(c->rank_model[static_cast<std::size_t>(r)] == e.model);
        }
      }
      // The by-name and by-path copies are the same file.
      CHECK(by_name.links.size() == by_path.links.size());
      CHECK(by_name.vertices.size() == by_path.vertices.size());
      // Every route between two ranks is well formed and symmetric in length and latency. On the
      // 1024-rank cluster, all pairs would be a million searches: there the sources are the first
      // and last GPU of the first, second and last node and of a middle one, and the way back is
      // checked for every 61st destination (a prime stride, so every local index is visited).
      const Cluster& c = by_name;
      const bool all_pairs = c.num_ranks() <= 64;
      std::vector<int> sources;
      if (all_pairs) {
        for (int s = 0; s < c.num_ranks(); ++s) sources.push_back(s);
      } else {
        const int per = c.devices_per_node, last = c.num_ranks() / per - 1;
        for (int node : {0, 1, last / 2, last})
          for (int local : {0, per - 1}) sources.push_back(node * per + local);
      }
      for (int s : sources) {
        const auto routes = c.routes_from(s);
        REQUIRE(routes.size() == static_cast<std::size_t>(c.num_ranks()));
        CHECK(routes[static_cast<std::size_t>(s)].links.empty());
        for (int d = 0; d < c.num_ranks(); ++d) {
          if (d == s) continue;
          check_route_invariants(c, s, d, routes[static_cast<std::size_t>(d)]);
          if (!all_pairs && d % 61 != 0) continue;
          const Route back = c.route(d, s);
          CHECK(back.links.size() == routes[static_cast<std::size_t>(d)].links.size());
          CHECK(back.latency_ps == routes[static_cast<std::size_t>(d)].latency_ps);
        }
      }
    }
  }
}

TEST_CASE("dgx-h100: two GPUs of the node talk through the NVSwitch") {
  const Cluster c = load_cluster_by_name_or_path("dgx-h100");
  // 8 GPUs + 1 NVSwitch + 8 PCIe switches + 8 NICs = 25 vertices.
  CHECK(c.vertices.size() == 25);
  // Duplex pairs: 8 GPU<->NVSwitch + 8 GPU<->PCIe + 8 PCIe<->NIC = 24 pairs = 48 directed links.
  CHECK(c.links.size() == 48);
  const Route r = c.route(0, 5);
  CHECK(link_names(c, r) == std::vector<std::string>{"node0/gpu0->node0/nvswitch", "node0/nvswitch->node0/gpu5"});
  // Each NVLink hop is 0.3 us (half of NCCL's LL NVLink hop 0.6 us): 2 x 300000 ps.
  CHECK(r.latency_ps == 600000);
  const Link& l = c.links.at(static_cast<std::size_t>(r.links[0]));
  CHECK(l.kind == LinkKind::nvlink);
  CHECK(l.line_rate_bytes_per_s == 450e9);
  CHECK(l.efficiency == 0.8444);
  // 450e9 x 0.8444 = 379.98e9 B/s.
  CHECK(l.bandwidth_bytes_per_s == Approx(379.98e9).epsilon(1e-12));
  CHECK(c.vertices.at(static_cast<std::size_t>(l.to)).switch_kind == SwitchKind::nvswitch);
  // Same call twice gives the same route.
  CHECK(c.route(0, 5).links == r.links);
  // Communication parameters as in the file: 8.4 us, 3.4 - 0.6 us, 0.8/0.8444.
  CHECK(c.comm.collective_base_latency_s.value == 8.4e-6);
  CHECK(c.comm.sm_step_latency_s.value == 2.8e-6);
  CHECK(c.comm.sm_kernel_efficiency.value == 0.9474);
  CHECK(c.device(0).contention.default_comm_sms.value == 16);
  // NCCL's 24 ring channels inside one H100 node, 16 across nodes and for P2P (the file's sources).
  REQUIRE(c.device(0).contention.node_collective_sms.has_value());
  CHECK(c.device(0).contention.node_collective_sms->value == 24);
  CHECK(c.device(0).contention.collective_sms(true) == 24);
  CHECK(c.device(0).contention.collective_sms(false) == 16);
  CHECK(c.device(0).kernel_launch_s.value == 2e-6);
  CHECK(c.device(0).stream_wait_s.value == 1e-6);
}

TEST_CASE("every A100 topology: a collective inside one node holds NCCL's 24 ring channels, 16 across nodes") {
  // An HGX A100 node's NCCL log lists 'Channel 00/24' to 'Channel 23/24', each ring over the 8 GPUs
  // (NVIDIA/nccl-tests#100): 24 SMs for a node collective, as on the H100; the 40 GB part has the same
  // die and NVSwitch.
  for (const char* name : {"dgx-a100", "dgx-a100-40gb", "dgx-a100-32node", "dgx-a100-192node", "dgx-a100-320node"}) {
    INFO(name);
    const Cluster c = load_cluster_by_name_or_path(name);
    const auto& contention = c.device(0).contention;
    REQUIRE(contention.node_collective_sms.has_value());
    CHECK(contention.node_collective_sms->source.find("NVIDIA/nccl-tests#100") != std::string::npos);
    CHECK(contention.collective_sms(true) == 24);
    CHECK(contention.collective_sms(false) == 16);
  }
}

TEST_CASE("h100-pcie: two GPUs of the server talk through a PCIe switch at PCIe 5.0 x16") {
  const Cluster c = load_cluster_by_name_or_path("h100-pcie");
  // 8 GPUs + 1 PCIe switch, 8 duplex pairs = 16 directed links; no NICs.
  CHECK(c.vertices.size() == 9);
  CHECK(c.links.size() == 16);
  const Route r = c.route(0, 5);
  CHECK(link_names(c, r) == std::vector<std::string>{"node0/gpu0->node0/pcie-switch", "node0/pcie-switch->node0/gpu5"});
  // NCCL's LL PCI hop, 1.0 us, over the two links: 2 x 500000 ps.
  CHECK(r.latency_ps == 1000000);
  const Link& l = c.links.at(static_cast<std::size_t>(r.links[0]));
  CHECK(l.kind == LinkKind::pcie);
  // 32 GT/s x 16 lanes x 128/130 / 8 = 63.0 GB/s each way, at 0.85.
  CHECK(l.bandwidth_bytes_per_s == Approx(63e9 * 0.85).epsilon(1e-12));
  // 80 GB HBM2e at 2.0 TB/s; NCCL's Simple PCI hop 5.7 us less the LL hop's 1.0 us; LL at half the bandwidth.
  CHECK(c.device(0).hbm_bandwidth_bytes_per_s.value == 2.0e12);
  CHECK(c.comm.sm_step_latency_s.value == 4.7e-6);
}

TEST_CASE("dgx-h100-4node: cross-node routes go GPU -> PCIe switch -> NIC -> leaf -> ... -> NIC -> GPU") {
  const Cluster c = load_cluster_by_name_or_path("dgx-h100-4node");
  REQUIRE(c.num_ranks() == 32);
  // 32 GPUs + 4 x (1 NVSwitch + 8 PCIe + 8 NICs) + 8 leaves + 4 spines = 32 + 68 + 12 = 112.
  CHECK(c.vertices.size() == 112);
  // Pairs: per node 24 (as dgx-h100) -> 96; NIC<->leaf 32; leaf<->spine 8 x 4 = 32. 160 pairs.
  CHECK(c.links.size() == 320);

  SECTION("same rail: rank 0 (node0/gpu0) to rank 8 (node1/gpu0) stays on leaf0") {
    const Route r = c.route(0, 8);
    // 6 links: GPU->PCIe, PCIe->NIC, NIC->leaf, leaf->NIC, NIC->PCIe, PCIe->GPU.
    CHECK(link_names(c, r) == std::vector<std::string>{
                                  "node0/gpu0->node0/pcie0", "node0/pcie0->node0/nic0", "node0/nic0->leaf0",
                                  "leaf0->node1/nic0", "node1/nic0->node1/pcie0", "node1/pcie0->node1/gpu0"});
    // 4 PCIe links x 0.25 us + 2 NIC links x 0.85 us = 2.7 us (NCCL's LL network hop).
    CHECK(r.latency_ps == 2700000);
    CHECK(c.links.at(static_cast<std::size_t>(r.links[2])).kind == LinkKind::network);
    CHECK(c.links.at(static_cast<std::size_t>(r.links[0])).kind == LinkKind::pcie);
  }
  SECTION("cross rail: rank 0 to rank 27 (node3/gpu3) climbs to the spine D-mod-K picks") {
    const Route r = c.route(0, 27);
    // 8 links: the 6 above plus leaf0->spine and spine->leaf3. All 4 spines tie (same latency and
    // hops); D-mod-K takes spine (destination node mod 4) = 3 mod 4 = spine3.
    CHECK(link_names(c, r) == std::vector<std::string>{
                                  "node0/gpu0->node0/pcie0", "node0/pcie0->node0/nic0", "node0/nic0->leaf0",
                                  "leaf0->spine3", "spine3->leaf3", "leaf3->node3/nic3", "node3/nic3->node3/pcie3",
                                  "node3/pcie3->node3/gpu3"});
    // 2.7 us + 2 x 0.25 us spine links = 3.2 us.
    CHECK(r.latency_ps == 3200000);
    const Route back = c.route(27, 0);
    CHECK(back.links.size() == 8);
    CHECK(link_names(c, back)[3] == "leaf3->spine0");  // destination node 0: spine 0
  }
  SECTION("cross-rail routes from one leaf spread over the spines by destination node") {
    // node0/gpu7 to gpu0 of nodes 1, 2, 3 (the hops of a flat 32-rank ring): spines 1, 2, 3, so the
    // three flows climb leaf7's three different uplinks instead of sharing one.
    for (int node = 1; node < 4; ++node)
      CHECK(link_names(c, c.route(7, node * 8))[3] == fmt::format("leaf7->spine{}", node));
  }
  SECTION("intra-node routes still use the NVSwitch") {
    CHECK(link_names(c, c.route(9, 14)) ==
          std::vector<std::string>{"node1/gpu1->node1/nvswitch", "node1/nvswitch->node1/gpu6"});
  }
  SECTION("routes_from agrees with route") {
    const auto all = c.routes_from(5);
    for (int d = 0; d < 32; ++d)
      if (d != 5) CHECK(all[static_cast<std::size_t>(d)].links == c.route(5, d).links);
  }
}

TEST_CASE("dgx-b200: one node of 8 B200 on NVLink5 built as dgx-h100") {
  const Cluster c = load_cluster_by_name_or_path("dgx-b200");
  // Same construction as dgx-h100: 8 GPUs + 1 NVSwitch (the two chips as one) + 8 PCIe + 8 NICs.
  CHECK(c.vertices.size() == 25);
  CHECK(c.links.size() == 48);
  const Route r = c.route(0, 5);
  CHECK(link_names(c, r) == std::vector<std::string>{"node0/gpu0->node0/nvswitch", "node0/nvswitch->node0/gpu5"});
  CHECK(r.latency_ps == 600000);  // 2 x 0.3 us, assumed as H100
  const Link& l = c.links.at(static_cast<std::size_t>(r.links[0]));
  CHECK(l.line_rate_bytes_per_s == 900e9);
  // 900e9 x 0.8444 (the H100 copy-engine fraction) = 759.96e9 B/s, twice dgx-h100's 379.98e9.
  CHECK(l.bandwidth_bytes_per_s == Approx(759.96e9).epsilon(1e-12));
  const auto& d = c.device(0);
  CHECK(d.hbm_bytes.value == 180e9);
  CHECK(d.hbm_bandwidth_bytes_per_s.value == 8.0e12);
  CHECK(d.peak(Dtype::fp8) == 4500e12);
  // 1745 / 2250 = 0.77556, rounded to four places.
  CHECK(d.efficiency.gemm.value == 0.7756);
  CHECK(d.efficiency.attention.source.rfind("estimate", 0) == 0);
}

TEST_CASE("dgx-b200-4node: the dgx-h100-4node fabric under DGX B200 nodes") {
  const Cluster c = load_cluster_by_name_or_path("dgx-b200-4node");
  REQUIRE(c.num_ranks() == 32);
  // 32 GPUs + 4 x (1 NVSwitch + 8 PCIe + 8 NICs) + 8 leaves + 4 spines = 32 + 68 + 12 = 112.
  CHECK(c.vertices.size() == 112);
  // Pairs: per node 24 -> 96; NIC<->leaf 4 x 8 = 32; leaf<->spine 8 x 4 = 32. 160 pairs, 320 links.
  CHECK(c.links.size() == 320);
  // Same rail: 4 PCIe links x 0.25 us + 2 NIC links x 0.85 us = 2.7 us.
  const Route same = c.route(0, 8);
  CHECK(link_names(c, same)[2] == "node0/nic0->leaf0");
  CHECK(link_names(c, same)[3] == "leaf0->node1/nic0");
  CHECK(same.latency_ps == 2700000);
  // Cross rail: + 2 spine links x 0.25 us = 3.2 us, through spine (3 mod 4) = spine3.
  const Route cross = c.route(0, 27);
  REQUIRE(cross.links.size() == 8);
  CHECK(link_names(c, cross)[3] == "leaf0->spine3");
  CHECK(cross.latency_ps == 3200000);
  // The generator gives a spine link the NIC's figures: 50e9 x 0.9922 = 49.61e9 B/s.
  const Link& up = c.links.at(static_cast<std::size_t>(cross.links[3]));
  CHECK(up.line_rate_bytes_per_s == 50e9);
  CHECK(up.bandwidth_bytes_per_s == Approx(49.61e9).epsilon(1e-12));
  CHECK(link_names(c, c.route(9, 14)) ==
        std::vector<std::string>{"node1/gpu1->node1/nvswitch", "node1/nvswitch->node1/gpu6"});
}

TEST_CASE("the generated rail topologies are what tools/make_rail_topology.py writes") {
  // A change to dgx-b200.json (or dgx-h100-4node.json) must be carried to the files made from it.
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) {
    WARN("python3 is not available: skipped");
    return;
  }
  const std::string src = FUSESIM_SOURCE_DIR;
  const auto out = std::filesystem::temp_directory_path() / ("fusesim-rail-" + std::to_string(::getpid()) + ".json");
  struct Case {
    const char* args;
    const char* file;
  };
  for (const Case& k : {Case{"--node dgx-b200 --nodes 4 --spines 4", "dgx-b200-4node"},
                        Case{"--nodes 128 --spines 16", "dgx-h100-128node"},
                        Case{"--node dgx-a100 --nodes 32 --spines 32", "dgx-a100-32node"},
                        Case{"--node dgx-a100 --nodes 192 --spines 32", "dgx-a100-192node"},
                        Case{"--node dgx-a100 --nodes 320 --spines 32", "dgx-a100-320node"},
                        Case{"--nodes 768 --spines 64", "dgx-h100-768node"}}) {
    INFO(k.file);
    const std::string cmd = fmt::format("python3 {}/tools/make_rail_topology.py {} > {}", src, k.args, out.string());
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::ifstream generated(out), shipped(src + "/topologies/" + k.file + ".json");
    CHECK(nlohmann::json::parse(generated) == nlohmann::json::parse(shipped));
  }
  std::filesystem::remove(out);
}

TEST_CASE("ascend-910b-8: full HCCS mesh, one direct link per pair") {
  const Cluster c = load_cluster_by_name_or_path("ascend-910b-8");
  // No switch at all: 8 NPUs, 8 x 7 = 56 directed links.
  CHECK(c.vertices.size() == 8);
  CHECK(c.links.size() == 56);
  const Route r = c.route(2, 7);
  CHECK(link_names(c, r) == std::vector<std::string>{"node0/npu2->node0/npu7"});
  CHECK(c.links.at(static_cast<std::size_t>(r.links[0])).kind == LinkKind::hccs);
  CHECK(r.latency_ps == 1000000);
  CHECK(c.device(0).estimate);
  CHECK_THROWS_AS(c.device(0).peak(Dtype::fp8), std::out_of_range);
}

TEST_CASE("dgx-a100 and hgx-h200 figures") {
  const Cluster a = load_cluster_by_name_or_path("dgx-a100");
  const Route ra = a.route(0, 1);
  CHECK(a.links.at(static_cast<std::size_t>(ra.links[0])).line_rate_bytes_per_s == 300e9);
  CHECK(a.device(0).hbm_bandwidth_bytes_per_s.value == 2.0e12);
  const Cluster h = load_cluster_by_name_or_path("hgx-h200");
  // No NICs on the HGX board: 8 GPUs + NVSwitch, 16 links.
  CHECK(h.vertices.size() == 9);
  CHECK(h.links.size() == 16);
  CHECK(h.device(3).hbm_bytes.value == 141e9);
  CHECK(h.device(3).hbm_bandwidth_bytes_per_s.value == 4.8e12);
}

TEST_CASE("the example in docs/topology.md is a valid topology") {
  // The first ```json block after "## Example"; a user copies it, so it must load as documented.
  const std::string md = read_text_file(std::string(FUSESIM_SOURCE_DIR) + "/docs/topology.md");
  const auto begin = md.find("```json\n", md.find("## Example"));
  REQUIRE(begin != std::string::npos);
  const auto end = md.find("```", begin + 8);
  REQUIRE(end != std::string::npos);
  const auto json_text = md.substr(begin + 8, end - begin - 8);
  if (json_text.find("\"schema_version\"") == std::string::npos) FAIL("the first json block is not the example");
  const Cluster c = parse_cluster(JsonDocument::parse(json_text, "docs/topology.md"));
  // 2 nodes x 4 GPUs; per node 1 NVSwitch + 2 PCIe switches + 2 NICs; 1 fabric switch: 8 + 10 + 1.
  CHECK(c.num_ranks() == 8);
  CHECK(c.vertices.size() == 19);
  // Rank 5 is node 1, local GPU 1 (node-major).
  CHECK(c.vertices.at(static_cast<std::size_t>(c.rank_vertex[5])).name == "node1/gpu1");
}

TEST_CASE("an unknown topology name is an InputError naming it") {
  try {
    load_cluster_by_name_or_path("no-such-cluster");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(e.file() == "no-such-cluster");
    CHECK(e.json_path() == "$");
  }
}

TEST_CASE("dgx-h800: an H100 SXM5 node with NVLink cut to 400 GB/s per GPU - dgx-a100-40gb: half the memory") {
  const Cluster h800 = load_cluster_by_name_or_path("dgx-h800");
  const Cluster h100 = load_cluster_by_name_or_path("dgx-h100");
  // 400 GB/s per GPU over both directions is 200 GB/s each way, against the H100's 450: the first link
  // of the route between two GPUs (GPU -> NVSwitch).
  const Route r800 = h800.route(0, 1), r100 = h100.route(0, 1);
  CHECK(h800.links.at(static_cast<std::size_t>(r800.links[0])).line_rate_bytes_per_s == 200e9);
  CHECK(h100.links.at(static_cast<std::size_t>(r100.links[0])).line_rate_bytes_per_s == 450e9);
  CHECK(h800.device(0).hbm_bandwidth_bytes_per_s.value == h100.device(0).hbm_bandwidth_bytes_per_s.value);
  CHECK(h800.device(0).peak_flops_per_s.at(Dtype::bf16).value == 989e12);
  const Cluster a40 = load_cluster_by_name_or_path("dgx-a100-40gb");
  CHECK(a40.device(0).hbm_bytes.value == 40e9);
  CHECK(a40.device(0).hbm_bandwidth_bytes_per_s.value == 1.555e12);
  // Both run the kernels of the profiled device of their die: the H800 at its rates (the same HBM3
  // and power), the A100 40 GB with memory-bound kernels at 1,555 / 2,000 of theirs.
  REQUIRE(h800.device(0).kernels_as);
  CHECK(h800.device(0).kernels_as->device_model == "h100-sxm");
  REQUIRE(a40.device(0).kernels_as);
  CHECK(a40.device(0).kernels_as->device_model == "a100-sxm-80gb");
  CHECK(a40.device(0).kernels_as->elementwise.value == Approx(1.555e12 / 2.0e12).epsilon(1e-12));
}

TEST_CASE("grand-teton-h100: torchtitan's H100 hosts, 96 GB of HBM2e at 2.4 TB/s and a 500 W limit") {
  const Cluster gt = load_cluster_by_name_or_path("grand-teton-h100");
  const Cluster h100 = load_cluster_by_name_or_path("dgx-h100");
  const DeviceModel& d = gt.device(0);
  CHECK(d.hbm_bytes.value == 96e9);
  CHECK(d.hbm_bandwidth_bytes_per_s.value == 2.4e12);
  REQUIRE(d.kernels_as);
  CHECK(d.kernels_as->device_model == "h100-sxm");
  // Memory-bound kernels at the HBM ratio; the 500 W clock an estimate, its derivation in the source:
  // (500 - 85) / (700 - 85) of the dynamic power, cube root.
  CHECK(d.kernels_as->elementwise.value == Approx(2.4 / 3.35).epsilon(1e-4));
  CHECK(d.kernels_as->gemm.value == Approx(std::cbrt(415.0 / 615.0)).epsilon(1e-3));
  CHECK(d.kernels_as->gemm.source.rfind("estimate", 0) == 0);
  // The host is a DGX H100's NVLink and NICs: the same route between two GPUs.
  CHECK(gt.route(0, 1).latency_ps == h100.route(0, 1).latency_ps);
  CHECK(gt.bottleneck_bytes_per_s(gt.route(0, 1)) == h100.bottleneck_bytes_per_s(h100.route(0, 1)));
}
