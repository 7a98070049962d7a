#pragma once
// A calibration profile (schema: docs/calibration.md, version 1) and its use: a kernel cost model
// that interpolates measured GEMM and attention throughput, and the application of fitted link and
// collective parameters to a cluster. Without a profile, the roofline of docs/kernel-model.md.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <optional>
#include <string>
#include <vector>

#include "fusesim/model/kernel.hpp"
#include "fusesim/model/kernel_fit.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/json_reader.hpp"

namespace fusesim::model {

// A measured GEMM: achieved dense FLOP/s (2 m n k batch / median time, or the sample's tflops).
struct ProfileGemm {
  topo::Dtype dtype = topo::Dtype::bf16;
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  double flops_per_s = 0;
  std::string group;  // optional "group": the model the shape came from (leave-one-group-out)
  double resolution_s = 0;  // optional "resolution_s": the timer's step (kernel_fit.hpp, truncated_reading_s)
};


enum class ProfilePass { forward, backward, forward_backward };

// A measured fused attention, FLOP/s counted as FlashAttention's benchmark counts them (forward
// 4 b h s^2 d, halved when causal; backward 2.5x forward).
struct ProfileAttention {
  topo::Dtype dtype = topo::Dtype::bf16;
  ProfilePass pass = ProfilePass::forward_backward;
  bool causal = false;
  std::int64_t batch = 1, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
  double flops_per_s = 0;
};

struct ProfileContention {
  std::string aggressor;  // sm_kernel, copy_engine
  int comm_sms = 0;
  int ctas = 0;         // optional "ctas": the GEMM's thread blocks (its tiles); 0 when not given
  double slowdown = 1;  // beside / alone
};

struct ProfileCollective {
  std::string op;
  int ranks = 0, nodes = 1;
  double bytes = 0, time_s = 0;  // time_s: median, or derived from busbw_GBps
};

struct FittedCollective {
  int ranks = 0, nodes = 1;
  double latency_s = 0, busbw_bytes_per_s = 0;
  int samples = 0;
  double max_rel_error = 0;
};

// The GEMMs one learned model serves: bf16 and fp16 together (they run the same tensor-core rate), or
// fp8; nullopt for a dtype no learned model serves (fp32, tf32).
enum class GemmFamily { sixteen_bit, fp8 };
std::optional<GemmFamily> gemm_family(topo::Dtype dtype);

struct Profile {
  std::string label;         // the file (or <embedded:profiles/...>) it came from, for errors
  std::string device_name;   // "H100 SXM5"
  std::string device_model;  // optional: the topology's device model name ("h100-sxm")
  int sm_count = 0;
  // Optional "device.hbm_bandwidth_bytes_per_s" and "device.l2_bytes" (sourced, as in a topology):
  // the datasheet bandwidth and L2 size no fitted small-kernel stream may exceed (fit_small_kernel_model).
  std::optional<SourcedValue> hbm_peak_bytes_per_s, l2_bytes;
  double small_kernel_hbm_bound() const { return hbm_peak_bytes_per_s ? hbm_peak_bytes_per_s->value : 0.0; }
  double small_kernel_l2_bound() const { return l2_bytes ? l2_bytes->value : 0.0; }
  // Optional "device.step_rate_fraction.{gemm,attention,elementwise}" (sourced, in [0.5, 1]): the rate
  // each kind of kernel holds inside a training step (the GPU at its power limit, the L2 holding the
  // previous kernel's data) as a fraction of the rate the profile's samples measured, each op repeated
  // in a short burst (tools/microbench/sustained.py; docs/calibration.md "Kernels inside a step").
  struct StepRateFraction {
    std::optional<SourcedValue> gemm, attention, elementwise;
  } step_rate_fraction;
  // Optional "device.kernel_gap_s" (sourced, in [0, 1e-4] s): the idle time between two kernels that
  // follow each other on one stream inside a training step (the next kernel's launch on the GPU; the
  // host ahead). The samples time kernels alone (CUPTI durations, events around one kernel), which
  // leaves it out; a step pays it before every kernel (docs/calibration.md, "Kernels inside a step").
  std::optional<SourcedValue> kernel_gap_s;
  // Optional "device.gemm_misaligned_peak_fraction.{under_16_bytes,under_4_bytes}" (sourced, in (0, 1]):
  // the most a GEMM reaches, as a fraction of its dtype's peak, when one of its dimensions times the
  // element size is not a multiple of 16 (of 4) bytes. Hopper's GEMM kernels load tiles with TMA, which
  // needs 16-byte aligned strides; cuBLAS falls back to kernels that run at a fraction of the rate
  // (docs/calibration.md, "Misaligned GEMMs"). under_4_bytes, when absent, is under_16_bytes.
  struct GemmMisalignedPeakFraction {
    std::optional<SourcedValue> under_16_bytes, under_4_bytes;
  } gemm_misaligned_peak_fraction;
  std::string kind;  // measured, published, synthetic
  std::string machine, date, source;
  bool estimate = false;               // optional key provenance.estimate
  std::vector<std::string> fitted_on;  // optional provenance.fitted_on: validation case ids used to build it
  std::vector<ProfileGemm> gemm;
  std::vector<ProfileAttention> attention;
  // Measured small kernels (norm, activation, rotary, residual add, embedding, copy ...): HBM traffic
  // over `rows` rows (tokens; 0 when the sample does not say), the form the fitter takes.
  std::vector<SmallKernelTiming> elementwise;
  std::vector<ProfileContention> contention;
  std::vector<ProfileCollective> collectives;
  // The device's cross-stream event wait (DeviceModel::stream_wait_s), from "stream_wait": a chain of
  // `hops` tiny kernels alternating between two streams against the same chain on one stream, the
  // difference per hop (at least 0).
  std::optional<double> stream_wait_s;
  // Fitted parameters: from the file's "fitted", else fitted on load (model/calibration_fit.hpp).
  std::map<std::string, FittedCollective> fitted_collectives;  // by op
  std::optional<double> sm_kernel_slowdown_per_sm;
  // Contention by shape (docs/calibration.md, "Contention"): a kernel beside communication holding
  // SMs slows by 1 + sm_wave_share x (waves on the SMs left / waves alone - 1). From
  // fitted.contention.sm_wave_share, else fitted on load from sm_kernel samples that give "ctas".
  std::optional<double> sm_wave_share;
  std::optional<double> copy_engine_slowdown;
  std::optional<double> hbm_bytes_per_s;
  std::optional<double> gemm_peak_fraction;
  // Kernel models fitted on load from the samples (docs/calibration.md, "Kernel models"): the GEMM
  // model of the 16-bit samples (bf16 and fp16 run the same tensor-core rate), one model per small op.
  std::optional<GemmModel> gemm_model;
  std::optional<GemmModel> gemm_model_fp8;  // the same from the fp8 samples (one-byte operands)
  const std::optional<GemmModel>& gemm_model_of(GemmFamily f) const {
    return f == GemmFamily::fp8 ? gemm_model_fp8 : gemm_model;
  }
  std::map<std::string, SmallKernelModel> elementwise_models;
  // fitted.kernel_models: the parameters a fit found for these samples (docs/calibration.md, "Stored
  // kernel fits"), taken instead of searching again when `inputs_fnv1a64` names the samples read
  // (kernel_fit_inputs_fnv1a64); the search takes about a second per profile.
  struct StoredKernelFits {
    std::string inputs_fnv1a64;
    std::optional<std::vector<double>> gemm, gemm_fp8;
    std::map<std::string, std::pair<std::vector<double>, bool>> elementwise;  // op -> parameters, bounded
  };
  std::optional<StoredKernelFits> stored_kernel_fits;
  bool kernel_models_from_stored_fits = false;  // whether the models above came from them
};

// The GEMM samples of a profile of one family, as the fitter takes them.
std::vector<GemmTiming> gemm_timings(const Profile& profile, GemmFamily family = GemmFamily::sixteen_bit);

// Strict reading: every error an InputError naming the file and the JSON path. `KernelFits::search`
// fits the kernel models from the samples even where fitted.kernel_models holds their parameters.
enum class KernelFits { stored_when_current, search };
Profile parse_profile(const JsonDocument& doc, KernelFits kernel_fits = KernelFits::stored_when_current);

// The fnv1a64 of what the kernel fits take (the GEMM and small-kernel samples, the SM count, the
// small kernels' bounds and the fit's version), as fitted.kernel_models.inputs_fnv1a64 records it.
std::string kernel_fit_inputs_fnv1a64(const Profile& profile);
// The small-kernel model that prices `op` (docs/calibration.md, "Small kernels"): the first of the
// op's own, its forward op's for a `_bwd` op, then the same of the op it stands in for where a
// profile lacks it (a training norm kernel: `layernorm_train_bwd` -> `layernorm_train`,
// `layernorm_bwd`, `layernorm`; `layernorm_apex_legacy` -> `layernorm_train` ...; `layernorm_eager`
// -> `layernorm`), else the residual add's. nullptr when the profile has none of these.
const SmallKernelModel* small_kernel_model(const Profile& profile, const std::string& op);
// fitted.kernel_models for the profile's kernel models (their parameters), for `calibrate kernel-fits`.
nlohmann::ordered_json kernel_fits_json(const Profile& profile);
// A path, or the name of a shipped profile (profiles/<name>.json compiled into the binary).
Profile load_profile(const std::string& name_or_path);

// The device's kernels_as where it names the device model the profile was measured on (the profile
// then prices the device's kernels at those rates), else null.
const topo::KernelsAs* kernels_as_for(const Profile& profile, const topo::DeviceModel& device);

// InputError (profile file, "$.device") unless the profile was measured on this device model: its
// device.model equals the model's name or the one the device runs the kernels of (kernels_as_for), or
// (without device.model) the names agree once lowercased and stripped of everything but letters and
// digits, one a prefix of the other; and the SM counts agree.
void check_profile_device(const Profile& profile, const topo::DeviceModel& device);

// Applies the fitted scale-up collectives (nodes == 1) and copy-engine P2P to the cluster so that the
// simulator's ring reproduces them (docs/calibration.md, "Links"): sm_kernel_efficiency from the
// all-gather (else reduce-scatter) busbw over the NVLink/HCCS link bandwidth, sm_step_latency_s from
// its latency; copy_engine_efficiency and copy_engine_step_latency_s from p2p; the measured stream wait
// to every device model of the cluster. Checks the device
// first (check_profile_device on every device model the ranks use). Returns one line per parameter set.
std::vector<std::string> apply_profile(const Profile& profile, topo::Cluster& cluster);

// The calibrated kernel cost model (docs/calibration.md, "Kernels").
// Where a kernel runs: inside a training step (Profile::step_rate_fraction applies), what simulations
// use, or alone in a burst as the profile's samples were timed (kernel-level validation).
enum class KernelSetting { step, burst };

class CalibratedCostModel final : public KernelCostModel {
 public:
  explicit CalibratedCostModel(Profile profile, KernelSetting setting = KernelSetting::step);
  KernelCost cost(const Kernel& kernel, topo::Dtype dtype, const topo::DeviceModel& device) const override;
  // The roofline's count: a profile changes how long a kernel takes, not what it computes.
  Flops flops(const Kernel& kernel, topo::Dtype, const topo::DeviceModel&) const override { return kernel_flops(kernel); }
  double rate(const KernelCost& cost, const topo::DeviceModel& device, const DeviceLoad& load) const override;

