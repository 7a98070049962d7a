// `fusesim search` (include/fusesim/cli/search.hpp): enumerate, prune, bound, simulate.
#include "fusesim/cli/search.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "fusesim/analysis/metrics.hpp"
#include "fusesim/analysis/table.hpp"
#include "fusesim/cli/app.hpp"
#include "fusesim/cli/plot.hpp"
#include "fusesim/model/memory.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/sched/step.hpp"
#include "fusesim/sched/tpsp.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/allocator.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

// Candidates simulated between two looks at the bound: fixed, so that which candidates are simulated
// does not depend on the thread count.
constexpr std::size_t kBatch = 8;
// Batches simulated at once (run_search): fixed for the same reason.
constexpr std::size_t kInFlight = 2;
// What a search file says it is (search_json), for `fusesim merge`.
constexpr const char* kSearchFormat = "fusesim-search";
constexpr int kSearchVersion = 2;  // 2: steady_state, extrapolated

std::vector<int> divisors(std::int64_t n, std::int64_t at_most) {
  std::vector<int> out;
  for (std::int64_t d = 1; d <= std::min(n, at_most); ++d)
    if (n % d == 0) out.push_back(static_cast<int>(d));
  return out;
}

std::string pipeline_name(const model::Parallelism& p) {
  if (p.pp == 1) return "-";
  if (p.pp_schedule == model::PipelineSchedule::zb_h1) return "zb-h1";
  return p.virtual_stages > 1 ? fmt::format("interleaved v{}", p.virtual_stages) : "1f1b";
}

// The overlap schedule with slice-overlap's slice count: "slice k4", "commfuse".
std::string schedule_name(const SearchCandidate& c) {
  const std::string kind = model::to_string(c.kind);
  return c.kind == model::ScheduleKind::slice ? fmt::format("{} k{}", kind, c.workload.schedule.slices) : kind;
}

// What one worker needs to simulate: its own copy of the cluster (pricing may fit links to it) and
// cost model.
struct Pricer {
  topo::Cluster cluster;
  model::Pricing pricing;
  double memory_share = 1.0;  // of the machine's memory for one graph: the workers build theirs at once
  Pricer(const topo::Cluster& c, const model::PricingChoice& choice, model::ProfileCache& cache, int workers)
      : cluster(c), pricing(model::pricing_for(choice, cluster, &cache)), memory_share(1.0 / std::max(1, workers)) {}
};

// The compute of one layer for one micro-batch on a rank's compute stream 0, each kernel alone on
// the device: the forward, the backward with its recomputation, and the backward of the micro-batch
// that carries the DP sync (CommFuse over DP cuts its weight-gradient GEMMs into ring pieces; the
// other schedules run it as the others: DDP's no_sync, DP collectives and ZeRO gathers have streams
// of their own). Probed on a one-layer stack without stages, priced as the simulation prices it.
// Besides the layers, per micro-batch: the embedding's forward and backward (first stage) and the
// final norm, LM head and loss with their backward (last stage), each the least over the micro-batches
// of a one-layer step of two (the last one carries the DP sync); and what the optimizer's kernels
// need to be priced for a stage.
struct LayerCompute {
  TimePs forward_ps = 0;
  TimePs backward_ps = 0;
  TimePs last_backward_ps = 0;
  TimePs embedding_ps = 0;
  TimePs head_ps = 0;
  std::int64_t layer_params = 0;  // of one layer on one TP rank
  topo::Dtype dtype = topo::Dtype::bf16;       // the step's kernels' (the activation type)
  topo::Dtype grad_dtype = topo::Dtype::fp32;  // what the optimizer reads the gradients as
};

model::Workload one_layer(model::Workload probe) {
  probe.arch.layers = 1;
  probe.parallel.pp = 1;
  probe.parallel.virtual_stages = 1;
  probe.parallel.pp_schedule = model::PipelineSchedule::one_f_one_b;
  probe.parallel.overlap_param_gather = false;
  probe.grad_accumulation = 1;
  probe.recompute_every = 1;
  return probe;
}

// The tasks of rank 0's compute stream 0, each priced alone on the device.
template <typename Visit>
void each_compute_task(const sched::Schedule& s, const Pricer& p, Visit visit) {
  for (sched::TaskId id = 0; id < s.graph.size(); ++id) {
    const sched::Task& t = s.graph.task(id);
    if (t.rank != 0 || !(t.stream == sched::StreamRef{sched::StreamKind::compute, 0})) continue;
    const auto* c = std::get_if<sched::ComputeTask>(&t.kind);
    if (c == nullptr) continue;
    visit(t, *c, p.pricing.costs->cost(c->kernel, c->dtype, p.cluster.device(0)).duration_ps);
  }
}

bool forward_pass(const sched::Task& t) {
  const auto* c = std::get_if<sched::ComputeTask>(&t.kind);
  return t.labels.phase == sched::Phase::forward && !(c != nullptr && c->recompute);
}

// What an exposed collective makes rank 0's compute stream 0 wait, found on the one-layer probe
// simulated alone: where two kernels a, b follow each other on the stream within one pass (the
// forward, or the backward with its recomputation) and a collective C of rank 0 takes a's output
// and gives b its input (edges a -> C -> b), the stream is idle at least as long as C takes, for C
// starts after a and b after C, and the stream runs b after a whatever else is queued (in order).
// C counts only where it ran alone in the probe (no other communication at the same time): then
// each of its transfers had its links to itself, which no step of a whole run can beat, so C takes
// at least as long in any step. Baseline's TP collectives (each between the kernel that makes its
// input and the one that reads its output), slice-overlap's first gather and last scatter.
void exposed_waits(const sched::Schedule& s, const Pricer& p, TimePs& forward, TimePs& backward) {
  sim::Simulator simulator(p.cluster, *p.pricing.costs);
  simulator.set_transfer_records(sim::TransferRecords::p2p_only);
  const sim::SimResult r = simulator.run(s.graph);
  struct Span {
    TimePs start, end;
    std::int64_t instance;  // a collective's (its members are one operation); -1 for P2P
  };
  std::vector<Span> comm;
  std::vector<sched::TaskId> stream;
  for (sched::TaskId id = 0; id < s.graph.size(); ++id) {
    const sched::Task& t = s.graph.task(id);
    if (const auto* c = std::get_if<sched::CollectiveTask>(&t.kind))
      comm.push_back({r.tasks[id].start_ps, r.tasks[id].end_ps, c->instance});
    else if (!std::holds_alternative<sched::ComputeTask>(t.kind))
      comm.push_back({r.tasks[id].start_ps, r.tasks[id].end_ps, -1});
    else if (t.rank == 0 && t.stream == sched::StreamRef{sched::StreamKind::compute, 0})
      stream.push_back(id);
  }
  std::sort(stream.begin(), stream.end(), [&](sched::TaskId a, sched::TaskId b) {
    return r.tasks[a].start_ps != r.tasks[b].start_ps ? r.tasks[a].start_ps < r.tasks[b].start_ps : a < b;
  });
  const auto alone = [&](sched::TaskId id, std::int64_t instance) {
    const TimePs start = r.tasks[id].start_ps, end = r.tasks[id].end_ps;
    return std::none_of(comm.begin(), comm.end(), [&](const Span& o) {
      return (o.instance != instance || instance < 0) && o.start < end && o.end > start;
    });
  };
  const sched::PredecessorIndex preds = s.graph.predecessor_index();
  for (std::size_t i = 1; i < stream.size(); ++i) {
    const sched::TaskId a = stream[i - 1], b = stream[i];
    const sched::Task& tb = s.graph.task(b);
    if (forward_pass(s.graph.task(a)) != forward_pass(tb)) continue;
    TimePs wait = 0;
    for (const sched::TaskId c : preds.of(b)) {
      const sched::Task& tc = s.graph.task(c);
      const auto* coll = std::get_if<sched::CollectiveTask>(&tc.kind);
      if (coll == nullptr || tc.rank != 0) continue;
      const auto before = preds.of(c);
      if (std::find(before.begin(), before.end(), a) == before.end() || !alone(c, coll->instance)) continue;
      wait = std::max(wait, r.tasks[c].end_ps - r.tasks[c].start_ps);
    }
    (forward_pass(tb) ? forward : backward) += wait;
  }
}

LayerCompute probe_layer(const model::Workload& w, model::ScheduleKind kind, const std::string& label, const Pricer& p) {
  sched::GenerateOptions options;
  options.scope = sched::Scope::stack;
  const sched::Schedule s = sched::generate(one_layer(w), label, p.cluster, kind, options);
  LayerCompute out;
  each_compute_task(s, p, [&](const sched::Task& t, const sched::ComputeTask&, TimePs d) {
    (forward_pass(t) ? out.forward_ps : out.backward_ps) += d;
  });
  exposed_waits(s, p, out.forward_ps, out.backward_ps);
  out.last_backward_ps = out.backward_ps;
  return out;
}

