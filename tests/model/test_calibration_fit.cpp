// The calibration fits (model/calibration_fit.hpp): bus factors, the alpha-beta collective fit on
// noiseless and on seeded noisy data, the intercept constraint, contention, HBM bandwidth, GEMM peak
// fraction, the "fitted" section of a whole document with its errors, and NCCL's ring protocols
// fitted to a curve from small to large sizes.
#include <catch2/catch.hpp>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/model/calibration_fit.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"

using namespace fusesim;
using namespace fusesim::model;
using nlohmann::json;

namespace {

// time = latency + bytes x factor / busbw at 1 KiB, 4 KiB, ..., 1 GiB (11 sizes, as nccl-tests -f 4).
std::vector<CollectiveSample> synthetic(const std::string& op, int ranks, double latency_s, double busbw,
                                        double noise = 0.0, std::uint32_t seed = 0) {
  std::mt19937 gen(seed);  // mt19937's sequence is fixed by the standard: the noise is the same everywhere
  std::vector<CollectiveSample> out;
  for (int i = 0; i < 11; ++i) {
    const double bytes = 1024.0 * std::pow(4.0, i);
    double t = latency_s + bytes * bus_factor(op, ranks) / busbw;
    if (noise > 0) t *= 1.0 + noise * (2.0 * (gen() / 4294967296.0) - 1.0);  // uniform in [-noise, noise)
    out.push_back({op, ranks, 1, bytes, t});
  }
  return out;
}

json parse_fit(const json& doc, const FitOptions& options = {}) {
  return fit_document(JsonDocument::from_json(doc, "raw.json").root(), options);
}

}  // namespace

TEST_CASE("bus factors follow nccl-tests PERFORMANCE.md", "[calibration]") {
  // all-gather / reduce-scatter / all-to-all: each rank receives (n-1)/n of the buffer.
  CHECK(bus_factor("all_gather", 8) == 7.0 / 8.0);
  CHECK(bus_factor("reduce_scatter", 4) == 3.0 / 4.0);
  CHECK(bus_factor("all_to_all", 2) == 1.0 / 2.0);
  // all-reduce = reduce-scatter + all-gather: twice.
  CHECK(bus_factor("all_reduce", 8) == 2.0 * 7.0 / 8.0);
  CHECK(bus_factor("all_reduce", 16) == 2.0 * 15.0 / 16.0);
  // One message between two ranks: busbw = algbw whatever the ranks.
  CHECK(bus_factor("p2p", 2) == 1.0);
  CHECK(bus_factor("p2p", 8) == 1.0);
  CHECK_THROWS_AS(bus_factor("broadcast", 8), std::invalid_argument);
  CHECK_THROWS_AS(bus_factor("all_gather", 1), std::invalid_argument);
}

TEST_CASE("collective fit recovers latency and bus bandwidth exactly on noiseless data", "[calibration]") {
  for (const auto& [op, ranks, lat, bw] : std::vector<std::tuple<std::string, int, double, double>>{
           {"all_gather", 8, 12e-6, 360e9}, {"all_reduce", 16, 45e-6, 180e9}, {"p2p", 2, 8e-6, 380e9},
           {"all_to_all", 4, 0.0, 320e9}}) {
    INFO(op);
    const CollectiveFit f = fit_collective(synthetic(op, ranks, lat, bw));
    CHECK(f.latency_s == Approx(lat).margin(1e-15));
    CHECK(f.busbw_bytes_per_s == Approx(bw).epsilon(1e-9));
    CHECK(f.samples == 11);
    CHECK(f.max_rel_error < 1e-9);
  }
}

TEST_CASE("collective fit stays within the noise on seeded noisy data", "[calibration]") {
  const double noise = 0.02;
  const auto samples = synthetic("all_gather", 8, 12e-6, 360e9, noise, 42);
  const CollectiveFit f = fit_collective(samples);
  // The true parameters leave every relative residual within noise / (1 - noise) = 0.0204, so their
  // sum of squares is at most 11 x 0.0204^2; the least-squares optimum has no larger a sum, so no single
  // residual of the fit exceeds sqrt(11) x 0.0204 = 0.0677.
  CHECK(f.max_rel_error <= std::sqrt(11.0) * noise / (1.0 - noise));
  // The largest messages fix the bandwidth and the smallest the latency, each within a few noise widths.
  CHECK(f.busbw_bytes_per_s == Approx(360e9).epsilon(0.03));
  CHECK(f.latency_s == Approx(12e-6).epsilon(0.05));
}

