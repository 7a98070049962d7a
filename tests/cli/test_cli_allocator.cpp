// The executable asks its allocator (jemalloc, where linked) for transparent huge pages
// (src/cli/allocator_options.cpp, BENCHMARKS.md "Huge pages"). What it reports must not depend on that,
// nor on where its allocations land: every report below is compared byte for byte with the
// allocator's pages as the executable sets them, as jemalloc's default has them, refused (thp:never),
// and with the option repeated through the environment (which overrides the executable's; without
// jemalloc the variable is read by no one and the runs are alike).
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "process.hpp"

using namespace fusesim::testing;

namespace {

// MALLOC_CONF for the runs of one call, restored after: ctest runs each test case in a process of its
// own, so nothing else of this process reads it meanwhile.
class MallocConf {
 public:
  explicit MallocConf(const char* value) {
    if (const char* old = std::getenv("MALLOC_CONF")) previous_ = old;
    if (value == nullptr) {
      ::unsetenv("MALLOC_CONF");
    } else {
      ::setenv("MALLOC_CONF", value, 1);
    }
  }
  ~MallocConf() {
    if (previous_) {
      ::setenv("MALLOC_CONF", previous_->c_str(), 1);
    } else {
      ::unsetenv("MALLOC_CONF");
    }
  }
  MallocConf(const MallocConf&) = delete;
  MallocConf& operator=(const MallocConf&) = delete;

 private:
  std::optional<std::string> previous_;
};

struct Reports {
  std::string step_json, sweep_csv;
};

Reports run_reports(const char* malloc_conf) {
  const MallocConf conf(malloc_conf);
  Reports r;
  {
    ScratchDir dir;
    // A whole step across four nodes: the mirror, the collectives' rings, the kernels' profile.
    const ProcessResult p = run_fusesim({"simulate", "--topology", "dgx-h100-4node", "--workload", "llama-3-70b-4node",
                                         "--scope", "step", "--format", "json"},
                                        dir);
    REQUIRE(p.exit_code == 0);
    r.step_json = p.out;
  }
  {
    ScratchDir dir;
    // Configurations on two threads, each building and dropping its graphs.
    const ProcessResult p =
        run_fusesim({"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "2k:8k:x2", "--tp",
                     "2,4,8", "--schedule", "all", "--jobs", "2", "--output", "rows.csv"},
                    dir);
    REQUIRE(p.exit_code == 0);
    r.sweep_csv = slurp(dir.path() / "rows.csv");
  }
  return r;
}

}  // namespace

TEST_CASE("the executable's reports are the same whatever pages its allocator takes", "[cli][determinism]") {
  const Reports as_set = run_reports(nullptr);
  REQUIRE(as_set.step_json.size() > 1000);
  REQUIRE(as_set.sweep_csv.find('\n') != std::string::npos);
  for (const char* conf : {"thp:default", "thp:always,metadata_thp:always", "thp:never"}) {
    INFO("MALLOC_CONF=" << conf);
    const Reports other = run_reports(conf);
    CHECK(other.step_json == as_set.step_json);
    CHECK(other.sweep_csv == as_set.sweep_csv);
  }
}
