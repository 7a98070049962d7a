#pragma once
// The discrete-event simulator. Time is an integer of picoseconds (util/units.hpp). Events sit in a
// priority queue keyed (time, sequence number), a radix heap (sim/event_queue.hpp): time never goes
// back and events at equal times run in the order they were scheduled, so a run is deterministic.
//
// Resources, per rank: compute stream(s) (kernels share the device: their speed comes from the
// KernelCostModel given the SMs and HBM traffic communication takes at that instant), SM-based
// communication stream(s), copy engines. Links: each transfer is an action with remaining bytes and
// a rate; concurrent transfers share every link of their route with max-min fairness, re-solved
// whenever one starts or ends. Collectives run as their ring (or all-to-all) steps on the real links.
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "fusesim/model/kernel.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/units.hpp"

namespace fusesim::sim {

struct TaskTiming {
  TimePs ready_ps = -1;  // dependencies done (and stream free)
  TimePs start_ps = -1;  // began executing (a Send/Recv/Collective: its first transfer began)
  TimePs end_ps = -1;
};

// One movement of bytes between two ranks: a P2P transfer or one step of a collective.
struct TransferRecord {
  sched::TaskId task = 0;        // the Send, or the sender's Collective task
  sched::TaskId peer_task = 0;   // the Recv, or the receiver's Collective task
  int src_rank = 0;
  int dst_rank = 0;
  Bytes bytes = 0;               // payload
  int step = -1;                 // collective step, -1 for P2P
  model::CommEngine engine = model::CommEngine::sm_kernel;
  TimePs start_ps = 0;
  TimePs end_ps = 0;
};

// Watches a run from outside the core (tracing, progress). Callbacks arrive in simulated-time order.
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_task_start(const sched::Task& /*task*/, sched::TaskId /*id*/, TimePs /*now*/) {}
  virtual void on_task_end(const sched::Task& /*task*/, sched::TaskId /*id*/, TimePs /*now*/) {}
  virtual void on_transfer_end(const TransferRecord& /*transfer*/) {}
};

// Which transfers SimResult::transfers keeps. Every analysis reads the P2P records alone; a
// collective's ring steps are a record per member and step (tens of millions at 1,024 ranks), kept
// for tests and tools that look at them. An observer sees every transfer either way.
enum class TransferRecords : std::uint8_t { all, p2p_only };

// An all-reduce across nodes runs as NCCL's tree where NCCL's model (src/graph/tuning.cc) prices the
// tree below the ring: a ring's chunk crosses 2 (t - 1) hops, a tree's 2 (g - 1) inside a node and
// 2 ceil(log2 N) between its N nodes (docs/engine.md, section 6). For a report: such an all-reduce,
// its time as the tree the engine runs and as a ring by the same formula.
struct TreeAllReduce {
  int ranks = 0;
  int nodes = 0;
  Bytes bytes = 0;
  double ring_s = 0.0;
  double tree_s = 0.0;
  bool nvls = false;  // NCCL's NVLS tree (the node's switch reduces), by NCCL's collective model
  double gain_s() const { return ring_s - tree_s; }
  // The order SimResult::best_tree_all_reduce keeps the greatest of: by the tree's gain, then
  // the larger group, the more nodes, the more bytes.
  bool operator<(const TreeAllReduce& o) const {
    return std::tuple(gain_s(), ranks, nodes, bytes) < std::tuple(o.gain_s(), o.ranks, o.nodes, o.bytes);
  }
};

struct SimResult {
  std::vector<TaskTiming> tasks;           // indexed by TaskId
  std::vector<TransferRecord> transfers;   // in order of completion (see TransferRecords)
  TimePs makespan_ps = 0;                  // max end over all tasks
  std::uint64_t events_processed = 0;
  // The all-reduce run as a tree that gains most over its ring (ties: the larger group, then the
  // more nodes, then more bytes, so that every symmetry mode names the same one); absent when none
  // runs as a tree.
  std::optional<TreeAllReduce> best_tree_all_reduce;
};

// Wall-clock seconds spent in the phases of the last run(), for benchmarks. Kept out of SimResult,
// which must be identical between runs of the same graph.
struct RunProfile {
  // sched::analyze: the checks of validate(), the execution order, and the per-task gathering the
  // engine does during that pass (kernel costs, send sizes; see sched::TaskVisitor)
  double validate_s = 0.0;
  double prepare_s = 0.0;   // the rest of the set-up: per-task state, routes
  double events_s = 0.0;    // the event loop
  // CPU seconds of this thread in the event loop: on a machine shared with other work, wall clock
  // counts the time the thread waited for a core, CPU time does not.
  double events_cpu_s = 0.0;
  std::uint64_t events_scheduled = 0;  // sequence numbers handed out: pushes and moves
  // Bytes of per-task and per-edge state the engine holds during the loop (task info, pending
  // counts, successor lists, kernel-cost and send tables) plus the SimResult it fills; the graph
  // itself not included. Sizes, not capacities: reserved but untouched memory costs no pages.
  std::uint64_t state_bytes = 0;
};

class Simulator {
 public:
  Simulator(const topo::Cluster& cluster, const model::KernelCostModel& costs);
  // Validates the graph (sched::validate), then runs it to completion. A graph whose ranks exceed
  // the cluster is refused (GraphError).
  SimResult run(const sched::TaskGraph& graph, Observer* observer = nullptr);
  const RunProfile& last_profile() const { return profile_; }
  // For the runs that follow; TransferRecords::all unless set.
  void set_transfer_records(TransferRecords records) { records_ = records; }

 private:
  const topo::Cluster& cluster_;
  const model::KernelCostModel& costs_;
  TransferRecords records_ = TransferRecords::all;
  RunProfile profile_;
};

}  // namespace fusesim::sim
