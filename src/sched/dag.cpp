#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fusesim/sched/dag.hpp"
#include "fusesim/util/error.hpp"

namespace fusesim::sched {

namespace {

TaskId add_named_task(TaskGraph& graph, int rank, int named_rank, std::string_view name, StreamRef stream,
                      TaskKind kind, TaskLabels labels, std::int32_t data_op, const std::vector<TaskId>& deps) {
  Task task;
  // "r<named_rank>/<name>", without a format call or an allocation where it fits the buffer: every task
  // of a graph of millions is named here (TaskGraph::add copies it into the graph's names).
  const fmt::format_int digits(named_rank);
  fmt::basic_memory_buffer<char, 256> full;
  full.push_back('r');
  full.append(digits.data(), digits.data() + digits.size());
  full.push_back('/');
  full.append(name.data(), name.data() + name.size());
  task.name = std::string_view(full.data(), full.size());
  task.rank = rank;
  task.stream = stream;
  task.kind = std::move(kind);
  task.labels = std::move(labels);
  task.data_op = data_op;
  const TaskId id = graph.add(std::move(task));
  for (TaskId d : deps) graph.depend(d, id);
  return id;
}

}  // namespace

TaskId add_rank_task(TaskGraph& graph, int rank, std::string_view name, StreamRef stream, TaskKind kind,
                     TaskLabels labels, std::int32_t data_op, const std::vector<TaskId>& deps) {
  return add_named_task(graph, rank, rank, name, stream, std::move(kind), std::move(labels), data_op, deps);
}

TaskId add_proxy_task(TaskGraph& graph, int rank, int named_rank, std::string_view name, StreamRef stream,
                      TaskKind kind, TaskLabels labels, const std::vector<TaskId>& deps) {
  return add_named_task(graph, rank, named_rank, name, stream, std::move(kind), std::move(labels), -1, deps);
}

TaskId TaskGraph::add(Task task) {
  if (boost::num_vertices(graph_) >= static_cast<std::size_t>(std::numeric_limits<TaskId>::max()))
    throw GraphError("task graph is full: more than 2^32 - 1 tasks");
  // boost::add_vertex(property, graph) takes the property by const reference and copies it (every
  // string and vector of the Task allocated anew); an empty vertex moved into costs no allocation.
  const auto v = boost::add_vertex(graph_);
  task.name = names_.store(task.name);
  task.labels.op = intern_op(task.labels.op);
  if (auto* compute = std::get_if<ComputeTask>(&task.kind)) kernels_.intern(compute->kernel);
  graph_[v] = std::move(task);
  return static_cast<TaskId>(v);
}

std::string_view TaskGraph::NameStore::store(std::string_view text) {
  if (text.empty()) return {};
  if (used_ + text.size() > block_bytes_) {
    block_bytes_ = std::max({kFirstBlockBytes, std::min(kMaxBlockBytes, 2 * block_bytes_), text.size()});
    blocks_.push_back(std::make_unique_for_overwrite<char[]>(block_bytes_));
    used_ = 0;
  }
  char* at = blocks_.back().get() + used_;
  std::memcpy(at, text.data(), text.size());
  used_ += text.size();
  return {at, text.size()};
}

std::string_view TaskGraph::intern_op(std::string_view op) {
  if (op.empty()) return {};
  if (const auto it = ops_.find(op); it != ops_.end()) return *it;
  return *ops_.insert(names_.store(op)).first;
}

void TaskGraph::KernelStore::intern(KernelRef& kernel) {
  if (!kernel.kernel_) return;  // the default kernel, which no graph holds
  const std::uint64_t hash = model::kernel_hash(*kernel.kernel_);
  for (auto [it, end] = kernels_.equal_range(hash); it != end; ++it) {
    if (it->second == kernel.kernel_ || model::same_kernel(*it->second, *kernel.kernel_)) {
      kernel.kernel_ = it->second;
      return;
    }
  }
  kernels_.emplace(hash, kernel.kernel_);
}

const model::Kernel& KernelRef::no_kernel() {
  static const model::Kernel none;
  return none;
}

const std::vector<int>& RankGroup::no_ranks() {
  static const std::vector<int> none;
  return none;
}

void TaskGraph::reserve(std::size_t tasks) { graph_.m_vertices.reserve(tasks); }

// adjacency_list::swap copies the graph three times (a temporary and two assignments), so the
// containers behind it are swapped: its vertices (each with its out-edges, which hold the target
// alone), its edge list (unused by a directed graph without edge properties) and its graph property.
// tests/sched/dag_json_test.cpp checks a moved graph against a copy of it.
void TaskGraph::swap_graph(Graph& a, Graph& b) noexcept {
  a.m_vertices.swap(b.m_vertices);
  a.m_edges.swap(b.m_edges);
  a.m_property.swap(b.m_property);
}

TaskGraph::TaskGraph(const TaskGraph& other)
    : num_ranks_(other.num_ranks_),
      kernels_(other.kernels_),
      edges_(other.edges_),
      regions_(other.regions_),
      load_alias_(other.load_alias_),
      alias_stage_ranks_(other.alias_stage_ranks_),
      alias_tp_images_(other.alias_tp_images_) {
  // The graph property is no_property: nothing to copy. Boost's out-edge entry, copied, takes the
  // (allocated, empty) property of the entry it copies and leaves that one null, as std::auto_ptr did:
  // copying the vertices whole would change `other`, whose edges then bind a reference to null when
  // read (UndefinedBehaviorSanitizer, tests/sched/backward_verify_test.cpp). Each entry is built anew
  // from its target, as add_edge builds it.
  graph_.m_vertices.reserve(other.graph_.m_vertices.size());
  for (const auto& vertex : other.graph_.m_vertices) {
    auto& copy = graph_.m_vertices.emplace_back();
    copy.m_property = vertex.m_property;
    copy.m_property.name = names_.store(vertex.m_property.name);
    copy.m_property.labels.op = intern_op(vertex.m_property.labels.op);
    copy.m_out_edges.reserve(vertex.m_out_edges.size());
    for (const auto& edge : vertex.m_out_edges) copy.m_out_edges.emplace_back(edge.get_target());
  }
}

TaskGraph& TaskGraph::operator=(const TaskGraph& other) {
  if (this != &other) {
    TaskGraph copy(other);
    *this = std::move(copy);
  }
  return *this;
}

TaskGraph::TaskGraph(TaskGraph&& other) noexcept
    : num_ranks_(other.num_ranks_),
      edges_(std::move(other.edges_)),
      regions_(std::move(other.regions_)),
      load_alias_(std::move(other.load_alias_)),
      alias_stage_ranks_(other.alias_stage_ranks_),
      alias_tp_images_(other.alias_tp_images_) {
  swap_graph(graph_, other.graph_);
  std::swap(names_, other.names_);
  std::swap(ops_, other.ops_);
  std::swap(kernels_, other.kernels_);
}

TaskGraph& TaskGraph::operator=(TaskGraph&& other) noexcept {
  num_ranks_ = other.num_ranks_;
  swap_graph(graph_, other.graph_);
  std::swap(names_, other.names_);  // each graph keeps the names and ops its tasks view
  std::swap(ops_, other.ops_);
  std::swap(kernels_, other.kernels_);
  edges_ = std::move(other.edges_);
  regions_ = std::move(other.regions_);
  load_alias_ = std::move(other.load_alias_);
  alias_stage_ranks_ = other.alias_stage_ranks_;
  alias_tp_images_ = other.alias_tp_images_;
  return *this;
}

void TaskGraph::depend(TaskId before, TaskId after) {
  const std::size_t n = size();
  if (before >= n || after >= n)
    throw GraphError(fmt::format("depend({}, {}): the graph has {} tasks", before, after, n));
  boost::add_edge(before, after, graph_);
  edges_.push_back(Edge{before, after});
}

int TaskGraph::add_region(Region region) {
  regions_.push_back(std::move(region));
  return static_cast<int>(regions_.size()) - 1;
}

void TaskGraph::set_load_alias(std::vector<int> alias, int stage_ranks, int tp_images) {
  if (!alias.empty() && alias.size() != static_cast<std::size_t>(num_ranks_))
    throw GraphError(fmt::format("load alias table has {} entries for {} ranks", alias.size(), num_ranks_));
  const int period = stage_ranks > 0 ? stage_ranks : num_ranks_;
  if (stage_ranks < 0 || (num_ranks_ > 0 && num_ranks_ % period != 0))
    throw GraphError(fmt::format("{} ranks do not split into stages of {}", num_ranks_, stage_ranks));
  if (tp_images < 1 || period % tp_images != 0)
    throw GraphError(fmt::format("stages of {} ranks do not split into groups of {} images", period, tp_images));
  for (std::size_t r = 0; r < alias.size(); ++r) {
    if (alias[r] < 0 || alias[r] >= num_ranks_)
      throw GraphError(fmt::format("load alias of rank {} is rank {}, outside [0, {})", r, alias[r], num_ranks_));
    if (alias[r] / period != static_cast<int>(r) / period)
      throw GraphError(fmt::format("load alias of rank {} is rank {}, in another pipeline stage of {} ranks", r,
                                   alias[r], period));
  }
  load_alias_ = std::move(alias);
  alias_stage_ranks_ = stage_ranks;
  alias_tp_images_ = tp_images;
}

std::optional<std::pair<TaskId, TaskId>> TaskGraph::retain(const std::vector<bool>& keep) {
  const std::size_t n = size();
  if (keep.size() != n) throw std::logic_error(fmt::format("retain: {} flags for {} tasks", keep.size(), n));
  for (const Edge& e : edges_)
    if (keep[e.after] && !keep[e.before]) return std::pair{e.before, e.after};
  std::vector<TaskId> id(n, kNoTask);
  Graph kept;
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i) count += keep[i] ? 1 : 0;
  kept.m_vertices.reserve(count);
  for (TaskId i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    id[i] = static_cast<TaskId>(boost::add_vertex(kept));
    kept[id[i]] = std::move(graph_[i]);
  }
  std::vector<Edge> edges;
  for (const Edge& e : edges_) {
    if (!keep[e.after]) continue;
    boost::add_edge(id[e.before], id[e.after], kept);
    edges.push_back(Edge{id[e.before], id[e.after]});
  }
  swap_graph(graph_, kept);
  edges_ = std::move(edges);
  return std::nullopt;
}

