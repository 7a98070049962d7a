// `fusesim check`: a baseline re-run passes when nothing changed, fails on a planted regression,
// passes improvements, and --update records this build's metrics.
#include <regex>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "fusesim/util/output.hpp"
#include "process.hpp"

using namespace fusesim;
using namespace fusesim::testing;

namespace {

// Two configurations x schedules, metrics not yet recorded (--update fills them in).
const char* kFresh = R"({
  "format": "fusesim-baseline",
  "version": 1,
  "description": "test baseline",
  "entries": [
    {"topology": "dgx-h100", "workload": "llama-3-8b", "sequence_length": 4096, "tp": 4, "schedule": "baseline"},
    {"topology": "dgx-h100", "workload": "llama-3-8b", "sequence_length": 4096, "tp": 4, "schedule": "commfuse"},
    {"topology": "dgx-h100-4node", "workload": "commfuse-tpsp-block", "tp": 8, "scope": "layer", "schedule": "slice"}
  ]
})";

// The baseline with one recorded metric replaced (entry, metric, value).
std::string with_metric(const std::string& text, std::size_t entry, const std::string& metric, double factor) {
  nlohmann::json doc = nlohmann::json::parse(text);
  auto& v = doc["entries"][entry]["metrics"][metric];
  v = v.get<double>() * factor;
  return doc.dump(2);
}

}  // namespace

TEST_CASE("check: --update records metrics, an unchanged re-run passes", "[cli][check]") {
  ScratchDir dir;
  write_output_file(dir.file("b.json"), kFresh);
  // Without metrics there is nothing to compare with: bad input naming the entry.
  const auto no_metrics = run_fusesim({"check", "--baseline", "b.json"}, dir);
  CHECK(no_metrics.exit_code == 2);
  CHECK(no_metrics.err.find("b.json: $.entries[0].metrics") != std::string::npos);

  const auto up = run_fusesim({"check", "--baseline", "b.json", "--update"}, dir);
  INFO(up.out << up.err);
  REQUIRE(up.exit_code == 0);
  const std::string recorded = slurp(dir.file("b.json"));
  const nlohmann::json doc = nlohmann::json::parse(recorded);
  REQUIRE(doc["entries"].size() == 3);
  CHECK(doc["description"] == "test baseline");
  for (const auto& e : doc["entries"]) CHECK(e["metrics"].size() == 8);
  // CommFuse leaves less exposed than baseline for the same configuration (design note §2).
  CHECK(doc["entries"][1]["metrics"]["exposed_comm_s"].get<double>() <
        doc["entries"][0]["metrics"]["exposed_comm_s"].get<double>());
  // Keys absent from an entry stay absent (scope of entry 0), present ones are kept.
  CHECK_FALSE(doc["entries"][0].contains("scope"));
  CHECK(doc["entries"][2]["scope"] == "layer");

  const auto again = run_fusesim({"check", "--baseline", "b.json"}, dir);
  INFO(again.out);
  CHECK(again.exit_code == 0);
  CHECK(again.out.find("ok: 0 regressed") != std::string::npos);
  CHECK(again.out.find("0 changed within it, 24 unchanged") != std::string::npos);  // 3 entries x 8 metrics
  // --update on an unchanged build writes the same bytes.
  REQUIRE(run_fusesim({"check", "--baseline", "b.json", "--update"}, dir).exit_code == 0);
  CHECK(slurp(dir.file("b.json")) == recorded);
}

