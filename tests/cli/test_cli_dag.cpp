// `fusesim generate` and `fusesim simulate-dag`: a generated graph written out and simulated again
// gives the metrics of `simulate`; a bad graph file exits 2 naming its path.
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "process.hpp"

using namespace fusesim::testing;
using nlohmann::json;

TEST_CASE("generate then simulate-dag reproduces simulate exactly", "[cli][dag]") {
  ScratchDir dir;
  const std::vector<std::string> job{"--topology", "dgx-h100", "--workload", "commfuse-tpsp-block", "--schedule",
                                     "commfuse", "--scope", "layer"};
  std::vector<std::string> gen{"generate", "--output", "g.json"};
  gen.insert(gen.end(), job.begin(), job.end());
  const auto g = run_fusesim(gen, dir);
  INFO(g.err);
  REQUIRE(g.exit_code == 0);
  const auto d = run_fusesim({"simulate-dag", "--dag", "g.json", "--format", "json"}, dir);
  INFO(d.err);
  REQUIRE(d.exit_code == 0);
  std::vector<std::string> sim{"simulate", "--format", "json"};
  sim.insert(sim.end(), job.begin(), job.end());
  const auto s = run_fusesim(sim, dir);
  REQUIRE(s.exit_code == 0);
  const json from_dag = json::parse(d.out);
  const json from_sim = json::parse(s.out)["results"][0];
  for (const char* key : {"step_time_s", "compute_s", "comm_s", "exposed_comm_s", "overlap_ratio", "head_latency_s",
                          "tail_latency_s", "mfu", "hfu", "tokens_per_s"}) {
    INFO(key);
    CHECK(from_dag[key] == from_sim[key]);
  }
}

TEST_CASE("simulate-dag refuses a graph with an unmatched send, exit 2 and its path", "[cli][dag]") {
  ScratchDir dir;
  std::ofstream(dir.file("bad.json")) << R"({"schema_version": 1, "ranks": 2, "tasks": [
    {"name": "s", "rank": 0, "stream": {"kind": "copy"}, "send": {"peer": 1, "bytes": 64, "tag": 1}},
    {"name": "r", "rank": 1, "recv": {"peer": 0, "bytes": 64, "tag": 2}}]})";
  const auto r = run_fusesim({"simulate-dag", "--dag", "bad.json", "--trace", "t.json", "--output", "o.txt"}, dir);
  CHECK(r.exit_code == 2);
  REQUIRE(r.err_lines().size() == 1);
  CHECK(r.err_lines()[0].find("error: bad.json: $.tasks[0]: send 's'") == 0);
  CHECK(dir.entries() == std::vector<std::string>{"bad.json"});  // nothing written
}

TEST_CASE("the README's generate then simulate-dag runs as written: the graph names its cluster", "[cli][dag]") {
  // Issue 13: generate defaulted to dgx-h100-4node and simulate-dag to dgx-h100, so the README's two
  // commands exited 2 (`$.ranks: value 32 ...`); with the same --topology on both, a DP ring tag from
  // 2^50 up was refused. The file now names its cluster, and tags are any 64-bit identifier.
  ScratchDir dir;
  const auto g = run_fusesim({"generate", "--schedule", "commfuse", "--output", "my.json"}, dir);
  INFO(g.err);
  REQUIRE(g.exit_code == 0);
  std::ifstream in(dir.file("my.json"));
  const json file = json::parse(in);
  CHECK(file["topology"] == "dgx-h100-4node");
  const auto d = run_fusesim({"simulate-dag", "--dag", "my.json", "--format", "json"}, dir);
  INFO(d.err);
  REQUIRE(d.exit_code == 0);
  CHECK(d.err.empty());
  const auto s = run_fusesim({"simulate", "--topology", "dgx-h100-4node", "--workload", "llama-3-70b-4node", "--schedule",
                              "commfuse", "--scope", "layer", "--format", "json"},
                             dir);
  REQUIRE(s.exit_code == 0);
  // The graph carries its GPUs, so simulate-dag reports what simulate does for the same layer (one
  // graph holds TPSP and DP; simulate's rows are of that graph too).
  const json from_dag = json::parse(d.out);
  const json row = json::parse(s.out)["results"][0];
  CHECK(from_dag["gpus"] == 32);
  for (const char* key : {"step_time_s", "exposed_comm_s", "mfu", "tokens_per_s", "head_latency_s"}) {
    INFO(key);
    CHECK(from_dag[key] == row[key]);
  }

  // Asked for another cluster: it runs there, and says so.
  const auto other = run_fusesim({"simulate-dag", "--dag", "my.json", "--topology", "dgx-h100-128node"}, dir);
  CHECK(other.exit_code == 0);
  CHECK(other.err.find("note: my.json was generated for dgx-h100-4node; simulating it on dgx-h100-128node") == 0);
  // A file naming a cluster that does not load: exit 2 at $.topology.
  json bad = file;
  bad["topology"] = "no-such-cluster";
  std::ofstream(dir.file("bad.json")) << bad.dump();
  const auto b = run_fusesim({"simulate-dag", "--dag", "bad.json"}, dir);
  CHECK(b.exit_code == 2);
  REQUIRE(b.err_lines().size() == 1);
  CHECK(b.err_lines()[0].find("error: bad.json: $.topology: ") == 0);
}

TEST_CASE("simulate-dag refuses a copy-engine send between nodes, naming the task", "[cli][dag][engine]") {
  ScratchDir dir;
  // dgx-h100-4node: ranks 0 and 8 are on nodes 0 and 1.
  std::ofstream(dir.file("net.json")) << R"({"schema_version": 1, "ranks": 9, "topology": "dgx-h100-4node", "tasks": [
    {"name": "s", "rank": 0, "stream": {"kind": "copy"}, "send": {"peer": 8, "bytes": 64, "engine": "copy_engine"}},
    {"name": "r", "rank": 8, "recv": {"peer": 0, "bytes": 64}}]})";
  const auto r = run_fusesim({"simulate-dag", "--dag", "net.json"}, dir);
  CHECK(r.exit_code == 2);
  REQUIRE(r.err_lines().size() == 1);
  CHECK(r.err_lines()[0].find("error: net.json: $.tasks[0].send.engine: send 's' crosses nodes on a copy engine") == 0);
  // The same send on an SM kernel runs.
  std::ofstream(dir.file("ok.json")) << R"({"schema_version": 1, "ranks": 9, "topology": "dgx-h100-4node", "tasks": [
    {"name": "s", "rank": 0, "stream": {"kind": "comm"}, "send": {"peer": 8, "bytes": 64, "engine": "sm_kernel"}},
    {"name": "r", "rank": 8, "recv": {"peer": 0, "bytes": 64}}]})";
  CHECK(run_fusesim({"simulate-dag", "--dag", "ok.json"}, dir).exit_code == 0);
}
