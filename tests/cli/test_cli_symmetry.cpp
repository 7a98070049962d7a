// `fusesim simulate --symmetry` (docs/cli.md, docs/schedules.md "Symmetry"): simulating DP replica 0
// alone (mirror) reports what simulating every rank (none) reports, and falls back where the fabric
// does not repeat along the replica groups.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "fusesim/cli/simulate.hpp"
#include "fusesim/model/kernel.hpp"
#include "fusesim/sched/symmetry.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/json_reader.hpp"
#include "process.hpp"

using namespace fusesim;
using namespace fusesim::cli;
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
    // The full run lists 8 ranks; the mirrored one replica 0's 2 (tp 2 x up 1), the rest identical.
    REQUIRE(row["ranks"].size() == 8);
    REQUIRE(mirror["results"][i]["ranks"].size() == 2);
    CHECK(row["simulated_ranks"] == 8);
    CHECK(mirror["results"][i]["simulated_ranks"] == 2);
    row["ranks"].erase(row["ranks"].begin() + 2, row["ranks"].end());
    row["simulated_ranks"] = 2;
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

TEST_CASE("mirror falls back to every rank where replica groups share a fabric link", "[cli][simulate][symmetry]") {
  // Llama-3-8B, 2 layers, sequence 4096, TP 4 x UP 2 x DP 4, CommFuse over DP: its fused ring runs in
  // member order (u, d), so the hop from (1, d) to (0, d + 1) leaves GPU 4 + ti of node d by rail 4 + ti
  // and enters GPU ti of node d + 1 by rail ti, across a spine. On dgx-h100-4node (4 spines) each
  // replica's hop takes its own spine link; with the four nodes on ONE spine, the hops of all four
  // replicas share leaf (4 + ti)'s uplink to it, which replica 0 alone, mirrored, would have to itself:
  // the mirrored step would be too fast. sched::generate checks the fabric and builds every rank.
  model::Workload w = model::load_workload("llama-3-8b-ulysses");
  w.arch.layers = 2;
  w.sequence_length = 4096;
  w.parallel.tp = 4;
  w.parallel.up = 2;
  w.parallel.dp = 4;
  sched::GenerateOptions o;
  o.scope = sched::Scope::step;
  o.parallelism = sched::Parallelism::dp;
  o.mirror_dp = true;
  const topo::Cluster four_spines = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  const sched::Schedule kept = sched::generate(w, "w", four_spines, model::ScheduleKind::commfuse, o);
  CHECK(kept.symmetry_fallback.empty());
  CHECK(kept.symmetry_unchecked.empty());
  CHECK(kept.simulated_ranks > 0);
  // Searched within its budget; beyond it the check says it did not look (the pairs leaving the
  // simulated replica's two nodes, each in the 4 replica groups: a multiple of 4).
  const sched::FabricCheck checked = sched::check_mirror_fabric(kept, four_spines);
  CHECK(checked.checked);
  CHECK(checked.asymmetry.empty());
  REQUIRE(checked.image_routes > 0);
  CHECK(checked.image_routes % 4 == 0);
  const sched::FabricCheck over = sched::check_mirror_fabric(kept, four_spines, checked.image_routes - 1);
  CHECK_FALSE(over.checked);
  CHECK(over.image_routes == checked.image_routes);

  json doc = json::parse(std::string(*embedded_file("topologies/dgx-h100-4node.json")));
  doc["scale_out"]["spines"] = 1;
  const topo::Cluster one_spine = topo::parse_cluster(JsonDocument::from_json(doc, "one-spine.json"));
  const sched::Schedule s = sched::generate(w, "w", one_spine, model::ScheduleKind::commfuse, o);
  INFO(s.symmetry_fallback);
  CHECK(s.simulated_ranks == 0);
  CHECK(s.symmetry_fallback.find("spine") != std::string::npos);
  CHECK(s.symmetry_fallback.find("of the job's transfers") != std::string::npos);
  // What the check prevents: the mirrored step, unchecked (the graph built for four spines: the same
  // ranks, nodes and rings), against every rank's.
  const model::RooflineCostModel costs;
  const auto mirrored = sim::Simulator(one_spine, costs).run(kept.graph);
  const auto full = sim::Simulator(one_spine, costs).run(s.graph);
  CHECK(mirrored.makespan_ps < full.makespan_ps);
}
