#pragma once
// Schedule generators: a workload and a cluster in, a task DAG out. One entry point for the CLI; the
// per-parallelism generators (tpsp.hpp, ...) sit behind it.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusesim/model/workload.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/topo/cluster.hpp"

namespace fusesim::sched {

struct DataflowProgram;  // sched/dataflow.hpp

// One transformer layer, all `layers` of the model, or a whole training step (embedding, layers, LM
// head and loss, backward, gradient accumulation, DP sync, optimizer: sched/step.hpp).
enum class Scope { layer, stack, step };
std::string to_string(Scope s);

struct GenerateOptions {
  Scope scope = Scope::layer;
  bool forward = true;
  bool backward = true;
  // Which parallelism's schedule `kind` is (tpsp, up or dp): the others run the workload's
  // schedule.kind. None: `kind` applies to every parallelism.
  std::optional<Parallelism> parallelism;
  // DP synchronisation as explicit ring P2P steps (docs/schedules.md, "Symmetry"): baseline and
  // bucketed collectives become t-1 (reduce-scatter, all-gather) or 2(t-1) (all-reduce) send/recv
  // steps on the stream the collective would use. Timing only (no dataflow for the DP sync).
  bool dp_as_p2p = false;
  // Symmetric mode: only the simulated DP replicas' ranks are generated (replica 0, or a group of
  // them: TpspRequest::mirror_replicas). Their collectives keep the whole group, and the engine
  // times the other replicas' part of the rings by their images among the simulated ones; a ring of
  // P2P steps (CommFuse's, or every collective with dp_as_p2p) receives from the images through a
  // proxy Recv that stands in for the simulated replica's own receive.
  bool mirror_dp = false;
  // With mirror_dp: the first rank of each TP group (at tp 1, of each node) simulated alone where the
  // others are its images (TpspRequest::tp_images). `generate --symmetry mirror` leaves it off: a DAG file names its
  // simulated ranks as the first of each stage.
  bool mirror_tp = false;
  // The share of the machine's memory this graph may take (kMaxGeneratedTasks below): a caller that
  // builds n graphs at once (search --jobs n) gives each 1/n, so that together they stay within it.
  double memory_share = 1.0;
};

struct Schedule {
  TaskGraph graph;
  Parallelism parallelism = Parallelism::tpsp;
  model::ScheduleKind kind = model::ScheduleKind::baseline;
  Scope scope = Scope::layer;
  std::int64_t tokens = 0;           // tokens processed by the simulated interval (all DP replicas)
  int gpus = 0;                      // ranks the schedule occupies
  // The first simulated_ranks / pipeline_stages ranks of each stage (every tp_images-th, below;
  // counted_ranks; without pipeline parallelism ranks 0..simulated_ranks-1) carry the work, and metrics look at those only;
  // the others hold proxies of a mirrored schedule. 0: every rank. `replicas`: identical copies of the simulated ranks that
  // the job runs (FLOPs of the simulated ranks times replicas are the job's).
  int simulated_ranks = 0;
  int replicas = 1;
  // Each simulated rank stands for this many consecutive ranks (TpspRequest::tp_images: its TP group,
  // or at tp 1 its node): the counted ranks are every tp_images-th (counted_ranks), and FLOPs count
  // replicas x tp_images times.
  int tp_images = 1;
  // Why the TP images asked for (TpspRequest::tp_images) were not made (a task waits for another TP
  // rank's); empty otherwise.
  std::string tp_images_refused;
  int pipeline_stages = 1;  // pp: ranks stage-major (RankLayout), metrics per stage
  // Point-to-point sends between nodes that the schedule asked to run on copy engines and that run on
  // SM kernels instead (see network_sends_to_sm_kernels).
  std::int64_t network_sends_on_sm = 0;
  // Why generate() built every rank although GenerateOptions::mirror_dp asked for replica 0 only (the
  // mirrored replicas would not be exact, docs/schedules.md "Symmetry"); empty otherwise.
  std::string symmetry_fallback;
  // A mirrored schedule whose fabric was too large to check (sched/symmetry.hpp, kMaxImageRoutes):
  // why its symmetry is assumed; empty otherwise.
  std::string symmetry_unchecked;
  // Set by the generator in mirror mode: why the mirrored ring is not exact (uneven row parts).
  std::string mirror_inexact;
  // What the tasks compute (Task::data_op indexes its ops), for the reference executor behind
  // `fusesim verify`; null when the generator provides none.
  std::shared_ptr<const DataflowProgram> dataflow;
};

// Rank layout: TP innermost (inside a node), then UP, then DP, then the pipeline stage (Megatron-LM's
// default order tp-cp-ep-dp-pp): rank = ((stage * dp + dp_index) * up + up_index) * tp + tp_index.
// `first`: the first rank of the stage a layout describes (stage x tp x up x dp).
struct RankLayout {
  int tp = 1, up = 1, dp = 1;
  int first = 0;
  int rank(int tp_index, int up_index, int dp_index) const {
    return first + (dp_index * up + up_index) * tp + tp_index;
  }
  int world() const { return tp * up * dp; }  // of one stage
  // The members of a group, in ring order: the TP group of (up_index, dp_index), the UP group of
  // (tp_index, dp_index).
  std::vector<int> tp_group(int up_index, int dp_index) const {
    std::vector<int> out;
    for (int t = 0; t < tp; ++t) out.push_back(rank(t, up_index, dp_index));
    return out;
  }
  std::vector<int> up_group(int tp_index, int dp_index) const {
    std::vector<int> out;
    for (int u = 0; u < up; ++u) out.push_back(rank(tp_index, u, dp_index));
    return out;
  }
};

// Copy engines cannot drive the network: NCCL's send/recv between nodes runs an SM kernel that hands
// the data to a proxy thread driving the NIC (NCCL src/transport/net.cc), whatever the schedule asks
// for inside a node. Turns every copy-engine Send whose peer is on another node into an SM-kernel Send
// (the device's default SM count; same stream, same order) and returns how many it turned.
std::int64_t network_sends_to_sm_kernels(TaskGraph& graph, const topo::Cluster& cluster);
// The first copy-engine Send between nodes, if any (simulate-dag refuses a graph that has one).
std::optional<TaskId> first_network_copy_send(const TaskGraph& graph, const topo::Cluster& cluster);

// The most tasks one generated graph may hold, and what a task costs in memory while it is simulated
// (BENCHMARKS.md, issue 4: 392 bytes of graph, 70-110 of engine state, 24 of timing; rounded up).
// generate() refuses a workload whose graph would exceed either this count or 75% of the machine's
// memory, estimated from four small probes before the graph is built (estimated_tasks, sched/tpsp.hpp;
// every rank of dp > 1 replicas: dp times the probes of one mirrored replica group, whatever the layers).
inline constexpr double kMaxGeneratedTasks = 50e6;
inline constexpr double kGraphBytesPerTask = 600.0;

// Throws InputError (file = workload_label) when the workload cannot be generated on the cluster.
// Copy-engine sends between nodes come back on SM kernels (network_sends_to_sm_kernels).
Schedule generate(const model::Workload& workload, const std::string& workload_label, const topo::Cluster& cluster,
                  model::ScheduleKind kind, const GenerateOptions& options);

}  // namespace fusesim::sched
