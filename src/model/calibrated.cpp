// The calibrated kernel cost model: measured GEMM and attention throughput interpolated by shape,
// HBM time from the fitted bandwidth, slowdowns beside communication from the measured contention;
// the roofline (model/roofline.cpp) wherever the profile has nothing to say. docs/calibration.md.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <variant>

#include "fusesim/model/profile.hpp"

namespace fusesim::model {
namespace {

// However much HBM traffic communication adds, a kernel keeps this share of the streaming bandwidth
// (the roofline's kMinHbmShare, for the same reason).
constexpr double kMinHbmShare = 0.05;

// Where q falls among the sorted axis values: the bracketing pair and the weight of the upper one
// (linear in log q, so that a doubling counts the same anywhere on the axis). nullopt outside.
struct Bracket {
  std::size_t lo, hi;
  double w;
};
std::optional<Bracket> bracket(const std::vector<double>& axis, double q) {
  if (axis.empty() || q < axis.front() || q > axis.back()) return std::nullopt;
  const auto it = std::lower_bound(axis.begin(), axis.end(), q);
  const std::size_t hi = static_cast<std::size_t>(it - axis.begin());
  if (*it == q) return Bracket{hi, hi, 0.0};
  const std::size_t lo = hi - 1;
  return Bracket{lo, hi, (std::log(q) - std::log(axis[lo])) / (std::log(axis[hi]) - std::log(axis[lo]))};
}

std::vector<double> sorted_unique(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

double device_hbm(const topo::DeviceModel& d) { return d.hbm_bandwidth_bytes_per_s.value * d.efficiency.hbm.value; }

}  // namespace

CalibratedCostModel::CalibratedCostModel(Profile profile, KernelSetting setting) : profile_(std::move(profile)) {
  if (setting != KernelSetting::step) return;
  const Profile::StepRateFraction& f = profile_.step_rate_fraction;
  if (f.gemm) gemm_stretch_ = 1.0 / f.gemm->value;
  if (f.attention) attention_stretch_ = 1.0 / f.attention->value;
  if (f.elementwise) elementwise_stretch_ = 1.0 / f.elementwise->value;
  if (profile_.kernel_gap_s) gap_s_ = profile_.kernel_gap_s->value;
}

std::optional<double> CalibratedCostModel::gemm_efficiency(const GemmKernel& g, topo::Dtype dtype,
                                                           const topo::DeviceModel& device) const {
  const double peak = device.peak(dtype);
  // The samples of this dtype on a grid of (m x batch, n, k); several at one point are averaged.
  std::map<std::array<double, 3>, std::pair<double, int>> points;
  std::vector<double> ms, ns, ks;
  for (const ProfileGemm& s : profile_.gemm) {
    if (s.dtype != dtype) continue;
    const GemmKernel sk{s.m, s.n, s.k, s.batch};
    // The measured throughput includes the wave quantization of the sample's own shape; divided out
    // here (with the roofline's choice of tile), it is applied again for the queried shape.
    const KernelCost rc = roofline_.cost(sk, dtype, device);
    const double ideal_s = rc.flops / (peak * device.efficiency.gemm.value);
    const double quantization = rc.compute_s > 0.0 ? rc.compute_s / ideal_s : 1.0;
    const double e = s.flops_per_s / peak * quantization;
    const std::array<double, 3> key{static_cast<double>(s.m * s.batch), static_cast<double>(s.n),
                                    static_cast<double>(s.k)};
    auto& [sum, count] = points[key];
    sum += e;
    ++count;
    ms.push_back(key[0]);
    ns.push_back(key[1]);
    ks.push_back(key[2]);
  }
  if (points.empty()) return std::nullopt;
  const std::array<std::vector<double>, 3> axes{sorted_unique(ms), sorted_unique(ns), sorted_unique(ks)};
  const std::array<double, 3> q{static_cast<double>(g.m * g.batch), static_cast<double>(g.n), static_cast<double>(g.k)};
  std::array<Bracket, 3> b{};
  for (int i = 0; i < 3; ++i) {
    const auto bi = bracket(axes[i], q[i]);
    if (!bi) return std::nullopt;
    b[i] = *bi;
  }
  // Multilinear in the logs: along any one axis the value is linear between two neighbouring
  // samples, so it is exact at the samples and monotone between them. Every corner must be measured.
  double value = 0.0;
  for (int corner = 0; corner < 8; ++corner) {
    double weight = 1.0;
    std::array<double, 3> key{};
    for (int i = 0; i < 3; ++i) {
      const bool upper = (corner >> i) & 1;
      if (upper && b[i].lo == b[i].hi) {
        weight = 0.0;
        break;
      }
      key[i] = axes[i][upper ? b[i].hi : b[i].lo];
      weight *= upper ? b[i].w : 1.0 - b[i].w;
    }
    if (weight == 0.0) continue;
    const auto it = points.find(key);
    if (it == points.end()) return std::nullopt;
    value += weight * it->second.first / it->second.second;
  }
  return value;
}

std::optional<double> CalibratedCostModel::attention_flops_per_s(const AttentionKernel& a, topo::Dtype dtype) const {
  const ProfilePass want = a.pass == Pass::forward ? ProfilePass::forward : ProfilePass::backward;
  // Pass-specific samples first; a forward+backward figure serves both passes otherwise.
  for (ProfilePass pass : {want, ProfilePass::forward_backward}) {
    std::map<double, std::pair<double, int>> points;
    for (const ProfileAttention& s : profile_.attention) {
      if (s.dtype != dtype || s.pass != pass || s.causal != a.causal || s.head_dim != a.head_dim) continue;
      auto& [sum, count] = points[static_cast<double>(s.seq)];
      sum += s.flops_per_s;
      ++count;
    }
    if (points.empty()) continue;
    std::vector<double> axis;
    for (const auto& [seq, v] : points) axis.push_back(seq);
    const auto br = bracket(axis, static_cast<double>(a.seq_kv));
    if (!br) return std::nullopt;
    const auto at = [&](std::size_t i) { return points[axis[i]].first / points[axis[i]].second; };
    return (1.0 - br->w) * at(br->lo) + br->w * at(br->hi);
  }
  return std::nullopt;
}

std::optional<double> CalibratedCostModel::sm_slowdown(int sms) const {
  if (sms <= 0) return 1.0;
  double sum = 0.0;
  int count = 0;
  for (const ProfileContention& c : profile_.contention)
    if (c.aggressor == "sm_kernel" && c.comm_sms == sms) {
      sum += c.slowdown;
      ++count;
    }
  // A measurement at exactly this SM count is taken as it is; the fitted line elsewhere.
  if (count > 0) return sum / count;
  if (profile_.sm_kernel_slowdown_per_sm) return 1.0 + *profile_.sm_kernel_slowdown_per_sm * sms;
  return std::nullopt;
}

namespace {

// The learned GEMM model of the dtype's family, if the profile has one.
const GemmModel* learned_gemm_model(const Profile& p, topo::Dtype dtype) {
  const std::optional<GemmFamily> family = gemm_family(dtype);
  if (!family) return nullptr;
  const std::optional<GemmModel>& m = p.gemm_model_of(*family);
  return m ? &*m : nullptr;
}

// The profile's ceiling for a GEMM with a dimension off 16-byte (4-byte) alignment, if it has one.
// GemmKernel carries no layout, and in a training step each of m, n and k is some operand's leading
// dimension: n and k in the forward and the dgrad, m too in the wgrad, whose output gradient is read
// transposed (a vocabulary of 50,257 is the LM head's n, its dgrad's k and its wgrad's m). A plain
// [m, k] x [k, n] with an odd m ran at full rate on an H200: token counts, m elsewhere, are even in
// the configurations fusesim generates.
std::optional<double> misaligned_peak_fraction(const Profile& p, const GemmKernel& g, topo::Dtype dtype) {
  const auto& f = p.gemm_misaligned_peak_fraction;
  if (!f.under_16_bytes) return std::nullopt;
  const std::int64_t element = topo::bytes_per_element(dtype);
  std::int64_t alignment = 16;
  for (const std::int64_t d : {g.m, g.n, g.k}) {
    if (d <= 0) continue;
    const std::int64_t bytes = d * element;
    alignment = std::min(alignment, bytes & -bytes);  // the largest power of two dividing it
  }
  if (alignment >= 16) return std::nullopt;
  if (alignment < 4 && f.under_4_bytes) return f.under_4_bytes->value;
  return f.under_16_bytes->value;
}

}  // namespace

KernelCost CalibratedCostModel::cost(const Kernel& kernel, topo::Dtype dtype, const topo::DeviceModel& device) const {
  if (const auto* a = std::get_if<AttentionKernel>(&kernel); a && a->unfused)
    return unfused_attention_cost(*a, dtype, device);
  if (const auto* g = std::get_if<GemmKernel>(&kernel)) {
    const auto key = std::make_tuple(g->m, g->n, g->k, g->batch, g->accumulate_fp32, static_cast<int>(dtype), device.name);
    {
      std::lock_guard<std::mutex> lock(gemm_cache_mu_);
      if (const auto it = gemm_cache_.find(key); it != gemm_cache_.end()) return it->second;
    }
    const KernelCost c = uncached_cost(kernel, dtype, device);
    std::lock_guard<std::mutex> lock(gemm_cache_mu_);
    gemm_cache_.emplace(key, c);
    return c;
  }
  return uncached_cost(kernel, dtype, device);
}

KernelCost CalibratedCostModel::profiled_cost(const Kernel& kernel, topo::Dtype dtype,
                                              const topo::DeviceModel& device) const {
  KernelCost c = roofline_.cost(kernel, dtype, device);
  c.launch_s = 0.0;  // the profile's fitted floors carry the launch (kernel_fit.hpp, launch_s)
  const double hbm = profile_.hbm_bytes_per_s ? *profile_.hbm_bytes_per_s : device_hbm(device);
  c.memory_s = c.hbm_bytes / hbm;
  if (const auto* g = std::get_if<GemmKernel>(&kernel); g && c.flops > 0.0) {
    const double peak = device.peak(dtype);
    const double ideal_s = c.flops / (peak * device.efficiency.gemm.value);
    const double quantization = c.compute_s / ideal_s;
    // A shape inside a fully measured cell of the table is interpolated between its samples (exact at
    // them); elsewhere the learned model, fitted on every sample, predicts it from its neighbours.
    if (const auto e = gemm_efficiency(*g, dtype, device)) {
      c.compute_s = c.flops / (peak * *e) * quantization;
    } else if (const GemmModel* model = learned_gemm_model(profile_, dtype)) {
      // The model's time holds the operand stream and the math blended, and the launch: it is the
      // compute time; memory_s is its operand stream alone (what contention for HBM stretches).
      const GemmModel& gm = *model;
      const double m = static_cast<double>(g->m), n = static_cast<double>(g->n), k = static_cast<double>(g->k),
                   b = static_cast<double>(g->batch);
      c.compute_s = gm.time_s(m, n, k, b);
      c.memory_s = std::min(c.compute_s, (m * k + k * n + m * n) * b * gm.element_bytes / gm.operand_bytes_per_s);
      // The fitted model measured plain GEMMs (C written once in 16 bits); an fp32-accumulating one
      // also reads C and writes it twice as wide. That extra traffic adds to the operand stream.
      if (g->accumulate_fp32) c.memory_s += m * n * b * (gemm_output_bytes(*g, dtype) - gm.element_bytes) / hbm;
      c.tiles = gm.tiles_of_best_plan(m, n, b);
    } else {
      // Outside the table: the roofline, at the profile's best achieved fraction of peak when it has
      // one (fitted, else its best sample of this dtype), the topology's efficiency otherwise.
      std::optional<double> fraction = profile_.gemm_peak_fraction;
      if (!fraction) {
        double best = 0.0;
        for (const ProfileGemm& s : profile_.gemm)
          if (s.dtype == dtype) best = std::max(best, s.flops_per_s / peak);
        if (best > 0.0) fraction = std::min(1.0, best);
      }
      if (fraction) c.compute_s = c.flops / (peak * *fraction) * quantization;
    }
    if (const auto cap = misaligned_peak_fraction(profile_, *g, dtype))
      c.compute_s = std::max(c.compute_s, c.flops / (peak * *cap));
    c.compute_s *= gemm_stretch_;
  } else if (const auto* a = std::get_if<AttentionKernel>(&kernel); a && c.flops > 0.0) {
    // The profile's samples are FlashAttention-2's: another kernel is priced by its time over them.
    if (const auto r = attention_flops_per_s(*a, dtype)) c.compute_s = c.flops / *r * a->time_factor;
    c.compute_s *= attention_stretch_;
  } else if (const auto* e = std::get_if<ElementwiseKernel>(&kernel); e && e->bytes > 0) {
    if (const SmallKernelModel* sk = small_kernel_model(profile_, e->op)) {
      // All of it is memory time: HBM contention stretches it, held SMs do not.
      c.memory_s = sk->time_s(static_cast<double>(e->bytes), static_cast<double>(e->rows));
    }
    c.memory_s *= elementwise_stretch_;
    c.compute_s *= elementwise_stretch_;
  }
  with_gap(c);
  return c;
}

void CalibratedCostModel::with_gap(KernelCost& c) const {
  // The gap before the kernel, as the roofline adds its launch: a kernel of no work is not launched.
  const double alone_s = std::max(c.compute_s, c.memory_s);
  c.launch_s = alone_s > 0.0 ? gap_s_ : 0.0;
  c.duration_ps = seconds_to_ps(alone_s + c.launch_s);
}

KernelCost CalibratedCostModel::uncached_cost(const Kernel& kernel, topo::Dtype dtype,
                                              const topo::DeviceModel& device) const {
  const topo::KernelsAs* as = kernels_as_for(profile_, device);
  if (!as) return profiled_cost(kernel, dtype, device);
  // A device that runs the profiled device's kernels with another memory or power limit
  // (topo::KernelsAs): priced as on the profiled device (whose datasheet HBM the roofline's plans and
  // memory times see), then each kind at its own rate here. Not where the profile was measured on
  // this device itself.
  topo::DeviceModel there = device;
  there.kernels_as.reset();
  if (profile_.hbm_peak_bytes_per_s) there.hbm_bandwidth_bytes_per_s = *profile_.hbm_peak_bytes_per_s;
  KernelCost c = profiled_cost(kernel, dtype, there);
  const double fraction = std::holds_alternative<GemmKernel>(kernel)        ? as->gemm.value
                          : std::holds_alternative<AttentionKernel>(kernel) ? as->attention.value
                                                                            : as->elementwise.value;
  c.compute_s /= fraction;
  c.memory_s /= fraction;
  with_gap(c);  // the gap is the launch's, not the kernel's rate
  return c;
}

double CalibratedCostModel::rate(const KernelCost& cost, const topo::DeviceModel& device,
                                 const DeviceLoad& load) const {
  if (load.sms_held_by_comm <= 0 && load.comm_hbm_bytes_per_s <= 0.0) return 1.0;
  const double alone_s = std::max(cost.compute_s, cost.memory_s);
  if (alone_s <= 0.0) return 1.0;
  if (device.sm_count <= 0) throw std::invalid_argument("CalibratedCostModel: SM count must be positive");

  // Compute: the measured slowdown beside SM-based communication, or beside a copy-engine transfer
  // when no SMs are held; the roofline's wave model where the profile measured neither.
  double compute_s = cost.compute_s;
  if (load.sms_held_by_comm > 0) {
    // By shape: a GEMM's tiles run in waves on the SMs left, so a one-wave GEMM needs a second wave
    // and a many-wave one a few percent more; other kernels spread over the SMs left. The share says
    // how much of the extra waves the measurement showed (communication does not hold its SMs all along).
    const double ratio = wave_ratio(cost.tiles, device.sm_count, load.sms_held_by_comm);
    if (profile_.sm_wave_share) {
      compute_s *= 1.0 + *profile_.sm_wave_share * (ratio - 1.0);
    } else if (const auto s = sm_slowdown(load.sms_held_by_comm)) {
      compute_s *= *s;
    } else {
      compute_s *= ratio;
    }
  } else if (profile_.copy_engine_slowdown) {
    compute_s *= *profile_.copy_engine_slowdown;
  }
  // Memory: the HBM bandwidth left by the transfers' traffic, as in the roofline.
  const double bandwidth = cost.memory_s > 0.0 ? cost.hbm_bytes / cost.memory_s : device_hbm(device);
  const double left = std::max(bandwidth - std::max(0.0, load.comm_hbm_bytes_per_s), kMinHbmShare * bandwidth);
  const double memory_s = cost.memory_s > 0.0 ? cost.hbm_bytes / left : 0.0;
  return contended_rate(cost, std::max(compute_s, memory_s));  // the gap before the kernel not stretched
}

std::unique_ptr<KernelCostModel> cost_model_for(const std::string& profile_name_or_path, topo::Cluster& cluster) {
  if (profile_name_or_path.empty()) return std::make_unique<RooflineCostModel>();
  Profile profile = load_profile(profile_name_or_path);
  apply_profile(profile, cluster);
  return std::make_unique<CalibratedCostModel>(std::move(profile));
}

}  // namespace fusesim::model