TEST_CASE("a negative intercept is constrained to zero latency", "[calibration]") {
  // Points (x, t): (1e6, 0.5e-6), (2e6, 2e-6), (4e6, 4e-6): the unconstrained line through them has a
  // negative intercept. Through the origin with weights 1/t^2 the slope is
  // sum(x/t) / sum(x^2/t^2) = (2e12 + 1e12 + 1e12) / (4e24 + 1e24 + 1e24) = 4e12 / 6e24, so the
  // bandwidth is 1.5e12 B/s.
  const std::vector<CollectiveSample> s{{"p2p", 2, 1, 1e6, 0.5e-6}, {"p2p", 2, 1, 2e6, 2e-6}, {"p2p", 2, 1, 4e6, 4e-6}};
  const CollectiveFit f = fit_collective(s);
  CHECK(f.latency_s == 0.0);
  CHECK(f.busbw_bytes_per_s == Approx(1.5e12).epsilon(1e-12));
  // Residuals: 1e6/1.5e12 = 0.667e-6 vs 0.5e-6 -> +33.3%; 1.333e-6 vs 2e-6 -> -33.3%; 2.667e-6 vs 4e-6 -> -33.3%.
  CHECK(f.max_rel_error == Approx(1.0 / 3.0).epsilon(1e-9));
}

TEST_CASE("collective fit refuses what it cannot fit", "[calibration]") {
  const auto good = synthetic("all_gather", 8, 12e-6, 360e9);
  CHECK_THROWS_AS(fit_collective({}), std::invalid_argument);
  CHECK_THROWS_AS(fit_collective({good[0]}), std::invalid_argument);
  auto mixed = good;
  mixed[3].ranks = 4;
  CHECK_THROWS_WITH(fit_collective(mixed), Catch::Contains("mix"));
  std::vector<CollectiveSample> same_size{good[2], good[2]};
  CHECK_THROWS_WITH(fit_collective(same_size), Catch::Contains("two distinct sizes"));
  std::vector<CollectiveSample> shrinking{{"all_gather", 8, 1, 1e6, 2e-5}, {"all_gather", 8, 1, 2e6, 1e-5}};
  CHECK_THROWS_WITH(fit_collective(shrinking), Catch::Contains("does not grow"));
  auto zero_time = good;
  zero_time[0].time_s = 0;
  CHECK_THROWS_AS(fit_collective(zero_time), std::invalid_argument);
}

TEST_CASE("contention fit recovers the slowdown per SM and the copy-engine slowdown", "[calibration]") {
  // slowdown = 1 + 0.008 x SMs at 8, 16, 24 SMs: 1.064, 1.128, 1.192; copy engine 1.03 and 1.05.
  const ContentionFit f = fit_contention({{"sm_kernel", 8, 1.064},
                                          {"sm_kernel", 16, 1.128},
                                          {"sm_kernel", 24, 1.192},
                                          {"copy_engine", 0, 1.03},
                                          {"copy_engine", 0, 1.05}});
  REQUIRE(f.sm_kernel_slowdown_per_sm);
  CHECK(*f.sm_kernel_slowdown_per_sm == Approx(0.008).epsilon(1e-12));
  CHECK(f.sm_kernel_samples == 3);
  CHECK(f.sm_kernel_max_rel_error < 1e-12);
  REQUIRE(f.copy_engine_slowdown);
  CHECK(*f.copy_engine_slowdown == Approx(1.04).epsilon(1e-12));
  CHECK(f.copy_engine_samples == 2);

  // Through the origin: points (10, +0.1) and (20, +0.3): c = (10 x 0.1 + 20 x 0.3) / (100 + 400) = 0.014.
  const ContentionFit g = fit_contention({{"sm_kernel", 10, 1.1}, {"sm_kernel", 20, 1.3}});
  CHECK(*g.sm_kernel_slowdown_per_sm == Approx(0.014).epsilon(1e-12));
  CHECK_FALSE(g.copy_engine_slowdown);
  // 1.14 vs 1.1: 3.64%; 1.28 vs 1.3: 1.54%.
  CHECK(g.sm_kernel_max_rel_error == Approx(0.04 / 1.1).epsilon(1e-9));

  CHECK_THROWS_AS(fit_contention({{"sm_kernel", 0, 1.0}}), std::invalid_argument);
  CHECK_THROWS_AS(fit_contention({{"nvlink", 4, 1.1}}), std::invalid_argument);
  CHECK_THROWS_AS(fit_contention({{"copy_engine", 0, -1.0}}), std::invalid_argument);
}

