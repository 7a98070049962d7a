// Fitting calibration parameters from raw samples (include/fusesim/model/calibration_fit.hpp).
#include "fusesim/model/calibration_fit.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "fusesim/model/nelder_mead.hpp"
#include "fusesim/util/error.hpp"

namespace fusesim::model {
namespace {

// Weighted least squares for y = a + b x with the intercept constrained to a >= 0. The weights are
// 1 / y^2, so the residuals minimized are relative errors. Returns {a, b}.
struct Line {
  double intercept = 0;
  double slope = 0;
};

Line fit_line_relative(const std::vector<double>& x, const std::vector<double>& y) {
  double sw = 0, swx = 0, swy = 0, swxx = 0, swxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double w = 1.0 / (y[i] * y[i]);
    sw += w;
    swx += w * x[i];
    swy += w * y[i];
    swxx += w * x[i] * x[i];
    swxy += w * x[i] * y[i];
  }
  // Centred form of the normal equations: the determinant sw*swxx - swx^2 cancels badly when x spans
  // 1 to 1e10, so compute it as a weighted variance.
  const double x_mean = swx / sw;
  double sxx = 0, sxy = 0;
  const double y_mean = swy / sw;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double w = 1.0 / (y[i] * y[i]);
    sxx += w * (x[i] - x_mean) * (x[i] - x_mean);
    sxy += w * (x[i] - x_mean) * (y[i] - y_mean);
  }
  if (!(sxx > 0)) throw std::invalid_argument("the samples need at least two distinct sizes");
  Line line;
  line.slope = sxy / sxx;
  line.intercept = y_mean - line.slope * x_mean;
  if (line.intercept < 0) {
    // The optimum with a >= 0 lies on the boundary a = 0 (the objective is convex): refit through the
    // origin. A negative launch latency would let small messages cost nothing.
    line.intercept = 0;
    line.slope = swxy / swxx;
  }
  return line;
}

double max_rel_error(const std::vector<double>& x, const std::vector<double>& y, const Line& line) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::abs(line.intercept + line.slope * x[i] - y[i]) / y[i]);
  }
  return worst;
}

bool positive_finite(double v) { return std::isfinite(v) && v > 0; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// --- reading the raw sections ----------------------------------------------------------------------


const std::vector<std::string> kDtypes{"fp32", "tf32", "bf16", "fp16", "fp8"};

void read_gemm(const JsonObject& root, RawSamples& raw) {
  const auto section = root.find("gemm");
  if (!section) return;
  const JsonArray a = section->as_array();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const JsonObject s = a.at(i).as_object();
    GemmSample g;
    g.dtype = s.choice("dtype", kDtypes);
    g.m = static_cast<double>(s.integer("m", 1, std::int64_t{1} << 40));
    g.n = static_cast<double>(s.integer("n", 1, std::int64_t{1} << 40));
    g.k = static_cast<double>(s.integer("k", 1, std::int64_t{1} << 40));
    g.batch = static_cast<double>(s.integer_or("batch", 1, std::int64_t{1} << 30, 1));
    const double flops = 2.0 * g.m * g.n * g.k * g.batch;
    const bool has_time = s.has("time_s");
    const bool has_tflops = s.has("tflops");
    if (has_time == has_tflops) s.fail("a GEMM sample gives exactly one of time_s and tflops");
    g.flops_per_s = has_time ? flops / median_time_s(s, "time_s") : s.number("tflops", 1e-9, 1e9) * 1e12;
    (void)s.string_or("source", "");
    (void)s.string_or("group", "");
    s.finish();
    raw.gemm.push_back(g);
  }
}

void read_bandwidth(const JsonObject& root, std::string_view key, double traffic_per_byte, RawSamples& raw) {
  const auto section = root.find(key);
  if (!section) return;
  const JsonArray a = section->as_array();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const JsonObject s = a.at(i).as_object();
    BandwidthSample b;
    const bool elementwise = key == "elementwise";
    if (elementwise) {
      (void)s.string("op");
      (void)s.integer_or("rows", 1, std::int64_t{1} << 40, 1);
      (void)s.string_or("group", "");
    }
    b.bytes = s.number("bytes", 1, 1e15) * traffic_per_byte;
    b.time_s = median_time_s(s, "time_s");
    (void)s.string_or("source", "");
    s.finish();
    // Small kernels have their own models (launch floor, rows); the streaming bandwidth is the copies'.
    if (!elementwise) raw.bandwidth.push_back(b);
  }
}

