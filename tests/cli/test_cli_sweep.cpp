// `fusesim sweep` and `fusesim merge`: axis syntax, grid order, invalid combinations, thread-count
// independence, shards, and agreement with simulate().
#include <algorithm>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "fusesim/cli/overrides.hpp"
#include "fusesim/cli/simulate.hpp"
#include "fusesim/cli/sweep.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/output.hpp"
#include "process.hpp"

using namespace fusesim;
using namespace fusesim::cli;
using namespace fusesim::testing;
using V = std::vector<std::int64_t>;

namespace {

std::string error_path(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.file() + " " + e.json_path();
  }
  return "no error";
}

std::size_t count_lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("sweep axes: lists, arithmetic and geometric ranges", "[cli][sweep]") {
  // 2^10 .. 2^17 doubling: 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072.
  CHECK(parse_int_axis("--seq", "1024:131072:x2", 1, 1 << 30) == V{1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072});
  // k = 1024: 1k = 1024, 128k = 131072, so the same range written short.
  CHECK(parse_int_axis("--seq", "1k:128k:x2", 1, 1 << 30) == parse_int_axis("--seq", "1024:131072:x2", 1, 1 << 30));
  // m = 1024 x 1024: 256k:1m doubling is 262144, 524288, 1048576 (long-context sequence lengths).
  CHECK(parse_int_axis("--seq", "256k:1M:x2", 1, 1 << 30) == V{262144, 524288, 1048576});
  CHECK(parse_int_axis("--seq", "2m", 1, 1 << 30) == V{2097152});
  CHECK(parse_int_axis("--tp", "2:16:+2", 1, 64) == V{2, 4, 6, 8, 10, 12, 14, 16});
  // +3 from 2: 2, 5, 8, 11, 14; 17 would pass 16, so the range stops at 14.
  CHECK(parse_int_axis("--tp", "2:16:+3", 1, 64) == V{2, 5, 8, 11, 14});
  // x3 from 1: 1, 3, 9; 27 > 10.
  CHECK(parse_int_axis("--tp", "1:10:x3", 1, 64) == V{1, 3, 9});
  CHECK(parse_int_axis("--tp", "4:6", 1, 64) == V{4, 5, 6});
  CHECK(parse_int_axis("--seq", "8k,4k,2048", 1, 1 << 30) == V{8192, 4096, 2048});  // order as given
  CHECK(parse_int_axis("--tp", "1,4:6,16", 1, 64) == V{1, 4, 5, 6, 16});
  CHECK(parse_int_axis("--tp", "8:8:x2", 1, 64) == V{8});

  for (const char* bad : {"", "a", "1,,2", "2:1", "1:8:x1", "1:8:+0", "1:8:*2", "1:8:2", "1:2:3:4", "0", "65",
                          "2,2", "2:8:x2,4", "1.5", " 3", "-2"})
    CHECK(error_path([&] { parse_int_axis("--tp", bad, 1, 64); }) == "<command line> --tp");
  CHECK(parse_name_axis("--topology", "dgx-h100,dgx-h100-4node") ==
        std::vector<std::string>{"dgx-h100", "dgx-h100-4node"});
  CHECK(error_path([] { parse_name_axis("--workload", "a,,b"); }) == "<command line> --workload");
  CHECK(error_path([] { parse_name_axis("--workload", "a,a"); }) == "<command line> --workload");
}

TEST_CASE("sweep grid: size and configuration order, slices fastest and topology slowest", "[cli][sweep]") {
  SweepSpec spec;
  spec.topologies = {"A", "B"};
  spec.workloads = {"W"};
  spec.sequence_lengths = {1024, 2048};
  spec.tps = {2, 4, 8};
  // 2 topologies x 1 workload x 2 sequences x 3 TP = 12; empty axes count once.
  REQUIRE(spec.size() == 12);
  // index = ((topology * 2) + seq) * 3 + tp
  auto at = [&](std::size_t i) {
    const SimulateRequest r = spec.configuration(i);
    return std::make_tuple(r.topology, *r.sequence_length, *r.tp);
  };
  CHECK(at(0) == std::make_tuple(std::string("A"), std::int64_t{1024}, 2));
  CHECK(at(1) == std::make_tuple(std::string("A"), std::int64_t{1024}, 4));
  CHECK(at(3) == std::make_tuple(std::string("A"), std::int64_t{2048}, 2));
  CHECK(at(5) == std::make_tuple(std::string("A"), std::int64_t{2048}, 8));
  CHECK(at(6) == std::make_tuple(std::string("B"), std::int64_t{1024}, 2));
  CHECK(at(11) == std::make_tuple(std::string("B"), std::int64_t{2048}, 8));
  const SimulateRequest r = spec.configuration(0);
  CHECK_FALSE(r.up.has_value());   // axes left empty keep the workload's values
  CHECK_FALSE(r.slices.has_value());
  CHECK(r.parallelisms.empty());

  CHECK(parse_shard("2/4").index == 2);
  CHECK(parse_shard("2/4").count == 4);
  for (const char* bad : {"4/4", "1/0", "-1/2", "a/2", "1", "1/2/3"})
    CHECK(error_path([&] { parse_shard(bad); }) == "<command line> --shard");
  const Shard s{1, 3};
  CHECK((!s.covers(0) && s.covers(1) && !s.covers(2) && s.covers(4)));
}