// The embedding's and the head's compute per micro-batch (the least of two micro-batches) on a
// one-layer step. Tasks are told apart by their names (StepEmitter: "mbN/embedding/...",
// "mbN/head/..."); any other work outside the layers is left out, which only lowers the bound.
void probe_ends(const model::Workload& w, model::ScheduleKind kind, const std::string& label, const Pricer& p,
                LayerCompute& out) {
  model::Workload probe = one_layer(w);
  probe.grad_accumulation = 2;
  sched::GenerateOptions options;
  options.scope = sched::Scope::step;
  const sched::Schedule s = sched::generate(probe, label, p.cluster, kind, options);
  std::array<TimePs, 2> embedding{}, head{};
  each_compute_task(s, p, [&](const sched::Task& t, const sched::ComputeTask&, TimePs d) {
    const int mb = t.labels.micro_batch;
    if (t.labels.layer != -1 || mb < 0 || mb > 1) return;
    if (t.name.find("embedding/") != std::string::npos)
      embedding[static_cast<std::size_t>(mb)] += d;
    else if (t.name.find("head/") != std::string::npos)
      head[static_cast<std::size_t>(mb)] += d;
  });
  out.embedding_ps = std::min(embedding[0], embedding[1]);
  out.head_ps = std::min(head[0], head[1]);
}

LayerCompute layer_compute(const model::Workload& w, model::ScheduleKind kind, const std::string& label, const Pricer& p) {
  model::Workload alone = w;
  alone.parallel.dp = 1;
  alone.parallel.dp_sharding = model::DpSharding::ddp;
  alone.fp8_param_gather = false;
  const bool fused = kind == model::ScheduleKind::commfuse && w.parallel.dp * w.parallel.up > 1;
  LayerCompute out = probe_layer(alone, kind, label, p);
  if (fused) out.last_backward_ps = probe_layer(w, kind, label, p).backward_ps;
  probe_ends(fused ? w : alone, kind, label, p, out);
  const sched::TpspRequest r = sched::tpsp_request(w, label, p.cluster, kind, sched::GenerateOptions{});
  out.layer_params = r.shape.layer_params();
  out.dtype = r.shape.activation_dtype();
  out.grad_dtype = r.step.grad_dtype.value_or(model::default_grad_reduce_dtype(r.shape.dtype));
  return out;
}

// The optimizer's kernels on a rank of a stage, alone on the device, for the parameters that rank
// updates: its layers' and the `tables` embedding and LM head tables the stage holds (the first
// stage the embedding, the last the head), all of them replicated (DDP), at least a 1/(dp up) share
// sharded (ZeRO rounds shards up). With CommFuse over DP the ZeRO shards are cut by rows, which may
// round down: left out, which only lowers the bound.
TimePs optimizer_ps(const model::Workload& w, model::ScheduleKind kind, const LayerCompute& c, int tables,
                    const Pricer& p) {
  const bool sharded = w.parallel.dp_sharding != model::DpSharding::ddp;
  const std::int64_t replicas = std::int64_t{w.parallel.dp} * w.parallel.up;
  if (!w.backward || c.layer_params == 0) return 0;
  if (sharded && kind == model::ScheduleKind::commfuse && replicas > 1) return 0;
  const std::int64_t table = w.arch.padded_vocab(w.parallel.tp) / w.parallel.tp * w.arch.hidden;
  const std::int64_t own = w.arch.layers / w.parallel.pp * c.layer_params + tables * table;
  const std::int64_t elements = own / (sharded ? replicas : 1);
  if (elements <= 0) return 0;
  const sched::OptimizerKernels k = sched::optimizer_kernels(elements, c.grad_dtype, c.dtype, w.clip_grad);
  const auto price = [&](const model::ElementwiseKernel& e) {
    return p.pricing.costs->cost(model::Kernel{e}, c.dtype, p.cluster.device(0)).duration_ps;
  };
  TimePs total = 0;
  for (const model::ElementwiseKernel& e : k.all()) total += price(e);
  return total;
}

// A lower bound on the step time that holds whatever the communication does. A stage's compute
// stream runs its kernels one at a time, none faster than alone on the device; each stage runs the
// forward (t_F) and the backward (t_B) of its L/pp layers for every one of the m micro-batches:
// m (t_F + t_B) L/pp. The last stage also runs the head (t_H) of every micro-batch, and cannot start
// before micro-batch 0 has gone forward through the p - 1 stages ahead of it, one chunk of L/(pp v)
// layers each; after its last backward the step cannot end before that gradient has come back
// through them, (p - 1) t_B L/(pp v), nor before the stage's optimizer (t_O, after its last backward)
// is done: the larger of the two (the compute-only pipeline's bubble, docs/schedules.md "Pipeline").
// The first stage runs the embedding (t_E) of every micro-batch and its own optimizer after its
// last backward. Without stages the one stage does both ends. The last micro-batch's backward is
// the one carrying the DP sync. run_search checks every simulated step against its bound. ZB-H1 has
// no drain term: the gradient comes back through B alone, whose share of t_B the probe does not tell,
// and the last stage runs its held-back Ws meanwhile.
TimePs lower_bound(const model::Workload& w, model::ScheduleKind kind, const LayerCompute& c, const Pricer& p) {
  const std::int64_t m = w.grad_accumulation, pp = w.parallel.pp;
  const std::int64_t stage_layers = w.arch.layers / pp, chunk_layers = stage_layers / w.parallel.virtual_stages;
  const TimePs layers = stage_layers * (m * c.forward_ps + (m - 1) * c.backward_ps + c.last_backward_ps);
  if (pp == 1) return layers + m * (c.embedding_ps + c.head_ps) + optimizer_ps(w, kind, c, 2, p);
  const bool zb = w.parallel.pp_schedule == model::PipelineSchedule::zb_h1;
  const TimePs fill = (pp - 1) * chunk_layers * c.forward_ps;
  const TimePs drain = zb ? 0 : (pp - 1) * chunk_layers * c.last_backward_ps;
  const TimePs optimizer = optimizer_ps(w, kind, c, 1, p);  // the first and last stage each hold one table
  const TimePs last = fill + layers + m * c.head_ps + std::max(optimizer, drain);
  const TimePs first = layers + m * c.embedding_ps + optimizer;
  return std::max(last, first);
}

// What a search row reports of one simulated step: its metrics without the per-rank lists and the
// critical path (which a search does not report: the lists would cost memory for every candidate
// kept, the critical path a pass over every task of every step simulated), and the critical
// rank's exposed communication. An extrapolated step (step_figures) scales the sums a row reads
// (step, stages' idle times, tokens, FLOPs) and derives the rates again (analysis::derive_rates); the
// stages' compute and exposed times are not extrapolated and no row reads them.
struct StepFigures {
  analysis::StepMetrics metrics;  // ranks cleared
  TimePs exposed_comm_ps = 0;     // the critical rank's
};

StepFigures simulate_step(const model::Workload& w, model::ScheduleKind kind, const std::string& label,
                          const Pricer& p, const std::string& symmetry) {
  sched::GenerateOptions options;
  options.memory_share = p.memory_share;
  options.scope = sched::Scope::step;
  options.backward = w.backward;
  options.dp_as_p2p = symmetry == "p2p";
  options.mirror_dp = symmetry == "mirror";
  options.mirror_tp = options.mirror_dp;
  const sched::Schedule s = sched::generate(w, label, p.cluster, kind, options);
  sim::Simulator simulator(p.cluster, *p.pricing.costs);
  simulator.set_transfer_records(sim::TransferRecords::p2p_only);  // the analysis reads P2P records alone
  const sim::SimResult result = simulator.run(s.graph);
  StepFigures f{analysis::analyze(s, result, p.cluster, *p.pricing.costs, w.dtype, /*critical_path=*/false), 0};
  f.exposed_comm_ps = f.metrics.critical().exposed_comm_ps;
  f.metrics.ranks.clear();
  return f;
}

// How far apart the per-micro-batch increments of a figure may be for the step to count as steady,
// as a share of the step time's increment. Bandwidth shared between transfers that meet once per
// micro-batch settles geometrically rather than at once: measured on Llama-3-70B steps (80 layers,
// TP 8, PP 4, 1F1B, mirrored DP 2) the step's increment moved by 20,173, 5,030, 1,254, 312, 78, 19,
// 6, 1 ps per micro-batch and then not at all: each move about a quarter of the one before, so what
// the increments still move once two agree within this share adds at most about a third of it, 3e-7
// of the step time, to the extrapolated step and exposed communication: below the 0.1 ms the table
// prints. 1e-9 until 2026-11-29 cost 12-18 s of the 85-92 s search of BENCHMARKS.md (windows moved one to
// three more times for the last 557 to 29,000 ps) and changed no figure by more than 2.1e-8.
constexpr double kSteadyShare = 1e-6;
// The same for each stage's idle time, which search reports only as the largest stage's fraction of
// the step. The stages between the first and the last settle later, swinging around their increment:
// on Llama-3-70B at TP 8 x PP 8, 1F1B, micro-batches of 2, the step's increment was exact from 21
// micro-batches on while stage 2's still swung by 56,000, 26,000, 12,000, ... 290 ps at 26. At this
// share the reported fraction is off by at most a few 1e-6 of it.
constexpr double kIdleShare = 1e-5;
// ZB-H1's steps do not settle geometrically: its held-back weight passes land in other gaps as the
// micro-batches grow, and its increments drift by hundreds of thousands of picoseconds per
// micro-batch before they stop moving. At the shares above such a drift passed for steady (Llama-3-70B,
// TP 8 x PP 2 x DP 4, ZB-H1, ZeRO-2, baseline, 128 micro-batches: steady at 8-10, extrapolated 0.56%
// short of the exposed communication and 5% off the bubble fraction of the full step); at these it
// is steady only where the full step agrees (at 14-16 there, equal to the picosecond).
constexpr double kZeroBubbleSteadyShare = 1e-9;
constexpr double kZeroBubbleIdleShare = 1e-6;

