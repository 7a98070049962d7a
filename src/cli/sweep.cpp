#include "fusesim/cli/sweep.hpp"

#include <algorithm>
#include <limits>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>

#include "fusesim/cli/app.hpp"
#include "fusesim/cli/overrides.hpp"
#include "fusesim/util/allocator.hpp"
#include "fusesim/util/csv.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"

namespace fusesim::cli {
namespace {

constexpr const char* kFormatName = "fusesim-sweep";
constexpr int kFormatVersion = 1;

std::vector<std::string> names(const std::vector<sched::Parallelism>& ps) {
  std::vector<std::string> out;
  for (sched::Parallelism p : ps) out.push_back(sched::to_string(p));
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (true) {
    const auto at = s.find(sep, pos);
    out.push_back(s.substr(pos, at == std::string::npos ? std::string::npos : at - pos));
    if (at == std::string::npos) break;
    pos = at + 1;
  }
  return out;
}

std::int64_t parse_number(const std::string& option, const std::string& item, std::string text) {
  // Binary suffixes, as sequence lengths are written: 128k = 131,072 tokens, 1m = 1,048,576.
  std::int64_t scale = 1;
  if (!text.empty() && (text.back() == 'k' || text.back() == 'K')) {
    scale = 1024;
    text.pop_back();
  } else if (!text.empty() && (text.back() == 'm' || text.back() == 'M')) {
    scale = 1024 * 1024;
    text.pop_back();
  }
  std::int64_t v = 0;
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), last, v);
  if (text.empty() || ec != std::errc() || ptr != last || v > (std::int64_t{1} << 50))
    throw InputError(kCommandLine, option,
                     fmt::format("'{}' is not a number, a list or a range (first:last, first:last:+step, "
                                 "first:last:xfactor)",
                                 item));
  return v * scale;
}

enum class Kind { text, integer, number };
struct Column {
  const char* name;
  Kind kind;
};

// The configuration columns, then the metrics (names of analysis::to_json, design note §4 first).
const std::vector<Column>& columns() {
  static const std::vector<Column> cols{
      {"config", Kind::integer},        {"topology", Kind::text},        {"cluster", Kind::text},
      {"workload", Kind::text},         {"model", Kind::text},           {"dtype", Kind::text},
      {"sequence_length", Kind::integer}, {"micro_batch", Kind::integer}, {"grad_accumulation", Kind::integer},
      {"tp", Kind::integer},            {"up", Kind::integer},           {"pp", Kind::integer},
      {"dp", Kind::integer},            {"slices", Kind::integer},
      {"recompute", Kind::text},        {"dp_sharding", Kind::text},
      {"passes", Kind::text},           {"parallelism", Kind::text},     {"scope", Kind::text},
      {"schedule", Kind::text},         {"engine", Kind::text},          {"pricing", Kind::text},
      // metrics
      {"step_time_s", Kind::number},    {"compute_s", Kind::number},     {"comm_s", Kind::number},
      {"overlapped_comm_s", Kind::number}, {"exposed_comm_s", Kind::number}, {"overlap_ratio", Kind::number},
      {"head_latency_s", Kind::number}, {"tail_only_latency_s", Kind::number},
      {"head_plus_tail_latency_s", Kind::number}, {"tail_latency_s", Kind::number}, {"mfu", Kind::number},
      {"hfu", Kind::number},            {"tokens_per_s", Kind::number},  {"tokens_per_s_per_gpu", Kind::number},
      {"tokens", Kind::integer},        {"gpus", Kind::integer},         {"critical_rank", Kind::integer},
      {"model_flops", Kind::number},    {"hardware_flops", Kind::number}, {"peak_flops_per_s", Kind::number},
      // Last, so that the columns before it keep their places in files read by position.
      {"status", Kind::text},
  };
  return cols;
}
constexpr std::size_t kConfigColumns = 22;
// Columns that came later than the others (2026-11-30): a file written before them reads 0 there,
// "not recorded" (its workloads' own values, which the file does not say).
bool late_column(const char* name) {
  for (const char* late : {"pp", "grad_accumulation", "recompute", "dp_sharding"})
    if (name == std::string_view(late)) return true;
  return false;
}
// What a late column reads in a file written before it: 0, or an empty name.
Cell late_cell(const Column& c) { return c.kind == Kind::text ? Cell(std::string()) : Cell(std::int64_t{0}); }
constexpr const char* kStatusOk = "ok";

std::size_t column_index(const std::string& name) {
  const auto& cols = columns();
  for (std::size_t i = 0; i < cols.size(); ++i)
    if (name == cols[i].name) return i;
  throw std::out_of_range("no sweep column '" + name + "'");
}

// The text of a number as JSON writes it: shortest form that reads back to the same double.
std::string number_text(double v) { return nlohmann::json(v).dump(); }

std::string cell_json(const Cell& c) {
  if (const auto* s = std::get_if<std::string>(&c)) return nlohmann::json(*s).dump();
  if (const auto* i = std::get_if<std::int64_t>(&c)) return std::to_string(*i);
  return number_text(std::get<double>(c));
}

std::string cell_csv(const Cell& c) {
  if (const auto* s = std::get_if<std::string>(&c)) return util::csv_field(*s);
  return cell_json(c);
}

