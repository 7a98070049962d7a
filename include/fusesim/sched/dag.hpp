#pragma once
// The task DAG every schedule generator emits and the simulator runs. Task kinds are a std::variant
// (Compute, Send, Recv, Collective), not a class hierarchy. Dependencies are edges of a Boost.Graph
// adjacency_list. Besides its edges, a task waits for the task added before it on the same
// (rank, stream): a stream runs its tasks one at a time in the order they were added, as a CUDA
// stream does. Recv tasks hold no stream: they complete when their Send's data has landed.
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "fusesim/model/kernel.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/units.hpp"

namespace fusesim::sched {

using TaskId = std::uint32_t;

enum class StreamKind { compute, comm, copy };
std::string to_string(StreamKind k);

// A stream of one rank: compute stream(s), SM-based communication stream(s) (NCCL-style kernels), or
// copy engine(s). `index` picks among several of a kind (copy engine 0, 1, ...).
struct StreamRef {
  StreamKind kind = StreamKind::compute;
  int index = 0;
  friend bool operator==(const StreamRef&, const StreamRef&) = default;
};

// A compute task's kernel, immutable and shared. A task holds 16 bytes where the kernel's value takes
// 88, and TaskGraph::add swaps a task's kernel for the graph's copy of an equal one (model::same_kernel),
// so that a graph of millions of tasks holds each of its few dozen to few hundred distinct kernels once
// (BENCHMARKS.md, "Kernels and ops held once per graph"). Built from any kernel, as the kernel itself
// was; read with get(), *, -> or as the const model::Kernel& it converts to. A default one is a default
// (empty) GemmKernel.
class KernelRef {
 public:
  KernelRef() = default;
  template <class K>
    requires(!std::same_as<std::remove_cvref_t<K>, KernelRef> && std::constructible_from<model::Kernel, K &&>)
  KernelRef(K&& kernel)  // NOLINT: built from a kernel wherever a kernel was
      : kernel_(std::make_shared<const model::Kernel>(std::forward<K>(kernel))) {}

  const model::Kernel& get() const { return kernel_ ? *kernel_ : no_kernel(); }
  const model::Kernel& operator*() const { return get(); }
  const model::Kernel* operator->() const { return &get(); }
  operator const model::Kernel&() const { return get(); }  // NOLINT: reads as the kernel it holds

 private:
  friend class TaskGraph;
  static const model::Kernel& no_kernel();
  std::shared_ptr<const model::Kernel> kernel_;
};

struct ComputeTask {
  KernelRef kernel;
  topo::Dtype dtype = topo::Dtype::bf16;
  bool recompute = false;  // activation recomputation: counted in HFU, not in MFU
};

// Point-to-point: the Send on `rank` and the Recv on `peer` with the same tag and bytes form one
// transfer; it starts once both are ready (rendezvous) and the Send reached the head of its stream.
struct SendTask {
  int peer = 0;
  Bytes bytes = 0;
  std::int64_t tag = 0;
  model::CommEngine engine = model::CommEngine::copy_engine;
  int sms = -1;  // SMs held on both ends while an sm_kernel transfer runs; -1: the device default
};

struct RecvTask {
  int peer = 0;
  Bytes bytes = 0;
  std::int64_t tag = 0;
};

enum class CollectiveKind { all_gather, reduce_scatter, all_reduce, all_to_all };
std::string to_string(CollectiveKind k);

// The ranks of a collective, in ring order, immutable and shared: the tasks of every member of an
// instance (and of every instance a generator emits from the same RankGroup) hold one list, not a copy
// each (BENCHMARKS.md, "Task names and groups held once").
class RankGroup {
 public:
  RankGroup() = default;
  RankGroup(std::vector<int> ranks) : ranks_(std::make_shared<const std::vector<int>>(std::move(ranks))) {}  // NOLINT
  RankGroup(std::initializer_list<int> ranks) : RankGroup(std::vector<int>(ranks)) {}

