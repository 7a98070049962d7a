// Fitting and evaluating the GEMM and small-kernel models of include/fusesim/model/kernel_fit.hpp.
#include "fusesim/model/kernel_fit.hpp"

#include "fusesim/model/nelder_mead.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>

namespace fusesim::model {
namespace {

constexpr double kBig = 1e30;
// A residual further than this squared distance (in widths) from a shape weighs below 1e-11: left out.
constexpr double kResidualReachSq = 50.0;


double ceil_div(double a, double b) { return std::ceil(a / b); }

GemmModel gemm_from(const std::vector<double>& x, int sm_count, double element_bytes,
                    const std::vector<std::pair<int, int>>& tiles) {
  GemmModel g;
  g.sm_count = sm_count;
  g.element_bytes = element_bytes;
  g.tiles = tiles;
  g.launch_s = std::exp(x[0]);
  g.operand_bytes_per_s = std::exp(x[1]);
  g.sm_flops_per_s = std::exp(x[2]);
  g.k_half = std::exp(x[3]);
  g.tile_overhead = std::exp(x[4]);
  g.blend = 1.0 + std::exp(x[5]);
  g.partial_wave_share = 1.0 / (1.0 + std::exp(-x[6]));  // logistic: a share in (0, 1)
  return g;
}

// The small-kernel model of parameters x; bounded: the stream and L2 as logistic shares of the
// device's HBM bandwidth and L2, so that the fit cannot go beyond them.
SmallKernelModel small_model(const std::vector<double>& x, bool bounded, bool rows, double hbm_bytes_per_s,
                             double l2_bytes) {
  SmallKernelModel m;
  m.launch_s = std::exp(x[0]);
  m.bytes_per_s = bounded && hbm_bytes_per_s > 0 ? hbm_bytes_per_s / (1.0 + std::exp(-x[1])) : std::exp(x[1]);
  m.row_bytes_per_s = rows ? std::exp(x[2]) : 0.0;
  m.row_overhead_bytes = rows ? std::exp(x[3]) : 0.0;
  m.blend = 1.0 + std::exp(x[4]);
  m.l2_bytes = bounded && l2_bytes > 0 ? l2_bytes / (1.0 + std::exp(-x[5])) : std::exp(x[5]);
  m.l2_bytes_per_s = m.bytes_per_s * (1.0 + std::exp(x[6]));  // L2 is faster than HBM
  return m;
}

double mape_pct(const std::vector<double>& predicted, const std::vector<double>& measured) {
  double sum = 0.0;
  for (std::size_t i = 0; i < measured.size(); ++i) sum += std::abs(predicted[i] / measured[i] - 1.0);
  return measured.empty() ? 0.0 : 100.0 * sum / static_cast<double>(measured.size());
}

}  // namespace

const std::vector<std::pair<int, int>>& default_gemm_tiles() {
  static const std::vector<std::pair<int, int>> tiles{{64, 64},   {64, 128},  {128, 64}, {128, 128},
                                                      {128, 256}, {256, 128}, {64, 256}};
  return tiles;
}

double GemmModel::smooth_time_s(double m, double n, double k, double batch) const {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0.0;
  const double memory = (m * k + k * n + m * n) * batch * element_bytes / operand_bytes_per_s;
  const double per_sm = sm_flops_per_s * k / (k + k_half);
  const double compute = best_plan(m, n, batch).cost * 2.0 * k / per_sm;
  // (a^p + b^p)^(1/p) computed on the larger term's scale (no overflow for large p).
  const double big = std::max(memory, compute), small = std::min(memory, compute);
  return launch_s + big * std::pow(1.0 + std::pow(small / big, blend), 1.0 / blend);
}

GemmModel::Plan GemmModel::best_plan(double m, double n, double batch) const {
  Plan best{std::numeric_limits<double>::infinity(), 0};
  const double h_ref = 1.0 + tile_overhead * (1.0 / 128 + 1.0 / 256);
  for (const auto& [tm, tn] : tiles) {
    const double t = ceil_div(m, tm) * ceil_div(n, tn) * batch;
    const double h = h_ref / (1.0 + tile_overhead * (1.0 / tm + 1.0 / tn));
    const double w = t / sm_count;
    const double cost = ((1.0 - partial_wave_share) * std::ceil(w) + partial_wave_share * w) * tm * tn / h;
    if (cost < best.cost) best = {cost, static_cast<std::int64_t>(t)};
  }
  return best;
}

std::int64_t GemmModel::tiles_of_best_plan(double m, double n, double batch) const {
  return best_plan(m, n, batch).tiles;
}

double GemmModel::time_s(double m, double n, double k, double batch) const {
  const double base = smooth_time_s(m, n, k, batch);
  if (residuals.empty() || base <= 0.0) return base;
  const double lm = std::log2(m * batch), ln = std::log2(n), lk = std::log2(k);
  double weight = prior_weight, sum = 0.0;
  const auto distance_sq = [&](const Residual& r) {
    const double dm = (r.log2_m - lm) / width_log2_m, dn = (r.log2_n - ln) / width_log2_n,
                 dk = (r.log2_k - lk) / width_log2_k;
    return dm * dm + dn * dn + dk * dk;
  };
  const auto add = [&](double d2, double log_ratio) {
    const double w = std::exp(-0.5 * d2);
    weight += w;
    sum += w * log_ratio;
  };
  if (residuals_by_m.size() != residuals.size()) {
    for (const Residual& r : residuals)
      if (const double d2 = distance_sq(r); !(d2 > kResidualReachSq)) add(d2, r.log_ratio);  // beyond: weight below 1e-11
  } else {
    // Every residual whose m term alone stays within reach (a margin over the rounding of dm), then
    // in their own order: the terms a full scan would add, added in the same order.
    const double reach = std::sqrt(kResidualReachSq) * width_log2_m * (1.0 + 1e-9) + 1e-12;
    const auto by_m = [&](std::uint32_t i, double v) { return residuals[i].log2_m < v; };
    const auto lo = std::lower_bound(residuals_by_m.begin(), residuals_by_m.end(), lm - reach, by_m);
    const auto hi = std::lower_bound(lo, residuals_by_m.end(), std::nextafter(lm + reach, kBig), by_m);
    // Those within reach in all three terms are marked in a bitmap of the residuals and added in
    // index order (no sort: hundreds can be within reach): the same squared distances, so the same
    // terms in the same order.
    thread_local std::vector<std::uint64_t> marked;
    thread_local std::vector<double> distances_sq;
    marked.assign((residuals.size() + 63) / 64, 0);
    if (distances_sq.size() < residuals.size()) distances_sq.resize(residuals.size());
    for (auto it = lo; it != hi; ++it)
      if (const double d2 = distance_sq(residuals[*it]); !(d2 > kResidualReachSq)) {
        distances_sq[*it] = d2;
        marked[*it / 64] |= std::uint64_t{1} << (*it % 64);
      }
    for (std::size_t word = 0; word < marked.size(); ++word)
      for (std::uint64_t bits = marked[word]; bits != 0; bits &= bits - 1) {
        const std::size_t i = word * 64 + static_cast<std::size_t>(std::countr_zero(bits));
        add(distances_sq[i], residuals[i].log_ratio);
      }
  }
  return base * std::exp(sum / weight);
}

void GemmModel::index_residuals() {
  residuals_by_m.resize(residuals.size());
  std::iota(residuals_by_m.begin(), residuals_by_m.end(), 0u);
  std::stable_sort(residuals_by_m.begin(), residuals_by_m.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return residuals[a].log2_m < residuals[b].log2_m; });
}