void read_contention(const JsonObject& root, RawSamples& raw) {
  const auto section = root.find("contention");
  if (!section) return;
  const JsonArray a = section->as_array();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const JsonObject s = a.at(i).as_object();
    ContentionSample c;
    (void)s.choice("dtype", kDtypes);
    (void)s.integer("m", 1, std::int64_t{1} << 40);
    (void)s.integer("n", 1, std::int64_t{1} << 40);
    (void)s.integer("k", 1, std::int64_t{1} << 40);
    (void)s.integer_or("ctas", 1, 1 << 30, 1);
    c.aggressor = s.choice("aggressor", {"sm_kernel", "copy_engine"});
    if (c.aggressor == "sm_kernel") {
      c.comm_sms = static_cast<int>(s.integer("comm_sms", 1, 1000000));
    } else if (s.has("comm_sms")) {
      s.at("comm_sms").fail("a copy-engine aggressor holds no SMs");
    }
    if (s.has("slowdown")) {
      if (s.has("alone_s") || s.has("beside_s")) s.fail("give \"slowdown\" or \"alone_s\" and \"beside_s\", not both");
      c.slowdown = s.number("slowdown", 1e-3, 1e3);
    } else {
      c.slowdown = median_time_s(s, "beside_s") / median_time_s(s, "alone_s");
    }
    (void)s.string_or("source", "");
    s.finish();
    raw.contention.push_back(c);
  }
}

void read_collectives(const JsonObject& root, RawSamples& raw) {
  const auto section = root.find("collectives");
  if (!section) return;
  const JsonArray a = section->as_array();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const JsonObject s = a.at(i).as_object();
    CollectiveSample c;
    c.op = s.choice("op", collective_ops());
    // p2p counts the pair: 2 ranks.
    c.ranks = static_cast<int>(s.integer("ranks", 2, 1 << 24));
    c.nodes = static_cast<int>(s.integer_or("nodes", 1, c.ranks, 1));
    c.bytes = s.number("bytes", 1, 1e15);
    if (s.has("busbw_GBps")) {
      if (s.has("time_s")) s.fail("a collective sample gives exactly one of time_s and busbw_GBps");
      const double busbw = s.number("busbw_GBps", 1e-9, 1e9) * 1e9;
      // busbw = bytes * factor / time (nccl-tests PERFORMANCE.md), so time = bytes * factor / busbw.
      c.time_s = c.bytes * bus_factor(c.op, c.ranks) / busbw;
    } else {
      c.time_s = median_time_s(s, "time_s");
    }
    (void)s.string_or("source", "");
    s.finish();
    raw.collectives.push_back(c);
  }
}

}  // namespace

const std::vector<std::string>& collective_ops() {
  static const std::vector<std::string> ops{"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "p2p"};
  return ops;
}

double median_time_s(const JsonObject& o, std::string_view key) {
  const JsonArray a = o.array(key);
  a.require_size(1, 1000000);
  std::vector<double> v;
  v.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const JsonValue t = a.at(i);
    const double x = t.as_number(0.0, 1e6);
    if (!(x > 0.0)) t.fail("a time must be positive");
    v.push_back(x);
  }
  return median(std::move(v));
}

double bus_factor(const std::string& op, int ranks) {
  if (op == "p2p") return 1.0;
  if (op != "all_gather" && op != "reduce_scatter" && op != "all_reduce" && op != "all_to_all") {
    throw std::invalid_argument(fmt::format("unknown collective '{}'", op));
  }
  if (ranks < 2) throw std::invalid_argument(fmt::format("{} over {} rank(s): need at least 2", op, ranks));
  const double n = ranks;
  return (op == "all_reduce" ? 2.0 : 1.0) * (n - 1.0) / n;
}

CollectiveFit fit_collective(const std::vector<CollectiveSample>& samples) {
  if (samples.size() < 2) {
    throw std::invalid_argument(fmt::format("a collective fit needs at least 2 samples, got {}", samples.size()));
  }
  const CollectiveSample& first = samples.front();
  const double factor = bus_factor(first.op, first.ranks);
  std::vector<double> x, y;
  for (const CollectiveSample& s : samples) {
    if (s.op != first.op || s.ranks != first.ranks || s.nodes != first.nodes) {
      throw std::invalid_argument(fmt::format("samples mix {} x{} on {} node(s) with {} x{} on {} node(s)", first.op,
                                              first.ranks, first.nodes, s.op, s.ranks, s.nodes));
    }
    if (!positive_finite(s.time_s)) throw std::invalid_argument(fmt::format("time {} s is not positive", s.time_s));
    if (!(std::isfinite(s.bytes) && s.bytes >= 0)) throw std::invalid_argument(fmt::format("size {} B", s.bytes));
    x.push_back(s.bytes * factor);
    y.push_back(s.time_s);
  }
  const Line line = fit_line_relative(x, y);
  if (!(line.slope > 0)) {
    throw std::invalid_argument(fmt::format("{} x{}: time does not grow with size, no bandwidth to fit", first.op,
                                            first.ranks));
  }
  CollectiveFit fit;
  fit.latency_s = line.intercept;
  fit.busbw_bytes_per_s = 1.0 / line.slope;
  fit.samples = static_cast<int>(samples.size());
  fit.max_rel_error = max_rel_error(x, y, line);
  return fit;
}