  const std::vector<int>& ranks() const { return ranks_ ? *ranks_ : no_ranks(); }
  operator const std::vector<int>&() const { return ranks(); }  // NOLINT: reads as the vector it holds
  std::size_t size() const { return ranks().size(); }
  bool empty() const { return ranks().empty(); }
  const int& operator[](std::size_t i) const { return ranks()[i]; }
  const int& front() const { return ranks().front(); }
  const int& back() const { return ranks().back(); }
  std::vector<int>::const_iterator begin() const { return ranks().begin(); }
  std::vector<int>::const_iterator end() const { return ranks().end(); }

  friend bool operator==(const RankGroup& a, const RankGroup& b) {
    return a.ranks_ == b.ranks_ || a.ranks() == b.ranks();
  }
  friend bool operator==(const RankGroup& a, const std::vector<int>& b) { return a.ranks() == b; }

 private:
  static const std::vector<int>& no_ranks();
  std::shared_ptr<const std::vector<int>> ranks_;
};

// A task's name, or its op (TaskLabels::op): a view of characters that its graph owns once the task is
// added (TaskGraph::add copies them into the graph's name storage, where they never move; an op once per
// distinct op), so that a graph of millions of tasks holds its names in a few large blocks instead of one
// allocation each. Until then the view must stay valid: a temporary std::string is refused at compile
// time, and a function that builds labels takes its op as a TaskName, not a std::string of its own.
class TaskName : public std::string_view {
 public:
  constexpr TaskName() = default;
  constexpr TaskName(const char* text) : std::string_view(text) {}  // NOLINT
  constexpr TaskName(std::string_view text) : std::string_view(text) {}  // NOLINT
  TaskName(const std::string& text) : std::string_view(text) {}  // NOLINT
  TaskName(std::string&&) = delete;
  TaskName(const std::string&&) = delete;
  friend std::string operator+(std::string_view a, const TaskName& b) { return concat_text(a, b); }
  friend std::string operator+(const TaskName& a, std::string_view b) { return concat_text(a, b); }
  friend std::string operator+(const char* a, const TaskName& b) { return concat_text(a, b); }
  friend std::string operator+(const TaskName& a, const char* b) { return concat_text(a, b); }
  friend std::string operator+(const std::string& a, const TaskName& b) { return concat_text(a, b); }
  friend std::string operator+(const TaskName& a, const std::string& b) { return concat_text(a, b); }

