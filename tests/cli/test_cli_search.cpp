// `fusesim search`: the bound-ordered search finds what simulating every candidate finds; pruning
// counted by reason; the Pareto front; the command end to end.
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fusesim/cli/search.hpp"
#include "fusesim/util/embedded.hpp"
#include "process.hpp"

using namespace fusesim;
using namespace fusesim::cli;
using namespace fusesim::testing;
using nlohmann::json;

namespace {

// An 8-layer Llama-3-8B-shaped model: small enough to simulate every candidate on one DGX H100.
std::string write_model(const ScratchDir& dir) {
  const json w = json::parse(R"({
    "schema_version": 1, "name": "search-test",
    "model": {"name": "m", "layers": 8, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
              "gated_mlp": true, "vocab": 128256, "source": "test"},
    "training": {"sequence_length": 2048, "micro_batch": 1, "grad_accumulation": 8, "dtype": "bf16"},
    "parallel": {"tp": 8, "up": 1, "dp": 1},
    "schedule": {"kind": "commfuse"}
  })");
  const std::string path = dir.file("model.json");
  std::ofstream(path) << w.dump();
  return path;
}

SearchSpec small_space(const std::string& workload) {
  SearchSpec spec;
  spec.topology = "dgx-h100";
  spec.workload = workload;
  spec.global_batch = 8;
  spec.micro_batches = {1, 2};
  spec.recomputes = {model::Recompute::none, model::Recompute::full};
  spec.shardings = {model::DpSharding::ddp, model::DpSharding::zero1};
  spec.zb_h1 = true;  // the counts below include ZB-H1's candidates
  return spec;
}

}  // namespace

TEST_CASE("search returns the configurations that simulating every candidate ranks first", "[cli][search]") {
  ScratchDir dir;
  const std::string model = write_model(dir);
  SearchSpec every = small_space(model);
  every.top = 1'000'000;  // nothing can be left out by the bound
  const SearchResult all = run_search(every, 2);
  CHECK(all.bounded == 0);
  SearchSpec spec = small_space(model);
  spec.top = 5;
  const SearchResult found = run_search(spec, 2);
  // The same candidates, split differently between simulated and bounded.
  CHECK(found.candidates == all.candidates);
  CHECK(found.pruned == all.pruned);
  CHECK(found.simulated + found.bounded == all.simulated);
  CHECK(found.bounded > 0);
  REQUIRE(all.rows.size() >= 5);
  REQUIRE(found.rows.size() >= 5);
  for (std::size_t i = 0; i < 5; ++i) {
    INFO("rank " << i + 1);
    CHECK(found.rows[i].candidate.describe() == all.rows[i].candidate.describe());
    CHECK(found.rows[i].step_ps == all.rows[i].step_ps);
  }
  // And each overlap schedule's best.
  std::map<model::ScheduleKind, std::string> best_all, best_found;
  for (const SearchRow& r : all.rows) best_all.emplace(r.candidate.kind, r.candidate.describe());
  for (const SearchRow& r : found.rows) best_found.emplace(r.candidate.kind, r.candidate.describe());
  CHECK(best_found == best_all);
  // Every simulated step is at least its bound (run_search refuses otherwise), and the bound is
  // not empty where the candidate computes at all.
  for (const SearchRow& r : all.rows) {
    CHECK(r.lower_bound_ps <= r.step_ps);
    CHECK(r.lower_bound_ps > 0);
  }
  // Counted by hand: tp in {1, 2, 4, 8} (divisors of 8 devices), pp in {1, 2, 4, 8} (divisors of the
  // 8 layers dividing 8 GPUs). tp x pp > 8 for (2, 8), (4, 4), (4, 8), (8, 2), (8, 4), (8, 8): 6
  // pairs, each with pp > 1 so 3 pipeline schedules (1F1B, interleaved v 2, ZB-H1) x 2 micro-batches x
  // 2 shardings x 2 recomputes x 3 schedules = 72 candidates: 432.
  CHECK(all.pruned.at("gpus: not a multiple of tp x up x pp") == 432);
  // At tp 1 slice-overlap runs baseline's task graph, and with dp 1 as well CommFuse does too
  // (tests/sched/step_test.cpp): those candidates take the simulated step of their baseline twin.
  // Counted by hand, the tp 1 candidates that can run (dp = 8 / pp, m = 8 / (dp x mb); interleaved
  // needs m a multiple of pp and 8 layers a multiple of pp x 2; ddp and zero1 where dp > 1), each x 2
  // recomputes: pp 1 mb 1 (x 2 shardings) 4; pp 2 1F1B mb 1, 2 (x 2) 8, interleaved mb 1 (x 2) 4 and
  // ZB-H1 as 1F1B 8; pp 4 the same, 8 + 4 + 8; pp 8 1F1B and ZB-H1 mb 1, 2 (dp 1) 4 + 4: 52, each with
  // a slice-overlap twin, and the 8 at pp 8 a CommFuse one too: 60.
  CHECK(all.same_graph == 60);
  std::size_t pruned = 0;
  for (const auto& [reason, n] : all.pruned) pruned += n;
  CHECK(all.candidates == pruned + all.simulated);
}

