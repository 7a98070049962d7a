#pragma once
// `fusesim simulate` as a library call: load a cluster and a workload, generate each requested
// schedule at each scope, simulate it, analyze it. The command (src/cli/simulate_command.cpp) only
// parses the command line into a SimulateRequest and writes what simulate() returns.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/analysis/metrics.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/topo/cluster.hpp"

namespace fusesim::cli {

enum class OutputFormat { table, json };

struct SimulateRequest {
  std::string topology = "dgx-h100";       // path or shipped name
  std::string workload = "llama-3-70b";    // path or shipped name
  std::vector<model::ScheduleKind> schedules{model::ScheduleKind::baseline, model::ScheduleKind::slice,
                                             model::ScheduleKind::commfuse};
  std::vector<sched::Scope> scopes{sched::Scope::layer, sched::Scope::stack};
  std::optional<int> slices;               // overrides the workload's schedule.slices
  bool forward_only = false;
  bool record_traces = false;
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
  std::vector<SimulateRun> runs;           // scopes outer, schedules inner, in request order
};

// The cluster and the workload of a request, loaded, with the command-line overrides applied and
// checked against each other (shared by simulate and generate).
struct PreparedJob {
  topo::Cluster cluster;
  model::Workload workload;
  std::string topology_label;
  std::string workload_label;
};
PreparedJob prepare_job(const SimulateRequest& request);

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
// out.commfuse.stack.json.
std::string trace_path(const std::string& base, const SimulateRequest& request, model::ScheduleKind kind,
                       sched::Scope scope);

// Command-line values, parsed strictly; InputError("<command line>", option, ...) otherwise.
std::vector<model::ScheduleKind> parse_schedules(const std::string& value);  // "all" or a comma list
std::vector<sched::Scope> parse_scopes(const std::string& value);            // layer|stack|both
OutputFormat parse_format(const std::string& value);                         // table|json
int parse_positive_int(const std::string& option, const std::string& value, int max);

}  // namespace fusesim::cli
