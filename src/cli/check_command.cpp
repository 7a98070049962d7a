// `fusesim check`: re-runs the configurations recorded in a baseline file and fails (exit 1) when a
// metric got worse than recorded by more than the tolerance. File format: docs/cli.md.
#include <charconv>
#include <cmath>
#include <memory>
#include <ostream>
#include <set>

#include <fmt/format.h>

#include "fusesim/cli/commands.hpp"
#include "fusesim/cli/input_readers.hpp"
#include "fusesim/cli/overrides.hpp"
#include "fusesim/cli/simulate.hpp"
#include "fusesim/cli/sweep.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

constexpr const char* kFormatName = "fusesim-baseline";
constexpr int kFormatVersion = 1;

// The metrics a baseline records, and which way is worse.
struct Guarded {
  const char* name;
  bool higher_is_worse;
};
constexpr Guarded kGuarded[] = {
    {"step_time_s", true},        {"exposed_comm_s", true}, {"head_latency_s", true},
    {"tail_only_latency_s", true}, {"overlap_ratio", false},  {"mfu", false},
    {"hfu", false},               {"tokens_per_s", false},
};
// A baseline recorded before head_plus_tail_latency_s had its name carries it as tail_latency_s
// (still in every result for one release): read and compared as it was recorded.
constexpr const char* kDeprecatedTail = "tail_latency_s";
// Differences below this are the same value (all guarded metrics are seconds or ratios of order 1 or
// above 1e-9; a picosecond is 1e-12 s).
constexpr double kNoise = 1e-12;

struct Entry {
  std::string path;              // "$.entries[3]"
  nlohmann::json config;         // the entry as read, without "metrics" (rewritten as it came)
  SimulateRequest request;
  std::string schedule, scope, parallelism;
  std::vector<std::pair<std::string, double>> metrics;  // recorded, in kGuarded order
  std::string label;             // for the diff table
};

double parse_tolerance(const std::string& text) {
  std::string t = text;
  double scale = 1.0;
  if (!t.empty() && t.back() == '%') {
    t.pop_back();
    scale = 0.01;
  }
  double v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || ptr != t.data() + t.size() || !std::isfinite(v) || v < 0 ||
      v * scale > 10.0)
    throw InputError(kCommandLine, "--tolerance",
                     fmt::format("'{}' is not a tolerance: a percentage (2%) or a fraction (0.02), at most 1000%",
                                 text));
  return v * scale;
}

std::string short_label(const std::string& name_or_path) {
  const auto slash = name_or_path.find_last_of('/');
  std::string s = slash == std::string::npos ? name_or_path : name_or_path.substr(slash + 1);
  if (s.size() > 5 && s.compare(s.size() - 5, 5, ".json") == 0) s.resize(s.size() - 5);
  return s;
}

Entry read_entry(const JsonValue& value, bool need_metrics) {
  const JsonObject o = value.as_object();
  Entry e;
  e.path = value.path();
  SimulateRequest& r = e.request;
  r.topology = o.string("topology");
  r.workload = o.string("workload");
  e.config["topology"] = r.topology;
  e.config["workload"] = r.workload;
  if (auto p = o.find("parallelism")) {
    e.parallelism = p->as_string();
    const std::optional<sched::Parallelism> par = sched::parse_parallelism(e.parallelism);
    // custom names a user's graph, pp the stage transfers: neither has schedules to compare
    if (!par || *par == sched::Parallelism::custom || *par == sched::Parallelism::pp)
      p->fail(fmt::format("'{}' is not one of tpsp, up, dp", e.parallelism));
    r.parallelisms = {*par};
    e.config["parallelism"] = e.parallelism;
  }
  // The workload overrides (cli/overrides.hpp), by their keys, within the bounds the command line has.
  for (const WorkloadOverride& k : workload_overrides()) {
    const std::string name(k.key);
    if (auto v = o.find(name)) {
      const std::int64_t x = v->as_integer(1, k.max);
      e.config[name] = x;
      k.request(r, x);
    }
  }
  for (const NamedOverride& k : named_overrides()) {
    const std::string name(k.key);
    if (auto v = o.find(name)) {
      const std::string x = v->as_string();
      if (!k.known(x)) v->fail(k.unknown(x));
      e.config[name] = x;
      r.*k.field = x;
    }
  }
  e.scope = "layer";
  if (auto sc = o.find("scope")) {
    e.scope = sc->as_string();
    e.config["scope"] = e.scope;
    // The scopes simulate knows (parse_scopes), one per entry.
    try {
      r.scopes = parse_scopes(e.scope);
    } catch (const InputError& err) {
      sc->fail(err.message());
    }
    if (r.scopes.size() != 1) sc->fail("one scope per entry");
  } else {
    r.scopes = {sched::Scope::layer};
  }
  e.schedule = o.choice("schedule", {"baseline", "slice", "commfuse"});
  e.config["schedule"] = e.schedule;
  r.schedules = parse_schedules(e.schedule);
  if (auto f = o.find("forward_only")) {
    r.forward_only = f->as_bool();
    e.config["forward_only"] = r.forward_only;
  }
  if (auto f = o.find("force_memory")) {
    r.force_memory = f->as_bool();
    e.config["force_memory"] = r.force_memory;
  }
  std::string profile;
  bool roofline = false;
  if (auto p = o.find("profile")) {
    profile = p->as_string();
    e.config["profile"] = profile;
  }
  if (auto f = o.find("roofline")) {
    roofline = f->as_bool();
    e.config["roofline"] = roofline;
  }
  try {
    r.pricing = model::pricing_choice(profile, roofline);
  } catch (const InputError& err) {
    o.at("roofline").fail(err.message());
  }
  if (auto m = o.find("metrics")) {
    const JsonObject mo = m->as_object();
    for (const Guarded& g : kGuarded)
      if (auto v = mo.find(g.name)) e.metrics.emplace_back(g.name, v->as_number(0.0, 1e30));
    if (auto v = mo.find(kDeprecatedTail)) e.metrics.emplace_back(kDeprecatedTail, v->as_number(0.0, 1e30));
    mo.finish();
  } else if (need_metrics) {
    o.at("metrics").fail("no metrics recorded for this entry; record them with `fusesim check --update`");
  }
  o.finish();
  e.label = fmt::format("{} {}", short_label(r.topology), short_label(r.workload));
  if (!e.parallelism.empty()) e.label += " " + e.parallelism;
  for (const WorkloadOverride& k : workload_overrides())
    if (const std::string name(k.key); e.config.contains(name))
      e.label += fmt::format(" {}={}", name == "sequence_length" ? "seq" : name, e.config[name].get<std::int64_t>());
  for (const NamedOverride& k : named_overrides())
    if (const std::string name(k.key); e.config.contains(name))
      e.label += fmt::format(" {}={}", name, e.config[name].get<std::string>());
  e.label += " " + e.scope;
  return e;
}