TEST_CASE("bandwidth fit recovers HBM bandwidth and launch overhead", "[calibration]") {
  std::vector<BandwidthSample> s;
  for (double bytes = 1 << 20; bytes <= (1 << 30); bytes *= 4) s.push_back({bytes, 4e-6 + bytes / 3.0e12});
  const BandwidthFit f = fit_bandwidth(s);
  CHECK(f.bytes_per_s == Approx(3.0e12).epsilon(1e-9));
  CHECK(f.latency_s == Approx(4e-6).epsilon(1e-9));
  CHECK(f.samples == 6);
  CHECK_THROWS_AS(fit_bandwidth({s[0]}), std::invalid_argument);
}

TEST_CASE("GEMM peak fraction is the best achieved over the datasheet peak", "[calibration]") {
  const std::vector<GemmSample> g{{"bf16", 4096, 4096, 4096, 1, 700e12},
                                  {"bf16", 8192, 8192, 8192, 1, 742e12},
                                  {"fp16", 8192, 8192, 8192, 1, 800e12}};
  CHECK(*gemm_peak_fraction(g, "bf16", 989e12) == Approx(742.0 / 989.0));
  CHECK(*gemm_peak_fraction(g, "fp16", 1000e12) == Approx(0.8));
  CHECK_FALSE(gemm_peak_fraction(g, "fp8", 1979e12));
}