std::string describe(const SimulateRequest& r, const SweepSpec& spec) {
  std::string s = fmt::format("topology={} workload={}", r.topology, r.workload);
  if (!r.parallelisms.empty()) s += " parallelism=" + sched::to_string(r.parallelisms.front());
  if (r.engine) s += " engine=" + *r.engine;
  for (const WorkloadOverride& o : workload_overrides())
    if (const std::optional<std::int64_t> v = o.requested(r)) s += fmt::format(" {}={}", o.option.substr(2), *v);
  for (const NamedOverride& o : named_overrides())
    if (const std::optional<std::string>& v = r.*o.field) s += fmt::format(" {}={}", o.option.substr(2), *v);
  (void)spec;
  return s;
}

nlohmann::json problem_json(const SweepProblem& p) {
  return {{"config", p.config}, {"configuration", p.configuration}, {"key", p.key}, {"message", p.message}};
}

std::vector<std::string> kind_names(const std::vector<model::ScheduleKind>& v) {
  std::vector<std::string> out;
  for (auto k : v) out.push_back(model::to_string(k));
  return out;
}
std::vector<std::string> scope_names(const std::vector<sched::Scope>& v) {
  std::vector<std::string> out;
  for (auto s : v) out.push_back(sched::to_string(s));
  return out;
}

}  // namespace

std::vector<std::int64_t> parse_int_axis(const std::string& option, const std::string& text, std::int64_t min,
                                         std::int64_t max) {
  // A typo'd range (1:16777216:+1) is refused by its size before it is expanded, and duplicates are
  // found by hashing: a linear search per value made such a range run for hours before any output.
  constexpr std::int64_t kMaxAxisValues = std::int64_t{1} << 16;
  std::vector<std::int64_t> out;
  std::unordered_set<std::int64_t> seen;
  auto add = [&](std::int64_t v, const std::string& item) {
    if (v < min || v > max)
      throw InputError(kCommandLine, option,
                       fmt::format("value {} (from '{}') is outside the allowed range [{}, {}]", v, item, min, max));
    if (!seen.insert(v).second)
      throw InputError(kCommandLine, option, fmt::format("value {} is given twice (from '{}')", v, item));
    out.push_back(v);
  };
  if (text.empty()) throw InputError(kCommandLine, option, "expected a value, a list or a range");
  for (const std::string& item : split(text, ',')) {
    const std::vector<std::string> parts = split(item, ':');
    if (parts.size() == 1) {
      add(parse_number(option, item, item), item);
      continue;
    }
    if (parts.size() > 3)
      throw InputError(kCommandLine, option, fmt::format("range '{}' has more than three parts", item));
    const std::int64_t first = parse_number(option, item, parts[0]);
    const std::int64_t last = parse_number(option, item, parts[1]);
    if (first > last)
      throw InputError(kCommandLine, option, fmt::format("range '{}' ends below its start", item));
    bool geometric = false;
    std::int64_t step = 1;
    if (parts.size() == 3) {
      const std::string& s = parts[2];
      if (s.size() < 2 || (s[0] != '+' && s[0] != 'x'))
        throw InputError(kCommandLine, option,
                         fmt::format("step '{}' of range '{}' is neither +N (arithmetic) nor xN (geometric)", s, item));
      geometric = s[0] == 'x';
      step = parse_number(option, item, s.substr(1));
      if (geometric ? step < 2 : step < 1)
        throw InputError(kCommandLine, option,
                         fmt::format("step '{}' of range '{}' must be {}", s, item, geometric ? "x2 or more" : "+1 or more"));
      if (geometric && first < 1)
        throw InputError(kCommandLine, option, fmt::format("geometric range '{}' must start at 1 or more", item));
    }
    if (!geometric) {
      const std::int64_t values = (last - first) / step + 1;
      if (values > kMaxAxisValues - static_cast<std::int64_t>(out.size()))
        throw InputError(kCommandLine, option,
                         fmt::format("range '{}' has {} values, more than the {} one axis of a sweep may have (a grid "
                                     "of that size would run for days): narrow it or take a larger step",
                                     item, values, kMaxAxisValues));
    }
    for (std::int64_t v = first;; v = geometric ? v * step : v + step) {
      add(v, item);
      // Stop before the next value passes `last` (and before it could overflow).
      if (geometric ? v > last / step : v > last - step) break;
    }
  }
  return out;
}

std::vector<std::string> parse_name_axis(const std::string& option, const std::string& text) {
  std::vector<std::string> out;
  for (const std::string& item : split(text, ',')) {
    if (item.empty()) throw InputError(kCommandLine, option, fmt::format("empty item in '{}'", text));
    if (std::find(out.begin(), out.end(), item) != out.end())
      throw InputError(kCommandLine, option, fmt::format("'{}' is given twice", item));
    out.push_back(item);
  }
  return out;
}

Shard parse_shard(const std::string& text) {
  const auto parts = split(text, '/');
  auto num = [&](const std::string& s) {
    int v = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || ptr != s.data() + s.size())
      throw InputError(kCommandLine, "--shard", fmt::format("'{}' is not of the form i/n (0 <= i < n)", text));
    return v;
  };
  if (parts.size() != 2) throw InputError(kCommandLine, "--shard", fmt::format("'{}' is not of the form i/n", text));
  Shard s{num(parts[0]), num(parts[1])};
  if (s.count < 1 || s.count > 1'000'000 || s.index < 0 || s.index >= s.count)
    throw InputError(kCommandLine, "--shard", fmt::format("'{}': need 0 <= i < n and n <= 1000000", text));
  return s;
}

