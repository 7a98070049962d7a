// `simulate` with pipeline stages ($.parallel.pp, --pp): the step, the bubble per stage, the errors.
#include <fstream>
#include <set>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "process.hpp"

using namespace fusesim::testing;
using nlohmann::json;

namespace {

// An 8-layer Llama-3-8B-shaped model, TP 8 x PP 2 on dgx-h100-4node, 4 micro-batches.
void write_workload(const ScratchDir& dir, const std::string& name, int pp, const std::string& schedule = "1f1b",
                    int virtual_stages = 1) {
  json w = json::parse(R"({
    "schema_version": 1, "name": "pp-test",
    "model": {"name": "m", "layers": 8, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
              "gated_mlp": true, "vocab": 128256, "source": "test"},
    "training": {"sequence_length": 2048, "micro_batch": 1, "grad_accumulation": 4, "dtype": "bf16"},
    "parallel": {"tp": 8, "up": 1, "dp": 1},
    "schedule": {"kind": "commfuse"}
  })");
  w["parallel"]["pp"] = pp;
  w["parallel"]["pp_schedule"] = schedule;
  w["parallel"]["virtual_stages"] = virtual_stages;
  std::ofstream(dir.file(name)) << w.dump();
}

}  // namespace

TEST_CASE("simulate runs a pipeline's step and reports the bubble of every stage", "[cli][simulate][pipeline]") {
  ScratchDir dir;
  write_workload(dir, "pp.json", 2);
  const auto r = run_fusesim({"simulate", "--workload", "pp.json", "--schedule", "baseline", "--format", "json"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  CHECK(doc["parallel"]["pp"].get<int>() == 2);
  CHECK(doc["parallel"]["pp_schedule"].get<std::string>() == "1f1b");
  REQUIRE(doc["results"].size() == 1);  // the default scopes become the step
  const json& row = doc["results"][0];
  CHECK(row["scope"].get<std::string>() == "step");
  CHECK(row["gpus"].get<int>() == 16);
  // TP 8 x PP 2 at dp 1: the first rank of each stage's TP group stands for its group (TP images),
  // ranks 0 and 8.
  REQUIRE(row["ranks"].size() == 2);
  CHECK(row["ranks"][0]["rank"].get<int>() == 0);
  CHECK(row["ranks"][1]["rank"].get<int>() == 8);
  REQUIRE(row["stages"].size() == 2);
  const double T = row["step_time_s"].get<double>();
  for (const json& st : row["stages"]) {
    CHECK(st["rank"].get<int>() == 8 * st["stage"].get<int>());
    CHECK(st["bubble_s"].get<double>() > 0.0);
    CHECK(st["bubble_fraction"].get<double>() == Approx(st["bubble_s"].get<double>() / T));
    // The bubble, the compute and the exposed communication of a rank make up the step.
    CHECK(st["bubble_s"].get<double>() + st["compute_s"].get<double>() + st["exposed_comm_s"].get<double>() ==
          Approx(T).epsilon(1e-9));
  }
  const auto table = run_fusesim({"simulate", "--workload", "pp.json", "--schedule", "baseline"}, dir);
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find(", pp 2 (1f1b, 4 micro-batches)") != std::string::npos);
  CHECK(table.out.find("pipeline bubble, baseline tpsp (step): stage 0 ") != std::string::npos);
  CHECK(table.out.find("memory per rank (pipeline stage ") != std::string::npos);
  CHECK(table.out.find("note: pp 2: the whole step is simulated") != std::string::npos);
}

TEST_CASE("the interleaved schedule shortens the step of the same stages", "[cli][simulate][pipeline]") {
  ScratchDir dir;
  write_workload(dir, "flat.json", 2);
  write_workload(dir, "inter.json", 2, "interleaved", 2);
  auto step = [&](const std::string& file) {
    const auto r = run_fusesim({"simulate", "--workload", file, "--schedule", "baseline", "--format", "json"}, dir);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return json::parse(r.out)["results"][0]["step_time_s"].get<double>();
  };
  CHECK(step("inter.json") < step("flat.json"));
}

TEST_CASE("pipeline errors name the key or the option, exit 2", "[cli][simulate][pipeline][errors]") {
  ScratchDir dir;
  write_workload(dir, "pp.json", 2);
  // 8 layers do not split over 3 stages: the command line's fault.
  auto r = run_fusesim({"simulate", "--workload", "pp.json", "--pp", "3"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--pp") != std::string::npos);
  // A pipeline has no layer scope.
  r = run_fusesim({"simulate", "--workload", "pp.json", "--scope", "layer"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("$.parallel.pp") != std::string::npos);
  // 8 x 8 = 64 ranks do not fit four nodes of 8.
  r = run_fusesim({"simulate", "--workload", "pp.json", "--pp", "8"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("tp x up x dp x pp = 8 x 1 x 1 x 8 = 64 ranks") != std::string::npos);
  CHECK(dir.entries() == std::vector<std::string>{"pp.json"});
}

TEST_CASE("a pipeline's trace names each rank's stage", "[cli][simulate][pipeline][trace]") {
  ScratchDir dir;
  write_workload(dir, "pp.json", 2);
  const auto r = run_fusesim({"simulate", "--workload", "pp.json", "--schedule", "baseline", "--trace", "t.json",
                              "--trace-ranks", "0,8"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json trace = json::parse(slurp(dir.path() / "t.json"));
  std::set<std::string> names;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") names.insert(e["args"]["name"].get<std::string>());
  CHECK(names.count("stage 0, rank 0 (node 0, h100-sxm)") == 1);
  CHECK(names.count("stage 1, rank 8 (node 1, h100-sxm)") == 1);
}

TEST_CASE("a mirrored pipeline reports what every rank reports, through a written DAG too",
          "[cli][simulate][pipeline][symmetry][dag]") {
  // TP 8 x PP 2 x DP 2 on dgx-h100-4node: stage s is nodes 2s and 2s + 1, a DP replica per node.
  // Mirror simulates ranks 0 and 16 (replica 0 of each stage, the first of its TP group standing for
  // the group: its TP transfers are collectives); none every rank, with the same DP collectives. The
  // stage bubbles are those of ranks 0 and 16 either way. generate --symmetry mirror writes replica 0
  // of each stage, ranks 0-7 and 16-23, without TP images (a DAG file counts the first ranks).
  ScratchDir dir;
  write_workload(dir, "pp.json", 2);
  json w = json::parse(slurp((dir.path() / "pp.json").string()));
  w["parallel"]["dp"] = 2;
  w["schedule"]["kind"] = "baseline";  // every parallelism's: generate's graph is simulate's row
  std::ofstream(dir.file("pp-dp2.json")) << w.dump();
  auto run = [&](const std::string& symmetry) {
    const auto r = run_fusesim({"simulate", "--workload", "pp-dp2.json", "--schedule", "baseline", "--symmetry",
                                symmetry, "--format", "json"},
                               dir);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return json::parse(r.out)["results"][0];
  };
  json full = run("none");
  const json mirror = run("mirror");
  REQUIRE(full["ranks"].size() == 32);
  REQUIRE(mirror["ranks"].size() == 2);
  std::set<int> simulated;
  for (const json& rk : mirror["ranks"]) simulated.insert(rk["rank"].get<int>());
  const std::set<int> expect{0, 16};
  CHECK(simulated == expect);
  json kept = json::array();
  for (const json& rk : full["ranks"])
    if (expect.count(rk["rank"].get<int>()) != 0) kept.push_back(rk);
  full["ranks"] = kept;
  CHECK(mirror["simulated_ranks"] == 2);
  full["simulated_ranks"] = 2;
  CHECK(full.dump() == mirror.dump());
  REQUIRE(mirror["stages"].size() == 2);
  CHECK(mirror["stages"][1]["rank"].get<int>() == 16);

  // generate writes the stages beside the simulated ranks; simulate-dag counts the same ranks.
  const auto g = run_fusesim({"generate", "--workload", "pp-dp2.json", "--schedule", "baseline", "--scope", "step",
                              "--symmetry", "mirror", "--output", "dag.json"},
                             dir);
  INFO(g.err);
  REQUIRE(g.exit_code == 0);
  const json dag = json::parse(slurp(dir.file("dag.json")));
  CHECK(dag["pipeline_stages"].get<int>() == 2);
  CHECK(dag["simulated_ranks"].get<int>() == 16);
  const auto d = run_fusesim({"simulate-dag", "--dag", "dag.json", "--format", "json"}, dir);
  INFO(d.err);
  REQUIRE(d.exit_code == 0);
  const json dj = json::parse(d.out);
  CHECK(dj["step_time_s"] == mirror["step_time_s"]);
  CHECK(dj["ranks"].size() == 16);
  REQUIRE(dj["stages"].size() == 2);
  CHECK(dj["stages"][1]["bubble_s"] == mirror["stages"][1]["bubble_s"]);

  // Each broken copy of the DAG is refused with exit 2; returns the error.
  const auto refused = [&](const json& bad) {
    std::ofstream(dir.file("bad.json")) << bad.dump();
    const auto r = run_fusesim({"simulate-dag", "--dag", "bad.json"}, dir);
    CHECK(r.exit_code == 2);
    return r.err;
  };
  // Simulated ranks that do not split over the stages, or stages that do not split the ranks, are
  // refused at their key.
  json bad = dag;
  bad["simulated_ranks"] = 15;
  CHECK(refused(bad).find("$.simulated_ranks") != std::string::npos);
  bad = dag;
  bad["pipeline_stages"] = 3;
  CHECK(refused(bad).find("$.pipeline_stages") != std::string::npos);
  // Without its load alias DP replica 1's ranks stand for nobody: replica 0's DP all-reduce over
  // ranks 0 and 8 misses its member on rank 8.
  bad = dag;
  bad.erase("load_alias");
  CHECK(refused(bad).find("over ranks [0, 8] (all_reduce): rank 8 has no task") != std::string::npos);
  // A task on a rank the metrics do not count, standing in for none of them, is refused at its rank.
  bad["tasks"][0]["rank"] = 8;
  CHECK(refused(bad).find("$.tasks[0].rank: rank 8 is not simulated: simulated_ranks are the first 8 of each of "
                          "the 2 stage(s) of 16 ranks") != std::string::npos);
}

TEST_CASE("zb-h1 from the file or --pp-schedule: the same step, a smaller bubble than 1F1B's",
          "[cli][simulate][pipeline]") {
  ScratchDir dir;
  write_workload(dir, "flat.json", 2);
  write_workload(dir, "zb.json", 2, "zb-h1");
  auto run = [&](const std::vector<std::string>& args) {
    std::vector<std::string> all{"simulate", "--schedule", "commfuse", "--format", "json"};
    all.insert(all.end(), args.begin(), args.end());
    const auto r = run_fusesim(all, dir);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return json::parse(r.out);
  };
  const json zb = run({"--workload", "zb.json"}), flag = run({"--workload", "flat.json", "--pp-schedule", "zb-h1"});
  const json flat = run({"--workload", "flat.json"});
  CHECK(zb["parallel"]["pp_schedule"].get<std::string>() == "zb-h1");
  CHECK(flag["parallel"]["pp_schedule"].get<std::string>() == "zb-h1");
  CHECK(zb["results"][0]["step_time_s"] == flag["results"][0]["step_time_s"]);
  // CommFuse hides the TP collectives, so the stages' idle time is mostly the bubble, which the held-back
  // Ws fill (stage 0's: it waits for the first gradient, which ZB-H1 sends back after B alone).
  const json& s_zb = zb["results"][0]["stages"];
  const json& s_flat = flat["results"][0]["stages"];
  CHECK(s_zb[0]["bubble_s"].get<double>() < s_flat[0]["bubble_s"].get<double>());
}

TEST_CASE("zb-h1 errors name the key or the option, exit 2", "[cli][simulate][pipeline][errors]") {
  ScratchDir dir;
  write_workload(dir, "zb2.json", 2, "zb-h1", 2);
  auto r = run_fusesim({"simulate", "--workload", "zb2.json"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("$.parallel.virtual_stages") != std::string::npos);
  CHECK(r.err.find("zb-h1") != std::string::npos);
  write_workload(dir, "pp.json", 2);
  r = run_fusesim({"simulate", "--workload", "pp.json", "--pp-schedule", "gpipe"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--pp-schedule") != std::string::npos);
  r = run_fusesim({"simulate", "--workload", "pp.json", "--pp-schedule", "zb-h1", "--pp", "1"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--pp-schedule") != std::string::npos);
}

TEST_CASE("generate without --scope writes a pipelined workload's whole step, as simulate runs it",
          "[cli][pipeline][dag]") {
  ScratchDir dir;
  write_workload(dir, "pp.json", 2);
  const auto defaulted = run_fusesim({"generate", "--workload", "pp.json", "--output", "default.json"}, dir);
  INFO(defaulted.err);
  REQUIRE(defaulted.exit_code == 0);
  CHECK(defaulted.err.find("note: pp 2: the whole step is generated") != std::string::npos);
  const auto step =
      run_fusesim({"generate", "--workload", "pp.json", "--scope", "step", "--output", "step.json"}, dir);
  REQUIRE(step.exit_code == 0);
  CHECK(slurp(dir.file("default.json")) == slurp(dir.file("step.json")));
  // A scope named on the command line is the user's: a layer of a pipeline is refused, naming pp.
  const auto layer =
      run_fusesim({"generate", "--workload", "pp.json", "--scope", "layer", "--output", "layer.json"}, dir);
  CHECK(layer.exit_code == 2);
  CHECK(layer.err.find("$.parallel.pp") != std::string::npos);
}
