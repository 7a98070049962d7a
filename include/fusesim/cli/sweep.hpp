#pragma once
// What-if sweeps: a grid of configurations (clusters x workloads x parallelisms x sequence lengths x
// TP x UP x DP x micro-batches x slice counts), each simulated with simulate() for every requested
// schedule and scope; one row per run. The commands `sweep`, `merge`, `check` and `plot` are thin
// layers over this file and plot.hpp. Syntax and file formats: docs/cli.md.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/cli/simulate.hpp"
#include "fusesim/util/json_reader.hpp"

namespace fusesim::cli {

// An integer axis from the command line: a comma list of items, each a number (with an optional k
// suffix = x1024) or a range "first:last" (step +1), "first:last:+step" (arithmetic) or
// "first:last:xfactor" (geometric); a range stops at the last value <= last. The values are kept in
// the order given; a value given twice is an error. InputError("<command line>", option, ...).
std::vector<std::int64_t> parse_int_axis(const std::string& option, const std::string& text, std::int64_t min,
                                         std::int64_t max);
// A comma list of names (topologies, workloads, parallelisms); no empty or repeated item.
std::vector<std::string> parse_name_axis(const std::string& option, const std::string& text);

// The grid. An empty axis keeps the workload file's own value (one point on that axis).
struct SweepSpec {
  std::vector<std::string> topologies{"dgx-h100-4node"};
  std::vector<std::string> workloads{"llama-3-70b-4node"};
  std::vector<sched::Parallelism> parallelisms;  // each value one configuration; empty: simulate()'s default
  std::vector<std::string> engines;       // model::kEngineModes; empty: the workload's schedule.engine
  std::vector<std::int64_t> sequence_lengths;
  std::vector<std::int64_t> tps, ups, pps, dps;
  std::vector<std::int64_t> micro_batches;
  std::vector<std::int64_t> grad_accumulations;
  std::vector<std::string> recomputes;    // NamedOverride "--recompute": none, selective, full, op
  std::vector<std::string> dp_shardings;  // NamedOverride "--zero": ddp, zero1, zero2, zero3
  std::vector<std::int64_t> slices;
  std::vector<model::ScheduleKind> schedules = model::all_schedule_kinds();
  std::vector<sched::Scope> scopes{sched::Scope::layer};
  bool forward_only = false;
  std::string profile;     // --profile (see SimulateRequest::pricing)
  bool roofline = false;   // --roofline
  bool force_memory = false;
  // --symmetry none|p2p|mirror, every configuration (apply_symmetry; mirror falls back to every rank
  // where it would not be exact, docs/schedules.md "Symmetry").
  std::string symmetry = "mirror";