std::vector<TaskId> TaskGraph::successors(TaskId id) const {
  std::vector<TaskId> out;
  for (auto [it, end] = boost::adjacent_vertices(id, graph_); it != end; ++it) out.push_back(static_cast<TaskId>(*it));
  return out;
}

std::vector<TaskId> TaskGraph::predecessors(TaskId id) const {
  std::vector<TaskId> out;
  for (const Edge& e : edges_)
    if (e.after == id) out.push_back(e.before);
  return out;
}

PredecessorIndex TaskGraph::predecessor_index() const {
  const std::size_t n = size();
  PredecessorIndex index;
  index.offsets.assign(n + 1, 0);
  for (const Edge& e : edges_) ++index.offsets[e.after + 1];
  for (std::size_t i = 0; i < n; ++i) index.offsets[i + 1] += index.offsets[i];
  index.sources.resize(edges_.size());
  std::vector<std::uint32_t> next(index.offsets.begin(), index.offsets.end() - 1);
  for (const Edge& e : edges_) index.sources[next[e.after]++] = e.before;
  return index;
}

bool holds_stream(const Task& task) { return !std::holds_alternative<RecvTask>(task.kind); }

std::vector<int> counted_ranks(int graph_ranks, int simulated_ranks, int pipeline_stages, int tp_images) {
  const int stages = std::max(1, pipeline_stages);
  if (graph_ranks % stages != 0)
    throw std::logic_error(fmt::format("counted_ranks: {} ranks do not split into {} pipeline stages", graph_ranks, stages));
  const int per_stage = graph_ranks / stages;
  const int simulated = simulated_ranks > 0 ? simulated_ranks : graph_ranks;
  if (simulated > graph_ranks || simulated % stages != 0)
    throw std::logic_error(fmt::format("counted_ranks: {} simulated ranks are not the same count in each of {} stages of {} "
                                       "ranks", simulated, stages, per_stage));
  const int stride = std::max(1, tp_images);
  if (simulated_ranks > 0 && (simulated / stages) * stride > per_stage)
    throw std::logic_error(fmt::format("counted_ranks: {} simulated ranks, each for {}, exceed stages of {} ranks",
                                       simulated, stride, per_stage));
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(simulated));
  for (int s = 0; s < stages; ++s)
    for (int i = 0; i < simulated / stages; ++i) out.push_back(s * per_stage + i * (simulated_ranks > 0 ? stride : 1));
  return out;
}

