// Trace filters (--trace-ranks, --trace-layers), gzip-compressed traces (.json.gz) and the link
// counter tracks, through `fusesim simulate` and `fusesim simulate-dag` (issue 13, item 10).
#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "process.hpp"

using namespace fusesim::testing;
using nlohmann::json;

namespace {

std::string gunzip_file(const std::string& path) {
  gzFile in = gzopen(path.c_str(), "rb");
  REQUIRE(in != nullptr);
  std::string text;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(in, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  gzclose(in);
  return text;
}

bool is_gzip(const std::string& path) {
  const std::string bytes = slurp(path);
  return bytes.size() > 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
}

void check_one_error_line(const ProcessResult& r, const std::string& option) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  const auto lines = r.err_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].rfind("error: <command line>: " + option + ": ", 0) == 0);
}

const std::vector<std::string> kStack{"simulate", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "2048",
                                      "--scope",  "stack",      "--schedule", "commfuse", "--format", "json"};

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

}  // namespace

TEST_CASE("simulate --trace-ranks --trace-layers writes only those, gzip-compressed for .json.gz", "[cli][trace]") {
  ScratchDir dir;
  const ProcessResult whole = run_fusesim(with(kStack, {"--trace", "whole.json", "--output", "whole.report.json"}), dir);
  INFO(whole.err);
  REQUIRE(whole.exit_code == 0);
  const ProcessResult part =
      run_fusesim(with(kStack, {"--trace", "part.json.gz", "--trace-ranks", "1,3-4", "--trace-layers", "2-3", "--output",
                                "part.report.json"}),
                  dir);
  INFO(part.err);
  REQUIRE(part.exit_code == 0);
  REQUIRE(is_gzip(dir.file("part.json.gz")));
  const json trace = json::parse(gunzip_file(dir.file("part.json.gz")));
  CHECK(trace["otherData"]["ranks"] == json::array({1, 3, 4}));
  CHECK(trace["otherData"]["layers"] == json::array({2, 3}));
  std::set<int> pids, layers;
  std::vector<double> counter_times;
  double lo = 1e300, hi = -1;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      pids.insert(e["pid"].get<int>());
      if (e["args"].contains("layer")) {
        layers.insert(e["args"]["layer"].get<int>());
        lo = std::min(lo, e["ts"].get<double>());
        hi = std::max(hi, e["ts"].get<double>() + e["dur"].get<double>());
      }
    }
    if (e["ph"] == "C") counter_times.push_back(e["ts"].get<double>());
  }
  CHECK(pids == std::set<int>{1, 3, 4});
  CHECK(layers == std::set<int>{2, 3});
  // Link counters only over the span of the layers kept (1 ns of slack for ts + dur in doubles).
  CHECK_FALSE(counter_times.empty());
  for (double t : counter_times) CHECK((t >= lo - 1e-3 && t <= hi + 1e-3));
  // The filtered, compressed trace is a small part of the whole one; the metrics are the same.
  CHECK(std::filesystem::file_size(dir.file("part.json.gz")) * 20 < std::filesystem::file_size(dir.file("whole.json")));
  CHECK(json::parse(slurp(dir.file("whole.report.json")))["results"] ==
        json::parse(slurp(dir.file("part.report.json")))["results"]);

  // Same run, same bytes (the gzip header holds no time stamp).
  const std::string first = slurp(dir.file("part.json.gz"));
  REQUIRE(run_fusesim(with(kStack, {"--trace", "part.json.gz", "--trace-ranks", "1,3-4", "--trace-layers", "2-3",
                                     "--output", "part.report.json"}),
                      dir)
              .exit_code == 0);
  CHECK(slurp(dir.file("part.json.gz")) == first);

  // With several runs the schedule goes before .json.gz.
  ScratchDir many;
  REQUIRE(run_fusesim({"simulate", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--scope", "layer",
                       "--schedule", "baseline,commfuse", "--trace", "t.json.gz", "--output", "r.txt"},
                      many)
              .exit_code == 0);
  auto entries = many.entries();
  std::sort(entries.begin(), entries.end());
  CHECK(entries == std::vector<std::string>{"r.txt", "t.baseline.json.gz", "t.commfuse.json.gz"});
}

