// `fusesim sweep`: a grid of configurations, every schedule of each, one result row per run.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <limits>
#include <ostream>
#include <thread>

#include <fmt/format.h>

#include "fusesim/cli/commands.hpp"
#include "fusesim/cli/overrides.hpp"
#include "fusesim/cli/plot.hpp"
#include "fusesim/cli/sweep.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

// Redraws one line on a terminal; elsewhere (a Slurm log) prints a line per tenth done. Silent for
// the first second, so that quick sweeps print nothing but the summary.
class ProgressBar {
 public:
  ProgressBar(std::ostream& err, bool terminal) : err_(err), terminal_(terminal) {}
  void operator()(std::size_t done, std::size_t total) {
    const auto elapsed = std::chrono::steady_clock::now() - start_;
    if (elapsed < std::chrono::seconds(1) && !shown_) return;
    const double secs = std::chrono::duration<double>(elapsed).count();
    const std::size_t tenth = total == 0 ? 10 : done * 10 / total;
    if (terminal_) {
      constexpr int kWidth = 30;
      const int filled = total == 0 ? kWidth : static_cast<int>(done * kWidth / total);
      err_ << fmt::format("\r[{}{}] {}/{} configurations, {:.1f} s", std::string(static_cast<std::size_t>(filled), '#'),
                          std::string(static_cast<std::size_t>(kWidth - filled), '.'), done, total, secs);
      if (done == total) err_ << "\n";
      err_ << std::flush;
    } else if (!shown_ || tenth > last_tenth_) {
      err_ << fmt::format("sweep: {}/{} configurations, {:.1f} s\n", done, total, secs) << std::flush;
    }
    shown_ = true;
    last_tenth_ = tenth;
  }

 private:
  std::ostream& err_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  bool shown_ = false;
  std::size_t last_tenth_ = 0;
};

// Every configuration was skipped as invalid: the error is the first one's (the grid's order), with
// its place ("<command line>: --tp", "file.json: $.parallel") as the error's file and path.
[[noreturn]] void throw_nothing_runs(const SweepResult& result) {
  const SweepProblem& first = result.skipped.front();
  const std::size_t colon = first.key.find(": ");
  const std::string file = colon == std::string::npos ? kCommandLine : first.key.substr(0, colon);
  const std::string path = colon == std::string::npos ? "$" : first.key.substr(colon + 2);
  throw InputError(file, path,
                   fmt::format("no configuration of the grid can run ({} skipped as invalid), e.g. {}: {}",
                               result.skipped.size(), first.configuration, first.message));
}

class SweepCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.add_option("--topology", topology_, "clusters: a comma list of topology files or shipped names")
        ->type_name("LIST")
        ->capture_default_str();
    sub.add_option("--workload", workload_, "workloads: a comma list of workload files or shipped names")
        ->type_name("LIST")
        ->capture_default_str();
    sub.add_option("--engine", engine_, "what carries communication, a comma list of sm, copy, auto (see simulate)")
        ->type_name("MODES");
    sub.add_option("--parallelism", parallelism_, "whose schedules are compared, a comma list of tpsp, up, dp")
        ->type_name("LIST");
    const char* axis = "AXIS";
    sub.add_option("--seq", seq_, "sequence lengths: a list or range (1024:131072:x2, 4k,8k, 256k:1m:x2)")
        ->type_name(axis);
    sub.add_option("--tp", tp_, "tensor-parallel degrees: a list or range (2:8:x2, 2:16:+2)")->type_name(axis);
    sub.add_option("--up", up_, "Ulysses degrees: a list or range")->type_name(axis);
    sub.add_option("--pp", pp_,
                   "pipeline-parallel degrees (stages; the workload's pipeline schedule): a list or range")
        ->type_name(axis);
    sub.add_option("--dp", dp_, "data-parallel degrees: a list or range")->type_name(axis);
    sub.add_option("--micro-batch", micro_batch_, "micro-batch sizes: a list or range")->type_name(axis);
    sub.add_option("--grad-accumulation", grad_accumulation_,
                   "gradient accumulation (micro-batches per step): a list or range")
        ->type_name(axis);
    sub.add_option("--recompute", recompute_, "activation recomputation: a comma list of none, selective, full, op")
        ->type_name("LIST");
    sub.add_option("--zero", zero_, "DP sharding: a comma list of ddp, zero1, zero2, zero3")->type_name("LIST");
    sub.add_option("--slices", slices_, "slice-overlap k: a list or range")->type_name(axis);
    sub.add_option("--schedule", schedule_, "baseline, slice, commfuse, all, or a comma list")
        ->type_name("KIND")
        ->capture_default_str();
    sub.add_option("--scope", scope_,
                   "layer (one transformer layer), stack (all layers), both, or step (a whole training step, as "
                   "simulate's)")
        ->type_name("SCOPE")
        ->capture_default_str();
    sub.add_flag("--forward-only", forward_only_, "simulate the forward pass only");
    sub.add_option("--profile", profile_,
                   "calibration profile for every configuration (default: the shipped profile of each cluster's "
                   "device model; see simulate)")
        ->type_name("FILE|NAME");
    sub.add_flag("--roofline", roofline_, "price kernels with the roofline, no profile");
    sub.add_flag("--force-memory", force_memory_, "run configurations that exceed the device memory");
    sub.add_option("--symmetry", symmetry_,
                   "none, p2p or mirror, every configuration (see simulate; mirror runs every rank where it "
                   "would not be exact)")
        ->type_name("MODE")
        ->capture_default_str();
    sub.add_option("--output", output_, "result file, .csv or .json (default: CSV on standard output)")
        ->type_name("FILE");
    sub.add_option("--format", format_, "csv or json (default: from the --output extension)")->type_name("FORMAT");
    sub.add_option("--jobs", jobs_, "threads (default: the hardware's)")->type_name("N");
    sub.add_option("--shard", shard_, "run only configurations with index % n == i, written as JSON for "
                                      "`fusesim merge`")
        ->type_name("i/n");
    sub.add_option("--plot", plot_dir_, "also write the figures into this folder (see `fusesim plot`)")
        ->type_name("DIR");
    sub.add_flag("--quiet", quiet_, "no progress on standard error");
    sub.add_option("--max-configs", max_configs_,
                   fmt::format("run a grid of more configurations than this (default {})", kDefaultMaxConfigs))
        ->type_name("N");
  }

  int run(Io& io) override {
    SweepSpec spec;
    spec.topologies = parse_name_axis("--topology", topology_);
    spec.workloads = parse_name_axis("--workload", workload_);
    // Checked names; "all" is the default (every parallelism each configuration uses), not a value.
    if (!parallelism_.empty()) spec.parallelisms = parse_parallelisms(parallelism_);
    if (!engine_.empty())
      for (const std::string& e : parse_name_axis("--engine", engine_))
        spec.engines.push_back(parse_engine_mode("--engine", e));
    // Each axis within the bounds its option has in simulate (cli/overrides.hpp).
    auto axis = [](const char* option, const std::string& text) {
      return text.empty() ? std::vector<std::int64_t>{}
                          : parse_int_axis(option, text, 1, workload_override(option).max);
    };
    spec.sequence_lengths = axis("--seq", seq_);
    spec.tps = axis("--tp", tp_);
    spec.ups = axis("--up", up_);
    spec.pps = axis("--pp", pp_);
    spec.dps = axis("--dp", dp_);
    spec.micro_batches = axis("--micro-batch", micro_batch_);
    spec.grad_accumulations = axis("--grad-accumulation", grad_accumulation_);
    spec.slices = axis("--slices", slices_);
    // The named axes, each value one the workload files spell (cli/overrides.hpp).
    const auto named_axis = [](const char* option, const std::string& text) {
      std::vector<std::string> out;
      if (text.empty()) return out;
      const NamedOverride& o = named_override(option);
      for (const std::string& v : parse_name_axis(option, text)) {
        if (!o.known(v)) throw InputError(kCommandLine, option, o.unknown(v));
        out.push_back(v);
      }
      return out;
    };
    spec.recomputes = named_axis("--recompute", recompute_);
    spec.dp_shardings = named_axis("--zero", zero_);
    spec.schedules = parse_schedules(schedule_);
    spec.scopes = parse_scopes(scope_);
    spec.forward_only = forward_only_;
    spec.profile = profile_;
    spec.roofline = roofline_;
    (void)model::pricing_choice(profile_, roofline_);  // both given: refused before the sweep starts
    spec.force_memory = force_memory_;
    SimulateRequest symmetry_check;
    apply_symmetry(symmetry_, symmetry_check);  // a bad mode is refused before the sweep starts
    spec.symmetry = symmetry_;

    SweepOptions options;
    options.jobs = jobs_.empty() ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))
                                 : parse_positive_int("--jobs", jobs_, 1024);
    if (!shard_.empty()) options.shard = parse_shard(shard_);
    const std::string format = output_.empty() ? (format_.empty() ? "csv" : output_format_for("", format_))
                                               : output_format_for(output_, format_);
    if (options.shard.count > 1 && format != "json")
      throw InputError(kCommandLine, "--shard", "a shard is written as JSON (name the --output file .json), so that "
                                                "`fusesim merge` can check the parts");
    // Where the results go is checked before the sweep runs, not after.
    if (!output_.empty()) check_output_path(output_, "--output");
    if (!plot_dir_.empty()) check_plot_folder(plot_dir_, "--plot");
    if (spec.size() > (std::size_t{1} << 32))
      throw InputError(kCommandLine, "$",
                       spec.size() == std::numeric_limits<std::size_t>::max()
                           ? std::string("more than 2^64 configurations (the product of the axes) are too many for one sweep")
                           : fmt::format("{} configurations are too many for one sweep", spec.size()));
    // A typo in a range (1:16777216:+1 for 1k:16M:x2) must not start a sweep that runs for days:
    // the grid's size is said first, and a large one runs only when asked for by number.
    const std::size_t count = options.shard.count > 1
                                  ? (spec.size() + static_cast<std::size_t>(options.shard.count) - 1) /
                                        static_cast<std::size_t>(options.shard.count)
                                  : spec.size();
    const std::size_t max_configs =
        max_configs_.empty() ? kDefaultMaxConfigs
                             : static_cast<std::size_t>(parse_positive_int("--max-configs", max_configs_, 1 << 30));
    if (count > max_configs)
      throw InputError(kCommandLine, max_configs_.empty() ? "$" : "--max-configs",
                       fmt::format("the grid has {} configurations to run, more than {}: narrow an axis, or pass "
                                   "--max-configs {} to run them all",
                                   count, max_configs, count));
    if (!quiet_)
      io.err << fmt::format("sweep: {} configurations{}, each with {} schedule(s) and {} scope(s)\n", count,
                            options.shard.count > 1 ? fmt::format(" (shard {}/{} of {})", options.shard.index,
                                                                 options.shard.count, spec.size())
                                                    : "",
                            spec.schedules.size(), spec.scopes.size());

    // A topology or workload that cannot be read spoils every configuration that uses it: a typo in a
    // name is bad input (exit 2), not a column of skipped configurations.
    for (const std::string& t : spec.topologies) topo::load_cluster_by_name_or_path(t);
    for (const std::string& w : spec.workloads) model::load_workload(w);

    ProgressBar bar(io.err, &io.err == &std::cerr && ::isatty(STDERR_FILENO) == 1);
    if (!quiet_) options.progress = [&bar](std::size_t done, std::size_t total) { bar(done, total); };
    const SweepResult result = run_sweep(spec, options);
    // A grid of which nothing can run (a TP degree no cluster fits, a sequence no slicing divides) is
    // a mistake on the command line, not a result: bad input, nothing written, where an empty result
    // file and exit 0 would let a script go on. A shard may hold nothing but invalid configurations
    // and still be a part of a valid sweep.
    if (result.run == 0 && result.failed.empty() && !result.skipped.empty() && result.shard.count <= 1)
      throw_nothing_runs(result);

    const std::string text = format == "json" ? sweep_json(result) : sweep_csv(result);
    if (output_.empty()) {
      io.out << text << std::flush;
    } else {
      write_output_file(output_, text);
    }
    io.err << sweep_summary(result);
    if (!plot_dir_.empty()) {
      const PlotReport plots = write_plots(result, plot_dir_);
      io.err << plots.log;
    }
    return result.failed.empty() ? 0 : 1;
  }

 private:
  std::string topology_ = "dgx-h100-4node";
  std::string workload_ = "llama-3-70b-4node";
  std::string parallelism_;
  std::string engine_;
  std::string seq_, tp_, up_, pp_, dp_, micro_batch_, grad_accumulation_, slices_, recompute_, zero_;
  std::string schedule_ = "all";
  std::string scope_ = "layer";
  bool forward_only_ = false;
  std::string symmetry_ = "mirror";
  std::string profile_;
  bool roofline_ = false;
  bool force_memory_ = false;
  std::string output_;
  std::string format_;
  std::string jobs_;
  std::string shard_;
  std::string plot_dir_;
  bool quiet_ = false;
  std::string max_configs_;
  // About an hour of layer-scope runs on a laptop (0.1-0.5 s each): more is asked for by number.
  static constexpr std::size_t kDefaultMaxConfigs = 10000;
};

}  // namespace

std::unique_ptr<Command> make_sweep_command() { return std::make_unique<SweepCommand>(); }

}  // namespace fusesim::cli
