// `fusesim validate`: the model's predictions against published (or the user's own) measurements,
// case by case, with the error of each and the mean absolute percentage error per category. Each
// case is predicted by the roofline and, with --profile, by the calibrated model of the profile
// that matches its device; a profile's own fitting cases are reported apart from the held-out ones.
// Case file format: docs/calibration.md, "Validation cases".
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <string_view>
#include <vector>

#include "fusesim/analysis/rank_correlation.hpp"
#include "fusesim/analysis/table.hpp"
#include "fusesim/cli/commands.hpp"
#include "fusesim/cli/input_readers.hpp"
#include "fusesim/cli/simulate.hpp"
#include "fusesim/model/calibration_fit.hpp"
#include "fusesim/model/pricing.hpp"
#include "fusesim/model/profile.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/util/allocator.hpp"
#include "fusesim/util/csv.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kMaxDim = std::int64_t{1} << 40;

struct Case {
  std::string id, category, topology, source, note, unit;
  std::optional<JsonValue> topology_at;  // where the case file names it, for a topology that does not load
  double measured = 0;
  // gemm
  topo::Dtype dtype = topo::Dtype::bf16;
  model::GemmKernel gemm;
  // attention
  std::string pass;
  model::AttentionKernel attention;
  // collective
  std::string op;
  int ranks = 0;
  Bytes bytes = 0;
  model::CommEngine engine = model::CommEngine::sm_kernel;
  bool ring_only = false;  // "algorithm": "ring": the measurement disabled NVLS (NCCL_ALGO=Ring)
  // "timing": what the measurement's clock saw. fusesim prices a collective's kernels as a training
  // step runs them, which nccl-tests with one process per GPU times ("kernels", the default); calls a
  // host issues one by one (a PyTorch benchmark loop, vidur's profiled calls) carry a per-call host
  // floor ("host_calls"), nccl-tests with one process driving every GPU of a node (-g N) a slower
  // launch ("one_process"), and nccl-tests launching its kernels from a CUDA graph (-G N) none of the
  // host's launch cost that eager training and the default nccl-tests pay ("cuda_graph"). validate
  // reports each kind's error on its own beside the whole.
  std::string timing = "kernels";
  int peer = 1;            // p2p: the receiving rank (rank 0 sends), so that a pair may span nodes
  // end to end, and layer (one transformer layer of a workload, timed alone)
  std::string workload, metric;
  bool forward_only = false;  // layer: "pass" "forward" (the measurement timed the forward alone)
  model::ScheduleKind schedule = model::ScheduleKind::baseline;
  sched::Scope scope = sched::Scope::step;
  std::vector<std::string> needs;
  std::optional<int> tp;
  std::optional<std::int64_t> micro_batch, sequence_length;
  std::optional<std::string> engines;  // model::kEngineModes: what the measured framework ran communication on
  // "symmetry": how much of the cluster is simulated (simulate --symmetry), mirror as simulate's
  // default: exact where it runs, every rank where it would not be (docs/schedules.md "Symmetry").
  std::string symmetry = "mirror";
  // Whose schedule the case sets ("parallelism"); empty: every parallelism of the workload.
  std::vector<sched::Parallelism> parallelisms;
  // "speedup_over": the id of the case this one is a published speed-up over (the same run with
  // another schedule); validate prints measured and predicted ratios side by side.
  std::string speedup_over;
  std::optional<JsonValue> speedup_over_at;
};

double positive(const JsonObject& o, std::string_view key) {
  const JsonValue v = o.at(key);
  const double x = v.as_number(0.0, kInf);
  if (!(x > 0.0)) v.fail("must be positive");
  return x;
}