namespace {
template <typename T>
std::size_t axis_size(const std::vector<T>& v) {
  return v.empty() ? 1 : v.size();
}
}  // namespace

std::size_t SweepSpec::size() const {
  // Saturating: ten axes of up to 65,536 values each overflow 64 bits (2^64 wrapped to "0
  // configurations"); a product past the largest size_t reads as that, which every limit refuses.
  const std::size_t factors[] = {topologies.size(),       workloads.size(), axis_size(parallelisms), axis_size(engines),
                                 axis_size(sequence_lengths), axis_size(tps), axis_size(ups),         axis_size(pps),
                                 axis_size(dps),              axis_size(micro_batches), axis_size(grad_accumulations),
                                 axis_size(recomputes),       axis_size(dp_shardings),  axis_size(slices)};
  std::size_t n = 1;
  for (std::size_t f : factors) {
    if (f == 0) return 0;
    if (n > std::numeric_limits<std::size_t>::max() / f) return std::numeric_limits<std::size_t>::max();
    n *= f;
  }
  return n;
}

SimulateRequest SweepSpec::configuration(std::size_t index) const {
  SimulateRequest r;
  // Mixed-radix digits, the last axis fastest.
  auto take = [&index](std::size_t n) {
    const std::size_t d = index % n;
    index /= n;
    return d;
  };
  const std::size_t i_slices = take(axis_size(slices));
  const std::size_t i_zero = take(axis_size(dp_shardings));
  const std::size_t i_rc = take(axis_size(recomputes));
  const std::size_t i_ga = take(axis_size(grad_accumulations));
  const std::size_t i_mb = take(axis_size(micro_batches));
  const std::size_t i_dp = take(axis_size(dps));
  const std::size_t i_pp = take(axis_size(pps));
  const std::size_t i_up = take(axis_size(ups));
  const std::size_t i_tp = take(axis_size(tps));
  const std::size_t i_seq = take(axis_size(sequence_lengths));
  const std::size_t i_engine = take(axis_size(engines));
  const std::size_t i_par = take(axis_size(parallelisms));
  const std::size_t i_wl = take(workloads.size());
  const std::size_t i_topo = take(topologies.size());
  r.topology = topologies.at(i_topo);
  r.workload = workloads.at(i_wl);
  if (!parallelisms.empty()) r.parallelisms = {parallelisms[i_par]};
  if (!engines.empty()) r.engine = engines[i_engine];
  if (!sequence_lengths.empty()) r.sequence_length = sequence_lengths[i_seq];
  if (!tps.empty()) r.tp = static_cast<int>(tps[i_tp]);
  if (!ups.empty()) r.up = static_cast<int>(ups[i_up]);
  if (!pps.empty()) r.pp = static_cast<int>(pps[i_pp]);
  if (!dps.empty()) r.dp = static_cast<int>(dps[i_dp]);
  if (!micro_batches.empty()) r.micro_batch = micro_batches[i_mb];
  if (!grad_accumulations.empty()) r.grad_accumulation = grad_accumulations[i_ga];
  if (!recomputes.empty()) r.recompute = recomputes[i_rc];
  if (!dp_shardings.empty()) r.dp_sharding = dp_shardings[i_zero];
  if (!slices.empty()) r.slices = static_cast<int>(slices[i_slices]);
  r.schedules = schedules;
  r.scopes = scopes;
  r.forward_only = forward_only;
  r.pricing = model::pricing_choice(profile, roofline);
  r.force_memory = force_memory;
  apply_symmetry(symmetry, r);
  return r;
}

nlohmann::json SweepSpec::to_json() const {
  return {{"topologies", topologies},
          {"workloads", workloads},
          {"parallelisms", names(parallelisms)},
          {"engines", engines},
          {"sequence_lengths", sequence_lengths},
          {"tp", tps},
          {"up", ups},
          {"pp", pps},
          {"dp", dps},
          {"micro_batches", micro_batches},
          {"grad_accumulations", grad_accumulations},
          {"recomputes", recomputes},
          {"dp_shardings", dp_shardings},
          {"slices", slices},
          {"schedules", kind_names(schedules)},
          {"scopes", scope_names(scopes)},
          {"forward_only", forward_only},
          {"profile", profile},
          {"roofline", roofline},
          {"force_memory", force_memory},
          {"symmetry", symmetry}};
}

const std::vector<std::string>& row_columns() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Column& c : columns()) n.emplace_back(c.name);
    return n;
  }();
  return names;
}

std::size_t config_column_count() { return kConfigColumns; }

double row_number(const SweepRow& row, const std::string& column) {
  const Cell& c = row.cells.at(column_index(column));
  if (const auto* i = std::get_if<std::int64_t>(&c)) return static_cast<double>(*i);
  return std::get<double>(c);
}
const std::string& row_string(const SweepRow& row, const std::string& column) {
  return std::get<std::string>(row.cells.at(column_index(column)));
}
std::int64_t row_integer(const SweepRow& row, const std::string& column) {
  return std::get<std::int64_t>(row.cells.at(column_index(column)));
}