std::vector<TaskId> stream_successors(const TaskGraph& graph) {
  const std::size_t n = graph.size();
  // Found in one pass in id (= insertion) order.
  std::vector<TaskId> stream_next(n, kNoTask);
  std::unordered_map<std::uint64_t, TaskId> last_on_stream;
  for (TaskId id = 0; id < n; ++id) {
    const Task& t = graph.task(id);
    if (!holds_stream(t)) continue;
    const std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(t.rank)) << 34) |
                              (static_cast<std::uint64_t>(t.stream.kind) << 32) |
                              static_cast<std::uint32_t>(t.stream.index);
    auto [it, inserted] = last_on_stream.try_emplace(key, id);
    if (!inserted) {
      stream_next[it->second] = id;
      it->second = id;
    }
  }
  return stream_next;
}

ExecutionOrder execution_order(const TaskGraph& graph) {
  const std::size_t n = graph.size();
  const std::vector<TaskId> stream_next = stream_successors(graph);

  ExecutionOrder order;
  order.offsets.assign(n + 1, 0);
  order.in_degree.assign(n, 0);
  const auto& g = graph.graph();
  for (TaskId id = 0; id < n; ++id)
    order.offsets[id + 1] =
        order.offsets[id] + static_cast<std::uint32_t>(boost::out_degree(id, g)) + (stream_next[id] != kNoTask ? 1u : 0u);
  order.targets.resize(order.offsets[n]);
  for (TaskId id = 0; id < n; ++id) {
    std::uint32_t pos = order.offsets[id];
    for (auto [it, end] = boost::adjacent_vertices(id, g); it != end; ++it) order.targets[pos++] = static_cast<TaskId>(*it);
    if (stream_next[id] != kNoTask) order.targets[pos++] = stream_next[id];
  }
  for (TaskId t : order.targets) ++order.in_degree[t];
  return order;
}

namespace {

std::string quoted(const Task& t) { return "'" + t.name + "'"; }

std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.size() <= 16) return fmt::format("[{}]", fmt::join(ranks, ", "));
  return fmt::format("[{}, {}, {}, ..., {}] ({} ranks)", ranks[0], ranks[1], ranks[2], ranks.back(), ranks.size());
}

// ---------------------------------------------------------------------------------------------
// analyze() makes one pass over the Task objects and does the rest of its work on small arrays.
// The Task objects are large (about 290 bytes with their Boost vertex) and a million-task graph is
// far larger than the caches, so every extra pass over them, and every random access into a table
// the size of the graph, costs more than the checks themselves. Hence: one sequential pass that
// gathers what the later steps need; duplicate names and P2P pairs found by partitioning on a hash
// into cache-sized buckets instead of one big hash table (or a sort) over the whole graph; and the
// cycle check reduced to one pass over the edges when, as generators usually build them, every edge
// goes from an earlier-added rendezvous to a later-added one.

// 64-bit finaliser of splitmix64: spreads every input bit over the whole word.
inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

std::uint64_t hash_name(std::string_view s) {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ s.size();
  const char* p = s.data();
  std::size_t left = s.size();
  for (; left >= 8; p += 8, left -= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdULL;
    h ^= h >> 29;
  }
  // The last 1-7 bytes in whole loads: copied byte by byte into a word (what memcpy of a variable
  // length compiles to) they were read back as 8 bytes, a store-forwarding stall on every name
  // (15% of analyze()). A name of 8 bytes or more reloads the 8 that end it and drops those
  // already hashed; a shorter one is read as 4 + 2 + 1 bytes. Little-endian or not, the hash only
  // buckets names (equal names give equal words), so its value matters nowhere else.
  std::uint64_t w = 0;
  if (left > 0) {
    if (s.size() >= 8) {
      std::memcpy(&w, p + left - 8, 8);
      w >>= 8 * (8 - left);
    } else {
      std::uint32_t w4 = 0;
      std::uint16_t w2 = 0;
      std::uint8_t w1 = 0;
      std::size_t at = 0;
      if (left & 4) std::memcpy(&w4, p, 4), at = 4;
      if (left & 2) std::memcpy(&w2, p + at, 2), at += 2;
      if (left & 1) std::memcpy(&w1, p + at, 1);
      w = static_cast<std::uint64_t>(w4) | static_cast<std::uint64_t>(w2) << 32 | static_cast<std::uint64_t>(w1) << 48;
    }
  }
  return mix64(h ^ w);
}

// Reorders `items` (stably) into buckets by the top bits of hash_of(item), about 1024 items per
// bucket, and calls fn(first, last) for each bucket. A bucket's work (a small hash table) then stays
// in the L1/L2 caches whatever the size of the graph.
template <class T, class HashOf, class Fn>
void for_each_bucket(std::vector<T>& items, HashOf hash_of, Fn fn) {
  const std::size_t m = items.size();
  int bits = 0;
  while ((std::size_t{1024} << bits) < m && bits < 16) ++bits;
  if (bits == 0) {
    if (m > 0) fn(items.data(), items.data() + m);
    return;
  }
  const int shift = 64 - bits;
  std::vector<std::uint32_t> start((std::size_t{1} << bits) + 1, 0);
  for (const T& x : items) ++start[(hash_of(x) >> shift) + 1];
  for (std::size_t b = 1; b < start.size(); ++b) start[b] += start[b - 1];
  std::vector<T> sorted(m);
  {
    std::vector<std::uint32_t> cursor(start.begin(), start.end() - 1);
    for (const T& x : items) sorted[cursor[hash_of(x) >> shift]++] = x;
  }
  items.swap(sorted);
  for (std::size_t b = 0; b + 1 < start.size(); ++b)
    if (start[b] < start[b + 1]) fn(items.data() + start[b], items.data() + start[b + 1]);
}