TEST_CASE("fit_document computes the fitted section from raw samples", "[calibration]") {
  json doc = {{"schema", "fusesim.calibration"}, {"schema_version", 1}};
  // all_gather: a single-node group of 8 (2 samples) and a 2-node group of 16 (2 samples); the
  // single-node one is chosen. Samples of 8 ranks: t = 10 us + bytes x 7/8 / 350e9.
  const auto ag = [](double bytes, int ranks, int nodes, double bw) {
    return json{{"op", "all_gather"}, {"ranks", ranks}, {"nodes", nodes}, {"bytes", bytes},
                {"time_s", {10e-6 + bytes * (ranks - 1.0) / ranks / bw}}};
  };
  doc["collectives"] = {ag(1e6, 8, 1, 350e9), ag(1e9, 8, 1, 350e9), ag(1e6, 16, 2, 50e9), ag(1e9, 16, 2, 50e9),
                        // all_reduce on 4 ranks from busbw: time = bytes x 2 x 3/4 / busbw, i.e. zero latency.
                        {{"op", "all_reduce"}, {"ranks", 4}, {"bytes", 1e9}, {"busbw_GBps", 100}, {"source", "s"}},
                        {{"op", "all_reduce"}, {"ranks", 4}, {"bytes", 4e9}, {"busbw_GBps", 100}, {"source", "s"}},
                        // one reduce_scatter sample: too few to fit, left out
                        {{"op", "reduce_scatter"}, {"ranks", 8}, {"bytes", 1e9}, {"time_s", {1e-3}}}};
  // Slowdown from medians: alone median 1.0 ms, beside median 1.25 ms at 25 SMs -> c = 0.25 / 25 = 0.01.
  doc["contention"] = {{{"dtype", "bf16"}, {"m", 8192}, {"n", 8192}, {"k", 8192}, {"aggressor", "sm_kernel"},
                        {"comm_sms", 25}, {"alone_s", {1.1e-3, 1.0e-3, 0.9e-3}}, {"beside_s", {1.2e-3, 1.3e-3, 1.25e-3}}},
                       {{"dtype", "bf16"}, {"m", 8192}, {"n", 8192}, {"k", 8192}, {"aggressor", "copy_engine"},
                        {"slowdown", 1.05}, {"source", "s"}}};
  // A copy of b bytes moves 2b through HBM: 1 GB copy = 2 GB of traffic. The elementwise sample
  // (a small kernel with its own model) is off the streaming line and must not move it.
  doc["elementwise"] = {{{"op", "add"}, {"bytes", 3e8}, {"rows", 4096}, {"group", "g"}, {"time_s", {9e-4}}}};
  doc["copy"] = {{{"bytes", 1.5e8}, {"time_s", {4e-6 + 3e8 / 2e12}}}, {{"bytes", 1e9}, {"time_s", {4e-6 + 2e9 / 2e12}}}};
  // 2 x 8192^3 = 1.0995e12 FLOP in 1.5 ms = 733.0 TFLOP/s; over 989 TFLOP/s: 0.7412.
  doc["gemm"] = {{{"dtype", "bf16"}, {"m", 8192}, {"n", 8192}, {"k", 8192}, {"time_s", {1.5e-3, 1.4e-3, 1.6e-3}}}};

  FitOptions options;
  options.peak_bf16_flops_per_s = 989e12;
  const json f = parse_fit(doc, options);
  REQUIRE(f.contains("collectives"));
  const json& c = f["collectives"];
  CHECK(c["all_gather"]["ranks"] == 8);
  CHECK(c["all_gather"]["nodes"] == 1);
  CHECK(c["all_gather"]["latency_s"].get<double>() == Approx(10e-6).epsilon(1e-9));
  CHECK(c["all_gather"]["busbw_bytes_per_s"].get<double>() == Approx(350e9).epsilon(1e-9));
  CHECK(c["all_reduce"]["latency_s"].get<double>() == Approx(0.0).margin(1e-15));
  CHECK(c["all_reduce"]["busbw_bytes_per_s"].get<double>() == Approx(100e9).epsilon(1e-9));
  CHECK_FALSE(c.contains("reduce_scatter"));
  CHECK(f["contention"]["sm_kernel_slowdown_per_sm"].get<double>() == Approx(0.01).epsilon(1e-9));
  CHECK(f["contention"]["copy_engine_slowdown"].get<double>() == Approx(1.05));
  CHECK(f["hbm_bytes_per_s"].get<double>() == Approx(2e12).epsilon(1e-9));
  CHECK(f["gemm_peak_fraction"].get<double>() == Approx(2.0 * 8192.0 * 8192.0 * 8192.0 / 1.5e-3 / 989e12));

  // Without a peak, no fraction.
  CHECK_FALSE(parse_fit(doc).contains("gemm_peak_fraction"));
}

TEST_CASE("fit_document names the file and the JSON path of bad samples", "[calibration]") {
  const auto expect = [](const json& doc, const std::string& path_part) {
    try {
      parse_fit(doc);
      FAIL("no error");
    } catch (const InputError& e) {
      CHECK(e.file() == "raw.json");
      CHECK_THAT(e.json_path(), Catch::Contains(path_part));
    }
  };
  json base = {{"schema", "fusesim.calibration"}};
  json d = base;
  d["collectives"] = {{{"op", "all_gather"}, {"ranks", 8}, {"bytes", 1e6}, {"time_s", {1e-5}}, {"bandwith", 1}}};
  expect(d, "$.collectives[0]");
  d = base;
  d["collectives"] = {{{"op", "all_gather"}, {"ranks", 8}, {"bytes", 1e6}, {"time_s", json::array()}}};
  expect(d, "$.collectives[0].time_s");
  d = base;
  d["collectives"] = {{{"op", "all_gather"}, {"ranks", 8}, {"bytes", 1e6}, {"time_s", {1e-5}}},
                      {{"op", "all_gather"}, {"ranks", 8}, {"bytes", 1e6}, {"time_s", {2e-5}}}};
  expect(d, "$.collectives");  // two samples of one size: no bandwidth to fit
  d = base;
  d["contention"] = {{{"dtype", "bf16"}, {"m", 1}, {"n", 1}, {"k", 1}, {"aggressor", "copy_engine"}, {"comm_sms", 4},
                      {"slowdown", 1.1}}};
  expect(d, "$.contention[0].comm_sms");
  d = base;
  d["gemm"] = {{{"dtype", "bf16"}, {"m", 1}, {"n", 1}, {"k", 1}, {"time_s", {1e-3}}, {"tflops", 1}}};
  expect(d, "$.gemm[0]");
}