std::vector<Cell> make_row(const SimulateRequest& request, const SimulateReport& report, const SimulateRun& run) {
  const model::Workload& w = report.workload;
  const nlohmann::json m = analysis::to_json(run.metrics);
  std::vector<Cell> cells;
  cells.reserve(columns().size());
  cells.emplace_back(std::int64_t{0});  // config, set by the caller
  cells.emplace_back(request.topology);
  cells.emplace_back(report.cluster_name);
  cells.emplace_back(request.workload);
  cells.emplace_back(w.arch.name);
  cells.emplace_back(topo::to_string(w.dtype));
  for (const WorkloadOverride& o : workload_overrides()) cells.emplace_back(o.get(w));
  for (const NamedOverride& o : named_overrides()) cells.emplace_back(o.get(w));
  cells.emplace_back(std::string(w.backward ? "forward+backward" : "forward"));
  cells.emplace_back(run.metrics.parallelism);
  cells.emplace_back(run.metrics.scope);
  cells.emplace_back(run.metrics.schedule);
  cells.emplace_back(model::engine_name(w.schedule));
  cells.emplace_back(report.pricing);
  const auto& cols = columns();
  for (std::size_t i = kConfigColumns; i + 1 < cols.size(); ++i) {
    const nlohmann::json& v = m.at(cols[i].name);
    if (cols[i].kind == Kind::integer) {
      cells.emplace_back(v.get<std::int64_t>());
    } else {
      cells.emplace_back(v.get<double>());
    }
  }
  cells.emplace_back(std::string(kStatusOk));
  return cells;
}

std::string problem_status(const SweepProblem& p) {
  if (!p.status.empty()) return p.status;
  if (p.key == "internal error") return "failed";
  // check_memory's advice names --force-memory; the divisibility checks of the workload and the
  // generators say "divisible" or "divide(s)".
  if (p.message.find("--force-memory") != std::string::npos) return "skipped-memory";
  if (p.message.find("divisible") != std::string::npos || p.message.find("divide") != std::string::npos)
    return "skipped-divisibility";
  return "skipped-invalid";
}

namespace {

// The configuration columns of the rows a configuration would have given. Best effort: what does not
// load stays empty (0 for integers), since the configuration failed somewhere.
std::vector<std::vector<Cell>> problem_rows(const SimulateRequest& request, std::size_t config) {
  model::Workload w;
  bool loaded = false;
  try {
    w = model::load_workload(request.workload);
    loaded = true;
  } catch (const std::exception&) {
  }
  set_overrides(request, w);
  if (request.forward_only) w.backward = false;
  std::string engine;
  if (loaded) {
    try {
      if (request.engine) model::set_engine_mode(w.schedule, *request.engine);
      engine = model::engine_name(w.schedule);
    } catch (const std::exception&) {
    }
  } else if (request.engine) {
    engine = *request.engine;
  }
  // The parallelisms' names; one empty name where the workload could not say which it uses.
  std::vector<std::string> pars;
  try {
    for (sched::Parallelism p : request.parallelisms.empty() ? parallelisms_for(request, w) : request.parallelisms)
      pars.push_back(sched::to_string(p));
  } catch (const std::exception&) {
    pars = {""};
  }
  std::vector<std::vector<Cell>> rows;
  for (const std::string& par : pars)
    for (sched::Scope scope : request.scopes)
      for (model::ScheduleKind kind : request.schedules) {
        std::vector<Cell> row{static_cast<std::int64_t>(config), request.topology, std::string(), request.workload,
                              loaded ? w.arch.name : std::string(), loaded ? topo::to_string(w.dtype) : std::string()};
        for (const WorkloadOverride& o : workload_overrides()) row.emplace_back(o.get(w));
        for (const NamedOverride& o : named_overrides()) row.emplace_back(loaded ? o.get(w) : std::string());
        for (Cell c : {Cell(std::string(w.backward ? "forward+backward" : "forward")), Cell(par),
                       Cell(sched::to_string(scope)), Cell(model::to_string(kind)), Cell(engine), Cell(std::string())})
          row.push_back(std::move(c));
        rows.push_back(std::move(row));
      }
  return rows;
}

// Rows and the rows of problems, in configuration order (a configuration has one or the other).
template <typename RowFn, typename ProblemFn>
void for_each_row(const SweepResult& r, RowFn on_row, ProblemFn on_problem_row) {
  std::vector<const SweepProblem*> problems;
  for (const SweepProblem& p : r.skipped) problems.push_back(&p);
  for (const SweepProblem& p : r.failed) problems.push_back(&p);
  std::stable_sort(problems.begin(), problems.end(), [](const auto* a, const auto* b) { return a->config < b->config; });
  std::size_t k = 0;
  for (const SweepRow& row : r.rows) {
    for (; k < problems.size() && problems[k]->config < row.config; ++k)
      for (const auto& cells : problems[k]->rows) on_problem_row(*problems[k], cells);
    on_row(row);
  }
  for (; k < problems.size(); ++k)
    for (const auto& cells : problems[k]->rows) on_problem_row(*problems[k], cells);
}

}  // namespace

