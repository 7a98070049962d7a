#include "fusesim/analysis/chrome_trace.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <variant>

#include <fmt/format.h>

#include "fusesim/util/output.hpp"

namespace fusesim::analysis {
namespace {

using nlohmann::json;

// Trace times are microseconds, written at whole nanoseconds: a viewer turns them back into integer
// nanoseconds, and only then does a slice that ends where the next one starts (the same picosecond)
// come out ending exactly at that start rather than a rounding error past it (a "misnested" slice).
// The exact picoseconds stay in the metrics; a trace is for looking.
TimePs to_ns(TimePs ps) { return (ps + kPsPerNanosecond / 2) / kPsPerNanosecond; }
double ns_to_us(TimePs ns) { return static_cast<double>(ns) / 1000.0; }
double to_us(TimePs ps) { return ns_to_us(to_ns(ps)); }
double duration_us(TimePs start_ps, TimePs end_ps) { return ns_to_us(to_ns(end_ps) - to_ns(start_ps)); }

constexpr int kComputeTidBase = 1;
constexpr int kCommTidBase = 100;
constexpr int kCopyTidBase = 200;
constexpr int kRecvTidBase = 1000;

json kernel_args(const model::Kernel& kernel) {
  return std::visit(
      [](const auto& k) -> json {
        using K = std::decay_t<decltype(k)>;
        if constexpr (std::is_same_v<K, model::GemmKernel>) {
          return {{"kernel", "gemm"}, {"m", k.m}, {"n", k.n}, {"k", k.k}, {"batch", k.batch}};
        } else if constexpr (std::is_same_v<K, model::AttentionKernel>) {
          json args{{"kernel", "attention"}, {"heads", k.heads},   {"kv_heads", k.kv_heads},
                    {"seq_q", k.seq_q},      {"seq_kv", k.seq_kv}, {"head_dim", k.head_dim},
                    {"causal", k.causal},    {"q_offset", k.q_offset},
                    {"pass", k.pass == model::Pass::forward ? "forward" : "backward"}};
          if (k.time_factor != 1.0) args["time_factor"] = k.time_factor;
          return args;
        } else {
          return {{"kernel", "elementwise"}, {"elementwise_op", k.op}};
        }
      },
      kernel);
}

}  // namespace

int trace_thread_id(const sched::StreamRef& stream) {
  switch (stream.kind) {
    case sched::StreamKind::compute: return kComputeTidBase + stream.index;
    case sched::StreamKind::comm: return kCommTidBase + stream.index;
    case sched::StreamKind::copy: return kCopyTidBase + stream.index;
  }
  return 0;
}

int trace_recv_thread_id(int lane) { return kRecvTidBase + lane; }

std::string trace_thread_name(const sched::StreamRef& stream) {
  const std::string suffix = stream.index == 0 ? "" : fmt::format(" {}", stream.index);
  switch (stream.kind) {
    case sched::StreamKind::compute: return "compute" + suffix;
    case sched::StreamKind::comm: return "comm" + suffix + " (SM kernel)";
    case sched::StreamKind::copy: return fmt::format("copy engine {}", stream.index);
  }
  return "?";
}

ChromeTraceRecorder::ChromeTraceRecorder(const topo::Cluster& cluster, const model::KernelCostModel* costs,
                                         std::vector<sched::Region> regions, TraceFilter filter)
    : cluster_(cluster), costs_(costs), regions_(std::move(regions)), filter_(std::move(filter)) {}

void ChromeTraceRecorder::on_task_start(const sched::Task& task, sched::TaskId id, TimePs now) {
  if (!filter_.keeps(task)) return;
  Entry e;
  e.name = task.name;
  e.rank = task.rank;
  e.stream = task.stream;
  e.start_ps = now;
  json args = json::object();
  args["task"] = id;
  std::visit(
      [&](const auto& kind) {
        using K = std::decay_t<decltype(kind)>;
        if constexpr (std::is_same_v<K, sched::ComputeTask>) {
          e.category = "compute";
          args.update(kernel_args(kind.kernel));
          args["dtype"] = topo::to_string(kind.dtype);
          if (kind.recompute) args["recompute"] = true;
          if (costs_ && task.rank >= 0 && task.rank < cluster_.num_ranks()) {
            const model::KernelCost c = costs_->cost(kind.kernel, kind.dtype, cluster_.device(task.rank));
            args["flops"] = c.flops;
            args["bytes"] = c.hbm_bytes;
          }
        } else if constexpr (std::is_same_v<K, sched::SendTask>) {
          e.category = "send";
          args["bytes"] = kind.bytes;
          args["peer"] = kind.peer;
          args["tag"] = kind.tag;
          args["engine"] = model::to_string(kind.engine);
        } else if constexpr (std::is_same_v<K, sched::RecvTask>) {
          e.category = "recv";
          e.is_recv = true;
          args["bytes"] = kind.bytes;
          args["peer"] = kind.peer;
          args["tag"] = kind.tag;
        } else {
          e.category = "collective";
          args["collective"] = sched::to_string(kind.kind);
          args["bytes"] = kind.bytes;
          args["group"] = kind.group;
          args["instance"] = kind.instance;
          args["engine"] = model::to_string(kind.engine);
        }
      },
      task.kind);
  const sched::TaskLabels& l = task.labels;
  if (l.layer >= 0) args["layer"] = l.layer;
  if (l.chunk >= 0) args["chunk"] = l.chunk;
  if (l.step >= 0) args["step"] = l.step;
  if (l.slice >= 0) args["slice"] = l.slice;
  if (l.micro_batch >= 0) args["micro_batch"] = l.micro_batch;
  if (l.phase != sched::Phase::none) args["phase"] = sched::to_string(l.phase);
  if (!l.op.empty()) args["op"] = l.op;
  if (l.region >= 0) {
    if (static_cast<std::size_t>(l.region) < regions_.size())
      args["region"] = regions_[static_cast<std::size_t>(l.region)].name;
    else
      args["region"] = l.region;
  }
  e.args = std::move(args);
  tasks_[id] = std::move(e);
}

void ChromeTraceRecorder::on_task_end(const sched::Task& /*task*/, sched::TaskId id, TimePs now) {
  auto it = tasks_.find(id);
  if (it != tasks_.end()) it->second.end_ps = now;
}

void ChromeTraceRecorder::on_transfer_end(const sim::TransferRecord& transfer) { transfers_.push_back(transfer); }

json ChromeTraceRecorder::to_json() const {
  // Receive lanes: per rank, greedy first-fit in start order, so slices on a lane never overlap.
  std::map<sched::TaskId, int> lane_of;
  {
    std::map<int, std::vector<std::pair<TimePs, sched::TaskId>>> recvs;
    for (const auto& [id, e] : tasks_)
      if (e.is_recv && e.end_ps >= 0) recvs[e.rank].push_back({e.start_ps, id});
    for (auto& [rank, list] : recvs) {
      std::sort(list.begin(), list.end());
      std::vector<TimePs> lane_end;
      for (const auto& [start, id] : list) {
        std::size_t lane = 0;
        while (lane < lane_end.size() && lane_end[lane] > start) ++lane;
        if (lane == lane_end.size()) lane_end.push_back(0);
        lane_end[lane] = tasks_.at(id).end_ps;
        lane_of[id] = static_cast<int>(lane);
      }
    }
  }
  auto tid_of = [&](sched::TaskId id, const Entry& e) {
    return e.is_recv ? trace_recv_thread_id(lane_of.at(id)) : trace_thread_id(e.stream);
  };

  std::map<int, std::map<int, std::string>> threads;  // rank -> tid -> name
  for (const auto& [id, e] : tasks_) {
    if (e.end_ps < 0) continue;
    const int tid = tid_of(id, e);
    std::string name;
    if (e.is_recv) {
      const int lane = lane_of.at(id);
      name = lane == 0 ? "recv (P2P arrivals)" : fmt::format("recv {} (P2P arrivals)", lane);
    } else {
      name = trace_thread_name(e.stream);
    }
    threads[e.rank][tid] = name;
  }

  json events = json::array();
  for (const auto& [rank, tids] : threads) {
    std::string label = fmt::format("rank {}", rank);
    if (rank >= 0 && rank < cluster_.num_ranks())
      label = fmt::format("rank {} (node {}, {})", rank, cluster_.node_of(rank),
                          cluster_.rank_model.at(static_cast<std::size_t>(rank)));
    if (ranks_per_stage_ > 0 && rank >= 0) label = fmt::format("stage {}, {}", rank / ranks_per_stage_, label);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", label}}}});
    events.push_back(
        {{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"tid", 0}, {"args", {{"sort_index", rank}}}});
    for (const auto& [tid, name] : tids) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", tid}, {"args", {{"name", name}}}});
      events.push_back(
          {{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", rank}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
    }
  }

  // Complete events, in (rank, thread, start, id) order for stable output.
  std::vector<std::tuple<int, int, TimePs, sched::TaskId>> order;
  for (const auto& [id, e] : tasks_)
    if (e.end_ps >= 0) order.emplace_back(e.rank, tid_of(id, e), e.start_ps, id);
  std::sort(order.begin(), order.end());
  for (const auto& [rank, tid, start, id] : order) {
    const Entry& e = tasks_.at(id);
    events.push_back({{"ph", "X"},
                      {"name", e.name},
                      {"cat", e.category},
                      {"pid", rank},
                      {"tid", tid},
                      {"ts", to_us(e.start_ps)},
                      {"dur", duration_us(e.start_ps, e.end_ps)},
                      {"args", e.args}});
  }

  // Flow arrows, one per transfer. Both ends sit at the middle of the transfer: strictly inside the
  // sending and the receiving slice, so that viewers bind them to those slices and not to a
  // neighbour that starts or ends at the same instant.
  std::uint64_t flow_id = 0;
  for (const sim::TransferRecord& tr : transfers_) {
    auto from = tasks_.find(tr.task);
    auto to = tasks_.find(tr.peer_task);
    if (from == tasks_.end() || to == tasks_.end() || from->second.end_ps < 0 || to->second.end_ps < 0) continue;
    ++flow_id;
    const double ts = to_us(tr.start_ps + (tr.end_ps - tr.start_ps) / 2);
    const std::string name = tr.step < 0 ? "p2p" : fmt::format("ring step {}", tr.step);
    json args = {{"bytes", tr.bytes}, {"engine", model::to_string(tr.engine)},
                 {"start_us", to_us(tr.start_ps)}, {"end_us", to_us(tr.end_ps)}};
    events.push_back({{"ph", "s"}, {"name", name}, {"cat", "transfer"}, {"id", flow_id},
                      {"pid", tr.src_rank}, {"tid", tid_of(from->first, from->second)}, {"ts", ts}, {"args", args}});
    events.push_back({{"ph", "f"}, {"bp", "e"}, {"name", name}, {"cat", "transfer"}, {"id", flow_id},
                      {"pid", tr.dst_rank}, {"tid", tid_of(to->first, to->second)}, {"ts", ts}});
  }

  if (filter_.counters) add_link_counters(events);

  json doc = json::object();
  doc["traceEvents"] = std::move(events);
  doc["displayTimeUnit"] = "ns";
  doc["otherData"] = {{"generator", "fusesim"}, {"cluster", cluster_.name}};
  // A filtered trace says so: a missing rank or layer is then not mistaken for an idle one.
  if (filter_.ranks) doc["otherData"]["ranks"] = *filter_.ranks;
  if (filter_.layers) doc["otherData"]["layers"] = *filter_.layers;
  return doc;
}

void ChromeTraceRecorder::add_link_counters(json& events) const {
  // A cluster without links (a test fixture, hand-made) has no routes to count on.
  if (cluster_.links.empty()) return;
  const std::size_t n_links = cluster_.links.size();
  // Per link: (time ns, +/- payload bytes per second) at the start and end of each transfer on it.
  std::vector<std::vector<std::pair<TimePs, double>>> deltas(n_links);
  std::vector<char> shown(n_links, 0);
  std::map<std::pair<int, int>, topo::Route> routes;
  for (const sim::TransferRecord& tr : transfers_) {
    if (tr.src_rank == tr.dst_rank || tr.end_ps <= tr.start_ps || tr.bytes <= 0) continue;
    auto it = routes.find({tr.src_rank, tr.dst_rank});
    if (it == routes.end()) it = routes.emplace(std::pair{tr.src_rank, tr.dst_rank}, cluster_.route(tr.src_rank, tr.dst_rank)).first;
    const double rate = static_cast<double>(tr.bytes) / ps_to_seconds(tr.end_ps - tr.start_ps);
    const bool traced = filter_.keeps_rank(tr.src_rank) || filter_.keeps_rank(tr.dst_rank);
    for (topo::LinkId l : it->second.links) {
      const auto i = static_cast<std::size_t>(l);
      deltas[i].push_back({to_ns(tr.start_ps), rate});
      deltas[i].push_back({to_ns(tr.end_ps), -rate});
      shown[i] = shown[i] || traced;
    }
  }
  // With --trace-layers, the counters cover the span of the layers kept (the first start to the last
  // end of their tasks): outside it there are no slices to read them beside, and a stack's counters
  // would otherwise outweigh the layers' tasks.
  TimePs lo = 0, hi = -1;
  if (filter_.layers) {
    bool any = false;
    for (const auto& [id, e] : tasks_) {
      const auto layer = e.args.find("layer");
      if (e.end_ps < 0 || layer == e.args.end()) continue;
      lo = any ? std::min(lo, to_ns(e.start_ps)) : to_ns(e.start_ps);
      hi = any ? std::max(hi, to_ns(e.end_ps)) : to_ns(e.end_ps);
      any = true;
    }
    if (!any) return;
  }
  const bool windowed = filter_.layers.has_value();
  auto node_of_link = [&](const topo::Link& link) {
    const int a = cluster_.vertices.at(static_cast<std::size_t>(link.from)).node;
    return a >= 0 ? a : cluster_.vertices.at(static_cast<std::size_t>(link.to)).node;
  };
  // Counter processes follow the ranks' pids, so that they sort below every rank.
  const int fabric_pid = cluster_.num_ranks() + cluster_.num_nodes;
  std::set<int> pids;
  json counters = json::array();
  for (std::size_t i = 0; i < n_links; ++i) {
    if (!shown[i]) continue;
    const topo::Link& link = cluster_.links[i];
    const int node = node_of_link(link);
    const int pid = node >= 0 ? cluster_.num_ranks() + node : fabric_pid;
    pids.insert(pid);
    const bool nic = cluster_.vertices.at(static_cast<std::size_t>(link.from)).kind == topo::VertexKind::nic ||
                     cluster_.vertices.at(static_cast<std::size_t>(link.to)).kind == topo::VertexKind::nic;
    const std::string name = fmt::format("{} {}", nic ? "NIC" : topo::to_string(link.kind), link.name);
    std::vector<std::pair<TimePs, double>>& d = deltas[i];
    // Stable: equal times keep the order of the transfers, so the sums (and the bytes) are the same
    // on every run.
    std::stable_sort(d.begin(), d.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    double load = 0.0, last = -1.0;
    // Percent at 0.01 resolution: sums of + and - rates leave rounding dust where the load is 0.
    auto percent = [&] {
      const double pct = std::round(load / link.line_rate_bytes_per_s * 1e4) / 100.0;
      return pct == 0.0 ? 0.0 : pct;  // no "-0"
    };
    auto emit = [&](TimePs t) {
      const double pct = percent();
      if (pct == last) return;
      last = pct;
      counters.push_back(
          {{"ph", "C"}, {"name", name}, {"pid", pid}, {"tid", 0}, {"ts", ns_to_us(t)}, {"args", {{"% of line rate", pct}}}});
    };
    bool entered = !windowed;
    for (std::size_t j = 0; j < d.size();) {
      const TimePs t = d[j].first;
      if (windowed && t > hi) break;
      if (!entered && t >= lo) {
        entered = true;
        emit(lo);  // the load the window opens with
      }
      for (; j < d.size() && d[j].first == t; ++j) load += d[j].second;
      if (entered) emit(t);
    }
    if (!entered) emit(lo);
  }
  for (int pid : pids) {
    const std::string label =
        pid == fabric_pid ? "fabric links (load, % of line rate)"
                          : fmt::format("node {} links (load, % of line rate)", pid - cluster_.num_ranks());
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", label}}}});
    events.push_back(
        {{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
  }
  for (json& c : counters) events.push_back(std::move(c));
}

void ChromeTraceRecorder::write(const std::string& path) const { write_maybe_gzipped(path, to_json().dump(), "--trace"); }

}  // namespace fusesim::analysis