// Steps simulated for a window: kWindow steps of k, k + s, ..., k + (kWindow - 1) s micro-batches.
// Two increments that agree within kSteadyShare are what a step settling geometrically shows once
// settled (a third agreeing adds nothing the second did not: each is a quarter of the one before on
// the Llama-3-70B step above); they must also agree for the exposed communication and for every
// stage's idle time, so a coincidence in one figure does not pass. tests/cli/test_cli_search.cpp
// compares every extrapolated figure with the full simulation.
constexpr std::size_t kWindow = 3;

// The figures of the steps of a window (k, k + s, ... micro-batches) grow by the same amount at each
// step: the tokens exactly, the step and the critical rank's exposed communication within kSteadyShare
// of the step's last increment, each stage's idle time within kIdleShare (ZB-H1: the kZeroBubble ones).
bool steady(const std::vector<StepFigures>& window, bool zero_bubble) {
  const double steady_share = zero_bubble ? kZeroBubbleSteadyShare : kSteadyShare;
  const double idle_share = zero_bubble ? kZeroBubbleIdleShare : kIdleShare;
  const analysis::StepMetrics& last = window.back().metrics;
  for (const StepFigures& f : window)
    if (f.metrics.gpus != last.gpus || f.metrics.peak_flops_per_s != last.peak_flops_per_s ||
        f.metrics.stages.size() != last.stages.size())
      return false;
  const std::int64_t step = last.step_time_ps - window[window.size() - 2].metrics.step_time_ps;
  if (step <= 0) return false;
  // Whether x(0), x(1), ... grows by increments that differ by at most `slack`.
  const auto same = [&](auto x, double slack) {
    std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = std::numeric_limits<std::int64_t>::min();
    for (std::size_t i = 1; i < window.size(); ++i) {
      const std::int64_t d = x(window[i]) - x(window[i - 1]);
      lo = std::min(lo, d);
      hi = std::max(hi, d);
    }
    return static_cast<double>(hi - lo) <= slack;
  };
  const auto share = [&](double of_step) { return std::max(1.0, of_step * static_cast<double>(step)); };
  if (!same([](const StepFigures& f) { return f.metrics.tokens; }, 0.0)) return false;
  if (!same([](const StepFigures& f) { return f.metrics.step_time_ps; }, share(steady_share))) return false;
  if (!same([](const StepFigures& f) { return f.exposed_comm_ps; }, share(steady_share))) return false;
  for (std::size_t i = 0; i < last.stages.size(); ++i)
    if (!same([i](const StepFigures& f) { return f.metrics.stages[i].bubble_ps; }, share(idle_share))) return false;
  return true;
}

// A step of m micro-batches, every micro-batch simulated or, where that costs more, extrapolated from
// its steady state (docs/cli.md "fusesim search", "Steady state"). Past the pipeline's warm-up every
// further micro-batch repeats the same work on the same resources, so the step and what it is made of
// (exposed communication, each stage's idle time, tokens, FLOPs) grow by the same amount per
// micro-batch (per pp micro-batches for interleaved 1F1B, whose counts are multiples of pp). Steps of
// k, k + s, k + 2s micro-batches are simulated from k = 2 pp (1 without stages); when their figures
// grow alike at both steps (steady), the step of m is the last of them (of k_last micro-batches) plus
// (m - k_last) / s times its last increment; when not, the window moves on by s until it starts
// first - s micro-batches later than it began, then starts again at twice its start, while that costs
// fewer simulated micro-batches than m; otherwise the m micro-batches are simulated. Some steps repeat
// every second micro-batch instead (their increments alternate between two values: Llama-3-70B at TP 4
// x PP 4 x DP 4, CommFuse, by 461,721,9xx,xxx and 461,761,6xx,xxx ps from 8 micro-batches on): where
// the steps of k - 4s, k - 2s and k micro-batches, k of m's parity (in steps of s), grow alike, the
// step of m is extrapolated from them by 2s at a time.
std::pair<StepFigures, bool> step_figures(const model::Workload& w, model::ScheduleKind kind, const std::string& label,
                                          const Pricer& p, const std::string& symmetry, bool steady_state) {
  const std::int64_t m = w.grad_accumulation;
  const std::int64_t pp = w.parallel.pp;
  const std::int64_t s = w.parallel.pp_schedule == model::PipelineSchedule::interleaved && pp > 1 ? pp : 1;
  const std::int64_t first = pp > 1 ? 2 * pp : 1;
  const auto n = static_cast<std::int64_t>(kWindow);
  const bool zero_bubble = w.parallel.pp_schedule == model::PipelineSchedule::zb_h1;
  // The first window's micro-batches: n k + s n (n - 1) / 2.
  if (!steady_state || n * first + s * n * (n - 1) / 2 >= m) return {simulate_step(w, kind, label, p, symmetry), false};
  // The steps of the current run of windows, by micro-batches: k, k + s, ... (a jump starts anew).
  std::vector<std::pair<std::int64_t, StepFigures>> seen;
  // The step of m from the steady window `window` (its steps `stride` apart, the last of `last` micro-batches).
  const auto extrapolate = [&](const std::vector<StepFigures>& window, std::int64_t last_k, std::int64_t stride) {
    const StepFigures& last = window[window.size() - 1];
    const StepFigures& before = window[window.size() - 2];
    const std::int64_t steps = (m - last_k) / stride;
    StepFigures f = last;
    analysis::StepMetrics& x = f.metrics;
    const analysis::StepMetrics &l = last.metrics, &e = before.metrics;
    x.step_time_ps += steps * (l.step_time_ps - e.step_time_ps);
    f.exposed_comm_ps += steps * (last.exposed_comm_ps - before.exposed_comm_ps);
    for (std::size_t i = 0; i < x.stages.size(); ++i)
      x.stages[i].bubble_ps += steps * (l.stages[i].bubble_ps - e.stages[i].bubble_ps);
    x.tokens += steps * (l.tokens - e.tokens);
    x.model_flops += static_cast<double>(steps) * (l.model_flops - e.model_flops);
    x.hardware_flops += static_cast<double>(steps) * (l.hardware_flops - e.hardware_flops);
    analysis::derive_rates(x);
    return f;
  };
  // The window of kWindow steps `stride` apart ending at `last_k` micro-batches, where all were simulated.
  const auto window_at = [&](std::int64_t last_k, std::int64_t stride) {
    std::vector<StepFigures> window;
    for (std::int64_t i = n - 1; i >= 0; --i) {
      const std::int64_t want = last_k - i * stride;
      const auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& e) { return e.first == want; });
      if (it == seen.end()) return std::vector<StepFigures>{};
      window.push_back(it->second);
    }
    return window;
  };
  std::int64_t simulated = 0;  // micro-batches simulated so far
  std::int64_t run_start = first;
  for (std::int64_t k = first; k + s <= m && simulated + k < m; k += s) {
    model::Workload fewer = w;
    fewer.grad_accumulation = k;
    seen.emplace_back(k, simulate_step(fewer, kind, label, p, symmetry));
    simulated += k;
    // A window of steps s apart, then one of steps 2 s apart ending at the last step of m's parity.
    if (const auto window = window_at(k, s); !window.empty() && steady(window, zero_bubble))
      return {extrapolate(window, k, s), true};
    for (const std::int64_t last_k : {k, k - s}) {
      if ((m - last_k) % (2 * s) != 0) continue;
      if (const auto window = window_at(last_k, 2 * s); !window.empty() && steady(window, zero_bubble))
        return {extrapolate(window, last_k, 2 * s), true};
    }
    if (k - run_start < (n - 1) * s) continue;  // the first window of this run is not complete yet
    // One more step simulated per move, the window's other two kept: the steps that settle late
    // mostly settle within a move or two. A step still not steady after the window has moved about
    // as far as it began (ZB-H1's weight passes landing in other gaps until 20-30 micro-batches)
    // would reach its steady state one micro-batch at a time only at the cost of the whole step:
    // from there each window starts at twice the start of the last (three steps simulated anew).
    // Llama-3-70B, TP 8 x PP 4 x DP 2, ZB-H1, CommFuse, 256 micro-batches: not steady at 15-17,
    // steady at 30-32 (218 micro-batches simulated), where sliding on ran out of its budget at 23
    // and the step of 256 would not fit in memory (BENCHMARKS.md "Windows that jump").
    const std::int64_t start = k - (n - 1) * s;
    // (A window at start s would jump to 2 s, the next slide's window: it slides.)
    if (start >= 2 * first - s && start > s) {
      seen.clear();
      k = 2 * start - s;  // the loop's step makes it 2 start
      run_start = k + s;
    }
  }
  return {simulate_step(w, kind, label, p, symmetry), false};
}

