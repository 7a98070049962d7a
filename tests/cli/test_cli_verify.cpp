// `fusesim verify` end to end: every schedule passes; a corrupted generator fails every case.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "process.hpp"

using namespace fusesim::testing;
using nlohmann::json;

TEST_CASE("fusesim verify passes every schedule for t in 2 3 4 8 and k in 1 2 4", "[cli][verify]") {
  ScratchDir dir;
  const auto r = run_fusesim({"verify", "--format", "json", "--output", "verify.json"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json report = json::parse(slurp(dir.path() / "verify.json"));
  CHECK(report["passed"].get<bool>());
  CHECK(report["failures"].get<int>() == 0);
  // verify_tpsp's own test counts the TPSP cases (88 for t in {2,3,4,8} x k in {1,2,4}). The Ulysses
  // layers for up in {2,4,8}: two tp-1 shapes each and a tp-2 shape for up 2 and 4 (8 shapes) in
  // baseline, slice k = 1, 2, 4 and commfuse: 40.
  std::size_t up_cases = 0;
  for (const json& c : report["cases"]) up_cases += c.value("up", 1) > 1 ? 1 : 0;
  CHECK(up_cases == 40u);
  // DP (dp_test.cpp): dp 2, 4, 8 x ddp, zero1, zero3 x baseline, bucketed, commfuse = 27 with
  // collectives, and the same 27 in the ring P2P form ("-p2p"). 88 + 40 + 54 = 182 in all.
  std::size_t dp_cases = 0, p2p_cases = 0;
  for (const json& c : report["cases"]) {
    if (c.value("dp", 1) < 2) continue;
    ++dp_cases;
    const std::string s = c["schedule"].get<std::string>();
    p2p_cases += s.size() > 4 && s.compare(s.size() - 4, 4, "-p2p") == 0 ? 1 : 0;
  }
  CHECK(dp_cases == 54u);
  CHECK(p2p_cases == 27u);
  // Pipeline orders (pipeline_test.cpp): 1F1B, interleaved and ZB-H1 for 2, 3 and 4 stages, 31 cases.
  std::size_t pipeline_cases = 0;
  for (const json& c : report["cases"]) pipeline_cases += c["piece"] == "pipeline" ? 1 : 0;
  CHECK(pipeline_cases == 31u);
  CHECK(report["cases"].size() == 213u);
  bool saw_commfuse = false, saw_slice = false, saw_baseline = false;
  for (const json& c : report["cases"]) {
    CHECK(c["passed"].get<bool>());
    CHECK(c["max_abs_error"].get<double>() < 1e-9);
    const std::string s = c["schedule"].get<std::string>();
    saw_commfuse |= s.rfind("commfuse", 0) == 0;
    saw_slice |= s.rfind("slice", 0) == 0;
    saw_baseline |= s == "baseline";
  }
  CHECK((saw_commfuse && saw_slice && saw_baseline));
}

TEST_CASE("fusesim verify --inject-fault fails every case and exits 1", "[cli][verify]") {
  ScratchDir dir;
  const auto r = run_fusesim({"verify", "--tp", "4", "--inject-fault", "--format", "json"}, dir);
  REQUIRE(r.exit_code == 1);
  const json report = json::parse(r.out);
  CHECK_FALSE(report["passed"].get<bool>());
  CHECK(report["failures"].get<int>() == static_cast<int>(report["cases"].size()));
  CHECK(report["cases"].size() > 0u);
}

TEST_CASE("fusesim verify refuses bad command-line values with exit 2", "[cli][verify]") {
  ScratchDir dir;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"verify", "--tp", "0"}, {"verify", "--tp", "2,x"}, {"verify", "--schedule", "fast"},
           {"verify", "--format", "xml"}}) {
    const auto r = run_fusesim(args, dir);
    INFO(args[1] << " " << args[2] << ": " << r.err);
    CHECK(r.exit_code == 2);
    REQUIRE(r.err_lines().size() == 1);
    CHECK(r.err_lines()[0].find("error: <command line>: " + args[1]) == 0);
  }
}