std::vector<Case> read_cases(const JsonDocument& doc) {
  const JsonObject root = doc.root();
  const JsonValue schema = root.at("schema");
  if (schema.as_string() != "fusesim.validation")
    schema.fail(
        fmt::format("'{}' is not a validation case file (expected \"fusesim.validation\")", schema.as_string()));
  const JsonValue version = root.at("schema_version");
  if (version.as_integer(0, 1000000) != 1) version.fail("schema version must be 1");
  root.string_or("description", "");
  const JsonArray cases = root.array("cases");
  cases.require_size(1, 100000);
  std::vector<Case> out;
  std::set<std::string> ids;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const JsonObject o = cases.at(i).as_object();
    Case c;
    c.id = o.string("id");
    if (!ids.insert(c.id).second) o.at("id").fail(fmt::format("case id '{}' is used twice", c.id));
    c.category = o.choice("category", {"gemm", "attention", "collective", "end_to_end", "layer"});
    c.topology = o.string("topology");
    c.topology_at = o.at("topology");
    c.source = o.string("source");
    c.note = o.string_or("note", "");
    if (c.category == "gemm") {
      c.dtype = topo::parse_dtype(o.at("dtype"));
      c.gemm = {o.integer("m", 1, kMaxDim), o.integer("n", 1, kMaxDim), o.integer("k", 1, kMaxDim),
                o.integer_or("batch", 1, kMaxDim, 1)};
      if (auto why = model::kernel_size_error(c.gemm)) o.fail(*why);
      c.measured = positive(o, "measured_tflops");
      c.unit = "TFLOP/s";
    } else if (c.category == "attention") {
      c.dtype = topo::parse_dtype(o.at("dtype"));
      c.pass = o.choice("pass", {"forward", "backward", "forward_backward"});
      auto& a = c.attention;
      a.causal = o.boolean("causal");
      a.batch = o.integer("batch", 1, kMaxDim);
      a.heads = o.integer("heads", 1, kMaxDim);
      a.kv_heads = o.integer_or("kv_heads", 1, kMaxDim, a.heads);
      a.seq_q = a.seq_kv = o.integer("seq", 1, kMaxDim);
      a.head_dim = o.integer("head_dim", 1, 100000);
      if (auto why = model::kernel_size_error(a)) o.fail(*why);
      c.measured = positive(o, "measured_tflops");
      c.unit = "TFLOP/s";
    } else if (c.category == "collective") {
      c.op = o.choice("op", {"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "p2p"});
      c.ranks = static_cast<int>(o.integer("ranks", 2, 1 << 20));
      if (c.op == "p2p" && c.ranks != 2) o.at("ranks").fail("a p2p case has 2 ranks");
      if (c.op == "p2p") c.peer = static_cast<int>(o.integer_or("peer", 1, 1 << 20, 1));
      c.bytes = o.integer("bytes", 1, kMaxDim);
      const std::string engine =
          o.choice_or("engine", {"sm_kernel", "copy_engine"}, c.op == "p2p" ? "copy_engine" : "sm_kernel");
      if (engine == "copy_engine" && c.op != "p2p") o.at("engine").fail("only p2p cases run on the copy engine");
      c.engine = engine == "sm_kernel" ? model::CommEngine::sm_kernel : model::CommEngine::copy_engine;
      c.ring_only = o.choice_or("algorithm", {"auto", "ring"}, "auto") == "ring";
      c.timing = o.choice_or("timing", {"kernels", "host_calls", "one_process", "cuda_graph"}, "kernels");
      c.measured = positive(o, "measured_busbw_GBps");
      c.unit = "busbw GB/s";
    } else {
      const bool layer = c.category == "layer";
      // A layer's time is given as the throughput it sustains (tokens of its micro-batch over its time
      // and GPUs), so that a positive error means faster than measured in every category.
      c.metric = layer ? o.choice("metric", {"tokens_per_s_per_gpu"}) : o.choice("metric", {"tokens_per_s_per_gpu", "mfu"});
      c.measured = positive(o, "measured");
      c.unit = c.metric == "mfu" ? "MFU" : "tokens/s/GPU";
      c.workload = layer ? o.string("workload") : o.string_or("workload", "");
      c.schedule = model::parse_schedule_kind(o.choice_or("schedule", model::schedule_names(), "baseline"));
      // A whole training step (embedding, layers, head, DP sync, optimizer) by default; a layer case
      // one layer, forward and backward unless its pass says forward.
      if (layer) {
        c.forward_only = o.choice_or("pass", {"forward", "forward_backward"}, "forward_backward") == "forward";
        c.scope = sched::Scope::layer;
      } else {
        c.scope = parse_scopes(o.choice_or("scope", {"layer", "stack", "step"}, "step")).front();
      }
      if (o.has("tp")) c.tp = static_cast<int>(o.integer("tp", 1, 1 << 20));
      if (o.has("micro_batch")) c.micro_batch = o.integer("micro_batch", 1, 1 << 30);
      // The workload reader's own limit (16M tokens, model/workload.cpp).
      if (o.has("sequence_length")) c.sequence_length = o.integer("sequence_length", 1, 16 * 1024 * 1024);
      if (o.has("engine")) c.engines = o.choice("engine", model::kEngineModes);
      c.symmetry = o.choice_or("symmetry", {"none", "mirror"}, "mirror");
      if (o.has("parallelism"))
        c.parallelisms = {*sched::parse_parallelism(o.choice("parallelism", {"tpsp", "up", "dp"}))};
      if (auto v = o.find("speedup_over")) {
        c.speedup_over = v->as_string();
        c.speedup_over_at = *v;
      }
      o.integer_or("gpus", 1, 1 << 24, 1);  // the measured system's size, for the reader
      if (auto n = o.find("needs")) {
        const JsonArray a = n->as_array();
        for (std::size_t j = 0; j < a.size(); ++j) c.needs.push_back(a.at(j).as_string());
      }
    }
    o.finish();
    out.push_back(std::move(c));
  }
  root.finish();
  for (const Case& c : out) {
    if (c.speedup_over.empty()) continue;
    const auto base = std::find_if(out.begin(), out.end(), [&](const Case& b) { return b.id == c.speedup_over; });
    if (base == out.end() || base->category != c.category || base->metric != c.metric || &*base == &c)
      c.speedup_over_at->fail(
          fmt::format("'{}' is not another {} case with metric {}", c.speedup_over, c.category, c.metric));
  }
  return out;
}

// FLOPs as FlashAttention's benchmark counts them (the published tables use this count): forward
// 4 b h s^2 d, halved when causal; backward 2.5x; both 3.5x.
double fa_flops(const Case& c) {
  const auto& a = c.attention;
  double f = 4.0 * static_cast<double>(a.batch * a.heads) * static_cast<double>(a.seq_q) *
             static_cast<double>(a.seq_kv) * static_cast<double>(a.head_dim);
  if (a.causal) f *= 0.5;
  if (c.pass == "backward") f *= 2.5;
  if (c.pass == "forward_backward") f *= 3.5;
  return f;
}

sched::TaskGraph collective_graph(const Case& c, int num_ranks) {
  sched::TaskGraph g(num_ranks);
  if (c.op == "p2p") {
    const sched::StreamRef stream{
        c.engine == model::CommEngine::copy_engine ? sched::StreamKind::copy : sched::StreamKind::comm, 0};
    g.add({"send", 0, -1, stream, sched::SendTask{c.peer, c.bytes, 0, c.engine, -1}, {}});
    g.add({"recv", c.peer, -1, stream, sched::RecvTask{0, c.bytes, 0}, {}});
    return g;
  }
  const sched::CollectiveKind kind = c.op == "all_gather"       ? sched::CollectiveKind::all_gather
                                     : c.op == "reduce_scatter" ? sched::CollectiveKind::reduce_scatter
                                     : c.op == "all_reduce"     ? sched::CollectiveKind::all_reduce
                                                                : sched::CollectiveKind::all_to_all;
  std::vector<int> ranks(static_cast<std::size_t>(c.ranks));
  for (int r = 0; r < c.ranks; ++r) ranks[static_cast<std::size_t>(r)] = r;
  const sched::RankGroup group(std::move(ranks));
  for (int r = 0; r < c.ranks; ++r) {
    const std::string name = fmt::format("r{}/{}", r, c.op);
    g.add({name,
           r,
           -1,
           {sched::StreamKind::comm, 0},
           sched::CollectiveTask{kind, group, c.bytes, 0, model::CommEngine::sm_kernel, -1},
           {}});
  }
  return g;
}

// End-to-end and layer cases: the predicted run's MFU and step time, beside the case's metric.
struct StepPrediction {
  double mfu = 0.0;
  double step_s = 0.0;
};

// The prediction of one case with a cost model (and its cluster, already calibrated when a profile
// is in use). nullopt: the case names nothing the model can run (end-to-end without a workload).
std::optional<double> predict(const Case& c, const topo::Cluster& cluster, const model::KernelCostModel& costs,
                              const model::PricingChoice& pricing, StepPrediction* step = nullptr) {
  const topo::DeviceModel& device = cluster.device(0);
  if (c.category == "gemm") {
    const model::KernelCost k = costs.cost(c.gemm, c.dtype, device);
    return k.flops / ps_to_seconds(k.duration_ps) / 1e12;
  }
  if (c.category == "attention") {
    double seconds = 0.0;
    for (model::Pass pass : {model::Pass::forward, model::Pass::backward}) {
      if ((c.pass == "forward" && pass == model::Pass::backward) ||
          (c.pass == "backward" && pass == model::Pass::forward))
        continue;
      model::AttentionKernel a = c.attention;
      a.pass = pass;
      seconds += ps_to_seconds(costs.cost(a, c.dtype, device).duration_ps);
    }
    return fa_flops(c) / seconds / 1e12;
  }
  if (c.category == "collective") {
    const int needed = std::max(c.ranks, c.op == "p2p" ? c.peer + 1 : 0);
    if (needed > cluster.num_ranks())
      throw InputError(c.topology, "$",
                       fmt::format("case '{}' needs {} ranks; the cluster has {}", c.id, needed, cluster.num_ranks()));
    // NCCL_ALGO=Ring: the same cluster without NVLS (copied only for such a case).
    std::optional<topo::Cluster> ring;
    if (c.ring_only) ring.emplace(cluster).comm.nvls.reset();
    sim::Simulator simulator(ring ? *ring : cluster, costs);
    const sim::SimResult r = simulator.run(collective_graph(c, cluster.num_ranks()));
    const double factor = model::bus_factor(c.op, c.ranks);
    return static_cast<double>(c.bytes) * factor / ps_to_seconds(r.makespan_ps) / 1e9;
  }
  if (c.workload.empty()) return std::nullopt;
  SimulateRequest req;
  req.topology = c.topology;
  req.workload = c.workload;
  req.schedules = {c.schedule};
  req.scopes = {c.scope};
  req.forward_only = c.forward_only;
  req.pricing = pricing;
  req.tp = c.tp;
  req.micro_batch = c.micro_batch;
  req.sequence_length = c.sequence_length;
  req.engine = c.engines;
  req.parallelisms = c.parallelisms;
  req.max_parallelisms = 1;  // the first run is the case's (runs.front() below): no other is simulated
  apply_symmetry(c.symmetry, req);
  const SimulateReport rep = simulate(req);
  const analysis::StepMetrics& m = rep.runs.front().metrics;
  if (step != nullptr) *step = {m.mfu, ps_to_seconds(m.step_time_ps)};
  return c.metric == "mfu" ? m.mfu : m.tokens_per_s_per_gpu;
}

struct Row {
  const Case* c = nullptr;
  std::optional<double> roofline;
  std::string profile;  // the profile's label, empty when none matched
  std::optional<double> calibrated;
  bool fitted = false;  // the case was one the profile was built from
  std::string status;   // ok, partial (needs ...), not modelled
  // End-to-end cases: the predicted MFU of each model (fusesim's FLOP count over the predicted step)
  // and the predicted step time.
  std::optional<double> roofline_mfu, calibrated_mfu;
  std::optional<double> roofline_step_s, calibrated_step_s;
  // The prediction the measured figures are derived from and compared with: the profile's where one
  // priced the case, else the roofline's (its metric, MFU and step time together).
  struct Prediction {
    std::optional<double> value, mfu, step_s;
  };
  Prediction chosen() const {
    return calibrated_mfu ? Prediction{calibrated, calibrated_mfu, calibrated_step_s}
                          : Prediction{roofline, roofline_mfu, roofline_step_s};
  }
  // The measured run's MFU by the same FLOP count: the case's own when its metric is MFU, else the
  // predicted MFU scaled by measured / predicted throughput (the step's FLOPs are the same).
  std::optional<double> measured_mfu() const {
    const Prediction p = chosen();
    if (!p.mfu || !p.value || *p.value <= 0.0) return std::nullopt;
    return c->metric == "mfu" ? c->measured : *p.mfu * c->measured / *p.value;
  }
  // The measured run's step time: the predicted one scaled by predicted / measured metric (throughput
  // and MFU are both the step's fixed tokens and FLOPs over its time).
  std::optional<double> measured_step_s() const {
    const Prediction p = chosen();
    if (!p.step_s || !p.value || c->measured <= 0.0) return std::nullopt;
    return *p.step_s * *p.value / c->measured;
  }
};

// Spearman's rank correlation of measured and predicted MFU over the end-to-end cases with status ok
// (issue 12: does the model order the runs as they measured?), for the roofline and the profiles.
struct MfuRanking {
  std::optional<double> roofline, profile;
  int cases = 0;
};
MfuRanking rank_mfu(const std::vector<Row>& rows) {
  std::vector<double> measured, roofline, profile;
  bool all_calibrated = true;
  for (const Row& r : rows) {
    if (r.c->category != "end_to_end" || r.status != "ok" || !r.roofline_mfu || !r.measured_mfu()) continue;
    measured.push_back(*r.measured_mfu());
    roofline.push_back(*r.roofline_mfu);
    if (r.calibrated_mfu) profile.push_back(*r.calibrated_mfu);
    all_calibrated = all_calibrated && r.calibrated_mfu.has_value();
  }
  MfuRanking m;
  m.cases = static_cast<int>(measured.size());
  m.roofline = analysis::spearman(measured, roofline);
  if (all_calibrated && !profile.empty()) m.profile = analysis::spearman(measured, profile);
  return m;
}

double error_pct(double predicted, double measured) { return (predicted - measured) / measured * 100.0; }

class ValidateCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.add_option("--cases", cases_, "validation cases: a file or a shipped name (default: published)")
        ->type_name("FILE|NAME")
        ->capture_default_str();
    sub.add_option("--profile", profiles_,
                   "calibration profile(s) (file or shipped name; repeat or comma-separate); each case uses the "
                   "one that matches its device, beside the roofline")
        ->type_name("FILE|NAME")
        ->delimiter(',');
    sub.add_flag("--roofline", roofline_,
                 "the roofline alone: no profile, not even the shipped one of each case's device");
    sub.add_option("--category", category_, "only this category: gemm, attention, collective, end_to_end, layer")
        ->type_name("NAME");
    sub.add_option("--id", ids_,
                   "only the cases whose id contains one of these (repeat or comma-separate), e.g. "
                   "--id e2e/torchtitan; a speed-up is reported when both its cases are in")
        ->type_name("TEXT")
        ->delimiter(',');
    sub.add_option("--format", format_, "table or json")->type_name("FORMAT")->capture_default_str();
    sub.add_option("--output", output_, "write the report to this file instead of standard output")->type_name("FILE");
    sub.add_option("--kernel-predictions", predictions_,
                   "write every kernel sample of the profiles' kernel models as CSV: its measured time, the reading "
                   "predicted fitted on all samples and with its model left out")
        ->type_name("FILE");
  }

  int run(Io& io) override {
    if (!output_.empty()) check_output_path(output_, "--output");  // before the work, not after
    if (!predictions_.empty()) {
      if (roofline_)
        throw InputError(kCommandLine, "--kernel-predictions", "--roofline prices kernels by no profile's kernel models");
      if (!reports_kernel_models())
        throw InputError(kCommandLine, "--kernel-predictions",
                         "the kernel models are reported without --id, with --category gemm or none");
      check_output_path(predictions_, "--kernel-predictions");
    }
    const OutputFormat format = parse_format(format_);
    if (!category_.empty() && category_ != "gemm" && category_ != "attention" && category_ != "collective" &&
        category_ != "end_to_end" && category_ != "layer")
      throw InputError(kCommandLine, "--category",
                       fmt::format("'{}' is not one of gemm, attention, collective, end_to_end, layer", category_));
    const ResolvedInput in = resolve_input(cases_, "validation");
    const std::vector<Case> cases = read_cases(JsonDocument::parse(in.text, in.label));
    if (roofline_ && !profiles_.empty())
      throw InputError(kCommandLine, "--roofline", "--roofline and --profile exclude each other");
    // Without --profile, each case's calibrated prediction uses the shipped profile of its device,
    // as simulate does by default (docs/calibration.md, "Which model prices a run").
    model::ProfileCache cache;
    std::vector<std::string> names = profiles_;
    if (names.empty() && !roofline_) names = model::shipped_profile_names();
    std::vector<model::Profile> profiles;
    for (const std::string& p : names) profiles.push_back(cache.load(p)->profile);

    for (const std::string& id : ids_) {
      if (id.empty()) throw InputError(kCommandLine, "--id", "an empty id pattern");
      if (std::none_of(cases.begin(), cases.end(), [&](const Case& c) { return c.id.find(id) != std::string::npos; }))
        throw InputError(kCommandLine, "--id", fmt::format("no case of {} has an id containing '{}'", in.label, id));
    }
    const auto selected = [&](const Case& c) {
      return ids_.empty() || std::any_of(ids_.begin(), ids_.end(), [&](const std::string& id) {
               return c.id.find(id) != std::string::npos;
             });
    };

    std::vector<Row> rows;
    std::map<std::string, topo::Cluster> clusters;
    const model::RooflineCostModel roofline;
    // As in sweep and search: the pages of each case's dropped graphs kept for the next while the
    // allocator holds at most a quarter of the machine's memory (util/allocator.hpp).
    const util::KeepFreedPages kept(0.25);
    for (const Case& c : cases) {
      if (!category_.empty() && c.category != category_) continue;
      if (!selected(c)) continue;
      kept.trim();
      Row row;
      row.c = &c;
      auto it = clusters.find(c.topology);
      if (it == clusters.end()) {
        try {
          it = clusters.emplace(c.topology, topo::load_cluster_by_name_or_path(c.topology)).first;
        } catch (const InputError& e) {
          // No such file and no shipped name: the case file is wrong, at its key. A topology file that
          // exists but is malformed keeps its own error, which names that file and the place in it.
          if (e.file() != c.topology || e.json_path() != "$") throw;
          c.topology_at->fail(fmt::format("'{}': {}", c.topology, e.message()));
        }
      }
      const topo::Cluster& cluster = it->second;
      StepPrediction step;
      row.roofline = predict(c, cluster, roofline, model::PricingChoice{model::PricingMode::roofline, ""}, &step);
      if (row.roofline && c.category == "end_to_end") {
        row.roofline_mfu = step.mfu;
        row.roofline_step_s = step.step_s;
      }
      // A profile of the case's device first, then one of the device whose kernels it runs (kernels_as),
      // as the default pricing chooses.
      std::vector<const model::Profile*> order;
      for (const model::Profile& p : profiles)
        if (p.device_model == cluster.device(0).name) order.push_back(&p);
      for (const model::Profile& p : profiles)
        if (p.device_model != cluster.device(0).name) order.push_back(&p);
      for (const model::Profile* candidate : order) {
        const model::Profile& p = *candidate;
        try {
          model::check_profile_device(p, cluster.device(0));
        } catch (const InputError&) {
          continue;  // another device's profile: not this case's
        }
        // A profile named with --profile also calibrates the links (as simulate --profile does); the
        // shipped profiles a default run picks price kernels only and leave the topology's links.
        topo::Cluster calibrated = cluster;
        if (!profiles_.empty()) model::apply_profile(p, calibrated);
        // Kernel cases are short bursts, as the profile's samples were timed; end-to-end cases price
        // their kernels as they run inside a step, in simulate().
        const model::CalibratedCostModel costs(p, model::KernelSetting::burst);
        row.profile = p.label;
        // End-to-end cases load the profile by name inside simulate(); the same file.
        row.calibrated = predict(
            c, calibrated, costs,
            profiles_.empty()
                ? model::PricingChoice{}
                : model::PricingChoice{model::PricingMode::profile, names[static_cast<std::size_t>(&p - profiles.data())]},
            &step);
        if (row.calibrated && c.category == "end_to_end") {
          row.calibrated_mfu = step.mfu;
          row.calibrated_step_s = step.step_s;
        }
        row.fitted = std::find(p.fitted_on.begin(), p.fitted_on.end(), c.id) != p.fitted_on.end();
        break;
      }
      if (!row.roofline) {
        row.status = "not modelled";
      } else if (!c.needs.empty()) {
        row.status = "partial";
      } else {
        row.status = "ok";
      }
      rows.push_back(std::move(row));
    }

    // The kernel models' errors on the profiles' own samples, fitted on all of them and leave one
    // model out (fit without model X, predict X).
    std::vector<KernelModelReport> kernel_models;
    if (reports_kernel_models())
      for (const model::Profile& p : profiles) kernel_models.push_back(kernel_model_report(p, !predictions_.empty()));
    std::string text;
    if (format == OutputFormat::json) {
      nlohmann::json doc = to_json(rows, in.label);
      nlohmann::json km = nlohmann::json::array();
      for (const KernelModelReport& r : kernel_models) km.push_back(r.json());
      doc["kernel_models"] = std::move(km);
      text = doc.dump(2) + "\n";
    } else {
      text = to_table(rows, in.label);
      for (const KernelModelReport& r : kernel_models) text += r.table();
    }
    if (!predictions_.empty()) {
      std::string csv =
          "profile,kernels,op,group,m,n,k,batch,bytes,rows,launches,measured_s,fitted_s,held_out_s,held_out_error_pct\n";
      for (const KernelModelReport& r : kernel_models)
        for (const std::string& line : r.predictions) csv += line;
      write_output_file(predictions_, csv, "--kernel-predictions");
    }
    if (output_.empty()) {
      io.out << text << std::flush;
    } else {
      write_output_file(output_, text);
    }
    return 0;
  }

 private:
  // The kernel models' errors on the profiles' own samples are reported with the GEMM cases, and not
  // with --id: they are the profiles' samples, not cases.
  bool reports_kernel_models() const { return (category_.empty() || category_ == "gemm") && ids_.empty(); }

  struct KernelModelReport {
    std::string profile;
    struct Part {
      std::string kind;
      int samples = 0;
      std::optional<double> in_sample_pct;
      std::vector<model::HeldOutError> held_out;
    };
    std::vector<Part> parts;
    std::vector<std::string> predictions;  // CSV lines of --kernel-predictions, when asked
    nlohmann::json json() const {
      nlohmann::json j{{"profile", profile}};
      for (const Part& p : parts) {
        nlohmann::json lomo = nlohmann::json::array();
        double sum = 0;
        int n = 0;
        for (const auto& e : p.held_out) {
          lomo.push_back({{"held_out", e.group}, {"samples", e.samples}, {"mape_pct", e.mape_pct},
                          {"max_abs_pct", e.max_abs_pct}});
          sum += e.mape_pct * e.samples;
          n += e.samples;
        }
        j[p.kind] = {{"samples", p.samples},
                     {"in_sample_mape_pct", p.in_sample_pct ? nlohmann::json(*p.in_sample_pct) : nlohmann::json(nullptr)},
                     {"leave_one_model_out", lomo},
                     {"leave_one_model_out_mape_pct", n ? nlohmann::json(sum / n) : nlohmann::json(nullptr)}};
      }
      return j;
    }
    std::string table() const {
      analysis::Table t({{"kernels", analysis::Align::left},
                         {"held out", analysis::Align::left},
                         {"samples", analysis::Align::right},
                         {"MAPE", analysis::Align::right},
                         {"max |err|", analysis::Align::right}});
      for (const Part& p : parts) {
        if (p.in_sample_pct)
          t.add_row({p.kind, "none (fitted on all)", std::to_string(p.samples), fmt::format("{:.1f}%", *p.in_sample_pct), ""});
        double sum = 0;
        int n = 0;
        for (const auto& e : p.held_out) {
          t.add_row({p.kind, e.group, std::to_string(e.samples), fmt::format("{:.1f}%", e.mape_pct),
                     fmt::format("{:.1f}%", e.max_abs_pct)});
          sum += e.mape_pct * e.samples;
          n += e.samples;
        }
        if (n) t.add_row({p.kind, "leave-one-model-out, all", std::to_string(n), fmt::format("{:.1f}%", sum / n), ""});
      }
      if (parts.empty()) return "";
      return fmt::format("\nkernel models of profile {} on its samples (error of the predicted timer reading, docs/calibration.md \"Timer resolution\"):\n", profile) + t.render();
    }
  };

  // One sample's line of --kernel-predictions. Numbers as the shortest text that reads back the same
  // double; an empty field where the value does not apply (a GEMM's bytes, a kernel never held out).
  struct PredictionLine {
    const std::string& profile;
    std::string_view kernels, op, group;
    std::array<double, 4> mnkb;          // m, n, k, batch (GEMMs)
    double bytes, rows, launches;        // small kernels
    double measured_s, fitted_s, held_out_s;
  };
  static std::string csv_line(const PredictionLine& l) {
    const auto number = [](double v) { return std::isfinite(v) ? fmt::format("{}", v) : std::string(); };
    std::string line = util::csv_field(l.profile) + ',' + util::csv_field(l.kernels) + ',' + util::csv_field(l.op) +
                       ',' + util::csv_field(l.group);
    for (double v : l.mnkb) line += ',' + number(v);
    for (double v : {l.bytes, l.rows, l.launches, l.measured_s, l.fitted_s, l.held_out_s,
                     100.0 * (l.held_out_s / l.measured_s - 1.0)})
      line += ',' + number(v);
    return line + '\n';
  }

  static KernelModelReport kernel_model_report(const model::Profile& p, bool predictions) {
    constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
    KernelModelReport r;
    r.profile = p.label;
    for (auto [family, name] :
         {std::pair{model::GemmFamily::sixteen_bit, "gemm"}, std::pair{model::GemmFamily::fp8, "gemm fp8"}}) {
      const std::optional<model::GemmModel>& gm = p.gemm_model_of(family);
      if (!gm) continue;
      const std::vector<model::GemmTiming> samples = model::gemm_timings(p, family);
      const std::vector<double> held = model::held_out_readings_gemm(samples, p.sm_count, gm->element_bytes);
      r.parts.push_back({name, gm->samples, gm->in_sample_mape_pct(), model::held_out_errors(samples, held)});
      if (predictions)
        for (std::size_t i = 0; i < samples.size(); ++i) {
          const model::GemmTiming& s = samples[i];
          r.predictions.push_back(csv_line({p.label, name, "gemm", s.group, {s.m, s.n, s.k, s.batch}, kNone, kNone,
                                            kNone, s.time_s, gm->sample_reading_s(s), held[i]}));
        }
    }
    if (!p.elementwise_models.empty()) {
      double sum = 0;
      int n = 0;
      for (const auto& [op, m] : p.elementwise_models) sum += m.in_sample_mape_pct * m.samples, n += m.samples;
      const std::vector<double> held =
          model::held_out_readings_small(p.elementwise, p.small_kernel_hbm_bound(), p.small_kernel_l2_bound());
      r.parts.push_back({"small kernels", n, n ? std::optional<double>(sum / n) : std::nullopt,
                         model::held_out_errors(p.elementwise, held)});
      if (predictions)
        for (std::size_t i = 0; i < p.elementwise.size(); ++i) {
          const model::SmallKernelTiming& s = p.elementwise[i];
          const auto it = p.elementwise_models.find(s.op);
          r.predictions.push_back(csv_line({p.label, "small kernels", s.op, s.group, {kNone, kNone, kNone, kNone},
                                            s.bytes, s.rows, static_cast<double>(s.kernels), s.time_s,
                                            it != p.elementwise_models.end() ? it->second.sample_reading_s(s) : kNone,
                                            held[i]}));
        }
    }
    return r;
  }

  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  }

  // MAPE over the rows with status ok, per category and overall; the profile's over the cases it
  // predicted, all and held out only.
  struct Mape {
    double sum = 0;
    int n = 0;
    void add(double e) {
      sum += std::abs(e);
      ++n;
    }
    nlohmann::json json() const { return n ? nlohmann::json(sum / n) : nlohmann::json(nullptr); }
    std::string text() const { return n ? fmt::format("{:.1f}% ({})", sum / n, n) : "-"; }
  };
  struct Summary {
    Mape roofline, profile, held_out, roofline_on_profile_cases;
  };
  static std::map<std::string, Summary> summarize(const std::vector<Row>& rows) {
    std::map<std::string, Summary> s;
    for (const Row& r : rows) {
      if (r.status == "not modelled") continue;
      // A partial case (it needs features the model lacks) is summarized on its own, out of the overall.
      std::vector<std::string> keys{r.c->category, "overall"};
      if (r.status == "partial") keys = {r.c->category + " (partial)"};
      // Issue 11 asks for the bus bandwidth right at every size decade: the collectives also by the
      // decade of their message size (in bytes: 1e04-1e05 B holds 8 KiB's neighbour 10 KiB and 64 KiB).
      if (r.c->category == "collective" && r.status == "ok" && r.c->bytes > 0) {
        const int decade = static_cast<int>(std::floor(std::log10(static_cast<double>(r.c->bytes))));
        keys.push_back(fmt::format("collective, 1e{:02d}-1e{:02d} B", decade, decade + 1));
        // Like with like: the measurements timed as fusesim prices them, by decade too, and each other
        // timing on its own (a host's per-call floor is not the collective's time).
        keys.push_back("collective, timed: " + r.c->timing);
        if (r.c->timing == "kernels")
          keys.push_back(fmt::format("collective, timed: kernels, 1e{:02d}-1e{:02d} B", decade, decade + 1));
      }
      for (const std::string& key : keys) {
        Summary& m = s[key];
        m.roofline.add(error_pct(*r.roofline, r.c->measured));
        if (r.calibrated) {
          m.profile.add(error_pct(*r.calibrated, r.c->measured));
          m.roofline_on_profile_cases.add(error_pct(*r.roofline, r.c->measured));
          if (!r.fitted) m.held_out.add(error_pct(*r.calibrated, r.c->measured));
        }
      }
    }
    return s;
  }

  static nlohmann::json to_json(const std::vector<Row>& rows, const std::string& label) {
    nlohmann::json doc;
    doc["cases_file"] = label;
    nlohmann::json arr = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json j;
      j["id"] = r.c->id;
      j["category"] = r.c->category;
      j["topology"] = r.c->topology;
      j["unit"] = r.c->unit;
      j["measured"] = r.c->measured;
      j["status"] = r.status;
      j["needs"] = r.c->needs;
      if (!r.c->note.empty()) j["note"] = r.c->note;
      j["source"] = r.c->source;
      if (r.c->category == "collective") j["timing"] = r.c->timing;
      j["roofline"] = r.roofline ? nlohmann::json(*r.roofline) : nlohmann::json(nullptr);
      j["roofline_error_pct"] =
          r.roofline ? nlohmann::json(error_pct(*r.roofline, r.c->measured)) : nlohmann::json(nullptr);
      if (!r.profile.empty()) {
        j["profile"] = r.profile;
        j["calibrated"] = r.calibrated ? nlohmann::json(*r.calibrated) : nlohmann::json(nullptr);
        j["calibrated_error_pct"] =
            r.calibrated ? nlohmann::json(error_pct(*r.calibrated, r.c->measured)) : nlohmann::json(nullptr);
        j["fitted_on"] = r.fitted;
      }
      if (r.roofline_mfu) {
        j["roofline_mfu"] = *r.roofline_mfu;
        j["calibrated_mfu"] = r.calibrated_mfu ? nlohmann::json(*r.calibrated_mfu) : nlohmann::json(nullptr);
        const auto measured = r.measured_mfu();
        j["measured_mfu"] = measured ? nlohmann::json(*measured) : nlohmann::json(nullptr);
      }
      if (r.roofline_step_s) {
        j["roofline_step_s"] = *r.roofline_step_s;
        j["calibrated_step_s"] = r.calibrated_step_s ? nlohmann::json(*r.calibrated_step_s) : nlohmann::json(nullptr);
        const auto measured = r.measured_step_s();
        j["measured_step_s"] = measured ? nlohmann::json(*measured) : nlohmann::json(nullptr);
      }
      arr.push_back(std::move(j));
    }
    doc["cases"] = std::move(arr);
    nlohmann::json mape = nlohmann::json::object();
    for (const auto& [key, s] : summarize(rows))
      mape[key] = {{"roofline", s.roofline.json()},
                   {"roofline_on_profile_cases", s.roofline_on_profile_cases.json()},
                   {"profile", s.profile.json()},
                   {"profile_held_out", s.held_out.json()},
                   {"cases", s.roofline.n}};
    doc["mape_pct"] = std::move(mape);
    doc["speedups"] = speedups_json(rows);
    const MfuRanking rank = rank_mfu(rows);
    if (rank.cases > 0) {
      const auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
      doc["end_to_end_mfu_spearman"] = {{"roofline", opt(rank.roofline)}, {"profile", opt(rank.profile)},
                                        {"cases", rank.cases}};
    }
    return doc;
  }

  // Published speed-ups of one schedule over another (issue 12: within 3 points): each case with
  // speedup_over against its base, measured ratio and predicted ratios, and their difference in
  // percentage points of the ratio.
  struct Speedup {
    const Row* row = nullptr;
    const Row* base = nullptr;
    double measured() const { return row->c->measured / base->c->measured; }
    std::optional<double> roofline() const { return ratio(row->roofline, base->roofline); }
    std::optional<double> profile() const { return ratio(row->calibrated, base->calibrated); }
    static std::optional<double> ratio(const std::optional<double>& a, const std::optional<double>& b) {
      if (!a || !b || *b <= 0.0) return std::nullopt;
      return *a / *b;
    }
  };
  static std::vector<Speedup> speedups(const std::vector<Row>& rows) {
    std::vector<Speedup> out;
    for (const Row& r : rows) {
      if (r.c->speedup_over.empty()) continue;
      for (const Row& b : rows)
        if (b.c->id == r.c->speedup_over) out.push_back({&r, &b});
    }
    return out;
  }
  static nlohmann::json speedups_json(const std::vector<Row>& rows) {
    nlohmann::json arr = nlohmann::json::array();
    const auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
    for (const Speedup& s : speedups(rows))
      arr.push_back({{"case", s.row->c->id}, {"over", s.base->c->id}, {"status", s.row->status},
                     {"measured", s.measured()}, {"roofline", opt(s.roofline())}, {"profile", opt(s.profile())}});
    return arr;
  }
  static std::string speedups_text(const std::vector<Row>& rows) {
    const std::vector<Speedup> all = speedups(rows);
    if (all.empty()) return "";
    analysis::Table t({{"speed-up", analysis::Align::left},
                       {"over", analysis::Align::left},
                       {"measured", analysis::Align::right},
                       {"roofline", analysis::Align::right},
                       {"points", analysis::Align::right},
                       {"profile", analysis::Align::right},
                       {"points", analysis::Align::right},
                       {"status", analysis::Align::left}});
    const auto x = [](const std::optional<double>& v) { return v ? fmt::format("{:.3f}x", *v) : "-"; };
    for (const Speedup& s : all) {
      const double m = s.measured();
      const auto pts = [m](const std::optional<double>& v) { return v ? fmt::format("{:+.1f}", (*v - m) * 100.0) : "-"; };
      t.add_row({s.row->c->id, s.base->c->id, x(m), x(s.roofline()), pts(s.roofline()), x(s.profile()),
                 pts(s.profile()), s.row->status});
    }
    return "\npublished speed-ups of one schedule over another (points: predicted minus measured ratio, x 100):\n" +
           t.render();
  }

  // Each end-to-end case's step time and MFU, measured and predicted (the profile's where one priced it,
  // else the roofline's), with their errors, and Spearman's rho of the MFUs over the cases.
  static std::string step_and_mfu_text(const std::vector<Row>& rows) {
    const MfuRanking rank = rank_mfu(rows);
    if (rank.cases == 0) return "";
    analysis::Table t({{"end-to-end case", analysis::Align::left},
                       {"measured step (s)", analysis::Align::right},
                       {"predicted", analysis::Align::right},
                       {"err %", analysis::Align::right},
                       {"measured MFU", analysis::Align::right},
                       {"roofline", analysis::Align::right},
                       {"profile", analysis::Align::right},
                       {"points", analysis::Align::right}});
    const auto pct = [](const std::optional<double>& v) { return v ? fmt::format("{:.1f}%", *v * 100.0) : "-"; };
    const auto sec = [](const std::optional<double>& v) { return v ? fmt::format("{:.4g}", *v) : "-"; };
    for (const Row& r : rows) {
      if (r.c->category != "end_to_end" || r.status != "ok" || !r.roofline_mfu || !r.measured_mfu()) continue;
      const Row::Prediction p = r.chosen();
      const std::optional<double>& step = p.step_s;
      const std::optional<double>& mfu = p.mfu;
      const std::optional<double> measured_step = r.measured_step_s(), measured_mfu = r.measured_mfu();
      t.add_row({r.c->id, sec(measured_step), sec(step),
                 step && measured_step ? fmt::format("{:+.1f}", error_pct(*step, *measured_step)) : "-",
                 pct(measured_mfu), pct(r.roofline_mfu), pct(r.calibrated_mfu),
                 mfu && measured_mfu ? fmt::format("{:+.1f}", (*mfu - *measured_mfu) * 100.0) : "-"});
    }
    const auto rho = [](const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : "-"; };
    return fmt::format(
        "\nstep time and MFU of the end-to-end cases (measured step = predicted step x predicted / measured metric; "
        "MFU by fusesim's FLOP count, measured = predicted MFU x measured / predicted throughput unless the case gives "
        "MFU; predicted and points: the profile's, else the roofline's):\n{}Spearman rank correlation, measured vs "
        "predicted MFU, over {} cases: roofline {}, profile {}\n",
        t.render(), rank.cases, rho(rank.roofline), rho(rank.profile));
  }

  static std::string to_table(const std::vector<Row>& rows, const std::string& label) {
    analysis::Table t({{"case", analysis::Align::left},
                       {"unit", analysis::Align::left},
                       {"measured", analysis::Align::right},
                       {"roofline", analysis::Align::right},
                       {"err %", analysis::Align::right},
                       {"profile", analysis::Align::right},
                       {"err %", analysis::Align::right},
                       {"fit", analysis::Align::left},
                       {"status", analysis::Align::left}});
    std::string needs;
    const auto num = [](double v) { return std::abs(v) < 10 ? fmt::format("{:.3f}", v) : fmt::format("{:.1f}", v); };
    for (const Row& r : rows) {
      const double m = r.c->measured;
      t.add_row({r.c->id, r.c->unit, num(m), r.roofline ? num(*r.roofline) : "-",
                 r.roofline ? fmt::format("{:+.1f}", error_pct(*r.roofline, m)) : "-",
                 r.calibrated ? num(*r.calibrated) : "-",
                 r.calibrated ? fmt::format("{:+.1f}", error_pct(*r.calibrated, m)) : "-",
                 r.calibrated ? (r.fitted ? "fitted" : "held-out") : "", r.status});
      if (!r.c->needs.empty()) needs += fmt::format("  {}: needs {}\n", r.c->id, join(r.c->needs));
    }
    analysis::Table s({{"category", analysis::Align::left},
                       {"roofline MAPE", analysis::Align::right},
                       {"roofline, profile's cases", analysis::Align::right},
                       {"profile MAPE", analysis::Align::right},
                       {"profile, held-out", analysis::Align::right}});
    for (const auto& [key, m] : summarize(rows))
      s.add_row({key, m.roofline.text(), m.roofline_on_profile_cases.text(), m.profile.text(), m.held_out.text()});
    return fmt::format("validation cases: {}\n\n", label) + t.render() +
           (needs.empty() ? ""
                          : "\nfeatures the model lacks (partial cases are kept out of the overall MAPE):\n" + needs) +
           "\nmean absolute percentage error (cases):\n" + s.render() + step_and_mfu_text(rows) + speedups_text(rows);
  }

  std::string cases_ = "published";
  std::vector<std::string> profiles_;
  std::string category_;
  std::vector<std::string> ids_;  // --id: substrings of the case ids to run
  std::string format_ = "table";
  std::string output_;
  std::string predictions_;  // --kernel-predictions
  bool roofline_ = false;
};

}  // namespace

void check_validation_cases(const JsonDocument& doc) { read_cases(doc); }

std::unique_ptr<Command> make_validate_command() { return std::make_unique<ValidateCommand>(); }

}  // namespace fusesim::cli
