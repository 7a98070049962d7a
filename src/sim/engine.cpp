// The discrete-event engine. docs/engine.md states the semantics; the comments here say why the code
// is shaped as it is.
//
// Shape of a run: all per-task, per-rank and per-flow state lives in flat vectors indexed by id;
// events are 24-byte PODs naming (kind, target, handle). Handlers change state at the current
// instant and mark what they disturbed (flows that joined or left links, ranks whose load or set of
// running kernels changed). Before time advances, settle() re-solves the disturbed flow components
// once and re-rates the compute of the disturbed ranks once, however many events the instant had:
// rates only matter over intervals of positive length, so deferring them to the end of the instant
// changes no result and saves the repeated solves of a burst (eight ranks starting a collective).
//
// Memory traffic, not arithmetic, bounds a run of a large graph: the Task objects are read exactly
// once, during the validation pass (sched::analyze calls visit() below for each task, so kernel
// costs and send sizes are gathered while the task is in cache), and the event loop then works on
// 8 bytes of TaskInfo, 4 of pending count and 24 of TaskTiming per task, plus the successor lists.
#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <map>
#include <deque>
#include <ctime>
#include <exception>
#include <string_view>
#include <limits>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fusesim/sim/engine.hpp"
#include "fusesim/sim/event_queue.hpp"
#include "fusesim/sim/flow_network.hpp"
#include "fusesim/sim/nccl_collective.hpp"
#include "fusesim/sched/symmetry.hpp"
#include "fusesim/topo/rings.hpp"
#include "fusesim/util/error.hpp"

namespace fusesim::sim {

namespace {

using sched::TaskId;
using sched::kNoTask;

enum EventKind : std::uint8_t {
  kComputeEnd,       // target: compute slot; handle compute_handle(slot)
  kFlowLatencyEnd,   // target: flow
  kFlowEnd,          // target: flow; handle flow_handle(flow)
  kCollectiveSteps,  // target: collective; its base latency has elapsed
  kTaskEnd,          // target: task that takes no time (zero-work kernel, collective of one)
  kEdgeDone,         // target: task one of whose cross-stream predecessors ended a stream wait ago
};

// In the order of sched::TaskKind's alternatives, so that the variant index converts directly.
enum class TaskType : std::uint8_t { compute, send, recv, collective };
static_assert(std::is_same_v<std::variant_alternative_t<0, sched::TaskKind>, sched::ComputeTask> &&
              std::is_same_v<std::variant_alternative_t<1, sched::TaskKind>, sched::SendTask> &&
              std::is_same_v<std::variant_alternative_t<2, sched::TaskKind>, sched::RecvTask> &&
              std::is_same_v<std::variant_alternative_t<3, sched::TaskKind>, sched::CollectiveTask>);

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
// Chunks of one ring a collective member may have in flight (Run::advance_member): NCCL_STEPS = 8
// buffer slots per connection, of which a Simple ring chunk takes NCCL_STEPS / 2 (ALLREDUCE_,
// ALLGATHER_ and REDUCESCATTER_CHUNKSTEPS, src/include/collectives.h) and an LL or LL128 chunk one
// (chunkSteps = 1 for protocols other than Simple, src/enqueue.cc).
constexpr int kSimpleChunksInFlight = 2;
constexpr int kLowLatencyChunksInFlight = 8;
// TaskInfo packs the rank with the type; Simulator::run refuses graphs with this many ranks.
constexpr int kMaxRanks = 1 << 30;

// What the loop needs of a task, 8 bytes. `aux` by type: Compute: index into kernel_cost_; Send:
// into send_spec_; Recv: its Send's id; Collective: index into collectives_.
struct TaskInfo {
  std::uint32_t aux = kNone;
  std::uint32_t rank_type = 0;  // rank in the low 30 bits, TaskType in the high 2
  int rank() const { return static_cast<int>(rank_type & (kMaxRanks - 1)); }
  TaskType type() const { return static_cast<TaskType>(rank_type >> 30); }
};

// A running kernel. Slots are recycled (at most a few kernels run per rank at once, so the pool
// stays small and cache-resident). A slot has at most one end event queued, tracked by its handle.
struct ComputeRun {
  TaskId task = 0;
  int rank = 0;
  const model::KernelCost* cost = nullptr;  // into kernel_cost_, which is complete before the loop
  std::uint32_t cost_index = 0;             // its index there (Run::pair_shares_)
  double work_left_ps = 0.0;  // picoseconds of work at rate 1, as of last_ps
  double rate = 0.0;          // fraction of the device, after the even split between kernels
  TimePs last_ps = 0;
  // When it ends at the current rate, the time of its queued end event (kTimeNever: none queued,
  // its rate not yet set or zero; see schedule_end()).
  TimePs scheduled_ps = kTimeNever;
};

// Queue handles (EventQueue::push): one per compute slot and one per flow slot; 0 is "untracked".
inline std::uint32_t compute_handle(std::uint32_t slot) { return 2 * slot + 1; }
inline std::uint32_t flow_handle(FlowId f) { return 2 * f + 2; }

// Moving an end event. Rates go down and up as transfers come and go; each change of a kernel's or
// a flow's completion moves its queued end event at once (EventQueue::move: the new time and a fresh
// sequence number, as a push at that moment would give), pushes one if none is queued, or takes it
// out when the completion is never (a kernel parked with no SMs). So the queue never holds a stale
// end, and equal times run in the order their events were last scheduled.
inline void schedule_end(EventQueue& queue, TimePs& scheduled_ps, TimePs completion_ps, std::uint8_t kind,
                         std::uint32_t target, std::uint32_t handle) {
  if (completion_ps == scheduled_ps) return;
  if (scheduled_ps == kTimeNever)
    queue.push(completion_ps, kind, target, handle);
  else if (completion_ps == kTimeNever)
    queue.cancel(handle);
  else
    queue.move(handle, completion_ps, kind);
  scheduled_ps = completion_ps;
}

struct RankState {
  const topo::DeviceModel* device = nullptr;
  TimePs stream_wait_ps = 0;                 // DeviceModel::stream_wait_s
  std::uint32_t stream_wait_lane = kNone;    // the queue lane of that delay
  int default_comm_sms = 0;
  double hbm_traffic_factor = 0.0;
  int sms_held = 0;
  // Copy engines not driving a transfer now, and what waits for one, first come first served (see
  // Run::acquire_copy_engines).
  int copy_engines_free = 0;
  std::deque<std::uint32_t> copy_engine_waiters;  // encode_waiter(): a P2P Send or a collective
  BytesPerSecond hbm_bytes_per_s = 0.0;
  std::vector<std::uint32_t> running;  // slots of the compute kernels running here, in start order
  std::vector<FlowId> flows;     // transferring flows with this rank at one end, in join order
  bool hbm_dirty = false;
  bool compute_dirty = false;
};

// What a flow is for: a P2P transfer or one step of a collective.
struct FlowOwner {
  std::uint32_t collective = kNone;  // kNone for P2P
  TaskId task = 0;                   // the Send, or the sending member's task
  TaskId peer_task = 0;              // the Recv, or the receiving member's task
  int src_rank = 0;
  int dst_rank = 0;
  int sender = 0;                    // collective: sending member's position in the group
  int receiver = 0;                  // collective: receiving member's position in the group
  int step = -1;
  int ring = 0;                      // collective: which of its rings the step flow runs on
  FlowId next_parked = kNone;        // collective: the next step flow waiting behind this one (kFlowLatencyEnd)
  int sms = 0;                       // P2P: SMs held on each end
  Bytes record_bytes = 0;
  model::CommEngine engine = model::CommEngine::sm_kernel;
  int recv_ring = 0;                 // collective: the ring whose receive it lands as (CollectiveRun::land_ring)
  TimePs start_ps = 0;
};

struct CollectiveRun {
  // The task at each ring position (group order). A mirrored collective (TaskGraph::load_alias: a
  // group of DP replicas simulated, the others their images) has tasks at the positions simulated
  // alone; an image position has none (kNoTask), never sends, and a flow into it lands on
  // image_of[position], the position of its alias: the flow out of the simulated members into the
  // next image is, shifted by the group, the flow into them from the previous image.
  std::vector<TaskId> members;
  std::vector<int> image_of;  // empty unless mirrored
  // Mirrored with images turned within groups of ranks (TaskGraph::alias_tp_images: a node's DP
  // replicas at tp 1), where the turn maps each ring onto another: entry to * rings + r is the ring
  // whose receive a step flow on ring r into image position `to` lands as, on the alias's member (the
  // flow turned back onto the alias runs on that ring). Empty: every ring lands as itself.
  std::vector<std::uint8_t> land_ring;
  int present = 0;            // positions with a task
  sched::RankGroup ranks;      // the spec's group, shared
  std::vector<int> sms;         // SMs held on each member's rank while it runs
  bool one_node = false;        // every member on one node (ContentionParams::node_collective_sms)
  // Ring kinds: `rings` rings (topo/rings.hpp), each moving an equal share of every step's chunk;
  // entry r * t + m is member m's successor in ring r and its route there. Each ring progresses on
  // its own, as NCCL's channels do (Run::advance_member).
  int rings = 1;
  std::uint8_t protocol = 0;  // Run::protocols_ index (SM-kernel collectives)
  std::vector<int> ring_next;
  std::vector<RouteId> ring_route;
  const sched::CollectiveTask* spec = nullptr;
  int steps = 0;
  // An all-reduce across nodes that runs as NCCL's tree (Run::price_tree), or a collective paced by
  // NCCL's model (Run::price_nccl_collective, tree_step_ps 0): each step flow's latency phase is
  // tree_step_ps instead of its route's and protocol's, and its payload per wire byte is scaled by
  // tree_scale (inside a node) or tree_scale_off_node (between nodes). -1: a ring.
  TimePs tree_step_ps = -1;
  std::uint32_t tree_lane = kNone;
  double tree_scale = 1.0;
  double tree_scale_off_node = 1.0;
  // Across nodes with LL, the share of LL's efficiency that keeps the collective's bus bandwidth within
  // the hosts' cap (topo::NetworkTuning, Run::choose_protocols); 1 elsewhere.
  double bus_cap_scale = 1.0;
  // A collective priced by NCCL's model (Run::price_nccl_collective): the latency charged at the
  // rendezvous in place of its protocol's base latency. -1: the protocol's.
  TimePs base_ps = -1;
  std::uint32_t base_lane = kNone;
  // Set when the steps begin (kCollectiveSteps), for start_step() and advance_member(), which run once
  // or twice per step flow: the bytes recorded for a ring's part of a step's chunk (bytes / t split
  // over the rings, the first `ring_extra` rings one byte more), the exact share the flow moves, and
  // how many chunks of one ring a member may have in flight.
  Bytes ring_record = 0;
  Bytes ring_extra = 0;
  double ring_bytes = 0.0;
  int in_flight = 1;
  int ready = 0;
  // Per present member (slot(m): its position, or its index among the present in a mirrored
  // collective), from the first step until the last member ends, then released: a mirrored
  // collective of 2,048 ranks keeps one member's steps, not 2,048 x 4,094.
  std::vector<int> present_slot;         // mirrored: position -> index among the present; else empty
  int ended = 0;                         // present members ended
  std::vector<int> sends_done;           // flows sent (steps x rings when done)
  std::vector<int> ring_sends_done;      // slot * rings + ring: flows sent on that ring
  std::vector<int> recvs_done;           // flows received
  std::vector<int> next_step;            // slot * rings + ring: the next step it will send on that ring
  std::vector<std::uint16_t> arrived;    // (slot * rings + ring) * steps + step: that step's receives landed
  // Per connection (slot * rings + ring: a member's sends on one ring, all to its successor there): the
  // step flow draining now, and the ones whose latency has passed waiting behind it, first to last.
  std::vector<FlowId> draining, parked_first, parked_last;
  std::size_t slot(int m) const { return static_cast<std::size_t>(present_slot.empty() ? m : present_slot[m]); }
};

// Where a task runs on its rank, for Run::cross_stream: its stream's kind and index, or kRecvStream
// for a Recv, which holds none.
constexpr std::uint32_t kRecvStream = kNone;
std::uint32_t stream_code(const sched::Task& t) {
  if (!sched::holds_stream(t)) return kRecvStream;
  return (static_cast<std::uint32_t>(t.stream.kind) << 16) | static_cast<std::uint32_t>(t.stream.index);
}

std::uint64_t pair_key(int src, int dst) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(src)) << 32) | static_cast<std::uint32_t>(dst);
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Distinct (kernel, dtype, device) -> index into a table of costs. A graph has millions of compute
// tasks but few distinct kernel shapes (every layer repeats the same GEMMs), so costs are computed
// once per shape and each task keeps a 4-byte index instead of a 48-byte KernelCost. The cost model
// is a pure function of its arguments (KernelCostModel::cost is const), so sharing changes nothing.
// A graph holds each distinct kernel once (TaskGraph::add, sched::KernelRef), so a kernel is known by
// its address: two equal kernels held apart (a task's kind replaced after it was added) are priced
// twice, alike.
class KernelCostCache {
 public:
  // Index of the cost of the kernel on `device`, kNone where it has not been added. The whole of a
  // compute task's visit in the common case, hence inline and apart from add().
  std::uint32_t lookup(const model::Kernel* kernel, topo::Dtype dtype, const topo::DeviceModel* device) const {
    if (slots_.empty()) return kNone;
    for (std::size_t slot = hash(kernel, dtype, device) & (slots_.size() - 1); slots_[slot] != 0;
         slot = (slot + 1) & (slots_.size() - 1)) {
      const Key& k = keys_[slots_[slot] - 1];
      if (k.kernel == kernel && k.dtype == dtype && k.device == device) return slots_[slot] - 1;
    }
    return kNone;
  }
  // Adds the cost of a kernel lookup() does not find; returns its index.
  std::uint32_t add(const model::Kernel* kernel, topo::Dtype dtype, const topo::DeviceModel* device,
                    const model::KernelCost& cost) {
    if (2 * (keys_.size() + 1) > slots_.size()) grow();
    const std::uint64_t h = hash(kernel, dtype, device);
    std::size_t slot = h & (slots_.size() - 1);
    while (slots_[slot] != 0) slot = (slot + 1) & (slots_.size() - 1);
    const auto index = static_cast<std::uint32_t>(costs_.size());
    costs_.push_back(cost);
    keys_.push_back({h, kernel, device, dtype});
    slots_[slot] = index + 1;
    return index;
  }
  const model::KernelCost& operator[](std::uint32_t i) const { return costs_[i]; }
  std::size_t size() const { return costs_.size(); }

