#pragma once
// The analyzer: from a task graph and its simulated timings, the overlap metrics of design note §4
// per rank, per overlapped region and for the step, plus MFU/HFU and throughput. Definitions with
// their edge cases are in docs/metrics.md. All measures are exact on integer picoseconds; seconds
// appear only in the output (JSON, table).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/analysis/critical_path.hpp"
#include "fusesim/analysis/intervals.hpp"
#include "fusesim/model/kernel.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/units.hpp"

namespace fusesim::analysis {

// Head and tail of one region on one rank.
struct RegionMetrics {
  int region = -1;            // index into TaskGraph::regions()
  std::string name;
  std::string parallelism;
  int rank = 0;
  TimePs start_ps = 0;        // earliest start of the region's tasks on this rank
  TimePs end_ps = 0;          // latest end
  TimePs head_ps = 0;         // first compute start - start (the whole span when no compute runs)
  TimePs tail_ps = 0;         // end - last compute end (0 when no compute runs)
  int compute_tasks = 0;      // compute tasks of the region on this rank
};

struct RankMetrics {
  int rank = 0;
  TimePs last_end_ps = 0;       // end of the rank's last task
  TimePs compute_ps = 0;        // |C|, C = union of compute intervals
  TimePs comm_ps = 0;           // |M|, M = union of communication intervals
  TimePs overlap_ps = 0;        // |C ∩ M|
  TimePs exposed_comm_ps = 0;   // |M \ C|
  TimePs idle_ps = 0;           // T - |C ∪ M|: neither computing nor communicating (a pipeline's bubble)
  double overlap_ratio = 0.0;   // |C ∩ M| / |M|, 0 when M is empty
  TimePs head_ps = 0;           // sums over the regions present on this rank
  TimePs tail_ps = 0;
  std::vector<RegionMetrics> regions;  // in region index order
};

// A pipeline stage (docs/metrics.md "Pipeline"): its bubble is the idle time of its first rank (TP,
// UP and DP index 0), the time that rank neither computes nor communicates during the step.
struct StageMetrics {
  int stage = 0;
  int rank = 0;               // the stage's first rank, whose figures these are
  TimePs bubble_ps = 0;       // RankMetrics::idle_ps of that rank
  double bubble_fraction = 0.0;  // bubble_ps / T
  TimePs compute_ps = 0;
  TimePs exposed_comm_ps = 0;
};

struct StepMetrics {
  std::string schedule;       // "baseline", "slice", "commfuse"
  std::string parallelism;    // "tpsp", "up", "dp"
  std::string scope;          // "layer", "stack" (empty when not from a generator)
  TimePs step_time_ps = 0;    // T, the makespan
  int critical_rank = 0;      // the rank whose last task ends at T, lowest index on ties
  int gpus = 0;
  std::int64_t tokens = 0;
  Flops model_flops = 0.0;    // compute tasks without recomputation
  Flops hardware_flops = 0.0; // every compute task
  FlopsPerSecond peak_flops_per_s = 0.0;  // summed over the schedule's GPUs, for the dtype
  double mfu = 0.0;
  double hfu = 0.0;
  double tokens_per_s = 0.0;
  double tokens_per_s_per_gpu = 0.0;
  std::vector<RankMetrics> ranks;  // every rank of the graph
  std::vector<StageMetrics> stages;  // pipeline stages, stage 0 first; empty without pipeline parallelism
  // With pipeline stages: what the step's critical path spends (critical_path.hpp).
  std::optional<CriticalPath> critical_path;
  // Step-level figures are those of the critical rank.
  const RankMetrics& critical() const;
};

// Everything the analyzer reads. References must outlive the call.
struct AnalysisInput {
  const sched::TaskGraph& graph;
  const sim::SimResult& result;
  const topo::Cluster& cluster;
  const model::KernelCostModel& costs;  // FLOPs of each compute task (KernelCost::flops)
  topo::Dtype dtype = topo::Dtype::bf16;  // the peak MFU divides by
  std::int64_t tokens = 0;
  int gpus = 0;                           // ranks 0..gpus-1 count towards the peak; 0: graph.num_ranks()
  std::string schedule;
  std::string parallelism;
  std::string scope;
  // Schedule::simulated_ranks: metrics of those ranks only (0: all), the first simulated_ranks /
  // pipeline_stages ranks of each stage (sched::counted_ranks).
  int simulated_ranks = 0;
  int replicas = 1;         // Schedule::replicas: the FLOPs count this many times
  // Schedule::pipeline_stages: > 1 splits the ranks into that many equal stages, stage-major
  // (sched::RankLayout), and fills StepMetrics::stages.
  int pipeline_stages = 1;
  // With pipeline stages: fill StepMetrics::critical_path (a pass over every task; `fusesim search`,
  // which reports none, leaves it out).
  bool critical_path = true;
  // Schedule::tp_images: the counted ranks are every tp_images-th, and the FLOPs count replicas x
  // tp_images times.
  int tp_images = 1;
};

// Throws std::logic_error when the result does not belong to the graph (sizes differ, a task never
// ran): a bug upstream, not bad input.
StepMetrics analyze(const AnalysisInput& input);
// The rates of a step from its sums: each stage's bubble_fraction, mfu, hfu, tokens_per_s and
// tokens_per_s_per_gpu from step_time_ps, the stages' bubble_ps, the FLOPs, the peak, the tokens and
// the GPUs. analyze() ends with it; a caller that scales the sums (search's steady state) calls it again.
void derive_rates(StepMetrics& m);
// The same for a generated schedule: names, tokens and GPUs come from it.
StepMetrics analyze(const sched::Schedule& schedule, const sim::SimResult& result, const topo::Cluster& cluster,
                    const model::KernelCostModel& costs, topo::Dtype dtype, bool critical_path = true);

// The compute and communication interval sets of each rank, as the analyzer counts them (exposed
// for tests and for other reports).
struct RankIntervals {
  IntervalSet compute;
  IntervalSet comm;
};
std::vector<RankIntervals> rank_intervals(const sched::TaskGraph& graph, const sim::SimResult& result);

// One row of the machine-readable output (design note §4 key names), with "regions" (the critical
// rank's) and "ranks" lists.
nlohmann::json to_json(const StepMetrics& m);
// Aligned text table, one row per result, units in the headers.
std::string format_table(const std::vector<StepMetrics>& rows);
// Per-region table of the critical rank of one result.
std::string format_region_table(const StepMetrics& m);

}  // namespace fusesim::analysis