// Open-addressing table of small indices (0 = empty) sized for one bucket, reused between buckets.
class BucketTable {
 public:
  void reset(std::size_t items) {
    std::size_t cap = 16;
    while (cap < 2 * items) cap <<= 1;
    slots_.assign(cap, 0);
    mask_ = cap - 1;
  }
  std::size_t start(std::uint64_t hash) const { return static_cast<std::size_t>(hash) & mask_; }
  std::size_t next(std::size_t slot) const { return (slot + 1) & mask_; }
  std::uint32_t& operator[](std::size_t slot) { return slots_[slot]; }

 private:
  std::vector<std::uint32_t> slots_;
  std::size_t mask_ = 0;
};

// A task's name hash in the high 32 bits, its id in the low 32: 8 bytes per task. Equal high halves
// are confirmed by comparing the names.
using NameEntry = std::uint64_t;
NameEntry name_entry(std::string_view name, TaskId id) { return (hash_name(name) & ~0xffffffffULL) | id; }

// Names must be unique: they are how errors, traces and tests refer to tasks. Reports the pair
// whose second task has the lowest id (the first duplicate met walking the graph in id order).
void check_unique_names(const TaskGraph& graph, std::vector<NameEntry>& names) {
  TaskId best_first = kNoTask, best_second = kNoTask;
  BucketTable table;
  for_each_bucket(
      names, [](NameEntry e) { return e; },
      [&](const NameEntry* first, const NameEntry* last) {
        table.reset(static_cast<std::size_t>(last - first));
        for (const NameEntry* e = first; e != last; ++e) {  // in id order within the bucket
          const std::uint64_t hash = *e >> 32;
          const auto id = static_cast<TaskId>(*e);
          std::size_t slot = table.start(hash);
          for (; table[slot] != 0; slot = table.next(slot)) {
            const NameEntry other = first[table[slot] - 1];
            if ((other >> 32) == hash && graph.task(static_cast<TaskId>(other)).name == graph.task(id).name) {
              if (id < best_second) {
                best_first = static_cast<TaskId>(other);
                best_second = id;
              }
              return;  // later entries of this bucket have higher ids
            }
          }
          table[slot] = static_cast<std::uint32_t>(e - first) + 1;
        }
      });
  if (best_second != kNoTask)
    throw GraphError(fmt::format("tasks {} and {} share the name '{}'", best_first, best_second,
                                 graph.task(best_second).name));
}

// One end of a P2P transfer, keyed (source rank, destination rank, tag). The key's hash is computed
// once, when the end is gathered: bucketing reads it twice and the bucket's table once more.
struct P2pEnd {
  std::uint64_t hash;
  int src, dst;
  std::int64_t tag;
  Bytes bytes;
  TaskId id;
  bool is_recv;
  static std::uint64_t hash_of(int src, int dst, std::int64_t tag) {
    return mix64((static_cast<std::uint64_t>(static_cast<std::uint32_t>(src)) << 32 |
                  static_cast<std::uint32_t>(dst)) ^
                 mix64(static_cast<std::uint64_t>(tag)));
  }
};

// P2P: a Send on rank s to peer d with tag x pairs with the Recv on rank d from peer s with tag x;
// exactly one of each, equal bytes. Errors name the lowest task id of their kind (duplicates, then
// a lone send, a lone recv, a size mismatch), so the message does not depend on the bucketing.
void match_p2p(const TaskGraph& graph, std::vector<P2pEnd>& ends, std::vector<TaskId>& partner) {
  struct Key {  // the ends of one (src, dst, tag), in id order
    int src, dst;
    std::int64_t tag;
    TaskId send[2] = {kNoTask, kNoTask};
    TaskId recv[2] = {kNoTask, kNoTask};
    std::uint32_t sends = 0, recvs = 0;
    Bytes send_bytes = 0, recv_bytes = 0;
  };
  TaskId duplicate_a = kNoTask, duplicate_b = kNoTask, lone_send = kNoTask, lone_recv = kNoTask, mismatch = kNoTask;
  BucketTable table;
  std::vector<Key> keys;
  for_each_bucket(
      ends, [](const P2pEnd& e) { return e.hash; },
      [&](const P2pEnd* first, const P2pEnd* last) {
        table.reset(static_cast<std::size_t>(last - first));
        keys.clear();
        for (const P2pEnd* e = first; e != last; ++e) {
          std::size_t slot = table.start(e->hash);
          for (; table[slot] != 0; slot = table.next(slot)) {
            const Key& k = keys[table[slot] - 1];
            if (k.src == e->src && k.dst == e->dst && k.tag == e->tag) break;
          }
          if (table[slot] == 0) {
            keys.push_back(Key{e->src, e->dst, e->tag});
            table[slot] = static_cast<std::uint32_t>(keys.size());
          }
          Key& k = keys[table[slot] - 1];
          if (e->is_recv) {
            if (k.recvs < 2) k.recv[k.recvs] = e->id;
            if (k.recvs++ == 0) k.recv_bytes = e->bytes;
          } else {
            if (k.sends < 2) k.send[k.sends] = e->id;
            if (k.sends++ == 0) k.send_bytes = e->bytes;
          }
        }
        for (const Key& k : keys) {
          if (k.sends > 1 || k.recvs > 1) {
            const TaskId* pair = k.sends > 1 ? k.send : k.recv;
            if (duplicate_a == kNoTask || pair[0] < duplicate_a) {
              duplicate_a = pair[0];
              duplicate_b = pair[1];
            }
          } else if (k.sends == 0) {
            lone_recv = std::min(lone_recv, k.recv[0]);
          } else if (k.recvs == 0) {
            lone_send = std::min(lone_send, k.send[0]);
          } else {
            if (k.send_bytes != k.recv_bytes) mismatch = std::min(mismatch, k.send[0]);
            partner[k.send[0]] = k.recv[0];
            partner[k.recv[0]] = k.send[0];
          }
        }
      });
  if (duplicate_a != kNoTask) {
    const Task& a = graph.task(duplicate_a);
    const Task& b = graph.task(duplicate_b);
    if (const auto* s = std::get_if<SendTask>(&a.kind))
      throw GraphError(fmt::format("sends {} and {} both go from rank {} to {} with tag {}", quoted(a), quoted(b), a.rank,
                                   s->peer, s->tag));
    const auto& r = std::get<RecvTask>(a.kind);
    throw GraphError(fmt::format("recvs {} and {} both expect rank {} -> {} with tag {}", quoted(a), quoted(b), r.peer,
                                 a.rank, r.tag));
  }
  if (lone_send != kNoTask) {
    const Task& t = graph.task(lone_send);
    const auto& s = std::get<SendTask>(t.kind);
    throw GraphError(fmt::format("send {} (rank {} -> {}, tag {}) has no matching recv", quoted(t), t.rank, s.peer, s.tag));
  }
  if (lone_recv != kNoTask) {
    const Task& t = graph.task(lone_recv);
    const auto& r = std::get<RecvTask>(t.kind);
    throw GraphError(fmt::format("recv {} (rank {} <- {}, tag {}) has no matching send", quoted(t), t.rank, r.peer, r.tag));
  }
  if (mismatch != kNoTask) {
    const Task& t = graph.task(mismatch);
    const Task& rt = graph.task(partner[mismatch]);
    const auto& s = std::get<SendTask>(t.kind);
    throw GraphError(fmt::format("send {} ({} bytes) and recv {} ({} bytes) disagree on the size (rank {} -> {}, tag {})",
                                 quoted(t), s.bytes, quoted(rt), std::get<RecvTask>(rt.kind).bytes, t.rank, s.peer,
                                 s.tag));
  }
}

