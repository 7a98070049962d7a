#pragma once
// `fusesim simulate` as a library call: load a cluster and a workload, generate each requested
// schedule at each scope, simulate it, analyze it. The command (src/cli/simulate_command.cpp) only
// parses the command line into a SimulateRequest and writes what simulate() returns.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/analysis/chrome_trace.hpp"
#include "fusesim/analysis/metrics.hpp"
#include "fusesim/model/memory.hpp"
#include "fusesim/model/pricing.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/topo/cluster.hpp"

namespace fusesim::cli {

enum class OutputFormat { table, json };

struct SimulateRequest {
  std::string topology = "dgx-h100-4node";  // path or shipped name
  std::string workload = "llama-3-70b-4node";  // path or shipped name
  std::vector<model::ScheduleKind> schedules = model::all_schedule_kinds();
  std::vector<sched::Scope> scopes{sched::Scope::layer, sched::Scope::stack};
  std::optional<int> slices;               // overrides the workload's schedule.slices
  bool forward_only = false;
  bool record_traces = false;
  analysis::TraceFilter trace_filter;  // --trace-ranks, --trace-layers; checked against the job by simulate()
  // Command-line overrides of the workload (sweeps set them per configuration); checked by
  // prepare_job() like the file's own values, the command line named as the culprit.
  std::optional<std::int64_t> sequence_length;
  std::optional<std::int64_t> micro_batch;
  std::optional<std::int64_t> grad_accumulation;  // micro-batches per step (training.grad_accumulation)
  std::optional<int> tp, up, dp, pp;
  // --recompute (none, selective, full, op) and --zero (ddp, zero1, zero2, zero3): named overrides
  // (cli/overrides.hpp, named_overrides).
  std::optional<std::string> recompute, dp_sharding;
  // --pp-schedule: "1f1b", "interleaved" (with the workload's virtual_stages) or "zb-h1"; 1f1b and zb-h1
  // set virtual_stages 1.
  std::optional<std::string> pp_schedule;
  std::optional<std::string> engine;  // --engine: one of model::kEngineModes, for every parallelism
  // Whose schedules are compared: "tpsp", "up", "dp"; empty: every parallelism the workload uses.
  // The parallelisms not compared run the workload file's schedule.kind.
  std::vector<sched::Parallelism> parallelisms;
  // The first this many of them (0: all): a caller that reads one run (validate) asks for one.
  std::size_t max_parallelisms = 0;
  // What prices the kernels: by default the shipped profile of the cluster's device model
  // (docs/calibration.md, "Which model prices a run").
  model::PricingChoice pricing;
  // Shared by the runs of a sweep so that each profile is loaded and fitted once; null: per run.
  std::shared_ptr<model::ProfileCache> profiles;
  // Run a configuration whose memory per rank exceeds the device memory (refused otherwise).
  bool force_memory = false;
  // --symmetry: p2p (DP sync as ring P2P steps, every rank) or mirror (the same, replica 0 only:
  // docs/schedules.md, "Symmetry"); both false: none.
  bool dp_as_p2p = false;
  bool mirror_dp = false;
};

struct SimulateRun {
  analysis::StepMetrics metrics;
  // The Chrome trace, serialized (a stack of layers makes a large document; text is the compact form).
  std::optional<std::string> trace_json;   // when record_traces
};

struct SimulateReport {
  std::string topology_label;              // the file the cluster came from
  std::string workload_label;
  std::string cluster_name;
  model::Workload workload;                // after command-line overrides
  std::vector<SimulateRun> runs;           // parallelisms outer, then scopes, schedules inner, in request order
  // The scopes run: the request's, except that a pipeline (pp > 1) runs the step when the default
  // scopes (layer and stack) were asked for.
  std::vector<sched::Scope> scopes;
  model::MemoryReport memory;              // per rank, for the schedules run (docs/memory.md)
  std::string profile_label;               // the calibration profile's file; empty: the roofline
  std::string pricing;                     // what priced the kernels, one line (model::Pricing::describe)
  nlohmann::json pricing_json;             // the same as model::Pricing::to_json
  std::vector<std::string> notes;          // what the run changed from what was asked, one line each
};

// The cluster and the workload of a request, loaded, with the command-line overrides applied and
// checked against each other (shared by simulate and generate).
struct PreparedJob {
  topo::Cluster cluster;
  model::Workload workload;
  std::string topology_label;
  std::string workload_label;
  model::MemoryReport memory;  // checked against the device memory unless request.force_memory
};
PreparedJob prepare_job(const SimulateRequest& request);
// The report's line for copy-engine sends between nodes that ran on SM kernels.
std::string network_sends_note(std::int64_t sends);
// The note of the all-reduces across nodes run as NCCL's tree (sim::SimResult::best_tree_all_reduce).
std::string tree_all_reduce_note(const sim::TreeAllReduce& r);

// --engine's value checked against model::kEngineModes (InputError naming `option` otherwise).
std::string parse_engine_mode(const std::string& option, const std::string& value);

// Throws InputError on bad input (files, or values out of range for this workload with file
// "<command line>"); GraphError or std::logic_error when a generator or the simulator is at fault.
SimulateReport simulate(const SimulateRequest& request);

// The --format json document: {"topology", "workload", ..., "results": [one analysis row per run]}.
nlohmann::json report_json(const SimulateReport& report);
// The --format table text: a header line naming the job, then the metrics table (and, with
// `regions`, one region table per run).
std::string report_table(const SimulateReport& report, bool regions);

// Where the trace of one run goes: `base` as given when there is one run; otherwise the schedule and
// (with several scopes) the scope are inserted before the extension: out.json -> out.commfuse.json,
// out.commfuse.stack.json; out.json.gz -> out.commfuse.json.gz.
std::string trace_path(const std::string& base, const SimulateRequest& request, model::ScheduleKind kind,
                       sched::Scope scope);
// The same with the parallelism inserted first (out.dp.commfuse.json) when it is not empty: used
// when several parallelisms are compared.
std::string trace_path(const std::string& base, const SimulateRequest& request,
                       std::optional<sched::Parallelism> parallelism, model::ScheduleKind kind, sched::Scope scope);
// The parallelisms whose schedules a request compares: request.parallelisms, or every one the
// workload uses (tpsp if tp > 1, up if up > 1, dp if dp > 1; tpsp alone if none). A named one the
// workload does not use (tpsp at tp 1, up at up 1, dp with neither dp > 1 nor up > 1) is an
// InputError at --parallelism.
std::vector<sched::Parallelism> parallelisms_for(const SimulateRequest& request, const model::Workload& w);

// Command-line values, parsed strictly; InputError("<command line>", option, ...) otherwise.
std::vector<model::ScheduleKind> parse_schedules(const std::string& value);  // "all" or a comma list
std::vector<sched::Scope> parse_scopes(const std::string& value);            // layer|stack|both|step
std::vector<sched::Parallelism> parse_parallelisms(const std::string& value);  // tpsp|up|dp or a comma list; all: {} (the default)
OutputFormat parse_format(const std::string& value);                         // table|json
int parse_positive_int(const std::string& option, const std::string& value, int max);
// --symmetry none|p2p|mirror (docs/cli.md): sets request.dp_as_p2p and request.mirror_dp; InputError
// at --symmetry for any other value.
void apply_symmetry(const std::string& value, SimulateRequest& request);
// --trace-ranks / --trace-layers: a comma list of integers and inclusive ranges, "0,8-15"; each in
// [0, max].
std::set<int> parse_index_list(const std::string& option, const std::string& value, int max);
// --trace-ranks and --trace-layers as given (empty: not given); refused without --trace.
analysis::TraceFilter parse_trace_filter(const std::string& trace, const std::string& ranks, const std::string& layers);
// The filter's ranks checked against the cluster (and its layers against `layers` when known, > 0):
// InputError at the option naming the first one out of range.
void check_trace_filter(const analysis::TraceFilter& filter, const topo::Cluster& cluster, std::int64_t layers);

}  // namespace fusesim::cli
