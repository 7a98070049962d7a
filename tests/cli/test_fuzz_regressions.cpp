// Inputs the fuzz targets (fuzz/, docs/fuzzing.md) found to escape a reader as something other than
// an InputError (an internal error, exit 1, or a crash). Each file under tests/data/fuzz/<reader>/ is
// fed to the reader its folder names, as the fuzz target does, and must be refused with an InputError
// naming the file; the named cases below also check where and why.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "fusesim/cli/input_readers.hpp"
#include "fusesim/cli/sweep.hpp"
#include "fusesim/model/kernel.hpp"
#include "fusesim/model/nccl_tests.hpp"
#include "fusesim/model/profile.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/sched/dag_json.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/error.hpp"

namespace {

using fusesim::InputError;
using fusesim::JsonDocument;
namespace fs = std::filesystem;

const fs::path kDir = fs::path(FUSESIM_SOURCE_DIR) / "tests" / "data" / "fuzz";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// What each fuzz target does with its input (fuzz/fuzz_<reader>.cpp).
const std::map<std::string, std::function<void(const std::string& text, const std::string& file)>>& readers() {
  using namespace fusesim;
  static const std::map<std::string, std::function<void(const std::string&, const std::string&)>> r{
      {"topology", [](const std::string& t, const std::string& f) { topo::parse_cluster(JsonDocument::parse(t, f)); }},
      {"workload",
       [](const std::string& t, const std::string& f) {
         const model::Workload w = model::parse_workload(JsonDocument::parse(t, f));
         model::validate_workload(w, f);
       }},
      {"dag", [](const std::string& t, const std::string& f) { sched::parse_dag(JsonDocument::parse(t, f), 64); }},
      {"profile", [](const std::string& t, const std::string& f) { model::parse_profile(JsonDocument::parse(t, f)); }},
      {"nccl_tests",
       [](const std::string& t, const std::string& f) {
         for (const auto& run : model::parse_nccl_tests(t, f)) model::collective_samples(run);
       }},
      {"validation", [](const std::string& t, const std::string& f) { cli::check_validation_cases(JsonDocument::parse(t, f)); }},
      {"baseline", [](const std::string& t, const std::string& f) { cli::check_baseline(JsonDocument::parse(t, f), true); }},
      {"sweep_part", [](const std::string& t, const std::string& f) { cli::parse_sweep_json(JsonDocument::parse(t, f)); }},
  };
  return r;
}

// The InputError reading tests/data/fuzz/<reader>/<name> raises (fails the test when none is raised).
InputError refusal(const std::string& reader, const std::string& name) {
  const fs::path p = kDir / reader / name;
  REQUIRE(fs::exists(p));
  try {
    readers().at(reader)(slurp(p), p.string());
  } catch (const InputError& e) {
    CHECK(e.file() == p.string());
    return e;
  }
  FAIL("no InputError for " << p);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("fuzz regressions: every found input is refused as bad input by its reader", "[fuzz]") {
  std::size_t n = 0;
  for (const auto& dir : fs::directory_iterator(kDir)) {
    if (!dir.is_directory()) continue;
    REQUIRE(readers().count(dir.path().filename().string()) == 1);
    for (const auto& f : fs::directory_iterator(dir.path())) {
      INFO(f.path());
      refusal(dir.path().filename().string(), f.path().filename().string());
      ++n;
    }
  }
  CHECK(n > 0);
}

// Issue 13, item 12: what a minute of fuzzing found before these targets were in the project (an
// nlohmann out_of_range escaped as an internal error, exit 1); CheckingSax in json_reader.cpp now
// refuses both at the path of the value.
TEST_CASE("fuzz regression: a number beyond a double's range is bad input at its path", "[fuzz]") {
  const InputError e = refusal("workload", "number-overflow.json");
  CHECK(e.json_path() == "$.model.layers");
}

TEST_CASE("fuzz regression: a duplicate key is bad input at its path", "[fuzz]") {
  const InputError e = refusal("topology", "duplicate-key.json");
  CHECK(e.json_path() == "$.name");
}

// A line of a form feed (or vertical tab) alone: trim() kept it, split_ws() found no word in it, and
// the data-row check read the first word of none (UBSan: reference binding to null pointer, found by
// fuzz_nccl_tests). Such a line is now blank; this log has no data rows, which is bad input.
TEST_CASE("fuzz regression: an nccl-tests line of a form feed alone is a blank line", "[fuzz]") {
  const InputError e = refusal("nccl_tests", "form-feed-line.log");
  CHECK_THAT(e.message(), Catch::Contains("no data rows"));
  // In a valid log such a line changes nothing.
  const fs::path log = fs::path(FUSESIM_SOURCE_DIR) / "tests" / "data" / "calibrate" / "all_gather_h100x8_v2.17.log";
  std::string text = slurp(log);
  const std::size_t header = text.find("#       size");
  REQUIRE(header != std::string::npos);
  const std::string with_ff = text.substr(0, text.find('\n', header) + 1) + "\f\n\v\n" + text.substr(text.find('\n', header) + 1);
  const auto a = fusesim::model::parse_nccl_tests(text, log.string());
  const auto b = fusesim::model::parse_nccl_tests(with_ff, log.string());
  REQUIRE(a.size() == b.size());
  CHECK(a.front().rows.size() == b.front().rows.size());
}

// Issue 20, items 2 and 3: kernel sizes the readers accepted overflowed 64-bit counts in the roofline
// (UBSan: signed overflow; Release printed garbage) or gave a time beyond the picosecond range (a
// step of 0 s, MFU 0, exit 0). model::kernel_size_error now bounds every kernel read from a file at
// 1e21 FLOPs and 2^50 elements per operand, refused at the kernel's path.
TEST_CASE("hostile: kernels beyond what a time can hold are refused at their path", "[fuzz][hostile]") {
  const InputError big = refusal("dag", "gemm-2p40.json");
  CHECK(big.json_path() == "$.tasks[0].compute.gemm");
  CHECK_THAT(big.message(), Catch::Contains("FLOPs is beyond the 1e+21 one kernel may have"));
  // 2^24 cubed: 9.4e21 FLOPs, just past the limit (it printed compute 0, step 0, MFU 0).
  CHECK(refusal("dag", "gemm-2p24.json").json_path() == "$.tasks[0].compute.gemm");
  CHECK(refusal("dag", "attention-max.json").json_path() == "$.tasks[0].compute.attention");
  CHECK(refusal("validation", "attention-seq-1e12.json").json_path() == "$.cases[0]");
  // Within the limits a GEMM is priced; 2^22 cubed (1.5e20 FLOPs) takes days on an H100, not 0 s.
  const fusesim::model::GemmKernel g{1 << 22, 1 << 22, 1 << 22, 1};
  CHECK_FALSE(fusesim::model::kernel_size_error(g).has_value());
  CHECK(fusesim::seconds_to_ps(1e7) == fusesim::kTimeNever);  // beyond the range: never, not wrapped
  CHECK(fusesim::seconds_to_ps(1e6) == 1'000'000'000'000'000'000);
}

// Issue 20, item 6: rows of a results table whose size is a number but not a byte count were dropped
// silently (the header promises an error for a malformed line).
TEST_CASE("hostile: an nccl-tests row whose size is not a byte count is refused at its line", "[fuzz][hostile]") {
  for (const char* name : {"size-1e308.log", "size-2p70.log"}) {
    INFO(name);
    const InputError e = refusal("nccl_tests", name);
    CHECK(e.json_path().rfind("line ", 0) == 0);
    CHECK_THAT(e.message(), Catch::Contains("is not a byte count"));
  }
}
