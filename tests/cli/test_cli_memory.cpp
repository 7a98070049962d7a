// Memory per rank end to end: the report in simulate's JSON and table, the refusal of a configuration
// that does not fit (exit 2, the workload file and $.parallel), --force-memory, and generate.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "process.hpp"

using namespace fusesim::testing;
using nlohmann::json;

namespace {

const std::string kOverMemory = std::string(FUSESIM_SOURCE_DIR) + "/tests/data/cli/over-memory-llama-3-70b-tp1.json";

}  // namespace

TEST_CASE("simulate refuses Llama-3-70B at TP 1 on an H100 and names the file and $.parallel", "[cli][memory]") {
  // 70,553,706,496 params x 18 B (bf16 weights, fp32 gradients, Adam fp32 master, m, v) = 1,270.0 GB of
  // training state on one rank, against the 80 GB of an H100 SXM.
  ScratchDir dir;
  const auto r = run_fusesim({"simulate", "--workload", kOverMemory, "--scope", "layer", "--output", "r.txt"}, dir);
  INFO(r.err);
  CHECK(r.exit_code == 2);
  const auto lines = r.err_lines();
  REQUIRE(lines.size() == 1);
  const std::string prefix = "error: " + kOverMemory + ": $.parallel: ";
  CHECK(lines[0].substr(0, prefix.size()) == prefix);
  // 70,553,706,496 x 2 B = 141.1 GB of weights; x 4 B = 282.2 GB of fp32 gradients; x 12 B = 846.6 GB
  // of optimizer state.
  CHECK(lines[0].find("per rank (parameters 141.1, gradients 282.2, optimizer state 846.6") != std::string::npos);
  CHECK(lines[0].find("but device 'h100-sxm' has 80.0 GB") != std::string::npos);
  CHECK(lines[0].find("--force-memory") != std::string::npos);
  CHECK(r.out.empty());
  CHECK(dir.entries().empty());
}

TEST_CASE("simulate --force-memory runs it and reports that it does not fit", "[cli][memory]") {
  ScratchDir dir;
  const auto r = run_fusesim({"simulate", "--workload", kOverMemory, "--scope", "layer", "--schedule", "baseline",
                              "--force-memory", "--format", "json"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  const json& m = doc["memory"];
  CHECK(m["params_per_rank"].get<std::int64_t>() == 70'553'706'496);
  CHECK(m["parameters_bytes"].get<std::int64_t>() == 2 * 70'553'706'496);
  CHECK(m["optimizer_bytes"].get<std::int64_t>() == 12 * 70'553'706'496);
  CHECK(m["capacity_bytes"].get<std::int64_t>() == 80'000'000'000);
  CHECK(m["device_model"].get<std::string>() == "h100-sxm");
  CHECK_FALSE(m["fits"].get<bool>());
  // TP 1, DP 1: no communicator and no buffer.
  CHECK(m["comm_buffers_bytes"].get<std::int64_t>() == 0);
  CHECK(m["total_bytes"].get<std::int64_t>() ==
        m["parameters_bytes"].get<std::int64_t>() + m["gradients_bytes"].get<std::int64_t>() +
            m["optimizer_bytes"].get<std::int64_t>() + m["activations_bytes"].get<std::int64_t>() +
            m["comm_buffers_bytes"].get<std::int64_t>());
  REQUIRE(m["breakdown"].size() == 5);
}

TEST_CASE("simulate reports the memory of a fitting job in JSON and in the table", "[cli][memory]") {
  ScratchDir dir;
  const std::vector<std::string> base = {"simulate", "--workload", "llama-3-8b", "--scope", "layer",
                                         "--schedule", "commfuse"};
  std::vector<std::string> as_json = base;
  as_json.insert(as_json.end(), {"--format", "json"});
  const auto r = run_fusesim(as_json, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json m = json::parse(r.out)["memory"];
  // Llama-3-8B at TP 8 (tests/model/test_memory.cpp derives each term): 1,004,802,048 params per rank
  // (padded vocabulary); 2 + 4 (fp32 gradients) + 12 B each = 18,086,436,864; activations 5,112,856,576; CommFuse buffers 150,994,944
  // (16 NCCL channels on the H100 model x 4 MiB, gathered [8192, 4096] and 2 Fuse-RS chunks, bf16).
  CHECK(m["params_per_rank"].get<std::int64_t>() == 1'004'802'048);
  CHECK(m["activations_bytes"].get<std::int64_t>() == 5'112'856'576);
  CHECK(m["comm_buffers_bytes"].get<std::int64_t>() == 150'994'944);
  CHECK(m["total_bytes"].get<std::int64_t>() == 18'086'436'864 + 5'112'856'576 + 150'994'944);
  CHECK(m["fits"].get<bool>());

  const auto t = run_fusesim(base, dir);
  REQUIRE(t.exit_code == 0);
  // 23,350,288,384 B = 23.4 GB; gradients 4,019,208,192 B = 4.0 GB; optimizer 12,057,624,576 B = 12.1 GB.
  CHECK(t.out.find("memory per rank: 23.4 GB of 80.0 GB (h100-sxm): parameters 2.0, gradients 4.0, optimizer "
                   "12.1, activations 5.1, comm buffers 0.2 GB") != std::string::npos);
}

TEST_CASE("generate writes an over-memory job's graph and warns", "[cli][memory]") {
  ScratchDir dir;
  const auto r = run_fusesim({"generate", "--workload", kOverMemory, "--schedule", "baseline", "--output", "g.json"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(dir.entries() == std::vector<std::string>{"g.json"});
  CHECK(r.err.find("warning: memory per rank:") != std::string::npos);
  CHECK(r.err.find("DOES NOT FIT") != std::string::npos);
}
