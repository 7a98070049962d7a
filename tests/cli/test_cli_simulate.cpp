// The binary end to end: `list`, and `simulate` with the generators and the simulator behind it.
#include <algorithm>
#include <fstream>
#include <map>
#include <tuple>
#include <set>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "process.hpp"

using namespace fusesim::testing;
using nlohmann::json;

namespace {

const char* const kRequiredKeys[] = {"schedule",       "parallelism",    "step_time_s", "compute_s",
                                     "comm_s",         "exposed_comm_s", "overlap_ratio", "head_latency_s",
                                     "tail_latency_s", "mfu",            "hfu",         "tokens_per_s",
                                     "tokens_per_s_per_gpu", "critical_rank", "regions", "ranks",
                                     "simulated_ranks"};

void check_row(const json& row) {
  for (const char* key : kRequiredKeys) {
    INFO("key " << key);
    REQUIRE(row.contains(key));
  }
  const double T = row["step_time_s"].get<double>();
  CHECK(T > 0.0);
  const std::string par = row["parallelism"].get<std::string>();
  CHECK((par == "tpsp" || par == "up" || par == "dp"));
  // Per-rank measures live inside [0, T]; overlap is a fraction; tail latency includes the head.
  CHECK(row["compute_s"].get<double>() <= T * (1 + 1e-12));
  CHECK(row["exposed_comm_s"].get<double>() <= row["comm_s"].get<double>() * (1 + 1e-12));
  CHECK(row["overlap_ratio"].get<double>() >= 0.0);
  CHECK(row["overlap_ratio"].get<double>() <= 1.0);
  CHECK(row["tail_latency_s"].get<double>() >= row["head_latency_s"].get<double>());
  CHECK(row["mfu"].get<double>() > 0.0);
  CHECK(row["mfu"].get<double>() <= row["hfu"].get<double>());
  CHECK(row["hfu"].get<double>() < 1.0);
  // tokens/s = tokens / T, and per GPU divides by the GPUs.
  CHECK(row["tokens_per_s"].get<double>() == Approx(row["tokens"].get<double>() / T));
  CHECK(row["tokens_per_s_per_gpu"].get<double>() ==
        Approx(row["tokens_per_s"].get<double>() / row["gpus"].get<double>()));
  // The ranks simulated: every rank, or (--symmetry mirror, the default) whole DP replicas.
  CHECK(row["ranks"].size() == row["simulated_ranks"].get<std::size_t>());
  CHECK(row["gpus"].get<int>() % row["simulated_ranks"].get<int>() == 0);
}

}  // namespace