TEST_CASE("command-line overrides reach the workload and are blamed by option", "[cli][sweep]") {
  SimulateRequest r;
  r.workload = "llama-3-8b";
  r.scopes = {sched::Scope::layer};
  r.schedules = {model::ScheduleKind::baseline};
  r.tp = 3;  // 32 heads are not divisible by 3
  CHECK(error_path([&] { prepare_job(r); }) == "<command line> --tp");
  r.tp = 16;  // divides the heads, but not the 8 GPUs of a DGX H100 node
  CHECK(error_path([&] { prepare_job(r); }) == "<command line> --tp");
  r.tp = 8;
  r.sequence_length = 1004;  // not divisible by tp 8 (1004 = 8 x 125 + 4)
  CHECK(error_path([&] { prepare_job(r); }) == "<command line> --seq");
  r.sequence_length = 4096;
  r.micro_batch = 2;
  r.grad_accumulation = 0;
  CHECK(error_path([&] { prepare_job(r); }) == "<command line> --grad-accumulation");
  // 32 layers x 2^20 micro-batches: a step graph of about 1e10 tasks, refused by the generator,
  // which blames the option that set it.
  r.grad_accumulation = 1 << 20;
  r.scopes = {sched::Scope::step};
  CHECK(error_path([&] { simulate(r); }) == "<command line> --grad-accumulation");
  r.scopes = {sched::Scope::layer};
  r.grad_accumulation = 4;
  const PreparedJob job = prepare_job(r);
  CHECK(job.workload.sequence_length == 4096);
  CHECK(job.workload.micro_batch == 2);
  CHECK(job.workload.grad_accumulation == 4);
  CHECK(job.workload.parallel.tp == 8);
}

TEST_CASE("sweep rows equal simulate() of the same configuration", "[cli][sweep]") {
  SweepSpec spec;
  spec.topologies = {"dgx-h100"};
  spec.workloads = {"llama-3-8b"};
  spec.sequence_lengths = {2048, 4096};
  spec.tps = {4};
  SweepOptions opt;
  opt.jobs = 2;
  const SweepResult res = run_sweep(spec, opt);
  REQUIRE(res.rows.size() == 6);  // 2 configurations x 3 schedules
  for (std::size_t c = 0; c < 2; ++c) {
    SimulateRequest r = spec.configuration(c);
    const SimulateReport rep = simulate(r);
    REQUIRE(rep.runs.size() == 3);
    for (std::size_t k = 0; k < 3; ++k) {
      const SweepRow& row = res.rows[c * 3 + k];
      const auto& m = rep.runs[k].metrics;
      CHECK(row.config == c);
      CHECK(row_string(row, "schedule") == m.schedule);
      CHECK(row_integer(row, "sequence_length") == (c == 0 ? 2048 : 4096));
      CHECK(row_integer(row, "tp") == 4);
      CHECK(row_number(row, "step_time_s") == ps_to_seconds(m.step_time_ps));
      CHECK(row_number(row, "exposed_comm_s") == ps_to_seconds(m.critical().exposed_comm_ps));
      CHECK(row_number(row, "mfu") == m.mfu);
      CHECK(row_number(row, "tokens_per_s") == m.tokens_per_s);
    }
  }
}

TEST_CASE("workload overrides - one table for simulate, sweep's columns and check's keys", "[cli][sweep][check]") {
  const std::vector<WorkloadOverride>& table = workload_overrides();
  // The sweep's configuration columns 6..13 are the overrides' keys, in the table's order (make_row
  // and problem_rows write them by the table).
  const std::vector<std::string>& cols = row_columns();
  REQUIRE(cols.size() >= 6 + table.size());
  for (std::size_t i = 0; i < table.size(); ++i) CHECK(cols[6 + i] == table[i].key);
  CHECK(table.size() == 8);
  for (const WorkloadOverride& o : table) {
    INFO(o.option);
    // A value past the table's bound is refused by simulate() with the option named, before any file
    // is read: the same bound as the command line's and check's.
    SimulateRequest r;
    r.workload = "llama-3-8b";
    r.scopes = {sched::Scope::layer};
    r.schedules = {model::ScheduleKind::baseline};
    o.request(r, o.max + 1);
    CHECK(error_path([&] { prepare_job(r); }) == "<command line> " + std::string(o.option));
    // Within it, the request's field reads back what was set.
    o.request(r, 2);
    CHECK(o.requested(r) == std::optional<std::int64_t>(2));
    CHECK(workload_override(o.option).key == o.key);
  }
  // An error at a key below an override's is the override's; a key that only starts alike is not.
  const WorkloadOverride& tp = workload_override("--tp");
  CHECK(tp.names("$.parallel.tp"));
  CHECK(tp.names("$.parallel.tp[0]"));
  CHECK(!tp.names("$.parallel.tp_comm"));
  CHECK(!tp.names("$.parallel"));
  CHECK_THROWS_AS(workload_override("--nope"), std::out_of_range);
}