 private:
  struct Key {
    std::uint64_t hash;
    const model::Kernel* kernel;  // into the graph, which outlives the run
    const topo::DeviceModel* device;
    topo::Dtype dtype;
  };

  static std::uint64_t mix(std::uint64_t h, std::uint64_t v) { return (h ^ v) * 0x9e3779b97f4a7c15ULL; }
  static std::uint64_t hash(const model::Kernel* kernel, topo::Dtype dtype, const topo::DeviceModel* device) {
    const std::uint64_t h = mix(mix(reinterpret_cast<std::uintptr_t>(kernel), reinterpret_cast<std::uintptr_t>(device)),
                                static_cast<std::uint64_t>(dtype));
    return h ^ (h >> 32);
  }
  void grow() {
    std::vector<std::uint32_t> bigger(slots_.empty() ? 64 : 2 * slots_.size(), 0);
    for (std::uint32_t i = 0; i < keys_.size(); ++i) {
      std::size_t slot = keys_[i].hash & (bigger.size() - 1);
      while (bigger[slot] != 0) slot = (slot + 1) & (bigger.size() - 1);
      bigger[slot] = i + 1;
    }
    slots_.swap(bigger);
  }

  std::vector<std::uint32_t> slots_;  // index + 1 into keys_/costs_; 0 = empty
  std::vector<Key> keys_;
  std::vector<model::KernelCost> costs_;
};

class Run final : public sched::TaskVisitor {
 public:
  Run(const topo::Cluster& cluster, const model::KernelCostModel& costs, const sched::TaskGraph& graph,
      Observer* observer, TransferRecords records)
      : cluster_(cluster),
        costs_(costs),
        graph_(graph),
        observer_(observer),
        record_steps_(records == TransferRecords::all),
        network_(link_capacities(cluster, graph.num_ranks())) {}

  SimResult execute(RunProfile& profile);

  // The validation pass hands each task here (see the file comment).
  void visit(TaskId id, const sched::Task& t) override;

 private:
  // The first task of a kernel on a device: prices it, or keeps the cost model's error for later (0).
  [[gnu::noinline]] std::uint32_t price_kernel(const sched::Task& t, const sched::ComputeTask& c,
                                               const topo::DeviceModel* device);
  // The cluster's links, then one HBM port per rank of the graph (link id cluster.links.size() +
  // rank): what the rank's HBM leaves to transfers beside its kernels (update_hbm_port()).
  static std::vector<BytesPerSecond> link_capacities(const topo::Cluster& cluster, int ranks) {
    std::vector<BytesPerSecond> caps;
    caps.reserve(cluster.links.size() + static_cast<std::size_t>(std::max(0, ranks)));
    for (const auto& l : cluster.links) caps.push_back(l.bandwidth_bytes_per_s);
    for (int r = 0; r < ranks && r < cluster.num_ranks(); ++r) caps.push_back(hbm_port_capacity(cluster.device(r), 0.0));
    return caps;
  }
  // HBM a rank's transfers may use, in flow bytes/s, while its kernels alone would stream
  // `kernel_demand` bytes/s: the kernels and the transfers share HBM max-min fairly as two users, so
  // the transfers get what the kernels leave and never less than half (a memory-bound kernel cannot
  // starve communication, nor the reverse: the kernel side sees the transfers' actual traffic in
  // KernelCostModel::rate). A transfer of payload rate p moves p x comm_hbm_traffic_factor bytes of
  // this HBM; the flow's protocol efficiency is left out (it is at most 1, so this errs towards
  // letting the transfer through).
  static BytesPerSecond hbm_port_capacity(const topo::DeviceModel& d, double kernel_demand) {
    const double factor = d.contention.comm_hbm_traffic_factor.value;
    const double hbm = d.hbm_bandwidth_bytes_per_s.value * d.efficiency.hbm.value;
    if (!(factor > 0.0) || !(hbm > 0.0) || !std::isfinite(hbm)) return 0.0;  // no port: not on any route
    return std::max(hbm - kernel_demand, hbm / 2.0) / factor;
  }
  topo::LinkId hbm_port(int rank) const {
    return static_cast<topo::LinkId>(cluster_.links.size()) + static_cast<topo::LinkId>(rank);
  }
  void update_hbm_port(int rank);
  // Whether the rank's HBM port can ever limit its transfers: only when its links, in and out
  // together, can carry more than the half of HBM the port always leaves them. On the shipped
  // devices they cannot (an H100's 450 + 450 GB/s of NVLink and 2 x 50 GB/s of NIC against half of
  // 2.85 TB/s), so their routes carry no port: the flows of different ranks keep sharing no link
  // and the network's components stay small (a ring's hops are solved one by one).
  bool port_binds(int rank) const {
    return rank >= 0 && static_cast<std::size_t>(rank) < port_binds_.size() && port_binds_[static_cast<std::size_t>(rank)];
  }
  void find_binding_ports();
  std::vector<char> port_binds_;  // per rank of the graph (find_binding_ports)

  void prepare_ranks();
  void prepare();
  void prepare_routes();
  // A mirrored collective's rings: every present member must take exactly one arrival per ring and
  // step, from a present predecessor or as the image of the flow out of the group (GraphError).
  void check_mirrored(const CollectiveRun& c) const;
  std::vector<std::uint8_t> land_rings(const CollectiveRun& c) const;
  RouteId route_of(int src, int dst) const { return routes_.at(pair_key(src, dst)); }

  void make_ready(TaskId id);
  void start_compute(TaskId id);
  void start_p2p(TaskId send, TaskId recv);
  void begin_p2p(TaskId send);
  void start_collective(std::uint32_t c);
  void begin_collective(std::uint32_t c);
  // Copy engines: a copy-engine transfer is driven by an engine of its sending device from launch to
  // landing (a collective: one on every member's device for the whole collective); one that finds
  // none free waits in that device's queue. Taken all or none, so a collective never holds some
  // engines while it waits for others, and no wait can become a deadlock.
  static std::uint32_t encode_waiter(bool collective, std::uint32_t id) { return (id << 1) | (collective ? 1u : 0u); }
  bool acquire_copy_engines(std::uint32_t waiter);
  void release_copy_engine(int rank);
  void start_step(std::uint32_t c, int member, int ring, int step);
  void launch_step_flow(std::uint32_t c, int member, int to, int ring, int step, RouteId route, double bytes,
                        Bytes record_bytes);
  void advance_member(std::uint32_t c, int member, int ring);
  // Moves a flow whose latency has passed onto its links.
  void begin_transfer(FlowId f);
  static std::size_t connection(const CollectiveRun& c, int member, int ring) {
    return c.slot(member) * static_cast<std::size_t>(c.rings) + static_cast<std::size_t>(ring);
  }
  void end_task(TaskId id);
  bool cross_stream(TaskId before, TaskId after) const;
  // `p2p`: a point-to-point transfer (a send/recv pair, an all-to-all's pair), which over the network
  // moves its payload at the topology's p2p_network efficiency, after its added latency, where it gives one.
  // `ring`: a ring collective's step flow (not a tree's), which between nodes costs at least its
  // protocol's network hop (topo::NetworkTuning). `scale`: the collective's share of its protocol's
  // efficiency (CollectiveRun::bus_cap_scale).
  FlowOwner& launch_flow(RouteId route, double payload_bytes, model::CommEngine engine, std::size_t protocol = 0,
                         bool p2p = false, const CollectiveRun* tree = nullptr, bool ring = false, double scale = 1.0);
  void choose_protocols();
  template <typename LatencyFn, typename DataFn, typename CapFn>
  void price_tree(CollectiveRun& c, TimePs route_ps, int hops, TimePs off_node_ps, int off_node_hops, int n_nodes,
                  double bandwidth, const LatencyFn& latency_s, const DataFn& data_s, const CapFn& cap_scale);
  template <typename DataFn>
  void price_nccl_collective(CollectiveRun& c, int n_nodes, const DataFn& data_s);
  // Whether the topology's NCCL collective model prices this kind (topo::CollectiveModel::collectives).
  bool nccl_prices(sched::CollectiveKind kind) const {
    if (!cluster_.comm.network_tuning || !cluster_.comm.network_tuning->collective_model) return false;
    const topo::CollectiveModel& m = *cluster_.comm.network_tuning->collective_model;
    return kind == sched::CollectiveKind::all_reduce    ? m.all_reduce
           : kind == sched::CollectiveKind::all_gather  ? m.all_gather
           : kind == sched::CollectiveKind::reduce_scatter ? m.reduce_scatter
                                                        : false;
  }
  // The distinct nodes of a group's ranks.
  int nodes_of(const std::vector<int>& ranks) const;
  // The share of its bandwidth NCCL's tree reaches at this size (topo::NetworkTuning::tree_size_factors
  // row `row`: 0 Simple, 1 LL, 2 LL128; -1: none).
  double tree_size_factor(int row, Bytes bytes) const;
  // Events a fixed delay after now go to a lane of the queue (event_queue.hpp), one lane per
  // distinct delay, up to kMaxLanes; beyond that to the heap.
  static constexpr std::size_t kMaxLanes = 16;
  std::uint32_t lane_for(TimePs delay_ps);
  void push_after(TimePs delay_ps, std::uint32_t lane, std::uint8_t kind, std::uint32_t target) {
    if (lane != kNone)
      queue_.push_lane(lane, now_ + delay_ps, kind, target);
    else
      queue_.push(now_ + delay_ps, kind, target);
  }

  void on_compute_end(std::uint32_t slot);
  void on_flow_end(FlowId f);
  void settle();
  void rerate(int rank);
  bool refresh_hbm(RankState& rs);
  void share_device(const std::vector<std::uint32_t>& running);  // fills shares_, one per running kernel
  std::vector<double> shares_, demand_;  // scratch of share_device()
  // share_device()'s results for two kernels, by their ordered pair of cost indices (key: (first << 32
  // | second) + 1, 0 empty); a direct-mapped table, a pair that collides is computed again.
  struct PairShares {
    std::uint64_t key = 0;
    double first = 0.0, second = 0.0;
  };
  static constexpr std::size_t kPairShares = 256;
  std::array<PairShares, kPairShares> pair_shares_{};
  std::vector<std::uint8_t> frozen_;
  // The rank whose device a transfer end on `rank` loads (TaskGraph::load_alias).
  int load_rank(int rank) const { return load_alias_.empty() ? rank : load_alias_[static_cast<std::size_t>(rank)]; }
  topo::Route proxy_route(int src, int dst, const topo::Route& real) const;
  void hold_sms(int rank, int sms) {
    if (sms == 0) return;
    rank = load_rank(rank);
    ranks_[rank].sms_held += sms;
    mark_compute(rank);
  }
  void mark_compute(int rank) {
    if (!ranks_[rank].compute_dirty) {
      ranks_[rank].compute_dirty = true;
      dirty_compute_.push_back(rank);
    }
  }
  void mark_hbm(int rank) {
    if (!ranks_[rank].hbm_dirty) {
      ranks_[rank].hbm_dirty = true;
      dirty_hbm_.push_back(rank);
    }
  }
  int sms_for(int rank, model::CommEngine engine, int requested) const {
    if (engine != model::CommEngine::sm_kernel) return 0;
    return requested >= 0 ? requested : ranks_[rank].default_comm_sms;
  }
  int collective_sms_for(const CollectiveRun& c, int rank) const {
    if (c.spec->engine != model::CommEngine::sm_kernel) return 0;
    return c.spec->sms >= 0 ? c.spec->sms : ranks_[rank].device->contention.collective_sms(c.one_node);
  }
  [[noreturn]] void deadlock() const;
  std::uint64_t state_bytes() const;

  const topo::Cluster& cluster_;
  const model::KernelCostModel& costs_;
  const sched::TaskGraph& graph_;
  Observer* observer_;
  const bool record_steps_;  // SimResult::transfers keeps collective steps (TransferRecords::all)

  EventQueue queue_;
  FlowNetwork network_;
  std::vector<topo::LinkId> route_scratch_;  // prepare_routes(): a route with its HBM ports
  TimePs now_ = 0;
  SimResult result_;