  // The interpolated GEMM efficiency with wave quantization divided out (achieved / peak x quantization
  // of the roofline's plan), or nullopt when the shape lies outside the measured table.
  std::optional<double> gemm_efficiency(const GemmKernel& g, topo::Dtype dtype, const topo::DeviceModel& device) const;
  // Interpolated attention FLOP/s for the kernel's pass, or nullopt outside the table.
  std::optional<double> attention_flops_per_s(const AttentionKernel& a, topo::Dtype dtype) const;
  // Slowdown (>= 1) of a compute-bound kernel while `sms` SMs are held by communication kernels; nullopt
  // when the profile has no sm_kernel contention.
  std::optional<double> sm_slowdown(int sms) const;

  const Profile& profile() const { return profile_; }

 private:
  KernelCost uncached_cost(const Kernel& kernel, topo::Dtype dtype, const topo::DeviceModel& device) const;
  // The cost on the device the profile describes (uncached_cost scales it for a kernels_as device).
  KernelCost profiled_cost(const Kernel& kernel, topo::Dtype dtype, const topo::DeviceModel& device) const;
  // Sets launch_s to the kernel gap (0 for a kernel of no work) and duration_ps to the time alone plus it.
  void with_gap(KernelCost& c) const;
  Profile profile_;
  // 1 / step_rate_fraction of each kind under KernelSetting::step, else 1.
  double gemm_stretch_ = 1.0, attention_stretch_ = 1.0, elementwise_stretch_ = 1.0;
  // Profile::kernel_gap_s under KernelSetting::step, else 0: every kernel's launch_s.
  double gap_s_ = 0.0;
  RooflineCostModel roofline_;
  // GEMM costs by (m, n, k, batch, accumulate_fp32, dtype, device model name): the table look-up and the model's residual
  // correction each scan every sample. The engine caches costs within one run; this keeps them across
  // the runs of one simulate (every parallelism, scope and schedule).
  mutable std::mutex gemm_cache_mu_;
  mutable std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool, int, std::string>, KernelCost>
      gemm_cache_;
};

// The cost model a run uses: the roofline when `profile_name_or_path` is empty; otherwise the profile,
// loaded, checked against the cluster's devices and applied to its communication parameters
// (apply_profile), and a CalibratedCostModel over it.
std::unique_ptr<KernelCostModel> cost_model_for(const std::string& profile_name_or_path, topo::Cluster& cluster);

}  // namespace fusesim::model
