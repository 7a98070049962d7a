#pragma once
// Kernel time models learned from measured samples (docs/calibration.md, "Kernel models"): a GEMM
// model with wave and tile quantization on the device's SMs, and a small-kernel model with the
// per-launch floor measurements show. Both weigh errors relative to the time (a 5 us kernel and a 5 ms
// one alike): the GEMM model by least squares on log time, the small-kernel model by mean absolute
// relative error (see fit_small_kernel_model), so one parameter set covers every shape of a profile.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace fusesim::model {

// One timed GEMM, C[m, n] = A[m, k] B[k, n] `batch` times, elements of `element_bytes`.
struct GemmTiming {
  double m = 0, n = 0, k = 0, batch = 1;
  double time_s = 0;
  std::string group;  // the model or source the shape came from (leave-one-group-out)
  double resolution_s = 0;  // 0: exact; else the timer reads the duration truncated to it
};

// time = launch_s + (memory^p + compute^p)^(1/p), with
//   memory  = (m k + k n + m n) batch x element_bytes / operand_bytes_per_s
//   compute = min over tiles (tm, tn) of waves x tm tn 2 k / (sm_flops_per_s x k / (k + k_half) x h(tm, tn))
//   waves   = (1 - s) ceil(w) + s w,  w = ceil(m / tm) ceil(n / tn) batch / sm_count,  s = partial_wave_share
//   h       = (1 + tile_overhead (1/128 + 1/256)) / (1 + tile_overhead (1/tm + 1/tn))
// h is 1 for the 128 x 256 tile and lower for smaller ones (each k step loads tm + tn operands for
// tm tn multiply-adds); k / (k + k_half) is the prologue and epilogue of each tile amortized over its
// k loop; p blends the operand stream with the math instead of taking the max (both overlap, neither
// perfectly). A last, partial wave costs less than a full one (its tiles share HBM and L2 with fewer
// others, and cuBLAS's stream-K kernels spread the remainder over all SMs), so waves are a mix of the
// whole count and the exact fraction, s fitted (its effect on the held-out error: BENCHMARKS.md,
// "Kernel models"). Every term grows with m, n and k, so the model is monotone in each.
struct GemmModel {
  int sm_count = 0;
  double element_bytes = 2;
  std::vector<std::pair<int, int>> tiles;
  double launch_s = 0;
  double operand_bytes_per_s = 0;
  double sm_flops_per_s = 0;
  double k_half = 0;
  double tile_overhead = 0;
  double blend = 1;
  double partial_wave_share = 0;
  // Residual correction: the fit's log residuals of the samples, smoothed by a Gaussian kernel in
  // (log2 m, log2 n, log2 k) with these widths and shrunk towards 0 by `prior_weight`, so that a shape
  // near measured ones takes their deviation from the smooth model and a far one the model alone.
  double width_log2_m = 0.3, width_log2_n = 0.5, width_log2_k = 0.5, prior_weight = 0.1;
  struct Residual {
    double log2_m, log2_n, log2_k, log_ratio;
  };
  std::vector<Residual> residuals;
  // Residual indices in order of log2_m (index_residuals()): time_s reads only those within reach of
  // the kernel in m, in their own order, so that it sums the same terms in the same order as a scan
  // of all of them would (empty: time_s scans all).
  std::vector<std::uint32_t> residuals_by_m;
  int samples = 0;
  // The samples fitted, for in_sample_mape_pct() (shared by copies of the model).
  std::shared_ptr<const std::vector<GemmTiming>> fitted_samples;
  // What the search found, the seven values above as it searches them (logs, a logit): with the same
  // samples, gemm_model_from_parameters rebuilds this model exactly (a profile's stored fit).
  std::vector<double> parameters;

  double smooth_time_s(double m, double n, double k, double batch) const;  // without the correction
  double time_s(double m, double n, double k, double batch) const;         // with it
  void index_residuals();
  // The mean error of sample_reading_s over the samples fitted: computed when asked (each sample
  // priced with its residual correction: a few milliseconds a profile, which every start-up would
  // pay for a figure only `fusesim validate` reports).
  double in_sample_mape_pct() const;
  // Whether every sample's residual is finite, hence every sample priced (stored parameters edited
  // by hand may price none).
  bool prices_every_sample() const;
  // What the sample's timer reads for its shape: time_s truncated to its resolution.
  double sample_reading_s(const GemmTiming& s) const;
  // Output tiles of the plan the smooth model picks (for contention's wave model).
  std::int64_t tiles_of_best_plan(double m, double n, double batch) const;