  sched::GraphAnalysis analysis_;        // successor lists (stream edges included)
  std::vector<std::uint32_t> pending_;   // unfinished predecessors, stream order included
  std::vector<TaskInfo> info_;
  KernelCostCache kernel_cost_;          // computed once per distinct kernel, before the run
  std::exception_ptr cost_failure_;      // the first cost-model error, raised after validation
  struct SendSpec {
    Bytes bytes;
    int sms;
    model::CommEngine engine;
    RouteId route;
    TaskId recv;
  };
  std::vector<SendSpec> send_spec_;
  std::vector<int> last_peer_;           // per rank: the peer of its last send (see visit())
  // Per task, where it runs on its rank (stream_code()); filled only when some device charges a
  // stream wait, which is decided by cross_stream() at each edge.
  std::vector<std::uint32_t> stream_code_;
  bool stream_waits_ = false;
  std::vector<std::uint64_t> send_pairs_;  // (rank, peer) of sends, with few repeats
  std::vector<ComputeRun> compute_;      // slots of running kernels
  std::vector<std::uint32_t> free_compute_;
  std::vector<CollectiveRun> collectives_;
  std::vector<RankState> ranks_;
  std::vector<int> load_alias_;  // TaskGraph::load_alias(), checked in prepare_ranks()
  std::vector<FlowOwner> owners_;        // by FlowId
  // What settle() needs of each flow whose rate changed, apart from the larger FlowOwner: by FlowId.
  struct FlowHot {
    TimePs scheduled_ps = kTimeNever;     // time of its queued end event, if any
    double payload_bytes_per_s = 0.0;     // rate x engine efficiency, summed into the HBM load
    double efficiency = 1.0;              // payload / wire bytes
    int src_rank = 0;
    int dst_rank = 0;
  };
  std::vector<FlowHot> flow_hot_;
  std::unordered_map<std::uint64_t, RouteId> routes_;
  std::vector<TimePs> route_latency_ps_;
  std::vector<std::uint8_t> route_off_node_;  // by route: its ends are on different nodes
  // By route x phases_ + (copy engine ? protocols : protocol), or protocols + 1 (+ 2) for a P2P transfer
  // between nodes by SM kernel (copy engine): a transfer's latency phase, and the lane of its end.
  std::vector<TimePs> latency_phase_ps_;
  std::vector<std::uint32_t> latency_lane_;
  std::vector<std::pair<TimePs, std::uint32_t>> lanes_;  // delay -> lane
  std::uint32_t now_lane_ = kNone;
  std::vector<int> dirty_compute_, dirty_hbm_;
  std::size_t ended_ = 0;

  // SM-kernel protocols: 0 is Simple (the cluster's base keys), then the cluster's others (LL,
  // LL128), then NVLS when it has one. A latency phase is route x (protocols + 1), the last being the
  // copy engine's.
  struct Protocol {
    TimePs base_ps = 0;
    TimePs step_ps = 0;
    double efficiency = 1.0;
    std::uint32_t base_lane = kNone;
    bool nvls = false;
    int chunks_in_flight = kSimpleChunksInFlight;
    // NCCL's tuning between nodes (topo::NetworkTuning): the least a hop between nodes costs on a ring
    // and on a tree (route and step together; -1: none), and whether LL's bus bandwidth cap binds it.
    TimePs ring_network_hop_ps = -1;
    TimePs tree_network_hop_ps = -1;
    bool ll = false;
    // Its row of topo::NetworkTuning::tree_size_factors (0 Simple, 1 LL, 2 LL128); -1: none.
    int tree_factor_row = -1;
  };
  std::vector<Protocol> protocols_;
  // protocols_' index of NCCL's Simple, LL and LL128 (NcclProtocol order); -1: the topology has none.
  std::array<int, 3> nccl_protocol_{0, -1, -1};
  double ll_bus_cap_two_nodes_ = 0.0, ll_bus_cap_more_nodes_ = 0.0;  // 0: no cap (no network tuning)
  std::size_t phases_ = 2;
  TimePs ce_step_latency_ps_ = 0;
  double ce_efficiency_ = 1.0;
  bool p2p_network_ = false;  // the topology gives p2p_network
  double p2p_network_efficiency_ = 1.0;
  TimePs p2p_network_added_ps_ = 0;
};

void Run::prepare_ranks() {
  // A graph of no ranks is refused by the analysis that follows.
  ranks_.resize(static_cast<std::size_t>(std::max(0, graph_.num_ranks())));
  last_peer_.assign(ranks_.size(), -1);
  load_alias_ = graph_.load_alias();
  for (int r = 0; r < graph_.num_ranks(); ++r) {
    RankState& rs = ranks_[r];
    rs.device = &cluster_.device(r);
    rs.default_comm_sms = static_cast<int>(std::llround(rs.device->contention.default_comm_sms.value));
    rs.hbm_traffic_factor = rs.device->contention.comm_hbm_traffic_factor.value;
    rs.copy_engines_free = rs.device->copy_engines;
    rs.stream_wait_ps = seconds_to_ps(rs.device->stream_wait_s.value);
    stream_waits_ = stream_waits_ || rs.stream_wait_ps > 0;
  }
  const std::size_t n = graph_.size();
  info_.resize(n);
  if (stream_waits_) stream_code_.resize(n);
  // Upper bounds, so that the pass never reallocates and copies: capacity that is never touched
  // costs address space, not memory.
  send_spec_.reserve(n);
}

void Run::visit(TaskId id, const sched::Task& t) {
  const auto type = static_cast<std::uint32_t>(t.kind.index());  // variant order: Compute, Send, Recv, Collective
  TaskInfo& info = info_[id];
  info.rank_type = static_cast<std::uint32_t>(t.rank) | (type << 30);
  if (stream_waits_) stream_code_[id] = stream_code(t);
  switch (static_cast<TaskType>(type)) {
    case TaskType::compute: {
      const auto& c = *std::get_if<sched::ComputeTask>(&t.kind);
      const topo::DeviceModel* device = ranks_[t.rank].device;
      const std::uint32_t index = kernel_cost_.lookup(&c.kernel.get(), c.dtype, device);
      info.aux = index != kNone ? index : price_kernel(t, c, device);
      break;
    }
    case TaskType::send: {
      const auto& s = std::get<sched::SendTask>(t.kind);
      info.aux = static_cast<std::uint32_t>(send_spec_.size());
      send_spec_.push_back({s.bytes, s.sms, s.engine, 0, 0});
      // Ranks mostly send to the same peer again and again: record a pair only when it changes.
      if (last_peer_[t.rank] != s.peer) {
        last_peer_[t.rank] = s.peer;
        send_pairs_.push_back(pair_key(t.rank, s.peer));
      }
      break;
    }
    case TaskType::recv:
    case TaskType::collective:
      break;  // filled from the analysis (partner, collective)
  }
}

std::uint32_t Run::price_kernel(const sched::Task& t, const sched::ComputeTask& c, const topo::DeviceModel* device) {
  // A cost-model error is raised only once the graph is known valid, as if costs were computed after
  // validation: the validation errors come first.
  if (cost_failure_) return 0;
  try {
    const model::KernelCost cost = costs_.cost(c.kernel, c.dtype, *device);
    // A kernel longer than this leaves no room in the picosecond range for the run around it (a device
    // with an absurdly low peak or bandwidth, a kernel at the readers' limits).
    constexpr TimePs kMaxKernelPs = 1'000'000'000'000'000'000;  // 1e6 s
    if (cost.duration_ps > kMaxKernelPs)
      throw InputError(fmt::format("device model '{}'", device->name), "$",
                       fmt::format("task '{}': its kernel would take {:.3g} s, beyond the 1e6 s a simulated kernel "
                                   "may take (is a peak FLOP/s or bandwidth of the device far too low?)",
                                   t.name, ps_to_seconds(cost.duration_ps)));
    return kernel_cost_.add(&c.kernel.get(), c.dtype, device, cost);
  } catch (...) {
    cost_failure_ = std::current_exception();
    return 0;
  }
}