  std::size_t size() const;  // configurations in the grid (product of the axis sizes)
  // Configuration `index` (0 <= index < size()), the last axis (slices) varying fastest, in the order
  // topology, workload, parallelism, engine, sequence, tp, up, pp, dp, micro-batch, grad accumulation,
  // recompute, ZeRO stage, slices.
  SimulateRequest configuration(std::size_t index) const;
  // Canonical form, stored in sweep files so that merge can tell parts of the same sweep apart.
  nlohmann::json to_json() const;
};

// Which configurations a run covers: index % count == index_in (round robin, so that each part gets
// a similar mix of cheap and costly configurations).
struct Shard {
  int index = 0;
  int count = 1;
  bool covers(std::size_t config) const { return static_cast<int>(config % static_cast<std::size_t>(count)) == index; }
};
Shard parse_shard(const std::string& text);  // "i/n", 0 <= i < n

// What every sharded part (a sweep's, a search's) opens with: "format" (`format`, else "not a `what`
// file"), "version", the run's "spec" (an object the parts must share) and its "shard".
struct PartHeader {
  nlohmann::json spec;
  Shard shard;
};
PartHeader read_part_header(const JsonObject& root, const std::string& format, int version, const std::string& what);
// The parts' shards (paths[p] holds shards[p]) are one count, each shard once, none missing; else
// InputError at the part and "$.shard.count" / "$.shard.index", or "incomplete <what>" for the parts.
void check_shard_parts(const std::vector<std::string>& paths, const std::vector<Shard>& shards, const std::string& what);

// One cell of a result row.
using Cell = std::variant<std::string, std::int64_t, double>;

// The columns of a result row, in output order: the configuration (as resolved: the workload's own
// values where an axis was left empty), then every metric of design note §4 and the extra ones of
// analysis::to_json.
const std::vector<std::string>& row_columns();
// The number of leading configuration columns (the rest are metrics).
std::size_t config_column_count();

struct SweepRow {
  std::size_t config = 0;   // index in the grid
  std::vector<Cell> cells;  // row_columns() order
};
// A configuration that was not simulated: InputError (an invalid combination) or another exception.
struct SweepProblem {
  std::size_t config = 0;
  std::string configuration;  // "topology=dgx-h100 workload=llama-3-70b seq=4096 tp=16 ..."
  std::string key;            // "<file>: <json path>" of the error, or "internal error"
  std::string message;        // the error's message, on one line
  // The rows the configuration would have given (one per parallelism, scope and schedule), their
  // configuration columns only (config_column_count() cells; cluster and pricing left empty, the
  // workload's values where it loads): result files and figures show the configuration as missing
  // where it would have been, with its status, rather than leave it out silently.
  std::vector<std::vector<Cell>> rows;
  std::string status;  // problem_status(); set by the CSV reader, whose file has no reasons
};

// The `status` column: "ok" for a simulated row; for a configuration that was not, "skipped-memory"
// (its training state does not fit the device: --force-memory runs it), "skipped-divisibility" (a
// degree or the slice count does not divide what it splits), "skipped-invalid" (any other bad
// combination) or "failed" (an internal error).
std::string problem_status(const SweepProblem& p);

struct SweepResult {
  nlohmann::json spec;      // SweepSpec::to_json()
  Shard shard;
  std::size_t configurations = 0;  // of the whole grid
  std::vector<SweepRow> rows;        // by configuration, then in simulate()'s run order
  std::vector<SweepProblem> skipped; // invalid combinations
  std::vector<SweepProblem> failed;  // internal errors
  std::size_t run = 0;               // configurations simulated (of this shard)
};

struct SweepOptions {
  int jobs = 1;
  Shard shard;
  // Called from the coordinating thread now and then with (done, total); empty: no progress.
  std::function<void(std::size_t, std::size_t)> progress;
};

// Runs the shard's configurations on `jobs` threads. The result does not depend on `jobs`.
SweepResult run_sweep(const SweepSpec& spec, const SweepOptions& options);

// The result files. JSON carries everything (spec, shard, rows, skipped, failed); CSV the rows only.
// Numbers are written in the shortest form that reads back to the same double, so that a file read
// and written again is byte-identical.
std::string sweep_json(const SweepResult& r);
std::string sweep_csv(const SweepResult& r);
// Reads a sweep JSON file (InputError naming it and the JSON path on anything malformed).
SweepResult read_sweep_json(const std::string& path);
SweepResult parse_sweep_json(const JsonDocument& doc);  // the same, from a document already read
// Reads a sweep CSV file: its rows, and its rows of configurations not simulated (status other than
// ok) as skipped/failed problems; no spec (an empty object) and one shard. InputError naming the file
// and "line N" (or "line 1: column C" for the header) on anything malformed.
SweepResult read_sweep_csv(const std::string& path);
// read_sweep_csv for a path ending in .csv, read_sweep_json otherwise.
SweepResult read_sweep_file(const std::string& path);
// Joins the parts of one sharded sweep into the result of the whole sweep: same spec and shard count,
// every shard exactly once. InputError naming the part at fault.
SweepResult merge_sweeps(const std::vector<std::string>& paths, const std::vector<SweepResult>& parts);

// "csv" or "json": `format` when not empty, else the extension of `path`.
std::string output_format_for(const std::string& path, const std::string& format);

// Summary lines for stderr: configurations run, skipped (counted by reason), failed.
std::string sweep_summary(const SweepResult& r);

// A metric column's value in a row (throws std::out_of_range for an unknown name).
double row_number(const SweepRow& row, const std::string& column);
const std::string& row_string(const SweepRow& row, const std::string& column);
std::int64_t row_integer(const SweepRow& row, const std::string& column);

// The row cells of one simulated run (shared with `check`).
std::vector<Cell> make_row(const SimulateRequest& request, const SimulateReport& report, const SimulateRun& run);

}  // namespace fusesim::cli