// The group of the collective task checked last, its sorted copy and a hash of its set of ranks:
// the members of one collective carry equal groups, so a collective of t ranks is sorted and
// checked once instead of t times (t = 1024: a million operations instead of ten million).
struct GroupCache {
  std::vector<int> group;
  std::vector<int> sorted;
  std::uint64_t set_hash = 0;
  std::uint32_t collective = kNoTask;  // what (instance, group) resolved to, see CollectiveGrouper
  std::int64_t instance = 0;
  bool valid = false;
};

// Collectives are grouped by (instance, set of ranks): an instance number need only be unique among
// collectives over the same ranks, so that generators may number per group. Grouped during the
// pass, in order of first appearance; the members are checked against each other afterwards.
class CollectiveGrouper {
 public:
  void add(const TaskGraph& graph, TaskId id, const CollectiveTask& k, GroupCache& cache,
           std::vector<std::uint32_t>& collective_of) {
    if (cache.collective == kNoTask || cache.instance != k.instance) {
      cache.collective = find(graph, k, cache);
      cache.instance = k.instance;
    }
    members_[cache.collective].push_back(id);
    collective_of[id] = cache.collective;
  }
  std::vector<std::vector<TaskId>>& members() { return members_; }

 private:
  std::uint32_t find(const TaskGraph& graph, const CollectiveTask& k, const GroupCache& cache) {
    const std::uint64_t key = mix64(cache.set_hash ^ mix64(static_cast<std::uint64_t>(k.instance)));
    auto [it, inserted] = index_.try_emplace(key, kNoTask);
    for (std::uint32_t c = it->second; c != kNoTask; c = chain_[c]) {
      const auto& other = std::get<CollectiveTask>(graph.task(members_[c].front()).kind);
      if (other.instance != k.instance) continue;
      if (other.group == k.group) return c;
      std::vector<int> sorted = other.group;
      std::sort(sorted.begin(), sorted.end());
      if (sorted == cache.sorted) return c;
    }
    const auto c = static_cast<std::uint32_t>(members_.size());
    members_.emplace_back();
    chain_.push_back(it->second);
    it->second = c;
    return c;
  }

  std::unordered_map<std::uint64_t, std::uint32_t> index_;  // hash of (instance, set) -> newest collective
  std::vector<std::uint32_t> chain_;                        // older collectives with the same hash
  std::vector<std::vector<TaskId>> members_;                // in task order
};

// Checks the members found for each collective against its first member, and puts them in ring
// order.
void check_collectives(const TaskGraph& graph, std::vector<std::vector<TaskId>>& found, GraphAnalysis& out) {
  out.collectives.reserve(found.size());
  std::vector<int> sorted;
  std::vector<TaskId> by_position;
  for (const auto& members : found) {
    const Task& first = graph.task(members.front());
    const auto& a = std::get<CollectiveTask>(first.kind);
    auto what = [&] { return fmt::format("collective instance {} over ranks {}", a.instance, rank_list(a.group)); };
    sorted = a.group;
    std::sort(sorted.begin(), sorted.end());
    by_position.assign(sorted.size(), kNoTask);
    for (TaskId id : members) {
      const Task& t = graph.task(id);
      const auto& b = std::get<CollectiveTask>(t.kind);
      auto disagree = [&](const char* field, const std::string& x, const std::string& y) {
        throw GraphError(fmt::format("{}: members {} and {} disagree on {} ({} vs {})", what(), quoted(first),
                                     quoted(t), field, x, y));
      };
      if (b.kind != a.kind) disagree("the kind", to_string(a.kind), to_string(b.kind));
      if (b.bytes != a.bytes) disagree("the size", std::to_string(a.bytes), std::to_string(b.bytes));
      if (&b != &a && b.group != a.group) disagree("the ring order", rank_list(a.group), rank_list(b.group));
      if (b.engine != a.engine) disagree("the engine", model::to_string(a.engine), model::to_string(b.engine));
      if (b.sms != a.sms) disagree("the SMs", std::to_string(a.sms), std::to_string(b.sms));
      const auto pos = static_cast<std::size_t>(std::lower_bound(sorted.begin(), sorted.end(), t.rank) - sorted.begin());
      if (by_position[pos] != kNoTask)
        throw GraphError(fmt::format("{}: rank {} has two tasks, {} and {}", what(), t.rank,
                                     quoted(graph.task(by_position[pos])), quoted(t)));
      by_position[pos] = id;
    }
    const std::vector<int>& alias = graph.load_alias();
    const auto present_rank = [&](int r) {
      const auto it = std::lower_bound(sorted.begin(), sorted.end(), r);
      return it != sorted.end() && *it == r && by_position[static_cast<std::size_t>(it - sorted.begin())] != kNoTask;
    };
    for (std::size_t p = 0; p < sorted.size(); ++p) {
      if (by_position[p] != kNoTask) continue;
      // A mirrored graph's image rank (TaskGraph::load_alias): the member its alias has stands in
      // for it, and the engine times the ring by the members present (sim/engine.cpp).
      const int r = sorted[p];
      if (a.kind != CollectiveKind::all_to_all && !alias.empty() && alias[static_cast<std::size_t>(r)] != r &&
          present_rank(alias[static_cast<std::size_t>(r)]))
        continue;
      std::vector<std::string> present;
      for (TaskId id : members) {
        if (present.size() == 4) {
          present.push_back("...");
          break;
        }
        present.push_back(quoted(graph.task(id)));
      }
      throw GraphError(fmt::format("{} ({}): rank {} has no task (members present: {})", what(), to_string(a.kind),
                                   sorted[p], fmt::join(present, ", ")));
    }
    std::vector<TaskId> in_ring_order;
    in_ring_order.reserve(a.group.size());
    for (int r : a.group) {
      const TaskId id =
          by_position[static_cast<std::size_t>(std::lower_bound(sorted.begin(), sorted.end(), r) - sorted.begin())];
      if (id != kNoTask) in_ring_order.push_back(id);
    }
    out.collectives.push_back(std::move(in_ring_order));
  }
}