TEST_CASE("fusesim list names the shipped topologies and workloads", "[cli]") {
  ScratchDir dir;
  const auto r = run_fusesim({"list"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());
  for (const char* name : {"dgx-h100", "dgx-h100-4node", "llama-3-70b", "llama-3-8b"})
    CHECK(r.out.find(name) != std::string::npos);
  // The topologies' descriptions (up to 600 characters) wrap at 72 within their column: with the
  // name (23), ranks (5) and layout (25) columns and their gaps, a line stays within 140.
  std::size_t widest = 0;
  for (std::size_t at = 0; at < r.out.size();) {
    const std::size_t end = std::min(r.out.find('\n', at), r.out.size());
    widest = std::max(widest, end - at);
    at = end + 1;
  }
  CHECK(widest <= 140);
}

TEST_CASE("fusesim simulate --format json runs the default job of three schedules at both scopes", "[cli][simulate]") {
  ScratchDir dir;
  const auto r = run_fusesim({"simulate", "--format", "json", "--output", "report.json"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.empty());  // the report went to the file
  CHECK(dir.entries() == std::vector<std::string>{"report.json"});
  const json doc = json::parse(slurp(dir.path() / "report.json"));
  // A 70B model's training state does not fit one DGX H100 (16 B/param of Adam state alone is
  // 1.1 TB), so the default job is four DGX H100 nodes: TP 8 inside a node, ZeRO-2 DP 4 across.
  CHECK(doc["topology"].get<std::string>() == "dgx-h100-4node");
  CHECK(doc["model"].get<std::string>() == "llama-3-70b");
  CHECK(doc["parallel"]["tp"].get<int>() == 8);
  CHECK(doc["parallel"]["dp"].get<int>() == 4);
  CHECK(doc["sequence_length"].get<int>() == 8192);
  CHECK(doc["backward"].get<bool>());
  // Both parallelisms the workload uses (tpsp, dp) x two scopes x three schedules.
  REQUIRE(doc["results"].size() == 12);
  // Mirrored by default: DP replica 0 stands for the 4 replicas, and its rank 0 for its TP group
  // (collectives and CommFuse's ring alike turn onto themselves), so one rank for all 32
  // (tests/sched/symmetry_test.cpp proves the figures equal every rank's).
  for (const json& row : doc["results"]) {
    INFO(row["parallelism"].get<std::string>() << " " << row["schedule"].get<std::string>());
    CHECK(row["simulated_ranks"].get<int>() == 1);
  }
  std::map<std::tuple<std::string, std::string, std::string>, json> by;
  for (const json& row : doc["results"]) {
    check_row(row);
    by[{row["parallelism"].get<std::string>(), row["scope"].get<std::string>(),
        row["schedule"].get<std::string>()}] = row;
  }
  for (const char* par : {"tpsp", "dp"})
    for (const char* scope : {"layer", "stack"})
      for (const char* schedule : {"baseline", "slice", "commfuse"}) CHECK(by.count({par, scope, schedule}) == 1);
  for (const char* par : {"tpsp", "dp"}) {
    // A stack of 80 layers takes longer than one layer, for every schedule.
    for (const char* schedule : {"baseline", "slice", "commfuse"})
      CHECK(by[{par, "stack", schedule}]["step_time_s"].get<double>() >
            by[{par, "layer", schedule}]["step_time_s"].get<double>());
    // Overlap leaves less communication exposed than no overlap, for either parallelism.
    CHECK(by[{par, "layer", "commfuse"}]["exposed_comm_s"].get<double>() <
          by[{par, "layer", "baseline"}]["exposed_comm_s"].get<double>());
  }
  // The point of CommFuse (design note §2) on TPSP: less exposed than the baseline and than slicing.
  CHECK(by[{"tpsp", "layer", "commfuse"}]["exposed_comm_s"].get<double>() <
        by[{"tpsp", "layer", "slice"}]["exposed_comm_s"].get<double>());
}

TEST_CASE("fusesim simulate is deterministic and prints a table by default", "[cli][simulate]") {
  ScratchDir dir;
  const std::vector<std::string> args = {"simulate", "--scope", "layer", "--workload", "commfuse-tpsp-block",
                                         "--format", "json"};
  const auto a = run_fusesim(args, dir);
  const auto b = run_fusesim(args, dir);
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  CHECK(a.out == b.out);
  const json doc = json::parse(a.out);
  REQUIRE(doc["results"].size() == 3);
  for (const json& row : doc["results"]) check_row(row);

  const auto t = run_fusesim({"simulate", "--scope", "layer", "--workload", "commfuse-tpsp-block"}, dir);
  REQUIRE(t.exit_code == 0);
  // A job line, the header, the rule and one row per schedule.
  CHECK(t.out.find("step (ms)") != std::string::npos);
  CHECK(t.out.find("baseline") != std::string::npos);
  CHECK(t.out.find("commfuse") != std::string::npos);
  // commfuse-tpsp-block is TP 4 x DP 1: rank 0 stands for its TP group (TP images), and the table says so.
  CHECK(t.out.find("ranks simulated: 1 of 4, the others their images") != std::string::npos);

  // A step of a workload of blocks alone (vocab 0) is refused with what to run instead, on one line.
  const auto step = run_fusesim({"simulate", "--scope", "step", "--workload", "commfuse-tpsp-block"}, dir);
  CHECK(step.exit_code == 2);
  CHECK(step.out.empty());
  CHECK(step.err.find("$.model.vocab") != std::string::npos);
  CHECK(step.err.find("--scope layer or stack") != std::string::npos);
  CHECK(std::count(step.err.begin(), step.err.end(), '\n') == 1);
}

TEST_CASE("the forward-only option simulates less work than forward and backward", "[cli][simulate]") {
  ScratchDir dir;
  const std::vector<std::string> base = {"simulate", "--scope", "layer", "--schedule", "commfuse", "--workload",
                                         "commfuse-tpsp-block", "--format", "json"};
  auto fwd_args = base;
  fwd_args.push_back("--forward-only");
  const auto both = run_fusesim(base, dir);
  const auto fwd = run_fusesim(fwd_args, dir);
  INFO(both.err << fwd.err);
  REQUIRE(both.exit_code == 0);
  REQUIRE(fwd.exit_code == 0);
  const json a = json::parse(both.out)["results"][0];
  const json f = json::parse(fwd.out)["results"][0];
  CHECK(json::parse(fwd.out)["backward"].get<bool>() == false);
  CHECK(f["step_time_s"].get<double>() < a["step_time_s"].get<double>());
  // Backward GEMMs are twice the forward ones (dgrad + wgrad): far more FLOPs with backward.
  CHECK(f["model_flops"].get<double>() < a["model_flops"].get<double>());
}

TEST_CASE("the trace option writes one Chrome trace per schedule", "[cli][simulate][trace]") {
  ScratchDir dir;
  const auto r = run_fusesim({"simulate", "--scope", "layer", "--workload", "commfuse-tpsp-block", "--trace",
                              "run.json", "--format", "json", "--output", "report.json"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto entries = dir.entries();
  std::sort(entries.begin(), entries.end());
  CHECK(entries == std::vector<std::string>{"report.json", "run.baseline.json", "run.commfuse.json", "run.slice.json"});
  for (const char* name : {"run.baseline.json", "run.slice.json", "run.commfuse.json"}) {
    INFO(name);
    const json trace = json::parse(slurp(dir.path() / name));
    CHECK(trace["displayTimeUnit"].get<std::string>() == "ns");
    std::set<int> named_processes;
    std::set<std::pair<int, int>> named_threads;
    std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> slices;  // (pid, tid) -> [ts, end]
    std::map<std::uint64_t, std::multiset<std::string>> flows;
    std::vector<json> flow_events;
    for (const json& e : trace["traceEvents"]) {
      const std::string ph = e["ph"].get<std::string>();
      const std::pair<int, int> thread{e["pid"].get<int>(), e["tid"].get<int>()};
      if (ph == "M" && e["name"] == "process_name") named_processes.insert(thread.first);
      if (ph == "M" && e["name"] == "thread_name") named_threads.insert(thread);
      if (ph == "X") {
        const double ts = e["ts"].get<double>();
        slices[thread].push_back({ts, ts + e["dur"].get<double>()});
      }
      if (ph == "s" || ph == "f") {
        flows[e["id"].get<std::uint64_t>()].insert(ph);
        flow_events.push_back(e);
      }
    }
    // commfuse-tpsp-block runs on tp 4: ranks 0..3, then the link counters of node 0 (pid 32: the
    // default dgx-h100-4node has 32 ranks, whose pids come first).
    CHECK(named_processes == std::set<int>{0, 1, 2, 3, 32});
    CHECK_FALSE(slices.empty());
    CHECK_FALSE(flows.empty());
    for (const auto& [id, phases] : flows) CHECK(phases == std::multiset<std::string>{"f", "s"});
    // Times are whole nanoseconds; kEps (1 ps) only absorbs the double arithmetic of ts + dur here.
    constexpr double kEps = 1e-6;
    // Viewers draw a thread's slices as a stack: two may nest or follow each other, never half overlap.
    for (auto& [thread, list] : slices) {
      CHECK(named_threads.count(thread) == 1);
      std::sort(list.begin(), list.end());
      for (std::size_t i = 1; i < list.size(); ++i)
        CHECK_FALSE((list[i].first < list[i - 1].second - kEps && list[i].second > list[i - 1].second + kEps));
    }
    // Every arrow end lies strictly inside a slice of its thread, so that it binds to that slice.
    for (const json& f : flow_events) {
      const double ts = f["ts"].get<double>();
      bool inside = false;
      for (const auto& [a, b] : slices[{f["pid"].get<int>(), f["tid"].get<int>()}]) inside = inside || (a < ts && ts < b);
      CHECK(inside);
    }
  }
}

TEST_CASE("simulate names what priced its kernels: the shipped profile by default, the roofline on request",
          "[cli][simulate][pricing]") {
  ScratchDir dir;
  const std::vector<std::string> base{"simulate", "--topology", "dgx-h100", "--workload", "llama-3-8b",
                                      "--schedule", "baseline", "--scope", "layer", "--format", "json"};
  const auto automatic = run_fusesim(base, dir);
  INFO(automatic.err);
  REQUIRE(automatic.exit_code == 0);
  const json a = json::parse(automatic.out);
  CHECK(a["pricing"]["model"] == "profile");
  CHECK(a["pricing"]["profile"] == "<embedded:profiles/h100-sxm.json>");
  CHECK(a["pricing"]["profile_digest"].get<std::string>().size() == 16);

  std::vector<std::string> roofline_args = base;
  roofline_args.push_back("--roofline");
  const auto roofline = run_fusesim(roofline_args, dir);
  REQUIRE(roofline.exit_code == 0);
  const json r = json::parse(roofline.out);
  CHECK(r["pricing"]["model"] == "roofline");
  CHECK(r["pricing"]["profile"].is_null());
  // The two models price the same layer differently (the profile's GEMM and attention tables).
  CHECK(r["results"][0]["compute_s"].get<double>() != a["results"][0]["compute_s"].get<double>());

  std::vector<std::string> table_args(base.begin(), base.end() - 2);
  const auto table = run_fusesim(table_args, dir);
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find("kernels priced by profile h100-sxm (<embedded:profiles/h100-sxm.json>") != std::string::npos);

  std::vector<std::string> both = base;
  both.insert(both.end(), {"--roofline", "--profile", "h100-sxm"});
  const auto refused = run_fusesim(both, dir);
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("--roofline") != std::string::npos);
  // A named profile with fitted links says what it set in the cluster: here a P2P measured between two
  // nodes, on a cluster of four (docs/calibration.md, "Links").
  const json links = {
      {"schema", "fusesim.calibration"},
      {"schema_version", 1},
      {"device", {{"name", "H100 SXM5"}, {"model", "h100-sxm"}, {"sm_count", 132}}},
      {"provenance", {{"kind", "synthetic"}, {"machine", "test"}, {"date", "2026-11-29"}, {"source", "test"}}},
      {"fitted",
       {{"collectives", {{"p2p", {{"ranks", 2}, {"nodes", 2}, {"latency_s", 20e-6}, {"busbw_bytes_per_s", 30e9}}}}}}}};
  {
    std::ofstream f(dir.file("links.json"));
    f << links.dump();
  }
  std::vector<std::string> named = base;
  named[2] = "dgx-h100-4node";
  named.insert(named.end(), {"--profile", dir.file("links.json")});
  const auto with_links = run_fusesim(named, dir);
  INFO(with_links.err);
  REQUIRE(with_links.exit_code == 0);
  const json l = json::parse(with_links.out);
  REQUIRE(l["pricing"]["links_applied"].size() == 1);
  CHECK(l["pricing"]["links_applied"][0].get<std::string>().find("p2p between nodes: p2p_network efficiency 0.6047") == 0);
  CHECK(a["pricing"]["links_applied"].empty());
}

TEST_CASE("simulate --engine sets what carries communication and every report names it", "[cli][simulate][engine]") {
  ScratchDir dir;
  const std::vector<std::string> base{"simulate", "--topology", "dgx-h100", "--workload", "llama-3-8b",
                                      "--schedule", "commfuse", "--scope", "layer", "--format", "json"};
  std::map<std::string, json> by_engine;
  for (const char* engine : {"sm", "copy", "auto"}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--engine", engine});
    const auto r = run_fusesim(args, dir);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    by_engine[engine] = json::parse(r.out);
    CHECK(by_engine[engine]["engine"] == engine);
  }
  // The shipped workload names engine "sm": the default run is the sm run, byte for byte.
  const auto plain = run_fusesim(base, dir);
  REQUIRE(plain.exit_code == 0);
  CHECK(json::parse(plain.out) == by_engine["sm"]);
  // CommFuse's ring steps are P2P: on SM kernels they hold SMs the GEMMs beside them lose, on copy
  // engines they do not, so the two runs differ; auto runs its P2P on copy engines too.
  const double sm = by_engine["sm"]["results"][0]["step_time_s"].get<double>();
  const double copy = by_engine["copy"]["results"][0]["step_time_s"].get<double>();
  const double mixed = by_engine["auto"]["results"][0]["step_time_s"].get<double>();
  CHECK(sm != copy);
  CHECK(mixed == copy);  // commfuse issues no collective at layer scope on one node: only its P2P engine matters

  std::vector<std::string> table_args(base.begin(), base.end() - 2);
  table_args.insert(table_args.end(), {"--engine", "copy"});
  const auto table = run_fusesim(table_args, dir);
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find("engines copy") != std::string::npos);

  std::vector<std::string> bad = base;
  bad.insert(bad.end(), {"--engine", "nvlink"});
  const auto refused = run_fusesim(bad, dir);
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("--engine") != std::string::npos);
}

