// `fusesim routes` and `fusesim --version`.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "process.hpp"

using namespace fusesim::testing;
using nlohmann::json;

TEST_CASE("routes --from --to prints the path link by link with its bottleneck", "[cli][routes]") {
  ScratchDir dir;
  // dgx-h100-4node: ranks 0 and 1 share node 0's NVSwitch: 2 hops of 450 GB/s line rate.
  const auto r = run_fusesim({"routes", "--topology", "dgx-h100-4node", "--from", "0", "--to", "1", "--format", "json"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  REQUIRE(doc["links"].size() == 2);
  CHECK(doc["links"][0]["kind"] == "nvlink");
  CHECK(doc["links"][0]["name"] == "node0/gpu0->node0/nvswitch");
  CHECK(doc["links"][1]["name"] == "node0/nvswitch->node0/gpu1");
  CHECK(doc["hops"] == 2);
  CHECK(doc["links"][0]["line_rate_bytes_per_s"].get<double>() == 450e9);
  // Rank 0 to rank 8 (node 1, same local index): GPU -> PCIe -> NIC -> leaf -> NIC -> PCIe -> GPU, all
  // on rail 0; its bottleneck is a NIC link, not NVLink.
  const auto x = run_fusesim({"routes", "--topology", "dgx-h100-4node", "--from", "0", "--to", "8", "--format", "json"},
                             dir);
  REQUIRE(x.exit_code == 0);
  const json cross = json::parse(x.out);
  CHECK(cross["hops"] == 6);
  for (const json& l : cross["links"]) CHECK(l["kind"] != "nvlink");
  CHECK(cross["bottleneck_bytes_per_s"].get<double>() < 60e9);
  const auto t = run_fusesim({"routes", "--topology", "dgx-h100", "--from", "2", "--to", "5"}, dir);
  REQUIRE(t.exit_code == 0);
  CHECK(t.out.find("dgx-h100: rank 2 -> rank 5") == 0);
  CHECK(t.out.find("2 hops, latency") != std::string::npos);
}

TEST_CASE("routes without a pair summarises every pair - bad ranks exit 2 naming the option", "[cli][routes]") {
  ScratchDir dir;
  const auto r = run_fusesim({"routes", "--topology", "dgx-h100-4node", "--format", "json"}, dir);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  std::int64_t pairs = 0, same_node = 0;
  for (const json& g : doc["routes"]) {
    pairs += g["pairs"].get<std::int64_t>();
    if (g["same_node"].get<bool>()) {
      same_node += g["pairs"].get<std::int64_t>();
      CHECK(g["links"] == "nvlink > nvlink");
    }
  }
  CHECK(pairs == 32 * 31);
  CHECK(same_node == 4 * 8 * 7);
  CHECK(doc["same_node_pairs_off_scale_up"] == 0);

  for (const auto& args : std::vector<std::vector<std::string>>{{"routes", "--from", "0"},
                                                                 {"routes", "--from", "0", "--to", "8"},
                                                                 {"routes", "--from", "x", "--to", "1"},
                                                                 {"routes", "--from", "3", "--to", "3"}}) {
    const auto bad = run_fusesim(args, dir);
    CHECK(bad.exit_code == 2);
    REQUIRE(bad.err_lines().size() == 1);
    CHECK(bad.err_lines()[0].find("error: <command line>: --") == 0);
  }
}

TEST_CASE("fusesim --version prints the version", "[cli]") {
  ScratchDir dir;
  const auto r = run_fusesim({"--version"}, dir);
  CHECK(r.exit_code == 0);
  CHECK(r.out.rfind("fusesim ", 0) == 0);
  CHECK(r.out.find('.') != std::string::npos);
}