void check_kernel(const Task& t, const ComputeTask& c) {
  if (const auto* g = std::get_if<model::GemmKernel>(&c.kernel.get())) {
    if (g->m < 1 || g->n < 1 || g->k < 1 || g->batch < 1)
      throw GraphError(fmt::format("task {}: gemm needs positive sizes (m={}, n={}, k={}, batch={})", quoted(t), g->m,
                                   g->n, g->k, g->batch));
  } else if (const auto* a = std::get_if<model::AttentionKernel>(&c.kernel.get())) {
    if (a->batch < 1 || a->heads < 1 || a->kv_heads < 1 || a->seq_q < 1 || a->seq_kv < 1 || a->head_dim < 1 ||
        a->q_offset < 0)
      throw GraphError(fmt::format(
          "task {}: attention needs positive sizes (batch={}, heads={}, kv_heads={}, seq_q={}, seq_kv={}, "
          "head_dim={}) and q_offset >= 0 ({})",
          quoted(t), a->batch, a->heads, a->kv_heads, a->seq_q, a->seq_kv, a->head_dim, a->q_offset));
    if (!(a->time_factor >= 0.1 && a->time_factor <= 10.0))
      throw GraphError(fmt::format("task {}: attention time_factor {} is outside [0.1, 10]", quoted(t), a->time_factor));
    if (a->unfused && a->time_factor != 1.0)
      throw GraphError(fmt::format("task {}: an unfused attention is priced by its parts: time_factor must be 1, not {}",
                                   quoted(t), a->time_factor));
  } else {
    const auto& e = std::get<model::ElementwiseKernel>(*c.kernel);
    if (e.bytes < 0 || !(e.flops >= 0.0) || !std::isfinite(e.flops) || (e.bytes == 0 && e.flops == 0.0))
      throw GraphError(fmt::format("task {}: element-wise kernel '{}' needs bytes >= 0, flops >= 0 and some work "
                                   "(bytes={}, flops={})",
                                   quoted(t), e.op, e.bytes, e.flops));
  }
}

void check_task(const TaskGraph& graph, TaskId id, GroupCache& cache) {
  const Task& t = graph.task(id);
  const int ranks = graph.num_ranks();
  auto check_rank = [&](int r, const char* what) {
    if (r < 0 || r >= ranks)
      throw GraphError(fmt::format("task {}: {} {} is outside [0, {})", quoted(t), what, r, ranks));
  };
  check_rank(t.rank, "rank");
  if (t.stream.index < 0)
    throw GraphError(fmt::format("task {}: stream index {} is negative", quoted(t), t.stream.index));
  if (const auto* c = std::get_if<ComputeTask>(&t.kind)) {
    check_kernel(t, *c);
  } else if (const auto* s = std::get_if<SendTask>(&t.kind)) {
    check_rank(s->peer, "peer");
    if (s->peer == t.rank) throw GraphError(fmt::format("send {} is addressed to its own rank {}", quoted(t), t.rank));
    if (s->bytes <= 0) throw GraphError(fmt::format("send {} has a non-positive size ({} bytes)", quoted(t), s->bytes));
    if (s->sms < -1) throw GraphError(fmt::format("send {}: sms {} (use -1 for the device default)", quoted(t), s->sms));
  } else if (const auto* r = std::get_if<RecvTask>(&t.kind)) {
    check_rank(r->peer, "peer");
    if (r->peer == t.rank) throw GraphError(fmt::format("recv {} expects data from its own rank {}", quoted(t), t.rank));
    if (r->bytes <= 0) throw GraphError(fmt::format("recv {} has a non-positive size ({} bytes)", quoted(t), r->bytes));
  } else {
    const auto& k = std::get<CollectiveTask>(t.kind);
    if (k.group.empty()) throw GraphError(fmt::format("collective {} has an empty group", quoted(t)));
    if (!cache.valid || cache.group != k.group) {
      // A group not seen just before: sort and check it, and remember it once it passed.
      cache.valid = false;
      cache.collective = kNoTask;
      cache.group = k.group;
      cache.sorted = k.group;
      std::vector<int>& sorted = cache.sorted;
      std::sort(sorted.begin(), sorted.end());
      for (std::size_t i = 0; i < sorted.size(); ++i) {
        check_rank(sorted[i], "group member");
        if (i > 0 && sorted[i] == sorted[i - 1])
          throw GraphError(fmt::format("collective {}: rank {} appears twice in its group", quoted(t), sorted[i]));
      }
      cache.set_hash = 0;  // a sum: independent of the ring order
      for (int r : sorted) cache.set_hash += mix64(static_cast<std::uint64_t>(r) + 0x632be59bd9b4e019ULL);
      cache.valid = true;
    }
    const std::vector<int>& sorted = cache.sorted;
    if (!std::binary_search(sorted.begin(), sorted.end(), t.rank))
      throw GraphError(fmt::format("collective {} on rank {}: its group {} does not include it", quoted(t), t.rank,
                                   rank_list(k.group)));
    if (k.bytes <= 0)
      throw GraphError(fmt::format("collective {} has a non-positive size ({} bytes)", quoted(t), k.bytes));
    if (k.sms < -1)
      throw GraphError(fmt::format("collective {}: sms {} (use -1 for the device default)", quoted(t), k.sms));
  }
}

