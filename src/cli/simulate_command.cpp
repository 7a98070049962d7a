// `fusesim simulate`: the schedules side by side for one workload on one cluster.
#include <filesystem>
#include <map>
#include <ostream>
#include <set>

#include <fmt/format.h>

#include "fusesim/cli/commands.hpp"
#include "fusesim/cli/overrides.hpp"
#include "fusesim/cli/simulate.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

// An output file can only be written into an existing folder. Checked before the simulation so
// that a typo in a path costs nothing and no file is written when any target is unusable.
void check_writable_target(const std::string& option, const std::string& path) {
  if (path.empty()) throw InputError(kCommandLine, option, "expected a file name");
  check_output_path(path, option);
}

class SimulateCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.add_option("--topology", topology_, "cluster: a topology file or a shipped name (fusesim list)")
        ->type_name("FILE|NAME")
        ->capture_default_str();
    sub.add_option("--workload", workload_, "workload: a workload file or a shipped name (fusesim list)")
        ->type_name("FILE|NAME")
        ->capture_default_str();
    sub.add_option("--schedule", schedule_, "baseline, slice, commfuse, all, or a comma list")
        ->type_name("KIND")
        ->capture_default_str();
    sub.add_option("--scope", scope_,
                   "layer (one transformer layer), stack (all layers), both, or step (a whole training step: "
                   "embedding, layers, LM head, gradient accumulation, DP sync, optimizer)")
        ->type_name("SCOPE")
        ->capture_default_str();
    sub.add_option("--slices", override_text_["--slices"],
                   "k of slice-overlap (default: the workload's schedule.slices)")
        ->type_name("K");
    sub.add_flag("--forward-only", forward_only_, "simulate the forward pass only");
    sub.add_option("--seq", override_text_["--seq"], "override the workload's sequence length")->type_name("N");
    sub.add_option("--micro-batch", override_text_["--micro-batch"], "override the workload's micro-batch")
        ->type_name("N");
    sub.add_option("--grad-accumulation", override_text_["--grad-accumulation"],
                   "override the workload's gradient accumulation: micro-batches per step (with pp > 1, what "
                   "fills the pipeline)")
        ->type_name("N");
    sub.add_option("--tp", override_text_["--tp"], "override the tensor-parallel degree")->type_name("N");
    sub.add_option("--up", override_text_["--up"], "override the Ulysses degree")->type_name("N");
    sub.add_option("--dp", override_text_["--dp"], "override the data-parallel degree")->type_name("N");
    sub.add_option("--pp", override_text_["--pp"],
                   "override the pipeline-parallel degree (stages; the schedule and virtual stages are the workload's)")
        ->type_name("N");
    sub.add_option("--recompute", override_text_["--recompute"],
                   "override the workload's activation recomputation: none, selective, full or op")
        ->type_name("NAME");
    sub.add_option("--zero", override_text_["--zero"],
                   "override the workload's DP sharding: ddp, zero1, zero2 or zero3 (a stage that cannot carry the "
                   "workload's overlapped or fp8 parameter gather turns it off)")
        ->type_name("NAME");
    sub.add_option("--pp-schedule", pp_schedule_,
                   "override the pipeline schedule: 1f1b, interleaved (the workload's virtual_stages) or zb-h1")
        ->type_name("NAME");
    sub.add_option("--parallelism", parallelism_,
                   "whose schedules are compared: tpsp, up, dp, all or a comma list (default: every parallelism "
                   "the workload uses); the others run the workload's schedule.kind")
        ->type_name("P");
    sub.add_flag("--force-memory", force_memory_,
                 "run even when the memory per rank exceeds the device memory (docs/memory.md)");
    sub.add_option("--trace", trace_,
                   "write a Chrome trace (Perfetto, chrome://tracing); with several runs, one file each, "
                   "named FILE.<schedule>[.<scope>].json; gzip-compressed when FILE ends in .json.gz")
        ->type_name("FILE");
    sub.add_option("--trace-ranks", trace_ranks_,
                   "trace only these ranks: a comma list of ranks and ranges, e.g. 0,8-15 (link counters: the "
                   "links their transfers cross)")
        ->type_name("LIST");
    sub.add_option("--trace-layers", trace_layers_,
                   "trace only the tasks of these layers (a comma list and ranges); tasks of no single layer stay")
        ->type_name("LIST");
    sub.add_option("--profile", profile_,
                   "calibration profile: a file or a shipped name (fusesim list); default: the shipped profile of "
                   "the cluster's device model")
        ->type_name("FILE|NAME");
    sub.add_option("--engine", engine_,
                   "what carries communication: sm (collectives and P2P on SM kernels, like for like), copy (both on "
                   "copy engines) or auto (collectives on SM kernels, P2P on copy engines); default: the workload's "
                   "schedule.engine")
        ->type_name("MODE");
    sub.add_flag("--roofline", roofline_, "price kernels with the roofline of docs/kernel-model.md, no profile");
    sub.add_option("--format", format_, "table or json")->type_name("FORMAT")->capture_default_str();
    sub.add_option("--output", output_, "write the report to this file instead of standard output")
        ->type_name("FILE");
    sub.add_flag("--regions", regions_, "table format: also print the per-region head/tail table of each run");
    symmetry_option_ = sub.add_option("--symmetry", symmetry_,
                   "none, p2p (the DP collectives as ring P2P steps on every rank) or mirror (DP replica 0 only, or "
                   "two nodes' replicas where several share a node, the others their images: none's step, exactly; "
                   "docs/schedules.md, Symmetry)")
        ->type_name("MODE")
        ->capture_default_str();
  }

  int run(Io& io) override {
    // Every command-line value first, so that a bad one is reported before any file is read.
    SimulateRequest request;
    request.topology = topology_;
    request.workload = workload_;
    request.schedules = parse_schedules(schedule_);
    request.scopes = parse_scopes(scope_);
    parse_overrides(override_text_, request);
    request.forward_only = forward_only_;
    if (!pp_schedule_.empty()) request.pp_schedule = pp_schedule_;
    if (!parallelism_.empty()) request.parallelisms = parse_parallelisms(parallelism_);
    request.pricing = model::pricing_choice(profile_, roofline_);
    if (!engine_.empty()) request.engine = parse_engine_mode("--engine", engine_);
    request.force_memory = force_memory_;
    // A trace draws the ranks it is asked for: without an explicit --symmetry it simulates every rank
    // (mirror would leave the other replicas' processes empty), with --symmetry mirror the simulated
    // ones (simulate() refuses --trace-ranks outside them).
    apply_symmetry(!trace_.empty() && symmetry_option_->count() == 0 ? std::string("none") : symmetry_, request);
    request.record_traces = !trace_.empty();
    request.trace_filter = parse_trace_filter(trace_, trace_ranks_, trace_layers_);
    const OutputFormat format = parse_format(format_);

    std::vector<std::string> trace_files;
    if (request.record_traces) {
      for (sched::Scope scope : request.scopes)
        for (model::ScheduleKind kind : request.schedules) trace_files.push_back(trace_path(trace_, request, kind, scope));
      for (const std::string& f : trace_files) check_writable_target("--trace", f);
    }
    if (!output_.empty()) {
      check_writable_target("--output", output_);
      for (const std::string& f : trace_files)
        if (std::filesystem::absolute(f) == std::filesystem::absolute(output_))
          throw InputError(kCommandLine, "--trace", fmt::format("'{}' is also the --output file", f));
    }

    const SimulateReport report = simulate(request);
    const std::string text =
        format == OutputFormat::json ? report_json(report).dump(2) + "\n" : report_table(report, regions_);

    if (request.record_traces) {
      // One trace per run, in the order of the runs; the parallelism named when several are compared;
      // named after the scopes that ran (a pipeline runs the step where the default scopes were asked).
      SimulateRequest ran = request;
      ran.scopes = report.scopes;
      const std::vector<sched::Parallelism> pars = parallelisms_for(ran, report.workload);
      trace_files.clear();
      for (sched::Parallelism par : pars)
        for (sched::Scope scope : ran.scopes)
          for (model::ScheduleKind kind : ran.schedules)
            trace_files.push_back(trace_path(trace_, ran, pars.size() > 1 ? std::optional(par) : std::nullopt, kind, scope));
      if (trace_files.size() != report.runs.size())
        throw std::logic_error(fmt::format("simulate: {} trace files for {} runs", trace_files.size(), report.runs.size()));
    }
    for (std::size_t i = 0; i < trace_files.size(); ++i) write_maybe_gzipped(trace_files[i], *report.runs[i].trace_json, "--trace");
    if (output_.empty()) {
      io.out << text << std::flush;
    } else {
      write_output_file(output_, text);
    }
    return 0;
  }

 private:
  std::string topology_ = "dgx-h100-4node";
  std::string workload_ = "llama-3-70b-4node";
  std::string pp_schedule_;
  // The text of each workload override's option (cli/overrides.hpp), by option name.
  std::map<std::string, std::string> override_text_;
  std::string schedule_ = "all";
  std::string scope_ = "both";
  bool forward_only_ = false;
  std::string parallelism_;
  std::string symmetry_ = "mirror";
  CLI::Option* symmetry_option_ = nullptr;
  bool force_memory_ = false;
  std::string trace_, trace_ranks_, trace_layers_;
  std::string format_ = "table";
  std::string output_;
  std::string profile_;
  bool roofline_ = false;
  std::string engine_;
  bool regions_ = false;
};

}  // namespace

std::unique_ptr<Command> make_simulate_command() { return std::make_unique<SimulateCommand>(); }

}  // namespace fusesim::cli
