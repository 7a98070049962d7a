#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <unistd.h>

#include <zlib.h>

#include <catch2/catch.hpp>

#include "fixtures.hpp"
#include "fusesim/analysis/chrome_trace.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/error.hpp"

using namespace fusesim;
using namespace fusesim::testing;
using nlohmann::json;

namespace {

constexpr TimePs U = kPsPerMicrosecond;

// Two ranks on two nodes. Rank 0: compute A, collective C0, two sends on copy engines 0 and 1.
// Rank 1: collective C1, compute D, two receives that overlap in time (so they need two lanes).
struct TraceScenario {
  topo::Cluster cluster = make_cluster(2, 1, 1e12);
  FakeCosts costs;
  sched::TaskGraph graph{2};
  std::vector<std::pair<TimePs, TimePs>> times;  // per task, microseconds
  std::vector<sim::TransferRecord> transfers;

  TraceScenario() {
    graph.add_region({"L0/fwd/ag+fc1", sched::Parallelism::tpsp});
    auto add = [&](sched::Task t, TimePs a, TimePs b) {
      const auto id = graph.add(std::move(t));
      times.resize(id + 1);
      times[id] = {a, b};
      return id;
    };
    add(compute_task("A", 0, 100, false, 0), 0, 10);                       // 0
    const auto c0 = add(collective_task("C0", 0, {0, 1}, 1, 0), 0, 30);    // 1
    const auto s0 = add(send_task("S0", 0, 1, 1, 0), 10, 20);              // 2
    sched::Task s1t = send_task("S1", 0, 1, 2, 0);
    s1t.stream.index = 1;
    const auto s1 = add(s1t, 12, 25);                                       // 3
    const auto c1 = add(collective_task("C1", 1, {0, 1}, 1, 0), 0, 30);    // 4
    const auto r0 = add(recv_task("R0", 1, 0, 1, 0), 10, 20);              // 5
    const auto r1 = add(recv_task("R1", 1, 0, 2, 0), 12, 25);              // 6
    add(compute_task("D", 1, 200, false, 0), 5, 40);                       // 7
    transfers.push_back({s0, r0, 0, 1, 1024, -1, model::CommEngine::copy_engine, 10 * U, 20 * U});
    transfers.push_back({s1, r1, 0, 1, 1024, -1, model::CommEngine::copy_engine, 12 * U, 25 * U});
    transfers.push_back({c0, c1, 0, 1, 2048, 0, model::CommEngine::sm_kernel, 2 * U, 14 * U});
    transfers.push_back({c1, c0, 1, 0, 2048, 0, model::CommEngine::sm_kernel, 2 * U, 14 * U});
  }