 private:
  // The tile the model runs (m, n, batch) with: least waves x tm tn / h. k scales every plan alike,
  // so the choice does not depend on it. `cost` x 2 k / (sm_flops x k / (k + k_half)) is its compute time.
  struct Plan {
    double cost = 0;
    std::int64_t tiles = 0;
  };
  Plan best_plan(double m, double n, double batch) const;
};

// The CTA tile shapes the fit chooses among unless told otherwise: CUTLASS 3's SM90 GEMM collective
// tile shapes (M, N from 64 to 256; NVIDIA/cutlass include/cutlass/gemm/collective/builders).
const std::vector<std::pair<int, int>>& default_gemm_tiles();

// Fits a GemmModel on `samples` (>= 8, every time positive) for a device of `sm_count` SMs.
// Throws std::invalid_argument otherwise.
GemmModel fit_gemm_model(const std::vector<GemmTiming>& samples, int sm_count, double element_bytes,
                         const std::vector<std::pair<int, int>>& tiles = default_gemm_tiles());
// The model fit_gemm_model ends with once its search has found `parameters` (GemmModel::parameters):
// residuals and in-sample error from the samples, without the search (std::invalid_argument when
// `parameters` are not seven finite values).
GemmModel gemm_model_from_parameters(const std::vector<double>& parameters, const std::vector<GemmTiming>& samples,
                                     int sm_count, double element_bytes,
                                     const std::vector<std::pair<int, int>>& tiles = default_gemm_tiles());

// One timed small kernel: `bytes` of HBM traffic over `rows` rows (tokens); rows 0 when unknown.
// `kernels` > 1: the timed region launched that many kernels of the op one after another, each moving
// bytes / kernels over the same rows (vidur times phi-2's three-tensor residual add, two adds, as one).
struct SmallKernelTiming {
  std::string op;
  double bytes = 0, rows = 0;
  double time_s = 0;
  std::string group;
  int kernels = 1;
  double resolution_s = 0;  // 0: exact; else the timer reads each kernel's duration truncated to it
};

// What a timer that truncates each kernel's duration to whole `resolution_s` steps reads for a kernel
// of `time_s` (`time_s` itself when `resolution_s` is 0). PyTorch's profiler, which vidur times its
// kernels with, reports integer microseconds cut down from nanoseconds (KinetoEvent::durationUs in
// torch/csrc/autograd/profiler_kineto.cpp: (end_ns - start_ns) / 1000), so a 1.9 us kernel reads 1 us
// and a fit that compares times with readings puts every short kernel about half a step too low. The
// models are fitted to predict the reading and price kernels by the time itself (docs/calibration.md,
// "Timer resolution"). The steps are blurred over kReadingJitterSteps of a step, the run-to-run jitter
// left in a median of repeats, so that the fit sees a slope where a hard floor is flat.
inline constexpr double kReadingJitterSteps = 0.03;
double truncated_reading_s(double time_s, double resolution_s);

// time = launch_s + (row^p + stream^p)^(1/p), with row_bytes = bytes / rows and
//   row    = row_bytes / row_bytes_per_s
//   stream = min(b, l2_bytes) / l2_bytes_per_s + max(0, b - l2_bytes) / bytes_per_s,
//   b      = bytes + rows x row_overhead_bytes
// Row-wise kernels (norms, activations, rotary) give each row to one block: below a full device of
// rows the time is one row's, above it the stream's; `launch_s` is the floor every measurement shows.
// The stream runs at L2 speed for the bytes that fit in L2 (the timed kernel finds its inputs there
// when they fit) and at HBM speed beyond; each row costs `row_overhead_bytes` more (its block's start
// and reduction), so narrow rows stream slower than wide ones. p blends the two terms instead of the
// max (a device of rows is not filled at once). Without rows (0), only the stream of `bytes`.
struct SmallKernelModel {
  double launch_s = 0;
  double row_bytes_per_s = 0;  // 0: no per-row term (rows unknown in the samples)
  double bytes_per_s = 0;
  double l2_bytes = 0, l2_bytes_per_s = 0;  // l2_bytes 0: HBM speed throughout
  double row_overhead_bytes = 0;
  double blend = 0;  // 0: the max of the two terms
  int samples = 0;
  double in_sample_mape_pct = 0;
  // What the search found (seven values, as searched) and whether within the device's bounds: with
  // the same samples and bounds, small_kernel_model_from_parameters rebuilds this model exactly.
  std::vector<double> parameters;
  bool bounded = false;
  double time_s(double bytes, double rows) const;
  // What the model predicts for a sample's timed region: its kernels one after another.
  double sample_time_s(const SmallKernelTiming& s) const;
  // What the sample's timer reads for that region: each kernel's reading, summed (vidur's timer sums
  // the kernels of a region).
  double sample_reading_s(const SmallKernelTiming& s) const;
};