void Run::prepare() {
  const std::size_t n = graph_.size();
  const auto& comm = cluster_.comm;
  protocols_.clear();
  protocols_.push_back({seconds_to_ps(comm.collective_base_latency_s.value), seconds_to_ps(comm.sm_step_latency_s.value),
                        comm.sm_kernel_efficiency.value});
  for (const topo::CommProtocol& p : comm.protocols)
    protocols_.push_back({seconds_to_ps(p.base_latency_s.value), seconds_to_ps(p.step_latency_s.value), p.efficiency.value,
                          kNone, false, kLowLatencyChunksInFlight});
  if (comm.nvls)
    protocols_.push_back({seconds_to_ps(comm.nvls->base_latency_s.value), seconds_to_ps(comm.nvls->step_latency_s.value),
                          comm.nvls->efficiency.value, kNone, true, kLowLatencyChunksInFlight});
  if (comm.network_tuning) {
    const topo::NetworkTuning& t = *comm.network_tuning;
    const auto set = [&](Protocol& p, const SourcedValue& ring, const SourcedValue& tree) {
      p.ring_network_hop_ps = seconds_to_ps(ring.value);
      p.tree_network_hop_ps = seconds_to_ps(tree.value);
    };
    set(protocols_[0], t.ring_hop_simple_s, t.tree_hop_simple_s);
    protocols_[0].tree_factor_row = 0;
    for (std::size_t k = 0; k < comm.protocols.size(); ++k) {
      Protocol& p = protocols_[k + 1];
      if (comm.protocols[k].name == "ll") {
        set(p, t.ring_hop_ll_s, t.tree_hop_ll_s);
        p.ll = true;
        p.tree_factor_row = 1;
      } else if (comm.protocols[k].name == "ll128") {
        set(p, t.ring_hop_ll128_s, t.tree_hop_ll128_s);
        p.tree_factor_row = 2;
      }
      if (p.tree_factor_row > 0) nccl_protocol_[static_cast<std::size_t>(p.tree_factor_row)] = static_cast<int>(k + 1);
    }
    ll_bus_cap_two_nodes_ = t.ll_max_bus_bandwidth_two_nodes_bytes_per_s.value;
    ll_bus_cap_more_nodes_ = t.ll_max_bus_bandwidth_more_nodes_bytes_per_s.value;
  }
  // The protocols', the copy engine's, a P2P transfer's between nodes by SM kernel and by copy engine,
  // then, with network tuning, each protocol's ring step between nodes (at least its network hop).
  phases_ = protocols_.size() + 3 + (comm.network_tuning ? protocols_.size() : 0);
  ce_step_latency_ps_ = seconds_to_ps(comm.copy_engine_step_latency_s.value);
  ce_efficiency_ = comm.copy_engine_efficiency.value;
  p2p_network_ = comm.p2p_network.has_value();
  if (p2p_network_) {
    p2p_network_efficiency_ = comm.p2p_network->efficiency.value;
    p2p_network_added_ps_ = seconds_to_ps(comm.p2p_network->added_latency_s.value);
    if (!(p2p_network_efficiency_ > 0.0 && p2p_network_efficiency_ <= 1.0))
      throw GraphError(fmt::format("cluster '{}': p2p network efficiency must be in (0, 1] ({})", cluster_.name,
                                   p2p_network_efficiency_));
    if (p2p_network_added_ps_ < 0)
      throw GraphError(fmt::format("cluster '{}': communication latencies must not be negative", cluster_.name));
  }
  for (const Protocol& p : protocols_) {
    if (!(p.efficiency > 0.0 && p.efficiency <= (p.nvls ? 2.0 : 1.0)))
      throw GraphError(fmt::format("cluster '{}': communication efficiency {} out of range", cluster_.name, p.efficiency));
    if (p.base_ps < 0 || p.step_ps < 0)
      throw GraphError(fmt::format("cluster '{}': communication latencies must not be negative", cluster_.name));
  }
  if (!(ce_efficiency_ > 0.0 && ce_efficiency_ <= 1.0))
    throw GraphError(fmt::format("cluster '{}': copy-engine efficiency must be in (0, 1] ({})", cluster_.name, ce_efficiency_));
  if (ce_step_latency_ps_ < 0)
    throw GraphError(fmt::format("cluster '{}': communication latencies must not be negative", cluster_.name));
  if (cost_failure_) std::rethrow_exception(cost_failure_);

  pending_ = std::move(analysis_.order.in_degree);
  result_.tasks.assign(n, TaskTiming{});
  // P2P partners and collective membership go into TaskInfo / SendSpec; the analysis' own per-task
  // vectors are then released.
  for (TaskId id = 0; id < n; ++id) {
    TaskInfo& info = info_[id];
    switch (info.type()) {
      case TaskType::send:
        send_spec_[info.aux].recv = analysis_.partner[id];
        break;
      case TaskType::recv:
        info.aux = analysis_.partner[id];
        break;
      case TaskType::collective:
        info.aux = analysis_.collective_of[id];
        break;
      case TaskType::compute:
        break;
    }
  }
  std::vector<TaskId>().swap(analysis_.partner);
  std::vector<std::uint32_t>().swap(analysis_.collective_of);

  std::size_t transfers = send_spec_.size();
  std::map<std::vector<int>, std::vector<std::vector<int>>> rings_by_group;
  std::map<std::vector<int>, std::vector<std::uint8_t>> land_by_group;
  collectives_.resize(analysis_.collectives.size());
  for (std::size_t ci = 0; ci < collectives_.size(); ++ci) {
    CollectiveRun& c = collectives_[ci];
    std::vector<TaskId> present = std::move(analysis_.collectives[ci]);  // ring order
    c.spec = &std::get<sched::CollectiveTask>(graph_.task(present.front()).kind);
    c.ranks = c.spec->group;
    const int t = static_cast<int>(c.ranks.size());
    c.present = static_cast<int>(present.size());
    if (c.present == t) {
      c.members = std::move(present);
    } else {
      c.members.assign(static_cast<std::size_t>(t), kNoTask);
      std::size_t j = 0;
      for (int m = 0; m < t; ++m)
        if (j < present.size() && graph_.task(present[j]).rank == c.ranks[static_cast<std::size_t>(m)])
          c.members[static_cast<std::size_t>(m)] = present[j++];
      std::vector<std::pair<int, int>> position;  // (rank, position), sorted
      for (int m = 0; m < t; ++m) position.emplace_back(c.ranks[static_cast<std::size_t>(m)], m);
      std::sort(position.begin(), position.end());
      c.image_of.assign(static_cast<std::size_t>(t), -1);
      c.present_slot.assign(static_cast<std::size_t>(t), -1);
      for (int m = 0, k = 0; m < t; ++m)
        if (c.members[static_cast<std::size_t>(m)] != kNoTask) c.present_slot[static_cast<std::size_t>(m)] = k++;
      for (int m = 0; m < t; ++m) {
        if (c.members[static_cast<std::size_t>(m)] != kNoTask) continue;
        const int alias = load_rank(c.ranks[static_cast<std::size_t>(m)]);
        c.image_of[static_cast<std::size_t>(m)] =
            std::lower_bound(position.begin(), position.end(), std::make_pair(alias, 0))->second;
      }
    }
    c.steps = t <= 1 ? 0 : c.spec->kind == sched::CollectiveKind::all_reduce ? 2 * (t - 1) : t - 1;
    if (t >= 2 && c.spec->kind != sched::CollectiveKind::all_to_all) {
      // Collectives of one group (a DP group's buckets) share their rings.
      auto cached = rings_by_group.find(c.ranks);
      if (cached == rings_by_group.end())
        cached = rings_by_group.emplace(c.ranks, topo::collective_rings(c.ranks, cluster_)).first;
      const std::vector<std::vector<int>>& rings = cached->second;
      c.rings = static_cast<int>(rings.size());
      c.ring_next.assign(static_cast<std::size_t>(c.rings) * t, 0);
      for (int r = 0; r < c.rings; ++r) {
        const std::vector<int>& ring = rings[static_cast<std::size_t>(r)];
        for (int i = 0; i < t; ++i)
          c.ring_next[static_cast<std::size_t>(r) * t + ring[i]] = ring[(i + 1) % t];
      }
    }
    if (!c.image_of.empty() && c.rings > 1 && graph_.alias_tp_images() > 1) {
      auto cached = land_by_group.find(c.ranks);
      if (cached == land_by_group.end()) cached = land_by_group.emplace(c.ranks, land_rings(c)).first;
      c.land_ring = cached->second;
    }
    if (!c.image_of.empty()) check_mirrored(c);
    if (record_steps_)
      transfers += static_cast<std::size_t>(c.present) * static_cast<std::size_t>(c.steps) * static_cast<std::size_t>(c.rings);
    c.one_node = cluster_.on_one_node(c.ranks);
    for (int r : c.ranks) c.sms.push_back(collective_sms_for(c, r));
  }
  result_.transfers.reserve(transfers);
  // A copy-engine transfer on a device without copy engines would wait forever.
  const auto no_engines = [&](int rank, TaskId id) {
    if (ranks_[rank].device->copy_engines > 0) return;
    throw GraphError(fmt::format("task '{}' sends on a copy engine, but rank {} (device model '{}') has no copy engines",
                                 graph_.task(id).name, rank, ranks_[rank].device->name));
  };
  for (TaskId id = 0; id < n; ++id)
    if (info_[id].type() == TaskType::send && send_spec_[info_[id].aux].engine == model::CommEngine::copy_engine)
      no_engines(info_[id].rank(), id);
  for (const CollectiveRun& c : collectives_)
    if (c.ranks.size() > 1 && c.spec->engine == model::CommEngine::copy_engine)
      for (std::size_t m = 0; m < c.members.size(); ++m)
        if (c.members[m] != kNoTask) no_engines(c.ranks[m], c.members[m]);
  find_binding_ports();
  prepare_routes();
  // Routes looked up once here rather than per transfer in the loop.
  std::uint64_t last_key = ~std::uint64_t{0};
  RouteId last_route = 0;
  for (TaskId id = 0; id < n; ++id) {
    if (info_[id].type() != TaskType::send) continue;
    SendSpec& s = send_spec_[info_[id].aux];
    const std::uint64_t key = pair_key(info_[id].rank(), info_[s.recv].rank());
    if (key != last_key) {
      last_key = key;
      last_route = routes_.at(key);
    }
    s.route = last_route;
  }
  for (CollectiveRun& c : collectives_) {
    const int t = static_cast<int>(c.ranks.size());
    if (t < 2 || c.spec->kind == sched::CollectiveKind::all_to_all) continue;
    for (std::size_t e = 0; e < c.ring_next.size(); ++e)
      c.ring_route.push_back(c.members[e % t] == kNoTask ? RouteId{0}
                                                          : route_of(c.ranks[e % t], c.ranks[c.ring_next[e]]));
  }
  now_lane_ = lane_for(0);
  for (RankState& rs : ranks_)
    if (rs.stream_wait_ps > 0) rs.stream_wait_lane = lane_for(rs.stream_wait_ps);
  for (Protocol& p : protocols_) p.base_lane = lane_for(p.base_ps);
  const std::size_t p = protocols_.size();
  for (std::size_t r = 0; r < route_latency_ps_.size(); ++r) {
    const TimePs added = route_off_node_[r] != 0 ? p2p_network_added_ps_ : 0;
    for (std::size_t k = 0; k < phases_; ++k) {
      if (k >= p + 3) {  // a ring step between nodes: at least its protocol's network hop
        const Protocol& q = protocols_[k - p - 3];
        latency_phase_ps_.push_back(std::max(route_latency_ps_[r] + q.step_ps, q.ring_network_hop_ps));
        continue;
      }
      const TimePs step = k < p        ? protocols_[k].step_ps
                          : k == p     ? ce_step_latency_ps_
                          : k == p + 1 ? protocols_[0].step_ps + added
                                       : ce_step_latency_ps_ + added;
      latency_phase_ps_.push_back(route_latency_ps_[r] + step);
    }
  }
  // Lanes for the ring steps' and ordinary transfers' delays first, the P2P-between-nodes ones after,
  // so that those (only some graphs send between nodes) never take a lane from the others.
  latency_lane_.assign(latency_phase_ps_.size(), kNone);
  for (const bool between_nodes : {false, true})
    for (std::size_t i = 0; i < latency_phase_ps_.size(); ++i)
      if ((i % phases_ > p) == between_nodes) latency_lane_[i] = lane_for(latency_phase_ps_[i]);
  choose_protocols();
}

// A mirrored collective whose images are turned within groups of G ranks (TaskGraph::alias_tp_images;
// an image's alias is the first of its group): turning every rank by j within its group maps each
// ring onto a ring, perhaps another (a node's replicas at tp 1: ring k onto ring k + j, topo/rings.hpp).
// The step flow on ring k into an image turned by j from its alias stands for the flow turned back,
// into the alias, on the ring that turns onto k. Returns, per position and ring, that ring; GraphError
// where the turn maps a ring onto no ring.
std::vector<std::uint8_t> Run::land_rings(const CollectiveRun& c) const {
  const int t = static_cast<int>(c.ranks.size()), R = c.rings, G = graph_.alias_tp_images();
  std::vector<std::pair<int, int>> position;  // (rank, position), sorted
  for (int m = 0; m < t; ++m) position.emplace_back(c.ranks[static_cast<std::size_t>(m)], m);
  std::sort(position.begin(), position.end());
  const auto pos_of = [&](int rank) {
    const auto it = std::lower_bound(position.begin(), position.end(), std::make_pair(rank, 0));
    return it != position.end() && it->first == rank ? it->second : -1;
  };
  const auto turned = [&](int m, int j) {
    const int rank = c.ranks[static_cast<std::size_t>(m)];
    return pos_of(rank - rank % G + (rank % G + j) % G);
  };
  const auto next = [&](int ring, int m) { return c.ring_next[static_cast<std::size_t>(ring) * t + m]; };
  // onto[j * R + k]: the ring that ring k turns onto when every member is turned by j (tried from
  // (k + j) mod R on, so that a turn by 0 maps every ring onto itself even were two rings alike).
  std::vector<int> onto(static_cast<std::size_t>(G * R), -1);
  for (int j = 0; j < G; ++j)
    for (int k = 0; k < R; ++k)
      for (int i = 0; i < R && onto[static_cast<std::size_t>(j * R + k)] < 0; ++i) {
        const int k2 = (k + j + i) % R;
        bool maps = true;
        for (int m = 0; m < t && maps; ++m) {
          const int a = turned(m, j), b = turned(next(k, m), j);
          maps = a >= 0 && b >= 0 && next(k2, a) == b;
        }
        if (maps) onto[static_cast<std::size_t>(j * R + k)] = k2;
      }
  std::vector<std::uint8_t> land(static_cast<std::size_t>(t) * R);
  for (int to = 0; to < t; ++to) {
    const int rank = c.ranks[static_cast<std::size_t>(to)], j = rank % G - load_rank(rank) % G;
    for (int k = 0; k < R; ++k) {
      int from = -1;  // the ring that turns onto k
      for (int k2 = 0; k2 < R; ++k2)
        if (onto[static_cast<std::size_t>(((j % G + G) % G) * R + k2)] == k) from = k2;
      if (from < 0)
        throw GraphError(fmt::format("mirrored collective '{}' over {} ranks: turning its ranks by {} within groups of {} "
                                     "maps no ring onto its ring {}",
                                     graph_.task(*std::min_element(c.members.begin(), c.members.end())).name, t, j, G, k));
      land[static_cast<std::size_t>(to) * R + k] = static_cast<std::uint8_t>(from);
    }
  }
  return land;
}

void Run::check_mirrored(const CollectiveRun& c) const {
  const int t = static_cast<int>(c.ranks.size());
  const auto what = [&] {
    const TaskId first = *std::min_element(c.members.begin(), c.members.end());  // a present one: kNoTask is largest
    return fmt::format("mirrored collective '{}' over {} ranks ({} simulated)", graph_.task(first).name, t, c.present);
  };
  if (c.spec->kind == sched::CollectiveKind::all_to_all) throw GraphError(what() + ": an all-to-all has no ring to mirror");
  // Per member and ring: the chunks that land as its receive there (on another ring's flow into an
  // image turned from it, CollectiveRun::land_ring).
  std::vector<int> arrivals(static_cast<std::size_t>(t) * c.rings, 0);
  for (int r = 0; r < c.rings; ++r)
    for (int m = 0; m < t; ++m) {
      if (c.members[static_cast<std::size_t>(m)] == kNoTask) continue;
      const int to = c.ring_next[static_cast<std::size_t>(r) * t + m];
      const bool image = c.members[static_cast<std::size_t>(to)] == kNoTask;
      const int lands = image ? c.image_of[to] : to;
      const int ring = image && !c.land_ring.empty() ? c.land_ring[static_cast<std::size_t>(to) * c.rings + r] : r;
      ++arrivals[static_cast<std::size_t>(lands) * c.rings + ring];
    }
  for (int r = 0; r < c.rings; ++r)
    for (int m = 0; m < t; ++m) {
      const int count = arrivals[static_cast<std::size_t>(m) * c.rings + r];
      if (c.members[static_cast<std::size_t>(m)] != kNoTask && count != 1)
        throw GraphError(fmt::format("{}: in ring {} rank {} would receive {} chunks per step: the ring does not repeat "
                                     "along the simulated ranks' images",
                                     what(), r, c.ranks[static_cast<std::size_t>(m)], count));
    }
}