TEST_CASE("check: a planted regression fails with a readable diff - improvements pass", "[cli][check]") {
  ScratchDir dir;
  write_output_file(dir.file("b.json"), kFresh);
  REQUIRE(run_fusesim({"check", "--baseline", "b.json", "--update"}, dir).exit_code == 0);
  const std::string recorded = slurp(dir.file("b.json"));

  // The baseline claims commfuse ran 10% faster than it does: the re-run is 1/0.9 - 1 = 11.1% slower.
  write_output_file(dir.file("slow.json"), with_metric(recorded, 1, "step_time_s", 0.9));
  const auto fail = run_fusesim({"check", "--baseline", "slow.json"}, dir);
  INFO(fail.out);
  CHECK(fail.exit_code == 1);
  CHECK(std::regex_search(fail.out, std::regex(R"(REGRESSED +dgx-h100 llama-3-8b seq=4096 tp=4 layer +commfuse +step_time_s .* \+11\.11%)")));
  CHECK(fail.out.find("FAIL: 1 regressed (worse by more than 2%)") != std::string::npos);
  CHECK(fail.out.find("--update") != std::string::npos);
  // 11.1% is within a 12% tolerance ("changed within it"), and 0.12 is the same tolerance.
  for (const char* tol : {"12%", "0.12"}) {
    const auto loose = run_fusesim({"check", "--baseline", "slow.json", "--tolerance", tol}, dir);
    CHECK(loose.exit_code == 0);
    CHECK(loose.out.find("1 changed within it") != std::string::npos);
  }

  // An overlap ratio recorded higher than reality is a regression too (lower is worse).
  write_output_file(dir.file("ovl.json"), with_metric(recorded, 2, "overlap_ratio", 1.5));
  const auto ovl = run_fusesim({"check", "--baseline", "ovl.json"}, dir);
  CHECK(ovl.exit_code == 1);
  CHECK(ovl.out.find("overlap_ratio") != std::string::npos);

  // The baseline claims a slower step than reality: the build improved; it passes and says so.
  write_output_file(dir.file("fast.json"), with_metric(recorded, 0, "step_time_s", 1.5));
  const auto better = run_fusesim({"check", "--baseline", "fast.json"}, dir);
  CHECK(better.exit_code == 0);
  CHECK(better.out.find("improved") != std::string::npos);
  CHECK(better.out.find("1 improved beyond it") != std::string::npos);

  // --update accepts the change: the file is back to what this build measures.
  const auto up = run_fusesim({"check", "--baseline", "slow.json", "--update"}, dir);
  CHECK(up.exit_code == 0);
  CHECK(slurp(dir.file("slow.json")) == recorded);
  CHECK(run_fusesim({"check", "--baseline", "slow.json"}, dir).exit_code == 0);
}