TEST_CASE("sweep --pp and --grad-accumulation are axes - a file written before their columns reads 0 there",
          "[cli][sweep][pp]") {
  ScratchDir dir;
  SweepSpec spec;
  spec.topologies = {"dgx-h100-4node"};
  spec.workloads = {"llama-3-8b"};
  spec.pps = {1, 2, 4};
  spec.grad_accumulations = {8};
  spec.schedules = {model::ScheduleKind::baseline};
  spec.scopes = {sched::Scope::step};
  spec.parallelisms = {sched::Parallelism::tpsp};
  REQUIRE(spec.size() == 3);
  CHECK(*spec.configuration(1).pp == 2);
  CHECK(*spec.configuration(1).grad_accumulation == 8);
  SweepOptions opt;
  opt.jobs = 2;
  const SweepResult res = run_sweep(spec, opt);
  REQUIRE(res.rows.size() == 3);
  for (std::size_t c = 0; c < 3; ++c) {
    const SimulateReport rep = simulate(spec.configuration(c));
    REQUIRE(rep.runs.size() == 1);
    CHECK(row_integer(res.rows[c], "pp") == V{1, 2, 4}[c]);
    CHECK(row_integer(res.rows[c], "grad_accumulation") == 8);
    // 8 micro-batches of 1 sequence of 8192 tokens per step on one DP replica.
    CHECK(row_integer(res.rows[c], "tokens") == 8 * 8192);
    CHECK(row_number(res.rows[c], "step_time_s") == ps_to_seconds(rep.runs[0].metrics.step_time_ps));
  }
  // Each stage holds its own GPUs: 8 (TP) x pp of the cluster's.
  CHECK(row_integer(res.rows[2], "gpus") == 32);

  // The same rows without the two columns (as a sweep wrote them before they existed) read back 0
  // there: not recorded.
  const std::string csv = sweep_csv(res);
  const std::vector<std::string> cols = row_columns();
  const auto pp_at = static_cast<std::size_t>(std::find(cols.begin(), cols.end(), "pp") - cols.begin());
  const auto ga_at = static_cast<std::size_t>(std::find(cols.begin(), cols.end(), "grad_accumulation") - cols.begin());
  REQUIRE(ga_at < pp_at);  // erased from the back first
  std::istringstream in(csv);
  std::string line, old;
  for (int n = 0; std::getline(in, line) && n < 2; ++n) {  // the header and the pp-1 row
    std::vector<std::string> f;
    std::string cell;
    bool quoted = false;
    for (char ch : line) {  // split on commas outside quotes (the pricing cell holds some)
      if (ch == '"') quoted = !quoted;
      if (ch == ',' && !quoted) {
        f.push_back(cell);
        cell.clear();
      } else {
        cell += ch;
      }
    }
    f.push_back(cell);
    f.erase(f.begin() + static_cast<std::ptrdiff_t>(pp_at));
    f.erase(f.begin() + static_cast<std::ptrdiff_t>(ga_at));
    old += fmt::format("{}\n", fmt::join(f, ","));
  }
  {
    std::ofstream out(dir.file("old.csv"));
    out << old;
  }
  const SweepResult back = read_sweep_csv(dir.file("old.csv"));
  REQUIRE(back.rows.size() == 1);
  CHECK(row_integer(back.rows[0], "pp") == 0);
  CHECK(row_integer(back.rows[0], "grad_accumulation") == 0);
  CHECK(row_number(back.rows[0], "step_time_s") == row_number(res.rows[0], "step_time_s"));
}