// Each ring collective of SM kernels takes the protocol whose time alone is least for its size, with
// its first ring's mean hop latency and slowest hop's bandwidth (NCCL's tuning model: one latency and
// one bandwidth per algorithm and protocol, precomputed, then one formula per query). NVLS only for
// an all-reduce inside one node (the NVSwitch of that node reduces). An all-reduce across nodes runs
// as NCCL's tree where that model prices the tree lower (price_tree); where the topology gives NCCL's
// collective model, the collectives it lists across nodes take its choice and time instead
// (price_nccl_collective).
void Run::choose_protocols() {
  // The route of a ring's first hop of each kind, per pair: a group's collectives share their rings,
  // so each group searches at most three routes.
  std::unordered_map<std::uint64_t, std::pair<TimePs, double>> hop_routes;
  const auto hop_route = [&](int src, int dst) -> const std::pair<TimePs, double>& {
    auto [it, fresh] = hop_routes.try_emplace(pair_key(src, dst));
    if (fresh) {
      const topo::Route route = cluster_.route(src, dst);
      it->second = {route.latency_ps, route.links.empty() ? 0.0 : cluster_.bottleneck_bytes_per_s(route)};
    }
    return it->second;
  };
  const int per_node = std::max(1, cluster_.devices_per_node);
  for (CollectiveRun& c : collectives_) {
    const int t = static_cast<int>(c.ranks.size());
    if (t < 2 || c.spec->kind == sched::CollectiveKind::all_to_all || c.spec->engine != model::CommEngine::sm_kernel ||
        c.ring_route.empty())
      continue;
    // All t hops of the first ring, the members present or not (a mirrored collective's present
    // members need not hold its hops in proportion: with node images they are the first rank of
    // each node, whose hops stay inside it), in three kinds, each priced by the route of its first
    // hop: inside a node, between nodes on one rail (the same local index: a rail ring's hops to the
    // next node), between nodes across rails (a rail ring's way back, by a spine). A chunk crosses
    // the ring paying each hop's latency once, and the ring drains at its slowest hop's bandwidth (a
    // NIC where the group spans nodes), as NCCL's model counts intra- and inter-node steps apart
    // (tuning.cc).
    std::array<int, 3> first{-1, -1, -1}, count{0, 0, 0};
    for (int m = 0; m < t; ++m) {
      const int a = c.ranks[m], b = c.ranks[c.ring_next[m]];
      const int kind = cluster_.node_of(a) == cluster_.node_of(b) ? 0 : a % per_node == b % per_node ? 1 : 2;
      ++count[kind];
      if (first[kind] < 0) first[kind] = m;
    }
    const int hops = t, off_node_hops = count[1] + count[2];
    double bandwidth = std::numeric_limits<double>::infinity();
    TimePs route_ps = 0, off_node_ps = 0;  // sums over the t hops, exact
    std::array<TimePs, 3> kind_ps{0, 0, 0};
    for (int kind = 0; kind < 3; ++kind) {
      if (first[kind] < 0) continue;
      const auto& [latency_ps, bottleneck] = hop_route(c.ranks[first[kind]], c.ranks[c.ring_next[first[kind]]]);
      kind_ps[kind] = latency_ps;
      route_ps += latency_ps * count[kind];
      if (kind > 0) off_node_ps += latency_ps * count[kind];
      bandwidth = std::min(bandwidth, bottleneck);
    }
    if (!std::isfinite(bandwidth) || bandwidth <= 0.0) continue;
    const bool one_node = off_node_hops == 0;  // a ring visits every member: one on another node is a crossing
    const int nodes = one_node ? 1 : nodes_of(c.ranks);
    const double step_bytes = static_cast<double>(c.spec->bytes) / t / c.rings;
    // LL across nodes moves at most the hosts' cap of bus bandwidth (NCCL's llMaxBw): the share of
    // its efficiency that keeps rings x bottleneck x efficiency within it.
    const auto cap_scale = [&](const Protocol& p, double bus_bytes_per_s) {
      const double cap = nodes == 2 ? ll_bus_cap_two_nodes_ : ll_bus_cap_more_nodes_;
      return p.ll && !one_node && cap > 0.0 ? std::min(1.0, cap / bus_bytes_per_s) : 1.0;
    };
    const auto ring_scale = [&](const Protocol& p) { return cap_scale(p, c.rings * bandwidth * p.efficiency); };
    const auto data_s = [&](const Protocol& p) { return c.steps * step_bytes / (bandwidth * p.efficiency); };
    // A ring's latency: each of its t hops at its route's latency and the protocol's step, a hop
    // between nodes at least the protocol's network hop (NCCL's hwLat[NET], where the topology has it).
    const double hop_latency_s = ps_to_seconds(1) * (static_cast<double>(route_ps) / hops);
    const auto latency_s = [&](const Protocol& p) {
      if (one_node || p.ring_network_hop_ps < 0)
        return ps_to_seconds(p.base_ps) + c.steps * (hop_latency_s + ps_to_seconds(p.step_ps));
      TimePs hop_ps = 0;
      for (int kind = 0; kind < 3; ++kind)
        hop_ps += count[kind] * (kind == 0 ? kind_ps[kind] + p.step_ps
                                           : std::max(kind_ps[kind] + p.step_ps, p.ring_network_hop_ps));
      return ps_to_seconds(p.base_ps) + c.steps * ps_to_seconds(1) * (static_cast<double>(hop_ps) / hops);
    };
    if (!one_node && t % nodes == 0 && t / nodes >= 2 && nccl_prices(c.spec->kind)) {
      price_nccl_collective(c, nodes, data_s);
      continue;
    }
    if (protocols_.size() > 1) {
      double best = std::numeric_limits<double>::infinity();
      for (std::size_t k = 0; k < protocols_.size(); ++k) {
        const Protocol& p = protocols_[k];
        if (p.nvls && !(one_node && c.spec->kind == sched::CollectiveKind::all_reduce)) continue;
        const double time = latency_s(p) + data_s(p) / ring_scale(p);
        // Strictly less: on a tie the earlier protocol (Simple first) keeps it, deterministically.
        if (time < best) best = time, c.protocol = static_cast<std::uint8_t>(k);
      }
    }
    c.bus_cap_scale = ring_scale(protocols_[c.protocol]);
    if (c.spec->kind == sched::CollectiveKind::all_reduce && !one_node && cluster_.comm.tree_all_reduce)
      price_tree(c, route_ps, hops, off_node_ps, off_node_hops, nodes, bandwidth, latency_s, data_s, cap_scale);
  }
}

// NCCL's tree all-reduce (src/graph/tuning.cc), which NCCL runs across nodes where its model prices
// it below the ring: a chunk crosses 2 x ((g - 1) hops inside a node + ceil(log2 N) between nodes),
// N nodes of g ranks, against the ring's 2 (t - 1); at 0.92 of the bandwidth. Run on the ring's step
// flows (a double binary tree moves about 2 n / g bytes over each NIC each way beyond two nodes, as g
// rings do; on two nodes each node sends its reduced half once, n / g per NIC, half a ring's), with
// the tree's latency spread evenly over the steps and its bandwidth as the flows' efficiency. The
// ring's protocol and constants for both; the mean hop of each kind from the ring's hops.
template <typename LatencyFn, typename DataFn, typename CapFn>
void Run::price_tree(CollectiveRun& c, TimePs route_ps, int hops, TimePs off_node_ps, int off_node_hops, int n_nodes,
                     double bandwidth, const LatencyFn& latency_s, const DataFn& data_s, const CapFn& cap_scale) {
  constexpr double kTreeBandwidth = 0.92;  // tuning.cc: busBw * .92 for Tree AllReduce
  const int t = static_cast<int>(c.ranks.size());
  if (n_nodes < 2 || t % n_nodes != 0) return;  // a tree of g ranks per node
  const int per_node = t / n_nodes;
  const Protocol& p = protocols_[c.protocol];
  const int on_node_hops = hops - off_node_hops;
  const double intra_ps = on_node_hops > 0 ? static_cast<double>(route_ps - off_node_ps) / on_node_hops : 0.0;
  const double inter_ps = static_cast<double>(off_node_ps) / off_node_hops;
  const int log_nodes = std::bit_width(static_cast<unsigned>(n_nodes - 1));  // ceil(log2 N)
  // A hop between nodes: its route and the protocol's step, at least the protocol's network hop on a
  // tree where the topology gives one (NCCL's hwLat[NET][TREE]).
  const double inter_hop_ps =
      std::max(inter_ps + static_cast<double>(p.step_ps), static_cast<double>(p.tree_network_hop_ps));
  const double hops_ps =
      2.0 * ((per_node - 1) * (intra_ps + static_cast<double>(p.step_ps)) + log_nodes * inter_hop_ps);
  const double ring_s = latency_s(p) + data_s(p) / c.bus_cap_scale;
  // The ring drains at its NIC where the group spans nodes: the tree's data time is the ring's over
  // 0.92, halved on two nodes; LL's within the hosts' cap of the tree's bus bandwidth.
  const double off_node_scale = kTreeBandwidth * (n_nodes == 2 ? 2.0 : 1.0);
  const double scale = cap_scale(p, c.rings * bandwidth * p.efficiency * off_node_scale);
  const double size_factor = tree_size_factor(p.tree_factor_row, c.spec->bytes);
  const double tree_data_s = data_s(p) * (n_nodes == 2 ? 0.5 : 1.0) / kTreeBandwidth / scale / size_factor;
  const double tree_s = ps_to_seconds(p.base_ps) + ps_to_seconds(1) * hops_ps + tree_data_s;
  if (!(tree_s < ring_s)) return;
  c.tree_step_ps = static_cast<TimePs>(std::llround(hops_ps / c.steps));
  c.tree_lane = lane_for(c.tree_step_ps);
  c.tree_scale = kTreeBandwidth * size_factor;
  c.tree_scale_off_node = off_node_scale * size_factor;
  c.bus_cap_scale = scale;
  const TreeAllReduce here{t, n_nodes, c.spec->bytes, ring_s, tree_s};
  if (auto& widest = result_.best_tree_all_reduce; !widest || *widest < here) widest = here;
}

// An all-reduce, all-gather or reduce-scatter across nodes of g >= 2 members each where the topology
// gives NCCL's model and lists its kind (topo::CollectiveModel): NCCL's algorithm and protocol, the
// least time of its model, which the run then takes alone. Its latency is charged at the rendezvous
// (no latency phase per step), and its step flows move their payload at the model's algorithm
// bandwidth: the ring's drain at the slowest hop (data_s, the protocol's efficiency there) over the
// model's bytes / bandwidth scales the flows between nodes (and those inside a node where it speeds
// them up: an NVLS tree's switch reduces there). Contention still acts on the flows' links.
template <typename DataFn>
void Run::price_nccl_collective(CollectiveRun& c, int n_nodes, const DataFn& data_s) {
  const topo::NetworkTuning& tuning = *cluster_.comm.network_tuning;
  const int t = static_cast<int>(c.ranks.size());
  const Bytes bytes = c.spec->bytes;
  struct Choice {
    NcclAlgorithm algorithm;
    std::size_t protocol;
    NcclCollectiveTime time;
    double seconds;
  };
  std::optional<Choice> best, best_ring;
  for (const NcclAlgorithm a : {NcclAlgorithm::ring, NcclAlgorithm::tree, NcclAlgorithm::nvls_tree}) {
    if (a != NcclAlgorithm::ring && !cluster_.comm.tree_all_reduce) continue;  // NCCL_ALGO=Ring
    for (std::size_t k = 0; k < 3; ++k) {
      if (nccl_protocol_[k] < 0) continue;
      const auto time =
          nccl_collective_time(tuning, c.spec->kind, a, static_cast<NcclProtocol>(k), t, n_nodes, bytes);
      if (!time) continue;
      const Choice here{a, k, *time, time->seconds(bytes)};
      // Strictly less: on a tie the earlier (ring before tree, Simple first) keeps it, as NCCL's scan does.
      if (!best || here.seconds < best->seconds) best = here;
      if (a == NcclAlgorithm::ring && (!best_ring || here.seconds < best_ring->seconds)) best_ring = here;
    }
  }
  if (!best) return;
  // NCCL chooses by its model; the run takes what the chosen algorithm measures (the topology's
  // correction of the model, none where it has none).
  best->time = nccl_measured_time(*tuning.collective_model, c.spec->kind, best->algorithm,
                                  static_cast<NcclProtocol>(best->protocol), n_nodes, bytes, best->time);
  c.protocol = static_cast<std::uint8_t>(nccl_protocol_[best->protocol]);
  const Protocol& p = protocols_[c.protocol];
  const double model_data_s = static_cast<double>(bytes) / best->time.bytes_per_s;
  const double scale = model_data_s > 0.0 ? data_s(p) / model_data_s : 1.0;  // nothing to move: as it is
  c.tree_step_ps = 0;
  c.tree_lane = lane_for(0);
  c.tree_scale_off_node = scale;
  c.tree_scale = std::max(1.0, scale);
  c.bus_cap_scale = 1.0;
  c.base_ps = seconds_to_ps(best->time.latency_s);
  c.base_lane = lane_for(c.base_ps);
  if (best->algorithm == NcclAlgorithm::ring) return;
  const TreeAllReduce here{t, n_nodes, bytes, best_ring->seconds, best->seconds,
                           best->algorithm == NcclAlgorithm::nvls_tree};
  if (auto& widest = result_.best_tree_all_reduce; !widest || *widest < here) widest = here;
}

// The share of its bandwidth NCCL's tree reaches at this size and protocol (treeCorrectionFactor,
// indexed by floor(log2(bytes / 64)) as tuning.cc's log2i(nBytes >> 6)); 1 outside the table.
double Run::tree_size_factor(int row, Bytes bytes) const {
  if (!cluster_.comm.network_tuning || row < 0) return 1.0;
  return sim::tree_size_factor(*cluster_.comm.network_tuning, static_cast<NcclProtocol>(row), bytes);
}

int Run::nodes_of(const std::vector<int>& ranks) const {
  std::vector<int> nodes;
  nodes.reserve(ranks.size());
  for (int r : ranks) nodes.push_back(cluster_.node_of(r));
  std::sort(nodes.begin(), nodes.end());
  return static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
}

std::uint32_t Run::lane_for(TimePs delay_ps) {
  for (const auto& [delay, lane] : lanes_)
    if (delay == delay_ps) return lane;
  if (lanes_.size() >= kMaxLanes) return kNone;
  lanes_.emplace_back(delay_ps, queue_.add_lane());
  return lanes_.back().second;
}