GemmModel fit_gemm_model(const std::vector<GemmTiming>& samples, int sm_count, double element_bytes,
                         const std::vector<std::pair<int, int>>& tiles) {
  if (samples.size() < 8) throw std::invalid_argument("a GEMM model needs at least 8 timed shapes");
  if (sm_count <= 0 || element_bytes <= 0 || tiles.empty())
    throw std::invalid_argument("a GEMM model needs the SM count, the element size and tile shapes");
  double min_t = kBig, best_bw = 0.0, best_flops = 0.0;
  for (const GemmTiming& s : samples) {
    if (!(s.time_s > 0) || !(s.m > 0) || !(s.n > 0) || !(s.k > 0) || !(s.batch > 0))
      throw std::invalid_argument("a GEMM sample needs positive sizes and time");
    min_t = std::min(min_t, s.time_s);
    best_bw = std::max(best_bw, (s.m * s.k + s.k * s.n + s.m * s.n) * s.batch * element_bytes / s.time_s);
    best_flops = std::max(best_flops, 2.0 * s.m * s.n * s.k * s.batch / s.time_s);
  }
  const auto loss = [&](const std::vector<double>& x) {
    const GemmModel g = gemm_from(x, sm_count, element_bytes, tiles);
    double e = 0.0;
    for (const GemmTiming& s : samples) {
      const double r = std::log(truncated_reading_s(g.smooth_time_s(s.m, s.n, s.k, s.batch), s.resolution_s) / s.time_s);
      e += r * r;
    }
    return std::isfinite(e) ? e / static_cast<double>(samples.size()) : kBig;
  };
  std::vector<double> x{std::log(0.5 * min_t), std::log(best_bw),  std::log(1.2 * best_flops / sm_count),
                        std::log(200.0),       std::log(64.0),     std::log(2.0),
                        -2.0};  // partial_wave_share 0.12: mostly whole waves to start with
  const std::vector<double> steps{0.5, 0.2, 0.2, 0.5, 0.5, 0.3, 1.0};
  x = nelder_mead(loss, x, steps, 3000);
  std::vector<double> fine(steps.size());
  std::transform(steps.begin(), steps.end(), fine.begin(), [](double s) { return s / 3.0; });
  x = nelder_mead(loss, x, fine, 3000);
  return gemm_model_from_parameters(x, samples, sm_count, element_bytes, tiles);
}