TEST_CASE("search's bound counts every kernel of a one-GPU step, the head and the optimizer included", "[cli][search][bound]") {
  // One GPU, no communication: the whole step runs on compute stream 0, one kernel at a time, so the
  // bound (docs/cli.md "fusesim search") and the step meet: the bound has every kernel of the layers,
  // of the embedding and the head of every micro-batch, and of the optimizer over the layers' and
  // the two tables' parameters, which is every kernel of the step, each priced alone as the
  // simulation prices it. Equal to the picosecond, with a vocabulary of 128 and with Llama-3's
  // 128,256 (whose embedding and head weigh as much as the 4 layers); the larger vocabulary's bound
  // is the larger.
  ScratchDir dir;
  auto space = [&](std::int64_t vocab) {
    json w = json::parse(R"({
      "schema_version": 1, "name": "bound-test",
      "model": {"name": "m", "layers": 4, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
                "gated_mlp": true, "vocab": 128, "source": "test"},
      "training": {"sequence_length": 2048, "micro_batch": 1, "grad_accumulation": 2, "dtype": "bf16"},
      "parallel": {"tp": 1, "up": 1, "dp": 1},
      "schedule": {"kind": "baseline"}
    })");
    w["model"]["vocab"] = vocab;
    const std::string path = dir.file(fmt::format("model-{}.json", vocab));
    std::ofstream(path) << w.dump();
    SearchSpec spec;
    spec.topology = "dgx-h100";
    spec.workload = path;
    spec.gpus = 1;
    spec.global_batch = 2;
    spec.micro_batches = {1, 2};
    spec.recomputes = {model::Recompute::none, model::Recompute::full};
    spec.top = 1'000'000;
    return run_search(spec, 2);
  };
  const SearchResult small = space(128), full = space(128256);
  REQUIRE(small.rows.size() == full.rows.size());
  REQUIRE(small.rows.size() >= 4);
  std::map<std::string, TimePs> small_bound;
  for (const SearchRow& r : small.rows) {
    INFO(r.candidate.describe());
    CHECK(r.lower_bound_ps == r.step_ps);
    small_bound[r.candidate.describe()] = r.lower_bound_ps;
  }
  for (const SearchRow& r : full.rows) {
    INFO(r.candidate.describe());
    CHECK(r.lower_bound_ps == r.step_ps);
    CHECK(r.lower_bound_ps > small_bound.at(r.candidate.describe()));
  }
}

TEST_CASE("search --symmetry mirror ranks what none ranks, every step to the picosecond", "[cli][search][symmetry]") {
  // One DGX H100: the candidates with dp > 1 (tp x pp < 8) run DP replica 0 of each stage mirrored.
  // Inside one node every DP ring hop and stage hop is alike, and every gradient of this model splits
  // evenly over dp (8 layers' rows and the padded vocabulary, 128256 -> a multiple of 128 x tp), so
  // none falls back: each mirrored step equals the step of the same candidate with every rank.
  ScratchDir dir;
  const std::string model = write_model(dir);
  SearchSpec none = small_space(model);
  none.top = 1'000'000;
  none.schedules = {model::ScheduleKind::baseline};
  none.symmetry = "none";
  SearchSpec mirror = none;
  mirror.symmetry = "mirror";
  const SearchResult a = run_search(none, 2), b = run_search(mirror, 2);
  CHECK(b.symmetry == "mirror");
  REQUIRE(a.rows.size() == b.rows.size());
  std::map<std::string, TimePs> steps;
  for (const SearchRow& r : a.rows) steps[r.candidate.describe()] = r.step_ps;
  std::size_t mirrored = 0;
  for (const SearchRow& r : b.rows) {
    INFO(r.candidate.describe());
    REQUIRE(steps.count(r.candidate.describe()) == 1);
    CHECK(r.step_ps == steps[r.candidate.describe()]);
    if (r.candidate.workload.parallel.dp > 1) ++mirrored;
  }
  CHECK(mirrored > 0);
}