bool spans_ring_protocols(const std::vector<std::pair<double, double>>& samples) {
  std::vector<double> sizes;
  for (const auto& [bytes, time] : samples)
    if (bytes >= kRingProtocolMinBytes) sizes.push_back(bytes);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes.size() >= 8 && sizes.front() <= 64.0 * 1024 && sizes.back() >= 16.0 * 1024 * 1024;
}

RingProtocolFit fit_ring_protocols(const RingProtocolFitInput& in) {
  if (in.ranks < 2 || in.steps < 1) throw std::invalid_argument(fmt::format("{} ranks, {} steps", in.ranks, in.steps));
  if (!positive_finite(in.link_bytes_per_s) || !(std::isfinite(in.route_s) && in.route_s >= 0))
    throw std::invalid_argument("the ring's link needs a positive bandwidth and a latency >= 0");
  for (const auto& [bytes, time] : in.samples)
    if (!positive_finite(bytes) || !positive_finite(time))
      throw std::invalid_argument(fmt::format("sample of {} B in {} s", bytes, time));
  if (!spans_ring_protocols(in.samples))
    throw std::invalid_argument("the curve needs at least 8 sizes of 1 KiB or more, from 64 KiB or below to 16 MiB or above");
  // Below 1 KiB the times step with the element count (13-16 us for 8-512 B on 8 H100s), which no
  // collective of a training step is: left out, as the shipped fits leave them.
  std::vector<std::pair<double, double>> samples;
  for (const auto& s : in.samples)
    if (s.first >= kRingProtocolMinBytes) samples.push_back(s);
  const double per_byte = static_cast<double>(in.steps) / in.ranks;  // bus factor: busbw = bytes x this / time
  const auto time_of = [&](const RingProtocol& p, double bytes) {
    return p.base_s + in.steps * (in.route_s + p.step_s) + bytes * per_byte / (in.link_bytes_per_s * p.efficiency);
  };
  // The switch reduced where some size moved more bus bytes than the ring's link carries.
  bool switch_reduced = false;
  for (const auto& [bytes, time] : samples) switch_reduced |= bytes * per_byte / time > in.link_bytes_per_s;
  const bool all_reduce = in.steps == 2 * (in.ranks - 1);
  const bool fit_nvls = switch_reduced && all_reduce && in.nvls.has_value();

  // Payload shares (NCCL src/device/prims_ll.h, prims_ll128.h): LL 4 data bytes per 8, LL128 120 per 128.
  constexpr double kLlShare = 0.5, kLl128Share = 120.0 / 128.0;
  const auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const auto logit = [](double y) { return std::log(y / (1.0 - y)); };
  const double ll_step = std::max(0.0, kNcclNvlinkHopLlS - in.route_s);
  const double ll128_step = std::max(0.0, kNcclNvlinkHopLl128S - in.route_s);
  const double fourth_share = fit_nvls ? 2.0 : 1.0;  // NVLS moves up to twice its wire bytes (the switch reduces)
  const RingProtocol fourth_start = fit_nvls ? *in.nvls : in.simple;
  struct Candidates {
    RingProtocol ll, ll128, simple;
    std::optional<RingProtocol> nvls;
  };
  const auto unpack = [&](const std::vector<double>& x) {
    Candidates c{{std::exp(x[0]), ll_step, kLlShare * sigmoid(x[1])},
                 {std::exp(x[2]), ll128_step, kLl128Share * sigmoid(x[3])},
                 in.simple,
                 in.nvls};
    const RingProtocol fourth{std::exp(x[4]), fourth_start.step_s, fourth_share * sigmoid(x[5])};
    (fit_nvls ? *c.nvls : c.simple) = fourth;
    return c;
  };
  // Index of the fastest: 0 LL, 1 LL128, 2 Simple, 3 NVLS (ties keep the earlier, as the engine's
  // choice does with Simple first; the order only matters on exact ties).
  const auto fastest = [&](const Candidates& c, double bytes) {
    std::pair<double, int> best{time_of(c.simple, bytes), 2};
    best = std::min(best, {time_of(c.ll, bytes), 0});
    best = std::min(best, {time_of(c.ll128, bytes), 1});
    if (c.nvls && all_reduce) best = std::min(best, {time_of(*c.nvls, bytes), 3});
    return best;
  };
  const auto loss = [&](const std::vector<double>& x) {
    const Candidates c = unpack(x);
    double sum = 0;
    for (const auto& [bytes, time] : samples) {
      const double e = std::log(fastest(c, bytes).first / time);
      sum += e * e;
    }
    return sum / static_cast<double>(samples.size());
  };
  // From NCCL's constants (tuning.cc: base LL 6.6 us, LL128 8.4 us) and the cluster's fourth protocol.
  const double fourth_eff = std::clamp(fourth_start.efficiency / fourth_share, 1e-3, 1.0 - 1e-3);
  std::vector<double> x{std::log(6.6e-6), 0.0, std::log(8.4e-6), 2.0, std::log(std::max(fourth_start.base_s, 1e-7)),
                        logit(fourth_eff)};
  std::vector<double> steps(x.size(), 0.5);
  for (int round = 0; round < 3; ++round) {
    x = nelder_mead(loss, x, steps, 4000);
    for (double& s : steps) s /= 2;
  }
  const Candidates c = unpack(x);
  RingProtocolFit fit;
  fit.simple = c.simple;
  fit.nvls = c.nvls;
  fit.nvls_fitted = fit_nvls;
  fit.samples = static_cast<int>(samples.size());
  bool used[4] = {false, false, false, false};
  double sum = 0;
  for (const auto& [bytes, time] : samples) {
    const auto [t, k] = fastest(c, bytes);
    used[k] = true;
    const double e = std::abs(t / time - 1.0);
    sum += e;
    fit.max_rel_error = std::max(fit.max_rel_error, e);
  }
  fit.mean_rel_error = sum / static_cast<double>(samples.size());
  if (used[0]) fit.ll = c.ll;
  if (used[1]) fit.ll128 = c.ll128;
  return fit;
}

