// `fusesim trace import`: measured Kineto traces read from the command line; bad traces exit 2 naming
// the file and the JSON path, and write nothing.
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "process.hpp"

using namespace fusesim::testing;

TEST_CASE("trace import prints the measures per rank and step, and the classes", "[cli][trace-import]") {
  ScratchDir dir;
  const std::string a = source_path("tests/data/kineto/h100-train-step-mpt-1b-plain.json.gz");
  const std::string b = source_path("tests/data/kineto/h100-train-step-llama3-8b-4l.json.gz");
  const auto r = run_fusesim({"trace", "import", a, b}, dir);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("exposed ms") != std::string::npos);
  CHECK(r.out.find("   0   all  gemm") != std::string::npos);  // rank 0: the first file
  CHECK(r.out.find("   1   all  gemm") != std::string::npos);
  const auto j = run_fusesim({"trace", "import", b, "--format", "json", "--output", "m.json"}, dir);
  REQUIRE(j.exit_code == 0);
  std::ifstream in(dir.file("m.json"));
  const nlohmann::json doc = nlohmann::json::parse(in);
  REQUIRE(doc.size() == 1);
  CHECK(doc[0]["rank"] == 0);
  CHECK(doc[0]["steps"][0]["kernels"] == 773);  // tests/data/kineto/README.md
  CHECK(doc[0]["steps"][0]["comm_s"] == 0.0);
  CHECK(doc[0]["steps"][0]["collectives"].empty());
  // The HTA job's rank 0 (docs/traces.md, "Test data"): its NCCL kernels are send/receive kernels
  // (ncclKernel_SendRecv_...), 5 per step, 195.327 ms in step 551 (its communication, nothing of it
  // concurrent); the trace (2023) records no collective args, so no group or sizes.
  const auto h = run_fusesim({"trace", "import", source_path("tests/data/kineto/hta-sampled-rank-0.json.gz"), "--format",
                              "json"},
                             dir);
  REQUIRE(h.exit_code == 0);
  const nlohmann::json step551 = nlohmann::json::parse(h.out)[0]["steps"][0];
  CHECK(step551["step"] == 551);
  REQUIRE(step551["collectives"].size() == 1);
  CHECK(step551["collectives"][0]["op"] == "send_recv");
  CHECK(step551["collectives"][0]["calls"] == 5);
  CHECK(step551["collectives"][0]["time_s"].get<double>() == Approx(0.195327).margin(1e-9));
  CHECK_FALSE(step551["collectives"][0].contains("in_bytes"));
}

TEST_CASE("trace import refuses a malformed trace with the file and the JSON path, writing nothing",
          "[cli][trace-import]") {
  ScratchDir dir;
  {
    std::ofstream(dir.file("bad.json")) << R"({"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1}]})";
    std::ofstream(dir.file("syntax.json")) << R"({"traceEvents": [)";
    std::ofstream(dir.file("broken.json.gz")) << "not gzip";
  }
  const auto bad = run_fusesim({"trace", "import", "bad.json", "--output", "out.json"}, dir);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("bad.json: $.traceEvents[0]: a complete (\"X\") event needs \"dur\"") != std::string::npos);
  const auto syntax = run_fusesim({"trace", "import", "syntax.json"}, dir);
  CHECK(syntax.exit_code == 2);
  CHECK(syntax.err.find("syntax.json: $: JSON syntax error") != std::string::npos);
  const auto gz = run_fusesim({"trace", "import", "broken.json.gz"}, dir);
  CHECK(gz.exit_code == 2);
  CHECK(gz.err.find("broken.json.gz: $: a .gz file that does not decompress") != std::string::npos);
  const auto none = run_fusesim({"trace", "import", "missing.json"}, dir);
  CHECK(none.exit_code == 2);
  const auto fmt = run_fusesim({"trace", "import", "bad.json", "--format", "csv"}, dir);
  CHECK(fmt.exit_code == 2);
  CHECK(fmt.err.find("--format") != std::string::npos);
  for (const std::string& e : dir.entries()) CHECK(e != "out.json");
}