SearchRow simulate_candidate(const SearchCandidate& c, const std::string& label, const Pricer& p,
                             const std::string& symmetry, bool steady_state) {
  const auto [f, extrapolated] = step_figures(c.workload, c.kind, label, p, symmetry, steady_state);
  SearchRow row;
  row.candidate = c;
  row.extrapolated = extrapolated;
  row.step_ps = f.metrics.step_time_ps;
  row.mfu = f.metrics.mfu;
  row.tokens_per_s_per_gpu = f.metrics.tokens_per_s_per_gpu;
  row.exposed_comm_ps = f.exposed_comm_ps;
  for (const analysis::StageMetrics& st : f.metrics.stages)
    row.bubble_fraction = std::max(row.bubble_fraction, st.bubble_fraction);
  return row;
}

// What a refusal at `path` (docs/workload.md, "Consistency checks" and "Fit to the cluster") means
// for a searched configuration.
std::string prune_reason(const std::string& path) {
  static const std::map<std::string, std::string> known{
      {"$.parallel.tp", "tp: does not split the heads, kv heads or FFN, or a node"},
      {"$.parallel.up", "up: does not split the heads or kv heads"},
      {"$.parallel.pp", "pp: does not split the layers (x virtual stages)"},
      {"$.training.sequence_length", "sequence: does not split over tp x up"},
      {"$.training.grad_accumulation", "interleaved: micro-batches not a multiple of pp"},
      {"$.parallel.dp_sharding", "zero3 with pp > 1: not supported"},
      {"$.schedule.slices", "slice-overlap: the slices do not split the sequence shard"},
      {"$.schedule.tp_baseline", "te_userbuffers: the sequence does not split into tp x up x 4"},
      {"$.training.recompute", "recompute op: needs up 1"},
      {"$.parallel.pp_schedule", "zb-h1: needs up 1"},
      {"$.model.layers", "the task graph would be too large to build"},
      {"$.parallel", "more ranks than the cluster has"},
  };
  auto it = known.find(path);
  return it == known.end() ? path : it->second + " (" + path + ")";
}

// A candidate keeps the workload's overlapped parameter gather where its ZeRO stage can carry it
// (ZeRO-1/2), and its fp8 gather where it is ZeRO-3; else they are off (the memory check and the DP
// sync would refuse them).
void keep_gathers_of(model::Workload& w, const model::Workload& base) {
  const model::DpSharding z = w.parallel.dp_sharding;
  w.parallel.overlap_param_gather =
      base.parallel.overlap_param_gather && (z == model::DpSharding::zero1 || z == model::DpSharding::zero2);
  w.fp8_param_gather = base.fp8_param_gather && z == model::DpSharding::zero3;
}

bool better(const SearchRow& a, const SearchRow& b) {
  return a.step_ps != b.step_ps ? a.step_ps < b.step_ps : a.candidate.index < b.candidate.index;
}

}  // namespace

std::string SearchCandidate::describe() const {
  const model::Parallelism& p = workload.parallel;
  return fmt::format("tp {} up {} pp {} dp {} {} mb {}x{} recompute {} {} {}", p.tp, p.up, p.pp, p.dp, pipeline_name(p),
                     workload.micro_batch, workload.grad_accumulation, model::to_string(workload.recompute),
                     model::to_string(p.dp_sharding), schedule_name(*this));
}

