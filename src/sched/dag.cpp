#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
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

TaskId TaskGraph::add(Task task) {
  if (boost::num_vertices(graph_) >= static_cast<std::size_t>(std::numeric_limits<TaskId>::max()))
    throw GraphError("task graph is full: more than 2^32 - 1 tasks");
  return static_cast<TaskId>(boost::add_vertex(std::move(task), graph_));
}

void TaskGraph::depend(TaskId before, TaskId after) {
  const std::size_t n = size();
  if (before >= n || after >= n)
    throw GraphError(fmt::format("depend({}, {}): the graph has {} tasks", before, after, n));
  boost::add_edge(before, after, graph_);
}

int TaskGraph::add_region(Region region) {
  regions_.push_back(std::move(region));
  return static_cast<int>(regions_.size()) - 1;
}

std::vector<TaskId> TaskGraph::successors(TaskId id) const {
  std::vector<TaskId> out;
  for (auto [it, end] = boost::adjacent_vertices(id, graph_); it != end; ++it) out.push_back(static_cast<TaskId>(*it));
  return out;
}

std::vector<TaskId> TaskGraph::predecessors(TaskId id) const {
  std::vector<TaskId> out;
  for (auto [it, end] = boost::inv_adjacent_vertices(id, graph_); it != end; ++it)
    out.push_back(static_cast<TaskId>(*it));
  return out;
}

bool holds_stream(const Task& task) { return !std::holds_alternative<RecvTask>(task.kind); }

ExecutionOrder execution_order(const TaskGraph& graph) {
  const std::size_t n = graph.size();
  constexpr TaskId kNone = std::numeric_limits<TaskId>::max();
  // The next task on the same (rank, stream), found in one pass in id (= insertion) order.
  std::vector<TaskId> stream_next(n, kNone);
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

  ExecutionOrder order;
  order.offsets.assign(n + 1, 0);
  order.in_degree.assign(n, 0);
  const auto& g = graph.graph();
  for (TaskId id = 0; id < n; ++id)
    order.offsets[id + 1] =
        order.offsets[id] + static_cast<std::uint32_t>(boost::out_degree(id, g)) + (stream_next[id] != kNone ? 1u : 0u);
  order.targets.resize(order.offsets[n]);
  for (TaskId id = 0; id < n; ++id) {
    std::uint32_t pos = order.offsets[id];
    for (auto [it, end] = boost::adjacent_vertices(id, g); it != end; ++it) order.targets[pos++] = static_cast<TaskId>(*it);
    if (stream_next[id] != kNone) order.targets[pos++] = stream_next[id];
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

void check_kernel(const Task& t, const ComputeTask& c) {
  if (const auto* g = std::get_if<model::GemmKernel>(&c.kernel)) {
    if (g->m < 1 || g->n < 1 || g->k < 1 || g->batch < 1)
      throw GraphError(fmt::format("task {}: gemm needs positive sizes (m={}, n={}, k={}, batch={})", quoted(t), g->m,
                                   g->n, g->k, g->batch));
  } else if (const auto* a = std::get_if<model::AttentionKernel>(&c.kernel)) {
    if (a->batch < 1 || a->heads < 1 || a->kv_heads < 1 || a->seq_q < 1 || a->seq_kv < 1 || a->head_dim < 1 ||
        a->q_offset < 0)
      throw GraphError(fmt::format(
          "task {}: attention needs positive sizes (batch={}, heads={}, kv_heads={}, seq_q={}, seq_kv={}, "
          "head_dim={}) and q_offset >= 0 ({})",
          quoted(t), a->batch, a->heads, a->kv_heads, a->seq_q, a->seq_kv, a->head_dim, a->q_offset));
  } else {
    const auto& e = std::get<model::ElementwiseKernel>(c.kernel);
    if (e.bytes < 0 || !(e.flops >= 0.0) || !std::isfinite(e.flops) || (e.bytes == 0 && e.flops == 0.0))
      throw GraphError(fmt::format("task {}: element-wise kernel '{}' needs bytes >= 0, flops >= 0 and some work "
                                   "(bytes={}, flops={})",
                                   quoted(t), e.op, e.bytes, e.flops));
  }
}

void check_task(const TaskGraph& graph, TaskId id) {
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
    std::vector<int> sorted = k.group;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size(); ++i) {
      check_rank(sorted[i], "group member");
      if (i > 0 && sorted[i] == sorted[i - 1])
        throw GraphError(fmt::format("collective {}: rank {} appears twice in its group", quoted(t), sorted[i]));
    }
    if (!std::binary_search(sorted.begin(), sorted.end(), t.rank))
      throw GraphError(fmt::format("collective {} on rank {}: its group {} does not include it", quoted(t), t.rank,
                                   rank_list(k.group)));
    if (k.bytes <= 0)
      throw GraphError(fmt::format("collective {} has a non-positive size ({} bytes)", quoted(t), k.bytes));
    if (k.sms < -1)
      throw GraphError(fmt::format("collective {}: sms {} (use -1 for the device default)", quoted(t), k.sms));
  }
}

