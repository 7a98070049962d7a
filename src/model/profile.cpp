// Reading a calibration profile strictly, fitting what its "fitted" section leaves out, and applying
// its fitted communication parameters to a cluster. Schema and derivations: docs/calibration.md.
#include "fusesim/model/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <stdexcept>

#include "fusesim/model/calibration_fit.hpp"
#include "fusesim/model/pricing.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/hex_float.hpp"

namespace fusesim::model {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kMaxDim = std::int64_t{1} << 40;

// The small kernels a schedule emits (ElementwiseKernel::op) and their backward kernels. "layernorm" is
// the fused norm as vidur timed it (vLLM's RMSNorm and LayerNorm kernels, inference shapes); the
// norms a training graph emits are the kernel its framework ran (model::norm_op): "layernorm_train"
// (Apex's persistent FastLayerNorm that Megatron-LM runs, TransformerEngine's), "layernorm_apex_legacy"
// (Apex's older FusedLayerNorm), "layernorm_eager" (PyTorch's native kernels; vidur's phi-2 timed
// them). Each is priced by its own samples where a profile has them and by the op it stands in for
// where not (small_kernel_model).
const std::vector<std::string> kSmallOps{"layernorm",     "layernorm_bwd", "rope",          "rope_bwd",
                                         "swiglu",        "swiglu_bwd",    "gelu",          "gelu_bwd",
                                         "add",           "embedding",     "embedding_bwd", "cross_entropy",
                                         "cross_entropy_bwd", "softmax",   "adam",          "copy",
                                         "layernorm_eager",   "grad_norm", "grad_scale", "layernorm_train",
                                         "layernorm_train_bwd", "layernorm_apex_legacy", "layernorm_apex_legacy_bwd",
                                         "layernorm_eager_bwd"};
// The forward op of a backward kernel's op ("layernorm" for "layernorm_bwd"); empty for a forward op.
std::string forward_op_of(const std::string& op) {
  constexpr std::string_view kBwd = "_bwd";
  return op.size() > kBwd.size() && op.ends_with(kBwd) ? op.substr(0, op.size() - kBwd.size()) : std::string{};
}

// The forward op a training norm kernel stands in for where a profile has no samples of it: the older
// Apex kernel for the persistent one, either of those for the generic fused norm; empty for others.
std::string stand_in_of(const std::string& forward_op) {
  if (forward_op == "layernorm_apex_legacy") return "layernorm_train";
  if (forward_op == "layernorm_train" || forward_op == "layernorm_eager") return "layernorm";
  return {};
}

// The ops whose models price `op` in turn: the op; for a backward op its forward op, then the chain of
// the backward op of what that forward op stands in for; for a forward op, the chain of what it
// stands in for (layernorm_train_bwd: itself, layernorm_train, layernorm_bwd, layernorm).
std::vector<std::string> fallback_chain(const std::string& op) {
  std::vector<std::string> chain{op};
  const std::string forward = forward_op_of(op);
  if (!forward.empty()) chain.push_back(forward);
  const std::string stand_in = stand_in_of(forward.empty() ? op : forward);
  if (!stand_in.empty())
    for (std::string& next : fallback_chain(forward.empty() ? stand_in : stand_in + "_bwd"))
      chain.push_back(std::move(next));
  return chain;
}

// A fused multi-tensor optimizer launches a kernel per chunk of tensors: 68-92 for the 1-2 B parameter
// steps measured on an H100 (tools/microbench/train_step.py). More than 4,096 in one timed region is
// not a kernel sample.
constexpr std::int64_t kMaxKernelsPerSample = 4096;
constexpr double kMaxHbmPeakBytesPerS = 1e15;  // 1 PB/s, as a topology's bandwidths
constexpr double kMaxL2Bytes = 1e10;           // 10 GB: two orders above any GPU's L2 today
constexpr double kMaxKernelGapS = 1e-4;        // 100 us: fifty times the gaps measured between kernels
// A timer that cannot tell kernels apart below a millisecond cannot time a kernel at all.
constexpr double kMaxTimerResolutionS = 1e-3;

const std::vector<std::string> kOps{"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "p2p"};

// Every sample has its own source or relies on the file's.
void read_source(const JsonObject& o, bool file_has_source) {
  if (o.has("source")) {
    o.string("source");
  } else if (!file_has_source) {
    o.fail("no \"source\" here and none in provenance.source: every figure names where it came from");
  }
}

// Exactly one of two keys.
void require_one_of(const JsonObject& o, std::string_view a, std::string_view b) {
  if (o.has(a) == o.has(b)) o.fail(fmt::format("give exactly one of \"{}\" and \"{}\"", a, b));
}

double positive(const JsonObject& o, std::string_view key) {
  const JsonValue v = o.at(key);
  const double x = v.as_number(0.0, kInf);
  if (!(x > 0.0)) v.fail("must be positive");
  return x;
}

// Optional "resolution_s": the step the sample's timer truncates each kernel's duration to.
double timer_resolution_s(const JsonObject& o) {
  if (!o.has("resolution_s")) return 0.0;
  const JsonValue v = o.at("resolution_s");
  const double x = v.as_number(0.0, kMaxTimerResolutionS);
  if (!(x > 0.0)) v.fail("must be positive (leave it out for a timer that reads exact times)");
  return x;
}

double attention_sample_flops(const ProfileAttention& a) {
  // FlashAttention's benchmark (benchmarks/benchmark_flash_attention.py, flops()): forward
  // 4 b h s^2 d, halved when causal; backward 2.5x; forward+backward 3.5x.
  double f = 4.0 * static_cast<double>(a.batch) * static_cast<double>(a.heads) * static_cast<double>(a.seq) *
             static_cast<double>(a.seq) * static_cast<double>(a.head_dim);
  if (a.causal) f *= 0.5;
  if (a.pass == ProfilePass::backward) f *= 2.5;
  if (a.pass == ProfilePass::forward_backward) f *= 3.5;
  return f;
}

std::string normalized(const std::string& s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

void read_fitted(const JsonObject& f, Profile& p) {
  if (auto c = f.find("collectives")) {
    const JsonObject cs = c->as_object();
    for (const std::string& op : cs.keys()) {
      if (std::find(kOps.begin(), kOps.end(), op) == kOps.end())
        cs.at(op).fail(
            fmt::format("unknown collective '{}' (one of all_gather, reduce_scatter, all_reduce, "
                        "all_to_all, p2p)",
                        op));
      const JsonObject o = cs.object(op);
      FittedCollective fc;
      fc.ranks = static_cast<int>(o.integer("ranks", 2, 1 << 24));
      fc.nodes = static_cast<int>(o.integer_or("nodes", 1, 1 << 20, 1));
      fc.latency_s = o.number("latency_s", 0.0, 1.0);
      fc.busbw_bytes_per_s = positive(o, "busbw_bytes_per_s");
      fc.samples = static_cast<int>(o.integer_or("samples", 0, 1 << 30, 0));
      fc.max_rel_error = o.number_or("max_rel_error", 0.0, kInf, 0.0);
      o.string_or("source", "");
      o.finish();
      p.fitted_collectives[op] = fc;
    }
    cs.finish();
  }
  if (auto c = f.find("contention")) {
    const JsonObject o = c->as_object();
    if (o.has("sm_kernel_slowdown_per_sm"))
      p.sm_kernel_slowdown_per_sm = o.number("sm_kernel_slowdown_per_sm", 0.0, 1.0);
    if (o.has("copy_engine_slowdown")) p.copy_engine_slowdown = o.number("copy_engine_slowdown", 1.0, 100.0);
    if (o.has("sm_wave_share")) p.sm_wave_share = o.number("sm_wave_share", 0.0, 2.0);
    o.finish();
  }
  if (auto k = f.find("kernel_models")) {
    const JsonObject o = k->as_object();
    Profile::StoredKernelFits fits;
    fits.inputs_fnv1a64 = o.string("inputs_fnv1a64");
    const auto parameters = [](const JsonObject& model) {
      const JsonArray a = model.array("parameters");
      a.require_size(7, 7);
      std::vector<double> x;
      for (std::size_t i = 0; i < a.size(); ++i) x.push_back(a.at(i).as_number());
      return x;
    };
    for (auto [key, slot] : {std::pair{"gemm", &fits.gemm}, std::pair{"gemm_fp8", &fits.gemm_fp8}}) {
      if (auto g = o.find(key)) {
        const JsonObject go = g->as_object();
        *slot = parameters(go);
        go.finish();
      }
    }
    if (auto e = o.find("elementwise")) {
      const JsonObject ops = e->as_object();
      for (const std::string& op : ops.keys()) {
        const JsonObject m = ops.object(op);
        fits.elementwise[op] = {parameters(m), m.boolean_or("bounded", false)};
        m.finish();
      }
      ops.finish();
    }
    o.string_or("source", "");
    o.finish();
    p.stored_kernel_fits = std::move(fits);
  }
  if (f.has("hbm_bytes_per_s")) p.hbm_bytes_per_s = positive(f, "hbm_bytes_per_s");
  if (f.has("gemm_peak_fraction")) {
    const double x = f.number("gemm_peak_fraction", 0.0, 1.0);
    if (!(x > 0.0)) f.at("gemm_peak_fraction").fail("must be in (0, 1]");
    p.gemm_peak_fraction = x;
  }
  f.finish();
}

// Fits what "fitted" did not give, from the samples, with the shared fit library. A fit that fails
// (too few samples of a group) leaves the parameter out; the samples stay usable on their own.
void fit_missing(const Profile& in, Profile& p, const JsonObject& root) {
  // Collectives: per op, the single-node group with the most ranks (what apply_profile uses), else the
  // group with the most ranks, then nodes.
  for (const std::string& op : kOps) {
    if (p.fitted_collectives.count(op)) continue;
    std::map<std::pair<int, int>, std::vector<CollectiveSample>> groups;
    for (const ProfileCollective& c : in.collectives)
      if (c.op == op) groups[{c.nodes, c.ranks}].push_back({c.op, c.ranks, c.nodes, c.bytes, c.time_s});
    const std::vector<CollectiveSample>* best = nullptr;
    for (const auto& [key, samples] : groups) {
      if (samples.size() < 2) continue;
      const bool single = key.first == 1;
      if (!best) {
        best = &samples;
        continue;
      }
      const bool best_single = best->front().nodes == 1;
      if (single != best_single) {
        if (single) best = &samples;
        continue;
      }
      if (std::make_pair(samples.front().ranks, samples.front().nodes) >
          std::make_pair(best->front().ranks, best->front().nodes))
        best = &samples;
    }
    if (!best) {
      if (groups.empty()) continue;
      const auto& [key, samples] = *groups.begin();
      root.at("collectives")
          .fail(fmt::format(
              "cannot fit {}: {} sample(s) of {} ranks on {} node(s); at least 2 sizes are needed to fit latency and "
              "bandwidth (or give fitted.collectives.{})",
              op, samples.size(), key.second, key.first, op));
    }
    try {
      const CollectiveFit fit = fit_collective(*best);
      p.fitted_collectives[op] = {best->front().ranks,   best->front().nodes, fit.latency_s,
                                  fit.busbw_bytes_per_s, fit.samples,         fit.max_rel_error};
    } catch (const std::invalid_argument& e) {
      root.at("collectives").fail(fmt::format("cannot fit {}: {}", op, e.what()));
    }
  }
  if (!p.sm_kernel_slowdown_per_sm || !p.copy_engine_slowdown) {
    std::vector<ContentionSample> samples;
    for (const ProfileContention& c : in.contention) samples.push_back({c.aggressor, c.comm_sms, c.slowdown});
    if (!samples.empty()) {
      try {
        const ContentionFit fit = fit_contention(samples);
        if (!p.sm_kernel_slowdown_per_sm) p.sm_kernel_slowdown_per_sm = fit.sm_kernel_slowdown_per_sm;
        if (!p.copy_engine_slowdown) p.copy_engine_slowdown = fit.copy_engine_slowdown;
      } catch (const std::invalid_argument& e) {
        root.at("contention").fail(fmt::format("cannot fit: {}", e.what()));
      }
    }
  }
}

}  // namespace

std::optional<GemmFamily> gemm_family(topo::Dtype dtype) {
  if (dtype == topo::Dtype::bf16 || dtype == topo::Dtype::fp16) return GemmFamily::sixteen_bit;
  if (dtype == topo::Dtype::fp8) return GemmFamily::fp8;
  return std::nullopt;
}

std::vector<GemmTiming> gemm_timings(const Profile& profile, GemmFamily family) {
  std::vector<GemmTiming> out;
  for (const ProfileGemm& g : profile.gemm) {
    if (gemm_family(g.dtype) != family) continue;
    const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) *
                         static_cast<double>(g.batch);
    out.push_back({static_cast<double>(g.m), static_cast<double>(g.n), static_cast<double>(g.k),
                   static_cast<double>(g.batch), flops / g.flops_per_s, g.group, g.resolution_s});
  }
  return out;
}

// Bump when the fit's search or its model changes, so that parameters stored for the old fit are no
// longer taken (the refit test would fail first: tests/model/test_profile.cpp).
constexpr int kKernelFitVersion = 1;

std::string kernel_fit_inputs_fnv1a64(const Profile& p) {
  // Hex floats: every bit of every value the fits read, in the order they read them.
  // Lines of "{:a}" fields (append_hex_float writes them the same, without formatting each).
  std::string text = fmt::format("kernel fits v{} sm {} hbm {:a} l2 {:a}\n", kKernelFitVersion, p.sm_count,
                                 p.small_kernel_hbm_bound(), p.small_kernel_l2_bound());
  const auto fields = [&](std::initializer_list<double> values) {
    for (double v : values) {
      text += ' ';
      append_hex_float(text, v);
    }
  };
  for (GemmFamily family : {GemmFamily::sixteen_bit, GemmFamily::fp8})
    for (const GemmTiming& g : gemm_timings(p, family)) {
      text += family == GemmFamily::fp8 ? "gemm8" : "gemm16";
      fields({g.m, g.n, g.k, g.batch, g.time_s, g.resolution_s});
      text += '\n';
    }
  for (const SmallKernelTiming& e : p.elementwise) {
    text += e.op;
    fields({e.bytes, e.rows, e.time_s});
    text += ' ';
    text += std::to_string(e.kernels);
    fields({e.resolution_s});
    text += '\n';
  }
  return fnv1a64_hex(text);
}

const SmallKernelModel* small_kernel_model(const Profile& p, const std::string& op) {
  const auto find = [&](const std::string& name) -> const SmallKernelModel* {
    const auto it = p.elementwise_models.find(name);
    return it == p.elementwise_models.end() ? nullptr : &it->second;
  };
  // A backward kernel reads what its forward reads plus the gradient, and its bytes say so; a training
  // norm kernel does the work of the norm kernels it stands in for.
  for (const std::string& name : fallback_chain(op))
    if (const auto* m = find(name)) return m;
  return find("add");
}

nlohmann::ordered_json kernel_fits_json(const Profile& p) {
  nlohmann::ordered_json out;
  out["inputs_fnv1a64"] = kernel_fit_inputs_fnv1a64(p);
  out["source"] = "the parameters fitted to this profile's gemm and elementwise samples, written by `fusesim "
                  "calibrate kernel-fits` (docs/calibration.md, \"Stored kernel fits\")";
  if (p.gemm_model) out["gemm"] = {{"parameters", p.gemm_model->parameters}};
  if (p.gemm_model_fp8) out["gemm_fp8"] = {{"parameters", p.gemm_model_fp8->parameters}};
  nlohmann::ordered_json ops = nlohmann::ordered_json::object();
  for (const auto& [op, m] : p.elementwise_models)
    if (!m.parameters.empty()) ops[op] = {{"parameters", m.parameters}, {"bounded", m.bounded}};
  if (!ops.empty()) out["elementwise"] = std::move(ops);
  return out;
}

namespace {

// The kernel models of docs/calibration.md, "Kernel models": fitted once when the profile is read
// (a sweep reads each profile once). Too few samples: no model, and the roofline prices that kernel.
// Where fitted.kernel_models holds the parameters a fit found for exactly these samples, the models
// are built from them without the search (the same models: tests/model/test_profile.cpp refits every
// shipped profile and compares).
void fit_kernel_models(Profile& p, const JsonObject& root, KernelFits mode) {
  const Profile::StoredKernelFits* stored =
      mode == KernelFits::stored_when_current && p.stored_kernel_fits &&
              p.stored_kernel_fits->inputs_fnv1a64 == kernel_fit_inputs_fnv1a64(p)
          ? &*p.stored_kernel_fits
          : nullptr;
  p.kernel_models_from_stored_fits = stored != nullptr;
  // fp8 GEMMs (e4m3 operands, one byte each) run other kernels at twice the tensor-core rate: a model
  // of their own, from their own samples.
  for (auto [family, slot, element_bytes] :
       {std::tuple{GemmFamily::sixteen_bit, &p.gemm_model, 2.0}, std::tuple{GemmFamily::fp8, &p.gemm_model_fp8, 1.0}}) {
    const std::vector<GemmTiming> gemm = gemm_timings(p, family);
    if (gemm.size() < 8) continue;
    const auto& kept = stored == nullptr ? std::nullopt : (family == GemmFamily::fp8 ? stored->gemm_fp8 : stored->gemm);
    try {
      *slot = kept ? gemm_model_from_parameters(*kept, gemm, p.sm_count, element_bytes)
                   : fit_gemm_model(gemm, p.sm_count, element_bytes);
      // Stored parameters edited by hand, with the samples left as they were, must still price.
      if (kept && !(*slot)->prices_every_sample())
        root.at("fitted").fail(fmt::format("fitted.kernel_models.{}: the stored parameters price no sample",
                                           family == GemmFamily::fp8 ? "gemm_fp8" : "gemm"));
    } catch (const std::invalid_argument& e) {
      root.at("gemm").fail(fmt::format("cannot fit the {} GEMM model: {}",
                                       family == GemmFamily::fp8 ? "fp8" : "16-bit", e.what()));
    }
  }
  std::map<std::string, std::vector<SmallKernelTiming>> by_op;
  for (const SmallKernelTiming& s : p.elementwise) by_op[s.op].push_back(s);
  for (const auto& [op, samples] : by_op) {
    if (samples.size() < 3) continue;
    const std::pair<std::vector<double>, bool>* kept = nullptr;
    if (stored != nullptr)
      if (const auto it = stored->elementwise.find(op); it != stored->elementwise.end()) kept = &it->second;
    try {
      p.elementwise_models[op] =
          kept != nullptr ? small_kernel_model_from_parameters(kept->first, kept->second, samples,
                                                               p.small_kernel_hbm_bound(), p.small_kernel_l2_bound())
              : fit_small_kernel_model(samples, p.small_kernel_hbm_bound(), p.small_kernel_l2_bound());
      if (kept != nullptr && !std::isfinite(p.elementwise_models[op].in_sample_mape_pct))
        root.at("fitted").fail(
            fmt::format("fitted.kernel_models.elementwise.{}: the stored parameters price no sample", op));
    } catch (const std::invalid_argument& e) {
      root.fail(fmt::format("cannot fit the small-kernel model of '{}': {}", op, e.what()));
    }
  }
  // Ops of one or two samples scale the model that would price them without (scaled_small_kernel_model),
  // shorter fallback chains first: every op an op falls back to has a shorter chain, so a `_bwd` op of
  // few samples scales its forward op's scaled model, the older Apex norm the persistent one's.
  std::vector<std::pair<std::size_t, std::string>> few;
  for (const auto& [op, samples] : by_op)
    if (samples.size() < 3) few.emplace_back(fallback_chain(op).size(), op);
  std::sort(few.begin(), few.end());
  for (const auto& [length, op] : few) {
    const SmallKernelModel* base = small_kernel_model(p, op);
    if (base == nullptr) continue;  // nothing to scale: the roofline prices the op
    try {
      p.elementwise_models[op] = scaled_small_kernel_model(*base, by_op.at(op));
    } catch (const std::invalid_argument& e) {
      root.fail(fmt::format("cannot scale a small-kernel model to the samples of '{}': {}", op, e.what()));
    }
  }
}

// slowdown - 1 = share x (wave ratio - 1) through the origin, least squares over the sm_kernel
// samples that give the GEMM's CTA count: the waves it needs on the SMs communication leaves, over the
// waves it needs alone. nullopt when no sample gives ctas.
std::optional<double> fit_sm_wave_share(const Profile& p) {
  double xy = 0.0, xx = 0.0;
  for (const ProfileContention& c : p.contention) {
    if (c.aggressor != "sm_kernel" || c.ctas <= 0 || c.comm_sms >= p.sm_count) continue;
    const double x = wave_ratio(c.ctas, p.sm_count, c.comm_sms) - 1.0;
    xy += x * (c.slowdown - 1.0);
    xx += x * x;
  }
  if (xx <= 0.0) return std::nullopt;
  return std::clamp(xy / xx, 0.0, 2.0);
}

}  // namespace

Profile parse_profile(const JsonDocument& doc, KernelFits kernel_fits) {
  const JsonObject root = doc.root();
  Profile p;
  p.label = doc.file();
  const JsonValue schema = root.at("schema");
  if (schema.as_string() != "fusesim.calibration")
    schema.fail(
        fmt::format("'{}' is not a calibration profile (expected \"fusesim.calibration\")", schema.as_string()));
  const JsonValue version = root.at("schema_version");
  if (version.as_integer(0, 1000000) != 1)
    version.fail(fmt::format("schema version {} is not supported (this fusesim reads version 1)",
                             version.as_integer(0, 1000000)));

  const JsonObject device = root.object("device");
  p.device_name = device.string("name");
  p.sm_count = static_cast<int>(device.integer("sm_count", 1, 1000000));
  p.device_model = device.string_or("model", "");
  if (device.has("hbm_bandwidth_bytes_per_s")) {
    const JsonValue v = device.at("hbm_bandwidth_bytes_per_s");
    p.hbm_peak_bytes_per_s = v.as_sourced(0.0, kMaxHbmPeakBytesPerS);
    if (!(p.hbm_peak_bytes_per_s->value > 0)) v.fail("must be positive");
  }
  if (device.has("l2_bytes")) {
    const JsonValue v = device.at("l2_bytes");
    p.l2_bytes = v.as_sourced(0.0, kMaxL2Bytes);
    if (!(p.l2_bytes->value > 0)) v.fail("must be positive");
  }
  if (auto f = device.find("step_rate_fraction")) {
    const JsonObject kinds = f->as_object();
    for (auto [key, slot] : {std::pair{"gemm", &p.step_rate_fraction.gemm},
                             std::pair{"attention", &p.step_rate_fraction.attention},
                             std::pair{"elementwise", &p.step_rate_fraction.elementwise}}) {
      if (!kinds.has(key)) continue;
      const JsonValue v = kinds.at(key);
      *slot = v.as_sourced(0.0, 1.0);
      // Below a half no measured step came near: a typo (a percentage, an inverse) rather than a device.
      if (!((*slot)->value >= 0.5)) v.fail("must be between 0.5 and 1");
    }
    kinds.finish();
  }
  if (device.has("kernel_gap_s")) p.kernel_gap_s = device.at("kernel_gap_s").as_sourced(0.0, kMaxKernelGapS);
  if (auto f = device.find("gemm_misaligned_peak_fraction")) {
    const JsonObject cases = f->as_object();
    for (auto [key, slot] : {std::pair{"under_16_bytes", &p.gemm_misaligned_peak_fraction.under_16_bytes},
                             std::pair{"under_4_bytes", &p.gemm_misaligned_peak_fraction.under_4_bytes}}) {
      if (!cases.has(key)) continue;
      const JsonValue v = cases.at(key);
      *slot = v.as_sourced(0.0, 1.0);
      if (!((*slot)->value > 0)) v.fail("must be positive");
    }
    cases.finish();
  }
  device.finish();

  const JsonObject prov = root.object("provenance");
  p.kind = prov.choice("kind", {"measured", "published", "synthetic"});
  p.machine = prov.string("machine");
  p.date = prov.string("date");
  p.source = prov.string_or("source", "");
  for (const char* key : {"driver", "cuda", "tool", "notes"}) prov.string_or(key, "");
  // How tools/microbench timed the kernels (docs/microbench.md, "Power"): informative, checked.
  prov.choice_or("timing", {"burst", "sustained"}, "burst");
  if (auto libs = prov.find("libraries")) {
    const JsonObject l = libs->as_object();
    for (const std::string& k : l.keys()) l.string(k);
    l.finish();
  }
  p.estimate = prov.boolean_or("estimate", false);
  if (auto f = prov.find("fitted_on")) {
    const JsonArray a = f->as_array();
    for (std::size_t i = 0; i < a.size(); ++i) p.fitted_on.push_back(a.at(i).as_string());
  }
  prov.finish();
  const bool file_source = !p.source.empty();

  if (auto g = root.find("gemm")) {
    const JsonArray a = g->as_array();
    for (std::size_t i = 0; i < a.size(); ++i) {
      const JsonObject o = a.at(i).as_object();
      ProfileGemm s;
      s.dtype = topo::parse_dtype(o.at("dtype"));
      s.m = o.integer("m", 1, kMaxDim);
      s.n = o.integer("n", 1, kMaxDim);
      s.k = o.integer("k", 1, kMaxDim);
      s.batch = o.integer_or("batch", 1, kMaxDim, 1);
      require_one_of(o, "time_s", "tflops");
      const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) *
                           static_cast<double>(s.batch);
      s.flops_per_s = o.has("tflops") ? positive(o, "tflops") * 1e12 : flops / median_time_s(o, "time_s");
      if (o.has("resolution_s")) {
        if (o.has("tflops")) o.at("resolution_s").fail("a timer's resolution goes with \"time_s\", not \"tflops\"");
        s.resolution_s = timer_resolution_s(o);
      }
      if (o.has("group")) s.group = o.string("group");
      read_source(o, file_source);
      o.finish();
      p.gemm.push_back(s);
    }
  }
  if (auto g = root.find("attention")) {
    const JsonArray a = g->as_array();
    for (std::size_t i = 0; i < a.size(); ++i) {
      const JsonObject o = a.at(i).as_object();
      ProfileAttention s;
      s.dtype = topo::parse_dtype(o.at("dtype"));
      const std::string pass = o.choice("pass", {"forward", "backward", "forward_backward"});
      s.pass = pass == "forward"    ? ProfilePass::forward
               : pass == "backward" ? ProfilePass::backward
                                    : ProfilePass::forward_backward;
      s.causal = o.boolean("causal");
      s.batch = o.integer("batch", 1, kMaxDim);
      s.heads = o.integer("heads", 1, kMaxDim);
      s.kv_heads = o.integer_or("kv_heads", 1, kMaxDim, s.heads);
      s.seq = o.integer("seq", 1, kMaxDim);
      s.head_dim = o.integer("head_dim", 1, 100000);
      require_one_of(o, "time_s", "tflops");
      s.flops_per_s =
          o.has("tflops") ? positive(o, "tflops") * 1e12 : attention_sample_flops(s) / median_time_s(o, "time_s");
      read_source(o, file_source);
      o.finish();
      p.attention.push_back(s);
    }
  }
  std::vector<BandwidthSample> bandwidth;  // copies: what fits the streaming HBM bandwidth
  for (const char* section : {"elementwise", "copy"}) {
    if (auto g = root.find(section)) {
      const JsonArray a = g->as_array();
      const bool copy = std::string(section) == "copy";
      for (std::size_t i = 0; i < a.size(); ++i) {
        const JsonObject o = a.at(i).as_object();
        SmallKernelTiming s;
        s.op = copy ? "copy" : o.choice("op", kSmallOps);
        // A copy reads and writes each byte: its HBM traffic is twice its size.
        s.bytes = (copy ? 2.0 : 1.0) * positive(o, "bytes");
        if (o.has("rows")) s.rows = static_cast<double>(o.integer("rows", 1, kMaxDim));
        if (!copy && o.has("kernels")) s.kernels = static_cast<int>(o.integer("kernels", 1, kMaxKernelsPerSample));
        s.time_s = median_time_s(o, "time_s");
        if (!copy) s.resolution_s = timer_resolution_s(o);
        if (o.has("group")) s.group = o.string("group");
        if (copy) bandwidth.push_back({s.bytes, s.time_s});
        read_source(o, file_source);
        o.finish();
        p.elementwise.push_back(s);
      }
    }
  }
  if (auto g = root.find("contention")) {
    const JsonArray a = g->as_array();
    for (std::size_t i = 0; i < a.size(); ++i) {
      const JsonObject o = a.at(i).as_object();
      ProfileContention s;
      topo::parse_dtype(o.at("dtype"));
      // The GEMM's shape describes the measurement; a published figure may not give it.
      for (const char* d : {"m", "n", "k"}) o.integer_or(d, 1, kMaxDim, 1);
      s.ctas = static_cast<int>(o.integer_or("ctas", 1, 1 << 30, 0));
      s.aggressor = o.choice("aggressor", {"sm_kernel", "copy_engine"});
      if (s.aggressor == "sm_kernel") {
        s.comm_sms = static_cast<int>(o.integer("comm_sms", 1, 1000000));
      } else if (o.has("comm_sms")) {
        o.at("comm_sms").fail("a copy-engine aggressor holds no SMs");
      }
      if (o.has("slowdown")) {
        if (o.has("alone_s") || o.has("beside_s"))
          o.fail("give \"slowdown\" or \"alone_s\" and \"beside_s\", not both");
        s.slowdown = positive(o, "slowdown");
      } else {
        s.slowdown = median_time_s(o, "beside_s") / median_time_s(o, "alone_s");
      }
      read_source(o, file_source);
      o.finish();
      p.contention.push_back(s);
    }
  }
  if (auto g = root.find("collectives")) {
    const JsonArray a = g->as_array();
    for (std::size_t i = 0; i < a.size(); ++i) {
      const JsonObject o = a.at(i).as_object();
      ProfileCollective s;
      s.op = o.choice("op", kOps);
      s.ranks = static_cast<int>(o.integer("ranks", 2, 1 << 24));
      s.nodes = static_cast<int>(o.integer_or("nodes", 1, 1 << 20, 1));
      if (s.nodes > s.ranks) o.at("nodes").fail("more nodes than ranks");
      s.bytes = positive(o, "bytes");
      require_one_of(o, "time_s", "busbw_GBps");
      if (o.has("time_s")) {
        s.time_s = median_time_s(o, "time_s");
      } else {
        // busbw = bytes x factor / time (nccl-tests doc/PERFORMANCE.md), GB = 1e9.
        s.time_s = s.bytes * bus_factor(s.op, s.ranks) / (positive(o, "busbw_GBps") * 1e9);
      }
      read_source(o, file_source);
      o.finish();
      p.collectives.push_back(s);
    }
  }
  if (auto g = root.find("stream_wait")) {
    const JsonObject o = g->as_object();
    const double hops = static_cast<double>(o.integer("hops", 1, 1000000));
    // Noise can make the two-stream chain the faster one; a wait is never negative.
    p.stream_wait_s = std::max(0.0, (median_time_s(o, "two_streams_s") - median_time_s(o, "one_stream_s")) / hops);
    // The topology's own bound on stream_wait_s (topo::kMaxStreamWaitS): beyond it the chain measured
    // something else (a stalled host, a missing wait_stream) than an event hand-off.
    if (*p.stream_wait_s > topo::kMaxStreamWaitS)
      g->fail(fmt::format("the two-stream chain takes {:.4g} s per hop more than the one-stream chain: more than "
                          "{:g} s is not an event wait",
                          *p.stream_wait_s, topo::kMaxStreamWaitS));
    read_source(o, file_source);
    o.finish();
  }
  if (auto f = root.find("fitted")) read_fitted(f->as_object(), p);
  root.finish();