// Every (source, destination) pair the graph can use, resolved before the run with one
// routes_from() per source: the topology's graph search is far slower than a table lookup.
// A transfer into a proxy rank (load alias) stands in for the mirrored transfer into the alias. It
// leaves by the real sender's links, but must arrive by the alias's: those carry the alias's other
// incoming traffic (a Ulysses exchange through the same NIC), which the proxy rank's links do not.
// The mirrored sender is the sender shifted as the receiver is (src - (dst - alias), modulo the ranks
// of the sender's pipeline stage). The route is the real one up to the last vertex before its
// destination that the mirrored sender's route to the alias visits at the same hop (the leaf or
// switch where the two join), then the mirrored route from there (sched::proxy_route). With up = 1
// the sender is the alias's own mirror and the route turns at the leaf: out by the alias's NIC, back
// in by it. Empty when the routes never meet (the real route is then kept).
topo::Route Run::proxy_route(int src, int dst, const topo::Route& real) const {
  return sched::proxy_route(cluster_, graph_, src, dst, real);
}

void Run::prepare_routes() {
  std::vector<std::uint64_t> pairs = std::move(send_pairs_);
  for (const CollectiveRun& c : collectives_) {
    const int t = static_cast<int>(c.ranks.size());
    if (t < 2) continue;
    if (c.spec->kind == sched::CollectiveKind::all_to_all) {
      for (int i = 0; i < t; ++i)
        for (int j = 0; j < t; ++j)
          if (i != j) pairs.push_back(pair_key(c.ranks[i], c.ranks[j]));
    } else {
      for (std::size_t e = 0; e < c.ring_next.size(); ++e)
        if (c.members[e % t] != kNoTask) pairs.push_back(pair_key(c.ranks[e % t], c.ranks[c.ring_next[e]]));
    }
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  routes_.reserve(pairs.size());
  // A source that needs few destinations (a ring: one) asks for each route alone: route() stops its
  // search at the destination and builds one route, 3-8 times cheaper than routes_from(), which
  // builds a route to every rank (measured on 128 and 2,048 DGX nodes, 2026-11-27). Both give the same
  // routes (topo/route.cpp).
  // Those single routes are searched together (Cluster::routes: by A* where many cross nodes).
  constexpr std::size_t kFewDestinations = 4;
  const auto source_of = [&](std::size_t k) { return static_cast<int>(pairs[k] >> 32); };
  const auto destination_of = [&](std::size_t k) { return static_cast<int>(pairs[k] & 0xffffffffu); };
  const auto run_end = [&](std::size_t k) {
    std::size_t end = k;
    while (end < pairs.size() && source_of(end) == source_of(k)) ++end;
    return end;
  };
  const auto routable = [&](int dst) { return dst >= 0 && dst < cluster_.num_ranks(); };
  std::vector<std::pair<int, int>> alone_pairs;
  for (std::size_t k = 0, end = 0; k < pairs.size(); k = end) {
    end = run_end(k);
    if (end - k > kFewDestinations) continue;
    for (std::size_t j = k; j < end; ++j)
      if (routable(destination_of(j))) alone_pairs.emplace_back(source_of(j), destination_of(j));
  }
  const std::vector<topo::Route> alone = cluster_.routes(alone_pairs);
  std::size_t next_alone = 0;
  const topo::Route none;
  std::vector<topo::Route> from;
  std::size_t i = 0;
  while (i < pairs.size()) {
    const int src = source_of(i);
    const std::size_t end = run_end(i);
    const bool few = end - i <= kFewDestinations;
    if (!few) from = cluster_.routes_from(src);
    for (; i < end; ++i) {
      const int dst = destination_of(i);
      const topo::Route* route = few ? (routable(dst) ? &alone[next_alone++] : &none)
                                     : static_cast<std::size_t>(dst) < from.size() ? &from[dst] : nullptr;
      if (!route || route->links.empty())
        throw GraphError(fmt::format("cluster '{}' has no route from rank {} to rank {}", cluster_.name, src, dst));
      const topo::Route mirrored = load_rank(dst) != dst ? proxy_route(src, dst, *route) : topo::Route{};
      if (!mirrored.links.empty()) route = &mirrored;
      // The transfer also streams through the HBM of both ends (a port per rank, see link_capacities).
      route_scratch_.assign(route->links.begin(), route->links.end());
      for (int end : {load_rank(src), load_rank(dst)})
        if (port_binds(end)) route_scratch_.push_back(hbm_port(end));
      const RouteId id = network_.add_route(route_scratch_);
      route_latency_ps_.push_back(route->latency_ps);
      route_off_node_.push_back(cluster_.node_of(src) != cluster_.node_of(dst) ? 1 : 0);
      routes_.emplace(pairs[i], id);
    }
  }
}

SimResult Run::execute(RunProfile& profile) {
  const auto t0 = std::chrono::steady_clock::now();
  prepare_ranks();
  analysis_ = sched::analyze(graph_, this);
  const auto t1 = std::chrono::steady_clock::now();
  profile.validate_s = std::chrono::duration<double>(t1 - t0).count();
  prepare();
  const auto t2 = std::chrono::steady_clock::now();
  profile.prepare_s = std::chrono::duration<double>(t2 - t1).count();
  const double cpu2 = thread_cpu_s();
  profile.state_bytes = state_bytes();
  queue_.reserve(1024);
  for (TaskId id = 0; id < graph_.size(); ++id)
    if (pending_[id] == 0) make_ready(id);

  for (;;) {
    // Rates are brought up to date before time moves on (see the file comment).
    if ((network_.needs_settle() || !dirty_hbm_.empty() || !dirty_compute_.empty()) &&
        (queue_.empty() || queue_.top_time() > now_))
      settle();
    if (queue_.empty()) break;
    // The fields one by one, not the 24-byte event as a whole: the top may have been written field
    // by field just now (EventQueue::push), and a wide reload of narrow stores stalls.
    const Event& top = queue_.take_top();
    struct {
      TimePs time;
      std::uint32_t target;
    } const e{top.time, top.target};
    const std::uint8_t kind = top.kind();
    now_ = e.time;
    switch (kind) {
      case kComputeEnd:
        queue_.drop_top();
        on_compute_end(e.target);
        break;
      case kFlowLatencyEnd: {
        queue_.drop_top();
        const FlowId f = e.target;
        const FlowOwner& o = owners_[f];
        if (o.collective != kNone && !collectives_[o.collective].draining.empty()) {
          // A ring's chunks leave a member one after the other, as NCCL's slots of one connection do:
          // this one waits behind the one draining, its latency already paid.
          CollectiveRun& c = collectives_[o.collective];
          const std::size_t k = connection(c, o.sender, o.ring);
          if (c.draining[k] != kNone) {
            if (c.parked_last[k] == kNone)
              c.parked_first[k] = f;
            else
              owners_[c.parked_last[k]].next_parked = f;
            c.parked_last[k] = f;
            owners_[f].next_parked = kNone;
            break;
          }
          c.draining[k] = f;
        }
        begin_transfer(f);
        break;  // its rate, and the HBM load it adds, come from the next settle()
      }
      case kFlowEnd:
        queue_.drop_top();
        on_flow_end(e.target);
        break;
      case kCollectiveSteps: {
        queue_.drop_top();
        CollectiveRun& c = collectives_[e.target];
        const int t = static_cast<int>(c.ranks.size());
        const auto n = static_cast<std::size_t>(c.present);
        c.sends_done.assign(n, 0);
        c.ring_sends_done.assign(n * static_cast<std::size_t>(c.rings), 0);
        c.recvs_done.assign(n, 0);
        const auto rings = static_cast<std::size_t>(c.rings);
        c.next_step.assign(n * rings, 0);
        if (c.spec->kind != sched::CollectiveKind::all_to_all) {
          c.draining.assign(n * rings, kNone);
          c.parked_first.assign(n * rings, kNone);
          c.parked_last.assign(n * rings, kNone);
        }
        c.arrived.assign(n * rings * static_cast<std::size_t>(c.steps), 0);
        c.ring_record = c.spec->bytes / t / c.rings;
        c.ring_extra = c.spec->bytes / t % c.rings;
        c.ring_bytes = static_cast<double>(c.spec->bytes) / t / c.rings;
        // A ring's chunks in flight per member (an all-to-all starts all its steps below and reads none).
        c.in_flight = c.spec->engine == model::CommEngine::sm_kernel ? protocols_[c.protocol].chunks_in_flight
                                                                     : kSimpleChunksInFlight;
        // An all-to-all sends to every peer at once, as NCCL runs it (grouped send/recv pairs, one
        // per peer, in one kernel); a ring member starts its first step on each ring.
        const int first_steps = c.spec->kind == sched::CollectiveKind::all_to_all ? c.steps : 1;
        for (int m = 0; m < t; ++m)
          if (c.members[static_cast<std::size_t>(m)] != kNoTask)
            for (int r = 0; r < c.rings; ++r)
              for (int s = 0; s < first_steps; ++s) start_step(e.target, m, r, s);
        break;
      }
      case kTaskEnd:
        queue_.drop_top();
        end_task(e.target);
        break;
      case kEdgeDone:
        queue_.drop_top();
        if (--pending_[e.target] == 0) make_ready(e.target);
        break;
      default:
        throw std::logic_error("unknown event kind");
    }
    ++result_.events_processed;
  }
  profile.events_s = seconds_since(t2);
  profile.events_cpu_s = thread_cpu_s() - cpu2;
  profile.events_scheduled = queue_.scheduled();
  if (ended_ != graph_.size()) deadlock();
  return std::move(result_);
}

void Run::make_ready(TaskId id) {
  result_.tasks[id].ready_ps = now_;
  const TaskInfo info = info_[id];
  switch (info.type()) {
    case TaskType::compute:
      start_compute(id);
      break;
    case TaskType::send: {
      const SendSpec& s = send_spec_[info.aux];
      // The sender's kernel is launched when its stream reaches it and holds its SMs from then on,
      // spinning until the receiver is there too (NCCL's send kernel waits for the peer's recv).
      hold_sms(info.rank(), sms_for(info.rank(), s.engine, s.sms));
      if (result_.tasks[s.recv].ready_ps >= 0) start_p2p(id, s.recv);
      break;
    }
    case TaskType::recv: {
      const TaskId send = info.aux;
      if (result_.tasks[send].ready_ps >= 0) start_p2p(send, id);
      break;
    }
    case TaskType::collective: {
      CollectiveRun& c = collectives_[info.aux];
      // Each member's kernel holds its SMs from its own launch, spinning until the last member
      // arrives; the SM count is the member's (c.sms), which depends on its rank and on whether the
      // group leaves the node.
      if (c.ranks.size() > 1) hold_sms(info.rank(), collective_sms_for(c, info.rank()));
      if (++c.ready == c.present) start_collective(info.aux);
      break;
    }
  }
}

void Run::start_compute(TaskId id) {
  const TaskInfo info = info_[id];
  result_.tasks[id].start_ps = now_;
  if (observer_) observer_->on_task_start(graph_.task(id), id, now_);
  const model::KernelCost& cost = kernel_cost_[info.aux];
  if (cost.duration_ps <= 0) {
    push_after(0, now_lane_, kTaskEnd, id);
    return;
  }
  std::uint32_t slot;
  if (!free_compute_.empty()) {
    slot = free_compute_.back();
    free_compute_.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(compute_.size());
    compute_.emplace_back();
  }
  ComputeRun& run = compute_[slot];
  const int rank = info.rank();
  run.task = id;
  run.rank = rank;
  run.cost = &cost;
  run.cost_index = info.aux;
  run.work_left_ps = static_cast<double>(cost.duration_ps);
  run.rate = 0.0;
  run.last_ps = now_;
  run.scheduled_ps = kTimeNever;
  // Its rate (and the even split with kernels already running here) is set by settle().
  ranks_[rank].running.push_back(slot);
  mark_compute(rank);
  update_hbm_port(rank);
}

void Run::on_compute_end(std::uint32_t slot) {
  ComputeRun& run = compute_[slot];
  const TaskId id = run.task;
  const int rank = run.rank;
  auto& running = ranks_[rank].running;
  running.erase(std::find(running.begin(), running.end(), slot));
  free_compute_.push_back(slot);
  mark_compute(rank);
  update_hbm_port(rank);
  end_task(id);
}

// Creates the flow and its latency-end event; the caller fills in the returned owner in place (a
// FlowOwner built on the stack and copied would be written field by field and read back in wide
// words: a store-forwarding stall per transfer).
void Run::begin_transfer(FlowId f) {
  network_.start_transfer(f, now_);
  const FlowOwner& o = owners_[f];
  ranks_[load_rank(o.src_rank)].flows.push_back(f);
  ranks_[load_rank(o.dst_rank)].flows.push_back(f);
  flow_hot_[f].src_rank = load_rank(o.src_rank);  // a flow's rate changes only once it transfers
  flow_hot_[f].dst_rank = load_rank(o.dst_rank);
}

FlowOwner& Run::launch_flow(RouteId route, double payload_bytes, model::CommEngine engine, std::size_t protocol,
                            bool p2p, const CollectiveRun* tree, bool ring, double scale) {
  const bool sm = engine == model::CommEngine::sm_kernel;
  const bool network_p2p = p2p && p2p_network_ && route_off_node_[route] != 0;
  double efficiency = network_p2p ? p2p_network_efficiency_ : sm ? protocols_[protocol].efficiency : ce_efficiency_;
  if (tree) efficiency *= route_off_node_[route] != 0 ? tree->tree_scale_off_node : tree->tree_scale;
  efficiency *= scale;
  const FlowId f = network_.create(route, payload_bytes / efficiency);
  if (f >= owners_.size()) {
    owners_.resize(f + 1);
    flow_hot_.resize(f + 1);
  }
  FlowOwner& o = owners_[f];
  o.collective = kNone;
  o.step = -1;
  o.engine = engine;
  o.start_ps = now_;
  flow_hot_[f].scheduled_ps = kTimeNever;
  flow_hot_[f].payload_bytes_per_s = 0.0;  // the network's rate is 0 until the flow's first settle()
  flow_hot_[f].efficiency = efficiency;
  if (tree) {
    push_after(tree->tree_step_ps, tree->tree_lane, kFlowLatencyEnd, f);
    return o;
  }
  // A ring step between nodes has a phase of its own only where the topology tunes the network.
  const bool network_ring_step = sm && ring && route_off_node_[route] != 0 && phases_ > protocols_.size() + 3;
  const std::size_t kind = network_p2p         ? protocols_.size() + (sm ? 1 : 2)
                           : network_ring_step ? protocols_.size() + 3 + protocol
                           : sm                ? protocol
                                               : protocols_.size();
  const std::size_t phase = phases_ * static_cast<std::size_t>(route) + kind;
  push_after(latency_phase_ps_[phase], latency_lane_[phase], kFlowLatencyEnd, f);
  return o;
}

void Run::start_p2p(TaskId send, TaskId /*recv*/) {
  if (send_spec_[info_[send].aux].engine == model::CommEngine::copy_engine &&
      !acquire_copy_engines(encode_waiter(false, send)))
    return;
  begin_p2p(send);
}

bool Run::acquire_copy_engines(std::uint32_t waiter) {
  const std::uint32_t id = waiter >> 1;
  if ((waiter & 1u) == 0) {
    RankState& rs = ranks_[info_[id].rank()];
    if (rs.copy_engines_free == 0) {
      rs.copy_engine_waiters.push_back(waiter);
      return false;
    }
    --rs.copy_engines_free;
    return true;
  }
  const CollectiveRun& c = collectives_[id];
  for (std::size_t m = 0; m < c.ranks.size(); ++m) {
    const int r = c.ranks[m];
    if (c.members[m] != kNoTask && ranks_[r].copy_engines_free == 0) {
      ranks_[r].copy_engine_waiters.push_back(waiter);
      return false;
    }
  }
  for (std::size_t m = 0; m < c.ranks.size(); ++m)
    if (c.members[m] != kNoTask) --ranks_[c.ranks[m]].copy_engines_free;
  return true;
}

// An engine of `rank` came free: the waiters there take it in their order. A collective that still
// lacks an engine elsewhere moves to that device's queue (acquire_copy_engines) and the next waiter
// here gets its turn.
void Run::release_copy_engine(int rank) {
  RankState& rs = ranks_[rank];
  ++rs.copy_engines_free;
  while (rs.copy_engines_free > 0 && !rs.copy_engine_waiters.empty()) {
    const std::uint32_t waiter = rs.copy_engine_waiters.front();
    rs.copy_engine_waiters.pop_front();
    if (!acquire_copy_engines(waiter)) continue;
    if (waiter & 1u)
      begin_collective(waiter >> 1);
    else
      begin_p2p(waiter >> 1);
  }
}

void Run::begin_p2p(TaskId send) {
  const SendSpec& s = send_spec_[info_[send].aux];
  const TaskId recv = s.recv;
  result_.tasks[send].start_ps = now_;
  result_.tasks[recv].start_ps = now_;
  if (observer_) {
    observer_->on_task_start(graph_.task(send), send, now_);
    observer_->on_task_start(graph_.task(recv), recv, now_);
  }
  const int src = info_[send].rank(), dst = info_[recv].rank();
  // One SM count for both ends: the kernel is launched on both with the same configuration; -1
  // takes each end's own device default. The sender's have been held since it was ready (make_ready).
  hold_sms(dst, sms_for(dst, s.engine, s.sms));
  FlowOwner& o = launch_flow(s.route, static_cast<double>(s.bytes), s.engine, 0, true);
  o.task = send;
  o.peer_task = recv;
  o.src_rank = src;
  o.dst_rank = dst;
  o.record_bytes = s.bytes;
  o.sms = s.sms;
}

void Run::start_collective(std::uint32_t ci) {
  if (collectives_[ci].ranks.size() > 1 && collectives_[ci].spec->engine == model::CommEngine::copy_engine &&
      !acquire_copy_engines(encode_waiter(true, ci)))
    return;
  begin_collective(ci);
}

void Run::begin_collective(std::uint32_t ci) {
  CollectiveRun& c = collectives_[ci];
  for (std::size_t m = 0; m < c.members.size(); ++m) {
    const TaskId id = c.members[m];
    if (id == kNoTask) continue;
    result_.tasks[id].start_ps = now_;
    if (observer_) observer_->on_task_start(graph_.task(id), id, now_);
  }
  if (c.ranks.size() == 1) {  // nothing to move: no latency, no SMs
    push_after(0, now_lane_, kTaskEnd, c.members[0]);
    return;
  }
  const Protocol& p = protocols_[c.spec->engine == model::CommEngine::sm_kernel ? c.protocol : 0];
  if (c.base_ps >= 0)
    push_after(c.base_ps, c.base_lane, kCollectiveSteps, ci);
  else
    push_after(p.base_ps, p.base_lane, kCollectiveSteps, ci);
}

// Member `member` sends its step `step` chunk on ring `ring` to its successor there, or for the
// all-to-all (one ring) to the member `step + 1` places ahead.
void Run::start_step(std::uint32_t ci, int member, int ring, int step) {
  CollectiveRun& c = collectives_[ci];
  const int t = static_cast<int>(c.ranks.size());
  c.next_step[c.slot(member) * static_cast<std::size_t>(c.rings) + static_cast<std::size_t>(ring)] = step + 1;
  if (c.spec->kind == sched::CollectiveKind::all_to_all) {
    const int to = (member + step + 1) % t;
    launch_step_flow(ci, member, to, 0, step, route_of(c.ranks[member], c.ranks[to]),
                     static_cast<double>(c.spec->bytes) / t, c.spec->bytes / t);
    return;
  }
  const std::size_t e = static_cast<std::size_t>(ring) * t + member;
  // Bytes recorded per ring add up to the step's chunk; the flow itself moves the exact fraction.
  const Bytes record = c.ring_record + (ring < c.ring_extra ? 1 : 0);
  launch_step_flow(ci, member, c.ring_next[e], ring, step, c.ring_route[e], c.ring_bytes, record);
}

void Run::launch_step_flow(std::uint32_t ci, int member, int to, int ring, int step, RouteId route, double bytes,
                           Bytes record_bytes) {
  CollectiveRun& c = collectives_[ci];
  const bool all_to_all = c.spec->kind == sched::CollectiveKind::all_to_all;
  FlowOwner& o = launch_flow(route, bytes, c.spec->engine, c.protocol, all_to_all, c.tree_step_ps >= 0 ? &c : nullptr,
                             !all_to_all && c.tree_step_ps < 0, c.bus_cap_scale);
  // Into an image: the flow lands on (is credited to) the member its alias stands at, as its receive
  // on the ring whose flow it stands for.
  const bool image = c.members[to] == kNoTask;
  const int lands = image ? c.image_of[to] : to;
  o.recv_ring = image && !c.land_ring.empty() ? c.land_ring[static_cast<std::size_t>(to) * c.rings + ring] : ring;
  o.collective = ci;
  o.task = c.members[member];
  o.peer_task = c.members[lands];
  o.src_rank = c.ranks[member];
  o.dst_rank = c.ranks[to];
  o.sender = member;
  o.receiver = lands;
  o.step = step;
  o.ring = ring;
  o.record_bytes = record_bytes;
}

// On ring `ring`, a member sends step s+1 once its step-s receive there has landed (what it sends
// next is what it received, reduced with its own chunk or forwarded) and its step s-1 send has
// landed (Simple; LL and LL128: step s-7's). Its own step-s send may still be in flight: NCCL's
// sender writes into the receiver's buffer slots and does not wait for the previous chunk to land,
// up to the slots a connection has (kSimpleChunksInFlight, kLowLatencyChunksInFlight). A chunk thus
// crosses the ring paying each hop's latency once, as NCCL's tuning model counts a ring (intra-node
// steps x intra-node latency + inter-node steps x network latency), not the slowest hop's at every
// step. The chunks of one connection drain one after the other (kFlowLatencyEnd parks a chunk whose
// latency has passed behind the one draining), so a slow hop (a NIC) drains them back to back, the
// next one's latency run meanwhile, instead of sharing the link between them. Each ring is a
// channel of its own: a member's rings do not wait for each other (every member of a group spanning
// nodes receives over the network on one of its rings). An all-to-all's steps all start together
// (kCollectiveSteps): nothing is left to start here. A member ends once every send and receive of its
// own is done.
void Run::advance_member(std::uint32_t ci, int m, int ring) {
  CollectiveRun& c = collectives_[ci];
  const std::size_t k = c.slot(m);
  const std::size_t kr = k * static_cast<std::size_t>(c.rings) + static_cast<std::size_t>(ring);
  const int flows = c.steps * c.rings;
  const int in_flight = c.in_flight;
  for (int next = c.next_step[kr]; next < c.steps && c.ring_sends_done[kr] >= next + 1 - in_flight &&
                                   c.arrived[kr * static_cast<std::size_t>(c.steps) + next - 1] != 0;
       next = c.next_step[kr])
    start_step(ci, m, ring, next);
  if (c.sends_done[k] == flows && c.recvs_done[k] == flows) {
    c.recvs_done[k] = flows + 1;  // ended: never again
    ++c.ended;
    hold_sms(c.ranks[m], -c.sms[m]);
    if (c.spec->engine == model::CommEngine::copy_engine) release_copy_engine(c.ranks[m]);
    end_task(c.members[m]);
  }
}

void Run::on_flow_end(FlowId f) {
  network_.finish(f, now_);
  // The fields this needs, one by one: end_task() below may launch flows that reuse the slot, and a
  // copy of the whole FlowOwner would be read back across the 16-byte words it was stored in (a
  // store-forwarding stall).
  const FlowOwner& owner = owners_[f];
  const std::uint32_t collective = owner.collective;
  const TaskId task = owner.task, peer_task = owner.peer_task;
  const int src_rank = owner.src_rank, dst_rank = owner.dst_rank;
  const int sender = owner.sender, receiver = owner.receiver, step = owner.step, ring = owner.ring, sms = owner.sms;
  const int recv_ring = owner.recv_ring;
  const model::CommEngine engine = owner.engine;
  // A collective step's record is only built when something reads it (a million a run otherwise).
  if (collective == kNone || record_steps_ || observer_) {
    TransferRecord unkept;
    TransferRecord& rec = collective == kNone || record_steps_ ? result_.transfers.emplace_back() : unkept;
    rec.task = task;
    rec.peer_task = peer_task;
    rec.src_rank = src_rank;
    rec.dst_rank = dst_rank;
    rec.bytes = owner.record_bytes;
    rec.step = step;
    rec.engine = engine;
    rec.start_ps = owner.start_ps;
    rec.end_ps = now_;
    if (observer_) observer_->on_transfer_end(rec);
  }
  for (int r : {load_rank(src_rank), load_rank(dst_rank)}) {
    auto& flows = ranks_[r].flows;
    flows.erase(std::find(flows.begin(), flows.end(), f));
    mark_hbm(r);
  }

  if (collective == kNone) {
    hold_sms(src_rank, -sms_for(src_rank, engine, sms));
    hold_sms(dst_rank, -sms_for(dst_rank, engine, sms));
    // Waiters for the engine first: they were ready before anything this end makes ready.
    if (engine == model::CommEngine::copy_engine) release_copy_engine(src_rank);
    end_task(task);
    end_task(peer_task);
    return;
  }
  CollectiveRun& c = collectives_[collective];
  if (!c.draining.empty()) {  // the next chunk of this connection drains now
    const std::size_t k = connection(c, sender, ring);
    const FlowId next = c.parked_first[k];
    c.draining[k] = next;
    if (next != kNone) {
      c.parked_first[k] = owners_[next].next_parked;
      if (c.parked_first[k] == kNone) c.parked_last[k] = kNone;
      begin_transfer(next);
    }
  }
  ++c.sends_done[c.slot(sender)];
  ++c.ring_sends_done[c.slot(sender) * static_cast<std::size_t>(c.rings) + static_cast<std::size_t>(ring)];
  ++c.recvs_done[c.slot(receiver)];
  ++c.arrived[(c.slot(receiver) * static_cast<std::size_t>(c.rings) + static_cast<std::size_t>(recv_ring)) *
                  static_cast<std::size_t>(c.steps) +
              static_cast<std::size_t>(step)];
  advance_member(collective, sender, ring);
  advance_member(collective, receiver, recv_ring);
  if (c.ended == c.present) {  // every flow of it has landed: its step state is not needed again
    std::vector<int>().swap(c.sends_done);
    std::vector<int>().swap(c.ring_sends_done);
    std::vector<FlowId>().swap(c.draining);
    std::vector<FlowId>().swap(c.parked_first);
    std::vector<FlowId>().swap(c.parked_last);
    std::vector<int>().swap(c.recvs_done);
    std::vector<int>().swap(c.next_step);
    std::vector<std::uint16_t>().swap(c.arrived);
  }
}

void Run::end_task(TaskId id) {
  result_.tasks[id].end_ps = now_;
  if (now_ > result_.makespan_ps) result_.makespan_ps = now_;
  ++ended_;
  if (observer_) observer_->on_task_end(graph_.task(id), id, now_);
  const auto& order = analysis_.order;
  const std::uint32_t last = order.offsets[id + 1];
  for (std::uint32_t e = order.offsets[id]; e < last; ++e) {
    const TaskId next = order.targets[e];
    if (stream_waits_ && cross_stream(id, next)) {
      // The edge is released a stream wait later; another edge may still hold the task after that,
      // so readiness is the latest of the delayed and the plain releases.
      const RankState& rs = ranks_[load_rank(info_[next].rank())];
      push_after(rs.stream_wait_ps, rs.stream_wait_lane, kEdgeDone, next);
    } else if (--pending_[next] == 0) {
      make_ready(next);
    }
  }
}

// An edge a CUDA program expresses as an event recorded on one stream and waited for on another of
// the same device: both ends hold streams and the streams differ, or one end is a Recv (its kernel
// runs on the communication side, which no compute stream shares) and the other a kernel. Edges
// inside the communication side (a Recv feeding the Send that forwards it, a P2P step after a
// collective on the same stream) are ordered by NCCL's own stream; stream order itself costs nothing.
bool Run::cross_stream(TaskId before, TaskId after) const {
  const TaskInfo a = info_[before], b = info_[after];
  // A proxy rank's tasks stand in for its alias's (TaskGraph::load_alias): a proxy Recv gated by the
  // alias's kernel is that kernel's own receive in the full graph.
  const int rank = load_rank(b.rank());
  if (load_rank(a.rank()) != rank || ranks_[rank].stream_wait_ps == 0) return false;
  const std::uint32_t ca = stream_code_[before], cb = stream_code_[after];
  if (ca == kRecvStream || cb == kRecvStream)
    return (ca == kRecvStream && b.type() == TaskType::compute) || (cb == kRecvStream && a.type() == TaskType::compute);
  return ca != cb;
}

void Run::settle() {
  for (FlowId f : network_.settle(now_)) {
    const TimePs completion = network_.completion_ps(f);
    FlowHot& hot = flow_hot_[f];
    schedule_end(queue_, hot.scheduled_ps, completion, kFlowEnd, f, flow_handle(f));
    hot.payload_bytes_per_s = network_.rate(f) * hot.efficiency;
    mark_hbm(hot.src_rank);
    mark_hbm(hot.dst_rank);
  }
  // Only the kernels read the HBM load: a rank running none keeps hbm_dirty set and sums its flows
  // when a kernel starts there (rerate()). Every change to those flows or their rates marks the rank,
  // so the sum is then the one this loop would have left, and a rank that runs kernels after a
  // settle() always has its load up to date.
  for (int r : dirty_hbm_) {
    RankState& rs = ranks_[r];
    if (!rs.running.empty() && refresh_hbm(rs)) mark_compute(r);
  }
  dirty_hbm_.clear();
  for (int r : dirty_compute_) {
    ranks_[r].compute_dirty = false;
    rerate(r);
  }
  dirty_compute_.clear();
}

// The kernels running on `rank` changed: what they would stream from HBM alone (each its bytes over
// its contention-free duration) sets the rank's HBM port for transfers. Only the kernel set counts,
// not their current rates, so that kernels and transfers cannot chase each other's rates.
void Run::find_binding_ports() {
  const std::size_t ranks = static_cast<std::size_t>(std::max(0, std::min(graph_.num_ranks(), cluster_.num_ranks())));
  port_binds_.assign(ranks, 0);
  std::vector<double> through(cluster_.vertices.size(), 0.0);  // link capacity in and out of each vertex
  for (const topo::Link& l : cluster_.links) {
    through[static_cast<std::size_t>(l.from)] += l.bandwidth_bytes_per_s;
    through[static_cast<std::size_t>(l.to)] += l.bandwidth_bytes_per_s;
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    const double floor = hbm_port_capacity(cluster_.device(static_cast<int>(r)), std::numeric_limits<double>::infinity());
    port_binds_[r] = floor > 0.0 && through[static_cast<std::size_t>(cluster_.rank_vertex[r])] > floor;
  }
}

void Run::update_hbm_port(int rank) {
  if (!port_binds(rank)) return;  // on no route
  double demand = 0.0;
  for (std::uint32_t slot : ranks_[rank].running) {
    const model::KernelCost& c = *compute_[slot].cost;
    const double alone_s = std::max(c.compute_s, c.memory_s);
    if (alone_s > 0.0) demand += c.hbm_bytes / alone_s;
  }
  network_.set_capacity(hbm_port(rank), hbm_port_capacity(*ranks_[rank].device, demand));
}

// HBM load is summed afresh (not updated incrementally) so that it returns to exactly zero when the
// last transfer leaves and never carries rounding from earlier flows. Returns whether it changed.
bool Run::refresh_hbm(RankState& rs) {
  rs.hbm_dirty = false;
  double payload_bytes_per_s = 0.0;
  for (FlowId f : rs.flows) payload_bytes_per_s += flow_hot_[f].payload_bytes_per_s;
  const double hbm = payload_bytes_per_s * rs.hbm_traffic_factor;
  if (hbm == rs.hbm_bytes_per_s) return false;
  rs.hbm_bytes_per_s = hbm;
  return true;
}

// Kernels running together on one rank share its two resources, the SMs' math and HBM, by what each
// needs of them (share_device()); each gets the cost model's rate for the rank's current
// communication load times its share.
void Run::rerate(int rank) {
  RankState& rs = ranks_[rank];
  if (rs.running.empty()) return;
  if (rs.hbm_dirty) refresh_hbm(rs);
  const model::DeviceLoad load{rs.sms_held, rs.hbm_bytes_per_s};
  // KernelCostModel::rate is 1 when the load is empty: the cost model is not asked.
  const bool unloaded = load.sms_held_by_comm <= 0 && load.comm_hbm_bytes_per_s <= 0.0;
  share_device(rs.running);
  for (std::size_t i = 0; i < rs.running.size(); ++i) {
    const std::uint32_t slot = rs.running[i];
    ComputeRun& run = compute_[slot];
    const double rate = unloaded ? shares_[i] : costs_.rate(*run.cost, *rs.device, load) * shares_[i];
    if (rate == run.rate) continue;  // its completion event still holds
    if (now_ > run.last_ps && run.rate > 0.0) {
      run.work_left_ps -= run.rate * static_cast<double>(now_ - run.last_ps);
      if (run.work_left_ps < 0.0) run.work_left_ps = 0.0;
    }
    run.last_ps = now_;
    run.rate = rate;
    // A rate of zero (every SM taken) leaves the kernel parked until the load changes.
    TimePs completion = kTimeNever;
    if (rate > 0.0) {
      const TimePs duration = ceil_ps(run.work_left_ps / rate);
      if (duration < kTimeNever - now_) completion = now_ + duration;
    }
    schedule_end(queue_, run.scheduled_ps, completion, kComputeEnd, slot, compute_handle(slot));
  }
}

// Max-min fair shares of a device among the kernels running on it (SimGrid's sharing, on two
// resources of capacity 1): a kernel alone needs compute_s / d of the SMs' math and memory_s / d of HBM
// (d = max of the two) at its full speed. All shares rise together from 0; when a resource is full,
// the kernels using it keep the share they have and the others rise on; no share passes 1 (a kernel
// never runs faster than alone). Kernels bound by the same resource split it evenly, as before; a
// compute-bound GEMM beside a memory-bound norm each get more than half: the GEMM (1, 0.3) and the norm
// (0.05, 1) fill HBM at 1 / 1.3, so both run at 0.77 of their speed alone.
void Run::share_device(const std::vector<std::uint32_t>& running) {
  const std::size_t k = running.size();
  shares_.resize(k);
  if (k == 1) {
    shares_[0] = 1.0;
    return;
  }
  // Two kernels, the common case (a stream's kernel beside another's): their shares depend on their
  // two costs alone, so they are computed once per ordered pair of distinct kernels and remembered.
  PairShares* memo = nullptr;
  if (k == 2) {
    const std::uint64_t key =
        (std::uint64_t{compute_[running[0]].cost_index} << 32 | compute_[running[1]].cost_index) + 1;
    memo = &pair_shares_[((key * 0x9e3779b97f4a7c15ULL) >> 56) & (kPairShares - 1)];
    if (memo->key == key) {
      shares_[0] = memo->first;
      shares_[1] = memo->second;
      return;
    }
    memo->key = key;
  }
  shares_.assign(k, 0.0);
  demand_.resize(2 * k);
  for (std::size_t i = 0; i < k; ++i) {
    const model::KernelCost& c = *compute_[running[i]].cost;
    const double d = std::max(c.compute_s, c.memory_s);
    // A cost model that gives no split (both 0) is taken as needing all of both.
    demand_[2 * i] = d > 0.0 ? c.compute_s / d : 1.0;
    demand_[2 * i + 1] = d > 0.0 ? c.memory_s / d : 1.0;
  }
  frozen_.assign(k, 0);
  double used[2] = {0.0, 0.0};  // by frozen kernels
  double level = 0.0;
  for (std::size_t left = k; left > 0;) {
    double next = 1.0;  // the cap: a share of 1
    int full = -1;
    for (int r = 0; r < 2; ++r) {
      double sum = 0.0;
      for (std::size_t i = 0; i < k; ++i)
        if (!frozen_[i]) sum += demand_[2 * i + r];
      if (sum <= 0.0) continue;
      const double at = (1.0 - used[r]) / sum;
      if (at < next) next = at, full = r;  // strictly less: ties go to the cap, then to the SMs
    }
    level = std::max(level, next);
    for (std::size_t i = 0; i < k; ++i) {
      if (frozen_[i] || (full >= 0 && demand_[2 * i + full] <= 0.0)) continue;
      frozen_[i] = 1;
      shares_[i] = level;
      used[0] += level * demand_[2 * i];
      used[1] += level * demand_[2 * i + 1];
      --left;
    }
  }
  if (memo) {
    memo->first = shares_[0];
    memo->second = shares_[1];
  }
}

std::uint64_t Run::state_bytes() const {
  const auto& order = analysis_.order;
  std::uint64_t bytes = info_.size() * sizeof(TaskInfo) + pending_.size() * sizeof(std::uint32_t) +
                        order.offsets.size() * sizeof(std::uint32_t) + order.targets.size() * sizeof(TaskId) +
                        kernel_cost_.size() * (sizeof(model::KernelCost) + 32) + send_spec_.size() * sizeof(SendSpec) +
                        result_.tasks.size() * sizeof(TaskTiming) + stream_code_.size() * sizeof(std::uint32_t) +
                        result_.transfers.capacity() * sizeof(TransferRecord);
  for (const CollectiveRun& c : collectives_)
    bytes += sizeof(CollectiveRun) + c.members.size() * (sizeof(TaskId) + 5 * sizeof(int) + sizeof(RouteId)) +
             c.arrived.size();
  return bytes;
}

[[noreturn]] void Run::deadlock() const {
  std::vector<std::string> stuck;
  std::size_t count = 0;
  for (TaskId id = 0; id < graph_.size(); ++id) {
    const TaskTiming& t = result_.tasks[id];
    if (t.end_ps >= 0) continue;
    ++count;
    if (stuck.size() >= 5) continue;
    const sched::Task& task = graph_.task(id);
    std::string why;
    if (t.start_ps >= 0) {
      why = "started, never finished (a rate of zero?)";
    } else if (t.ready_ps < 0) {
      why = fmt::format("waiting for {} predecessor(s)", pending_[id]);
    } else if (info_[id].type() == TaskType::send) {
      why = fmt::format("ready, waiting for '{}'", graph_.task(send_spec_[info_[id].aux].recv).name);
      if (result_.tasks[send_spec_[info_[id].aux].recv].ready_ps >= 0) why = "ready, waiting for a copy engine";
    } else if (info_[id].type() == TaskType::recv) {
      why = fmt::format("ready, waiting for '{}'", graph_.task(info_[id].aux).name);
    } else {
      why = "ready, waiting for the other members of its collective";
    }
    stuck.push_back(fmt::format("'{}' ({})", task.name, why));
  }
  throw GraphError(fmt::format("deadlock at {} ps: {} task(s) can never finish, e.g. {}", now_, count,
                               fmt::join(stuck, ", ")));
}

}  // namespace

Simulator::Simulator(const topo::Cluster& cluster, const model::KernelCostModel& costs)
    : cluster_(cluster), costs_(costs) {}

SimResult Simulator::run(const sched::TaskGraph& graph, Observer* observer) {
  profile_ = RunProfile{};
  if (graph.num_ranks() > cluster_.num_ranks() || graph.num_ranks() >= kMaxRanks) {
    sched::validate(graph);  // a graph's own errors are reported first
    throw GraphError(fmt::format("the task graph has {} ranks, cluster '{}' has {}", graph.num_ranks(), cluster_.name,
                                 cluster_.num_ranks()));
  }
  Run run(cluster_, costs_, graph, observer, records_);
  return run.execute(profile_);
}

}  // namespace fusesim::sim