SweepResult run_sweep(const SweepSpec& spec, const SweepOptions& options) {
  SweepResult result;
  result.spec = spec.to_json();
  result.shard = options.shard;
  result.configurations = spec.size();
  std::vector<std::size_t> mine;
  for (std::size_t i = 0; i < result.configurations; ++i)
    if (options.shard.covers(i)) mine.push_back(i);

  struct Outcome {
    std::vector<SweepRow> rows;
    std::optional<SweepProblem> skipped, failed;
  };
  std::vector<Outcome> outcomes(mine.size());
  // One load (and fit) of each profile for the whole sweep, shared by the worker threads.
  const auto profiles = std::make_shared<model::ProfileCache>();
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done{0};
  std::mutex mu;
  std::condition_variable cv;

  // As in search: the pages of each run's dropped graphs kept for the next while the allocator holds
  // at most a quarter of the machine's memory (util/allocator.hpp).
  const util::KeepFreedPages kept(0.25);
  auto work = [&] {
    for (std::size_t k = next.fetch_add(1); k < mine.size(); k = next.fetch_add(1)) {
      kept.trim();
      const std::size_t config = mine[k];
      SimulateRequest request = spec.configuration(config);
      request.profiles = profiles;
      Outcome& out = outcomes[k];
      try {
        const SimulateReport report = simulate(request);
        for (const SimulateRun& run : report.runs) {
          SweepRow row{config, make_row(request, report, run)};
          row.cells[0] = static_cast<std::int64_t>(config);
          out.rows.push_back(std::move(row));
        }
      } catch (const InputError& e) {
        out.skipped = SweepProblem{config, describe(request, spec), e.file() + ": " + e.json_path(),
                                   one_line(e.message()), problem_rows(request, config), ""};
      } catch (const std::exception& e) {
        out.failed = SweepProblem{config, describe(request, spec), "internal error", one_line(e.what()),
                                  problem_rows(request, config), ""};
      }
      done.fetch_add(1);
      std::lock_guard<std::mutex> lock(mu);
      cv.notify_one();
    }
  };

  const int jobs = std::max(1, std::min<int>(options.jobs, static_cast<int>(std::max<std::size_t>(mine.size(), 1))));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(jobs));
  for (int t = 0; t < jobs; ++t) threads.emplace_back(work);
  {
    std::unique_lock<std::mutex> lock(mu);
    while (done.load() < mine.size()) {
      cv.wait_for(lock, std::chrono::milliseconds(100));
      if (options.progress) options.progress(done.load(), mine.size());
    }
  }
  for (auto& t : threads) t.join();
  if (options.progress) options.progress(mine.size(), mine.size());

  for (Outcome& o : outcomes) {
    if (o.skipped) result.skipped.push_back(std::move(*o.skipped));
    if (o.failed) result.failed.push_back(std::move(*o.failed));
    if (!o.skipped && !o.failed) ++result.run;
    for (SweepRow& r : o.rows) result.rows.push_back(std::move(r));
  }
  return result;
}

std::string sweep_json(const SweepResult& r) {
  // One row per line: a large sweep stays readable and a baseline diff shows the rows that changed.
  const auto& cols = columns();
  std::string out = "{\n";
  out += fmt::format("  \"format\": \"{}\",\n  \"version\": {},\n", kFormatName, kFormatVersion);
  out += "  \"spec\": " + r.spec.dump() + ",\n";
  out += fmt::format("  \"shard\": {{\"index\": {}, \"count\": {}}},\n", r.shard.index, r.shard.count);
  out += fmt::format("  \"configurations\": {},\n", r.configurations);
  out += fmt::format("  \"summary\": {{\"run\": {}, \"rows\": {}, \"skipped\": {}, \"failed\": {}}},\n", r.run,
                     r.rows.size(), r.skipped.size(), r.failed.size());
  out += "  \"rows\": [";
  bool first = true;
  for_each_row(
      r,
      [&](const SweepRow& row) {
        out += first ? "\n    {" : ",\n    {";
        first = false;
        for (std::size_t c = 0; c < cols.size(); ++c) {
          if (c > 0) out += ", ";
          out += fmt::format("\"{}\": {}", cols[c].name, cell_json(row.cells[c]));
        }
        out += "}";
      },
      // A configuration not simulated: its configuration columns, null metrics, its status.
      [&](const SweepProblem& p, const std::vector<Cell>& cells) {
        out += first ? "\n    {" : ",\n    {";
        first = false;
        for (std::size_t c = 0; c < cols.size(); ++c) {
          if (c > 0) out += ", ";
          const std::string value = c < kConfigColumns      ? cell_json(cells[c])
                                    : c + 1 == cols.size() ? nlohmann::json(problem_status(p)).dump()
                                                           : std::string("null");
          out += fmt::format("\"{}\": {}", cols[c].name, value);
        }
        out += "}";
      });
  out += first ? "],\n" : "\n  ],\n";
  auto problems = [&out](const char* name, const std::vector<SweepProblem>& v, bool last) {
    out += fmt::format("  \"{}\": [", name);
    for (std::size_t i = 0; i < v.size(); ++i) out += (i == 0 ? "\n    " : ",\n    ") + problem_json(v[i]).dump();
    out += v.empty() ? "]" : "\n  ]";
    out += last ? "\n" : ",\n";
  };
  problems("skipped", r.skipped, false);
  problems("failed", r.failed, true);
  out += "}\n";
  return out;
}

std::string sweep_csv(const SweepResult& r) {
  const auto& cols = columns();
  std::string out;
  for (std::size_t c = 0; c < cols.size(); ++c) out += (c ? "," : "") + std::string(cols[c].name);
  out += "\n";
  for_each_row(
      r,
      [&](const SweepRow& row) {
        for (std::size_t c = 0; c < cols.size(); ++c) {
          if (c) out += ',';
          out += cell_csv(row.cells[c]);
        }
        out += '\n';
      },
      // Empty metric cells: the configuration has none.
      [&](const SweepProblem& p, const std::vector<Cell>& cells) {
        for (std::size_t c = 0; c < cols.size(); ++c) {
          if (c) out += ',';
          if (c < kConfigColumns) out += cell_csv(cells[c]);
          else if (c + 1 == cols.size()) out += problem_status(p);
        }
        out += '\n';
      });
  return out;
}