namespace {

// NCCL's protocols on an 8-GPU ring as the simulator prices them (docs/engine.md, "Protocols"):
// base + steps x (route + step) + bytes x steps / ranks / (link x efficiency), the fastest running.
double ring_time(const RingProtocolFitInput& in, const RingProtocol& p, double bytes) {
  return p.base_s + in.steps * (in.route_s + p.step_s) + bytes * in.steps / in.ranks / (in.link_bytes_per_s * p.efficiency);
}

RingProtocolFitInput nvlink_ring(int steps) {
  RingProtocolFitInput in;
  in.ranks = 8;
  in.steps = steps;
  in.link_bytes_per_s = 380e9;
  in.route_s = 0.6e-6;
  in.simple = {8.4e-6, 2.8e-6, 0.9474};
  return in;
}

}  // namespace

TEST_CASE("NCCL's ring protocols: the fit recovers a synthetic all-gather curve's LL, LL128 and Simple",
          "[calibration]") {
  // An all-gather (7 steps) of 1 KiB to 16 GiB, every power of two, from known protocols: LL up to
  // some hundreds of KiB, LL128 to some MiB, Simple beyond. The steps are NCCL's NVLink hop less the
  // route (LL 0, LL128 1.3 us) and the cluster's Simple step; the fit finds bases and efficiencies.
  RingProtocolFitInput in = nvlink_ring(7);
  const RingProtocol ll{8e-6, 0.0, 0.42}, ll128{9e-6, 1.3e-6, 0.88}, simple{12e-6, 2.8e-6, 0.93};
  for (int i = 10; i <= 34; ++i) {
    const double bytes = std::ldexp(1.0, i);
    in.samples.emplace_back(bytes, std::min({ring_time(in, ll, bytes), ring_time(in, ll128, bytes), ring_time(in, simple, bytes)}));
  }
  const RingProtocolFit fit = fit_ring_protocols(in);
  REQUIRE(fit.ll.has_value());
  REQUIRE(fit.ll128.has_value());
  CHECK_FALSE(fit.nvls_fitted);
  CHECK(fit.samples == 25);
  CHECK(fit.max_rel_error < 0.005);
  CHECK(fit.ll->step_s == 0.0);
  CHECK(fit.ll128->step_s == Approx(1.3e-6));
  CHECK(fit.simple.step_s == 2.8e-6);  // the cluster's, kept
  CHECK(fit.ll->efficiency == Approx(0.42).epsilon(0.02));
  CHECK(fit.simple.efficiency == Approx(0.93).epsilon(0.01));
  CHECK(fit.simple.base_s == Approx(12e-6).epsilon(0.1));
}