  fit_missing(p, p, root);
  if (!p.hbm_bytes_per_s && bandwidth.size() >= 2) {
    try {
      p.hbm_bytes_per_s = fit_bandwidth(bandwidth).bytes_per_s;
    } catch (const std::invalid_argument& e) {
      root.fail(fmt::format("cannot fit the HBM bandwidth of copy: {}", e.what()));
    }
  }
  fit_kernel_models(p, root, kernel_fits);
  if (!p.sm_wave_share) p.sm_wave_share = fit_sm_wave_share(p);
  return p;
}

Profile load_profile(const std::string& name_or_path) {
  const ResolvedInput in = resolve_input(name_or_path, "profiles");
  return parse_profile(JsonDocument::parse(in.text, in.label));
}

const topo::KernelsAs* kernels_as_for(const Profile& profile, const topo::DeviceModel& device) {
  if (!device.kernels_as || profile.device_model.empty() || device.kernels_as->device_model != profile.device_model)
    return nullptr;
  return &*device.kernels_as;
}

void check_profile_device(const Profile& profile, const topo::DeviceModel& device) {
  bool same = false;
  if (!profile.device_model.empty()) {
    same = profile.device_model == device.name || kernels_as_for(profile, device) != nullptr;
  } else {
    const std::string a = normalized(profile.device_name), b = normalized(device.name);
    same = !a.empty() && !b.empty() && (a.rfind(b, 0) == 0 || b.rfind(a, 0) == 0);
  }
  if (!same)
    throw InputError(
        profile.label, "$.device",
        fmt::format("the profile was measured on '{}'{}, but the cluster's device model is '{}'{}", profile.device_name,
                    profile.device_model.empty() ? "" : " (model " + profile.device_model + ")", device.name,
                    device.kernels_as ? " (which runs the kernels of '" + device.kernels_as->device_model + "')" : ""));
  if (profile.sm_count != device.sm_count)
    throw InputError(
        profile.label, "$.device.sm_count",
        fmt::format("{} SMs, but the cluster's '{}' has {}{}", profile.sm_count, device.name, device.sm_count,
                    kernels_as_for(profile, device) ? " (its kernels_as names a device of other SMs: a profile prices "
                                                      "kernels only on the SMs it was measured on)"
                                                    : ""));
}