TEST_CASE("sweep --recompute and --zero are axes - their columns, blame and the gathers a stage cannot carry",
          "[cli][sweep]") {
  SweepSpec spec;
  spec.topologies = {"dgx-h100-4node"};
  spec.workloads = {"llama-3-8b"};
  spec.dps = {4};
  spec.recomputes = {"none", "full"};
  spec.dp_shardings = {"zero1", "zero3"};
  spec.schedules = {model::ScheduleKind::baseline};
  spec.parallelisms = {sched::Parallelism::tpsp};
  // recompute x zero = 2 x 2, the ZeRO stage varying faster.
  REQUIRE(spec.size() == 4);
  CHECK(*spec.configuration(1).recompute == "none");
  CHECK(*spec.configuration(1).dp_sharding == "zero3");
  CHECK(*spec.configuration(2).recompute == "full");
  SweepOptions opt;
  opt.jobs = 2;
  const SweepResult res = run_sweep(spec, opt);
  REQUIRE(res.rows.size() == 4);
  for (std::size_t c = 0; c < 4; ++c) {
    const SimulateReport rep = simulate(spec.configuration(c));
    REQUIRE(rep.runs.size() == 1);
    CHECK(row_string(res.rows[c], "recompute") == std::vector<std::string>{"none", "none", "full", "full"}[c]);
    CHECK(row_string(res.rows[c], "dp_sharding") == std::vector<std::string>{"zero1", "zero3", "zero1", "zero3"}[c]);
    CHECK(row_number(res.rows[c], "step_time_s") == ps_to_seconds(rep.runs[0].metrics.step_time_ps));
  }
  // Full recomputation runs each layer's forward again: more hardware FLOPs, a longer step.
  CHECK(row_number(res.rows[2], "hfu") > row_number(res.rows[2], "mfu"));
  CHECK(row_number(res.rows[2], "step_time_s") > row_number(res.rows[0], "step_time_s"));
  // A sweep file written before the two columns reads them empty: not recorded.
  std::string csv = sweep_csv(res);
  const std::string header = csv.substr(0, csv.find('\n'));
  REQUIRE(header.find(",slices,recompute,dp_sharding,") != std::string::npos);
  std::string old;
  std::istringstream in(csv);
  for (std::string line; std::getline(in, line);) {
    // The two columns follow slices; the rows' values there are none/full and zero1/zero3.
    for (const char* cut : {",recompute,dp_sharding", ",none,zero1", ",none,zero3", ",full,zero1", ",full,zero3"})
      if (const auto at = line.find(cut); at != std::string::npos) line.erase(at, std::string(cut).size());
    old += line + "\n";
  }
  ScratchDir dir;
  write_output_file(dir.file("old.csv"), old);
  const SweepResult back = read_sweep_csv(dir.file("old.csv"));
  REQUIRE(back.rows.size() == 4);
  CHECK(row_string(back.rows[0], "recompute").empty());
  CHECK(row_string(back.rows[0], "dp_sharding").empty());
  CHECK(row_number(back.rows[3], "step_time_s") == row_number(res.rows[3], "step_time_s"));

  // simulate: a name the workload files do not use is refused before any file is read; a value the
  // workload cannot take is blamed on the option; ZeRO-3 cannot carry Megatron's overlapped parameter
  // gather of ZeRO-1/2, which it turns off as search does.
  SimulateRequest r;
  r.workload = "llama-3-8b";
  r.scopes = {sched::Scope::layer};
  r.schedules = {model::ScheduleKind::baseline};
  r.recompute = "most";
  CHECK(error_path([&] { prepare_job(r); }) == "<command line> --recompute");
  r.recompute = "op";  // torchtitan's per-op checkpointing needs up 1 (the generator refuses it)
  r.up = 2;
  r.tp = 4;
  CHECK(error_path([&] { simulate(r); }) == "<command line> --recompute");
  SimulateRequest z;
  z.workload = "validation/workloads/megatron-core-7.1b-tp2.json";
  z.topology = "dgx-h100-128node";
  z.scopes = {sched::Scope::layer};
  REQUIRE(prepare_job(z).workload.parallel.overlap_param_gather);
  z.dp_sharding = "zero3";
  const PreparedJob job = prepare_job(z);
  CHECK(job.workload.parallel.dp_sharding == model::DpSharding::zero3);
  CHECK(!job.workload.parallel.overlap_param_gather);
  // Llama-3-70B's training state replicated on each of 4 replicas at TP 8 does not fit an H100 (182 GB
  // per rank): the memory check's error at $.parallel is the ZeRO stage's.
  SimulateRequest ddp;
  ddp.workload = "llama-3-70b-4node";
  ddp.scopes = {sched::Scope::layer};
  ddp.dp_sharding = "ddp";
  CHECK(error_path([&] { prepare_job(ddp); }) == "<command line> --zero");
  const auto cli = run_fusesim({"sweep", "--zero", "zero4"}, dir);
  CHECK(cli.exit_code == 2);
  CHECK(cli.err == "error: <command line>: --zero: 'zero4' is not one of ddp, zero1, zero2, zero3\n");
}