ContentionFit fit_contention(const std::vector<ContentionSample>& samples) {
  ContentionFit fit;
  double sxy = 0, sxx = 0, copy_sum = 0;
  std::vector<const ContentionSample*> sm;
  for (const ContentionSample& s : samples) {
    if (!positive_finite(s.slowdown)) throw std::invalid_argument(fmt::format("slowdown {} is not positive", s.slowdown));
    if (s.aggressor == "sm_kernel") {
      if (s.comm_sms < 0) throw std::invalid_argument(fmt::format("comm_sms {} is negative", s.comm_sms));
      // slowdown - 1 = c * sms: least squares through the origin (no SMs held, no slowdown).
      sxy += s.comm_sms * (s.slowdown - 1.0);
      sxx += static_cast<double>(s.comm_sms) * s.comm_sms;
      sm.push_back(&s);
    } else if (s.aggressor == "copy_engine") {
      copy_sum += s.slowdown;
      ++fit.copy_engine_samples;
    } else {
      throw std::invalid_argument(fmt::format("unknown aggressor '{}'", s.aggressor));
    }
  }
  if (!sm.empty()) {
    if (!(sxx > 0)) throw std::invalid_argument("sm_kernel contention samples all hold 0 SMs: no slope to fit");
    const double c = sxy / sxx;
    fit.sm_kernel_slowdown_per_sm = c;
    fit.sm_kernel_samples = static_cast<int>(sm.size());
    for (const ContentionSample* s : sm) {
      fit.sm_kernel_max_rel_error =
          std::max(fit.sm_kernel_max_rel_error, std::abs(1.0 + c * s->comm_sms - s->slowdown) / s->slowdown);
    }
  }
  if (fit.copy_engine_samples > 0) fit.copy_engine_slowdown = copy_sum / fit.copy_engine_samples;
  return fit;
}

BandwidthFit fit_bandwidth(const std::vector<BandwidthSample>& samples) {
  if (samples.size() < 2) {
    throw std::invalid_argument(fmt::format("a bandwidth fit needs at least 2 samples, got {}", samples.size()));
  }
  std::vector<double> x, y;
  for (const BandwidthSample& s : samples) {
    if (!positive_finite(s.time_s) || !positive_finite(s.bytes)) {
      throw std::invalid_argument(fmt::format("sample of {} B in {} s: both must be positive", s.bytes, s.time_s));
    }
    x.push_back(s.bytes);
    y.push_back(s.time_s);
  }
  const Line line = fit_line_relative(x, y);
  if (!(line.slope > 0)) throw std::invalid_argument("time does not grow with bytes, no bandwidth to fit");
  BandwidthFit fit;
  fit.bytes_per_s = 1.0 / line.slope;
  fit.latency_s = line.intercept;
  fit.samples = static_cast<int>(samples.size());
  fit.max_rel_error = max_rel_error(x, y, line);
  return fit;
}

