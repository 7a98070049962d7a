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
  CHECK(row["ranks"].size() == 16);
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