TEST_CASE("check: bad baseline input is exit 2 with the JSON path", "[cli][check]") {
  ScratchDir dir;
  write_output_file(dir.file("typo.json"), R"({"format": "fusesim-baseline", "version": 1, "entries": [
    {"topology": "dgx-h100", "workload": "llama-3-8b", "shedule": "baseline"}]})");
  auto r = run_fusesim({"check", "--baseline", "typo.json", "--update"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("typo.json: $.entries[0]") != std::string::npos);

  write_output_file(dir.file("fmt.json"), R"({"format": "fusesim-sweep", "version": 1, "entries": []})");
  r = run_fusesim({"check", "--baseline", "fmt.json"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("fmt.json: $.format") != std::string::npos);

  // A configuration that cannot run: blamed on the entry, with the underlying reason.
  write_output_file(dir.file("tp.json"), R"({"format": "fusesim-baseline", "version": 1, "entries": [
    {"topology": "dgx-h100", "workload": "llama-3-8b", "tp": 16, "schedule": "baseline"}]})");
  r = run_fusesim({"check", "--baseline", "tp.json", "--update"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("tp.json: $.entries[0]: this configuration does not run") != std::string::npos);

  r = run_fusesim({"check", "--baseline", "tp.json", "--tolerance", "two"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--tolerance") != std::string::npos);
}

TEST_CASE("check: the committed CI baseline is readable and every configuration in it runs", "[cli][check]") {
  ScratchDir dir;
  // A tolerance of 1000% keeps this test about the file, not about today's model figures (those are
  // .ci/run's business, at the default tolerance).
  const auto r = run_fusesim({"check", "--baseline", source_path("baselines/ci.json"), "--tolerance", "1000%"}, dir);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
}

TEST_CASE("check: an entry's pp stages the workload as simulate --pp does", "[cli][check][pp]") {
  ScratchDir dir;
  write_output_file(dir.file("b.json"), R"({
  "format": "fusesim-baseline",
  "version": 1,
  "description": "pipeline stages",
  "entries": [
    {"topology": "dgx-h100-4node", "workload": "llama-3-8b", "parallelism": "tpsp", "pp": 2, "scope": "step",
     "schedule": "baseline"}
  ]
})");
  const auto up = run_fusesim({"check", "--baseline", "b.json", "--update"}, dir);
  INFO(up.out << up.err);
  REQUIRE(up.exit_code == 0);
  const nlohmann::json doc = nlohmann::json::parse(slurp(dir.file("b.json")));
  CHECK(doc["entries"][0]["pp"] == 2);
  const auto sim = run_fusesim({"simulate", "--topology", "dgx-h100-4node", "--workload", "llama-3-8b", "--parallelism",
                                "tpsp", "--pp", "2", "--scope", "step", "--schedule", "baseline", "--format", "json"},
                               dir);
  REQUIRE(sim.exit_code == 0);
  const nlohmann::json report = nlohmann::json::parse(sim.out);
  CHECK(doc["entries"][0]["metrics"]["step_time_s"].get<double>() ==
        report["results"][0]["step_time_s"].get<double>());
  // A pp of 0 is refused naming the entry's key.
  write_output_file(dir.file("bad.json"), R"({"format": "fusesim-baseline", "version": 1, "description": "x",
    "entries": [{"topology": "dgx-h100", "workload": "llama-3-8b", "pp": 0, "schedule": "baseline"}]})");
  const auto bad = run_fusesim({"check", "--baseline", "bad.json", "--update"}, dir);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("bad.json: $.entries[0].pp") != std::string::npos);
}

TEST_CASE("check: an entry's recompute and dp_sharding set the workload as simulate --recompute and --zero do",
          "[cli][check]") {
  ScratchDir dir;
  write_output_file(dir.file("b.json"), R"({
  "format": "fusesim-baseline",
  "version": 1,
  "description": "named overrides",
  "entries": [
    {"topology": "dgx-h100", "workload": "llama-3-8b", "recompute": "full", "dp_sharding": "zero3",
     "schedule": "baseline"}
  ]
})");
  const auto up = run_fusesim({"check", "--baseline", "b.json", "--update"}, dir);
  INFO(up.out << up.err);
  REQUIRE(up.exit_code == 0);
  const nlohmann::json doc = nlohmann::json::parse(slurp(dir.file("b.json")));
  CHECK(doc["entries"][0]["recompute"] == "full");
  CHECK(doc["entries"][0]["dp_sharding"] == "zero3");
  const auto sim = run_fusesim({"simulate", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--recompute", "full",
                                "--zero", "zero3", "--scope", "layer", "--schedule", "baseline", "--format", "json"},
                               dir);
  REQUIRE(sim.exit_code == 0);
  const nlohmann::json report = nlohmann::json::parse(sim.out);
  // Full recomputation runs the forward again: hardware FLOPs above the model's.
  CHECK(report["results"][0]["hfu"].get<double>() > report["results"][0]["mfu"].get<double>());
  CHECK(doc["entries"][0]["metrics"]["step_time_s"].get<double>() ==
        report["results"][0]["step_time_s"].get<double>());
  // A name none of the workload files use is refused at the entry's key.
  write_output_file(dir.file("bad.json"), R"({"format": "fusesim-baseline", "version": 1, "description": "x",
    "entries": [{"topology": "dgx-h100", "workload": "llama-3-8b", "recompute": "some", "schedule": "baseline"}]})");
  const auto bad = run_fusesim({"check", "--baseline", "bad.json", "--update"}, dir);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err == "error: bad.json: $.entries[0].recompute: 'some' is not one of none, selective, full, op\n");
}