// Rendezvous groups: a Send and its Recv, the members of one collective. Their tasks can only start
// together, so for cycle detection each group is one node. `leader` is the group's lowest task id;
// `next` links each group's members in a circle (a task alone points to itself).
struct Rendezvous {
  std::vector<TaskId> leader;
  std::vector<TaskId> next;
};

Rendezvous rendezvous_groups(const GraphAnalysis& a, std::size_t n) {
  Rendezvous g;
  g.leader.resize(n);
  g.next.resize(n);
  std::iota(g.leader.begin(), g.leader.end(), TaskId{0});
  std::iota(g.next.begin(), g.next.end(), TaskId{0});
  for (TaskId id = 0; id < n; ++id) {
    const TaskId p = a.partner[id];
    if (p != kNoTask && id < p) {
      g.leader[p] = id;
      g.next[id] = p;
      g.next[p] = id;
    }
  }
  for (const auto& members : a.collectives) {
    const TaskId lead = *std::min_element(members.begin(), members.end());
    for (std::size_t i = 0; i < members.size(); ++i) {
      g.leader[members[i]] = lead;
      g.next[members[i]] = members[(i + 1) % members.size()];
    }
  }
  return g;
}

// Only called once Kahn's algorithm found that some groups never become free: finds one cycle among
// them and names its tasks.
[[noreturn]] void report_cycle(const TaskGraph& graph, const ExecutionOrder& order, const Rendezvous& rv,
                               const std::vector<std::uint32_t>& blocked) {
  const std::size_t n = graph.size();
  const std::size_t edges = order.targets.size();
  std::vector<TaskId> edge_from(edges);
  for (TaskId id = 0; id < n; ++id)
    for (std::uint32_t e = order.offsets[id]; e < order.offsets[id + 1]; ++e) edge_from[e] = id;
  // Every blocked group has an in-edge from another blocked group: walking in-edges backwards from
  // one must revisit a group, and the walk since that group's first visit is a cycle.
  std::vector<std::vector<std::uint32_t>> in_edges(n);
  for (std::size_t e = 0; e < edges; ++e) {
    const TaskId to = rv.leader[order.targets[e]];
    if (blocked[to] > 0 && blocked[rv.leader[edge_from[e]]] > 0) in_edges[to].push_back(static_cast<std::uint32_t>(e));
  }
  TaskId start = 0;
  while (rv.leader[start] != start || blocked[start] == 0) ++start;
  std::vector<std::int64_t> seen_at(n, -1);
  std::vector<std::uint32_t> walk;  // edges, walking backwards
  TaskId g = start;
  while (seen_at[g] < 0) {
    seen_at[g] = static_cast<std::int64_t>(walk.size());
    const std::uint32_t e = in_edges[g].front();
    walk.push_back(e);
    g = rv.leader[edge_from[e]];
  }
  std::vector<std::uint32_t> cycle(walk.begin() + seen_at[g], walk.end());
  std::reverse(cycle.begin(), cycle.end());
  // Start the text at the lowest task id on the cycle, so that it does not depend on the walk.
  const auto first = std::min_element(cycle.begin(), cycle.end(),
                                      [&](std::uint32_t a, std::uint32_t b) { return edge_from[a] < edge_from[b]; });
  std::rotate(cycle.begin(), first, cycle.end());

  std::string text(graph.task(edge_from[cycle.front()]).name);
  bool rendezvous = false;
  // A cycle through 200k tasks would be a line of megabytes: the first and last steps say where it
  // is, and the count says how long it is.
  constexpr std::size_t kShown = 8;
  for (std::size_t i = 0; i < cycle.size(); ++i) {
    const TaskId to = order.targets[cycle[i]];
    const TaskId next_from = edge_from[cycle[(i + 1) % cycle.size()]];
    if (cycle.size() > 2 * kShown && i >= kShown && i < cycle.size() - kShown) {
      if (i == kShown) text += fmt::format(" -> ... ({} more steps) ...", cycle.size() - 2 * kShown);
      rendezvous = rendezvous || next_from != to;
      continue;
    }
    text += " -> " + graph.task(to).name;
    if (next_from != to) {
      text += " ~ " + graph.task(next_from).name;
      rendezvous = true;
    }
  }
  if (rendezvous)
    text += " (x ~ y: tasks of one rendezvous, a send and its recv or members of one collective, which start together)";
  throw GraphError("dependency cycle: " + text);
}

// Cycle detection on the graph the simulator really runs: explicit edges plus stream order, with
// each rendezvous contracted to one node. A cycle there is a run that can never finish. Kahn's
// algorithm over the groups: a group is free once no edge from outside it (or from itself) is
// pending; freeing it releases the out-edges of all its members.
void check_acyclic(const TaskGraph& graph, const GraphAnalysis& a) {
  const std::size_t n = graph.size();
  const Rendezvous rv = rendezvous_groups(a, n);
  std::vector<std::uint32_t> blocked(n, 0);  // per leader: pending in-edges of the whole group
  for (TaskId id = 0; id < n; ++id) blocked[rv.leader[id]] += a.order.in_degree[id];
  std::vector<TaskId> queue;
  queue.reserve(n);
  for (TaskId id = 0; id < n; ++id)
    if (rv.leader[id] == id && blocked[id] == 0) queue.push_back(id);
  for (std::size_t head = 0; head < queue.size(); ++head) {
    TaskId m = queue[head];
    do {
      for (std::uint32_t e = a.order.offsets[m]; e < a.order.offsets[m + 1]; ++e) {
        const TaskId to = rv.leader[a.order.targets[e]];
        if (--blocked[to] == 0) queue.push_back(to);
      }
      m = rv.next[m];
    } while (m != queue[head]);
  }
  std::size_t groups = 0;
  for (TaskId id = 0; id < n; ++id) groups += (rv.leader[id] == id);
  if (queue.size() != groups) report_cycle(graph, a.order, rv, blocked);
}

}  // namespace

