// The learned kernel models (include/fusesim/model/kernel_fit.hpp): fits recover the parameters that
// generated synthetic samples, predictions between measured shapes fall between them, and
// leave-one-group-out predicts each group from the others.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fusesim/model/kernel_fit.hpp"

using namespace fusesim::model;

namespace {

// Synthetic H100-like parameters: 3 us launch, 3 TB/s operand stream, 7 TFLOP/s per SM (924 on 132),
// tiles amortized over k with k_half 160, tile overhead 10, blend exponent 2.5.
GemmModel truth() {
  GemmModel g;
  g.sm_count = 132;
  g.element_bytes = 2;
  g.tiles = default_gemm_tiles();
  g.launch_s = 3e-6;
  g.operand_bytes_per_s = 3e12;
  g.sm_flops_per_s = 7e12;
  g.k_half = 160;
  g.tile_overhead = 10;
  g.blend = 2.5;
  return g;
}

// A 2 us launch floor, 10 GB/s per row, a 2 TB/s stream: the small-kernel model the fits recover.
SmallKernelModel row_and_stream_model() {
  SmallKernelModel t;
  t.launch_s = 2e-6;
  t.row_bytes_per_s = 10e9;
  t.bytes_per_s = 2e12;
  return t;
}

std::vector<GemmTiming> synthetic(const GemmModel& g, const char* group, double n, double k) {
  std::vector<GemmTiming> out;
  for (double m : {1.0, 16.0, 64.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0})
    out.push_back({m, n, k, 1.0, g.smooth_time_s(m, n, k, 1.0), group, 0});
  return out;
}

}  // namespace

TEST_CASE("kernel fit: the GEMM model recovers the parameters that generated its samples", "[model][kernel_fit]") {
  const GemmModel t = truth();
  std::vector<GemmTiming> samples;
  for (double n : {1024.0, 4096.0, 12288.0})
    for (double k : {512.0, 4096.0, 14336.0}) {
      const auto s = synthetic(t, "synthetic", n, k);
      samples.insert(samples.end(), s.begin(), s.end());
    }
  const GemmModel f = fit_gemm_model(samples, 132, 2.0);
  // Noise-free samples: every time within 0.5%, and the parameters the times depend on most closely.
  CHECK(f.in_sample_mape_pct() < 0.5);
  CHECK(f.launch_s == Approx(t.launch_s).epsilon(0.1));
  CHECK(f.operand_bytes_per_s == Approx(t.operand_bytes_per_s).epsilon(0.05));
  CHECK(f.sm_flops_per_s == Approx(t.sm_flops_per_s).epsilon(0.05));
  CHECK(f.k_half == Approx(t.k_half).epsilon(0.15));
}

TEST_CASE("kernel fit: the smooth GEMM model is monotone in m, n and k", "[model][kernel_fit]") {
  const GemmModel g = truth();
  // Each term (operand bytes, waves of tiles, k + k_half per tile) grows with every size.
  for (double m = 1; m <= 16384; m *= 1.37) {
    CHECK(g.smooth_time_s(m * 1.37, 4096, 4096, 1) >= g.smooth_time_s(m, 4096, 4096, 1));
    CHECK(g.smooth_time_s(4096, m * 1.37, 4096, 1) >= g.smooth_time_s(4096, m, 4096, 1));
    CHECK(g.smooth_time_s(4096, 4096, m * 1.37, 1) >= g.smooth_time_s(4096, 4096, m, 1));
  }
}

TEST_CASE("kernel fit: a shape between two measured shapes is predicted between them", "[model][kernel_fit]") {
  // Measured: m = 1024 and m = 2048 (and the rest of a grid) with 5% noise of alternating sign, so
  // that the residual correction has something to carry to the neighbours.
  const GemmModel t = truth();
  std::vector<GemmTiming> samples;
  int i = 0;
  for (double n : {4096.0, 8192.0})
    for (double k : {4096.0, 8192.0})
      for (auto s : synthetic(t, "a", n, k)) {
        s.time_s *= (i++ % 2) ? 1.05 : 0.95;
        samples.push_back(s);
      }
  const GemmModel f = fit_gemm_model(samples, 132, 2.0);
  const double lo = f.time_s(1024, 4096, 4096, 1), hi = f.time_s(2048, 4096, 4096, 1);
  for (double m : {1100.0, 1300.0, 1536.0, 1800.0, 2000.0}) {
    const double mid = f.time_s(m, 4096, 4096, 1);
    CHECK(mid >= lo);
    CHECK(mid <= hi);
  }
}

