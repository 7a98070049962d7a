// The binary end to end: `list`, and `simulate` with the generators and the simulator behind it.
#include <algorithm>
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
                                     "tokens_per_s_per_gpu", "critical_rank", "regions", "ranks"};

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
  CHECK(row["ranks"].size() == static_cast<std::size_t>(row["gpus"].get<int>()));
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
    // commfuse-tpsp-block runs on tp 4: ranks 0..3.
    CHECK(named_processes == std::set<int>{0, 1, 2, 3});
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