TEST_CASE("NCCL's ring protocols: an all-reduce above the link's bandwidth fits NVLS and keeps Simple",
          "[calibration]") {
  // 14 steps; from some tens of MiB NVLS (base 60 us, 1.25 payload per wire byte) runs, moving
  // 1.25 x 380 = 475 GB/s of bus bandwidth at 16 GiB: more than the ring's link, so the switch reduced.
  RingProtocolFitInput in = nvlink_ring(14);
  in.nvls = RingProtocol{89.8e-6, 0.0, 1.2632};
  const RingProtocol ll{8e-6, 0.0, 0.42}, ll128{9e-6, 1.3e-6, 0.88}, nvls{60e-6, 0.0, 1.25};
  for (int i = 10; i <= 34; ++i) {
    const double bytes = std::ldexp(1.0, i);
    in.samples.emplace_back(bytes, std::min({ring_time(in, ll, bytes), ring_time(in, ll128, bytes), ring_time(in, in.simple, bytes),
                                             ring_time(in, nvls, bytes)}));
  }
  const RingProtocolFit fit = fit_ring_protocols(in);
  REQUIRE(fit.nvls_fitted);
  REQUIRE(fit.nvls.has_value());
  CHECK(fit.max_rel_error < 0.005);
  CHECK(fit.nvls->efficiency == Approx(1.25).epsilon(0.005));
  CHECK(fit.nvls->base_s == Approx(60e-6).epsilon(0.05));
  // Simple is the cluster's: the curve never shows it.
  CHECK(fit.simple.base_s == in.simple.base_s);
  CHECK(fit.simple.efficiency == in.simple.efficiency);
}

TEST_CASE("NCCL's ring protocols: the 8x H100 DGX nccl-tests curve is fitted within its noise", "[calibration]") {
  // tools/calibration/raw/nccl-tests/dgx-h100-all_reduce-dgxc-benchmarking.json (NVIDIA/dgxc-benchmarking,
  // Apache-2.0), each size's two columns averaged as a profile takes the median of its repeats, on
  // dgx-h100's ring link (450 GB/s x 0.8444), route (2 x 0.3 us), Simple and NVLS. The shipped fit of
  // the same curve (fit_collectives.py, the faster column) reads mean 3.5%, worst 13.9% (32 KiB).
  std::ifstream f(std::string(FUSESIM_SOURCE_DIR) + "/tools/calibration/raw/nccl-tests/dgx-h100-all_reduce-dgxc-benchmarking.json");
  REQUIRE(f);
  const json raw = json::parse(f);
  RingProtocolFitInput in = nvlink_ring(14);
  in.link_bytes_per_s = 450e9 * 0.8444;
  in.nvls = RingProtocol{89.8e-6, 0.0, 1.2632};
  for (const json& row : raw.at("rows"))
    in.samples.emplace_back(row.at(0).get<double>(), (row.at(1).get<double>() + row.at(2).get<double>()) / 2 * 1e-6);
  REQUIRE(spans_ring_protocols(in.samples));
  const RingProtocolFit fit = fit_ring_protocols(in);
  CHECK(fit.samples == 25);  // 1 KiB to 16 GiB; 8-512 B left out
  CHECK(fit.nvls_fitted);    // 480 GB/s at 16 GiB, above the ring's 380
  CHECK(fit.ll.has_value());
  CHECK(fit.ll128.has_value());
  CHECK(fit.mean_rel_error < 0.05);
  CHECK(fit.max_rel_error < 0.15);
}

TEST_CASE("NCCL's ring protocols: a curve that does not span them, or bad samples, are refused", "[calibration]") {
  RingProtocolFitInput in = nvlink_ring(14);
  // Seven sizes: too few to tell four protocols apart.
  for (int i = 10; i <= 34; i += 4) in.samples.emplace_back(std::ldexp(1.0, i), 1e-5 * (i - 9));
  CHECK_FALSE(spans_ring_protocols(in.samples));
  CHECK_THROWS_AS(fit_ring_protocols(in), std::invalid_argument);
  // Large sizes alone (1 MiB and up): the small-size protocols are not in the curve.
  in.samples.clear();
  for (int i = 20; i <= 34; ++i) in.samples.emplace_back(std::ldexp(1.0, i), 1e-5 * (i - 9));
  CHECK_FALSE(spans_ring_protocols(in.samples));
  in.samples.clear();
  for (int i = 10; i <= 34; ++i) in.samples.emplace_back(std::ldexp(1.0, i), i == 20 ? -1.0 : 1e-5 * (i - 9));
  CHECK_THROWS_AS(fit_ring_protocols(in), std::invalid_argument);
  in.samples.back().second = 1e-3;
  in.samples[10].second = 1e-4;
  in.ranks = 1;
  CHECK_THROWS_AS(fit_ring_protocols(in), std::invalid_argument);
}