TEST_CASE("search extrapolates long steps from their steady state, every figure equal to the full step", "[cli][search][steady]") {
  // Global batch 64 on one DGX H100 at micro-batch 1: m = 64 / dp micro-batches, 16 to 64. Each step is
  // long enough to be extrapolated (docs/cli.md "Steady state": steps of k, k + s, k + 2s micro-batches
  // from k = 2 pp, 1 without stages; s = pp for interleaved 1F1B, else 1; extrapolated when
  // 3k + 3s < m): tp 2 pp 1 (m 16: 3 + 3 < 16), pp 2 (m 32: 12 + 3, 1F1B, and 12 + 6, interleaved),
  // pp 4 (m 64: 24 + 3 and 24 + 12); tp 4 pp 1 (m 32) and pp 2 (m 64). Every figure the
  // search reports must be the one of simulating every micro-batch, to the picosecond.
  ScratchDir dir;
  const std::string model = write_model(dir);
  SearchSpec full;
  full.topology = "dgx-h100";
  full.workload = model;
  full.global_batch = 64;
  full.tps = {2, 4};
  full.pps = {1, 2, 4};
  full.micro_batches = {1};
  full.recomputes = {model::Recompute::none};
  full.shardings = {model::DpSharding::zero1};
  full.top = 1'000'000;
  full.steady_state = false;
  full.zb_h1 = true;
  SearchSpec steady = full;
  steady.steady_state = true;
  const SearchResult a = run_search(full, 2), b = run_search(steady, 2);
  CHECK(a.extrapolated == 0);
  // tp 2: pp 1, pp 2 (1F1B, v 2, ZB-H1), pp 4 (1F1B, v 2, ZB-H1); tp 4: pp 1, pp 2 (1F1B, v 2, ZB-H1);
  // 3 overlap schedules. ZB-H1's steady state is 1F1B's: one micro-batch per increment.
  CHECK(b.simulated == 11 * 3);
  CHECK(b.extrapolated == b.simulated);
  REQUIRE(a.rows.size() == b.rows.size());
  for (std::size_t i = 0; i < a.rows.size(); ++i) {
    const SearchRow &x = a.rows[i], &y = b.rows[i];
    INFO(x.candidate.describe());
    CHECK(y.extrapolated);
    CHECK(x.candidate.index == y.candidate.index);
    CHECK(x.step_ps == y.step_ps);
    CHECK(x.exposed_comm_ps == y.exposed_comm_ps);
    CHECK(x.bubble_fraction == Approx(y.bubble_fraction).epsilon(1e-6));  // stages' idle: kIdleShare
    CHECK(x.tokens_per_s_per_gpu == y.tokens_per_s_per_gpu);
    CHECK(x.mfu == Approx(y.mfu).epsilon(1e-12));  // FLOPs are a sum of doubles
  }
}

TEST_CASE("search extrapolates steps that repeat every second micro-batch", "[cli][search][steady]") {
  // Eight Llama-3-70B layers, sequence 8192, at TP 4 x PP 4 x DP 4 on 64 GPUs of dgx-h100-128node,
  // 1F1B, CommFuse, selective recomputation, ZeRO-2: the step's increment per micro-batch alternates,
  // 65,306,868,429, 65,346,588,722, 65,306,903,595, 65,346,548,764, ... ps from 8 micro-batches on,
  // so no three steps one micro-batch apart grow alike, and before each such candidate was simulated
  // micro-batch by micro-batch (Llama-3-70B's 80 layers at 128 micro-batches: 38 s of a 40 s search).
  // The steps of 8, 10, 12 micro-batches (m's parity) grow alike: the step of m = 64 is extrapolated
  // from them by two at a time (8 to 12 micro-batches simulated, 50 in all, fewer than m). Each figure
  // within the share the steady state allows (1e-6 of the increment per micro-batch, kSteadyShare: at
  // most m x 1e-6 of the increment off).
  ScratchDir dir;
  json w = json::parse(std::string(*embedded_file("workloads/llama-3-70b.json")));
  w["model"]["layers"] = 8;
  const std::string model = dir.file("llama-8-layers.json");
  std::ofstream(model) << w.dump();
  SearchSpec full;
  full.topology = "dgx-h100-128node";
  full.workload = model;
  full.gpus = 64;
  full.global_batch = 256;  // dp 4 x micro-batch 1 x 64 micro-batches
  full.tps = {4};
  full.pps = {4};
  full.micro_batches = {1};
  full.virtual_stages = {1};
  full.recomputes = {model::Recompute::selective};
  full.shardings = {model::DpSharding::zero2};
  full.schedules = {model::ScheduleKind::commfuse};
  full.steady_state = false;
  SearchSpec steady = full;
  steady.steady_state = true;
  const SearchResult a = run_search(full, 2), b = run_search(steady, 2);
  REQUIRE(a.rows.size() == 1);
  REQUIRE(b.rows.size() == 1);
  const SearchRow &x = a.rows[0], &y = b.rows[0];
  REQUIRE(x.candidate.workload.parallel.dp == 4);
  REQUIRE(x.candidate.workload.grad_accumulation == 64);
  CHECK_FALSE(x.extrapolated);
  CHECK(y.extrapolated);
  const double slack_ps = 64 * 1e-6 * 65.35e9;  // m x kSteadyShare x the increment
  CHECK(std::abs(static_cast<double>(x.step_ps - y.step_ps)) <= slack_ps);
  CHECK(std::abs(static_cast<double>(x.exposed_comm_ps - y.exposed_comm_ps)) <= slack_ps);
  CHECK(x.bubble_fraction == Approx(y.bubble_fraction).epsilon(1e-5));
  CHECK(x.tokens_per_s_per_gpu == Approx(y.tokens_per_s_per_gpu).epsilon(1e-6));
  CHECK(x.mfu == Approx(y.mfu).epsilon(1e-6));
}