GraphAnalysis analyze(const TaskGraph& graph) { return analyze(graph, nullptr); }

GraphAnalysis analyze(const TaskGraph& graph, TaskVisitor* visitor) {
  if (graph.num_ranks() < 1) throw GraphError(fmt::format("task graph has {} ranks", graph.num_ranks()));
  const std::size_t n = graph.size();
  const auto& g = graph.graph();
  GraphAnalysis a;
  a.partner.assign(n, kNoTask);
  a.collective_of.assign(n, kNoTask);
  ExecutionOrder& order = a.order;

  // The execution order is written during the pass: each task's explicit successors, then a slot
  // for its stream successor, filled in when the next task of that stream comes (kNoTask if none
  // comes; such slots are squeezed out afterwards). Streams are tracked in a dense table (rank,
  // kind, index < 4) when the ranks are few enough for it, else in a hash map.
  const std::size_t max_targets = graph.num_edges() + n;
  if (max_targets > std::numeric_limits<std::uint32_t>::max())
    throw GraphError(fmt::format("task graph has too many edges ({})", graph.num_edges()));
  order.offsets.resize(n + 1);
  order.targets.resize(max_targets);
  std::vector<NameEntry> names(n);
  std::vector<P2pEnd> ends;
  ends.reserve(n / 2);  // pages it never writes cost nothing; a graph of P2P pairs fills about half
  constexpr int kDenseStreams = 4;
  const std::size_t ranks = static_cast<std::size_t>(graph.num_ranks());
  const bool dense = ranks * 3 * kDenseStreams <= std::max<std::size_t>(n, std::size_t{1} << 16);
  std::vector<std::uint32_t> slot_dense(dense ? ranks * 3 * kDenseStreams : 0, kNoTask);
  std::unordered_map<std::uint64_t, std::uint32_t> slot_sparse;
  GroupCache group_cache;
  CollectiveGrouper grouper;
  std::exception_ptr failure;  // a task that failed its own checks
  std::uint32_t pos = 0;
  TaskId* targets = order.targets.data();
  TaskId id = 0;
  for (; id < n; ++id) {
    const Task& t = graph.task(id);
    names[id] = name_entry(t.name, id);
    try {
      check_task(graph, id, group_cache);
    } catch (const GraphError&) {
      failure = std::current_exception();
      break;
    }
    order.offsets[id] = pos;
    for (auto [it, end] = boost::adjacent_vertices(id, g); it != end; ++it) targets[pos++] = static_cast<TaskId>(*it);
    const std::size_t kind = t.kind.index();
    if (kind != 2) {  // every task but a Recv holds its stream
      std::uint32_t* slot;
      const auto stream_kind = static_cast<std::size_t>(t.stream.kind);
      if (dense && t.stream.index < kDenseStreams) {
        slot = &slot_dense[(static_cast<std::size_t>(t.rank) * 3 + stream_kind) * kDenseStreams +
                           static_cast<std::size_t>(t.stream.index)];
      } else {
        const std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(t.rank)) << 34) |
                                  (static_cast<std::uint64_t>(stream_kind) << 32) |
                                  static_cast<std::uint32_t>(t.stream.index);
        slot = &slot_sparse.try_emplace(key, kNoTask).first->second;
      }
      if (*slot != kNoTask) targets[*slot] = id;
      *slot = pos;
      targets[pos++] = kNoTask;
    }
    if (kind == 1) {
      const auto& snd = std::get<SendTask>(t.kind);
      ends.push_back({P2pEnd::hash_of(t.rank, snd.peer, snd.tag), t.rank, snd.peer, snd.tag, snd.bytes, id, false});
    } else if (kind == 2) {
      const auto& rcv = std::get<RecvTask>(t.kind);
      ends.push_back({P2pEnd::hash_of(rcv.peer, t.rank, rcv.tag), rcv.peer, t.rank, rcv.tag, rcv.bytes, id, true});
    } else if (kind == 3) {
      grouper.add(graph, id, std::get<CollectiveTask>(t.kind), group_cache, a.collective_of);
    }
    if (visitor) visitor->visit(id, t);
  }
  order.offsets[n] = pos;
  if (failure) {
    // Duplicate names are reported before any other error: finish the names, check them first.
    for (TaskId rest = id + 1; rest < n; ++rest) names[rest] = name_entry(graph.task(rest).name, rest);
    check_unique_names(graph, names);
    std::rethrow_exception(failure);
  }
  check_unique_names(graph, names);
  std::vector<NameEntry>().swap(names);
  match_p2p(graph, ends, a.partner);
  std::vector<P2pEnd>().swap(ends);
  check_collectives(graph, grouper.members(), a);

  // Squeeze out the empty stream slots (in place: the write position never passes the read one) and
  // count in-degrees. Meanwhile check that every edge goes from a rendezvous group to one whose
  // lowest task id is higher: that order is then a topological order of the contracted graph, which
  // is therefore acyclic, and Kahn's algorithm is not needed.
  std::vector<TaskId> collective_lead(a.collectives.size());
  for (std::size_t c = 0; c < a.collectives.size(); ++c)
    collective_lead[c] = *std::min_element(a.collectives[c].begin(), a.collectives[c].end());
  auto leader = [&](TaskId v) {
    if (a.partner[v] != kNoTask) return std::min(v, a.partner[v]);
    if (a.collective_of[v] != kNoTask) return collective_lead[a.collective_of[v]];
    return v;
  };
  order.in_degree.assign(n, 0);
  bool forward = true;
  std::uint32_t write = 0;
  for (TaskId i = 0; i < n; ++i) {
    const std::uint32_t begin = order.offsets[i], end = order.offsets[i + 1];
    order.offsets[i] = write;
    const TaskId from = leader(i);
    for (std::uint32_t e = begin; e < end; ++e) {
      const TaskId to = targets[e];
      if (to == kNoTask) continue;
      targets[write++] = to;
      ++order.in_degree[to];
      forward &= from < leader(to);
    }
  }
  order.offsets[n] = write;
  order.targets.resize(write);
  if (!forward) check_acyclic(graph, a);  // Kahn's algorithm; names a cycle if there is one
  return a;
}

void validate(const TaskGraph& graph) { (void)analyze(graph); }

}  // namespace fusesim::sched