SearchResult run_search(const SearchSpec& spec, int jobs, const SearchProgress& progress) {
  SearchResult r;
  const topo::Cluster cluster = topo::load_cluster_by_name_or_path(spec.topology);
  model::Workload base = model::load_workload(spec.workload);
  r.topology_label = resolve_input(spec.topology, "topologies").label;
  r.workload_label = resolve_input(spec.workload, "workloads").label;
  const std::string& label = r.workload_label;
  r.cluster_name = cluster.name;
  r.model_name = base.arch.name;
  r.top = spec.top;
  r.gpus = spec.gpus.value_or(cluster.num_ranks());
  if (r.gpus < 1 || r.gpus > cluster.num_ranks())
    throw InputError(kCommandLine, "--gpus",
                     fmt::format("{} GPUs: cluster '{}' has {}", r.gpus, cluster.name, cluster.num_ranks()));
  if (spec.sequence_length) base.sequence_length = *spec.sequence_length;
  r.sequence_length = base.sequence_length;
  r.global_batch = spec.global_batch.value_or(base.micro_batch * base.grad_accumulation * base.parallel.dp);
  if (spec.top < 1) throw InputError(kCommandLine, "--top", "the number of configurations to show must be >= 1");
  if (r.global_batch < 1) throw InputError(kCommandLine, "--global-batch", "the global batch must be >= 1 sample");

  const std::vector<int> tps = spec.tps.empty() ? divisors(cluster.devices_per_node, cluster.devices_per_node) : spec.tps;
  const std::vector<int> ups = spec.ups.empty() ? std::vector<int>{1} : spec.ups;
  std::vector<int> pps = spec.pps;
  if (pps.empty())
    for (int d : divisors(base.arch.layers, r.gpus))
      if (r.gpus % d == 0) pps.push_back(d);
  const std::vector<std::int64_t> mbs = spec.micro_batches.empty() ? std::vector<std::int64_t>{1, 2, 4, 8} : spec.micro_batches;
  const std::vector<model::Recompute> recomputes =
      spec.recomputes.empty()
          ? std::vector<model::Recompute>{model::Recompute::none, model::Recompute::selective, model::Recompute::full}
          : spec.recomputes;
  const std::vector<model::DpSharding> shardings =
      spec.shardings.empty() ? model::all_dp_shardings() : spec.shardings;

  // Slice-overlap runs once per slice count; the others once.
  const std::vector<int> ks = spec.slices.empty() ? std::vector<int>{base.schedule.slices} : spec.slices;

  r.shard = spec.shard;
  {
    using model::names_of;
    r.spec = {{"topology_file", r.topology_label}, {"workload_file", r.workload_label}, {"gpus", r.gpus},
              {"global_batch", r.global_batch},    {"sequence_length", r.sequence_length},
              {"tp", tps},                         {"up", ups},
              {"pp", pps},                         {"virtual_stages", spec.virtual_stages},
              {"zb_h1", spec.zb_h1},
              {"slices", ks},
              {"micro_batch", mbs},                {"recompute", names_of(recomputes)},
              {"dp_sharding", names_of(shardings)},   {"schedule", names_of(spec.schedules)},
              {"top", spec.top},                   {"symmetry", spec.symmetry},
              {"steady_state", spec.steady_state},
              // What --profile / --roofline asked for, so that a merged search can print the simulate
              // command of its best row (merge --write-workloads).
              {"pricing_choice", {{"roofline", spec.pricing.mode == model::PricingMode::roofline},
                                  {"profile", spec.pricing.mode == model::PricingMode::profile ? spec.pricing.profile
                                                                                                : std::string()}}}};
  }

  // Enumerate. A configuration that is the same run under two names (ZeRO stages without DP, pipeline
  // schedules without stages) is listed once. A shard looks at its own candidates only; the groups
  // pruned before they get an index are counted by shard 0 alone, so that the parts add up.
  std::vector<SearchRow> bounded;  // the candidates that can run, with their memory, then their bound
  auto prune = [&](const std::string& reason, std::size_t count) {
    r.pruned[reason] += count;
    r.candidates += count;
  };
  auto prune_group = [&](const std::string& reason, std::size_t count) {
    if (spec.shard.index == 0) prune(reason, count);
  };
  std::size_t runs_per_kind = 0;  // (schedule, k) pairs
  for (model::ScheduleKind kind : spec.schedules) runs_per_kind += kind == model::ScheduleKind::slice ? ks.size() : 1;
  const std::size_t inner = recomputes.size() * runs_per_kind;
  std::size_t index = 0;
  for (int tp : tps)
    for (int up : ups)
      for (int pp : pps) {
        const std::int64_t per_replica = std::int64_t{tp} * up * pp;
        // The pipeline schedules: virtual_stages 1 is 1F1B, more interleaved; then ZB-H1.
        std::vector<std::pair<int, model::PipelineSchedule>> vs;
        for (int v : pp > 1 ? spec.virtual_stages : std::vector<int>{1})
          vs.emplace_back(v, v > 1 ? model::PipelineSchedule::interleaved : model::PipelineSchedule::one_f_one_b);
        if (pp > 1 && spec.zb_h1) vs.emplace_back(1, model::PipelineSchedule::zb_h1);
        if (r.gpus % per_replica != 0) {
          prune_group("gpus: not a multiple of tp x up x pp", vs.size() * mbs.size() * shardings.size() * inner);
          continue;
        }
        const int dp = static_cast<int>(r.gpus / per_replica);
        const std::vector<model::DpSharding> zs = dp * up > 1 ? shardings : std::vector<model::DpSharding>{model::DpSharding::ddp};
        for (const auto& [v, pipeline] : vs)
          for (std::int64_t mb : mbs) {
            if (r.global_batch % (std::int64_t{dp} * mb) != 0) {
              prune_group("global batch: not a multiple of dp x micro-batch", zs.size() * inner);
              continue;
            }
            for (model::DpSharding z : zs)
              for (model::Recompute rc : recomputes)
                for (model::ScheduleKind kind : spec.schedules)
                  for (std::size_t ki = 0; ki < (kind == model::ScheduleKind::slice ? ks.size() : 1); ++ki) {
                    if (!spec.shard.covers(index)) {
                      ++index;
                      continue;
                    }
                    SearchCandidate c{index++, base, kind};
                    model::Workload& w = c.workload;
                    if (kind == model::ScheduleKind::slice) w.schedule.slices = ks[ki];
                    w.parallel.tp = tp;
                    w.parallel.up = up;
                    w.parallel.pp = pp;
                    w.parallel.dp = dp;
                    w.parallel.virtual_stages = v;
                    w.parallel.pp_schedule = pipeline;
                    w.parallel.dp_sharding = z;
                    keep_gathers_of(w, base);
                    w.micro_batch = mb;
                    w.grad_accumulation = r.global_batch / (std::int64_t{dp} * mb);
                    w.recompute = rc;
                    w.schedule.kind = kind;
                    try {
                      model::validate_workload(w, label);
                      model::check_fits(w, label, cluster);
                    } catch (const InputError& e) {
                      prune(prune_reason(e.json_path()), 1);
                      continue;
                    }
                    const model::MemoryReport mem = model::memory_per_rank(w, cluster, {kind});
                    if (!mem.fits()) {
                      prune("memory: more than the device's HBM (docs/memory.md)", 1);
                      continue;
                    }
                    ++r.candidates;
                    SearchRow row;
                    row.candidate = std::move(c);
                    row.memory_bytes = mem.total_bytes;
                    bounded.push_back(std::move(row));
                  }
          }
      }

  // Bound: one probe per layer shape, priced as the simulation prices it.
  model::ProfileCache profiles;
  std::vector<std::unique_ptr<Pricer>> pricers;
  const int threads = std::max(1, jobs);
  for (int t = 0; t < threads; ++t) pricers.push_back(std::make_unique<Pricer>(cluster, spec.pricing, profiles, threads));
  r.pricing = pricers.front()->pricing.describe();
  r.symmetry = spec.symmetry;
  // One probe per layer shape, the shapes probed on the `--jobs` threads (each with its own pricer,
  // all alike: the same figures whichever thread probes a shape).
  std::map<std::string, LayerCompute> layer_cache;
  std::vector<std::string> row_key(bounded.size());
  std::vector<std::size_t> first_with_key;  // rows whose shape no row before them has
  for (std::size_t i = 0; i < bounded.size(); ++i) {
    const SearchCandidate& c = bounded[i].candidate;
    const model::Workload& w = c.workload;
    // The DP degree and sharding matter only to CommFuse's last backward.
    const bool fused = c.kind == model::ScheduleKind::commfuse && w.parallel.dp * w.parallel.up > 1;
    row_key[i] = fmt::format("{} {} {} {} {} {} {} {}", w.parallel.tp, w.parallel.up, w.micro_batch,
                             model::to_string(w.recompute), schedule_name(c), w.sequence_length,
                             fused ? w.parallel.dp : 0, fused ? model::to_string(w.parallel.dp_sharding) : "");
    if (layer_cache.emplace(row_key[i], LayerCompute{}).second) first_with_key.push_back(i);
  }
  {
    std::vector<LayerCompute> probed(first_with_key.size());
    std::mutex failed;
    std::exception_ptr error;
    std::size_t next_probe = 0;
    const auto probe = [&](int t) {
      while (true) {
        std::size_t k;
        {
          std::lock_guard<std::mutex> lock(failed);
          if (error || next_probe >= probed.size()) return;
          k = next_probe++;
        }
        const SearchCandidate& c = bounded[first_with_key[k]].candidate;
        try {
          probed[k] = layer_compute(c.workload, c.kind, label, *pricers[static_cast<std::size_t>(t)]);
        } catch (const InputError&) {
          probed[k] = LayerCompute{};  // the probe cannot be built alone: no bound
        } catch (...) {
          std::lock_guard<std::mutex> lock(failed);
          if (!error) error = std::current_exception();
          return;
        }
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < std::min<int>(threads, static_cast<int>(probed.size())); ++t) pool.emplace_back(probe, t);
    probe(0);
    for (auto& th : pool) th.join();
    if (error) std::rethrow_exception(error);
    for (std::size_t k = 0; k < probed.size(); ++k) layer_cache[row_key[first_with_key[k]]] = probed[k];
  }
  for (std::size_t i = 0; i < bounded.size(); ++i)
    bounded[i].lower_bound_ps =
        lower_bound(bounded[i].candidate.workload, bounded[i].candidate.kind, layer_cache.at(row_key[i]), *pricers.front());
  std::stable_sort(bounded.begin(), bounded.end(), [](const SearchRow& a, const SearchRow& b) {
    return a.lower_bound_ps != b.lower_bound_ps ? a.lower_bound_ps < b.lower_bound_ps : a.candidate.index < b.candidate.index;
  });

  // Simulate in bound order. A candidate is skipped when its bound is above the N-th best step found
  // and above the best of its overlap schedule: it could enter neither list.
  std::map<model::ScheduleKind, TimePs> best_of_kind;
  std::vector<TimePs> best;  // sorted steps of the rows so far (the N shortest matter)
  auto hopeless = [&](const SearchRow& row) {
    const bool full = best.size() >= spec.top;
    const TimePs nth = full ? best[spec.top - 1] : std::numeric_limits<TimePs>::max();
    auto k = best_of_kind.find(row.candidate.kind);
    const TimePs kind_best = k == best_of_kind.end() ? std::numeric_limits<TimePs>::max() : k->second;
    return row.lower_bound_ps > nth && row.lower_bound_ps > kind_best;
  };
  // Candidates whose task graphs are the same (tests/sched/step_test.cpp): ZeRO-2 and ZeRO-1; at
  // tp = up = 1, where the schedule acts on the DP sync alone, slice-overlap and baseline when the DP
  // baseline is the bucketed one (slice-overlap's DP form), and every schedule when dp = 1 too. Of
  // such candidates one is simulated and the others take its figures with their own bound and memory.
  const auto step_key = [](const SearchCandidate& c) {
    SearchCandidate same = c;
    model::Parallelism& par = same.workload.parallel;
    if (par.dp_sharding == model::DpSharding::zero2) par.dp_sharding = model::DpSharding::zero1;
    if (par.tp == 1 && par.up == 1 &&
        ((same.kind == model::ScheduleKind::slice && !same.workload.schedule.dp_serial_baseline) || par.dp == 1))
      same.kind = model::ScheduleKind::baseline;
    return same.describe();  // with slice-overlap's k where it stays slice-overlap
  };
  std::vector<std::string> graph_key(bounded.size());  // step_key of each row of bounded
  for (std::size_t i = 0; i < bounded.size(); ++i) graph_key[i] = step_key(bounded[i].candidate);
  std::map<std::string, SearchRow> stepped;  // simulated, by step_key
  const auto twin_of = [](const SearchRow& leader, const SearchRow& in) {
    SearchRow row = leader;
    row.candidate = in.candidate;
    row.lower_bound_ps = in.lower_bound_ps;
    row.memory_bytes = in.memory_bytes;
    return row;
  };
  // Batches are chosen in bound order and merged in that order. A batch's candidates are chosen from
  // what the batches before the previous one found: kInFlight batches are simulated at once, so that
  // a long candidate does not leave the other threads idle at the end of its batch, and the choice
  // depends on neither the thread count nor the timing (both constants are fixed).
  struct Batch {
    std::vector<std::size_t> simulate;  // indices into bounded, one per task graph not seen before
    std::vector<std::optional<SearchRow>> out;
    std::vector<std::string> why;       // the generator's refusal, where out is empty
    std::vector<std::size_t> twins;     // indices into bounded whose task graph a batch so far simulates
    std::size_t left = 0;               // simulations not done yet
    std::size_t bounded = 0;            // left out by the bound
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::size_t, Batch> flight;  // by sequence number
  std::deque<std::pair<std::size_t, std::size_t>> tasks;  // (batch, index in its simulate)
  std::set<std::string> keys_seen;                       // of every candidate chosen to be simulated
  std::map<std::string, std::string> refused;            // step_key -> the generator's refusal
  std::size_t next = 0, formed = 0, merged = 0;
  std::exception_ptr error;
  const auto form = [&]() {
    if (next >= bounded.size()) return false;
    Batch b;
    while (next < bounded.size() && b.simulate.size() < kBatch) {
      if (hopeless(bounded[next])) {
        ++b.bounded;
      } else if (!keys_seen.insert(graph_key[next]).second) {
        b.twins.push_back(next);
      } else {
        b.simulate.push_back(next);
      }
      ++next;
    }
    b.out.resize(b.simulate.size());
    b.why.resize(b.simulate.size());
    b.left = b.simulate.size();
    for (std::size_t k = 0; k < b.simulate.size(); ++k) tasks.emplace_back(formed, k);
    flight.emplace(formed++, std::move(b));
    return true;
  };
  const auto add_row = [&](SearchRow row) {
    if (row.step_ps < row.lower_bound_ps)
      throw std::logic_error(fmt::format("search: the lower bound {} ps of '{}' is above its simulated step {} ps",
                                         row.lower_bound_ps, row.candidate.describe(), row.step_ps));
    ++r.simulated;
    if (row.extrapolated) ++r.extrapolated;
    best.insert(std::upper_bound(best.begin(), best.end(), row.step_ps), row.step_ps);
    auto [it, fresh] = best_of_kind.emplace(row.candidate.kind, row.step_ps);
    if (!fresh) it->second = std::min(it->second, row.step_ps);
    r.rows.push_back(std::move(row));
  };
  // Refused by the generator: a graph too large to build (named at $.model.layers or, when the
  // micro-batches outnumber the layers, $.training.grad_accumulation); it cannot run here.
  const auto add_refusal = [&](const std::string& path) {
    r.pruned[prune_reason(path == "$.training.grad_accumulation" ? "$.model.layers" : path)] += 1;
  };
  // Merges the finished batches in order (their simulated candidates first, then the twins, whose
  // task graph this batch or an earlier one simulated) and forms the next ones.
  const auto merge_finished = [&]() {
    while (flight.count(merged) > 0 && flight.at(merged).left == 0) {
      Batch b = std::move(flight.at(merged));
      flight.erase(merged);
      r.bounded += b.bounded;
      for (std::size_t k = 0; k < b.simulate.size(); ++k) {
        const std::string& key = graph_key[b.simulate[k]];
        if (!b.out[k]) {
          refused.emplace(key, b.why[k]);
          add_refusal(b.why[k]);
          continue;
        }
        stepped.emplace(key, *b.out[k]);
        add_row(std::move(*b.out[k]));
      }
      for (const std::size_t index : b.twins) {
        const std::string& key = graph_key[index];
        if (const auto f = refused.find(key); f != refused.end()) {
          add_refusal(f->second);
          continue;
        }
        ++r.same_graph;
        add_row(twin_of(stepped.at(key), bounded[index]));
      }
      ++merged;
      if (progress) progress(r, bounded.size() - next);
      while (formed < merged + kInFlight && form()) {
      }
    }
  };
  // The candidates' graphs are built and dropped one after the other on each thread: the pages one
  // frees are kept for the next (BENCHMARKS.md "Freed pages kept") while the allocator holds at most
  // a quarter of the machine's memory; beyond it they go back to the kernel, checked before and after
  // each candidate, so that the pages kept and a new candidate's graph (at most 75% of the memory
  // over all threads: sched::GenerateOptions::memory_share) do not meet above it.
  const util::KeepFreedPages kept(0.25);
  const auto work = [&](int t) {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      changed.wait(lock, [&] { return error || !tasks.empty() || merged == formed; });
      if (error || tasks.empty()) return;  // failed, or every batch merged and none left to form
      const auto [seq, k] = tasks.front();
      tasks.pop_front();
      const SearchRow& in = bounded[flight.at(seq).simulate[k]];
      lock.unlock();
      kept.trim();
      std::optional<SearchRow> row;
      std::string why;
      try {
        row = simulate_candidate(in.candidate, label, *pricers[static_cast<std::size_t>(t)], spec.symmetry,
                                 spec.steady_state);
        row->lower_bound_ps = in.lower_bound_ps;
        row->memory_bytes = in.memory_bytes;
        kept.trim();
      } catch (const InputError& e) {
        why = e.json_path();
      } catch (...) {
        lock.lock();
        if (!error) error = std::current_exception();
        changed.notify_all();
        return;
      }
      lock.lock();
      Batch& b = flight.at(seq);
      b.out[k] = std::move(row);
      b.why[k] = std::move(why);
      --b.left;
      try {
        merge_finished();
      } catch (...) {
        if (!error) error = std::current_exception();
      }
      changed.notify_all();
    }
  };
  {
    std::lock_guard<std::mutex> lock(mutex);
    while (formed < kInFlight && form()) {
    }
    merge_finished();  // batches with nothing to simulate
  }
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  std::sort(r.rows.begin(), r.rows.end(), better);
  return r;
}

std::vector<std::size_t> pareto_front(const std::vector<SearchRow>& rows) {
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (rows[a].memory_bytes != rows[b].memory_bytes) return rows[a].memory_bytes < rows[b].memory_bytes;
    return better(rows[a], rows[b]);
  });
  std::vector<std::size_t> front;
  TimePs shortest = std::numeric_limits<TimePs>::max();
  for (std::size_t i : order)
    if (rows[i].step_ps < shortest) {
      front.push_back(i);
      shortest = rows[i].step_ps;
    }
  return front;
}