  // Replays the run into the recorder as the simulator would: starts, ends and transfers.
  void replay(sim::Observer& obs) const {
    for (sched::TaskId id = 0; id < graph.size(); ++id) obs.on_task_start(graph.task(id), id, times[id].first * U);
    for (sched::TaskId id = 0; id < graph.size(); ++id) obs.on_task_end(graph.task(id), id, times[id].second * U);
    for (const auto& t : transfers) obs.on_transfer_end(t);
  }
};

std::string slurp_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::filesystem::path temp_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("fusesim-trace-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("chrome trace has named processes and threads with X events and paired flows", "[trace]") {
  TraceScenario s;
  analysis::ChromeTraceRecorder rec(s.cluster, &s.costs, s.graph.regions());
  s.replay(rec);
  const json doc = rec.to_json();

  REQUIRE(doc.contains("traceEvents"));
  CHECK(doc["displayTimeUnit"].get<std::string>() == "ns");
  const json& ev = doc["traceEvents"];

  std::map<int, std::string> process_names;
  std::map<std::pair<int, int>, std::string> thread_names;
  std::vector<json> xs;
  std::map<std::uint64_t, std::vector<json>> flows;
  for (const json& e : ev) {
    const std::string ph = e["ph"].get<std::string>();
    if (ph == "M" && e["name"] == "process_name")
      process_names[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
    else if (ph == "M" && e["name"] == "thread_name")
      thread_names[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"].get<std::string>();
    else if (ph == "X")
      xs.push_back(e);
    else if (ph == "s" || ph == "f")
      flows[e["id"].get<std::uint64_t>()].push_back(e);
  }

  CHECK(process_names[0] == "rank 0 (node 0, test-gpu)");
  CHECK(process_names[1] == "rank 1 (node 1, test-gpu)");
  // Rank 0: compute, comm, two copy engines. Rank 1: compute, comm, two receive lanes (R0 [10,20) and
  // R1 [12,25) overlap, so they cannot share one thread).
  CHECK(thread_names[{0, 1}] == "compute");
  CHECK(thread_names[{0, 100}] == "comm (SM kernel)");
  CHECK(thread_names[{0, 200}] == "copy engine 0");
  CHECK(thread_names[{0, 201}] == "copy engine 1");
  CHECK(thread_names[{1, 1000}] == "recv (P2P arrivals)");
  CHECK(thread_names[{1, 1001}] == "recv 1 (P2P arrivals)");
  CHECK(thread_names.size() == 8);

  // One X event per task, ts/dur in microseconds.
  REQUIRE(xs.size() == s.graph.size());
  for (const json& x : xs) {
    if (x["name"] == "D") {
      CHECK(x["ts"].get<double>() == 5.0);
      CHECK(x["dur"].get<double>() == 35.0);
      // 2 x 200 x 10 x 5 FLOPs from the cost model; labels carried as args.
      CHECK(x["args"]["flops"].get<double>() == 20000.0);
      CHECK(x["args"]["region"].get<std::string>() == "L0/fwd/ag+fc1");
      CHECK(x["args"]["op"].get<std::string>() == "fc1");
      CHECK(x["args"]["layer"].get<int>() == 0);
    }
    if (x["name"] == "S0") {
      CHECK(x["args"]["bytes"].get<int>() == 1024);
      CHECK(x["args"]["chunk"].get<int>() == 1);
      CHECK(x["args"]["step"].get<int>() == 0);
    }
  }

  // Each flow id: one 's' and one 'f' (bp "e"), each strictly inside an X slice on its thread.
  REQUIRE(flows.size() == s.transfers.size());
  for (const auto& [id, pair] : flows) {
    REQUIRE(pair.size() == 2);
    int starts = 0, finishes = 0;
    for (const json& f : pair) {
      if (f["ph"] == "s") ++starts;
      if (f["ph"] == "f") {
        ++finishes;
        CHECK(f["bp"].get<std::string>() == "e");
      }
      const double ts = f["ts"].get<double>();
      bool inside = false;
      for (const json& x : xs) {
        if (x["pid"] == f["pid"] && x["tid"] == f["tid"]) {
          const double a = x["ts"].get<double>(), b = a + x["dur"].get<double>();
          inside = inside || (a < ts && ts < b);
        }
      }
      CHECK(inside);
    }
    CHECK(starts == 1);
    CHECK(finishes == 1);
  }
}

TEST_CASE("chrome trace is written whole and reads back identically and python's json module accepts it",
          "[trace]") {
  TraceScenario s;
  analysis::ChromeTraceRecorder rec(s.cluster, &s.costs, s.graph.regions());
  s.replay(rec);
  const auto dir = temp_dir();
  const auto path = (dir / "trace.json").string();
  rec.write(path);
  std::ifstream in(path);
  const json back = json::parse(in);
  CHECK(back == rec.to_json());
  // Same run, same bytes.
  analysis::ChromeTraceRecorder again(s.cluster, &s.costs, s.graph.regions());
  s.replay(again);
  CHECK(again.to_json().dump() == rec.to_json().dump());
  // No temporary file left beside it.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files += entry.is_regular_file() ? 1 : 0;
  CHECK(files == 1);

  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) {
    WARN("python3 is not available: skipped the check with python's json module");
  } else {
    const auto script = (dir / "check.py").string();
    std::ofstream(script) << R"PY(
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
assert d["displayTimeUnit"] == "ns"
procs = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
threads = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
xs = [e for e in ev if e["ph"] == "X"]
assert procs == {0, 1}, procs
for x in xs:
    assert (x["pid"], x["tid"]) in threads, x
    assert x["dur"] >= 0 and x["ts"] >= 0
ids = {}
for e in ev:
    if e["ph"] in ("s", "f"):
        ids.setdefault(e["id"], []).append(e["ph"])
assert ids and all(sorted(v) == ["f", "s"] for v in ids.values()), ids
)PY";
    CHECK(std::system(("python3 " + script + " " + path).c_str()) == 0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a trace to an unwritable place is an InputError and leaves no file", "[trace]") {
  TraceScenario s;
  analysis::ChromeTraceRecorder rec(s.cluster, nullptr);
  s.replay(rec);
  CHECK_THROWS_AS(rec.write("/nonexistent-dir-fusesim/trace.json"), InputError);
  CHECK_FALSE(std::filesystem::exists("/nonexistent-dir-fusesim/trace.json"));
}

TEST_CASE("a trace filter keeps the tasks of the ranks and layers asked for, and the flows between them", "[trace]") {
  TraceScenario s;
  {
    analysis::TraceFilter only1;
    only1.ranks = std::set<int>{1};
    analysis::ChromeTraceRecorder rec(s.cluster, &s.costs, s.graph.regions(), only1);
    s.replay(rec);
    const json doc = rec.to_json();
    std::set<std::string> names;
    int flows = 0;
    for (const json& e : doc["traceEvents"]) {
      if (e["ph"] == "X") {
        CHECK(e["pid"].get<int>() == 1);
        names.insert(e["name"].get<std::string>());
      }
      flows += e["ph"] == "s" || e["ph"] == "f";
    }
    // Rank 1's four tasks; every transfer has one end on rank 0, so no arrow is left.
    CHECK(names == std::set<std::string>{"C1", "R0", "R1", "D"});
    CHECK(flows == 0);
    CHECK(doc["otherData"]["ranks"] == json::array({1}));
  }
  {
    // The fixture's compute tasks are layer 0, the others have no layer: layer 3 keeps those only.
    analysis::TraceFilter layer3;
    layer3.layers = std::set<int>{3};
    analysis::ChromeTraceRecorder rec(s.cluster, &s.costs, s.graph.regions(), layer3);
    s.replay(rec);
    const json doc = rec.to_json();
    std::set<std::string> names;
    for (const json& e : doc["traceEvents"])
      if (e["ph"] == "X") names.insert(e["name"].get<std::string>());
    CHECK(names == std::set<std::string>{"C0", "S0", "S1", "C1", "R0", "R1"});
  }
}

TEST_CASE("link counters give each link's load in percent of its line rate", "[trace]") {
  // dgx-h100: rank 0 -> 1 crosses node0/gpu0->node0/nvswitch and node0/nvswitch->node0/gpu1, both
  // NVLink4 at 450 GB/s. Two transfers: 90 kB over [0, 1) us (90 GB/s, 20%) and 180 kB over
  // [0.5, 1.5) us (180 GB/s, 40%): 20% from 0, 60% from 0.5, 40% from 1, 0 from 1.5.
  const topo::Cluster cluster = topo::load_cluster_by_name_or_path("dgx-h100");
  analysis::ChromeTraceRecorder rec(cluster);
  constexpr TimePs ns = kPsPerNanosecond;
  rec.on_transfer_end({0, 0, 0, 1, 90'000, -1, model::CommEngine::copy_engine, 0, 1000 * ns});
  rec.on_transfer_end({0, 0, 0, 1, 180'000, -1, model::CommEngine::copy_engine, 500 * ns, 1500 * ns});
  const json doc = rec.to_json();
  std::map<std::string, std::vector<std::pair<double, double>>> tracks;
  std::map<int, std::string> processes;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "C") {
      tracks[e["name"].get<std::string>()].push_back({e["ts"].get<double>(), e["args"]["% of line rate"].get<double>()});
      CHECK(e["pid"].get<int>() == 8);  // after the 8 ranks' pids: node 0's links
    }
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
  }
  const std::vector<std::pair<double, double>> expected{{0.0, 20.0}, {0.5, 60.0}, {1.0, 40.0}, {1.5, 0.0}};
  REQUIRE(tracks.size() == 2);
  CHECK(tracks["nvlink node0/gpu0->node0/nvswitch"] == expected);
  CHECK(tracks["nvlink node0/nvswitch->node0/gpu1"] == expected);
  CHECK(processes[8] == "node 0 links (load, % of line rate)");

  // Without counters, none.
  analysis::TraceFilter off;
  off.counters = false;
  analysis::ChromeTraceRecorder quiet(cluster, nullptr, {}, off);
  quiet.on_transfer_end({0, 0, 0, 1, 90'000, -1, model::CommEngine::copy_engine, 0, 1000 * ns});
  const json quiet_doc = quiet.to_json();
  for (const json& e : quiet_doc["traceEvents"]) CHECK(e["ph"] != "C");

  // A rank filter keeps the tracks of the links its ranks' transfers cross: rank 5 sent nothing.
  analysis::TraceFilter rank5;
  rank5.ranks = std::set<int>{5};
  analysis::ChromeTraceRecorder other(cluster, nullptr, {}, rank5);
  other.on_transfer_end({0, 0, 0, 1, 90'000, -1, model::CommEngine::copy_engine, 0, 1000 * ns});
  const json other_doc = other.to_json();
  for (const json& e : other_doc["traceEvents"]) CHECK(e["ph"] != "C");
}

TEST_CASE("a trace named .json.gz is written gzip-compressed, the same bytes on every run", "[trace]") {
  TraceScenario s;
  analysis::ChromeTraceRecorder rec(s.cluster, &s.costs, s.graph.regions());
  s.replay(rec);
  const auto dir = temp_dir();
  const std::string a = (dir / "t.json.gz").string(), b = (dir / "u.json.gz").string();
  rec.write(a);
  rec.write(b);
  const std::string bytes = slurp_file(a);
  REQUIRE(bytes.size() > 18);
  CHECK(static_cast<unsigned char>(bytes[0]) == 0x1f);  // gzip magic (RFC 1952)
  CHECK(static_cast<unsigned char>(bytes[1]) == 0x8b);
  CHECK(bytes == slurp_file(b));
  // zlib reads it back to the JSON text.
  gzFile in = gzopen(a.c_str(), "rb");
  REQUIRE(in != nullptr);
  std::string text;
  char buf[4096];
  int n = 0;
  while ((n = gzread(in, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  gzclose(in);
  CHECK(text == rec.to_json().dump());
  std::filesystem::remove_all(dir);
}