 private:
  static std::string concat_text(std::string_view a, std::string_view b) {
    std::string out;
    out.reserve(a.size() + b.size());
    out.append(a).append(b);
    return out;
  }
};

// One rank's part of a collective. Every member of `group` adds one task with the same `instance`,
// kind, bytes and group. `bytes` is the full buffer n: all-gather output, reduce-scatter input,
// all-reduce buffer, all-to-all send buffer. Ring algorithms: all-gather and reduce-scatter take
// t-1 steps of n/t; all-reduce 2(t-1) steps of n/t; all-to-all t-1 steps, all at once, step s sending
// n/t to rank (i+s) mod t of the group and receiving from (i-s) mod t.
struct CollectiveTask {
  CollectiveKind kind = CollectiveKind::all_gather;
  RankGroup group;  // ranks, in ring order
  Bytes bytes = 0;
  std::int64_t instance = 0;
  model::CommEngine engine = model::CommEngine::sm_kernel;
  int sms = -1;
};

using TaskKind = std::variant<ComputeTask, SendTask, RecvTask, CollectiveTask>;

// The part of a training step a task belongs to, for analysis and traces; none where a graph (a
// user's file) does not say.
enum class Phase : std::uint8_t { none, forward, backward, optimizer };
std::string to_string(Phase p);  // "" for none

// Where a task sits in the workload, for analysis and traces. -1: not applicable.
struct TaskLabels {
  int region = -1;     // index into TaskGraph::regions() (an overlapped operation)
  int layer = -1;
  int chunk = -1;      // sequence chunk (ring position) the task works on
  int step = -1;       // ring step
  int slice = -1;      // slice index (slice-overlap)
  int micro_batch = -1;
  Phase phase = Phase::none;
  TaskName op;         // "qkv", "attention", "out_proj", "fc1", "fc2", "norm", ...
};

struct Task {
  TaskName name;      // unique, readable: "r3/L0/fwd/fc1/step2"
  int rank = 0;
  // Index of this task's data semantics in the generator's dataflow program (sched/dataflow.hpp),
  // read by the reference executor behind `fusesim verify`; -1 when the task has none. (Beside rank,
  // where it fills what would be padding.)
  std::int32_t data_op = -1;
  StreamRef stream;
  TaskKind kind;
  TaskLabels labels;
};

// Whose communication a region overlaps, or whose schedule a generated graph compares: tensor +
// sequence parallelism, Ulysses attention, data parallelism; custom for a graph from a user's file;
// pp for the transfers between pipeline stages (no overlap schedule to compare: not a generator's).
enum class Parallelism : std::uint8_t { tpsp, up, dp, custom, pp };
std::string to_string(Parallelism p);
std::optional<Parallelism> parse_parallelism(std::string_view name);  // the names to_string gives

// An overlapped operation (one fused op, one sliced op, one collective and its GEMM, one DP sync):
// head and tail latency are measured per region and rank (design note section 4).
struct Region {
  std::string name;  // "L0/fwd/ag+fc1"
  Parallelism parallelism = Parallelism::custom;
};

// The predecessors of every task of a graph, each task's in the order depend() was called for it
// (TaskGraph::predecessor_index): compressed rows, built in one pass over the graph's edges.
struct PredecessorIndex {
  std::vector<std::uint32_t> offsets;  // predecessors of task i: sources[offsets[i] .. offsets[i + 1])
  std::vector<std::uint32_t> sources;
  std::span<const std::uint32_t> of(std::uint32_t id) const {
    return {sources.data() + offsets[id], sources.data() + offsets[id + 1]};
  }
};

class TaskGraph {
 public:
  // Directed, out-edges only: a task's successors are what the simulator walks. Its predecessors come
  // from the log of depend() calls kept beside it (predecessor_index), where a bidirectional
  // adjacency_list would hold a list node and an in-edge entry per edge (about 60 bytes and an
  // allocation per edge; BENCHMARKS.md "Task graphs without in-edges").
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, Task>;

  explicit TaskGraph(int num_ranks = 1) : num_ranks_(num_ranks) {}
  // A directed adjacency_list copies itself edge by edge through its edge iterator; its vertices, each
  // with its out-edges (targets alone), are copied one by one instead, leaving `other` as it was.
  TaskGraph(const TaskGraph& other);
  TaskGraph& operator=(const TaskGraph& other);
  // Boost's adjacency_list has copies only: a move takes its containers, where the default would
  // copy every task.
  TaskGraph(TaskGraph&& other) noexcept;
  TaskGraph& operator=(TaskGraph&& other) noexcept;

  // Copies the task's name into the graph's name storage: the name it was given may end after this.
  TaskId add(Task task);
  void depend(TaskId before, TaskId after);  // `after` waits for `before` to end
  int add_region(Region region);
  // Room for `tasks` tasks in all, so that adding them never moves the tasks already added (a
  // growing vector briefly holds the old and the new copy: 3x the graph's task storage at peak).
  void reserve(std::size_t tasks);

  int num_ranks() const { return num_ranks_; }
  std::size_t size() const { return boost::num_vertices(graph_); }
  const Task& task(TaskId id) const { return graph_[id]; }
  Task& task(TaskId id) { return graph_[id]; }
  const Graph& graph() const { return graph_; }
  const std::vector<Region>& regions() const { return regions_; }
  std::size_t num_edges() const { return edges_.size(); }
  std::vector<TaskId> successors(TaskId id) const;
  // One task's predecessors in the order depend() was called for it: a pass over every edge, for a
  // lookup or two; predecessor_index() gives every task's at once.
  std::vector<TaskId> predecessors(TaskId id) const;
  PredecessorIndex predecessor_index() const;