namespace {
void require_parameters(const std::vector<double>& x) {
  if (x.size() != 7) throw std::invalid_argument("a kernel model has seven parameters");
  for (double v : x)
    if (!std::isfinite(v)) throw std::invalid_argument("a kernel model's parameters must be finite");
}
}  // namespace

GemmModel gemm_model_from_parameters(const std::vector<double>& x, const std::vector<GemmTiming>& samples,
                                     int sm_count, double element_bytes, const std::vector<std::pair<int, int>>& tiles) {
  require_parameters(x);
  GemmModel g = gemm_from(x, sm_count, element_bytes, tiles);
  g.parameters = x;
  for (const GemmTiming& s : samples) {
    const double base = g.smooth_time_s(s.m, s.n, s.k, s.batch);
    g.residuals.push_back({std::log2(s.m * s.batch), std::log2(s.n), std::log2(s.k), std::log(s.time_s / truncated_reading_s(base, s.resolution_s))});
  }
  g.index_residuals();
  g.samples = static_cast<int>(samples.size());
  g.fitted_samples = std::make_shared<const std::vector<GemmTiming>>(samples);
  return g;
}

double GemmModel::in_sample_mape_pct() const {
  if (!fitted_samples) return 0.0;
  std::vector<double> predicted, measured;
  for (const GemmTiming& s : *fitted_samples) predicted.push_back(sample_reading_s(s)), measured.push_back(s.time_s);
  return mape_pct(predicted, measured);
}

bool GemmModel::prices_every_sample() const {
  return std::all_of(residuals.begin(), residuals.end(), [](const Residual& r) { return std::isfinite(r.log_ratio); });
}

double SmallKernelModel::time_s(double bytes, double rows) const {
  const double b = bytes + (rows > 0 ? rows * row_overhead_bytes : 0.0);
  const double stream = l2_bytes > 0 ? std::min(b, l2_bytes) / l2_bytes_per_s + std::max(0.0, b - l2_bytes) / bytes_per_s
                                     : b / bytes_per_s;
  if (!(rows > 0 && row_bytes_per_s > 0)) return launch_s + stream;
  const double row = bytes / rows / row_bytes_per_s;
  const double big = std::max(stream, row), small = std::min(stream, row);
  if (blend <= 0 || big <= 0) return launch_s + big;
  return launch_s + big * std::pow(1.0 + std::pow(small / big, blend), 1.0 / blend);
}

double SmallKernelModel::sample_time_s(const SmallKernelTiming& s) const {
  const double k = static_cast<double>(s.kernels);
  return k * time_s(s.bytes / k, s.rows);
}

