// `fusesim trace import`: measured Kineto traces (one file per rank) read into the measures simulate
// reports for a simulated step (analysis/kineto.hpp, docs/traces.md).
#include <ostream>

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
  }

  int run(Io& io) override {
    if (format_ != "table" && format_ != "json")
      throw InputError(kCommandLine, "--format", fmt::format("'{}' is not table or json", format_));
    if (!output_.empty()) check_output_path(output_);
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
    for (const auto& t : traces)
      for (const auto& m : t.steps) {
        const std::string step = m.step < 0 ? "all" : fmt::format("{}", m.step);
        steps.add_row({fmt::format("{}", m.rank), step, ms(m.span_ps), ms(m.compute_ps), ms(m.comm_ps),
                       ms(m.overlapped_comm_ps), ms(m.exposed_comm_ps), ms(m.memory_ps), ms(m.idle_ps),
                       fmt::format("{}", m.kernels), t.file});
        for (const auto& [cls, v] : m.by_class_ps)
          classes.add_row({fmt::format("{}", m.rank), step, analysis::to_string(cls), ms(v), share(v, m.span_ps)});
      }
    return steps.render() + "\n" + classes.render();
  }

  CLI::App* import_ = nullptr;
  std::vector<std::string> files_;
  std::string format_ = "table";
  std::string output_;
};

}  // namespace

std::unique_ptr<Command> make_trace_command() { return std::make_unique<TraceCommand>(); }

}  // namespace fusesim::cli