// Names must be unique: they are how errors, traces and tests refer to tasks. An open-addressing
// table of task ids (no node allocation per name) keeps this cheap on million-task graphs.
void check_unique_names(const TaskGraph& graph) {
  const std::size_t n = graph.size();
  std::size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  std::vector<TaskId> slot(cap, kNoTask);
  std::vector<std::size_t> hash(n);
  const std::hash<std::string_view> hasher;
  for (TaskId id = 0; id < n; ++id) {
    const std::string& name = graph.task(id).name;
    hash[id] = hasher(name);
    std::size_t i = hash[id] & (cap - 1);
    while (slot[i] != kNoTask) {
      const TaskId other = slot[i];
      if (hash[other] == hash[id] && graph.task(other).name == name)
        throw GraphError(fmt::format("tasks {} and {} share the name '{}'", other, id, name));
      i = (i + 1) & (cap - 1);
    }
    slot[i] = id;
  }
}

// P2P: a Send on rank s to peer d with tag x pairs with the Recv on rank d from peer s with tag x.
// Sorting (s, d, x, send before recv) puts each pair side by side; anything else in a run of equal
// keys is an error. Errors name the lowest task id of their kind, so the message does not depend on
// the sort.
void match_p2p(const TaskGraph& graph, std::vector<TaskId>& partner) {
  struct End {
    int src, dst;
    std::int64_t tag;
    int is_recv;
    TaskId id;
    auto key() const { return std::tie(src, dst, tag, is_recv, id); }
  };
  std::vector<End> ends;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    if (const auto* s = std::get_if<SendTask>(&t.kind))
      ends.push_back({t.rank, s->peer, s->tag, 0, id});
    else if (const auto* r = std::get_if<RecvTask>(&t.kind))
      ends.push_back({r->peer, t.rank, r->tag, 1, id});
  }
  std::sort(ends.begin(), ends.end(), [](const End& a, const End& b) { return a.key() < b.key(); });
  TaskId duplicate_a = kNoTask, duplicate_b = kNoTask, lone_send = kNoTask, lone_recv = kNoTask, mismatch = kNoTask;
  auto lowest = [](TaskId& slot, TaskId id) { slot = std::min(slot, id); };
  for (std::size_t i = 0; i < ends.size();) {
    std::size_t j = i;
    while (j < ends.size() && ends[j].src == ends[i].src && ends[j].dst == ends[i].dst && ends[j].tag == ends[i].tag) ++j;
    std::size_t sends = 0;
    while (i + sends < j && ends[i + sends].is_recv == 0) ++sends;
    const std::size_t recvs = j - i - sends;
    if (sends > 1 || recvs > 1) {
      const std::size_t at = sends > 1 ? i : i + sends;
      if (duplicate_a == kNoTask || ends[at].id < duplicate_a) {
        duplicate_a = ends[at].id;
        duplicate_b = ends[at + 1].id;
      }
    } else if (sends == 0) {
      lowest(lone_recv, ends[i].id);
    } else if (recvs == 0) {
      lowest(lone_send, ends[i].id);
    } else {
      const TaskId s = ends[i].id, r = ends[i + 1].id;
      if (std::get<SendTask>(graph.task(s).kind).bytes != std::get<RecvTask>(graph.task(r).kind).bytes)
        lowest(mismatch, s);
      partner[s] = r;
      partner[r] = s;
    }
    i = j;
  }
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