double truncated_reading_s(double time_s, double resolution_s) {
  if (!(resolution_s > 0)) return time_s;
  // floor(tau) as a sum of unit steps at 1, 2, 3, ..., each a logistic of width kReadingJitterSteps.
  // Only the steps at floor(tau) and the one above are inside the blur: one a step away or more is
  // within e^(-1 / 0.03) = 3e-15 of 0 or 1.
  const double tau = time_s / resolution_s;
  const double n = std::floor(tau);
  const auto step = [&](double at) { return 1.0 / (1.0 + std::exp(-(tau - at) / kReadingJitterSteps)); };
  const double steps = (n >= 1 ? n - 1 + step(n) : 0.0) + step(n + 1);
  return steps * resolution_s;
}

double GemmModel::sample_reading_s(const GemmTiming& s) const {
  return truncated_reading_s(time_s(s.m, s.n, s.k, s.batch), s.resolution_s);
}

double SmallKernelModel::sample_reading_s(const SmallKernelTiming& s) const {
  const double k = static_cast<double>(s.kernels);
  return k * truncated_reading_s(time_s(s.bytes / k, s.rows), s.resolution_s);
}

SmallKernelModel fit_small_kernel_model(const std::vector<SmallKernelTiming>& samples, double hbm_bytes_per_s,
                                        double l2_bytes) {
  if (samples.size() < 3) throw std::invalid_argument("a small-kernel model needs at least 3 timed sizes");
  double min_t = kBig, best_bw = 0.0, best_row = 0.0;
  bool rows = true;
  for (const SmallKernelTiming& s : samples) {
    if (!(s.time_s > 0) || !(s.bytes > 0) || s.rows < 0 || s.kernels < 1)
      throw std::invalid_argument("a small-kernel sample needs positive bytes, time and kernel count");
    min_t = std::min(min_t, s.time_s / s.kernels);
    best_bw = std::max(best_bw, s.bytes / s.time_s);
    if (s.rows > 0) best_row = std::max(best_row, s.bytes / s.rows / s.time_s);
    rows = rows && s.rows > 0;
  }
  bool bounded = false;
  const auto model = [&](const std::vector<double>& x) { return small_model(x, bounded, rows, hbm_bytes_per_s, l2_bytes); };
  const auto loss = [&](const std::vector<double>& x) {
    const SmallKernelModel m = model(x);
    double e = 0.0;
    for (const SmallKernelTiming& s : samples) e += std::abs(m.sample_reading_s(s) / s.time_s - 1.0);
    return std::isfinite(e) ? e / static_cast<double>(samples.size()) : kBig;
  };
  // Starts: a 1 kB per-row overhead, p = 3, half of an H100's 50 MB L2 at 1.5x the HBM speed.
  const auto search = [&](double bw_start, double l2_start) {
    std::vector<double> x{std::log(0.5 * min_t), bw_start,        std::log(rows ? best_row : 1.0),
                          std::log(1000.0),      std::log(2.0),   l2_start,
                          std::log(0.5)};
    std::vector<double> steps{0.5, 0.3, 0.5, 1.0, 0.5, 0.5, 0.5};
    x = nelder_mead(loss, x, steps, 2000);
    for (double& s : steps) s /= 5.0;
    return nelder_mead(loss, x, steps, 2000);
  };
  std::vector<double> x = search(std::log(best_bw), std::log(2.5e7));
  // Samples of one narrow family (one model's widths, up to 4096 rows) may not tell a per-row cost
  // from a stream: the fit can then put the stream beyond what HBM delivers, or hold more in L2 than
  // the device has (H100 GeLU, phi-2 alone: 79 TB/s, 132 MB of L2), and extrapolate wrongly to other
  // widths and row counts. Then it is fitted again within both bounds (logistic shares of them,
  // started at 90% of the bandwidth and half of the L2).
  const SmallKernelModel unbounded = model(x);
  if ((hbm_bytes_per_s > 0 && unbounded.bytes_per_s > hbm_bytes_per_s) || (l2_bytes > 0 && unbounded.l2_bytes > l2_bytes)) {
    bounded = true;
    const double bw0 = hbm_bytes_per_s > 0 ? std::log(9.0) : std::log(best_bw);
    const double l20 = l2_bytes > 0 ? 0.0 : std::log(2.5e7);
    x = search(bw0, l20);
  }
  return small_kernel_model_from_parameters(x, bounded, samples, hbm_bytes_per_s, l2_bytes);
}

