#include "fusesim/analysis/metrics.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <type_traits>
#include <variant>

#include <fmt/format.h>

#include "fusesim/analysis/table.hpp"

namespace fusesim::analysis {
namespace {

const sim::TaskTiming& timing_of(const sim::SimResult& result, sched::TaskId id, const sched::Task& task) {
  const sim::TaskTiming& t = result.tasks.at(id);
  if (t.start_ps < 0 || t.end_ps < t.start_ps)
    throw std::logic_error(fmt::format("analysis: task {} ('{}') has no complete timing (start {}, end {})", id,
                                       task.name, t.start_ps, t.end_ps));
  return t;
}

void check_rank(const sched::TaskGraph& graph, int rank, const char* what) {
  if (rank < 0 || rank >= graph.num_ranks())
    throw std::logic_error(fmt::format("analysis: {} rank {} is outside the graph's {} ranks", what, rank,
                                       graph.num_ranks()));
}

double safe_ratio(double num, double den) { return den > 0.0 ? num / den : 0.0; }

// The rank a task or transfer end counts for: a proxy of a mirrored schedule counts for the rank it
// stands in for (TaskGraph::load_alias), which is the rank the mirrored transfer really ends on.
std::size_t owner(const sched::TaskGraph& graph, int rank) {
  const auto& alias = graph.load_alias();
  return static_cast<std::size_t>(alias.empty() ? rank : alias[static_cast<std::size_t>(rank)]);
}

}  // namespace

std::vector<RankIntervals> rank_intervals(const sched::TaskGraph& graph, const sim::SimResult& result) {
  if (result.tasks.size() != graph.size())
    throw std::logic_error(fmt::format("analysis: the result has {} task timings for a graph of {} tasks",
                                       result.tasks.size(), graph.size()));
  const auto ranks = static_cast<std::size_t>(graph.num_ranks());
  std::vector<std::vector<Interval>> compute(ranks), comm(ranks);

  // A P2P transfer occupies both ends for its whole flight, so it is counted on the sender and the
  // receiver from the transfer record; Send/Recv tasks that no record covers fall back on their own
  // timing (a transfer record is the more exact of the two when both exist).
  std::vector<bool> covered(graph.size(), false);
  for (const sim::TransferRecord& tr : result.transfers) {
    if (tr.task >= graph.size() || tr.peer_task >= graph.size())
      throw std::logic_error(fmt::format("analysis: a transfer names task {} / {} outside the graph", tr.task,
                                         tr.peer_task));
    if (!std::holds_alternative<sched::SendTask>(graph.task(tr.task).kind)) continue;  // a collective step
    check_rank(graph, tr.src_rank, "transfer source");
    check_rank(graph, tr.dst_rank, "transfer destination");
    comm[owner(graph, tr.src_rank)].push_back({tr.start_ps, tr.end_ps});
    comm[owner(graph, tr.dst_rank)].push_back({tr.start_ps, tr.end_ps});
    covered[tr.task] = true;
    covered[tr.peer_task] = true;
  }

  for (sched::TaskId id = 0; id < graph.size(); ++id) {
    const sched::Task& task = graph.task(id);
    check_rank(graph, task.rank, "task");
    const sim::TaskTiming& t = timing_of(result, id, task);
    const Interval span{t.start_ps, t.end_ps};
    const std::size_t r = owner(graph, task.rank);
    std::visit(
        [&](const auto& kind) {
          using K = std::decay_t<decltype(kind)>;
          if constexpr (std::is_same_v<K, sched::ComputeTask>) {
            compute[r].push_back(span);
          } else if constexpr (std::is_same_v<K, sched::CollectiveTask>) {
            comm[r].push_back(span);
          } else {
            if (!covered[id]) comm[r].push_back(span);
          }
        },
        task.kind);
  }

  std::vector<RankIntervals> out(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    out[r].compute = IntervalSet(std::move(compute[r]));
    out[r].comm = IntervalSet(std::move(comm[r]));
  }
  return out;
}

const RankMetrics& StepMetrics::critical() const {
  for (const RankMetrics& rm : ranks)
    if (rm.rank == critical_rank) return rm;
  throw std::logic_error(fmt::format("analysis: the critical rank {} is not among the ranks counted", critical_rank));
}

StepMetrics analyze(const AnalysisInput& in) {
  const sched::TaskGraph& graph = in.graph;
  const sim::SimResult& result = in.result;
  StepMetrics m;
  m.schedule = in.schedule;
  m.parallelism = in.parallelism;
  m.scope = in.scope;
  m.tokens = in.tokens;
  m.gpus = in.gpus > 0 ? in.gpus : graph.num_ranks();
  if (m.gpus > in.cluster.num_ranks())
    throw std::logic_error(fmt::format("analysis: {} GPUs counted on a cluster of {} ranks", m.gpus,
                                       in.cluster.num_ranks()));

  const std::vector<RankIntervals> sets = rank_intervals(graph, result);
  // A mirrored schedule: the simulated ranks' metrics, and their FLOPs as many times as the job runs them.
  const std::vector<int> counted =
      sched::counted_ranks(graph.num_ranks(), in.simulated_ranks, in.pipeline_stages, in.tp_images);
  const std::size_t ranks = counted.size();
  std::vector<int> slot(static_cast<std::size_t>(graph.num_ranks()), -1);  // rank -> index in `counted`
  for (std::size_t i = 0; i < ranks; ++i) slot[static_cast<std::size_t>(counted[i])] = static_cast<int>(i);
  const double replicas = static_cast<double>(std::max(1, in.replicas)) * static_cast<double>(std::max(1, in.tp_images));

  TimePs max_end = 0;
  for (const sim::TaskTiming& t : result.tasks) max_end = std::max(max_end, t.end_ps);
  if (max_end != result.makespan_ps)
    throw std::logic_error(fmt::format("analysis: makespan {} ps differs from the last task end {} ps",
                                       result.makespan_ps, max_end));
  const TimePs T = result.makespan_ps;
  m.step_time_ps = T;

  // Per (rank, region): span of all its tasks and span of its compute tasks.
  struct Span {
    TimePs start = kTimeNever, end = -1;
    TimePs compute_start = kTimeNever, compute_end = -1;
    int compute_tasks = 0;
  };
  std::vector<std::map<int, Span>> region_spans(ranks);
  // A rank's tasks come region after region: the span looked up last serves most of them (map
  // entries stay where they are).
  std::vector<std::pair<int, Span*>> last_span(ranks, {-1, nullptr});
  std::vector<TimePs> last_end(ranks, 0);
  const auto num_regions = static_cast<int>(graph.regions().size());

  for (sched::TaskId id = 0; id < graph.size(); ++id) {
    const sched::Task& task = graph.task(id);
    const sim::TaskTiming& t = result.tasks[id];
    const int counted_as = slot[owner(graph, task.rank)];
    if (counted_as < 0)
      throw std::logic_error(fmt::format("analysis: task '{}' counts for rank {}, which is not simulated", task.name,
                                         owner(graph, task.rank)));
    const auto r = static_cast<std::size_t>(counted_as);
    last_end[r] = std::max(last_end[r], t.end_ps);
    const bool is_compute = std::holds_alternative<sched::ComputeTask>(task.kind);

    if (is_compute) {
      const auto& c = std::get<sched::ComputeTask>(task.kind);
      const Flops f = in.costs.flops(c.kernel, c.dtype, in.cluster.device(task.rank));
      m.hardware_flops += f;
      if (!c.recompute) m.model_flops += f;
    }

    const int region = task.labels.region;
    if (region < 0) continue;
    if (region >= num_regions)
      throw std::logic_error(fmt::format("analysis: task '{}' names region {} of {}", task.name, region, num_regions));
    auto& [last_region, last] = last_span[r];
    if (last_region != region) last_region = region, last = &region_spans[r][region];
    Span& s = *last;
    s.start = std::min(s.start, t.start_ps);
    s.end = std::max(s.end, t.end_ps);
    if (is_compute) {
      s.compute_start = std::min(s.compute_start, t.start_ps);
      s.compute_end = std::max(s.compute_end, t.end_ps);
      ++s.compute_tasks;
    }
  }

  m.ranks.resize(ranks);
  m.critical_rank = 0;
  bool critical_found = false;
  for (std::size_t r = 0; r < ranks; ++r) {
    RankMetrics& rm = m.ranks[r];
    rm.rank = counted[r];
    rm.last_end_ps = last_end[r];
    const RankIntervals& own = sets[static_cast<std::size_t>(rm.rank)];
    const IntervalSet compute = own.compute.clip(0, T);
    const IntervalSet comm = own.comm.clip(0, T);
    rm.compute_ps = compute.measure_ps();
    rm.comm_ps = comm.measure_ps();
    rm.overlap_ps = compute.intersect(comm).measure_ps();
    rm.exposed_comm_ps = comm.subtract(compute).measure_ps();
    rm.idle_ps = T - (rm.compute_ps + rm.exposed_comm_ps);
    rm.overlap_ratio = safe_ratio(static_cast<double>(rm.overlap_ps), static_cast<double>(rm.comm_ps));

    for (const auto& [region, s] : region_spans[r]) {
      RegionMetrics reg;
      reg.region = region;
      reg.name = graph.regions()[static_cast<std::size_t>(region)].name;
      reg.parallelism = sched::to_string(graph.regions()[static_cast<std::size_t>(region)].parallelism);
      reg.rank = rm.rank;
      reg.start_ps = s.start;
      reg.end_ps = s.end;
      reg.compute_tasks = s.compute_tasks;
      // Head and tail count waiting only: the part of the interval during which no compute runs on
      // this rank. A DP bucket's all-reduce beside the backward GEMMs of another region is hidden, not
      // waited for, though its own region has no compute task.
      const auto waiting = [&](TimePs from, TimePs to) {
        return to > from ? (to - from) - compute.measure_within_ps(from, to) : TimePs{0};
      };
      if (s.compute_tasks == 0) {
        reg.head_ps = waiting(s.start, s.end);
        reg.tail_ps = 0;
      } else {
        reg.head_ps = waiting(s.start, s.compute_start);
        reg.tail_ps = waiting(s.compute_end, s.end);
      }
      rm.head_ps += reg.head_ps;
      rm.tail_ps += reg.tail_ps;
      rm.regions.push_back(std::move(reg));
    }
    if (!critical_found && last_end[r] == T) {
      m.critical_rank = rm.rank;
      critical_found = true;
    }
  }

  for (int r = 0; r < m.gpus; ++r) {
    const topo::DeviceModel& dev = in.cluster.device(r);
    auto it = dev.peak_flops_per_s.find(in.dtype);
    if (it == dev.peak_flops_per_s.end())
      throw std::logic_error(fmt::format("analysis: device model '{}' has no peak FLOP/s for {}", dev.name,
                                         topo::to_string(in.dtype)));
    m.peak_flops_per_s += it->second.value;
  }
  if (in.pipeline_stages > 1) {
    const int per_stage = static_cast<int>(ranks) / in.pipeline_stages;  // counted ranks, stage-major
    for (int s = 0; s < in.pipeline_stages; ++s) {
      const RankMetrics& rm = m.ranks.at(static_cast<std::size_t>(s * per_stage));
      m.stages.push_back(StageMetrics{s, rm.rank, rm.idle_ps, 0.0, rm.compute_ps, rm.exposed_comm_ps});
    }
  }
  if (in.pipeline_stages > 1 && in.critical_path) m.critical_path = critical_path(graph, result, in.pipeline_stages);
  m.model_flops *= replicas;
  m.hardware_flops *= replicas;
  derive_rates(m);
  return m;
}

void derive_rates(StepMetrics& m) {
  const TimePs T = m.step_time_ps;
  for (StageMetrics& st : m.stages)
    st.bubble_fraction = safe_ratio(static_cast<double>(st.bubble_ps), static_cast<double>(T));
  const double seconds = ps_to_seconds(T);
  m.mfu = safe_ratio(m.model_flops, seconds * m.peak_flops_per_s);
  m.hfu = safe_ratio(m.hardware_flops, seconds * m.peak_flops_per_s);
  m.tokens_per_s = safe_ratio(static_cast<double>(m.tokens), seconds);
  m.tokens_per_s_per_gpu = m.gpus > 0 ? m.tokens_per_s / m.gpus : 0.0;
}

StepMetrics analyze(const sched::Schedule& schedule, const sim::SimResult& result, const topo::Cluster& cluster,
                    const model::KernelCostModel& costs, topo::Dtype dtype, bool critical_path) {
  AnalysisInput in{schedule.graph, result, cluster, costs, dtype, schedule.tokens, schedule.gpus,
                   model::to_string(schedule.kind), sched::to_string(schedule.parallelism), sched::to_string(schedule.scope),
                   schedule.simulated_ranks, schedule.replicas, schedule.pipeline_stages, critical_path,
                   schedule.tp_images};
  return analyze(in);
}

nlohmann::json to_json(const StepMetrics& m) {
  using nlohmann::json;
  const RankMetrics* crit = m.ranks.empty() ? nullptr : &m.critical();
  auto s = [](TimePs ps) { return ps_to_seconds(ps); };
  json row = json::object();
  row["schedule"] = m.schedule;
  row["parallelism"] = m.parallelism;
  if (!m.scope.empty()) row["scope"] = m.scope;
  row["step_time_s"] = s(m.step_time_ps);
  row["critical_rank"] = m.critical_rank;
  row["compute_s"] = crit ? s(crit->compute_ps) : 0.0;
  row["comm_s"] = crit ? s(crit->comm_ps) : 0.0;
  row["overlapped_comm_s"] = crit ? s(crit->overlap_ps) : 0.0;
  row["exposed_comm_s"] = crit ? s(crit->exposed_comm_ps) : 0.0;
  row["overlap_ratio"] = crit ? crit->overlap_ratio : 0.0;
  row["head_latency_s"] = crit ? s(crit->head_ps) : 0.0;
  row["tail_only_latency_s"] = crit ? s(crit->tail_ps) : 0.0;
  // Design note §4: "tail latency" is head + tail summed over the regions.
  row["head_plus_tail_latency_s"] = crit ? s(crit->head_ps + crit->tail_ps) : 0.0;
  // Deprecated alias of head_plus_tail_latency_s (its old name, which said tail and held both), kept
  // for one release so that scripts and baselines reading it keep working (docs/metrics.md).
  row["tail_latency_s"] = row["head_plus_tail_latency_s"];
  row["mfu"] = m.mfu;
  row["hfu"] = m.hfu;
  row["tokens"] = m.tokens;
  row["tokens_per_s"] = m.tokens_per_s;
  row["tokens_per_s_per_gpu"] = m.tokens_per_s_per_gpu;
  row["gpus"] = m.gpus;
  // "ranks" lists the simulated ranks: fewer than gpus where the DP replicas are mirrored.
  row["simulated_ranks"] = m.ranks.size();
  row["model_flops"] = m.model_flops;
  row["hardware_flops"] = m.hardware_flops;
  row["peak_flops_per_s"] = m.peak_flops_per_s;

  json regions = json::array();
  if (crit) {
    for (const RegionMetrics& reg : crit->regions) {
      regions.push_back({{"region", reg.region},
                         {"name", reg.name},
                         {"parallelism", reg.parallelism},
                         {"rank", reg.rank},
                         {"start_s", s(reg.start_ps)},
                         {"end_s", s(reg.end_ps)},
                         {"head_s", s(reg.head_ps)},
                         {"tail_s", s(reg.tail_ps)},
                         {"compute_tasks", reg.compute_tasks}});
    }
  }
  row["regions"] = std::move(regions);

  json ranks = json::array();
  for (const RankMetrics& rm : m.ranks) {
    ranks.push_back({{"rank", rm.rank},
                     {"last_end_s", s(rm.last_end_ps)},
                     {"compute_s", s(rm.compute_ps)},
                     {"comm_s", s(rm.comm_ps)},
                     {"overlapped_comm_s", s(rm.overlap_ps)},
                     {"exposed_comm_s", s(rm.exposed_comm_ps)},
                     {"idle_s", s(rm.idle_ps)},
                     {"overlap_ratio", rm.overlap_ratio},
                     {"head_latency_s", s(rm.head_ps)},
                     {"tail_only_latency_s", s(rm.tail_ps)},
                     {"head_plus_tail_latency_s", s(rm.head_ps + rm.tail_ps)},
                     {"tail_latency_s", s(rm.head_ps + rm.tail_ps)}});
  }
  row["ranks"] = std::move(ranks);
  if (!m.stages.empty()) {
    json stages = json::array();
    for (const StageMetrics& st : m.stages)
      stages.push_back({{"stage", st.stage},
                        {"rank", st.rank},
                        {"bubble_s", s(st.bubble_ps)},
                        {"bubble_fraction", st.bubble_fraction},
                        {"compute_s", s(st.compute_ps)},
                        {"exposed_comm_s", s(st.exposed_comm_ps)}});
    row["stages"] = std::move(stages);
  }
  if (m.critical_path) {
    const CriticalPath& cp = *m.critical_path;
    json by_stage = json::array();
    for (TimePs ps : cp.stage_compute_ps) by_stage.push_back(s(ps));
    row["critical_path"] = {{"compute_s", s(cp.compute_ps)}, {"comm_s", s(cp.comm_ps)}, {"wait_s", s(cp.wait_ps)},
                            {"tasks", cp.tasks}, {"stage_compute_s", std::move(by_stage)}};
  }
  return row;
}

namespace {
std::string ms(TimePs ps) { return fmt::format("{:.3f}", ps_to_seconds(ps) * 1e3); }
std::string us(TimePs ps) { return fmt::format("{:.1f}", ps_to_seconds(ps) * 1e6); }
std::string pct(double f) { return fmt::format("{:.1f}", f * 100.0); }
}  // namespace

std::string format_table(const std::vector<StepMetrics>& rows) {
  Table t({{"schedule", Align::left},
           {"scope", Align::left},
           {"par", Align::left},
           {"step (ms)", Align::right},
           {"compute (ms)", Align::right},
           {"comm (ms)", Align::right},
           {"exposed comm (ms)", Align::right},
           {"overlap (%)", Align::right},
           {"head (us)", Align::right},
           {"head+tail (us)", Align::right},
           {"MFU (%)", Align::right},
           {"HFU (%)", Align::right},
           {"tokens/s", Align::right},
           {"tokens/s/GPU", Align::right},
           {"crit rank", Align::right}});
  for (const StepMetrics& m : rows) {
    RankMetrics none;
    const RankMetrics& c = m.ranks.empty() ? none : m.critical();
    t.add_row({m.schedule, m.scope.empty() ? "-" : m.scope, m.parallelism, ms(m.step_time_ps), ms(c.compute_ps),
               ms(c.comm_ps), ms(c.exposed_comm_ps), pct(c.overlap_ratio), us(c.head_ps), us(c.head_ps + c.tail_ps),
               pct(m.mfu), pct(m.hfu), fmt::format("{:.0f}", m.tokens_per_s),
               fmt::format("{:.0f}", m.tokens_per_s_per_gpu), fmt::format("{}", m.critical_rank)});
  }
  return t.render();
}

std::string format_region_table(const StepMetrics& m) {
  Table t({{"region", Align::right},
           {"name", Align::left},
           {"par", Align::left},
           {"start (us)", Align::right},
           {"end (us)", Align::right},
           {"head (us)", Align::right},
           {"tail (us)", Align::right},
           {"compute tasks", Align::right}});
  if (!m.ranks.empty()) {
    for (const RegionMetrics& r : m.critical().regions) {
      t.add_row({fmt::format("{}", r.region), r.name, r.parallelism, us(r.start_ps), us(r.end_ps), us(r.head_ps),
                 us(r.tail_ps), fmt::format("{}", r.compute_tasks)});
    }
  }
  return t.render();
}

}  // namespace fusesim::analysis