TEST_CASE("simulate notes the all-reduces across nodes run as NCCL's tree", "[cli][simulate]") {
  // Two layers of hidden 1,024 at TP 1 x DP 32 DDP on the four DGX H100 nodes: 28 MiB gradient
  // all-reduces whose ring (62 hops) costs more than NCCL's tree (2 x (7 + 2) hops); the ZeRO-1
  // step of the same model has no all-reduce over DP, hence no note. Mirror and every rank alike.
  ScratchDir dir;
  json w = json::parse(std::ifstream(source_path("workloads/llama-3-70b-4node.json")));
  w["model"]["layers"] = 2;
  w["model"]["hidden"] = 1024;
  w["model"]["heads"] = 8;
  w["model"]["kv_heads"] = 8;
  w["model"]["ffn_hidden"] = 3584;
  w["training"]["sequence_length"] = 1024;
  w["parallel"]["tp"] = 1;
  w["parallel"]["dp"] = 32;
  for (const char* sharding : {"ddp", "zero1"}) {
    w["parallel"]["dp_sharding"] = sharding;
    std::ofstream(dir.file("w.json")) << w.dump();
    std::vector<std::string> notes;
    for (const char* symmetry : {"mirror", "none"}) {
      const auto r = run_fusesim({"simulate", "--workload", "w.json", "--topology", "dgx-h100-4node", "--scope", "step",
                                  "--schedule", "baseline", "--parallelism", "dp", "--symmetry", symmetry, "--format",
                                  "json"},
                                 dir);
      INFO(sharding << " " << symmetry << ": " << r.err);
      REQUIRE(r.exit_code == 0);
      const json doc = json::parse(r.out);
      std::string tree;
      for (const json& n : doc["notes"])
        if (n.get<std::string>().find("run as NCCL's tree") != std::string::npos) tree = n.get<std::string>();
      CHECK(tree.empty() == (std::string(sharding) == "zero1"));
      notes.push_back(tree);
    }
    CHECK(notes[0] == notes[1]);
    // simulate-dag runs the same graph written by generate and says the same.
    REQUIRE(run_fusesim({"generate", "--workload", "w.json", "--topology", "dgx-h100-4node", "--scope", "step",
                         "--schedule", "baseline", "--symmetry", "none", "--output", "dag.json"},
                        dir)
                .exit_code == 0);
    const auto dag = run_fusesim({"simulate-dag", "--dag", "dag.json", "--format", "json"}, dir);
    REQUIRE(dag.exit_code == 0);
    const json dag_doc = json::parse(dag.out);
    CHECK(dag_doc.contains("notes") == !notes[0].empty());
    if (dag_doc.contains("notes")) CHECK(dag_doc["notes"][0].get<std::string>() == notes[0]);
  }
}