// Fits one op's samples (>= 3) by least absolute relative error, the error `fusesim validate`
// reports: the samples are recorded at 0.5-1 us resolution and most small kernels take 1-6 us, so a
// log-least-squares fit lands between ticks where every sample is a tick off. Throws
// std::invalid_argument otherwise.
// `hbm_bytes_per_s`, `l2_bytes` > 0: the device's HBM bandwidth and L2 size, which no fitted stream
// may exceed (see the .cpp); 0: unbounded.
SmallKernelModel fit_small_kernel_model(const std::vector<SmallKernelTiming>& samples, double hbm_bytes_per_s = 0,
                                        double l2_bytes = 0);
// The model fit_small_kernel_model ends with once its search has found `parameters` (bounded or
// not), without the search (std::invalid_argument when they are not seven finite values).
// An op with one or two samples: too few for the seven parameters, enough for one. `base` (the model
// that would price the op without them: its forward op's, its base op's, the residual add's) times the
// factor f its samples show (the geometric mean of measured over predicted reading): the same shape
// dependence, the measured level. launch_s x f and every bandwidth / f make time_s exactly f times
// base's. `parameters` stays empty: nothing searched, nothing to store (profile.cpp).
SmallKernelModel scaled_small_kernel_model(const SmallKernelModel& base, const std::vector<SmallKernelTiming>& samples);
SmallKernelModel small_kernel_model_from_parameters(const std::vector<double>& parameters, bool bounded,
                                                    const std::vector<SmallKernelTiming>& samples,
                                                    double hbm_bytes_per_s = 0, double l2_bytes = 0);

nlohmann::json to_json(const GemmModel& m);       // without residuals: they are rebuilt from the samples
nlohmann::json to_json(const SmallKernelModel& m);

// Leave-one-group-out per sample: for each sample, in the order given, the reading (sample_reading_s)
// predicted by the model fitted without the sample's group (the small kernels: per op, on that op's
// samples); NaN where the sample is never held out (it names no group, every sample is of one group,
// or the fit without its group has too few samples). Samples of no group are always fitted on.
std::vector<double> held_out_readings_gemm(const std::vector<GemmTiming>& samples, int sm_count,
                                           double element_bytes);
std::vector<double> held_out_readings_small(const std::vector<SmallKernelTiming>& samples,
                                            double hbm_bytes_per_s = 0, double l2_bytes = 0);
// Leave-one-group-out: for each group, fit on the others and predict it. {group, samples, mape_pct, max_pct}.
struct HeldOutError {
  std::string group;
  int samples = 0;
  double mape_pct = 0, max_abs_pct = 0;
};
std::vector<HeldOutError> leave_one_group_out_gemm(const std::vector<GemmTiming>& samples, int sm_count,
                                                   double element_bytes);
std::vector<HeldOutError> leave_one_group_out_small(const std::vector<SmallKernelTiming>& samples,
                                                    double hbm_bytes_per_s = 0, double l2_bytes = 0);
// The same errors from readings already predicted (one per sample, NaN: not held out), groups in the
// order of their names; a group with no held-out reading is left out.
std::vector<HeldOutError> held_out_errors(const std::vector<GemmTiming>& samples, const std::vector<double>& readings);
std::vector<HeldOutError> held_out_errors(const std::vector<SmallKernelTiming>& samples,
                                          const std::vector<double>& readings);

}  // namespace fusesim::model