namespace {

SweepProblem read_problem(const JsonValue& v) {
  const JsonObject o = v.as_object();
  SweepProblem p;
  p.config = static_cast<std::size_t>(o.integer("config", 0, std::int64_t{1} << 50));
  p.configuration = o.string("configuration");
  p.key = o.string("key");
  p.message = o.string("message");
  o.finish();
  return p;
}

}  // namespace

SweepResult read_sweep_json(const std::string& path) { return parse_sweep_json(JsonDocument::load(path)); }

PartHeader read_part_header(const JsonObject& root, const std::string& format, int version, const std::string& what) {
  if (root.string("format") != format)
    root.at("format").fail(fmt::format("not a {} file (expected \"{}\")", what, format));
  root.integer("version", version, version);
  PartHeader h;
  const JsonValue spec = root.at("spec");
  if (!spec.is_object()) spec.fail("expected an object");
  h.spec = spec.raw();
  const JsonObject shard = root.object("shard");
  h.shard.count = static_cast<int>(shard.integer("count", 1, 1'000'000));
  h.shard.index = static_cast<int>(shard.integer("index", 0, h.shard.count - 1));
  shard.finish();
  return h;
}

void check_shard_parts(const std::vector<std::string>& paths, const std::vector<Shard>& shards, const std::string& what) {
  if (shards.empty()) return;
  const int count = shards.front().count;
  std::vector<int> owner(static_cast<std::size_t>(count), -1);
  for (std::size_t p = 0; p < shards.size(); ++p) {
    if (shards[p].count != count)
      throw InputError(paths[p], "$.shard.count",
                       fmt::format("shard count {} but '{}' has {}", shards[p].count, paths[0], count));
    int& o = owner[static_cast<std::size_t>(shards[p].index)];
    if (o >= 0)
      throw InputError(paths[p], "$.shard.index",
                       fmt::format("shard {}/{} overlaps '{}', which holds the same shard", shards[p].index, count,
                                   paths[static_cast<std::size_t>(o)]));
    o = static_cast<int>(p);
  }
  std::vector<std::string> missing;
  for (std::size_t i = 0; i < owner.size(); ++i)
    if (owner[i] < 0) missing.push_back(std::to_string(i));
  if (!missing.empty())
    throw InputError(kCommandLine, "PARTS",
                     fmt::format("incomplete {}: shard{} {} of {} missing", what, missing.size() > 1 ? "s" : "",
                                 fmt::join(missing, ", "), count));
}

SweepResult parse_sweep_json(const JsonDocument& doc) {
  const JsonObject root = doc.root();
  const PartHeader header = read_part_header(root, kFormatName, kFormatVersion, "sweep");
  SweepResult r;
  r.spec = header.spec;
  r.shard = header.shard;
  r.configurations = static_cast<std::size_t>(root.integer("configurations", 0, std::int64_t{1} << 50));
  const JsonObject summary = root.object("summary");
  r.run = static_cast<std::size_t>(summary.integer("run", 0, std::int64_t{1} << 50));
  summary.integer("rows", 0, std::int64_t{1} << 50);
  summary.integer("skipped", 0, std::int64_t{1} << 50);
  summary.integer("failed", 0, std::int64_t{1} << 50);
  summary.finish();

  // The problems first: the rows of configurations not simulated belong to them.
  for (const char* name : {"skipped", "failed"}) {
    const JsonArray a = root.array(name);
    auto& dest = std::string(name) == "skipped" ? r.skipped : r.failed;
    for (std::size_t i = 0; i < a.size(); ++i) {
      SweepProblem p = read_problem(a.at(i));
      if (p.config >= r.configurations || !r.shard.covers(p.config))
        a.at(i).fail(fmt::format("configuration {} is not in shard {}/{}", p.config, r.shard.index, r.shard.count));
      dest.push_back(std::move(p));
    }
  }
  std::map<std::size_t, SweepProblem*> problem_of;
  for (auto* list : {&r.skipped, &r.failed})
    for (SweepProblem& p : *list) problem_of[p.config] = &p;

  const auto& cols = columns();
  const JsonArray rows = root.array("rows");
  std::size_t last_config = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const JsonObject o = rows.at(i).as_object();
    // Files written before the status column have simulated rows only.
    const std::string status = o.has("status") ? o.string("status") : std::string(kStatusOk);
    const bool ok = status == kStatusOk;
    SweepRow row;
    for (std::size_t ci = 0; ci + 1 < cols.size(); ++ci) {
      const Column& c = cols[ci];
      if (late_column(c.name) && !o.has(c.name)) {
        row.cells.push_back(late_cell(c));
        continue;
      }
      const JsonValue v = o.at(c.name);
      if (!ok && ci >= kConfigColumns) {
        if (!v.is_null()) v.fail(fmt::format("expected null: the row's status is {}", status));
        continue;
      }
      switch (c.kind) {
        case Kind::text:
          if (!v.is_string()) v.fail("expected a string");
          row.cells.emplace_back(v.raw().get<std::string>());
          break;
        case Kind::integer:
          if (!v.raw().is_number_integer()) v.fail("expected an integer");
          row.cells.emplace_back(v.raw().get<std::int64_t>());
          break;
        case Kind::number:
          row.cells.emplace_back(v.as_number());
          break;
      }
    }
    o.finish();
    row.config = static_cast<std::size_t>(std::get<std::int64_t>(row.cells[0]));
    if (row.config >= r.configurations || !r.shard.covers(row.config))
      o.at("config").fail(fmt::format("configuration {} is not in shard {}/{} of {} configurations", row.config,
                                      r.shard.index, r.shard.count, r.configurations));
    if (i > 0 && row.config < last_config) o.at("config").fail("rows are not in configuration order");
    last_config = row.config;
    const auto problem = problem_of.find(row.config);
    if (ok) {
      if (problem != problem_of.end())
        o.at("status").fail(fmt::format("configuration {} is listed as skipped or failed", row.config));
      row.cells.emplace_back(std::string(kStatusOk));
      r.rows.push_back(std::move(row));
    } else {
      if (problem == problem_of.end() || problem_status(*problem->second) != status)
        o.at("status").fail(fmt::format("configuration {} is not listed with status {} in skipped or failed",
                                        row.config, status));
      problem->second->rows.push_back(std::move(row.cells));
    }
  }
  root.finish();
  return r;
}