  // Symmetric (mirrored) graphs, docs/schedules.md "Symmetry": a transfer end on rank r loads the
  // HBM and SMs of rank alias[r] in the simulator (a proxy rank standing in for the mirrored rank
  // whose device the real transfer loads). Empty (the default): every rank loads itself.
  // `stage_ranks`: the ranks of one pipeline stage (ranks stage-major; 0: the graph's ranks). A proxy
  // and its alias lie in one stage, and the rank a transfer into a proxy mirrors is found in the
  // sender's stage (sched/symmetry.hpp, proxy_route): a stage's ranks shift among themselves.
  // `tp_images`: where > 1, each stage's ranks come in groups of that many consecutive ranks (a TP
  // group, or at tp 1 a node), of which the first stands for the others (an image rank's alias is the
  // first of its group, shifted as above): the rank a transfer into an image mirrors is found by
  // turning the sender within its own group as dst is turned onto its alias (sched/symmetry.hpp,
  // proxy_route), and a collective's ring step into an image lands as the receive of the ring the
  // turn maps back onto (sim/engine.cpp).
  void set_load_alias(std::vector<int> alias, int stage_ranks = 0, int tp_images = 1);
  const std::vector<int>& load_alias() const { return load_alias_; }
  int alias_stage_ranks() const { return alias_stage_ranks_ > 0 ? alias_stage_ranks_ : num_ranks_; }
  int alias_tp_images() const { return alias_tp_images_; }

  // Keeps the tasks whose `keep` entry is true, in their order, with the edges between them (in the
  // order depend() was called) and the regions; the ids change. Returns the first edge from a task
  // dropped into a task kept (and changes nothing) where there is one: the kept tasks would lose an
  // ordering they have.
  std::optional<std::pair<TaskId, TaskId>> retain(const std::vector<bool>& keep);

 private:
  static void swap_graph(Graph& a, Graph& b) noexcept;

  // The characters of the tasks' names, in blocks that are never moved or freed while the graph lives
  // (a task's name views them); a moved graph takes its blocks with its tasks.
  class NameStore {
   public:
    std::string_view store(std::string_view text);

   private:
    // Blocks double from 4 KiB to 1 MiB: a graph of a few tasks takes a page, one of millions a few
    // hundred blocks.
    static constexpr std::size_t kFirstBlockBytes = std::size_t{1} << 12;
    static constexpr std::size_t kMaxBlockBytes = std::size_t{1} << 20;
    std::vector<std::unique_ptr<char[]>> blocks_;
    std::size_t block_bytes_ = 0;  // size of the last block
    std::size_t used_ = 0;         // of the last block
  };

  // One copy of the characters of each distinct op of the graph's tasks, in names_.
  std::string_view intern_op(std::string_view op);

  // One copy of each distinct kernel the graph's compute tasks hold, by model::kernel_hash: add() swaps
  // a task's kernel for the one here equal to it, or keeps it here.
  class KernelStore {
   public:
    void intern(KernelRef& kernel);

   private:
    std::unordered_multimap<std::uint64_t, std::shared_ptr<const model::Kernel>> kernels_;
  };