TEST_CASE("kernel fit: leave one group out predicts a held-out model's shapes", "[model][kernel_fit]") {
  const GemmModel t = truth();
  std::vector<GemmTiming> samples;
  for (const auto& [group, n, k] : {std::tuple{"a", 4096.0, 4096.0}, std::tuple{"b", 5120.0, 5120.0},
                                    std::tuple{"c", 8192.0, 8192.0}, std::tuple{"d", 6144.0, 4096.0}}) {
    const auto s = synthetic(t, group, n, k);
    samples.insert(samples.end(), s.begin(), s.end());
  }
  const auto errors = leave_one_group_out_gemm(samples, 132, 2.0);
  REQUIRE(errors.size() == 4);
  for (const HeldOutError& e : errors) {
    CHECK(e.samples == 9);
    // Noise-free samples of one model form: the others pin it down.
    CHECK(e.mape_pct < 2.0);
  }
}

TEST_CASE("kernel fit: leave one group out, sample by sample, gives the errors it reports", "[model][kernel_fit]") {
  const GemmModel t = truth();
  std::vector<GemmTiming> samples;
  for (const auto& [group, n, k] : {std::tuple{"a", 4096.0, 4096.0}, std::tuple{"b", 5120.0, 5120.0},
                                    std::tuple{"c", 8192.0, 8192.0}}) {
    auto s = synthetic(t, group, n, k);
    // Off the model by +-4%, so that each group's error is not 0 and a wrong reading would show.
    for (std::size_t i = 0; i < s.size(); ++i) s[i].time_s *= i % 2 ? 1.04 : 0.96;
    samples.insert(samples.end(), s.begin(), s.end());
  }
  // A sample of no group is always fitted on and never predicted.
  samples.push_back(synthetic(t, "", 6144.0, 4096.0).front());
  const std::vector<double> readings = held_out_readings_gemm(samples, 132, 2.0);
  REQUIRE(readings.size() == samples.size());
  CHECK(std::isnan(readings.back()));
  // Each reading is the one of the model fitted without its group: refit by hand for group "b".
  std::vector<GemmTiming> without_b;
  for (const GemmTiming& s : samples)
    if (s.group != "b") without_b.push_back(s);
  const GemmModel fit_b = fit_gemm_model(without_b, 132, 2.0);
  std::map<std::string, std::pair<double, int>> by_group;  // sum of |reading / time - 1|, count
  for (std::size_t i = 0; i + 1 < samples.size(); ++i) {
    REQUIRE(std::isfinite(readings[i]));
    if (samples[i].group == "b") CHECK(readings[i] == fit_b.sample_reading_s(samples[i]));
    auto& [sum, count] = by_group[samples[i].group];
    sum += std::abs(readings[i] / samples[i].time_s - 1.0);
    ++count;
  }
  // The per-group errors are these readings' mean error, exactly what leave_one_group_out_gemm reports.
  const auto errors = leave_one_group_out_gemm(samples, 132, 2.0);
  REQUIRE(errors.size() == 3);
  for (const HeldOutError& e : errors) {
    INFO(e.group);
    CHECK(e.samples == by_group[e.group].second);
    CHECK(e.mape_pct == 100.0 * by_group[e.group].first / by_group[e.group].second);
    CHECK(e.mape_pct > 1.0);
  }
  const auto from_readings = held_out_errors(samples, readings);
  REQUIRE(from_readings.size() == errors.size());
  for (std::size_t g = 0; g < errors.size(); ++g) CHECK(from_readings[g].mape_pct == errors[g].mape_pct);
  // One group alone: nothing to hold out.
  const std::vector<GemmTiming> one(samples.begin(), samples.begin() + 9);
  for (double r : held_out_readings_gemm(one, 132, 2.0)) CHECK(std::isnan(r));
}