namespace {

std::string ms(TimePs ps) { return fmt::format("{:.1f}", ps_to_seconds(ps) * 1e3); }
std::string gb(Bytes b) { return fmt::format("{:.1f}", static_cast<double>(b) / 1e9); }

}  // namespace

std::string search_table(const SearchResult& r) {
  using analysis::Align;
  std::string out = fmt::format("{} ({}) on {}: {} GPUs, global batch {} x sequence {}; kernels priced by {}\n\n",
                                r.workload_label, r.model_name, r.cluster_name, r.gpus, r.global_batch,
                                r.sequence_length, r.pricing);
  analysis::Table t({{"#", Align::right},        {"tp", Align::right},          {"up", Align::right},
                     {"pp", Align::right},       {"dp", Align::right},          {"pipeline", Align::left},
                     {"mb x m", Align::left},    {"recompute", Align::left},    {"zero", Align::left},
                     {"schedule", Align::left},  {"step (ms)", Align::right},   {"tokens/s/GPU", Align::right},
                     {"MFU (%)", Align::right},  {"bubble (%)", Align::right},  {"memory (GB)", Align::right},
                     {"bound (ms)", Align::right}});
  for (std::size_t i = 0; i < std::min(r.top, r.rows.size()); ++i) {
    const SearchRow& row = r.rows[i];
    const model::Workload& w = row.candidate.workload;
    t.add_row({std::to_string(i + 1), std::to_string(w.parallel.tp), std::to_string(w.parallel.up),
               std::to_string(w.parallel.pp), std::to_string(w.parallel.dp), pipeline_name(w.parallel),
               fmt::format("{}x{}", w.micro_batch, w.grad_accumulation), model::to_string(w.recompute),
               model::to_string(w.parallel.dp_sharding), schedule_name(row.candidate), ms(row.step_ps),
               fmt::format("{:.0f}", row.tokens_per_s_per_gpu), fmt::format("{:.1f}", row.mfu * 100.0),
               w.parallel.pp > 1 ? fmt::format("{:.1f}", row.bubble_fraction * 100.0) : "-", gb(row.memory_bytes),
               ms(row.lower_bound_ps)});
  }
  out += t.render();
  // How much the overlap schedule moves the optimum: each schedule's best configuration.
  std::map<model::ScheduleKind, const SearchRow*> by_kind;
  for (const SearchRow& row : r.rows)
    if (!by_kind.count(row.candidate.kind)) by_kind[row.candidate.kind] = &row;
  if (!r.rows.empty()) {
    out += "\nbest per overlap schedule:\n";
    for (model::ScheduleKind k : model::all_schedule_kinds()) {
      auto it = by_kind.find(k);
      if (it == by_kind.end()) continue;
      out += fmt::format("  {:<9} {} ms ({:+.1f}% against the best): {}\n", model::to_string(k), ms(it->second->step_ps),
                         100.0 * (static_cast<double>(it->second->step_ps) / static_cast<double>(r.rows.front().step_ps) - 1.0),
                         it->second->candidate.describe());
    }
  }
  std::size_t pruned = 0;
  for (const auto& [reason, n] : r.pruned) pruned += n;
  out += fmt::format("\n{} candidates: {} pruned, {} simulated ({} of them extrapolated from their steady state, {} given "
                     "the step of another with the same task graph), {} not simulated (their lower bound is above the "
                     "step ranked {} and their overlap schedule's best)\n",
                     r.candidates, pruned, r.simulated, r.extrapolated, r.same_graph, r.bounded, r.top);
  std::vector<std::pair<std::size_t, std::string>> reasons;
  for (const auto& [reason, n] : r.pruned) reasons.emplace_back(n, reason);
  std::stable_sort(reasons.begin(), reasons.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [n, reason] : reasons) out += fmt::format("  pruned {:>7}  {}\n", n, reason);
  if (r.rows.empty()) out += "no configuration can run: see the reasons above\n";
  // A workload file's own batch (micro-batch x accumulation x dp) is often one replica's, far below a
  // training run's: then DP cannot take the GPUs and the best rows are deep pipelines and wide TP,
  // which reads as the search's advice for the run unless said.
  if (r.global_batch < r.gpus)
    out += fmt::format("note: the global batch of {} sequence{} is smaller than the {} GPUs, so DP is at most {} and "
                       "the other GPUs must be TP, UP or pipeline stages; a training run's global batch is usually "
                       "hundreds to thousands of sequences (--global-batch)\n",
                       r.global_batch, r.global_batch == 1 ? "" : "s", r.gpus, r.global_batch);
  return out;
}

namespace {
nlohmann::json row_json(const SearchRow& row, std::size_t rank) {
  const model::Workload& w = row.candidate.workload;
  return {{"rank", rank},
          {"index", row.candidate.index},
          {"tp", w.parallel.tp},
          {"up", w.parallel.up},
          {"pp", w.parallel.pp},
          {"dp", w.parallel.dp},
          {"pp_schedule", w.parallel.pp > 1 ? model::to_string(w.parallel.pp_schedule) : "-"},
          {"virtual_stages", w.parallel.virtual_stages},
          {"micro_batch", w.micro_batch},
          {"grad_accumulation", w.grad_accumulation},
          {"recompute", model::to_string(w.recompute)},
          {"dp_sharding", model::to_string(w.parallel.dp_sharding)},
          {"schedule", model::to_string(row.candidate.kind)},
          {"slices", row.candidate.kind == model::ScheduleKind::slice ? nlohmann::json(w.schedule.slices) : nlohmann::json()},
          {"step_time_s", ps_to_seconds(row.step_ps)},
          {"lower_bound_s", ps_to_seconds(row.lower_bound_ps)},
          {"tokens_per_s_per_gpu", row.tokens_per_s_per_gpu},
          {"mfu", row.mfu},
          {"exposed_comm_s", ps_to_seconds(row.exposed_comm_ps)},
          {"bubble_fraction", row.bubble_fraction},
          {"memory_bytes", row.memory_bytes},
          {"extrapolated", row.extrapolated}};
}
}  // namespace