  int num_ranks_;
  Graph graph_;
  NameStore names_;
  std::unordered_set<std::string_view> ops_;  // views into names_
  KernelStore kernels_;
  struct Edge {
    TaskId before, after;
  };
  std::vector<Edge> edges_;  // every depend() call, in order
  std::vector<Region> regions_;
  std::vector<int> load_alias_;
  int alias_stage_ranks_ = 0;
  int alias_tp_images_ = 1;
};

// A generator's task: on `rank`, named "r<rank>/<name>", after `deps`. `data_op`: its op in the
// dataflow program, -1 for none.
TaskId add_rank_task(TaskGraph& graph, int rank, std::string_view name, StreamRef stream, TaskKind kind,
                     TaskLabels labels, std::int32_t data_op, const std::vector<TaskId>& deps);

// A mirrored graph's proxy (a receive that stands in for another rank's, docs/schedules.md
// "Symmetry"): on `rank`, named "r<named_rank>/<name>" as the task it stands in for, after `deps`;
// no dataflow op.
TaskId add_proxy_task(TaskGraph& graph, int rank, int named_rank, std::string_view name, StreamRef stream,
                      TaskKind kind, TaskLabels labels, const std::vector<TaskId>& deps);

// True for the tasks that occupy their (rank, stream) while they run: every kind but Recv.
bool holds_stream(const Task& task);

// The ranks a mirrored graph's metrics count, ascending: every rank, or, in each of the pipeline_stages
// equal, stage-major parts of the graph's ranks, the first simulated_ranks x tp_images / pipeline_stages
// ranks, every tp_images-th of them (Schedule::simulated_ranks; 0: every rank; Schedule::tp_images).
// std::logic_error when they do not split so.
std::vector<int> counted_ranks(int graph_ranks, int simulated_ranks, int pipeline_stages, int tp_images = 1);

// Per task: the next stream-holding task added on the same (rank, stream), kNoTask for the last one
// and for tasks that hold no stream (the implicit stream-order edges of execution_order).
std::vector<TaskId> stream_successors(const TaskGraph& graph);

// Every ordering edge the simulator honours, as compressed rows: for each task its explicit
// successors (in the order depend() was called), then the implicit stream-order edge to the next
// stream-holding task added on the same (rank, stream), if any.
struct ExecutionOrder {
  std::vector<std::uint32_t> offsets;  // successors of task i: targets[offsets[i] .. offsets[i + 1])
  std::vector<TaskId> targets;
  std::vector<std::uint32_t> in_degree;
};
ExecutionOrder execution_order(const TaskGraph& graph);

// Refuses a graph that cannot run, with a GraphError naming the tasks: a rank outside [0, ranks), a
// cycle (its tasks listed, stream order included), a Send without its Recv or a Recv without its
// Send (matched on rank, peer, tag; bytes must agree), collective members that are missing or
// disagree, a non-positive size.
void validate(const TaskGraph& graph);

// What validate() establishes about a graph, kept so that the simulator does not redo the work.
inline constexpr TaskId kNoTask = static_cast<TaskId>(-1);
struct GraphAnalysis {
  ExecutionOrder order;
  std::vector<TaskId> partner;                   // a Send's Recv and a Recv's Send; kNoTask otherwise
  // The members of each collective, in group (ring) order; in a mirrored graph only those present
  // (ranks whose load alias is themselves), the image ranks standing in through their aliases.
  std::vector<std::vector<TaskId>> collectives;
  std::vector<std::uint32_t> collective_of;      // per task: index into `collectives`; kNoTask otherwise
};
// validate(), returning its findings. Throws the same GraphErrors.
GraphAnalysis analyze(const TaskGraph& graph);

// Sees every task during analyze()'s single pass over the graph, in id order, once that task's own
// checks (ranks, sizes, kernel shapes) have passed. A caller that needs something of every task (the
// simulator: kernel costs, send sizes) gets it while the task is in cache, instead of walking the
// large, scattered Task objects a second time. A visited task may still belong to a graph that
// analyze() then refuses (duplicate names, unmatched sends, cycles are found after the pass).
// An exception thrown by visit() ends analyze() with that exception.
class TaskVisitor {
 public:
  virtual ~TaskVisitor() = default;
  virtual void visit(TaskId id, const Task& task) = 0;
};
// analyze(), calling `visitor` (may be null) for each task as described above. The checks, their
// order and their messages are those of analyze(graph).
GraphAnalysis analyze(const TaskGraph& graph, TaskVisitor* visitor);

}  // namespace fusesim::sched
