// `fusesim verify`: the reference executor on every TPSP schedule (sched/verify.hpp). Exits 0 when
// every case equals the unpartitioned computation, 1 when any differs (a generator bug), 2 on bad
// command-line values. --inject-fault corrupts one chunk index on purpose, to show that a wrong
// generator is caught.
#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fusesim/analysis/table.hpp"
#include "fusesim/cli/commands.hpp"
#include "fusesim/cli/simulate.hpp"
#include "fusesim/sched/verify.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

std::vector<int> parse_int_list(const std::string& option, const std::string& value, int max) {
  std::vector<int> out;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(parse_positive_int(option, item, max));
  if (out.empty()) throw InputError(kCommandLine, option, "expected a comma-separated list of integers");
  return out;
}

class VerifyCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.add_option("--tp", tps_, "TP degrees t to verify, comma-separated")->capture_default_str();
    sub.add_option("--up", ups_, "Ulysses degrees to verify (whole layers, tp 1 and tp 2 x up), comma-separated; 0: none")
        ->capture_default_str();
    sub.add_option("--dp", dps_, "DP degrees of the gradient-sync cases, comma-separated; 0: none")
        ->capture_default_str();
    sub.add_option("--pp", pps_, "pipeline stage counts of the pipeline-order cases, comma-separated; 0: none")
        ->capture_default_str();
    sub.add_option("--slices", slices_, "slice counts k of slice-overlap, comma-separated")->capture_default_str();
    sub.add_option("--schedule", schedule_, "baseline, slice, commfuse, all, or a comma list")->capture_default_str();
    sub.add_option("--seed", seed_, "seed of the random inputs and of the random execution order")
        ->capture_default_str();
    sub.add_option("--format", format_, "table or json")->capture_default_str();
    sub.add_option("--output", output_, "write the report to this file instead of standard output");
    sub.add_flag("--inject-fault", inject_fault_,
                 "corrupt the generators on purpose (rank 1 computes the wrong chunk at ring step 1 of the "
                 "first fused op; the last pipeline stage starts with a loss gradient): every case must then fail");
    sub.add_flag("--failures-only", failures_only_, "table format: list only the failing cases");
  }

  int run(Io& io) override {
    if (!output_.empty()) check_output_path(output_, "--output");  // before the work, not after
    sched::VerifyOptions options;
    options.tps = parse_int_list("--tp", tps_, 64);
    options.slices = parse_int_list("--slices", slices_, 64);
    if (ups_ == "0") {
      options.up_layers = false;
    } else {
      options.ups = parse_int_list("--up", ups_, 64);
    }
    options.kinds = parse_schedules(schedule_);
    options.execute.seed = seed_;
    const OutputFormat format = parse_format(format_);
    if (inject_fault_) options.fault = sched::TpspFault{1, 0, 1, 1};
    if (inject_fault_) options.dp_fault = sched::DpFault{1, 0, 1};  // DP index 1 swaps parts 0 and 1
    // The last pipeline stage starts with a loss gradient no forward has reached yet.
    if (inject_fault_) options.pp_fault = sched::PipelineFault::loss_first;
    if (dps_ == "0") {
      options.dps.clear();
    } else {
      options.dps = parse_int_list("--dp", dps_, 64);
    }
    if (pps_ == "0") {
      options.pps.clear();
    } else {
      options.pps = parse_int_list("--pp", pps_, 64);
    }

    const sched::VerifyReport report = sched::verify_tpsp(options);
    const std::string text = format == OutputFormat::json ? to_json(report) + "\n" : to_table(report);
    if (output_.empty()) {
      io.out << text << std::flush;
    } else {
      write_output_file(output_, text);
    }
    io.err << fmt::format("verify: {} cases, {} failed{}\n", report.cases.size(), report.failures(),
                          inject_fault_ ? " (fault injected on purpose)" : "");
    return report.passed() ? 0 : 1;
  }

 private:
  std::string to_json(const sched::VerifyReport& report) const {
    nlohmann::json cases = nlohmann::json::array();
    for (const auto& c : report.cases) {
      cases.push_back({{"name", c.name},
                       {"piece", c.piece},
                       {"schedule", c.schedule},
                       {"tp", c.tp},
                       {"up", c.up},
                       {"dp", c.dp},
                       {"slices", c.slices},
                       {"tasks", c.tasks},
                       {"passed", c.result.passed},
                       {"max_abs_error", c.result.max_abs_error},
                       {"orders_run", c.result.orders_run},
                       {"error", c.result.error}});
    }
    return nlohmann::json{{"passed", report.passed()},
                          {"failures", report.failures()},
                          {"fault_injected", inject_fault_},
                          {"cases", cases}}
        .dump(2);
  }

  std::string to_table(const sched::VerifyReport& report) const {
    analysis::Table table({{"case", analysis::Align::left},
                           {"tasks", analysis::Align::right},
                           {"orders", analysis::Align::right},
                           {"max |error|", analysis::Align::right},
                           {"result", analysis::Align::left}});
    for (const auto& c : report.cases) {
      if (failures_only_ && c.result.passed) continue;
      table.add_row({c.name, fmt::format("{}", c.tasks), fmt::format("{}", c.result.orders_run),
                     fmt::format("{:.3g}", c.result.max_abs_error),
                     c.result.passed ? "ok" : "FAIL: " + one_line(c.result.error)});
    }
    return table.render() + fmt::format("{} passed, {} failed\n", static_cast<int>(report.cases.size()) - report.failures(),
                                        report.failures());
  }

  std::string tps_ = "2,3,4,8";
  std::string dps_ = "2,4,8";
  std::string pps_ = "2,3,4";
  std::string slices_ = "1,2,4";
  std::string ups_ = "2,4,8";
  std::string schedule_ = "all";
  std::uint64_t seed_ = 1;
  std::string format_ = "table";
  std::string output_;
  bool inject_fault_ = false;
  bool failures_only_ = false;
};

}  // namespace

std::unique_ptr<Command> make_verify_command() { return std::make_unique<VerifyCommand>(); }

}  // namespace fusesim::cli