TEST_CASE("sweep skips and counts invalid combinations", "[cli][sweep]") {
  ScratchDir dir;
  // llama-3-8b (32 heads) on one DGX H100 (8 GPUs): tp 4 runs (tp 2 would not fit in memory); tp 3 does not divide the heads; tp 16
  // needs more ranks than the node has. 2 sequences x 3 TP = 6 configurations: 2 run (x 3 schedules =
  // 6 rows), 4 skipped, every one blamed on --tp, counted as two reasons of two each.
  const auto r = run_fusesim({"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "1024,4096", "--tp", "4,3,16",
                              "--output", "r.json", "--jobs", "2"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("sweep: 6 configurations: 2 run (6 rows), 4 skipped as invalid, 0 failed") != std::string::npos);
  CHECK(r.err.find("skipped 2 at <command line>: --tp, e.g. topology=dgx-h100 workload=llama-3-8b seq=1024 tp=3: "
                   "model.heads 32 is not divisible by tp 3") != std::string::npos);
  CHECK(r.err.find("skipped 2 at <command line>: --tp, e.g. topology=dgx-h100 workload=llama-3-8b seq=1024 tp=16: "
                   "tp x up x dp = 16 x 1 x 1 = 16 ranks, but cluster 'dgx-h100' has 8") != std::string::npos);
  const SweepResult res = read_sweep_json(dir.file("r.json"));
  CHECK(res.configurations == 6);
  CHECK(res.run == 2);
  REQUIRE(res.rows.size() == 6);
  REQUIRE(res.skipped.size() == 4);
  // Configuration order: seq outer, tp inner: 0 = (1024, 4), 1 = (1024, 3), 2 = (1024, 16), 3 = (4096, 4)...
  CHECK(res.rows[0].config == 0);
  CHECK(res.rows[3].config == 3);
  CHECK(res.skipped[0].config == 1);
  CHECK(res.skipped[1].config == 2);
  CHECK(res.skipped[1].configuration == "topology=dgx-h100 workload=llama-3-8b seq=1024 tp=16");
  CHECK(res.skipped[1].key == "<command line>: --tp");
  CHECK(res.skipped[1].message.find("ranks, but cluster 'dgx-h100' has 8") != std::string::npos);
  CHECK(res.failed.empty());

  // The CSV holds the same rows: a header and one line per row, the same number text, and the rows
  // of the skipped configurations (status skipped-..., no metrics): 1 + 6 x 3 lines.
  const auto c = run_fusesim({"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "1024,4096", "--tp", "4,3,16", "--quiet"}, dir);
  REQUIRE(c.exit_code == 0);
  CHECK(count_lines(c.out) == 19);
  CHECK(c.out.substr(0, c.out.find('\n')) == fmt::format("{}", fmt::join(row_columns(), ",")));
  CHECK(c.out == sweep_csv(res));
}

TEST_CASE("sweep output is byte-identical at 1 and 4 threads", "[cli][sweep]") {
  ScratchDir dir;
  const std::vector<std::string> common{"sweep", "--topology", "dgx-h100,dgx-h100-4node", "--workload",
                                        "llama-3-8b,commfuse-tpsp-block", "--seq", "1k:8k:x2", "--tp", "2:8:x2",
                                        "--slices", "2,4"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_fusesim(a, dir);
  };
  const auto j1 = with({"--jobs", "1", "--output", "one.json"});
  const auto j4 = with({"--jobs", "4", "--output", "four.json"});
  REQUIRE(j1.exit_code == 0);
  REQUIRE(j4.exit_code == 0);
  const std::string one = slurp(dir.file("one.json")), four = slurp(dir.file("four.json"));
  CHECK(one == four);
  // 2 x 2 x 4 x 3 x 2 = 96 configurations.
  CHECK(one.find("\"configurations\": 96") != std::string::npos);
  const auto c1 = with({"--jobs", "1", "--output", "one.csv"});
  const auto c4 = with({"--jobs", "4", "--output", "four.csv"});
  REQUIRE(c1.exit_code == 0);
  CHECK(slurp(dir.file("one.csv")) == slurp(dir.file("four.csv")));
  // A JSON file read back and written again is the same bytes (what merge relies on).
  CHECK(sweep_json(read_sweep_json(dir.file("one.json"))) == one);
}

TEST_CASE("sweep shards merge into the whole sweep - merge refuses parts that do not fit", "[cli][sweep][merge]") {
  ScratchDir dir;
  const std::vector<std::string> common{"sweep", "--workload", "llama-3-8b", "--seq", "1k:16k:x2", "--tp", "1,2,4,8,16",
                                        "--quiet"};
  auto sweep = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_fusesim(a, dir);
  };
  REQUIRE(sweep({"--output", "whole.json"}).exit_code == 0);
  REQUIRE(sweep({"--output", "whole.csv"}).exit_code == 0);
  for (int i = 0; i < 3; ++i)
    REQUIRE(sweep({"--shard", fmt::format("{}/3", i), "--output", fmt::format("part{}.json", i)}).exit_code == 0);
  // Parts in any order.
  auto m = run_fusesim({"merge", "part2.json", "part0.json", "part1.json", "-o", "merged.json"}, dir);
  INFO(m.err);
  REQUIRE(m.exit_code == 0);
  CHECK(slurp(dir.file("merged.json")) == slurp(dir.file("whole.json")));
  m = run_fusesim({"merge", "part0.json", "part1.json", "part2.json", "-o", "merged.csv"}, dir);
  REQUIRE(m.exit_code == 0);
  CHECK(slurp(dir.file("merged.csv")) == slurp(dir.file("whole.csv")));
  // Each part holds configurations i, i+3, ... of the 5 x 5 = 25.
  const SweepResult p1 = read_sweep_json(dir.file("part1.json"));
  CHECK(p1.configurations == 25);
  CHECK(p1.run + p1.skipped.size() == 8);  // 1, 4, ..., 22

  const auto missing = run_fusesim({"merge", "part0.json", "part2.json", "-o", "bad.json"}, dir);
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("shard 1 of 3 missing") != std::string::npos);
  const auto twice = run_fusesim({"merge", "part0.json", "part1.json", "part1.json", "part2.json", "-o", "bad.json"}, dir);
  CHECK(twice.exit_code == 2);
  CHECK(twice.err.find("$.shard.index") != std::string::npos);
  REQUIRE(run_fusesim({"sweep", "--workload", "llama-3-8b", "--seq", "1k:8k:x2", "--tp", "1,2,4,8,16", "--quiet",
                       "--shard", "1/3", "--output", "other1.json"},
                      dir)
              .exit_code == 0);
  const auto other = run_fusesim({"merge", "part0.json", "other1.json", "part2.json", "-o", "bad.json"}, dir);
  CHECK(other.exit_code == 2);
  CHECK(other.err.find("other1.json: $.spec") != std::string::npos);
  REQUIRE(sweep({"--shard", "1/4", "--output", "four1.json"}).exit_code == 0);
  const auto count = run_fusesim({"merge", "part0.json", "four1.json", "part2.json", "-o", "bad.json"}, dir);
  CHECK(count.exit_code == 2);
  CHECK(count.err.find("$.shard.count") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("bad.json")));

  // A shard is JSON only; CSV could not be checked by merge.
  const auto csv = sweep({"--shard", "0/2", "--output", "p.csv"});
  CHECK(csv.exit_code == 2);
  CHECK(csv.err.find("--shard") != std::string::npos);
}

