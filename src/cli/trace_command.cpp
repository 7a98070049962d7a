// `fusesim trace import`: measured Kineto traces (one file per rank) read into the measures simulate
// reports for a simulated step (analysis/kineto.hpp, docs/traces.md).
#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fusesim/analysis/kineto.hpp"
#include "fusesim/analysis/table.hpp"
#include "fusesim/cli/commands.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

std::string ms(TimePs ps) { return fmt::format("{:.3f}", ps_to_seconds(ps) * 1e3); }

std::string share(TimePs part, TimePs whole) {
  return whole > 0 ? fmt::format("{:.1f}", 100.0 * static_cast<double>(part) / static_cast<double>(whole)) : "-";
}

class TraceCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.require_subcommand(1, 1);
    import_ = sub.add_subcommand("import", "read Kineto traces (a file per rank, .json or .json.gz) and print, per "
                                           "rank and profiler step, compute, communication, overlapped and exposed "
                                           "communication, idle time and the time by kernel class");
    import_->add_option("traces", files_, "trace files, one per rank (rank: the trace's distributedInfo, else the "
                                          "file's place in this list)")
        ->required();
    import_->add_option("--format", format_, "table or json")->capture_default_str();
    import_->add_option("--output", output_, "write to this file instead of standard output");

    compare_ = sub.add_subcommand("compare", "put a measured step (a Kineto trace) beside a simulated one (a Chrome "
                                             "trace of `fusesim simulate --trace`): the time by kernel class and "
                                             "the step's measures, measured against predicted, and with "
                                             "--side-by-side one Chrome trace holding both, aligned at the step "
                                             "start");
    compare_->add_option("measured", measured_, "the measured rank's Kineto trace (.json or .json.gz)")->required();
    compare_->add_option("simulated", simulated_, "fusesim's Chrome trace of the same workload (simulate --trace)")
        ->required();
    compare_->add_option("--step", step_, "the measured profiler step (ProfilerStep#N; default: the first)");
    compare_->add_option("--rank", sim_rank_, "the simulated rank to compare (default: the measured trace's rank)");
    compare_->add_option("--side-by-side", side_by_side_,
                         "write one Chrome trace with the measured step and the simulated rank as two processes, "
                         "both from 0 at their first activity (gzip-compressed when FILE ends in .gz)");
    compare_->add_option("--format", format_, "table or json")->capture_default_str();
    compare_->add_option("--output", output_, "write to this file instead of standard output");
  }

  int run(Io& io) override {
    if (format_ != "table" && format_ != "json")
      throw InputError(kCommandLine, "--format", fmt::format("'{}' is not table or json", format_));
    if (!output_.empty()) check_output_path(output_);
    if (compare_->parsed()) return compare(io);
    std::vector<analysis::MeasuredTrace> traces;
    for (std::size_t i = 0; i < files_.size(); ++i)
      traces.push_back(analysis::import_kineto(files_[i], static_cast<int>(i)));
    std::string text;
    if (format_ == "json") {
      nlohmann::json doc = nlohmann::json::array();
      for (const auto& t : traces) doc.push_back(analysis::to_json(t));
      text = doc.dump(2) + "\n";
    } else {
      text = render(traces);
    }
    if (output_.empty())
      io.out << text << std::flush;
    else
      write_output_file(output_, text);
    return 0;
  }

 private:
  int compare(Io& io) {
    if (!side_by_side_.empty()) check_output_path(side_by_side_, "--side-by-side");
    analysis::TraceReadOptions keep;
    keep.keep_activities = !side_by_side_.empty();
    keep.gemm_shapes = true;
    const analysis::MeasuredTrace measured = analysis::import_kineto(measured_, 0, keep);
    if (measured.steps.empty())
      throw InputError(measured_, "$.traceEvents", "no GPU activity (kernel, memcpy, memset) in a profiled step");
    const analysis::MeasuredStep* m = &measured.steps.front();
    if (step_) {
      const auto it = std::find_if(measured.steps.begin(), measured.steps.end(),
                                   [&](const analysis::MeasuredStep& x) { return x.step == *step_; });
      if (it == measured.steps.end())
        throw InputError(kCommandLine, "--step", fmt::format("{} has no ProfilerStep#{}", measured_, *step_));
      m = &*it;
    }
    analysis::TraceReadOptions sim_options = keep;
    sim_options.simulated_rank = sim_rank_ ? *sim_rank_ : measured.rank;
    if (*sim_options.simulated_rank < 0)
      throw InputError(kCommandLine, "--rank", fmt::format("{} is not a rank", *sim_options.simulated_rank));
    const analysis::MeasuredTrace sim = analysis::import_kineto(simulated_, 0, sim_options);
    if (sim.steps.empty())
      throw InputError(simulated_, "$.traceEvents",
                       fmt::format("no compute or communication slice of rank {} (pid {}): not a trace of "
                                   "`fusesim simulate --trace`, or that rank was not traced",
                                   *sim_options.simulated_rank, *sim_options.simulated_rank));
    const analysis::MeasuredStep& p = sim.steps.front();

    std::string text;
    if (format_ == "json") {
      text = compare_json(measured, *m, sim, p).dump(2) + "\n";
    } else {
      text = compare_table(measured, *m, sim, p);
    }
    if (!side_by_side_.empty())
      write_maybe_gzipped(side_by_side_, side_by_side(measured, *m, sim, p).dump() + "\n", "--side-by-side");
    if (output_.empty())
      io.out << text << std::flush;
    else
      write_output_file(output_, text);
    return 0;
  }

  // The rows compared: the step's measures, then the busy time of every class either side has.
  static std::vector<std::pair<std::string, std::pair<TimePs, TimePs>>> rows(const analysis::MeasuredStep& m,
                                                                           const analysis::MeasuredStep& p) {
    std::vector<std::pair<std::string, std::pair<TimePs, TimePs>>> out{
        {"step span", {m.span_ps, p.span_ps}},
        {"compute", {m.compute_ps, p.compute_ps}},
        {"communication", {m.comm_ps, p.comm_ps}},
        {"overlapped communication", {m.overlapped_comm_ps, p.overlapped_comm_ps}},
        {"exposed communication", {m.exposed_comm_ps, p.exposed_comm_ps}},
        {"memcpy/memset", {m.memory_ps, p.memory_ps}},
        {"idle", {m.idle_ps, p.idle_ps}}};
    std::map<analysis::MeasuredClass, std::pair<TimePs, TimePs>> classes;
    for (const auto& [c, v] : m.by_class_ps) classes[c].first = v;
    for (const auto& [c, v] : p.by_class_ps) classes[c].second = v;
    for (const auto& [c, v] : classes) out.push_back({"class " + analysis::to_string(c), v});
    return out;
  }

  // GEMMs by shape, both sides: a shape and its transpose (C = A B against C^T = B^T A^T, the same
  // FLOPs and the same kernel family) are one row, named as the measured side has it.
  struct ShapeRow {
    std::string shape;
    std::int64_t measured_calls = 0, simulated_calls = 0;
    TimePs measured_ps = 0, simulated_ps = 0;
  };
  static std::vector<ShapeRow> gemm_rows(const analysis::MeasuredStep& m, const analysis::MeasuredStep& p) {
    std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>, ShapeRow> rows;
    const auto key = [](const analysis::MeasuredGemm& g) {
      return std::make_tuple(g.batch, g.k, std::min(g.m, g.n), std::max(g.m, g.n));
    };
    const auto name = [](const analysis::MeasuredGemm& g) {
      return g.batch > 1 ? fmt::format("{} x {}x{}x{}", g.batch, g.m, g.n, g.k) : fmt::format("{}x{}x{}", g.m, g.n, g.k);
    };
    for (const auto& g : m.gemms) {
      ShapeRow& r = rows[key(g)];
      if (r.shape.empty()) r.shape = name(g);
      ++r.measured_calls;
      r.measured_ps += g.time_ps;
    }
    for (const auto& g : p.gemms) {
      ShapeRow& r = rows[key(g)];
      if (r.shape.empty()) r.shape = name(g);
      ++r.simulated_calls;
      r.simulated_ps += g.time_ps;
    }
    std::vector<ShapeRow> out;
    for (auto& [k, r] : rows) out.push_back(std::move(r));
    std::stable_sort(out.begin(), out.end(), [](const ShapeRow& a, const ShapeRow& b) {
      return std::max(a.measured_ps, a.simulated_ps) > std::max(b.measured_ps, b.simulated_ps);
    });
    return out;
  }

  // Collectives by normalized op, both sides: calls, summed kernel time, and the full buffer (the
  // larger of a measured call's input and output, nccl-tests' convention, which fusesim's "bytes" is)
  // when every call of the op recorded its size.
  struct CollRow {
    std::int64_t calls[2] = {0, 0};
    TimePs time_ps[2] = {0, 0};
    std::int64_t bytes[2] = {0, 0};
    bool sized[2] = {true, true};
  };
  static std::map<std::string, CollRow> collective_rows(const analysis::MeasuredStep& m,
                                                        const analysis::MeasuredStep& p) {
    std::map<std::string, CollRow> rows;
    for (int side = 0; side < 2; ++side)
      for (const auto& c : (side == 0 ? m : p).collectives) {
        CollRow& r = rows[analysis::normalized_collective(c.op)];
        r.calls[side] += c.calls;
        r.time_ps[side] += c.time_ps;
        if (c.calls_with_size == c.calls)
          r.bytes[side] += side == 0 ? std::max(c.in_bytes, c.out_bytes) : c.in_bytes;
        else
          r.sized[side] = false;
      }
    return rows;
  }

  static std::string error_pct(TimePs measured, TimePs simulated) {
    return measured > 0 && simulated > 0
               ? fmt::format("{:+.1f}", 100.0 * (static_cast<double>(simulated) / static_cast<double>(measured) - 1.0))
               : "-";
  }

  static std::string step_name(const analysis::MeasuredStep& m) {
    return m.step < 0 ? std::string("all") : fmt::format("{}", m.step);
  }

  std::string compare_table(const analysis::MeasuredTrace& mt, const analysis::MeasuredStep& m,
                            const analysis::MeasuredTrace& pt, const analysis::MeasuredStep& p) const {
    using analysis::Align;
    analysis::Table t({{"measure", Align::left},
                       {"measured ms", Align::right},
                       {"simulated ms", Align::right},
                       {"error %", Align::right}});
    for (const auto& [name, v] : rows(m, p))
      t.add_row({name, ms(v.first), ms(v.second),
                 v.first > 0 ? fmt::format("{:+.1f}", 100.0 * (static_cast<double>(v.second) /
                                                                   static_cast<double>(v.first) - 1.0))
                             : "-"});
    std::string out =
        fmt::format("measured:  {} (rank {}, step {}, {} GPU activities{})\nsimulated: {} (rank {}, {} slices)\n\n",
                    mt.file, m.rank, step_name(m), m.kernels, mt.device.empty() ? "" : ", " + mt.device, pt.file,
                    p.rank, p.kernels) +
        t.render();
    const auto colls = collective_rows(m, p);
    if (!colls.empty()) {
      analysis::Table c({{"collective", Align::left},
                         {"measured calls", Align::right},
                         {"measured ms", Align::right},
                         {"measured MB", Align::right},
                         {"simulated calls", Align::right},
                         {"simulated ms", Align::right},
                         {"simulated MB", Align::right},
                         {"error %", Align::right}});
      const auto mb = [](const CollRow& r, int side) {
        return r.calls[side] && r.sized[side] ? fmt::format("{:.3f}", static_cast<double>(r.bytes[side]) / 1e6)
                                              : std::string("-");
      };
      for (const auto& [op, r] : colls)
        c.add_row({op, fmt::format("{}", r.calls[0]), ms(r.time_ps[0]), mb(r, 0), fmt::format("{}", r.calls[1]),
                   ms(r.time_ps[1]), mb(r, 1), error_pct(r.time_ps[0], r.time_ps[1])});
      out += "\nCollectives (kernel time summed; MB: the full buffer of every call, where recorded)\n" + c.render();
    }
    const std::vector<ShapeRow> shapes = gemm_rows(m, p);
    if (!shapes.empty()) {
      analysis::Table g({{"GEMM m x n x k", Align::left},
                         {"measured calls", Align::right},
                         {"measured ms", Align::right},
                         {"simulated calls", Align::right},
                         {"simulated ms", Align::right},
                         {"error %", Align::right}});
      for (const ShapeRow& r : shapes)
        g.add_row({r.shape, fmt::format("{}", r.measured_calls), ms(r.measured_ps), fmt::format("{}", r.simulated_calls),
                   ms(r.simulated_ps), error_pct(r.measured_ps, r.simulated_ps)});
      out += "\nGEMMs by shape (measured: a trace taken with record_shapes=True; a shape and its transpose are one "
             "row)\n" + g.render();
    }
    return out;
  }

  nlohmann::json compare_json(const analysis::MeasuredTrace& mt, const analysis::MeasuredStep& m,
                              const analysis::MeasuredTrace& pt, const analysis::MeasuredStep& p) const {
    nlohmann::json measures = nlohmann::json::array();
    for (const auto& [name, v] : rows(m, p))
      measures.push_back({{"measure", name},
                          {"measured_s", ps_to_seconds(v.first)},
                          {"simulated_s", ps_to_seconds(v.second)},
                          {"error", v.first > 0 ? nlohmann::json(static_cast<double>(v.second) /
                                                                     static_cast<double>(v.first) - 1.0)
                                                : nlohmann::json(nullptr)}});
    nlohmann::json gemms = nlohmann::json::array();
    for (const ShapeRow& r : gemm_rows(m, p))
      gemms.push_back({{"shape", r.shape},
                       {"measured_calls", r.measured_calls},
                       {"measured_s", ps_to_seconds(r.measured_ps)},
                       {"simulated_calls", r.simulated_calls},
                       {"simulated_s", ps_to_seconds(r.simulated_ps)}});
    nlohmann::json colls = nlohmann::json::array();
    for (const auto& [op, r] : collective_rows(m, p)) {
      nlohmann::json j = {{"collective", op},
                          {"measured_calls", r.calls[0]},
                          {"measured_s", ps_to_seconds(r.time_ps[0])},
                          {"simulated_calls", r.calls[1]},
                          {"simulated_s", ps_to_seconds(r.time_ps[1])}};
      if (r.calls[0] && r.sized[0]) j["measured_bytes"] = r.bytes[0];
      if (r.calls[1] && r.sized[1]) j["simulated_bytes"] = r.bytes[1];
      colls.push_back(std::move(j));
    }
    return {{"measured", {{"file", mt.file}, {"rank", m.rank}, {"step", m.step}, {"activities", m.kernels}}},
            {"simulated", {{"file", pt.file}, {"rank", p.rank}, {"slices", p.kernels}}},
            {"measures", std::move(measures)},
            {"collectives", std::move(colls)},
            {"gemms_by_shape", std::move(gemms)}};
  }

  // Two processes, each from 0 at its own first activity: pid 0 the measured step (a thread per CUDA
  // stream), pid 1 the simulated rank (its threads as simulate names them: compute, comm, copy
  // engines, recv lanes). Slices keep their names; their category is the class both sides share.
  static nlohmann::json side_by_side(const analysis::MeasuredTrace& mt, const analysis::MeasuredStep& m,
                                     const analysis::MeasuredTrace& pt, const analysis::MeasuredStep& p) {
    nlohmann::json events = nlohmann::json::array();
    const auto side = [&](int pid, const std::string& label, const analysis::MeasuredStep& s, const char* stream) {
      events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", label}}}});
      events.push_back(
          {{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
      TimePs origin = std::numeric_limits<TimePs>::max();
      std::set<std::int64_t> streams;
      for (const auto& a : s.activities) {
        origin = std::min(origin, a.begin_ps);
        streams.insert(a.stream);
      }
      for (std::int64_t tid : streams)
        events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid},
                          {"args", {{"name", fmt::format("{} {}", stream, tid)}}}});
      std::vector<const analysis::TraceActivity*> order;
      for (const auto& a : s.activities) order.push_back(&a);
      std::stable_sort(order.begin(), order.end(), [](const auto* x, const auto* y) {
        return std::tie(x->stream, x->begin_ps) < std::tie(y->stream, y->begin_ps);
      });
      // Whole nanoseconds in microseconds: Kineto's resolution, and fusesim's trace writes no finer.
      const auto us = [](TimePs ps) { return static_cast<double>(ps / 1000) / 1e3; };
      for (const auto* a : order)
        events.push_back({{"ph", "X"}, {"name", a->name}, {"cat", analysis::to_string(a->cls)}, {"pid", pid},
                          {"tid", a->stream}, {"ts", us(a->begin_ps - origin)}, {"dur", us(a->end_ps - a->begin_ps)}});
    };
    side(0, fmt::format("measured: {} rank {} step {}", mt.file, m.rank, step_name(m)), m, "stream");
    side(1, fmt::format("simulated: {} rank {}", pt.file, p.rank), p, "thread");
    return {{"displayTimeUnit", "ms"}, {"traceEvents", std::move(events)}};
  }

  static std::string render(const std::vector<analysis::MeasuredTrace>& traces) {
    using analysis::Align;
    analysis::Table steps({{"rank", Align::right},
                           {"step", Align::right},
                           {"span ms", Align::right},
                           {"compute ms", Align::right},
                           {"comm ms", Align::right},
                           {"overlapped ms", Align::right},
                           {"exposed ms", Align::right},
                           {"memcpy/set ms", Align::right},
                           {"idle ms", Align::right},
                           {"kernels", Align::right},
                           {"file", Align::left}});
    analysis::Table classes({{"rank", Align::right},
                             {"step", Align::right},
                             {"class", Align::left},
                             {"busy ms", Align::right},
                             {"% of span", Align::right}});
    analysis::Table colls({{"rank", Align::right},
                           {"step", Align::right},
                           {"collective", Align::left},
                           {"group", Align::left},
                           {"calls", Align::right},
                           {"kernel ms", Align::right},
                           {"in MB", Align::right},
                           {"out MB", Align::right}});
    bool any_collective = false;
    for (const auto& t : traces)
      for (const auto& m : t.steps) {
        const std::string step = m.step < 0 ? "all" : fmt::format("{}", m.step);
        steps.add_row({fmt::format("{}", m.rank), step, ms(m.span_ps), ms(m.compute_ps), ms(m.comm_ps),
                       ms(m.overlapped_comm_ps), ms(m.exposed_comm_ps), ms(m.memory_ps), ms(m.idle_ps),
                       fmt::format("{}", m.kernels), t.file});
        for (const auto& [cls, v] : m.by_class_ps)
          classes.add_row({fmt::format("{}", m.rank), step, analysis::to_string(cls), ms(v), share(v, m.span_ps)});
        for (const auto& c : m.collectives) {
          any_collective = true;
          // Sizes only when every call recorded one: a partial sum would read as the total.
          const bool sized = c.calls_with_size == c.calls;
          colls.add_row({fmt::format("{}", m.rank), step, c.op, c.group.empty() ? "-" : c.group,
                         fmt::format("{}", c.calls), ms(c.time_ps),
                         sized ? fmt::format("{:.3f}", static_cast<double>(c.in_bytes) / 1e6) : "-",
                         sized ? fmt::format("{:.3f}", static_cast<double>(c.out_bytes) / 1e6) : "-"});
        }
      }
    return steps.render() + "\n" + classes.render() + (any_collective ? "\n" + colls.render() : std::string());
  }

  CLI::App* import_ = nullptr;
  CLI::App* compare_ = nullptr;
  std::vector<std::string> files_;
  std::string measured_, simulated_, side_by_side_;
  std::optional<int> step_, sim_rank_;
  std::string format_ = "table";
  std::string output_;
};

}  // namespace

std::unique_ptr<Command> make_trace_command() { return std::make_unique<TraceCommand>(); }

}  // namespace fusesim::cli