nlohmann::json search_json(const SearchResult& r) {
  nlohmann::json doc;
  doc["format"] = kSearchFormat;
  doc["version"] = kSearchVersion;
  doc["spec"] = r.spec;
  doc["shard"] = {{"index", r.shard.index}, {"count", r.shard.count}};
  doc["topology"] = r.cluster_name;
  doc["topology_file"] = r.topology_label;
  doc["workload_file"] = r.workload_label;
  doc["model"] = r.model_name;
  doc["gpus"] = r.gpus;
  doc["global_batch"] = r.global_batch;
  doc["sequence_length"] = r.sequence_length;
  doc["pricing"] = r.pricing;
  doc["symmetry"] = r.symmetry;
  doc["candidates"] = r.candidates;
  doc["simulated"] = r.simulated;
  doc["not_simulated_by_bound"] = r.bounded;
  doc["extrapolated"] = r.extrapolated;
  doc["same_graph"] = r.same_graph;
  nlohmann::json pruned = nlohmann::json::object();
  for (const auto& [reason, n] : r.pruned) pruned[reason] = n;
  doc["pruned"] = std::move(pruned);
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < r.rows.size(); ++i) rows.push_back(row_json(r.rows[i], i + 1));
  doc["results"] = std::move(rows);
  nlohmann::json front = nlohmann::json::array();
  for (std::size_t i : pareto_front(r.rows)) front.push_back(i + 1);
  doc["pareto_front"] = std::move(front);  // ranks of the rows on it, by memory
  return doc;
}

std::string search_csv(const SearchResult& r) {
  const std::vector<std::string> columns{"rank", "tp", "up", "pp", "dp", "pp_schedule", "virtual_stages", "micro_batch",
                                         "grad_accumulation", "recompute", "dp_sharding", "schedule", "slices", "step_time_s",
                                         "lower_bound_s", "tokens_per_s_per_gpu", "mfu", "exposed_comm_s",
                                         "bubble_fraction", "memory_bytes", "extrapolated"};
  std::string out;
  for (std::size_t c = 0; c < columns.size(); ++c) out += (c ? "," : "") + columns[c];
  out += "\n";
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const nlohmann::json row = row_json(r.rows[i], i + 1);
    for (std::size_t c = 0; c < columns.size(); ++c) {
      const nlohmann::json& v = row.at(columns[c]);
      out += c ? "," : "";
      out += v.is_string() ? v.get<std::string>() : v.is_null() ? "-" : v.dump();
    }
    out += "\n";
  }
  return out;
}

std::string write_search_workloads(const SearchResult& r, const SearchSpec& spec, const std::string& workload_text,
                                   const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  // Ordered: the file keeps the order of the workload it came from, the row's values in their places.
  const nlohmann::ordered_json base = nlohmann::ordered_json::parse(workload_text);
  const std::size_t rows = std::min(r.top, r.rows.size());
  std::string log;
  for (std::size_t i = 0; i < rows; ++i) {
    const SearchCandidate& c = r.rows[i].candidate;
    const model::Workload& w = c.workload;
    const model::Parallelism& p = w.parallel;
    nlohmann::ordered_json doc = base;
    doc["name"] = fmt::format("{}-search-{}", base.contains("name") ? base["name"].get<std::string>() : "workload", i + 1);
    nlohmann::ordered_json& t = doc["training"];
    t["sequence_length"] = w.sequence_length;
    t["micro_batch"] = w.micro_batch;
    t["grad_accumulation"] = w.grad_accumulation;
    t["recompute"] = model::to_string(w.recompute);
    // Optional keys the search may have changed: written where the file had them or the row sets them.
    if (t.contains("fp8_param_gather") || w.fp8_param_gather) t["fp8_param_gather"] = w.fp8_param_gather;
    nlohmann::ordered_json& par = doc["parallel"];
    par["tp"] = p.tp;
    par["up"] = p.up;
    par["dp"] = p.dp;
    par["pp"] = p.pp;
    par["pp_schedule"] = model::to_string(p.pp_schedule);
    par["virtual_stages"] = p.virtual_stages;
    par["dp_sharding"] = model::to_string(p.dp_sharding);
    if (par.contains("overlap_param_gather") || p.overlap_param_gather)
      par["overlap_param_gather"] = p.overlap_param_gather;
    // `fsdp` and `reshard_after_forward` describe ZeRO-3 alone: a file refuses them beside another sharding.
    if (p.dp_sharding != model::DpSharding::zero3) {
      par.erase("fsdp");
      par.erase("reshard_after_forward");
    } else {
      if (par.contains("fsdp")) par["fsdp"] = p.fsdp == model::FsdpImpl::fsdp1 ? "fsdp1" : "fsdp2";
      if (par.contains("reshard_after_forward")) par["reshard_after_forward"] = model::to_string(p.reshard_after_forward);
    }
    nlohmann::ordered_json& sched = doc["schedule"];
    sched["kind"] = model::to_string(c.kind);
    sched["slices"] = w.schedule.slices;
    const std::string path = (fs::path(dir) / fmt::format("{}.json", i + 1)).string();
    write_output_file(path, doc.dump(2) + "\n", "--write-workloads");
    if (i == 0) {
      std::string options;
      if (spec.symmetry != "mirror") options += " --symmetry " + spec.symmetry;
      if (spec.pricing.mode == model::PricingMode::roofline) options += " --roofline";
      if (spec.pricing.mode == model::PricingMode::profile) options += " --profile " + spec.pricing.profile;
      log += fmt::format("search: the row ranked 1 runs as: fusesim simulate --topology {} --workload {} --scope step "
                         "--schedule {}{}\n",
                         spec.topology, path, model::to_string(c.kind), options);
    }
  }
  log.insert(0, rows == 0 ? std::string("search: no row to write\n")
                          : fmt::format("search: wrote the workloads of the {} best rows to {}/1.json{}\n", rows, dir,
                                        rows > 1 ? fmt::format(" .. {}.json", rows) : ""));
  return log;
}

std::string write_merged_search_workloads(const SearchResult& merged, const std::string& dir) {
  // The searched workload, read again (a shipped one by its path inside the binary): each row's
  // configuration is put on it as search put it.
  const ResolvedInput workload =
      resolve_input(embedded_path(merged.workload_label).value_or(merged.workload_label), "workloads");
  model::Workload base = model::parse_workload(JsonDocument::parse(workload.text, workload.label));
  base.sequence_length = merged.sequence_length;
  SearchResult rows = merged;
  for (SearchRow& row : rows.rows) {
    const model::Workload& axes = row.candidate.workload;  // the row's configuration (parse_search_json)
    model::Workload w = base;
    w.parallel.tp = axes.parallel.tp;
    w.parallel.up = axes.parallel.up;
    w.parallel.pp = axes.parallel.pp;
    w.parallel.dp = axes.parallel.dp;
    w.parallel.pp_schedule = axes.parallel.pp_schedule;
    w.parallel.virtual_stages = axes.parallel.virtual_stages;
    w.parallel.dp_sharding = axes.parallel.dp_sharding;
    keep_gathers_of(w, base);
    w.micro_batch = axes.micro_batch;
    w.grad_accumulation = axes.grad_accumulation;
    w.recompute = axes.recompute;
    w.schedule.kind = row.candidate.kind;
    if (row.candidate.kind == model::ScheduleKind::slice) w.schedule.slices = axes.schedule.slices;
    row.candidate.workload = std::move(w);
  }
  SearchSpec spec;
  // A shipped topology is named by its stem on the command line ("<embedded:topologies/dgx-h100.json>"
  // -> "dgx-h100"), a file of one's own by its path.
  const std::optional<std::string> shipped = embedded_path(merged.topology_label);
  spec.topology = shipped ? std::filesystem::path(*shipped).stem().string() : merged.topology_label;
  spec.symmetry = merged.symmetry;
  if (const auto p = merged.spec.find("pricing_choice"); p != merged.spec.end() && p->is_object()) {
    if (p->value("roofline", false)) spec.pricing = {model::PricingMode::roofline, ""};
    const std::string profile = p->value("profile", std::string());
    if (!profile.empty()) spec.pricing = {model::PricingMode::profile, profile};
  }
  return write_search_workloads(rows, spec, workload.text, dir);
}

