// Throughput of the simulator core: the raw event queue, and whole runs of large generated DAGs.
// Figures and the exact commands are in BENCHMARKS.md.
//
//   build-sim/bench_engine --benchmark_counters_tabular=true
//
// Everything here but BM_GenerateStep is self-contained (a hand-built star cluster and a
// flop-counting cost model) so that the figures measure the engine, not the topology loader or the
// roofline model; BM_GenerateStep times the schedule generators on a shipped workload.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <malloc.h>
#include <fmt/format.h>

#include "fusesim/model/kernel.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/sim/event_queue.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/allocator.hpp"

namespace {

using namespace fusesim;

// ---------------------------------------------------------------------------------------------
// Raw queue: the "hold" model. `pending` events sit in the heap; each iteration pops the earliest
// and schedules one new event a random (exponential-ish) time later, as a steady-state simulation
// does. One item = one pop + one push.
void BM_EventQueueHold(benchmark::State& state) {
  const auto pending = static_cast<std::size_t>(state.range(0));
  std::mt19937_64 rng(42);
  std::vector<TimePs> deltas(1 << 16);
  std::exponential_distribution<double> exp(1.0 / 1'000'000.0);
  for (auto& d : deltas) d = static_cast<TimePs>(exp(rng));
  sim::EventQueue q;
  q.reserve(pending + 1);
  for (std::size_t i = 0; i < pending; ++i) q.push(deltas[i & 0xffff], 0, static_cast<std::uint32_t>(i));
  std::size_t i = 0;
  for (auto _ : state) {
    const sim::Event e = q.pop();
    q.push(e.time + deltas[i++ & 0xffff], 0, e.target);
    benchmark::DoNotOptimize(e);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EventQueueHold)->Arg(64)->Arg(1024)->Arg(65536)->Arg(1 << 20);

// ---------------------------------------------------------------------------------------------
// Whole engine.

// Duration = flops / 1e15 FLOP/s; speed under load falls with the SMs communication holds and its
// HBM traffic. Deliberately cheap (no map lookups), so that the figures measure the engine.
class FlopCostModel final : public model::KernelCostModel {
 public:
  model::KernelCost cost(const model::Kernel& kernel, topo::Dtype, const topo::DeviceModel&) const override {
    model::KernelCost c;
    const auto& e = std::get<model::ElementwiseKernel>(kernel);
    c.flops = e.flops;
    c.compute_s = c.flops / 1e15;
    c.duration_ps = seconds_to_ps(c.compute_s);
    return c;
  }
  double rate(const model::KernelCost&, const topo::DeviceModel& d, const model::DeviceLoad& load) const override {
    return (1.0 - static_cast<double>(load.sms_held_by_comm) / d.sm_count) *
           (1.0 - 0.5 * std::min(1.0, load.comm_hbm_bytes_per_s / d.hbm_bandwidth_bytes_per_s.value));
  }
};

topo::Cluster star_cluster(int ranks) {
  topo::Cluster c;
  c.name = "bench-star";
  topo::DeviceModel d;
  d.name = "gpu";
  d.peak_flops_per_s[topo::Dtype::bf16] = {1e15, "bench"};
  d.hbm_bandwidth_bytes_per_s = {3e12, "bench"};
  d.sm_count = 132;
  // The pipeline's ring hops run on copy engines; since the engine counts them (a transfer waits for
  // a free one), a device without any refuses the graph.
  d.copy_engines = 2;
  d.contention = {{16, "bench"}, {1.0, "bench"}};
  c.device_models["gpu"] = d;
  c.comm.collective_base_latency_s = {5e-6, "bench"};
  c.comm.sm_step_latency_s = {1e-6, "bench"};
  c.comm.copy_engine_step_latency_s = {2e-6, "bench"};
  c.comm.sm_kernel_efficiency = {0.9, "bench"};
  c.comm.copy_engine_efficiency = {0.95, "bench"};
  topo::Vertex sw;
  sw.name = "switch";
  sw.kind = topo::VertexKind::switch_;
  sw.node = 0;
  c.vertices.push_back(sw);
  for (int r = 0; r < ranks; ++r) {
    topo::Vertex v;
    v.name = "gpu" + std::to_string(r);
    v.node = 0;
    v.rank = r;
    c.vertices.push_back(v);
    const auto id = static_cast<topo::VertexId>(c.vertices.size() - 1);
    c.rank_vertex.push_back(id);
    c.rank_model.push_back("gpu");
    for (auto [from, to] : {std::pair{id, 0}, std::pair{0, id}}) {
      topo::Link l;
      l.name = c.vertices[from].name + "->" + c.vertices[to].name;
      l.from = from;
      l.to = to;
      l.line_rate_bytes_per_s = 4.5e11;
      l.bandwidth_bytes_per_s = 4.5e11;
      l.latency_ps = 500'000;
      c.links.push_back(l);
    }
  }
  c.num_nodes = 1;
  c.devices_per_node = ranks;
  c.finalize();
  return c;
}

sched::Task compute_task(sched::TaskName name, int rank, double flops, int stream = 0) {
  sched::Task t;
  t.name = name;
  t.rank = rank;
  t.stream = {sched::StreamKind::compute, stream};
  model::ElementwiseKernel k;
  k.op = "bench";
  k.flops = flops;
  t.kind = sched::ComputeTask{k, topo::Dtype::bf16, false};
  return t;
}

// A CommFuse-like pipeline: per layer and rank, `chunks` GEMM chunks each overlapped with a ring P2P
// hop on the copy engine (send chunk to r+1, recv from r-1; the next chunk waits for the recv), a
// second compute stream with an element-wise kernel, and every `collective_every` layers an SM-kernel
// ring all-reduce over all ranks that contends with the compute.
sched::TaskGraph pipeline_graph(int ranks, int layers, int chunks, int collective_every) {
  sched::TaskGraph g(ranks);
  std::vector<sched::TaskId> last(ranks);
  bool first = true;
  std::int64_t tag = 0;
  std::int64_t instance = 0;
  for (int l = 0; l < layers; ++l) {
    for (int c = 0; c < chunks; ++c) {
      std::vector<sched::TaskId> k(ranks), recv_on(ranks);
      const std::string p = "L" + std::to_string(l) + "/c" + std::to_string(c) + "/r";
      for (int r = 0; r < ranks; ++r) {
        const std::string gemm = p + std::to_string(r) + "/gemm";
        k[r] = g.add(compute_task(gemm, r, 4e9 + 1e7 * ((r * 7 + c) % 5)));
        if (!first) g.depend(last[r], k[r]);
      }
      for (int r = 0; r < ranks; ++r) {
        const int to = (r + 1) % ranks;
        const std::string send_name = p + std::to_string(r) + "/send", recv_name = p + std::to_string(to) + "/recv";
        sched::Task s;
        s.name = send_name;
        s.rank = r;
        s.stream = {sched::StreamKind::copy, 0};
        s.kind = sched::SendTask{to, 8 << 20, tag, model::CommEngine::copy_engine, -1};
        const auto sid = g.add(s);
        sched::Task v;
        v.name = recv_name;
        v.rank = to;
        v.kind = sched::RecvTask{r, 8 << 20, tag};
        recv_on[to] = g.add(v);
        ++tag;
        if (!first) g.depend(last[r], sid);
      }
      for (int r = 0; r < ranks; ++r) {
        const std::string add = p + std::to_string(r) + "/add";
        const auto e = g.add(compute_task(add, r, 2e8, 1));
        g.depend(k[r], e);
        g.depend(recv_on[r], e);
        last[r] = e;
      }
      first = false;
    }
    if (collective_every > 0 && l % collective_every == collective_every - 1) {
      std::vector<int> group(ranks);
      for (int r = 0; r < ranks; ++r) group[r] = r;
      for (int r = 0; r < ranks; ++r) {
        const std::string name = "L" + std::to_string(l) + "/ar/r" + std::to_string(r);
        sched::Task t;
        t.name = name;
        t.rank = r;
        t.stream = {sched::StreamKind::comm, 0};
        t.kind = sched::CollectiveTask{sched::CollectiveKind::all_reduce, group, 64 << 20, instance,
                                       model::CommEngine::sm_kernel, -1};
        const auto id = g.add(t);
        g.depend(last[r], id);
      }
      ++instance;
    }
  }
  return g;
}

// Pure compute: `ranks` independent chains of kernels on two streams, with cross-rank edges every
// few tasks so that the ready lists are not trivially sequential.
sched::TaskGraph compute_graph(int ranks, int tasks_per_rank) {
  sched::TaskGraph g(ranks);
  std::vector<sched::TaskId> prev(ranks);
  for (int i = 0; i < tasks_per_rank; ++i) {
    for (int r = 0; r < ranks; ++r) {
      const std::string name = fmt::format("r{}/k{}", r, i);
      const auto id = g.add(compute_task(name, r, 1e8 + 1e6 * ((r + i) % 7), i % 2));
      if (i > 0 && i % 4 == 0) g.depend(prev[(r + 1) % ranks], id);
      prev[r] = id;
    }
  }
  return g;
}

// The benchmarks below run one graph again and again, as sweep, search and validate run one
// configuration after another; like them they keep the pages a run freed for the next run
// (util::KeepFreedPages, jemalloc's dirty_decay_ms -1) instead of handing some back to the kernel
// and taking page faults for them again (EngineCompute's validation 7-10% longer: BENCHMARKS.md,
// "Freed pages kept between runs"). FUSESIM_BENCH_RETURN_PAGES=1 measures them with the allocator's
// own decay. Nothing is kept where the process does not run on jemalloc.
std::optional<util::KeepFreedPages> keep_pages_as_sweeps_do(benchmark::State& state) {
  const char* ret = std::getenv("FUSESIM_BENCH_RETURN_PAGES");
  const bool keep = ret == nullptr || std::string(ret) != "1";
  state.counters["pages_kept"] = keep ? 1.0 : 0.0;
  if (!keep) return std::nullopt;
  return std::optional<util::KeepFreedPages>(std::in_place, 0.25);
}

// items_per_second: events per second of the whole run() (validation and set-up included), per CPU
// second; loop_events_per_s: events per wall-clock second of the event loop alone
// (Simulator::last_profile()); loop_events_per_cpu_s: the same per CPU second of the thread, the
// figure that holds on a machine shared with other work.
void run_engine(benchmark::State& state, const topo::Cluster& cluster, const sched::TaskGraph& graph) {
  const auto kept = keep_pages_as_sweeps_do(state);
  FlopCostModel costs;
  sim::Simulator sim(cluster, costs);
  std::uint64_t events = 0;
  TimePs makespan = 0;
  double validate_s = 0.0, prepare_s = 0.0, loop_s = 0.0, loop_cpu_s = 0.0, scheduled = 0.0, state_bytes = 0.0;
  for (auto _ : state) {
    const auto res = sim.run(graph);
    events += res.events_processed;
    makespan = res.makespan_ps;
    validate_s += sim.last_profile().validate_s;
    prepare_s += sim.last_profile().prepare_s;
    loop_s += sim.last_profile().events_s;
    loop_cpu_s += sim.last_profile().events_cpu_s;
    scheduled += static_cast<double>(sim.last_profile().events_scheduled);
    state_bytes = static_cast<double>(sim.last_profile().state_bytes);
    benchmark::DoNotOptimize(res);
  }
  const auto runs = static_cast<double>(state.iterations());
  state.SetItemsProcessed(static_cast<std::int64_t>(events));
  state.counters["tasks"] = static_cast<double>(graph.size());
  state.counters["events_per_run"] = static_cast<double>(events) / runs;
  state.counters["scheduled_per_run"] = scheduled / runs;
  state.counters["validate_ms"] = 1e3 * validate_s / runs;
  state.counters["prepare_ms"] = 1e3 * prepare_s / runs;
  state.counters["loop_ms"] = 1e3 * loop_s / runs;
  state.counters["loop_events_per_s"] = static_cast<double>(events) / loop_s;
  state.counters["loop_events_per_cpu_s"] = static_cast<double>(events) / loop_cpu_s;
  state.counters["makespan_ms"] = static_cast<double>(makespan) / 1e9;
  // Engine state during the loop, SimResult included, per task (RunProfile::state_bytes).
  state.counters["bytes_per_task"] = state_bytes / static_cast<double>(graph.size());
}

// ---------------------------------------------------------------------------------------------
// Building the graph (issue 4: millions of tasks). Bytes are the growth of the heap's in-use bytes
// (glibc mallinfo2) while the graph is built, so everything the graph owns counts: the Boost
// vertex and edge storage, the Task objects, their names and other strings, collective groups.

std::size_t heap_in_use_bytes() {
  const auto m = mallinfo2();
  return m.uordblks + m.hblkhd;  // small chunks in use + large (mmapped) blocks
}

// Every task and edge of a graph, to be added again: what a generator hands to TaskGraph.
struct GraphRecipe {
  int ranks = 0;
  std::vector<sched::Task> tasks;
  std::vector<std::pair<sched::TaskId, sched::TaskId>> edges;
};
GraphRecipe recipe_of(const sched::TaskGraph& g) {
  GraphRecipe r;
  r.ranks = g.num_ranks();
  for (sched::TaskId id = 0; id < g.size(); ++id) {
    r.tasks.push_back(g.task(id));
    for (sched::TaskId next : g.successors(id)) r.edges.emplace_back(id, next);
  }
  return r;
}

// TaskGraph::add and depend alone: the tasks are ready-made (copied outside the timing) and moved in.
// Arg 2: 1 = reserve() first.
void BM_GraphAdd(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const GraphRecipe recipe = recipe_of(pipeline_graph(ranks, static_cast<int>(state.range(1)), 4, 8));
  const bool reserve = state.range(2) != 0;
  double bytes = 0.0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<sched::Task> tasks = recipe.tasks;
    const std::size_t before = heap_in_use_bytes();
    state.ResumeTiming();
    sched::TaskGraph g(recipe.ranks);
    if (reserve) g.reserve(tasks.size());
    for (sched::Task& t : tasks) g.add(std::move(t));
    for (auto [from, to] : recipe.edges) g.depend(from, to);
    state.PauseTiming();
    // The moved-from tasks still hold their (emptied) storage; count only what the graph added.
    bytes = static_cast<double>(heap_in_use_bytes() - before);
    benchmark::DoNotOptimize(g);
    { sched::TaskGraph done = std::move(g); }
    tasks.clear();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(recipe.tasks.size()));
  state.counters["tasks"] = static_cast<double>(recipe.tasks.size());
  state.counters["edges_per_task"] = static_cast<double>(recipe.edges.size()) / static_cast<double>(recipe.tasks.size());
  state.counters["graph_bytes_per_task"] = bytes / static_cast<double>(recipe.tasks.size());
}
BENCHMARK(BM_GraphAdd)->Args({64, 256, 0})->Args({64, 256, 1})->Args({1024, 32, 1})->Unit(benchmark::kMillisecond);

// A generator's whole job: names formatted, tasks built and added (pipeline_graph as it stands).
void BM_GraphBuild(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const int layers = static_cast<int>(state.range(1));
  double bytes = 0.0, tasks = 0.0;
  for (auto _ : state) {
    const std::size_t before = heap_in_use_bytes();
    const auto g = pipeline_graph(ranks, layers, 4, 8);
    bytes = static_cast<double>(heap_in_use_bytes() - before);
    tasks = static_cast<double>(g.size());
    benchmark::DoNotOptimize(g);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(tasks));
  state.counters["tasks"] = tasks;
  state.counters["graph_bytes_per_task"] = bytes / tasks;
}
BENCHMARK(BM_GraphBuild)->Args({64, 256})->Args({1024, 32})->Unit(benchmark::kMillisecond);

void BM_ValidatePipeline(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const auto graph = pipeline_graph(ranks, static_cast<int>(state.range(1)), 4, 8);
  const auto kept = keep_pages_as_sweeps_do(state);
  for (auto _ : state) sched::validate(graph);
  state.counters["tasks"] = static_cast<double>(graph.size());
}
BENCHMARK(BM_ValidatePipeline)->Args({8, 2000})->Args({64, 256})->Args({1024, 8})->Unit(benchmark::kMillisecond);

void BM_ValidateCompute(benchmark::State& state) {
  const auto graph = compute_graph(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  const auto kept = keep_pages_as_sweeps_do(state);
  for (auto _ : state) sched::validate(graph);
  state.counters["tasks"] = static_cast<double>(graph.size());
}
BENCHMARK(BM_ValidateCompute)->Args({64, 16384})->Unit(benchmark::kMillisecond);

void BM_EnginePipeline(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const auto cluster = star_cluster(ranks);
  const auto graph = pipeline_graph(ranks, static_cast<int>(state.range(1)), 4, 8);
  run_engine(state, cluster, graph);
}
BENCHMARK(BM_EnginePipeline)->Args({8, 2000})->Args({64, 256})->Args({1024, 8})->Unit(benchmark::kMillisecond);

void BM_EngineCompute(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const auto cluster = star_cluster(ranks);
  const auto graph = compute_graph(ranks, static_cast<int>(state.range(1)));
  run_engine(state, cluster, graph);
}
BENCHMARK(BM_EngineCompute)->Args({64, 16384})->Unit(benchmark::kMillisecond);

// The schedule generators' whole job on a real configuration: a training step of the shipped
// llama-3-70b-4node (TP 8 x DP 4 on dgx-h100-4node, Scope::step) in schedule 0 baseline, 1 slice,
// 2 commfuse; items are tasks.
void BM_GenerateStep(benchmark::State& state) {
  const auto cluster = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  const model::Workload workload = model::load_workload("llama-3-70b-4node");
  sched::GenerateOptions options;
  options.scope = sched::Scope::step;
  const auto kind = static_cast<model::ScheduleKind>(state.range(0));
  double tasks = 0.0;
  for (auto _ : state) {
    const sched::Schedule s = sched::generate(workload, "llama-3-70b-4node", cluster, kind, options);
    tasks = static_cast<double>(s.graph.size());
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(tasks));
  state.counters["tasks"] = tasks;
}
BENCHMARK(BM_GenerateStep)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
