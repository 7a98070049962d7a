// `fusesim simulate --symmetry` (docs/cli.md, docs/schedules.md "Symmetry"): simulating DP replica 0
// alone (mirror) reports what simulating every rank (none) reports. The fall-back where the fabric
// does not repeat along the replica groups is sched::generate's (tests/sched/symmetry_test.cpp).
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "process.hpp"

using namespace fusesim::testing;
using nlohmann::json;

namespace {

// llama-3-8b with tp 2 x dp 4 on the four DGX H100 nodes (ranks 0-7 on node 0: the DP ring of each
// TP position crosses the intra-node fabric; symmetric all the same), ZeRO-1, 2 micro-batches.
void write_workload(const ScratchDir& dir) {
  json w = json::parse(slurp(source_path("workloads/llama-3-8b.json")));
  w["name"] = "tp2-dp4";
  w["training"]["sequence_length"] = 1024;
  w["training"]["grad_accumulation"] = 2;
  w["parallel"] = {{"tp", 2}, {"up", 1}, {"dp", 4}, {"dp_sharding", "zero1"}};
  std::ofstream(dir.path() / "w.json") << w.dump();
}

json run(const ScratchDir& dir, const std::string& symmetry) {
  const auto r = run_fusesim({"simulate", "--topology", "dgx-h100-4node", "--workload", "w.json", "--scope", "step",
                              "--parallelism", "dp", "--symmetry", symmetry, "--format", "json"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE("simulate --symmetry mirror reports what every rank reports", "[cli][simulate][symmetry]") {
  ScratchDir dir;
  write_workload(dir);
  json full = run(dir, "none");
  const json mirror = run(dir, "mirror");
  REQUIRE(full["results"].size() == 3);
  REQUIRE(mirror["results"].size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    json& row = full["results"][i];
    // The full run lists 8 ranks; the mirrored one replica 0's first TP rank (tp 2 x up 1: the TP
    // group's CommFuse ring turns onto itself, TP images), the rest identical.
    REQUIRE(row["ranks"].size() == 8);
    REQUIRE(mirror["results"][i]["ranks"].size() == 1);
    CHECK(row["simulated_ranks"] == 8);
    CHECK(mirror["results"][i]["simulated_ranks"] == 1);
    row["ranks"].erase(row["ranks"].begin() + 1, row["ranks"].end());
    row["simulated_ranks"] = 1;
    CHECK(row.dump() == mirror["results"][i].dump());
    CHECK(mirror["results"][i]["gpus"] == 8);
  }
}

TEST_CASE("simulate refuses an unknown --symmetry mode", "[cli][simulate][symmetry]") {
  ScratchDir dir;
  write_workload(dir);
  const auto r = run_fusesim({"simulate", "--workload", "w.json", "--symmetry", "half"}, dir);
  CHECK(r.exit_code == 2);  // bad input (docs/cli.md, "Exit status and errors")
  CHECK(r.err == "error: <command line>: --symmetry: 'half' is not none, p2p or mirror\n");
}