std::vector<Entry> read_baseline(const JsonDocument& doc, bool need_metrics, std::string& description) {
  const JsonObject root = doc.root();
  if (root.string("format") != kFormatName)
    root.at("format").fail(fmt::format("not a baseline file (expected \"{}\")", kFormatName));
  root.integer("version", kFormatVersion, kFormatVersion);
  description = root.string_or("description", "");
  const JsonArray list = root.array("entries");
  std::vector<Entry> entries;
  for (std::size_t i = 0; i < list.size(); ++i) entries.push_back(read_entry(list.at(i), need_metrics));
  root.finish();
  return entries;
}

// Runs an entry; its metrics as analysis::to_json names them. What priced its kernels goes into
// `pricing` (a report names it).
nlohmann::json rerun(const Entry& e, const std::string& baseline_file,
                     const std::shared_ptr<model::ProfileCache>& profiles, std::set<std::string>& pricing) {
  try {
    SimulateRequest request = e.request;
    request.profiles = profiles;
    const SimulateReport report = simulate(request);
    pricing.insert(report.pricing);
    const SimulateRun* found = nullptr;
    for (const SimulateRun& run : report.runs) {
      if (run.metrics.schedule != e.schedule || run.metrics.scope != e.scope) continue;
      if (!e.parallelism.empty() && run.metrics.parallelism != e.parallelism) continue;
      if (found != nullptr)
        throw InputError(baseline_file, e.path + ".parallelism",
                         "the workload compares several parallelisms; name the one this entry records");
      found = &run;
    }
    if (found == nullptr)
      throw InputError(baseline_file, e.path, "the simulation produced no run of this schedule and scope");
    return analysis::to_json(found->metrics);
  } catch (const InputError& err) {
    if (err.file() == baseline_file) throw;
    // A configuration that no longer runs is the baseline's problem to fix (or the change's).
    throw InputError(baseline_file, e.path,
                     fmt::format("this configuration does not run: {}: {}: {}", err.file(), err.json_path(),
                                 err.message()));
  }
}

std::string percent(double old_value, double new_value) {
  if (old_value == 0.0) return new_value == 0.0 ? "0%" : "new";
  return fmt::format("{:+.2f}%", (new_value - old_value) / std::fabs(old_value) * 100.0);
}

std::string write_baseline(const std::string& description, const std::vector<Entry>& entries,
                           const std::vector<nlohmann::json>& now) {
  // One entry per line: a model change shows in a diff as the entries whose metrics moved.
  std::string out = fmt::format("{{\n  \"format\": \"{}\",\n  \"version\": {},\n", kFormatName, kFormatVersion);
  if (!description.empty()) out += "  \"description\": " + nlohmann::json(description).dump() + ",\n";
  out += "  \"entries\": [";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    std::vector<std::string> fields;
    auto add = [&fields, &e](const std::string& key) {
      if (e.config.contains(key)) fields.push_back(fmt::format("\"{}\": {}", key, e.config[key].dump()));
    };
    for (const char* k : {"topology", "workload", "parallelism"}) add(k);
    for (const WorkloadOverride& k : workload_overrides()) add(std::string(k.key));
    for (const NamedOverride& k : named_overrides()) add(std::string(k.key));
    for (const char* k : {"scope", "schedule", "forward_only", "force_memory", "profile", "roofline"}) add(k);
    std::vector<std::string> metrics;
    for (const Guarded& g : kGuarded)
      metrics.push_back(fmt::format("\"{}\": {}", g.name, nlohmann::json(now[i].at(g.name).get<double>()).dump()));
    fields.push_back(fmt::format("\"metrics\": {{{}}}", fmt::join(metrics, ", ")));
    out += fmt::format("{}\n    {{{}}}", i == 0 ? "" : ",", fmt::join(fields, ", "));
  }
  out += entries.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

class CheckCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.add_option("--baseline", baseline_, "the baseline file (configurations and their recorded metrics)")
        ->type_name("FILE")
        ->required();
    sub.add_option("--tolerance", tolerance_, "how much worse a metric may get: a percentage or a fraction")
        ->type_name("PCT")
        ->capture_default_str();
    sub.add_flag("--update", update_, "record the metrics of this build in the baseline (accept the change)");
  }

  int run(Io& io) override {
    const double tol = parse_tolerance(tolerance_);
    std::string description;
    const std::vector<Entry> entries = read_baseline(JsonDocument::load(baseline_), !update_, description);

    std::vector<nlohmann::json> now;
    const auto profiles = std::make_shared<model::ProfileCache>();
    std::set<std::string> pricing;
    for (const Entry& e : entries) now.push_back(rerun(e, baseline_, profiles, pricing));

    struct Line {
      std::string status, label, schedule, metric, before, after, change;
    };
    std::vector<Line> lines;
    std::size_t regressed = 0, improved = 0, within = 0, unchanged = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      for (const auto& [name, before] : e.metrics) {
        const double after = now[i].at(name).get<double>();
        bool higher_is_worse = true;
        for (const Guarded& g : kGuarded)
          if (name == g.name) higher_is_worse = g.higher_is_worse;
        const double worse_by = higher_is_worse ? after - before : before - after;
        const double allowed = tol * std::fabs(before);
        std::string status;
        if (std::fabs(after - before) <= kNoise) {
          ++unchanged;
          continue;
        }
        if (worse_by > allowed + kNoise) {
          status = "REGRESSED";
          ++regressed;
        } else if (-worse_by > allowed + kNoise) {
          status = "improved";
          ++improved;
        } else {
          ++within;
          continue;
        }
        lines.push_back({status, e.label, e.schedule, name, fmt::format("{:.6g}", before), fmt::format("{:.6g}", after),
                         percent(before, after)});
      }
    }

    const std::string tol_text = fmt::format("{:g}%", tol * 100.0);
    io.out << fmt::format("fusesim check: {}: {} runs re-simulated, tolerance {}\n", baseline_, entries.size(),
                          tol_text);
    for (const std::string& p : pricing) io.out << "kernels priced by " << p << "\n";
    if (!lines.empty()) {
      Line head{"status", "configuration", "schedule", "metric", "baseline", "now", "change"};
      std::size_t w[7] = {};
      auto widen = [&w](const Line& l) {
        const std::string* f[7] = {&l.status, &l.label, &l.schedule, &l.metric, &l.before, &l.after, &l.change};
        for (int k = 0; k < 7; ++k) w[k] = std::max(w[k], f[k]->size());
      };
      widen(head);
      for (const Line& l : lines) widen(l);
      auto print = [&](const Line& l) {
        io.out << fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>{}}  {:>{}}  {:>{}}\n", l.status, w[0], l.label, w[1],
                              l.schedule, w[2], l.metric, w[3], l.before, w[4], l.after, w[5], l.change, w[6]);
      };
      print(head);
      for (const Line& l : lines) print(l);
    }
    const std::string counts =
        fmt::format("{} regressed (worse by more than {}), {} improved beyond it, {} changed within it, {} unchanged",
                    regressed, tol_text, improved, within, unchanged);
    if (update_) {
      write_output_file(baseline_, write_baseline(description, entries, now), "--baseline");
      io.out << fmt::format("updated {}: {}; the file now records the metrics of this build\n", baseline_, counts);
      return 0;
    }
    if (regressed > 0) {
      io.out << "FAIL: " << counts << "\n";
      io.out << "If the change is intended (a model change), accept it with: fusesim check --baseline " << baseline_
             << " --update\n";
      return 1;
    }
    io.out << "ok: " << counts << "\n";
    if (improved > 0)
      io.out << "Improvements pass; record them with: fusesim check --baseline " << baseline_ << " --update\n";
    return 0;
  }

 private:
  std::string baseline_;
  std::string tolerance_ = "2%";
  bool update_ = false;
};

}  // namespace

void check_baseline(const JsonDocument& doc, bool need_metrics) {
  std::string description;
  read_baseline(doc, need_metrics, description);
}

std::unique_ptr<Command> make_check_command() { return std::make_unique<CheckCommand>(); }

}  // namespace fusesim::cli
