#pragma once
// Fitting a calibration profile's parameters from its raw samples (schema: docs/calibration.md,
// version 1). `fusesim calibrate fit` and the profile loader both call these, so a profile fitted
// on the command line and one fitted on load agree.
//
// Collectives follow the nccl-tests model (nccl-tests doc/PERFORMANCE.md):
//   time(bytes) = latency_s + bytes * bus_factor(op, n) / busbw_bytes_per_s
// fitted by least squares on relative error, so that an 8-byte message and an 8-GiB one weigh the
// same (an absolute fit would be decided by the largest messages alone and leave latency to noise).
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/util/json_reader.hpp"

namespace fusesim::model {

// One timed collective: `bytes` in the nccl-tests "size" convention (the full buffer: all-gather
// output, reduce-scatter input, all-reduce buffer, all-to-all send buffer; p2p: one message).
struct CollectiveSample {
  std::string op;   // all_gather, reduce_scatter, all_reduce, all_to_all, p2p
  int ranks = 0;
  int nodes = 1;
  double bytes = 0;
  double time_s = 0;
};

struct CollectiveFit {
  double latency_s = 0;
  double busbw_bytes_per_s = 0;
  int samples = 0;
  double max_rel_error = 0;  // max over samples of |model - measured| / measured
};

// (n-1)/n for all_gather, reduce_scatter, all_to_all; 2(n-1)/n for all_reduce; 1 for p2p.
// Throws std::invalid_argument for an unknown op, or ranks < 2 for a collective (one rank moves
// nothing: nccl-tests reports busbw 0). p2p ignores ranks.
double bus_factor(const std::string& op, int ranks);

// A list of repeated timings in seconds (`key` of `o`: "time_s", "alone_s", "beside_s"): at least one,
// each positive and at most 1e6 s; returns their median. Shared by the profile loader and the fitter,
// so that both read a raw document alike. InputError at the element at fault.
double median_time_s(const JsonObject& o, std::string_view key);

// Fits one (op, ranks, nodes) group. Throws std::invalid_argument when < 2 samples, when the samples
// mix ops/ranks/nodes, or when a time or size is not positive. The fitted latency is clamped at 0 and
// the bandwidth kept positive (a constrained least-squares solution, not a clipped one).
CollectiveFit fit_collective(const std::vector<CollectiveSample>& samples);

// Every known op name, in the order the fitted section lists them.
const std::vector<std::string>& collective_ops();

// --- ring protocols -------------------------------------------------------------------------------

// One of NCCL's protocols on one node's ring, as the simulator prices it (docs/engine.md,
// "Protocols"): a collective of `steps` ring steps over `ranks` takes
//   base_s + steps x (route + step_s) + steps x bytes / ranks / (link x efficiency)
// and the cheapest protocol runs.
struct RingProtocol {
  double base_s = 0;
  double step_s = 0;
  double efficiency = 1;
};

// NCCL's NVLink hop latency per protocol (src/graph/tuning.cc, hwLat[NVLINK][RING]): LL, LL128,
// Simple. One node's curve has one rank count, which cannot tell a per-step latency from a
// per-collective one: the step is this hop less the route's own latency, the base is fitted.
inline constexpr double kNcclNvlinkHopLlS = 0.6e-6;
inline constexpr double kNcclNvlinkHopLl128S = 1.9e-6;
// The smallest size fit_ring_protocols fits: below it nccl-tests' times step with the element count.
inline constexpr double kRingProtocolMinBytes = 1024;

struct RingProtocolFitInput {
  int ranks = 0;
  int steps = 0;                      // 2(n-1) for all_reduce, n-1 for all_gather and reduce_scatter
  double link_bytes_per_s = 0;        // a ring hop's bandwidth
  double route_s = 0;                 // a ring hop's latency
  RingProtocol simple;                // the cluster's Simple (its step kept when fitted)
  std::optional<RingProtocol> nvls;   // the cluster's NVLS, for an all-reduce inside one NVSwitch node
  std::vector<std::pair<double, double>> samples;  // (bytes in nccl-tests' size convention, seconds)
};

struct RingProtocolFit {
  // Fitted: LL and LL128 (each nullopt where it is fastest at no measured size: the curve says
  // nothing of it); Simple where the curve never beats the ring's links, else NVLS (the switch
  // reduced: the largest sizes' bus bandwidth exceeds the link's).
  std::optional<RingProtocol> ll, ll128;
  RingProtocol simple;
  std::optional<RingProtocol> nvls;
  bool nvls_fitted = false;
  int samples = 0;
  double mean_rel_error = 0, max_rel_error = 0;  // of the fastest protocol's time, over the samples
};

// Whether a curve spans the protocols' ranges, so that fit_ring_protocols can tell them apart: at
// least 8 distinct sizes from kRingProtocolMinBytes on, from 64 KiB or below to 16 MiB or above.
bool spans_ring_protocols(const std::vector<std::pair<double, double>>& samples);

// Nelder-Mead on the squared log error of the fastest protocol's time over the sizes from
// kRingProtocolMinBytes (every size weighs alike):
// LL's and LL128's base latency and efficiency (bounded by their payload shares, 4 data bytes per 8
// and 120 per 128), and Simple's (its efficiency at most 1) or, where the switch reduced, NVLS's (at
// most 2). Deterministic. Throws std::invalid_argument where the input cannot be fitted (fewer than 2
// ranks or steps, a non-positive link, time or size, a curve that does not span the protocols).
RingProtocolFit fit_ring_protocols(const RingProtocolFitInput& in);

// --- contention -----------------------------------------------------------------------------------

// A GEMM timed alone and beside an aggressor: slowdown = beside / alone (>= about 1).
struct ContentionSample {
  std::string aggressor;  // "sm_kernel" or "copy_engine"
  int comm_sms = 0;       // SMs the aggressor holds (sm_kernel only)
  double slowdown = 1;
};

struct ContentionFit {
  // slowdown(sms) = 1 + sm_kernel_slowdown_per_sm * sms, least squares through (0, 1).
  std::optional<double> sm_kernel_slowdown_per_sm;
  int sm_kernel_samples = 0;
  double sm_kernel_max_rel_error = 0;
  // The mean slowdown beside a copy-engine transfer.
  std::optional<double> copy_engine_slowdown;
  int copy_engine_samples = 0;
};

// Throws std::invalid_argument on an unknown aggressor, a slowdown <= 0 or comm_sms < 0.
ContentionFit fit_contention(const std::vector<ContentionSample>& samples);

// --- memory bandwidth -----------------------------------------------------------------------------

// Streaming kernel moving `bytes` of HBM traffic (read + write) in time_s.
struct BandwidthSample {
  double bytes = 0;
  double time_s = 0;
};

struct BandwidthFit {
  double bytes_per_s = 0;  // asymptotic bandwidth (the slope)
  double latency_s = 0;    // launch overhead (the intercept, >= 0)
  int samples = 0;
  double max_rel_error = 0;
};

// time = latency + bytes / bandwidth, least squares on relative error. Throws std::invalid_argument
// when < 2 samples or a value is not positive.
BandwidthFit fit_bandwidth(const std::vector<BandwidthSample>& samples);

// --- GEMM -----------------------------------------------------------------------------------------

struct GemmSample {
  std::string dtype;  // bf16, fp16, ...
  double m = 0, n = 0, k = 0, batch = 1;
  double flops_per_s = 0;  // achieved: 2 m n k batch / time
};

// Best achieved / peak over the samples of one dtype; nullopt when none has that dtype.
std::optional<double> gemm_peak_fraction(const std::vector<GemmSample>& samples, const std::string& dtype,
                                         double peak_flops_per_s);

// --- a whole document -----------------------------------------------------------------------------

// What the raw sections of a calibration document hold, read strictly (errors name file and path).
struct RawSamples {
  std::vector<CollectiveSample> collectives;
  std::vector<ContentionSample> contention;
  std::vector<BandwidthSample> bandwidth;  // copy (small kernels have models of their own)
  std::vector<GemmSample> gemm;
};
// Reads "gemm", "elementwise", "copy", "contention", "collectives" of `root` (each optional). A
// sample's repeated time_s become their median (one outlier, e.g. a first-touch page fault that the
// warm-up missed, does not move it). Does not call root.finish(): the other keys are the loader's.
RawSamples read_raw_samples(const JsonObject& root);

struct FitOptions {
  // Datasheet peak for gemm_peak_fraction (dense, per second), by dtype; no entry: the fraction is
  // left out of the fitted section.
  std::optional<double> peak_bf16_flops_per_s;
  std::optional<double> peak_fp16_flops_per_s;
};

// The "fitted" object of the schema: collectives keyed by op (one group per op: the single-node group
// with the most ranks, else the one with the most ranks, then nodes; groups with < 2 samples are
// skipped; the profile loader picks the same group when it fits on load), contention, hbm_bytes_per_s,
// gemm_peak_fraction. Keys whose samples are absent are left out. Throws InputError (file, "$.<section>")
// when a section's samples cannot be fitted.
nlohmann::json fit_document(const JsonObject& root, const FitOptions& options = {});

}  // namespace fusesim::model