namespace {

// One CSV record (RFC 4180: quoted fields, "" inside quotes) from `text` at `pos`, which it moves past
// the line end. Throws InputError(file, "line N") on an unclosed quote.
std::vector<std::string> csv_record(const std::string& text, std::size_t& pos, const std::string& file, int line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  while (pos < text.size()) {
    const char c = text[pos++];
    if (quoted) {
      if (c == '"' && pos < text.size() && text[pos] == '"') {
        fields.back() += '"';
        ++pos;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"' && fields.back().empty()) {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c == '\n') {
      break;
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  if (quoted) throw InputError(file, fmt::format("line {}", line), "a quoted field is not closed");
  return fields;
}

}  // namespace

SweepResult read_sweep_csv(const std::string& path) {
  const std::string text = read_text_file(path);
  const auto& cols = columns();
  std::size_t pos = 0;
  const std::vector<std::string> header = csv_record(text, pos, path, 1);
  // The columns by name, so that a file written before the status column (the last) still reads.
  std::vector<std::size_t> index_of(cols.size(), std::string::npos);
  for (std::size_t h = 0; h < header.size(); ++h) {
    std::size_t c = 0;
    while (c < cols.size() && header[h] != cols[c].name) ++c;
    if (c == cols.size())
      throw InputError(path, fmt::format("line 1: column {}", h + 1),
                       fmt::format("'{}' is not a sweep column (not a file `fusesim sweep` wrote?)", header[h]));
    if (index_of[c] != std::string::npos)
      throw InputError(path, fmt::format("line 1: column {}", h + 1), fmt::format("'{}' appears twice", header[h]));
    index_of[c] = h;
  }
  for (std::size_t c = 0; c + 1 < cols.size(); ++c)
    if (index_of[c] == std::string::npos && !late_column(cols[c].name))
      throw InputError(path, "line 1", fmt::format("column '{}' is missing", cols[c].name));

  SweepResult r;
  r.spec = nlohmann::json::object();
  std::map<std::size_t, SweepProblem> problems;
  std::size_t max_config = 0;
  for (int line = 2; pos < text.size(); ++line) {
    const std::vector<std::string> f = csv_record(text, pos, path, line);
    if (f.size() == 1 && f[0].empty()) continue;  // a blank line
    const std::string where = fmt::format("line {}", line);
    if (f.size() != header.size())
      throw InputError(path, where, fmt::format("{} fields, but the header has {}", f.size(), header.size()));
    const std::size_t si = index_of.back();
    const std::string status = si == std::string::npos ? std::string(kStatusOk) : f[si];
    const bool ok = status == kStatusOk;
    if (!ok && status != "failed" && status.rfind("skipped-", 0) != 0)
      throw InputError(path, where + ": status", fmt::format("'{}' is not ok, failed or skipped-<reason>", status));
    SweepRow row;
    for (std::size_t c = 0; c + 1 < cols.size(); ++c) {
      if (index_of[c] == std::string::npos) {  // a late column, not in an older file
        row.cells.push_back(late_cell(cols[c]));
        continue;
      }
      const std::string& v = f[index_of[c]];
      if (!ok && c >= kConfigColumns) {
        if (!v.empty()) throw InputError(path, where + ": " + cols[c].name, fmt::format("expected no value: the status is {}", status));
        continue;
      }
      const std::string at = where + ": " + cols[c].name;
      if (cols[c].kind == Kind::text) {
        row.cells.emplace_back(v);
      } else if (cols[c].kind == Kind::integer) {
        std::int64_t x = 0;
        const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        if (v.empty() || ec != std::errc() || ptr != v.data() + v.size())
          throw InputError(path, at, fmt::format("'{}' is not an integer", v));
        row.cells.emplace_back(x);
      } else {
        // JSON's number syntax, the form the writer uses (no "nan", "inf" or hex).
        nlohmann::json x;
        try {
          x = nlohmann::json::parse(v);
        } catch (const nlohmann::json::exception&) {
        }
        if (!x.is_number() || !std::isfinite(x.get<double>()))
          throw InputError(path, at, fmt::format("'{}' is not a finite number", v));
        row.cells.emplace_back(x.get<double>());
      }
    }
    const std::int64_t config = std::get<std::int64_t>(row.cells[0]);
    if (config < 0) throw InputError(path, where + ": config", "must be at least 0");
    row.config = static_cast<std::size_t>(config);
    if (!r.rows.empty() && row.config < r.rows.back().config)
      throw InputError(path, where + ": config", "rows are not in configuration order");
    max_config = std::max(max_config, row.config);
    if (ok) {
      row.cells.emplace_back(std::string(kStatusOk));
      r.rows.push_back(std::move(row));
    } else {
      SweepProblem& p = problems[row.config];
      if (!p.status.empty() && p.status != status)
        throw InputError(path, where + ": status", fmt::format("configuration {} is also {}", row.config, p.status));
      p.config = row.config;
      p.status = status;
      // The reason itself is in the JSON file only; the CSV keeps its class.
      p.key = status == "failed" ? "internal error" : path + ": line " + std::to_string(line);
      p.message = status;
      p.rows.push_back(std::move(row.cells));
    }
  }
  for (auto& [config, p] : problems) (p.status == "failed" ? r.failed : r.skipped).push_back(std::move(p));
  r.configurations = r.rows.empty() && problems.empty() ? 0 : max_config + 1;
  r.run = 0;
  for (std::size_t i = 0; i < r.rows.size(); ++i)
    if (i == 0 || r.rows[i].config != r.rows[i - 1].config) ++r.run;
  return r;
}

SweepResult read_sweep_file(const std::string& path) {
  const bool csv = path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
  return csv ? read_sweep_csv(path) : read_sweep_json(path);
}

SweepResult merge_sweeps(const std::vector<std::string>& paths, const std::vector<SweepResult>& parts) {
  if (parts.empty()) throw InputError(kCommandLine, "PARTS", "no sweep parts given");
  const SweepResult& first = parts.front();
  std::vector<Shard> shards;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const SweepResult& part = parts[p];
    if (part.spec != first.spec)
      throw InputError(paths[p], "$.spec", fmt::format("a different sweep than '{}' (the specs differ)", paths[0]));
    if (part.configurations != first.configurations && part.shard.count == first.shard.count)
      throw InputError(paths[p], "$.configurations", fmt::format("differs from '{}'", paths[0]));
    shards.push_back(part.shard);
  }
  check_shard_parts(paths, shards, "sweep");

  SweepResult all;
  all.spec = first.spec;
  all.configurations = first.configurations;
  for (const SweepResult& part : parts) {
    all.run += part.run;
    all.rows.insert(all.rows.end(), part.rows.begin(), part.rows.end());
    all.skipped.insert(all.skipped.end(), part.skipped.begin(), part.skipped.end());
    all.failed.insert(all.failed.end(), part.failed.begin(), part.failed.end());
  }
  // Rows of one configuration come from one part, already in run order; a stable sort keeps it.
  auto by_config = [](const auto& a, const auto& b) { return a.config < b.config; };
  std::stable_sort(all.rows.begin(), all.rows.end(), by_config);
  std::stable_sort(all.skipped.begin(), all.skipped.end(), by_config);
  std::stable_sort(all.failed.begin(), all.failed.end(), by_config);
  return all;
}

std::string output_format_for(const std::string& path, const std::string& format) {
  if (!format.empty()) {
    if (format != "csv" && format != "json")
      throw InputError(kCommandLine, "--format", fmt::format("'{}' is not one of csv, json", format));
    return format;
  }
  auto ends = [&path](const std::string& ext) {
    return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (ends(".csv")) return "csv";
  if (ends(".json")) return "json";
  if (path == "-") return "csv";  // standard output, as when no --output is given
  throw InputError(kCommandLine, "--output",
                   fmt::format("cannot tell the format of '{}': name it .csv or .json, or give --format", path));
}

std::string sweep_summary(const SweepResult& r) {
  std::size_t mine = 0;
  for (std::size_t i = 0; i < r.configurations; ++i)
    if (r.shard.covers(i)) ++mine;
  std::string out = fmt::format("sweep: {} configurations", r.configurations);
  if (r.shard.count > 1) out += fmt::format(", shard {}/{} holds {}", r.shard.index, r.shard.count, mine);
  out += fmt::format(": {} run ({} rows), {} skipped as invalid, {} failed\n", r.run, r.rows.size(), r.skipped.size(),
                     r.failed.size());
  auto grouped = [&out](const char* what, const std::vector<SweepProblem>& v) {
    // Reasons that differ only in their numbers (sizes, degrees) are one reason.
    auto shape = [](const SweepProblem& p) {
      std::string s = p.key + "|";
      for (std::size_t i = 0; i < p.message.size(); ++i) {
        const bool digit = std::isdigit(static_cast<unsigned char>(p.message[i])) != 0;
        if (digit && !s.empty() && s.back() == '#') continue;
        if (p.message[i] == '.' && !s.empty() && s.back() == '#') continue;
        s += digit ? '#' : p.message[i];
      }
      return s;
    };
    std::map<std::string, std::pair<std::size_t, const SweepProblem*>> groups;
    for (const SweepProblem& p : v) {
      auto& g = groups[shape(p)];
      if (g.first++ == 0) g.second = &p;
    }
    for (const auto& [shape_key, g] : groups)
      out += fmt::format("  {} {} at {}, e.g. {}: {}\n", what, g.first, g.second->key, g.second->configuration,
                         g.second->message);
  };
  grouped("skipped", r.skipped);
  grouped("failed", r.failed);
  return out;
}

}  // namespace fusesim::cli