TEST_CASE("simulate-dag takes the trace filters and gzip too", "[cli][trace]") {
  ScratchDir dir;
  REQUIRE(run_fusesim({"generate", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--schedule", "slice",
                       "--output", "g.json"},
                      dir)
              .exit_code == 0);
  const ProcessResult r =
      run_fusesim({"simulate-dag", "--dag", "g.json", "--trace", "d.json.gz", "--trace-ranks", "0", "--output", "o.txt"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json trace = json::parse(gunzip_file(dir.file("d.json.gz")));
  std::set<int> pids;
  bool counter = false;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X") pids.insert(e["pid"].get<int>());
    counter = counter || e["ph"] == "C";
  }
  CHECK(pids == std::set<int>{0});
  CHECK(counter);
  check_one_error_line(
      run_fusesim({"simulate-dag", "--dag", "g.json", "--trace", "e.json", "--trace-ranks", "8", "--output", "o2.txt"}, dir),
      "--trace-ranks");
  CHECK_FALSE(std::filesystem::exists(dir.file("e.json")));
  CHECK_FALSE(std::filesystem::exists(dir.file("o2.txt")));
}

TEST_CASE("bad trace filters are one-line errors at their option, and write nothing", "[cli][trace]") {
  ScratchDir dir;
  const std::vector<std::string> base{"simulate", "--topology", "dgx-h100", "--workload", "llama-3-8b",
                                      "--scope", "layer", "--output", "r.txt"};
  check_one_error_line(run_fusesim(with(base, {"--trace", "t.json", "--trace-ranks", "8"}), dir), "--trace-ranks");
  check_one_error_line(run_fusesim(with(base, {"--trace", "t.json", "--trace-ranks", "3-1"}), dir), "--trace-ranks");
  check_one_error_line(run_fusesim(with(base, {"--trace", "t.json", "--trace-ranks", "0,,1"}), dir), "--trace-ranks");
  check_one_error_line(run_fusesim(with(base, {"--trace", "t.json", "--trace-ranks", "-1"}), dir), "--trace-ranks");
  check_one_error_line(run_fusesim(with(base, {"--trace", "t.json", "--trace-layers", "32"}), dir), "--trace-layers");
  check_one_error_line(run_fusesim(with(base, {"--trace-layers", "0"}), dir), "--trace-layers");
  // base is --scope layer, whose graph holds layer 0 alone.
  check_one_error_line(run_fusesim(with(base, {"--trace", "t.json", "--trace-layers", "0-1"}), dir), "--trace-layers");
  CHECK(dir.entries().empty());
}

TEST_CASE("a trace draws every rank it names: every rank simulated unless --symmetry mirror is asked", "[cli][trace]") {
  // The default job's workload (TP 8 x DP 4 on four DGX H100) mirrors replica 0's ranks 0-7 by
  // default; a trace of rank 16 (replica 2) needs every rank, and --symmetry mirror cannot give it.
  const std::vector<std::string> base{"simulate", "--scope", "layer", "--schedule", "baseline", "--parallelism", "dp",
                                      "--format", "json", "--trace", "t.json", "--trace-ranks", "16"};
  ScratchDir dir;
  const auto r = run_fusesim(base, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["results"][0]["simulated_ranks"] == 32);
  std::set<int> pids;
  const json trace = json::parse(slurp(dir.path() / "t.json"));
  for (const json& e : trace["traceEvents"])
    if (e.value("ph", "") == "X") pids.insert(e["pid"].get<int>());
  CHECK(pids == std::set<int>{16});

  ScratchDir mirrored;
  const auto refused = run_fusesim(with(base, {"--symmetry", "mirror"}), mirrored);
  check_one_error_line(refused, "--trace-ranks");
  CHECK(refused.err.find("rank 16 is not simulated with --symmetry mirror") != std::string::npos);
  CHECK(mirrored.entries().empty());  // nothing half-written
}