TEST_CASE("kernel fit: the small-kernel model recovers launch floor, per-row and stream bandwidths",
          "[model][kernel_fit]") {
  // time = 2 us + max(row_bytes / 10 GB/s, bytes / 2 TB/s): rows of 32 KiB take 3.3 us one at a time,
  // so up to 2 TB/s x 3.3 us / 32 KiB = 200 rows the per-row term rules, the stream beyond.
  const SmallKernelModel t = row_and_stream_model();
  std::vector<SmallKernelTiming> samples;
  for (double row_bytes : {16384.0, 32768.0, 131072.0})
    for (double rows : {1.0, 16.0, 64.0, 256.0, 1024.0, 4096.0})
      samples.push_back({"layernorm", rows * row_bytes, rows, t.time_s(rows * row_bytes, rows), "x", 1, 0});
  // Hand-derived point: 4096 rows of 32 KiB = 134,217,728 bytes, 67.1 us of stream + 2 us.
  CHECK(t.time_s(4096 * 32768.0, 4096) == Approx(2e-6 + 134217728.0 / 2e12));
  const SmallKernelModel f = fit_small_kernel_model(samples);
  CHECK(f.in_sample_mape_pct < 0.5);
  CHECK(f.launch_s == Approx(t.launch_s).epsilon(0.05));
  CHECK(f.row_bytes_per_s == Approx(t.row_bytes_per_s).epsilon(0.05));
  CHECK(f.bytes_per_s == Approx(t.bytes_per_s).epsilon(0.05));
}

TEST_CASE("kernel fit: an op of one or two samples scales the model it would fall back to", "[model][kernel_fit]") {
  // Base: 2 us + max(row_bytes / 10 GB/s, bytes / 2 TB/s). A kernel measured at 2x the base's time
  // at one shape gets f = 2; two samples at 2x and 8x get the geometric mean, f = 4. Scaling the
  // launch by f and every bandwidth by 1/f makes the time f x the base's at every shape (both
  // regimes, hand-checked at 1 and 4096 rows of 32 KiB).
  const SmallKernelModel base = row_and_stream_model();
  const double t1 = base.time_s(1024 * 32768.0, 1024);
  const SmallKernelModel one = scaled_small_kernel_model(base, {{"n", 1024 * 32768.0, 1024, 2 * t1, "x", 1, 0}});
  CHECK(one.sample_time_s({"n", 1024 * 32768.0, 1024, 0, "x", 1, 0}) == Approx(2 * t1));
  CHECK(one.in_sample_mape_pct == Approx(0).margin(1e-9));
  CHECK(one.parameters.empty());
  const double t2 = base.time_s(16 * 32768.0, 16);
  const SmallKernelModel two = scaled_small_kernel_model(
      base, {{"n", 1024 * 32768.0, 1024, 2 * t1, "x", 1, 0}, {"n", 16 * 32768.0, 16, 8 * t2, "x", 1, 0}});
  for (double rows : {1.0, 4096.0}) CHECK(two.time_s(rows * 32768, rows) == Approx(4 * base.time_s(rows * 32768, rows)));
  // Each sample is 2x off the scaled model (4 against 2 and 8): 50% and 100%, mean 75%.
  CHECK(two.in_sample_mape_pct == Approx(75.0));
  CHECK_THROWS_AS(scaled_small_kernel_model(base, {}), std::invalid_argument);
}

TEST_CASE("kernel fit: a partial last wave of GEMM tiles costs its share of a wave", "[model][kernel_fit]") {
  // 4 SMs, one 128 x 128 tile shape, no tile overhead, no k prologue, an operand stream too fast to
  // matter: compute = waves x 128 x 128 x 2 k / sm_flops. m = 640, n = 128 is 5 tiles, 1.25 waves on
  // 4 SMs: whole waves 2, exact 1.25; with share 0.6 the model runs 0.4 x 2 + 0.6 x 1.25 = 1.55 waves.
  GemmModel g;
  g.sm_count = 4;
  g.tiles = {{128, 128}};
  g.operand_bytes_per_s = 1e30;
  g.sm_flops_per_s = 1e12;
  g.k_half = 0;
  g.tile_overhead = 0;
  g.blend = 2;
  const double k = 1024, wave_s = 128.0 * 128.0 * 2.0 * k / 1e12;
  g.partial_wave_share = 0.0;
  CHECK(g.smooth_time_s(640, 128, k, 1) == Approx(2.0 * wave_s));
  g.partial_wave_share = 0.6;
  CHECK(g.smooth_time_s(640, 128, k, 1) == Approx(1.55 * wave_s));
  // Whole waves are unaffected, and the time still grows with m through the partial wave.
  CHECK(g.smooth_time_s(512, 128, k, 1) == Approx(1.0 * wave_s));
  for (double m = 512; m < 2048; m += 64) CHECK(g.smooth_time_s(m + 64, 128, k, 1) >= g.smooth_time_s(m, 128, k, 1));
}