SmallKernelModel small_kernel_model_from_parameters(const std::vector<double>& x, bool bounded,
                                                    const std::vector<SmallKernelTiming>& samples,
                                                    double hbm_bytes_per_s, double l2_bytes) {
  require_parameters(x);
  bool rows = true;
  for (const SmallKernelTiming& s : samples) rows = rows && s.rows > 0;
  SmallKernelModel m = small_model(x, bounded, rows, hbm_bytes_per_s, l2_bytes);
  m.parameters = x;
  m.bounded = bounded;
  std::vector<double> predicted, measured;
  for (const SmallKernelTiming& s : samples) predicted.push_back(m.sample_reading_s(s)), measured.push_back(s.time_s);
  m.samples = static_cast<int>(samples.size());
  m.in_sample_mape_pct = mape_pct(predicted, measured);
  return m;
}

SmallKernelModel scaled_small_kernel_model(const SmallKernelModel& base, const std::vector<SmallKernelTiming>& samples) {
  if (samples.empty()) throw std::invalid_argument("a scaled small-kernel model needs a sample");
  double log_sum = 0.0;
  for (const SmallKernelTiming& s : samples) {
    const double predicted = base.sample_reading_s(s);
    if (!(predicted > 0) || !std::isfinite(predicted))
      throw std::invalid_argument("the model it scales prices a sample at no time");
    log_sum += std::log(s.time_s / predicted);
  }
  const double f = std::exp(log_sum / static_cast<double>(samples.size()));
  SmallKernelModel m = base;
  m.launch_s *= f;
  m.row_bytes_per_s /= f;
  m.bytes_per_s /= f;
  m.l2_bytes_per_s /= f;
  m.parameters.clear();
  m.bounded = false;
  std::vector<double> predicted, measured;
  for (const SmallKernelTiming& s : samples) predicted.push_back(m.sample_reading_s(s)), measured.push_back(s.time_s);
  m.samples = static_cast<int>(samples.size());
  m.in_sample_mape_pct = mape_pct(predicted, measured);
  return m;
}

nlohmann::json to_json(const GemmModel& m) {
  nlohmann::json tiles = nlohmann::json::array();
  for (const auto& [tm, tn] : m.tiles) tiles.push_back({tm, tn});
  return {{"sm_count", m.sm_count},
          {"element_bytes", m.element_bytes},
          {"tiles", tiles},
          {"launch_s", m.launch_s},
          {"operand_bytes_per_s", m.operand_bytes_per_s},
          {"sm_flops_per_s", m.sm_flops_per_s},
          {"k_half", m.k_half},
          {"tile_overhead", m.tile_overhead},
          {"blend", m.blend},
          {"partial_wave_share", m.partial_wave_share},
          {"samples", m.samples},
          {"in_sample_mape_pct", m.in_sample_mape_pct()}};
}

nlohmann::json to_json(const SmallKernelModel& m) {
  return {{"launch_s", m.launch_s},
          {"row_bytes_per_s", m.row_bytes_per_s},
          {"bytes_per_s", m.bytes_per_s},
          {"l2_bytes", m.l2_bytes},
          {"l2_bytes_per_s", m.l2_bytes_per_s},
          {"row_overhead_bytes", m.row_overhead_bytes},
          {"blend", m.blend},
          {"samples", m.samples},
          {"in_sample_mape_pct", m.in_sample_mape_pct}};
}