// Collectives are grouped by (instance, set of ranks): an instance number need only be unique among
// collectives over the same ranks, so that generators may number per group.
void match_collectives(const TaskGraph& graph, GraphAnalysis& out) {
  std::map<std::pair<std::int64_t, std::vector<int>>, std::uint32_t> index;
  std::vector<std::vector<TaskId>> found;  // in task order
  for (TaskId id = 0; id < graph.size(); ++id) {
    const auto* k = std::get_if<CollectiveTask>(&graph.task(id).kind);
    if (!k) continue;
    std::vector<int> ranks = k->group;
    std::sort(ranks.begin(), ranks.end());
    auto [it, inserted] = index.try_emplace({k->instance, std::move(ranks)}, static_cast<std::uint32_t>(found.size()));
    if (inserted) found.emplace_back();
    found[it->second].push_back(id);
    out.collective_of[id] = it->second;
  }
  for (const auto& members : found) {
    const Task& first = graph.task(members.front());
    const auto& a = std::get<CollectiveTask>(first.kind);
    const std::string what = fmt::format("collective instance {} over ranks {}", a.instance, rank_list(a.group));
    std::vector<int> sorted = a.group;
    std::sort(sorted.begin(), sorted.end());
    std::vector<TaskId> by_position(sorted.size(), kNoTask);
    for (TaskId id : members) {
      const Task& t = graph.task(id);
      const auto& b = std::get<CollectiveTask>(t.kind);
      auto disagree = [&](const char* field, const std::string& x, const std::string& y) {
        throw GraphError(fmt::format("{}: members {} and {} disagree on {} ({} vs {})", what, quoted(first), quoted(t),
                                     field, x, y));
      };
      if (b.kind != a.kind) disagree("the kind", to_string(a.kind), to_string(b.kind));
      if (b.bytes != a.bytes) disagree("the size", std::to_string(a.bytes), std::to_string(b.bytes));
      if (b.group != a.group) disagree("the ring order", rank_list(a.group), rank_list(b.group));
      if (b.engine != a.engine) disagree("the engine", model::to_string(a.engine), model::to_string(b.engine));
      if (b.sms != a.sms) disagree("the SMs", std::to_string(a.sms), std::to_string(b.sms));
      const auto pos = static_cast<std::size_t>(std::lower_bound(sorted.begin(), sorted.end(), t.rank) - sorted.begin());
      if (by_position[pos] != kNoTask)
        throw GraphError(fmt::format("{}: rank {} has two tasks, {} and {}", what, t.rank,
                                     quoted(graph.task(by_position[pos])), quoted(t)));
      by_position[pos] = id;
    }
    for (std::size_t p = 0; p < sorted.size(); ++p) {
      if (by_position[p] != kNoTask) continue;
      std::vector<std::string> present;
      for (TaskId id : members) {
        if (present.size() == 4) {
          present.push_back("...");
          break;
        }
        present.push_back(quoted(graph.task(id)));
      }
      throw GraphError(fmt::format("{} ({}): rank {} has no task (members present: {})", what, to_string(a.kind),
                                   sorted[p], fmt::join(present, ", ")));
    }
    std::vector<TaskId> in_ring_order;
    in_ring_order.reserve(a.group.size());
    for (int r : a.group)
      in_ring_order.push_back(
          by_position[static_cast<std::size_t>(std::lower_bound(sorted.begin(), sorted.end(), r) - sorted.begin())]);
    out.collectives.push_back(std::move(in_ring_order));
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

  std::string text = graph.task(edge_from[cycle.front()]).name;
  bool rendezvous = false;
  for (std::size_t i = 0; i < cycle.size(); ++i) {
    const TaskId to = order.targets[cycle[i]];
    text += " -> " + graph.task(to).name;
    const TaskId next_from = edge_from[cycle[(i + 1) % cycle.size()]];
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

GraphAnalysis analyze(const TaskGraph& graph) {
  if (graph.num_ranks() < 1) throw GraphError(fmt::format("task graph has {} ranks", graph.num_ranks()));
  check_unique_names(graph);
  for (TaskId id = 0; id < graph.size(); ++id) check_task(graph, id);
  GraphAnalysis a;
  a.partner.assign(graph.size(), kNoTask);
  a.collective_of.assign(graph.size(), kNoTask);
  match_p2p(graph, a.partner);
  match_collectives(graph, a);
  a.order = execution_order(graph);
  check_acyclic(graph, a);
  return a;
}

void validate(const TaskGraph& graph) { (void)analyze(graph); }

}  // namespace fusesim::sched