TEST_CASE("kernel fit: the small-kernel stream runs at L2 speed for what fits in L2, HBM speed beyond",
          "[model][kernel_fit]") {
  // 1 us launch, 2 TB/s HBM, 4 TB/s for the first 10 MB, no per-row term: 6 MB take 1 + 1.5 us;
  // 30 MB take 1 + 10 MB / 4 TB/s + 20 MB / 2 TB/s = 1 + 2.5 + 10 = 13.5 us. Per-row overhead 1 kB:
  // 1000 rows of the 30 MB add 1 MB at HBM speed, 0.5 us.
  SmallKernelModel m;
  m.launch_s = 1e-6;
  m.bytes_per_s = 2e12;
  m.l2_bytes = 10e6;
  m.l2_bytes_per_s = 4e12;
  CHECK(m.time_s(6e6, 0) == Approx(2.5e-6));
  CHECK(m.time_s(30e6, 0) == Approx(13.5e-6));
  m.row_overhead_bytes = 1000;
  CHECK(m.time_s(30e6, 1000) == Approx(14e-6));
  // With a per-row term and a blend, the time still grows with the rows and with the bytes per row.
  m.row_bytes_per_s = 10e9;
  m.blend = 3;
  for (double rows = 1; rows < 8192; rows *= 1.5) {
    CHECK(m.time_s(32768 * rows * 1.5, rows * 1.5) >= m.time_s(32768 * rows, rows));
    CHECK(m.time_s(40000 * rows, rows) >= m.time_s(32768 * rows, rows));
  }
}

TEST_CASE("kernel fit: the small-kernel fit recovers an L2 regime and a per-row overhead", "[model][kernel_fit]") {
  SmallKernelModel t;
  t.launch_s = 1.5e-6;
  t.row_bytes_per_s = 10e9;
  t.bytes_per_s = 2e12;
  t.l2_bytes = 20e6;
  t.l2_bytes_per_s = 3e12;
  t.row_overhead_bytes = 2000;
  t.blend = 4;
  std::vector<SmallKernelTiming> samples;
  for (double row_bytes : {8192.0, 16384.0, 32768.0, 131072.0})
    for (double rows : {1.0, 16.0, 64.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0})
      samples.push_back({"swiglu", rows * row_bytes, rows, t.time_s(rows * row_bytes, rows), "x", 1, 0});
  const SmallKernelModel f = fit_small_kernel_model(samples);
  CHECK(f.in_sample_mape_pct < 1.0);
  CHECK(f.bytes_per_s == Approx(t.bytes_per_s).epsilon(0.05));
  CHECK(f.launch_s == Approx(t.launch_s).epsilon(0.1));
  // Large streams are HBM-bound: predicted within 1% well beyond the samples' range of row counts.
  CHECK(f.time_s(16384 * 32768.0, 16384) == Approx(t.time_s(16384 * 32768.0, 16384)).epsilon(0.01));
}