namespace {

// For each sample, in the order given, the reading predicted by the model fitted on every other
// group's samples (and those of no group, always fitted on); NaN where the sample is never held out:
// it names no group, all samples are of one group, or the fit without its group has too few samples.
template <class Sample, class Fit, class Predict>
std::vector<double> held_out_readings(const std::vector<Sample>& samples, Fit fit, Predict predict) {
  std::vector<double> out(samples.size(), std::numeric_limits<double>::quiet_NaN());
  std::set<std::string> groups;
  for (const Sample& s : samples) groups.insert(s.group);
  if (groups.size() < 2) return out;
  for (const std::string& group : groups) {
    if (group.empty()) continue;  // samples that name no model are always fitted on
    std::vector<Sample> train;
    for (const Sample& s : samples)
      if (s.group != group) train.push_back(s);
    try {
      const auto model = fit(train);
      for (std::size_t i = 0; i < samples.size(); ++i)
        if (samples[i].group == group) out[i] = predict(model, samples[i]);
    } catch (const std::invalid_argument&) {
      continue;  // too few samples without this group
    }
  }
  return out;
}

// Per group, in the order of their names, the error of the samples held out: the mean and the largest
// |reading / time - 1|, summed in sample order. A group without a held-out reading is left out.
template <class Sample>
std::vector<HeldOutError> errors_by_group(const std::vector<Sample>& samples, const std::vector<double>& readings) {
  if (readings.size() != samples.size())
    throw std::invalid_argument("held-out readings must be one per sample");
  std::map<std::string, std::pair<HeldOutError, double>> groups;  // the error so far, the sum of |errors|
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (!std::isfinite(readings[i])) continue;
    auto& [e, sum] = groups[samples[i].group];
    const double err = std::abs(readings[i] / samples[i].time_s - 1.0);
    sum += err;
    ++e.samples;
    e.max_abs_pct = std::max(e.max_abs_pct, 100.0 * err);
  }
  std::vector<HeldOutError> out;
  for (auto& [group, entry] : groups) {
    auto& [e, sum] = entry;
    e.group = group;
    e.mape_pct = 100.0 * sum / e.samples;
    out.push_back(e);
  }
  return out;
}

}  // namespace

std::vector<double> held_out_readings_gemm(const std::vector<GemmTiming>& samples, int sm_count,
                                           double element_bytes) {
  return held_out_readings(
      samples, [&](const std::vector<GemmTiming>& t) { return fit_gemm_model(t, sm_count, element_bytes); },
      [](const GemmModel& g, const GemmTiming& s) { return g.sample_reading_s(s); });
}

std::vector<double> held_out_readings_small(const std::vector<SmallKernelTiming>& samples, double hbm_bytes_per_s,
                                            double l2_bytes) {
  // Per op: each op has its own model, fitted without the group on that op's samples alone.
  std::map<std::string, std::vector<std::size_t>> by_op;
  for (std::size_t i = 0; i < samples.size(); ++i) by_op[samples[i].op].push_back(i);
  std::vector<double> out(samples.size(), std::numeric_limits<double>::quiet_NaN());
  for (const auto& [op, indices] : by_op) {
    std::vector<SmallKernelTiming> ops;
    for (std::size_t i : indices) ops.push_back(samples[i]);
    const std::vector<double> readings = held_out_readings(
        ops, [&](const std::vector<SmallKernelTiming>& t) { return fit_small_kernel_model(t, hbm_bytes_per_s, l2_bytes); },
        [](const SmallKernelModel& m, const SmallKernelTiming& s) { return m.sample_reading_s(s); });
    for (std::size_t j = 0; j < indices.size(); ++j) out[indices[j]] = readings[j];
  }
  return out;
}

std::vector<HeldOutError> held_out_errors(const std::vector<GemmTiming>& samples, const std::vector<double>& readings) {
  return errors_by_group(samples, readings);
}

std::vector<HeldOutError> held_out_errors(const std::vector<SmallKernelTiming>& samples,
                                          const std::vector<double>& readings) {
  return errors_by_group(samples, readings);
}

std::vector<HeldOutError> leave_one_group_out_gemm(const std::vector<GemmTiming>& samples, int sm_count,
                                                   double element_bytes) {
  return held_out_errors(samples, held_out_readings_gemm(samples, sm_count, element_bytes));
}

std::vector<HeldOutError> leave_one_group_out_small(const std::vector<SmallKernelTiming>& samples,
                                                    double hbm_bytes_per_s, double l2_bytes) {
  return held_out_errors(samples, held_out_readings_small(samples, hbm_bytes_per_s, l2_bytes));
}

}  // namespace fusesim::model