std::optional<double> gemm_peak_fraction(const std::vector<GemmSample>& samples, const std::string& dtype,
                                         double peak_flops_per_s) {
  if (!positive_finite(peak_flops_per_s)) throw std::invalid_argument("peak FLOP/s must be positive");
  std::optional<double> best;
  for (const GemmSample& g : samples) {
    if (g.dtype != dtype) continue;
    if (!best || g.flops_per_s > *best) best = g.flops_per_s;
  }
  if (!best) return std::nullopt;
  return *best / peak_flops_per_s;
}

RawSamples read_raw_samples(const JsonObject& root) {
  RawSamples raw;
  read_gemm(root, raw);
  read_bandwidth(root, "elementwise", 1.0, raw);
  // A copy's `bytes` is the buffer copied; HBM sees it twice (read at the source, written at the
  // destination), while an elementwise sample's `bytes` is already its HBM traffic.
  read_bandwidth(root, "copy", 2.0, raw);
  read_contention(root, raw);
  read_collectives(root, raw);
  return raw;
}

nlohmann::json fit_document(const JsonObject& root, const FitOptions& options) {
  const RawSamples raw = read_raw_samples(root);
  nlohmann::json fitted = nlohmann::json::object();
  const auto fail = [&](const std::string& section, const std::exception& e) -> InputError {
    return InputError(root.file(), "$." + section, e.what());
  };

  // Collectives: group by (op, ranks, nodes). Per op, the single-node group with the most ranks (the
  // scale-up figures the profile loader applies to the links), else the group with the most ranks,
  // then nodes.
  std::map<std::tuple<std::string, int, int>, std::vector<CollectiveSample>> groups;
  for (const CollectiveSample& s : raw.collectives) groups[{s.op, s.ranks, s.nodes}].push_back(s);
  nlohmann::json collectives = nlohmann::json::object();
  for (const std::string& op : collective_ops()) {
    const std::vector<CollectiveSample>* chosen = nullptr;
    const auto rank_key = [](const CollectiveSample& s) { return std::make_tuple(s.nodes == 1, s.ranks, s.nodes); };
    for (const auto& [key, group] : groups) {
      if (std::get<0>(key) != op || group.size() < 2) continue;
      if (!chosen || rank_key(group.front()) > rank_key(chosen->front())) chosen = &group;
    }
    if (!chosen) continue;
    try {
      const CollectiveFit f = fit_collective(*chosen);
      collectives[op] = {{"ranks", chosen->front().ranks},  {"nodes", chosen->front().nodes},
                         {"latency_s", f.latency_s},        {"busbw_bytes_per_s", f.busbw_bytes_per_s},
                         {"samples", f.samples},            {"max_rel_error", f.max_rel_error}};
    } catch (const std::invalid_argument& e) {
      throw fail("collectives", e);
    }
  }
  if (!collectives.empty()) fitted["collectives"] = collectives;

  if (!raw.contention.empty()) {
    try {
      const ContentionFit f = fit_contention(raw.contention);
      nlohmann::json c = nlohmann::json::object();
      if (f.sm_kernel_slowdown_per_sm) c["sm_kernel_slowdown_per_sm"] = *f.sm_kernel_slowdown_per_sm;
      if (f.copy_engine_slowdown) c["copy_engine_slowdown"] = *f.copy_engine_slowdown;
      fitted["contention"] = c;
    } catch (const std::invalid_argument& e) {
      throw fail("contention", e);
    }
  }

  if (raw.bandwidth.size() >= 2) {
    try {
      fitted["hbm_bytes_per_s"] = fit_bandwidth(raw.bandwidth).bytes_per_s;
    } catch (const std::invalid_argument& e) {
      throw fail("elementwise", e);
    }
  }

  // bf16 first: the dtype training runs in; fp16 when only fp16 was measured.
  std::optional<double> fraction;
  if (options.peak_bf16_flops_per_s) fraction = gemm_peak_fraction(raw.gemm, "bf16", *options.peak_bf16_flops_per_s);
  if (!fraction && options.peak_fp16_flops_per_s) {
    fraction = gemm_peak_fraction(raw.gemm, "fp16", *options.peak_fp16_flops_per_s);
  }
  if (fraction) fitted["gemm_peak_fraction"] = *fraction;
  return fitted;
}

}  // namespace fusesim::model