TEST_CASE("kernel fit: a sample timing several launches is predicted as that many kernels",
          "[model][kernel_fit]") {
  // time = 2 us + bytes / 2 TB/s (no rows). A region of 2 kernels moving 4 MB in all is two kernels of
  // 2 MB: 2 x (2 us + 1 us) = 6 us, where one kernel of 4 MB would take 2 us + 2 us = 4 us.
  SmallKernelModel t;
  t.launch_s = 2e-6;
  t.bytes_per_s = 2e12;
  const SmallKernelTiming two{"add", 4e6, 0, 6e-6, "x", 2, 0};
  CHECK(t.sample_time_s(two) == Approx(6e-6));
  CHECK(t.time_s(4e6, 0) == Approx(4e-6));
  // Fitting one-kernel samples and two-kernel regions of the same op recovers the one kernel's model.
  std::vector<SmallKernelTiming> samples;
  for (double bytes : {1e5, 1e6, 4e6, 1.6e7, 6.4e7, 2.56e8}) {
    samples.push_back({"add", bytes, 0, t.time_s(bytes, 0), "one", 1, 0});
    samples.push_back({"add", 2 * bytes, 0, 2 * t.time_s(bytes, 0), "two", 2, 0});
  }
  const SmallKernelModel f = fit_small_kernel_model(samples);
  CHECK(f.in_sample_mape_pct < 0.5);
  CHECK(f.launch_s == Approx(t.launch_s).epsilon(0.05));
  // Leaving the two-kernel regions out and predicting them from the one-kernel samples: exact as well.
  for (const HeldOutError& e : leave_one_group_out_small(samples)) CHECK(e.mape_pct < 0.5);
}

TEST_CASE("kernel fit: a timer that truncates to whole microseconds reads the floor of the time",
          "[model][kernel_fit]") {
  // Readings with a 1 us step: floor(t) plus the logistic blur of kReadingJitterSteps = 0.03 of a step.
  // 1.9 us: 1 + 1 / (1 + e^(0.1 / 0.03)) = 1 + 1 / (1 + e^3.333) = 1.03444 us (the step at 2 us is 0.1
  // away, 3.3 widths); 2.5 us reads 2 us; exactly 2 us sits halfway up its step: 1.5 us.
  CHECK(truncated_reading_s(1.9e-6, 1e-6) == Approx(1.03444e-6).epsilon(1e-4));
  CHECK(truncated_reading_s(2.5e-6, 1e-6) == Approx(2e-6).epsilon(1e-6));
  CHECK(truncated_reading_s(2e-6, 1e-6) == Approx(1.5e-6).epsilon(1e-9));
  CHECK(truncated_reading_s(0.4e-6, 1e-6) == Approx(0.0).margin(1e-12));
  CHECK(truncated_reading_s(1000.5e-6, 1e-6) == Approx(1000e-6).epsilon(1e-9));
  CHECK(truncated_reading_s(1.9e-6, 0) == 1.9e-6);  // an exact timer
  // Never above the time by more than the blur, never a step below it, and never decreasing.
  double last = 0;
  for (double t = 0.05e-6; t < 40e-6; t += 0.013e-6) {
    const double r = truncated_reading_s(t, 1e-6);
    CHECK(r >= last);
    CHECK(r > t - 1e-6);
    CHECK(r < t + 0.5e-6);
    last = r;
  }
}

TEST_CASE("kernel fit: kernels read by a truncating timer are fitted by their times, not their readings",
          "[model][kernel_fit]") {
  // The model of the first small-kernel test (2 us launch, 10 GB/s per row, 2 TB/s stream), read as
  // vidur's timer reads it: floor(time in us) us. Fitted as exact times, the readings put the launch
  // floor about half a step low; told the timer's resolution, the fit recovers the time model.
  const SmallKernelModel t = row_and_stream_model();
  std::vector<SmallKernelTiming> exact, read;
  for (double row_bytes : {8192.0, 16384.0, 24576.0, 32768.0, 131072.0})
    for (double rows : {1.0, 16.0, 64.0, 256.0, 1024.0, 4096.0}) {
      const double reading = std::floor(t.time_s(rows * row_bytes, rows) * 1e6) * 1e-6;
      exact.push_back({"layernorm", rows * row_bytes, rows, reading, "x", 1, 0});
      read.push_back({"layernorm", rows * row_bytes, rows, reading, "x", 1, 1e-6});
    }
  const SmallKernelModel naive = fit_small_kernel_model(exact);
  const SmallKernelModel aware = fit_small_kernel_model(read);
  CHECK(aware.launch_s == Approx(t.launch_s).epsilon(0.1));
  CHECK(naive.launch_s < 0.85 * t.launch_s);
  CHECK(aware.in_sample_mape_pct < naive.in_sample_mape_pct);
  // The model's time of a one-row kernel (3.6 us for 16 KiB) is the true one, not its reading (3 us).
  CHECK(aware.time_s(16384, 1) == Approx(t.time_s(16384, 1)).epsilon(0.05));
}