TEST_CASE("the Pareto front of step time against memory", "[cli][search]") {
  // (memory GB, step ms): (10, 5), (20, 3), (15, 6), (30, 3), (5, 9). By memory: 5 -> 9 on the front;
  // 10 -> 5 shorter, on; 15 -> 6 not shorter; 20 -> 3 on; 30 -> 3 not shorter.
  std::vector<SearchRow> rows;
  const std::vector<std::pair<double, double>> points{{10, 5}, {20, 3}, {15, 6}, {30, 3}, {5, 9}};
  for (std::size_t i = 0; i < points.size(); ++i) {
    SearchRow r;
    r.candidate.index = i;
    r.memory_bytes = static_cast<Bytes>(points[i].first * 1e9);
    r.step_ps = static_cast<TimePs>(points[i].second * 1e9);
    rows.push_back(r);
  }
  CHECK(pareto_front(rows) == std::vector<std::size_t>{4, 0, 1});
}

TEST_CASE("fusesim search prints the best configurations and writes CSV and the plot data", "[cli][search]") {
  ScratchDir dir;
  write_model(dir);
  const auto r = run_fusesim({"search", "--workload", "model.json", "--topology", "dgx-h100", "--global-batch", "8",
                              "--tp", "4,8", "--micro-batch", "1", "--recompute", "none", "--zero", "ddp", "--top", "3",
                              "--jobs", "2", "--output", "best.csv", "--plot", "fig"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("best per overlap schedule:") != std::string::npos);
  CHECK(r.out.find(" candidates: ") != std::string::npos);
  // A global batch of 8 on the 8 GPUs is no smaller than the GPUs: nothing to note.
  CHECK(r.out.find("is smaller than the") == std::string::npos);
  // Of 4 it is, and the table says what it does to the ranking.
  const auto small = run_fusesim({"search", "--workload", "model.json", "--topology", "dgx-h100", "--global-batch",
                                  "4", "--tp", "4,8", "--micro-batch", "1", "--recompute", "none", "--zero", "ddp",
                                  "--top", "3", "--quiet"},
                                 dir);
  REQUIRE(small.exit_code == 0);
  CHECK(small.out.find("note: the global batch of 4 sequences is smaller than the 8 GPUs, so DP is at most 4") !=
        std::string::npos);
  const std::string csv = slurp(dir.path() / "best.csv");
  CHECK(csv.rfind("rank,tp,up,pp,dp,pp_schedule,virtual_stages,micro_batch,grad_accumulation,recompute,", 0) == 0);
  CHECK(std::filesystem::exists(dir.path() / "fig" / "search.dat"));
  CHECK(std::filesystem::exists(dir.path() / "fig" / "search.gp"));
  // The same search at another thread count writes the same bytes.
  const auto again = run_fusesim({"search", "--workload", "model.json", "--topology", "dgx-h100", "--global-batch",
                                  "8", "--tp", "4,8", "--micro-batch", "1", "--recompute", "none", "--zero", "ddp",
                                  "--top", "3", "--jobs", "1", "--format", "json"},
                                 dir);
  const auto json3 = run_fusesim({"search", "--workload", "model.json", "--topology", "dgx-h100", "--global-batch",
                                  "8", "--tp", "4,8", "--micro-batch", "1", "--recompute", "none", "--zero", "ddp",
                                  "--top", "3", "--jobs", "3", "--format", "json"},
                                 dir);
  REQUIRE(again.exit_code == 0);
  CHECK(again.out == json3.out);
}

TEST_CASE("fusesim search refuses bad options with exit 2, naming them", "[cli][search][errors]") {
  ScratchDir dir;
  write_model(dir);
  auto r = run_fusesim({"search", "--workload", "model.json", "--topology", "dgx-h100", "--recompute", "some"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--recompute") != std::string::npos);
  r = run_fusesim({"search", "--workload", "model.json", "--topology", "dgx-h100", "--gpus", "9"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--gpus") != std::string::npos);
  r = run_fusesim({"search", "--workload", "missing.json", "--topology", "dgx-h100"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(dir.entries() == std::vector<std::string>{"model.json"});
}

TEST_CASE("search --shard: the parts joined rank what the whole search ranks", "[cli][search]") {
  // Three shards of the small space, each searching its own candidates (index % 3) with its own bound,
  // joined: the same candidates and pruning reasons, the same best 5 and best per overlap schedule (a
  // shard leaves out only what cannot enter its own lists, so nothing of the joined lists); the shards
  // together may simulate more than the whole search did.
  ScratchDir dir;
  const std::string model = write_model(dir);
  SearchSpec spec = small_space(model);
  spec.top = 5;
  const SearchResult whole = run_search(spec, 2);
  std::vector<SearchResult> parts;
  std::vector<std::string> names;
  for (int i = 0; i < 3; ++i) {
    SearchSpec s = spec;
    s.shard = Shard{i, 3};
    parts.push_back(run_search(s, 2));
    names.push_back("part" + std::to_string(i));
    for (const SearchRow& row : parts.back().rows) CHECK(row.candidate.index % 3 == static_cast<std::size_t>(i));
  }
  const SearchResult joined = merge_searches(names, {parts[2], parts[0], parts[1]});
  CHECK(joined.candidates == whole.candidates);
  CHECK(joined.pruned == whole.pruned);
  CHECK(joined.simulated + joined.bounded == whole.simulated + whole.bounded);
  CHECK(joined.simulated >= whole.simulated);
  REQUIRE(joined.rows.size() >= 5);
  for (std::size_t i = 0; i < 5; ++i) {
    CHECK(joined.rows[i].candidate.index == whole.rows[i].candidate.index);
    CHECK(joined.rows[i].step_ps == whole.rows[i].step_ps);
  }
  auto best_of = [](const SearchResult& r) {
    std::map<model::ScheduleKind, std::size_t> best;
    for (const SearchRow& row : r.rows) best.emplace(row.candidate.kind, row.candidate.index);
    return best;
  };
  CHECK(best_of(joined) == best_of(whole));
  // What a part's JSON reads back as is what was written: the table and the JSON of the joined search
  // from files equal those from memory.
  for (int i = 0; i < 3; ++i) {
    std::ofstream(dir.file(names[static_cast<std::size_t>(i)] + ".json")) << search_json(parts[static_cast<std::size_t>(i)]).dump(2);
  }
  std::vector<SearchResult> read;
  for (const std::string& n : names) read.push_back(read_search_json(dir.file(n + ".json")));
  const SearchResult from_files = merge_searches(names, read);
  CHECK(search_json(from_files) == search_json(joined));
  CHECK(search_table(from_files).substr(search_table(from_files).find('\n')) ==
        search_table(joined).substr(search_table(joined).find('\n')));
}

TEST_CASE("search tries each slice count of slice-overlap as a candidate of its own", "[cli][search]") {
  // Slice-overlap with k = 2 and k = 4 together: the candidates of the two single-k searches, each
  // with its own step, and the best of them; the other schedules once. k shows in the row's name, its
  // JSON ("slices", null for the other schedules) and its CSV ("-"), and reads back from a part file.
  ScratchDir dir;
  const std::string model = write_model(dir);
  SearchSpec spec = small_space(model);
  spec.tps = {4, 8};
  spec.top = 1'000'000;
  spec.schedules = {model::ScheduleKind::slice, model::ScheduleKind::commfuse};
  const auto search = [&](std::vector<int> ks) {
    SearchSpec s = spec;
    s.slices = std::move(ks);
    return run_search(s, 2);
  };
  const SearchResult both = search({2, 4}), k2 = search({2}), k4 = search({4});
  std::map<std::string, TimePs> step_both, step_single;
  for (const SearchRow& r : both.rows) step_both[r.candidate.describe()] = r.step_ps;
  std::size_t slice_rows = 0, commfuse_rows = 0;
  for (const SearchResult* single : {&k2, &k4})
    for (const SearchRow& r : single->rows) {
      step_single[r.candidate.describe()] = r.step_ps;
      if (r.candidate.kind == model::ScheduleKind::slice) ++slice_rows;
    }
  for (const SearchRow& r : k2.rows) commfuse_rows += r.candidate.kind == model::ScheduleKind::commfuse;
  // Every slice row of either single search is in the joint one with the same step; the commfuse rows
  // are the same in all three.
  for (const auto& [name, step] : step_single) {
    INFO(name);
    REQUIRE(step_both.count(name) == 1);
    CHECK(step_both.at(name) == step);
  }
  CHECK(both.rows.size() == slice_rows + commfuse_rows);
  // Candidates, pruned ones included: the commfuse ones once.
  SearchSpec commfuse_only = spec;
  commfuse_only.schedules = {model::ScheduleKind::commfuse};
  const SearchResult cf = run_search(commfuse_only, 2);
  CHECK(cf.rows.size() == commfuse_rows);
  CHECK(both.candidates == k2.candidates + k4.candidates - cf.candidates);
  bool saw_k2 = false, saw_k4 = false;
  for (const SearchRow& r : both.rows)
    if (r.candidate.kind == model::ScheduleKind::slice) {
      const std::string name = r.candidate.describe();
      saw_k2 = saw_k2 || name.find("slice k2") != std::string::npos;
      saw_k4 = saw_k4 || name.find("slice k4") != std::string::npos;
    }
  CHECK(saw_k2);
  CHECK(saw_k4);
  // The best slice-overlap row of the joint search is the better of the two single searches' best.
  const auto best_slice = [](const SearchResult& r) {
    for (const SearchRow& row : r.rows)
      if (row.candidate.kind == model::ScheduleKind::slice) return row.step_ps;
    return TimePs{-1};
  };
  CHECK(best_slice(both) == std::min(best_slice(k2), best_slice(k4)));
  // Written and read back.
  const json doc = search_json(both);
  for (const json& row : doc.at("results"))
    CHECK((row.at("schedule") == "slice" ? row.at("slices").is_number_integer() : row.at("slices").is_null()));
  const std::string csv = search_csv(both);
  CHECK(csv.find(",schedule,slices,") != std::string::npos);
  CHECK(csv.find(",commfuse,-,") != std::string::npos);
  CHECK(csv.find(",slice,2,") != std::string::npos);
  std::ofstream(dir.file("both.json")) << doc.dump(2);
  CHECK(search_json(read_search_json(dir.file("both.json"))) == doc);
}

TEST_CASE("fusesim search --shard and merge from the command line - parts that do not fit are refused", "[cli][search][errors]") {
  ScratchDir dir;
  write_model(dir);
  const std::vector<std::string> base{"search", "--workload", "model.json", "--topology", "dgx-h100", "--global-batch",
                                      "8", "--tp", "4,8", "--micro-batch", "1", "--recompute", "none", "--zero", "ddp",
                                      "--top", "3", "--jobs", "1", "--quiet"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_fusesim(args, dir);
  };
  // A shard is written as JSON with --output.
  auto r = with({"--shard", "0/2"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--shard") != std::string::npos);
  REQUIRE(with({"--shard", "0/2", "--output", "a.json"}).exit_code == 0);
  REQUIRE(with({"--shard", "1/2", "--output", "b.json"}).exit_code == 0);
  const auto whole = with({"--format", "json"});
  REQUIRE(whole.exit_code == 0);
  r = run_fusesim({"merge", "b.json", "a.json", "-o", "all.json"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("best per overlap schedule:") != std::string::npos);
  const json all = json::parse(slurp(dir.path() / "all.json")), one = json::parse(whole.out);
  CHECK(all["candidates"] == one["candidates"]);
  CHECK(all["pruned"] == one["pruned"]);
  CHECK(all["results"][0] == one["results"][0]);
  CHECK(all["shard"] == json({{"index", 0}, {"count", 1}}));
  // The same part twice, a part missing, another search, a row outside its shard: exit 2 at the path.
  r = run_fusesim({"merge", "a.json", "a.json", "-o", "x.json"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("$.shard.index") != std::string::npos);
  r = run_fusesim({"merge", "a.json", "-o", "x.json"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("incomplete search: shard 1 of 2 missing") != std::string::npos);
  REQUIRE(with({"--shard", "1/2", "--seq", "1024", "--output", "c.json"}).exit_code == 0);
  r = run_fusesim({"merge", "a.json", "c.json", "-o", "x.json"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("c.json: $.spec") != std::string::npos);
  json moved = json::parse(slurp(dir.path() / "b.json"));
  REQUIRE(!moved["results"].empty());
  moved["results"][0]["index"] = moved["results"][0]["index"].get<int>() + 1;
  std::ofstream(dir.file("d.json")) << moved.dump();
  r = run_fusesim({"merge", "a.json", "d.json", "-o", "x.json"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("$.results[0].index") != std::string::npos);
  CHECK(!std::filesystem::exists(dir.path() / "x.json"));
}

TEST_CASE("search --write-workloads writes each best row's workload, and simulate runs it to the same step",
          "[cli][search]") {
  // Llama-3-8B on 16 H100s, pipeline stages of 1F1B and interleaved (two chunks), full and selective
  // recomputation, ZeRO-1: the rows differ in degrees, pipeline schedule, virtual stages, recompute and
  // overlap schedule, and the 1F1B rows' steps are extrapolated from their steady state. Each written
  // workload, simulated as the search prints it (`--scope step --schedule <kind>`), must give the
  // row's step to the picosecond, in every row simulate reports (the other parallelisms run the file's
  // schedule.kind, which is the row's).
  ScratchDir dir;
  const auto r = run_fusesim({"search", "--workload", "llama-3-8b", "--topology", "dgx-h100-4node", "--gpus", "16",
                              "--global-batch", "32", "--seq", "2048", "--tp", "4,8", "--pp", "2", "--virtual-stages",
                              "1,2", "--micro-batch", "1", "--recompute", "full,selective", "--zero", "zero1", "--top",
                              "4", "--quiet", "--format", "json", "--write-workloads", "best"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("search: wrote the workloads of the 4 best rows to best/1.json .. 4.json") != std::string::npos);
  CHECK(r.err.find("fusesim simulate --topology dgx-h100-4node --workload best/1.json --scope step --schedule ") !=
        std::string::npos);
  const json doc = json::parse(r.out);
  REQUIRE(doc["results"].size() >= 4);
  std::set<std::string> pipelines;
  bool extrapolated = false;
  for (std::size_t i = 0; i < 4; ++i) {
    const json& row = doc["results"][i];
    pipelines.insert(row["pp_schedule"].get<std::string>());
    extrapolated = extrapolated || row["extrapolated"].get<bool>();
    const std::string file = fmt::format("best/{}.json", i + 1);
    const json w = json::parse(slurp(dir.path() / file));
    CHECK(w["parallel"]["tp"] == row["tp"]);
    CHECK(w["parallel"]["pp_schedule"] == row["pp_schedule"]);
    CHECK(w["training"]["recompute"] == row["recompute"]);
    const auto sim = run_fusesim({"simulate", "--topology", "dgx-h100-4node", "--workload", file, "--scope", "step",
                                  "--schedule", row["schedule"].get<std::string>(), "--format", "json"},
                                 dir);
    INFO(file << ": " << sim.err);
    REQUIRE(sim.exit_code == 0);
    const json report = json::parse(sim.out);
    REQUIRE(!report["results"].empty());
    for (const json& run : report["results"]) CHECK(run["step_time_s"] == row["step_time_s"]);
  }
  CHECK(pipelines == std::set<std::string>{"1f1b", "interleaved"});
  CHECK(extrapolated);
  // A shard does not know the best rows; a file where the folder should be is refused before the search.
  const auto shard = run_fusesim({"search", "--workload", "llama-3-8b", "--topology", "dgx-h100", "--shard", "0/2",
                                  "--output", "part.json", "--write-workloads", "best2"},
                                 dir);
  CHECK(shard.exit_code == 2);
  CHECK(shard.err.find("--write-workloads: a shard does not know the best rows") != std::string::npos);
  std::ofstream(dir.path() / "afile") << "x";
  const auto file = run_fusesim({"search", "--workload", "llama-3-8b", "--topology", "dgx-h100", "--write-workloads",
                                 "afile"},
                                dir);
  CHECK(file.exit_code == 2);
  CHECK(file.err == "error: afile: --write-workloads: is a file, not a folder\n");
}

TEST_CASE("search --write-workloads keeps a file's fsdp only where the row shards with ZeRO-3", "[cli][search]") {
  // The MPT-1B workload runs FSDP1 (`parallel.fsdp`), here told not to reshard after forward
  // (`parallel.reshard_after_forward`); a file may name either with dp_sharding zero3 only: a row the
  // search moved to ZeRO-1 is written without them, a ZeRO-3 row keeps them, and every written file
  // loads again.
  ScratchDir dir;
  json source = json::parse(slurp(source_path("validation/workloads/mpt-1b-seq2048-8xh100-bf16.json")));
  source["parallel"]["reshard_after_forward"] = "never";
  const std::string workload = dir.file("mpt-1b.json");
  std::ofstream(workload) << source.dump(2);
  const auto r = run_fusesim({"search", "--workload", workload,
                              "--topology", "dgx-h100", "--gpus", "8", "--global-batch", "8", "--tp", "1",
                              "--micro-batch", "1", "--recompute", "none", "--zero", "zero1,zero3", "--top", "8",
                              "--quiet", "--format", "json", "--write-workloads", "best"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  std::set<std::string> shardings;
  for (std::size_t i = 0; i < doc["results"].size() && i < 8; ++i) {
    const std::string file = fmt::format("best/{}.json", i + 1);
    const json w = json::parse(slurp(dir.path() / file));
    const std::string z = w["parallel"]["dp_sharding"].get<std::string>();
    shardings.insert(z);
    INFO(file);
    if (z == "zero3") {
      CHECK(w["parallel"]["fsdp"] == "fsdp1");
      CHECK(w["parallel"]["reshard_after_forward"] == "never");
    } else {
      CHECK(!w["parallel"].contains("fsdp"));
      CHECK(!w["parallel"].contains("reshard_after_forward"));
    }
    const auto sim = run_fusesim({"simulate", "--topology", "dgx-h100", "--workload", file, "--scope", "step",
                                  "--schedule", "baseline", "--format", "json"},
                                 dir);
    INFO(sim.err);
    CHECK(sim.exit_code == 0);
  }
  CHECK(shardings == std::set<std::string>{"zero1", "zero3"});
}

TEST_CASE("merge --write-workloads writes the best rows of a sharded search as the whole search does",
          "[cli][search]") {
  // The search of the test above in two shards, merged with --write-workloads: the files are those the
  // whole search writes, byte for byte (the workload file read again, each row's configuration put on
  // it as the search built its candidates), and the command printed is the same. A sweep's parts have
  // no best rows: --write-workloads there is bad input, exit 2, nothing written.
  ScratchDir dir;
  const std::vector<std::string> base{"search", "--workload", "llama-3-8b", "--topology", "dgx-h100-4node", "--gpus",
                                      "16", "--global-batch", "32", "--seq", "2048", "--tp", "4,8", "--pp", "2",
                                      "--virtual-stages", "1,2", "--micro-batch", "1", "--recompute", "full,selective",
                                      "--zero", "zero1", "--top", "4", "--quiet"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_fusesim(args, dir);
  };
  const auto whole = with({"--write-workloads", "whole"});
  REQUIRE(whole.exit_code == 0);
  REQUIRE(with({"--shard", "0/2", "--output", "a.json"}).exit_code == 0);
  REQUIRE(with({"--shard", "1/2", "--output", "b.json"}).exit_code == 0);
  const auto merged = run_fusesim({"merge", "b.json", "a.json", "-o", "all.json", "--write-workloads", "merged"}, dir);
  INFO(merged.err);
  REQUIRE(merged.exit_code == 0);
  for (int i = 1; i <= 4; ++i) {
    INFO(i);
    const std::string a = slurp(dir.path() / "whole" / fmt::format("{}.json", i));
    CHECK(!a.empty());
    CHECK(slurp(dir.path() / "merged" / fmt::format("{}.json", i)) == a);
  }
  const auto command = [](const std::string& err) {
    const std::size_t at = err.find("fusesim simulate");
    return at == std::string::npos ? std::string() : err.substr(at, err.find('\n', at) - at);
  };
  CHECK(!command(whole.err).empty());
  CHECK(command(merged.err) == command(whole.err).replace(command(whole.err).find("whole/"), 6, "merged/"));
  // A sweep's parts.
  REQUIRE(run_fusesim({"sweep", "--workload", "llama-3-8b", "--topology", "dgx-h100", "--seq", "1024", "--scope",
                       "layer", "--schedule", "baseline", "--shard", "0/1", "--output", "s.json"},
                      dir)
              .exit_code == 0);
  const auto sweep = run_fusesim({"merge", "s.json", "-o", "s-all.json", "--write-workloads", "w"}, dir);
  CHECK(sweep.exit_code == 2);
  CHECK(sweep.err.find("--write-workloads: only the parts of a search have best rows to write") != std::string::npos);
  CHECK(!std::filesystem::exists(dir.path() / "s-all.json"));
}