TEST_CASE("sweep command-line errors name the option and write nothing", "[cli][sweep]") {
  ScratchDir dir;
  const auto r = run_fusesim({"sweep", "--seq", "1024:512", "--output", "x.json"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("<command line>: --seq") != std::string::npos);
  const auto f = run_fusesim({"sweep", "--output", "x.txt"}, dir);
  CHECK(f.exit_code == 2);
  CHECK(f.err.find("--output") != std::string::npos);
  const auto t = run_fusesim({"sweep", "--topology", "no-such-cluster", "--output", "x.json"}, dir);
  // A cluster that cannot be read is bad input, not a skipped configuration.
  CHECK(t.exit_code == 2);
  CHECK(t.err.find("no-such-cluster") != std::string::npos);
  CHECK(dir.entries().empty());
}

// Llama-3-8B has 32 heads: TP 3 divides none of them, TP 4 does. A grid of TP 3 alone cannot run at
// all (bad input: exit 2, one line naming --tp, nothing written); with TP 4 beside it the TP 3 row is
// skipped and counted, as before; and a shard holding the TP 3 configuration alone is a valid part.
TEST_CASE("a sweep of which no configuration can run is bad input, a shard of them is not", "[cli][sweep]") {
  ScratchDir dir;
  const std::vector<std::string> base{"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "1024",
                                      "--quiet"};
  auto with = [&base](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const auto none = run_fusesim(with({"--tp", "3", "--output", "none.csv"}), dir);
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("error: <command line>: --tp: no configuration of the grid can run (1 skipped as invalid), "
                      "e.g. topology=dgx-h100 workload=llama-3-8b") != std::string::npos);
  CHECK(none.err.find("not divisible by tp 3") != std::string::npos);
  CHECK(count_lines(none.err) == 1);
  CHECK(dir.entries().empty());

  const auto some = run_fusesim(with({"--tp", "3,4", "--output", "some.csv"}), dir);
  CHECK(some.exit_code == 0);
  CHECK(some.err.find("2 configurations: 1 run") != std::string::npos);
  CHECK(dir.entries() == std::vector<std::string>{"some.csv"});

  // Configuration 0 (TP 3) is shard 0/2's alone.
  const auto part = run_fusesim(with({"--tp", "3,4", "--shard", "0/2", "--output", "part.json"}), dir);
  CHECK(part.exit_code == 0);
  CHECK(part.err.find("0 run (0 rows), 1 skipped as invalid") != std::string::npos);
  CHECK(std::filesystem::exists(dir.path() / "part.json"));
}

TEST_CASE("a sweep says its grid size first and runs a huge grid only when asked for by number", "[cli][sweep]") {
  ScratchDir dir;
  // Issue 13: --seq 1:16777216:+1 (16.7 million configurations) started silently and ran until killed.
  // Refused at once by the axis's size, before it is expanded.
  const auto huge = run_fusesim({"sweep", "--seq", "1:16777216:+1", "--output", "x.csv"}, dir);
  CHECK(huge.exit_code == 2);
  REQUIRE(huge.err_lines().size() == 1);
  CHECK(huge.err.find("error: <command line>: --seq: range '1:16777216:+1' has 16777216 values") == 0);
  // 20,000 configurations: within an axis's limit, above the grid's default one.
  const auto big = run_fusesim({"sweep", "--seq", "1:20000:+1", "--output", "x.csv"}, dir);
  CHECK(big.exit_code == 2);
  REQUIRE(big.err_lines().size() == 1);
  CHECK(big.err.find("20000 configurations to run, more than 10000") != std::string::npos);
  CHECK(big.err.find("--max-configs 20000") != std::string::npos);
  CHECK(dir.entries().empty());
  // A limit below the grid is refused at the option; one at the grid's size runs it, and says its size.
  const auto low = run_fusesim({"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "1024,2048",
                                "--max-configs", "1", "--output", "x.csv"},
                               dir);
  CHECK(low.exit_code == 2);
  CHECK(low.err.find("<command line>: --max-configs") != std::string::npos);
  const auto ok = run_fusesim({"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "1024,2048",
                               "--schedule", "baseline", "--max-configs", "2", "--output", "x.csv"},
                              dir);
  INFO(ok.err);
  CHECK(ok.exit_code == 0);
  CHECK(ok.err.find("sweep: 2 configurations, each with 1 schedule(s) and 1 scope(s)") == 0);
  // Issue 20, item 4: four axes of 65,536 values are 2^64 configurations, which wrapped to "sweep: 0
  // configurations" and exit 0. The size saturates now and is refused.
  const auto wrap = run_fusesim({"sweep", "--tp", "1:65536", "--up", "1:65536", "--dp", "1:65536", "--micro-batch",
                                 "1:65536", "--output", "y.csv"},
                                dir);
  CHECK(wrap.exit_code == 2);
  CHECK(wrap.err.find("more than 2^64 configurations") != std::string::npos);
}

TEST_CASE("sweep --engine is an axis - each row names its engine and what priced it", "[cli][sweep][engine]") {
  SweepSpec spec;
  spec.topologies = {"dgx-h100"};
  spec.workloads = {"llama-3-8b"};
  spec.engines = {"sm", "copy"};
  spec.sequence_lengths = {2048, 4096};
  spec.schedules = {model::ScheduleKind::commfuse};
  // topology x workload x engine x seq = 1 x 1 x 2 x 2; the engine varies slower than the sequence.
  REQUIRE(spec.size() == 4);
  CHECK(spec.configuration(0).engine == std::optional<std::string>("sm"));
  CHECK(spec.configuration(1).engine == std::optional<std::string>("sm"));
  CHECK(spec.configuration(1).sequence_length == std::optional<std::int64_t>(4096));
  CHECK(spec.configuration(2).engine == std::optional<std::string>("copy"));
  CHECK(spec.to_json().at("engines") == nlohmann::json({"sm", "copy"}));

  const SweepResult result = run_sweep(spec, SweepOptions{});
  REQUIRE(result.rows.size() == 4);
  for (std::size_t i = 0; i < result.rows.size(); ++i) {
    CHECK(row_string(result.rows[i], "engine") == (i < 2 ? "sm" : "copy"));
    CHECK(row_string(result.rows[i], "pricing").rfind("profile h100-sxm", 0) == 0);
  }

  CHECK(error_path([] { (void)parse_engine_mode("--engine", "nvlink"); }) == "<command line> --engine");
}

TEST_CASE("sweep --symmetry reaches every configuration - mirror runs every rank where it would not be exact",
          "[cli][sweep][symmetry]") {
  SweepSpec spec;
  spec.topologies = {"dgx-h100-4node"};
  spec.workloads = {"llama-3-8b"};
  spec.parallelisms = {sched::Parallelism::dp};
  spec.tps = {2, 8};
  spec.dps = {4};
  spec.schedules = {model::ScheduleKind::baseline};
  spec.force_memory = true;
  spec.symmetry = "mirror";
  REQUIRE(spec.size() == 2);
  CHECK(spec.configuration(0).mirror_dp);
  CHECK_FALSE(spec.configuration(0).dp_as_p2p);  // mirror keeps the collectives; p2p lowers them
  CHECK(spec.to_json().at("symmetry") == "mirror");
  SweepOptions opt;
  opt.jobs = 2;
  const SweepResult mirrored = run_sweep(spec, opt);
  spec.symmetry = "none";
  const SweepResult none = run_sweep(spec, opt);
  REQUIRE(mirrored.rows.size() == 2);
  REQUIRE(none.rows.size() == 2);
  // TP 2 x DP 4: four replicas in the first DGX, every DP hop on NVLink but the wrap-around from
  // replica 3 to 0, which stays inside too: all hops alike, mirrored (replica 0's 2 ranks).
  // TP 8 x DP 4: a replica per DGX, every hop across the NICs: mirrored (replica 0's 8 ranks).
  // Either way the row is simulate()'s for that request.
  for (std::size_t c = 0; c < 2; ++c) {
    SimulateRequest r = spec.configuration(c);
    apply_symmetry("mirror", r);
    const SimulateReport rep = simulate(r);
    REQUIRE(rep.runs.size() == 1);
    CHECK(row_number(mirrored.rows[c], "step_time_s") == ps_to_seconds(rep.runs[0].metrics.step_time_ps));
    CHECK(rep.notes.empty());
  }
  // TP 2 x DP 16 spans the four DGX: the hop from replica 3 to 4 crosses the NICs, the one from 0 to 1
  // does not, and NCCL's four rings (one per replica a node holds) repeat every two nodes, so mirror
  // simulates replicas 0-7 and gives what none (every rank) gives, with no note.
  spec.tps = {2};
  spec.dps = {16};
  spec.symmetry = "mirror";
  const SweepResult mirrored16 = run_sweep(spec, opt);
  spec.symmetry = "none";
  const SweepResult none16 = run_sweep(spec, opt);
  REQUIRE(mirrored16.rows.size() == 1);
  CHECK(row_number(mirrored16.rows[0], "step_time_s") == row_number(none16.rows[0], "step_time_s"));
  CHECK(row_number(mirrored16.rows[0], "exposed_comm_s") == row_number(none16.rows[0], "exposed_comm_s"));
  // TP 2 x DP 6: the ring crosses nodes at hops 3 -> 4 and 5 -> 0 only, which no group of 1, 2 or 3
  // replicas repeats: every replica is simulated, the first rank of each TP group standing for the
  // group (6 ranks of 12), and mirror gives what none gives, with no note. With Ulysses (TP 2 x UP 2
  // x DP 3: hops 0 -> 1 inside the first DGX, 1 -> 2 and 2 -> 0 across) no TP image is made: every
  // rank, and a note says so (another may name the tree all-reduce that gains most: docs/engine.md
  // section 6).
  for (const auto& [up, dp] : {std::pair{1, 6}, std::pair{2, 3}}) {
    spec.ups = {up};
    spec.dps = {dp};
    INFO("tp 2 up " << up << " dp " << dp);
    SimulateRequest r = spec.configuration(0);
    apply_symmetry("mirror", r);
    const SimulateReport report = simulate(r);
    spec.symmetry = "mirror";
    const SweepResult mirrored6 = run_sweep(spec, opt);
    spec.symmetry = "none";
    const SweepResult none6 = run_sweep(spec, opt);
    REQUIRE(mirrored6.rows.size() == 1);
    CHECK(row_number(mirrored6.rows[0], "step_time_s") == row_number(none6.rows[0], "step_time_s"));
    CHECK(row_number(mirrored6.rows[0], "exposed_comm_s") == row_number(none6.rows[0], "exposed_comm_s"));
    REQUIRE(report.runs.size() == 1);
    CHECK(report.runs[0].metrics.ranks.size() == (up == 1 ? 6U : 12U));
    CHECK(std::count_if(report.notes.begin(), report.notes.end(), [](const std::string& n) {
            return n.find("every rank simulated") != std::string::npos;
          }) == (up == 1 ? 0 : 1));
  }
  // A mode that is not one is refused before anything runs.
  ScratchDir dir;
  const auto bad = run_fusesim({"sweep", "--symmetry", "mirrored", "--output", "x.json"}, dir);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("<command line>: --symmetry") != std::string::npos);
  CHECK(dir.entries().empty());
}