TEST_CASE("kernel fit: a small kernel's stream never exceeds the device's HBM bandwidth it is given",
          "[model][kernel_fit]") {
  // Samples of a 2 TB/s stream with a 2 us floor. Given bounds above what the samples need (10 TB/s,
  // 1 GB of L2), the fit is the unbounded one, parameter for parameter; given 1 TB/s and 10 MB of L2,
  // the fitted stream stays under both (the L2 cannot hold the 256 MB samples for it) and the fit is
  // worse, never beyond them.
  SmallKernelModel t;
  t.launch_s = 2e-6;
  t.bytes_per_s = 2e12;
  std::vector<SmallKernelTiming> samples;
  for (double bytes : {1e5, 1e6, 4e6, 1.6e7, 6.4e7, 2.56e8}) samples.push_back({"add", bytes, 0, t.time_s(bytes, 0), "x", 1, 0});
  const SmallKernelModel free = fit_small_kernel_model(samples);
  const SmallKernelModel loose = fit_small_kernel_model(samples, 10e12, 1e9);
  CHECK(loose.bytes_per_s == free.bytes_per_s);
  CHECK(loose.launch_s == free.launch_s);
  CHECK(loose.in_sample_mape_pct == free.in_sample_mape_pct);
  const SmallKernelModel tight = fit_small_kernel_model(samples, 1e12, 10e6);
  CHECK(tight.bytes_per_s <= 1e12);
  CHECK(tight.l2_bytes <= 10e6);
  CHECK(tight.in_sample_mape_pct > free.in_sample_mape_pct);
}

TEST_CASE("kernel fit: too few samples or a non-positive time are refused", "[model][kernel_fit]") {
  const GemmModel t = truth();
  auto few = synthetic(t, "a", 4096, 4096);
  few.resize(5);
  CHECK_THROWS_AS(fit_gemm_model(few, 132, 2.0), std::invalid_argument);
  auto bad = synthetic(t, "a", 4096, 4096);
  bad[3].time_s = -1e-6;
  CHECK_THROWS_AS(fit_gemm_model(bad, 132, 2.0), std::invalid_argument);
  CHECK_THROWS_AS(fit_small_kernel_model({{"add", 1e6, 0, 1e-5, "", 1}, {"add", 2e6, 0, 0.0, "", 1}, {"add", 3e6, 0, 2e-5, "", 1}}),
                  std::invalid_argument);
}

#include "fusesim/model/profile.hpp"
#include "fusesim/topo/cluster.hpp"

TEST_CASE("contention by shape: a one-wave GEMM loses a wave, a many-wave one a fifth", "[model][kernel_fit]") {
  const fusesim::topo::Cluster cluster = fusesim::topo::load_cluster_by_name_or_path("dgx-h100");
  const fusesim::topo::DeviceModel& h100 = cluster.device(0);  // 132 SMs
  Profile p;
  p.sm_count = 132;
  p.sm_wave_share = 0.9;
  const CalibratedCostModel model(p);
  const DeviceLoad beside{24, 0.0};
  KernelCost one_wave;
  one_wave.compute_s = 1e-3;
  one_wave.tiles = 132;
  // 132 tiles on 108 SMs: 2 waves instead of 1, slowdown 1 + 0.9 x (2 - 1) = 1.9.
  CHECK(model.rate(one_wave, h100, beside) == Approx(1.0 / 1.9));
  KernelCost many = one_wave;
  many.tiles = 1056;
  // ceil(1056 / 132) = 8 waves alone, ceil(1056 / 108) = 10 beside: 1 + 0.9 x (10/8 - 1) = 1.225.
  CHECK(model.rate(many, h100, beside) == Approx(1.0 / 1.225));
  KernelCost attention = one_wave;
  attention.tiles = 0;
  // Spread over the SMs left: 1 + 0.9 x (132/108 - 1) = 1.2.
  CHECK(model.rate(attention, h100, beside) == Approx(1.0 / 1.2));
  CHECK(model.rate(attention, h100, DeviceLoad{}) == 1.0);
}
