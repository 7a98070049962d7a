#pragma once
// Kernels and what they cost. A compute task names its kernel by shape; a KernelCostModel turns the
// shape into FLOPs, HBM bytes and a duration on a device, and says how much slower it runs while
// communication holds SMs or HBM bandwidth. The default is a roofline with the device's efficiencies;
// a calibration profile (a later issue) plugs in behind the same interface.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/units.hpp"

namespace fusesim::model {

// C[m, n] = A[m, k] x B[k, n], `batch` independent times.
struct GemmKernel {
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t batch = 1;
  // C += A x B with C in fp32: a weight-gradient GEMM accumulating into the fp32 main gradient
  // (Megatron-LM's gradient-accumulation fusion, on by default): C is read and written as 4-byte
  // elements, where a plain GEMM writes it once in the data type. A wgrad split into t chunks pays
  // this read-modify-write t times.
  bool accumulate_fp32 = false;
};

// HBM bytes per element of C: written once in the data type, or read and written in fp32 (4 + 4).
inline double gemm_output_bytes(const GemmKernel& g, topo::Dtype dtype) {
  return g.accumulate_fp32 ? 8.0 : static_cast<double>(topo::bytes_per_element(dtype));
}

enum class Pass { forward, backward };

// FlashAttention-style fused attention on the local heads.
struct AttentionKernel {
  std::int64_t batch = 1;
  std::int64_t heads = 0;       // query heads on this rank
  std::int64_t kv_heads = 0;    // key/value heads on this rank
  std::int64_t seq_q = 0;       // query positions computed
  std::int64_t seq_kv = 0;      // key positions attended
  std::int64_t head_dim = 0;
  bool causal = true;
  std::int64_t q_offset = 0;    // position of the first query within the kv sequence (causal masking of a query chunk)
  Pass pass = Pass::forward;
  // The attention core as Megatron-LM computed it before FlashAttention ($.training.attention
  // "unfused"): the [seq_q, seq_kv] scores of every head go through HBM (unfused_attention_parts).
  bool unfused = false;
  // The kernel's time over FlashAttention-2's on the same shape ($.training.attention_time_factor), for
  // runs on another fused kernel: llm-foundry's Triton kernel of 2022 runs at about half its speed.
  // Its FLOPs are the same; only the time changes.
  double time_factor = 1.0;
};

// Memory-bound kernels: norms, activations, residual adds, the reduction add of a Fuse-RS step,
// optimizer updates. `bytes` is the HBM traffic (reads + writes).
struct ElementwiseKernel {
  std::string op;               // "layernorm", "swiglu", "add", "adam", ...
  Bytes bytes = 0;
  Flops flops = 0.0;
  std::int64_t rows = 0;        // token rows it runs over (a row-wise kernel gives each to one block); 0: not said
};

using Kernel = std::variant<GemmKernel, AttentionKernel, ElementwiseKernel>;
std::string kernel_kind(const Kernel& k);  // "gemm", "attention", "elementwise"

// Whether two kernels are one: the same alternative, every field equal (doubles bit for bit, so that
// a kernel is never merged with one a cost model could price differently). kernel_hash agrees with it;
// both serve the tables that keep one entry per distinct kernel (a graph's kernels, the engine's costs).
bool same_kernel(const Kernel& a, const Kernel& b);
std::uint64_t kernel_hash(const Kernel& k);

// The kernels an unfused attention runs, in order (Megatron-LM's CoreAttention before FlashAttention,
// megatron/model/transformer.py of 2021-2022: baddbmm Q K^T into [b x heads, seq_q, seq_kv], the fused
// scale-mask-softmax kernel, dropout on the probabilities, bmm with V). Every (query, key) pair is
// computed, the causal mask applied after; key/value heads are expanded to the query heads. With E =
// batch x heads x seq_q x seq_kv score elements of e bytes:
//   forward   QK^T (batched GEMM), softmax (reads and writes E), dropout (reads E, writes E and a
//             1-byte mask), PV (batched GEMM);
//   backward  dV = P^T dO, dP = dO V^T, dropout backward (reads dP and the mask, writes E), softmax
//             backward (reads P and dP, writes dS), dQ = dS K, dK = dS^T Q.
std::vector<Kernel> unfused_attention_parts(const AttentionKernel& a, topo::Dtype dtype);
// Useful FLOPs of an attention kernel, fused or not: 4 x batch x heads x head_dim per (query, key)
// pair the mask leaves, x 2.5 for the backward (FlashAttention's count). The masked pairs an unfused
// kernel computes anyway are not model FLOPs.
Flops attention_flops(const AttentionKernel& a);

// What a kernel may be: at most 1e21 FLOPs (a million seconds at 1 PFLOP/s, near the end of the
// picosecond range of simulated time) and 2^50 elements in any operand, so that every count the
// cost models form in 64-bit integers fits and every time they give can be simulated. Readers of
// kernel sizes (task graphs, validation cases) refuse a kernel beyond them with its path; this says
// why, or nothing when the kernel is within them. Products are formed in double, so they never wrap.
constexpr double kMaxKernelFlops = 1e21;
constexpr double kMaxKernelElements = 1125899906842624.0;  // 2^50
std::optional<std::string> kernel_size_error(const Kernel& k);

struct KernelCost {
  Flops flops = 0.0;          // useful floating-point operations
  double hbm_bytes = 0.0;     // bytes read and written in HBM
  double compute_s = 0.0;     // flops / (peak x efficiency), alone on the device
  double memory_s = 0.0;      // hbm_bytes / (bandwidth x efficiency)
  std::int64_t tiles = 0;     // output tiles for wave quantization (GEMM), 0 otherwise
  double launch_s = 0.0;      // fixed part of the duration (kernel launch), which contention does not stretch
  TimePs duration_ps = 0;     // alone on the device, every SM available: max(compute_s, memory_s) + launch_s
};

// What communication takes from a device at one instant.
struct DeviceLoad {
  int sms_held_by_comm = 0;                 // SMs held by running SM-based communication kernels
  BytesPerSecond comm_hbm_bytes_per_s = 0;  // HBM traffic of running transfers (both kinds)
};

// How much longer compute takes while communication holds `sms_held` of the device's SMs: a kernel
// of `tiles` thread blocks runs in waves of the SMs left instead of all of them (one wave takes as
// long as before); a kernel without a tile count (tiles 0) spreads over the SMs left. 1 when none are held.
double wave_ratio(std::int64_t tiles, int sm_count, int sms_held);

// The rate (<= 1) of a kernel whose work, max(compute_s, memory_s) alone, takes `contended_s` under
// contention: its launch_s is latency, not SM or HBM work, and is not stretched. Every cost model's
// rate() ends here.
double contended_rate(const KernelCost& cost, double contended_s);

// 2 m n k x batch.
Flops gemm_flops(const GemmKernel& g);
// The useful FLOPs of a kernel as the shipped cost models count them: gemm_flops() for a GEMM,
// attention_flops() for attention (fused or not), the element-wise kernel's own count.
Flops kernel_flops(const Kernel& kernel);

class KernelCostModel {
 public:
  virtual ~KernelCostModel() = default;
  virtual KernelCost cost(const Kernel& kernel, topo::Dtype dtype, const topo::DeviceModel& device) const = 0;
  // cost(...).flops without the rest: the analysis counts the FLOPs of every task of a step. A model
  // that counts as kernel_flops() does says so and skips pricing each task again.
  virtual Flops flops(const Kernel& kernel, topo::Dtype dtype, const topo::DeviceModel& device) const {
    return cost(kernel, dtype, device).flops;
  }
  // Speed of a running kernel relative to running alone, in (0, 1]: exactly 1 when `load` is empty
  // (the engine does not ask then).
  virtual double rate(const KernelCost& cost, const topo::DeviceModel& device, const DeviceLoad& load) const = 0;

 protected:
  // An unfused attention priced as its parts run one after the other (each by cost()): durations,
  // compute, memory and launch times and HBM bytes add up; the FLOPs are attention_flops().
  KernelCost unfused_attention_cost(const AttentionKernel& a, topo::Dtype dtype, const topo::DeviceModel& device) const;
};

// max(compute, memory) time with wave quantization on the SMs left to the kernel; HBM shared with
// communication traffic. Documented in docs/kernel-model.md.
class RooflineCostModel final : public KernelCostModel {
 public:
  KernelCost cost(const Kernel& kernel, topo::Dtype dtype, const topo::DeviceModel& device) const override;
  Flops flops(const Kernel& kernel, topo::Dtype, const topo::DeviceModel&) const override { return kernel_flops(kernel); }
  double rate(const KernelCost& cost, const topo::DeviceModel& device, const DeviceLoad& load) const override;
};

}  // namespace fusesim::model