std::vector<std::string> apply_profile(const Profile& profile, topo::Cluster& cluster) {
  std::vector<std::string> applied;
  for (const std::string& m : cluster.rank_model) check_profile_device(profile, cluster.device_models.at(m));
  if (profile.stream_wait_s) {
    for (auto& [name, device] : cluster.device_models)
      device.stream_wait_s = {*profile.stream_wait_s, fmt::format("measured in calibration profile {}", profile.label)};
    applied.push_back(fmt::format("stream_wait_s {:.4g}", *profile.stream_wait_s));
  }
  if (cluster.num_ranks() < 2 || cluster.node_of(0) != cluster.node_of(1)) return applied;
  // A profile of the device whose kernels this one runs (topo::KernelsAs) was measured on another
  // machine: its links describe that machine, not this cluster.
  if (!profile.device_model.empty() && cluster.device(0).name != profile.device_model) return applied;
  // The simulator's single-node ring sends each step from a rank to the next over their route (ranks
  // 0 -> 1 stands for every pair: the scale-up fabric is uniform within a node). Its bottleneck and its
  // latency are what a fitted busbw and latency calibrate.
  const topo::Route route = cluster.route(0, 1);
  double link_bw = cluster.bottleneck_bytes_per_s(route);
  const double route_s = ps_to_seconds(route.latency_ps);
  const std::string src = fmt::format("fitted in calibration profile {}", profile.label);

  const FittedCollective* ring = nullptr;
  std::string ring_op;
  // A ring all-reduce is a reduce-scatter then an all-gather: 2(n-1) steps of the same chunks, so its
  // busbw is the same link figure; it serves when neither of the others was measured.
  for (const char* op : {"all_gather", "reduce_scatter", "all_reduce"}) {
    auto it = profile.fitted_collectives.find(op);
    if (it != profile.fitted_collectives.end() && it->second.nodes == 1) {
      ring = &it->second;
      ring_op = op;
      break;
    }
  }
  const FittedCollective* p2p = nullptr;
  const FittedCollective* p2p_between_nodes = nullptr;
  if (auto it = profile.fitted_collectives.find("p2p"); it != profile.fitted_collectives.end())
    (it->second.nodes == 1 ? p2p : p2p_between_nodes) = &it->second;
  // A P2P measured between two nodes (nccl-tests' sendrecv_perf across hosts: NCCL's SM-kernel P2P)
  // sets how the cluster prices a P2P transfer between nodes (communication.p2p_network): from rank 0
  // to the first rank of the next node, it takes route + SM step latency + the added latency, then
  // its bytes at the route's bottleneck x the efficiency.
  const auto apply_between_nodes = [&] {
    if (!p2p_between_nodes || cluster.num_nodes < 2) return;
    const topo::Route net = cluster.route(0, cluster.devices_per_node);
    const double net_bw = cluster.bottleneck_bytes_per_s(net);
    if (p2p_between_nodes->busbw_bytes_per_s > net_bw * (1.0 + 1e-12))
      throw InputError(profile.label, "$.fitted.collectives.p2p",
                       fmt::format("fitted busbw {:.1f} GB/s between nodes exceeds the {:.1f} GB/s of the route from "
                                   "rank 0 to rank {}",
                                   p2p_between_nodes->busbw_bytes_per_s / 1e9, net_bw / 1e9, cluster.devices_per_node));
    const double added =
        std::max(0.0, p2p_between_nodes->latency_s - ps_to_seconds(net.latency_ps) - cluster.comm.sm_step_latency_s.value);
    cluster.comm.p2p_network = topo::P2pNetwork{{std::min(1.0, p2p_between_nodes->busbw_bytes_per_s / net_bw), src},
                                                {added, src}};
    applied.push_back(fmt::format("p2p between nodes: p2p_network efficiency {:.4f}, added_latency_s {:.4g}",
                                  cluster.comm.p2p_network->efficiency.value, added));
  };
  // A curve of the ring's collective from small to large sizes (an nccl-tests log of one node, 8 B to
  // GiBs) calibrates NCCL's protocols one by one, as the shipped topologies' are fitted
  // (tools/calibration/fit_collectives.py, docs/calibration.md "Collectives"): one latency and one
  // bandwidth through such a curve miss it by tens of percent, and an all-reduce that NVLS ran at
  // large sizes would otherwise read as a ring faster than its links.
  if (ring) {
    std::vector<std::pair<double, double>> curve;
    for (const ProfileCollective& c : profile.collectives)
      if (c.op == ring_op && c.nodes == 1 && c.ranks == ring->ranks) curve.emplace_back(c.bytes, c.time_s);
    if (spans_ring_protocols(curve)) {
      RingProtocolFitInput in;
      in.ranks = ring->ranks;
      in.steps = (ring_op == "all_reduce" ? 2 : 1) * (ring->ranks - 1);
      in.link_bytes_per_s = link_bw;
      in.route_s = route_s;
      in.simple = {cluster.comm.collective_base_latency_s.value, cluster.comm.sm_step_latency_s.value,
                   cluster.comm.sm_kernel_efficiency.value};
      if (ring_op == "all_reduce" && cluster.comm.nvls)
        in.nvls = RingProtocol{cluster.comm.nvls->base_latency_s.value, cluster.comm.nvls->step_latency_s.value,
                               cluster.comm.nvls->efficiency.value};
      in.samples = std::move(curve);
      RingProtocolFit fit;
      try {
        fit = fit_ring_protocols(in);
      } catch (const std::invalid_argument& e) {
        throw InputError(profile.label, "$.collectives", fmt::format("{}: {}", ring_op, e.what()));
      }
      const std::string fit_src =
          fmt::format("fitted in calibration profile {} to its {} curve ({} ranks, {} sizes; mean |error| {:.1f}%)",
                      profile.label, ring_op, ring->ranks, fit.samples, 100 * fit.mean_rel_error);
      const auto sourced = [&](const char* name, const RingProtocol& p) {
        return topo::CommProtocol{name, {p.base_s, fit_src}, {p.step_s, fit_src}, {p.efficiency, fit_src}};
      };
      cluster.comm.protocols.clear();
      std::string what;
      for (const auto& [name, p] : {std::pair{"ll", fit.ll}, std::pair{"ll128", fit.ll128}}) {
        if (!p) continue;
        cluster.comm.protocols.push_back(sourced(name, *p));
        what += fmt::format("{} base {:.3g} us, efficiency {:.4f}; ", name, p->base_s * 1e6, p->efficiency);
      }
      if (fit.nvls_fitted) {
        cluster.comm.nvls = sourced("nvls", *fit.nvls);
        what += fmt::format("nvls base {:.3g} us, efficiency {:.4f}; ", fit.nvls->base_s * 1e6, fit.nvls->efficiency);
      } else {
        cluster.comm.collective_base_latency_s = {fit.simple.base_s, fit_src};
        cluster.comm.sm_kernel_efficiency = {fit.simple.efficiency, fit_src};
        what += fmt::format("simple base {:.3g} us, sm_kernel_efficiency {:.4f}; ", fit.simple.base_s * 1e6,
                            fit.simple.efficiency);
      }
      applied.push_back(fmt::format("{} ({} ranks, {} sizes): NCCL's protocols fitted: {}mean |error| {:.1f}%, max {:.1f}%",
                                    ring_op, ring->ranks, fit.samples, what, 100 * fit.mean_rel_error,
                                    100 * fit.max_rel_error));
      ring = nullptr;  // what follows prices the copy-engine P2P alone
    }
  }
  if (!ring && !p2p) {
    apply_between_nodes();
    return applied;
  }

  // Bandwidth. Transfers of an engine move payload / engine efficiency bytes at the link bandwidth, so
  // its busbw is link bandwidth x engine efficiency. When a fitted busbw exceeds the link bandwidth
  // (the topology's link efficiency is an estimate below it), the scale-up links' efficiency is raised
  // to carry it, up to the line rate; an engine without a fit keeps its absolute bandwidth.
  const double sm_bw = ring ? ring->busbw_bytes_per_s : link_bw * cluster.comm.sm_kernel_efficiency.value;
  const double ce_bw = p2p ? p2p->busbw_bytes_per_s : link_bw * cluster.comm.copy_engine_efficiency.value;
  const double needed = std::max(ring ? sm_bw : 0.0, p2p ? ce_bw : 0.0);
  if (needed > link_bw) {
    const double scale = needed / link_bw;
    for (topo::Link& l : cluster.links) {
      if (!topo::is_scale_up(l.kind)) continue;
      const double e = l.efficiency * scale;
      if (e > 1.0 + 1e-12)
        throw InputError(profile.label,
                         std::string("$.fitted.collectives.") + (needed == sm_bw && ring ? ring_op : "p2p"),
                         fmt::format("fitted busbw {:.1f} GB/s exceeds the line rate {:.1f} GB/s of link {}",
                                     needed / 1e9, l.line_rate_bytes_per_s / 1e9, l.name));
      l.efficiency = std::min(1.0, e);
      l.bandwidth_bytes_per_s = l.line_rate_bytes_per_s * l.efficiency;
    }
    link_bw = needed;
    applied.push_back(fmt::format("scale-up link efficiency raised x{:.4f} to carry {:.1f} GB/s", scale, needed / 1e9));
  }
  cluster.comm.sm_kernel_efficiency = {std::min(1.0, sm_bw / link_bw),
                                       ring ? src : cluster.comm.sm_kernel_efficiency.source};
  cluster.comm.copy_engine_efficiency = {std::min(1.0, ce_bw / link_bw),
                                         p2p ? src : cluster.comm.copy_engine_efficiency.source};

  // Latency: the simulated ring takes base + steps x (route + step latency); the fitted latency is
  // split so, the step latency first, the base giving way only when the step would go negative.
  if (ring) {
    const int steps = (ring_op == "all_reduce" ? 2 : 1) * (ring->ranks - 1);
    const double base = cluster.comm.collective_base_latency_s.value;
    double step = (ring->latency_s - base) / steps - route_s;
    if (step < 0.0) {
      step = 0.0;
      cluster.comm.collective_base_latency_s = {std::max(0.0, ring->latency_s - steps * route_s), src};
    }
    cluster.comm.sm_step_latency_s = {step, src};
    // The fitted ring is what the profile measured, whatever protocol NCCL ran: it replaces the
    // topology's protocol choice (LL, LL128 set from other measurements). NVLS stays: a ring fit says
    // nothing of the switch's all-reduce.
    cluster.comm.protocols.clear();
    applied.push_back(
        fmt::format("{} ({} ranks): sm_kernel_efficiency {:.4f}, sm_step_latency_s {:.4g}, "
                    "collective_base_latency_s {:.4g}",
                    ring_op, ring->ranks, cluster.comm.sm_kernel_efficiency.value, step,
                    cluster.comm.collective_base_latency_s.value));
  }
  // A P2P transfer takes route + copy-engine step latency, then its bytes.
  if (p2p) {
    cluster.comm.copy_engine_step_latency_s = {std::max(0.0, p2p->latency_s - route_s), src};
    applied.push_back(fmt::format("p2p: copy_engine_efficiency {:.4f}, copy_engine_step_latency_s {:.4g}",
                                  cluster.comm.copy_engine_efficiency.value,
                                  cluster.comm.copy_engine_step_latency_s.value));
  }
  apply_between_nodes();  // after the ring's fit, whose step latency it counts
  return applied;
}

}  // namespace fusesim::model
