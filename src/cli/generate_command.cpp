// `fusesim generate`: write a generated schedule's task graph as a JSON file (docs/dag.md), to read,
// edit and run again with `fusesim simulate-dag`.
#include <map>
#include <ostream>

#include <fmt/format.h>

#include "fusesim/cli/commands.hpp"
#include "fusesim/cli/overrides.hpp"
#include "fusesim/cli/simulate.hpp"
#include "fusesim/sched/dag_json.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/analysis/chrome_trace.hpp"
#include "fusesim/analysis/metrics.hpp"
#include "fusesim/model/kernel.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/util/json_reader.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

class GenerateCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.add_option("--topology", topology_, "cluster: a topology file or a shipped name")->capture_default_str();
    sub.add_option("--workload", workload_, "workload: a workload file or a shipped name")->capture_default_str();
    sub.add_option("--schedule", schedule_, "baseline, slice or commfuse")->capture_default_str();
    scope_option_ = sub.add_option("--scope", scope_,
                                   "layer, stack or step (a whole training step, as simulate's; the default for a "
                                   "workload with pipeline stages)")
                        ->capture_default_str();
    // The workload overrides of simulate (--seq, --tp, ..., --slices), with its bounds and errors.
    for (const WorkloadOverride& o : workload_overrides())
      sub.add_option(std::string(o.option), override_text_[std::string(o.option)],
                     fmt::format("override the workload's {}", o.what))
          ->type_name("N");
    for (const NamedOverride& o : named_overrides())
      sub.add_option(std::string(o.option), override_text_[std::string(o.option)],
                     fmt::format("override the workload's {}: {}", o.what, fmt::join(o.names, ", ")))
          ->type_name("NAME");
    sub.add_flag("--forward-only", forward_only_, "the forward pass only");
    sub.add_option("--output", output_, "the task-graph file to write")->required();
    sub.add_option("--symmetry", symmetry_,
                   "none, p2p or mirror, as for simulate (mirror: DP replica 0 only, or two nodes' replicas, the graph of a large DP "
                   "job that would not fit in memory otherwise)")
        ->type_name("MODE")
        ->capture_default_str();
  }

  int run(Io& io) override {
    if (!output_.empty()) check_output_path(output_, "--output");  // before the work, not after
    SimulateRequest request;
    request.topology = topology_;
    request.workload = workload_;
    request.schedules = parse_schedules(schedule_);
    if (request.schedules.size() != 1) throw InputError(kCommandLine, "--schedule", "name exactly one schedule");
    request.scopes = parse_scopes(scope_);
    if (request.scopes.size() != 1)
      throw InputError(kCommandLine, "--scope", "name one scope: layer, stack or step");
    parse_overrides(override_text_, request);
    request.forward_only = forward_only_;
    // A task graph is a timing study, not a claim that the run fits: generate writes it whatever the
    // memory per rank, and says so on stderr when it would not fit (simulate refuses it).
    request.force_memory = true;
    apply_symmetry(symmetry_, request);

    const PreparedJob job = prepare_job(request);
    sched::GenerateOptions options;
    options.scope = request.scopes[0];
    // As simulate does: a pipeline passes micro-batches between stages, which only a whole step has.
    if (scope_option_->count() == 0 && job.workload.parallel.pp > 1) {
      options.scope = sched::Scope::step;
      io.err << fmt::format("note: pp {}: the whole step is generated (a pipeline has no layer or stack scope)\n",
                            job.workload.parallel.pp);
    }
    options.backward = job.workload.backward;
    options.dp_as_p2p = request.dp_as_p2p;
    options.mirror_dp = request.mirror_dp;
    // A generator's refusal of a value an override set names the option, as in simulate.
    sched::Schedule schedule = [&] {
      try {
        return sched::generate(job.workload, job.workload_label, job.cluster, request.schedules[0], options);
      } catch (const InputError& e) {
        rethrow_for_overrides(e, request, job.workload_label);
      }
    }();
    sched::DagFile file{std::move(schedule.graph), job.workload.dtype, schedule.tokens,
                        model::to_string(schedule.kind), schedule.parallelism, topology_,
                        schedule.gpus,   schedule.simulated_ranks, schedule.replicas, schedule.pipeline_stages};
    write_output_file(output_, sched::dag_to_json(file).dump(1) + "\n");
    io.err << fmt::format("wrote {} tasks on {} ranks to {}\n", file.graph.size(), file.graph.num_ranks(), output_);
    if (!job.memory.fits()) io.err << "warning: " << model::format_memory_line(job.memory);
    if (schedule.network_sends_on_sm > 0) io.err << "note: " << network_sends_note(schedule.network_sends_on_sm) << "\n";
    return 0;
  }

 private:
  std::string topology_ = "dgx-h100-4node";
  std::string workload_ = "llama-3-70b-4node";
  std::string schedule_ = "commfuse";
  std::string scope_ = "layer";
  CLI::Option* scope_option_ = nullptr;
  // The text of each workload override's option (cli/overrides.hpp), by option name.
  std::map<std::string, std::string> override_text_;
  bool forward_only_ = false;
  std::string output_;
  std::string symmetry_ = "none";
};

class SimulateDagCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.add_option("--topology", topology_,
                   "cluster: a topology file or a shipped name (default: the one the graph file names, else "
                   "dgx-h100)");
    sub.add_option("--dag", dag_, "task-graph file (docs/dag.md), as `fusesim generate` writes")->required();
    sub.add_option("--trace", trace_,
                   "write a Chrome trace (Perfetto, chrome://tracing); gzip-compressed when FILE ends in .json.gz");
    sub.add_option("--trace-ranks", trace_ranks_, "trace only these ranks: a comma list and ranges, e.g. 0,8-15")
        ->type_name("LIST");
    sub.add_option("--trace-layers", trace_layers_, "trace only the tasks of these layers (a comma list and ranges)")
        ->type_name("LIST");
    sub.add_option("--format", format_, "table or json")->capture_default_str();
    sub.add_option("--output", output_, "write the report to this file instead of standard output");
    sub.add_option("--profile", profile_,
                   "calibration profile (default: the shipped profile of the cluster's device model)")
        ->type_name("FILE|NAME");
    sub.add_flag("--roofline", roofline_, "price kernels with the roofline, no profile");
  }

  int run(Io& io) override {
    if (!output_.empty()) check_output_path(output_, "--output");  // before the work, not after
    if (!trace_.empty()) check_output_path(trace_, "--trace");
    const OutputFormat format = parse_format(format_);
    const model::PricingChoice choice = model::pricing_choice(profile_, roofline_);
    const analysis::TraceFilter filter = parse_trace_filter(trace_, trace_ranks_, trace_layers_);
    const JsonDocument document = JsonDocument::load(dag_);
    // The cluster the graph was generated for, unless the user asks for another (a what-if).
    const std::string named = document.root().string_or("topology", "");
    const std::string topology = !topology_.empty() ? topology_ : !named.empty() ? named : kHandWrittenTopology;
    if (!topology_.empty() && !named.empty() && topology_ != named)
      io.err << fmt::format("note: {} was generated for {}; simulating it on {}\n", dag_, named, topology_);
    topo::Cluster cluster = load_named_topology(document, topology, topology_.empty() && !named.empty());
    const sched::DagFile dag = sched::parse_dag(document, cluster.num_ranks());
    if (const auto id = sched::first_network_copy_send(dag.graph, cluster))
      throw InputError(dag_, fmt::format("$.tasks[{}].send.engine", *id),
                       fmt::format("send '{}' crosses nodes on a copy engine, which cannot drive the network: give "
                                   "it \"engine\": \"sm_kernel\" (NCCL's inter-node send/recv is an SM kernel and a "
                                   "proxy thread)",
                                   dag.graph.task(*id).name));
    // A graph file gives no layer count: a layer it lacks gives an empty trace, not an error.
    if (!trace_.empty()) check_trace_filter(filter, cluster, 0);
    const model::Pricing pricing = model::pricing_for(choice, cluster);
    const model::KernelCostModel& costs = *pricing.costs;
    sim::Simulator simulator(cluster, costs);
    // The analysis reads P2P records alone; a trace sees every step through its observer.
    simulator.set_transfer_records(sim::TransferRecords::p2p_only);
    std::optional<analysis::ChromeTraceRecorder> recorder;
    if (!trace_.empty()) recorder.emplace(cluster, &costs, dag.graph.regions(), filter);
    const sim::SimResult result = simulator.run(dag.graph, recorder ? &*recorder : nullptr);
    const analysis::AnalysisInput input{.graph = dag.graph,
                                        .result = result,
                                        .cluster = cluster,
                                        .costs = costs,
                                        .dtype = dag.dtype,
                                        .tokens = dag.tokens,
                                        .gpus = dag.gpus,
                                        .schedule = dag.schedule,
                                        .parallelism = sched::to_string(dag.parallelism),
                                        .scope = "",
                                        .simulated_ranks = dag.simulated_ranks,
                                        .replicas = dag.replicas,
                                        .pipeline_stages = dag.pipeline_stages};
    const analysis::StepMetrics metrics = analysis::analyze(input);
    nlohmann::json doc = analysis::to_json(metrics);
    doc["pricing"] = pricing.to_json();
    const std::string note = result.best_tree_all_reduce ? tree_all_reduce_note(*result.best_tree_all_reduce) : "";
    if (!note.empty()) doc["notes"] = nlohmann::json::array({note});
    const std::string text = format == OutputFormat::json ? doc.dump(2) + "\n"
                                                          : "kernels priced by " + pricing.describe() + "\n\n" +
                                                                analysis::format_table({metrics}) + "\n" +
                                                                analysis::format_region_table(metrics) +
                                                                (note.empty() ? "" : "\nnote: " + note + "\n");
    // Both outputs are complete in memory before either file is written.
    if (recorder) write_maybe_gzipped(trace_, recorder->to_json().dump() + "\n", "--trace");
    if (output_.empty()) {
      io.out << text << std::flush;
    } else {
      write_output_file(output_, text);
    }
    return 0;
  }

 private:
  // A graph written by hand names no cluster: it runs on one DGX H100 unless --topology says otherwise.
  static constexpr const char* kHandWrittenTopology = "dgx-h100";

  // A topology the graph file names is checked like any key of the file: one that does not load is an
  // error at $.topology, not at the command line.
  static topo::Cluster load_named_topology(const JsonDocument& document, const std::string& topology,
                                           bool from_file) {
    if (!from_file) return topo::load_cluster_by_name_or_path(topology);
    try {
      return topo::load_cluster_by_name_or_path(topology);
    } catch (const InputError& err) {
      document.root().at("topology").fail(
          fmt::format("the cluster this graph was generated for does not load ({}); give --topology", err.what()));
    }
  }

  std::string topology_;
  std::string dag_;
  std::string trace_, trace_ranks_, trace_layers_;
  std::string format_ = "table";
  std::string output_;
  std::string profile_;
  bool roofline_ = false;
};

}  // namespace

std::unique_ptr<Command> make_generate_command() { return std::make_unique<GenerateCommand>(); }
std::unique_ptr<Command> make_simulate_dag_command() { return std::make_unique<SimulateDagCommand>(); }

}  // namespace fusesim::cli
