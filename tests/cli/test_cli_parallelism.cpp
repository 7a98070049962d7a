// `fusesim simulate --parallelism` and `--scope step` (docs/cli.md): which parallelisms' schedules are
// compared, the rows' shape, and refusals.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "process.hpp"

using namespace fusesim::testing;
using nlohmann::json;

namespace {

// llama-3-8b with tp 2 x dp 2 on one DGX H100, a short sequence so that the runs are quick.
void write_workload(const ScratchDir& dir, int dp) {
  json w = json::parse(slurp(source_path("workloads/llama-3-8b.json")));
  w["name"] = "tp2-dp";
  w["training"]["sequence_length"] = 1024;
  w["parallel"] = {{"tp", 2}, {"up", 1}, {"dp", dp}};
  std::ofstream(dir.path() / "w.json") << w.dump();
}

}  // namespace

TEST_CASE("simulate compares every parallelism the workload uses, one row per parallelism and schedule",
          "[cli][simulate][dp]") {
  ScratchDir dir;
  write_workload(dir, 2);
  const auto r = run_fusesim({"simulate", "--workload", "w.json", "--scope", "layer", "--format", "json"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  // tp 2 and dp 2: tpsp and dp, three schedules each.
  REQUIRE(doc["results"].size() == 6);
  std::map<std::string, int> per;
  for (const json& row : doc["results"]) {
    ++per[row["parallelism"].get<std::string>()];
    CHECK(row.contains("schedule"));
  }
  CHECK(per["tpsp"] == 3);
  CHECK(per["dp"] == 3);
  // The DP rows have DP regions (one dp/sync or buckets or fused syncs per rank).
  bool dp_region = false;
  for (const json& row : doc["results"])
    if (row["parallelism"] == "dp")
      for (const json& reg : row["regions"]) dp_region |= reg["parallelism"] == "dp";
  CHECK(dp_region);
}

TEST_CASE("simulate --parallelism dp --scope step gives one step row per schedule", "[cli][simulate][dp][step]") {
  ScratchDir dir;
  write_workload(dir, 2);
  const auto r = run_fusesim({"simulate", "--workload", "w.json", "--scope", "step", "--parallelism", "dp",
                              "--schedule", "baseline,commfuse", "--format", "json"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  REQUIRE(doc["results"].size() == 2);
  CHECK(doc["results"][0]["parallelism"] == "dp");
  CHECK(doc["results"][0]["schedule"] == "baseline");
  CHECK(doc["results"][1]["schedule"] == "commfuse");
  CHECK(doc["results"][0]["scope"] == "step");
}

TEST_CASE("simulate --parallelism and --scope refuse unknown values", "[cli][simulate]") {
  ScratchDir dir;
  const auto a = run_fusesim({"simulate", "--parallelism", "pp"}, dir);
  CHECK(a.exit_code == 2);
  CHECK(a.err.find("--parallelism") != std::string::npos);
  const auto b = run_fusesim({"simulate", "--parallelism", "dp,dp"}, dir);
  CHECK(b.exit_code == 2);
  const auto c = run_fusesim({"simulate", "--scope", "steps"}, dir);
  CHECK(c.exit_code == 2);
  CHECK(c.err.find("--scope") != std::string::npos);
}

TEST_CASE("simulate --parallelism all is every parallelism the workload uses - an unused one is refused",
          "[cli][simulate]") {
  ScratchDir dir;
  write_workload(dir, 1);  // tp 2, up 1, dp 1: only tpsp has communication to schedule
  const auto all = run_fusesim({"simulate", "--workload", "w.json", "--scope", "layer", "--parallelism", "all",
                                "--format", "json"},
                               dir);
  INFO(all.err);
  REQUIRE(all.exit_code == 0);
  const json doc = json::parse(all.out);
  REQUIRE(doc["results"].size() == 3);
  for (const json& row : doc["results"]) CHECK(row["parallelism"] == "tpsp");
  // up at up 1 and dp at dp 1 (no Ulysses ranks either) would be one run printed three times.
  for (const char* p : {"up", "dp", "tpsp,up"}) {
    const auto r = run_fusesim({"simulate", "--workload", "w.json", "--scope", "layer", "--parallelism", p}, dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--parallelism") != std::string::npos);
    CHECK(r.err.find("nothing to schedule") != std::string::npos);
  }
}

TEST_CASE("sweep --parallelism checks its names and takes all as every parallelism each configuration uses",
          "[cli][sweep]") {
  ScratchDir dir;
  write_workload(dir, 1);
  const auto bad = run_fusesim({"sweep", "--workload", "w.json", "--parallelism", "foo", "--output", "o.csv"}, dir);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--parallelism") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "o.csv"));
  // dp 1 and dp 2: the first uses tpsp only (3 rows), the second tpsp and dp (6 rows).
  const auto r = run_fusesim({"sweep", "--workload", "w.json", "--dp", "1,2", "--scope", "layer", "--parallelism",
                              "all", "--output", "o.json", "--quiet"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(slurp(dir.path() / "o.json"));
  std::map<std::string, int> per;
  for (const json& row : doc["rows"]) ++per[row["parallelism"].get<std::string>()];
  CHECK(per["tpsp"] == 6);
  CHECK(per["dp"] == 3);
  CHECK(per.count("all") == 0);
}

TEST_CASE("simulate notes that the DP baseline and slice rows are one schedule, unless the baseline is serial",
          "[cli][simulate][dp]") {
  ScratchDir dir;
  write_workload(dir, 2);
  const std::string note = "dp: baseline and slice are the same schedule";
  const auto r = run_fusesim({"simulate", "--workload", "w.json", "--scope", "layer", "--parallelism", "dp"}, dir);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(note) != std::string::npos);
  // Only one of the two asked for: nothing to say.
  const auto one = run_fusesim(
      {"simulate", "--workload", "w.json", "--scope", "layer", "--parallelism", "dp", "--schedule", "baseline,commfuse"},
      dir);
  REQUIRE(one.exit_code == 0);
  CHECK(one.out.find(note) == std::string::npos);
  // The serial baseline is another schedule.
  json w = json::parse(slurp(dir.path() / "w.json"));
  w["schedule"]["dp_baseline"] = "serial";
  std::ofstream(dir.path() / "serial.json") << w.dump();
  const auto serial =
      run_fusesim({"simulate", "--workload", "serial.json", "--scope", "layer", "--parallelism", "dp"}, dir);
  INFO(serial.err);
  REQUIRE(serial.exit_code == 0);
  CHECK(serial.out.find(note) == std::string::npos);
  // The JSON report names the gradient accumulation the run used (here set on the command line).
  const auto accumulated = run_fusesim({"simulate", "--workload", "w.json", "--scope", "layer", "--parallelism", "dp",
                                        "--grad-accumulation", "3", "--format", "json"},
                                       dir);
  REQUIRE(accumulated.exit_code == 0);
  CHECK(json::parse(accumulated.out)["grad_accumulation"] == 3);
}