std::string write_search_plot(const SearchResult& r, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const std::vector<std::size_t> front = pareto_front(r.rows);
  std::string data = "# memory_GB step_ms schedule rank\n";
  for (std::size_t i = 0; i < r.rows.size(); ++i)
    data += fmt::format("{:.3f} {:.3f} {} {}\n", static_cast<double>(r.rows[i].memory_bytes) / 1e9,
                        ps_to_seconds(r.rows[i].step_ps) * 1e3, model::to_string(r.rows[i].candidate.kind), i + 1);
  data += "\n\n# Pareto front\n";
  for (std::size_t i : front)
    data += fmt::format("{:.3f} {:.3f} {} {}\n", static_cast<double>(r.rows[i].memory_bytes) / 1e9,
                        ps_to_seconds(r.rows[i].step_ps) * 1e3, model::to_string(r.rows[i].candidate.kind), i + 1);
  const std::string dat = (fs::path(dir) / "search.dat").string();
  const std::string gp = (fs::path(dir) / "search.gp").string();
  const std::string svg = (fs::path(dir) / "search.svg").string();
  write_output_file(dat, data, "--plot");
  const std::string script = fmt::format(
      "set terminal svg size 900,600 dynamic\nset output '{}'\nset title \"{} on {} ({} GPUs): step time against memory "
      "per GPU\"\nset xlabel 'memory per GPU (GB)'\nset ylabel 'step time (ms)'\nset key outside right\nset grid\n"
      "plot '{}' index 0 using 1:2 with points pt 7 ps 0.5 title 'simulated', \\\n"
      "     '{}' index 1 using 1:2 with linespoints lw 2 pt 6 ps 1.2 title 'Pareto front'\n",
      fs::path(svg).filename().string(), r.model_name, r.cluster_name, r.gpus, fs::path(dat).filename().string(),
      fs::path(dat).filename().string());
  write_output_file(gp, script, "--plot");
  std::string log = fmt::format("search: wrote {} and {}\n", dat, gp);
  const std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty()) return log + "search: gnuplot is not on the PATH: run `gnuplot search.gp` in that folder to draw search.svg\n";
  const auto quote = [](const std::string& text) {
    std::string q = "'";
    for (char ch : text) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return q + "'";
  };
  const std::string cmd = fmt::format("cd {} && {} search.gp", quote(dir), quote(gnuplot));
  if (std::system(cmd.c_str()) != 0) return log + "search: gnuplot failed on search.gp\n";
  return log + fmt::format("search: drew {}\n", svg);
}


namespace {

// The enum whose model::to_string is the value's string, else a failure at the value's path.
template <typename T>
T named(const JsonValue& v, const std::vector<T>& known) {
  const std::string name = v.as_string();
  for (T k : known)
    if (model::to_string(k) == name) return k;
  std::string list;
  for (T k : known) list += (list.empty() ? "" : ", ") + model::to_string(k);
  v.fail(fmt::format("'{}' is not one of {}", name, list));
}

constexpr std::int64_t kMaxCount = std::int64_t{1} << 50;

TimePs ps_of(const JsonObject& o, std::string_view key) {
  return static_cast<TimePs>(std::llround(o.number(key, 0.0, 1e6) * 1e12));  // 1e6 s: far from int64 ps
}

}  // namespace

bool is_search_json(const JsonDocument& doc) {
  const nlohmann::json& raw = doc.raw();
  return raw.is_object() && raw.contains("format") && raw["format"] == kSearchFormat;
}

SearchResult read_search_json(const std::string& path) { return parse_search_json(JsonDocument::load(path)); }

SearchResult parse_search_json(const JsonDocument& doc) {
  const JsonObject root = doc.root();
  const PartHeader header = read_part_header(root, kSearchFormat, kSearchVersion, "search");
  SearchResult r;
  r.spec = header.spec;
  r.shard = header.shard;
  r.cluster_name = root.string("topology");
  r.topology_label = root.string("topology_file");
  r.workload_label = root.string("workload_file");
  r.model_name = root.string("model");
  r.gpus = static_cast<int>(root.integer("gpus", 1, 1 << 20));
  r.global_batch = root.integer("global_batch", 1, 1 << 30);
  r.sequence_length = root.integer("sequence_length", 1, 1 << 24);
  r.pricing = root.string("pricing");
  r.symmetry = root.choice("symmetry", {"none", "p2p", "mirror"});
  r.top = static_cast<std::size_t>(root.at("spec").as_object().integer("top", 1, 1 << 20));
  r.candidates = static_cast<std::size_t>(root.integer("candidates", 0, kMaxCount));
  r.simulated = static_cast<std::size_t>(root.integer("simulated", 0, kMaxCount));
  r.bounded = static_cast<std::size_t>(root.integer("not_simulated_by_bound", 0, kMaxCount));
  r.extrapolated = static_cast<std::size_t>(root.integer("extrapolated", 0, kMaxCount));
  r.same_graph = static_cast<std::size_t>(root.integer("same_graph", 0, kMaxCount));
  const JsonObject pruned = root.object("pruned");
  for (const std::string& reason : pruned.keys())
    r.pruned[reason] = static_cast<std::size_t>(pruned.integer(reason, 0, kMaxCount));
  pruned.finish();
  using model::DpSharding, model::PipelineSchedule, model::Recompute, model::ScheduleKind;
  const JsonArray rows = root.array("results");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const JsonObject o = rows.at(i).as_object();
    SearchRow row;
    o.integer("rank", 1, kMaxCount);
    row.candidate.index = static_cast<std::size_t>(o.integer("index", 0, kMaxCount));
    if (!r.shard.covers(row.candidate.index))
      o.at("index").fail(fmt::format("candidate {} is not in shard {}/{}", row.candidate.index, r.shard.index,
                                     r.shard.count));
    model::Workload& w = row.candidate.workload;
    w.sequence_length = r.sequence_length;
    w.parallel.tp = static_cast<int>(o.integer("tp", 1, 1 << 20));
    w.parallel.up = static_cast<int>(o.integer("up", 1, 1 << 20));
    w.parallel.pp = static_cast<int>(o.integer("pp", 1, 1 << 20));
    w.parallel.dp = static_cast<int>(o.integer("dp", 1, 1 << 20));
    const std::string pipeline = o.choice("pp_schedule", {"-", "1f1b", "interleaved", "zb-h1"});
    w.parallel.pp_schedule =
        pipeline == "-" ? PipelineSchedule::one_f_one_b : *model::pipeline_schedule_named(pipeline);
    w.parallel.virtual_stages = static_cast<int>(o.integer("virtual_stages", 1, 1 << 20));
    w.micro_batch = o.integer("micro_batch", 1, 1 << 30);
    w.grad_accumulation = o.integer("grad_accumulation", 1, 1 << 30);
    w.recompute = named<Recompute>(o.at("recompute"), model::all_recomputes());
    w.parallel.dp_sharding = named<DpSharding>(o.at("dp_sharding"), model::all_dp_shardings());
    row.candidate.kind = named<ScheduleKind>(o.at("schedule"), model::all_schedule_kinds());
    w.schedule.kind = row.candidate.kind;
    if (auto k = o.find("slices"); k && !k->is_null()) {
      if (row.candidate.kind != ScheduleKind::slice) k->fail("only slice-overlap rows have a slice count");
      w.schedule.slices = static_cast<int>(k->as_integer(1, 1024));
    }
    row.step_ps = ps_of(o, "step_time_s");
    row.lower_bound_ps = ps_of(o, "lower_bound_s");
    row.tokens_per_s_per_gpu = o.number("tokens_per_s_per_gpu", 0.0, 1e15);
    row.mfu = o.number("mfu", 0.0, 1e3);
    row.exposed_comm_ps = ps_of(o, "exposed_comm_s");
    row.bubble_fraction = o.number("bubble_fraction", 0.0, 1.0);
    row.memory_bytes = o.integer("memory_bytes", 0, std::int64_t{1} << 60);
    row.extrapolated = o.boolean("extrapolated");
    o.finish();
    r.rows.push_back(std::move(row));
  }
  const JsonArray front = root.array("pareto_front");
  for (std::size_t i = 0; i < front.size(); ++i) front.at(i).as_integer(1, kMaxCount);
  root.finish();
  return r;
}

SearchResult merge_searches(const std::vector<std::string>& paths, const std::vector<SearchResult>& parts) {
  if (parts.empty()) throw InputError(kCommandLine, "parts", "no search parts to merge");
  const SearchResult& first = parts.front();
  SearchResult all = first;
  all.rows.clear();
  all.pruned.clear();
  all.candidates = all.simulated = all.bounded = all.extrapolated = all.same_graph = 0;
  all.shard = Shard{};
  std::vector<Shard> shards;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const SearchResult& part = parts[p];
    if (part.spec != first.spec)
      throw InputError(paths[p], "$.spec", fmt::format("not the same search as '{}'", paths[0]));
    if (part.pricing != first.pricing)
      throw InputError(paths[p], "$.pricing", fmt::format("kernels priced otherwise than in '{}'", paths[0]));
    shards.push_back(part.shard);
    all.candidates += part.candidates;
    all.simulated += part.simulated;
    all.bounded += part.bounded;
    all.extrapolated += part.extrapolated;
    all.same_graph += part.same_graph;
    for (const auto& [reason, n] : part.pruned) all.pruned[reason] += n;
    all.rows.insert(all.rows.end(), part.rows.begin(), part.rows.end());
  }
  check_shard_parts(paths, shards, "search");
  std::sort(all.rows.begin(), all.rows.end(), better);
  return all;
}

}  // namespace fusesim::cli
