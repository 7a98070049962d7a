// The default kernel cost model: a roofline (max of compute time and HBM time) with GEMM wave
// quantization, and the slowdown a kernel suffers while communication holds SMs or HBM bandwidth.
// Derivations and sources: docs/kernel-model.md.
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>
#include <stdexcept>
#include <string>
#include <variant>

#include <fmt/format.h>

#include "fusesim/model/kernel.hpp"

namespace fusesim::model {
namespace {

// However much HBM traffic communication adds, a kernel keeps this share of the streaming bandwidth
// (the memory controller arbitrates; no requester is starved outright).
constexpr double kMinHbmShare = 0.05;

// These are programming errors: the topology loader validates device models and the schedule
// generator builds the kernels, so a bad value here is not the user's input.
void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("RooflineCostModel: ") + what);
}

double effective_peak(const topo::DeviceModel& d, topo::Dtype dtype, const SourcedValue& efficiency) {
  const auto it = d.peak_flops_per_s.find(dtype);
  if (it == d.peak_flops_per_s.end())
    throw std::invalid_argument(
        fmt::format("RooflineCostModel: device model '{}' has no peak for {}", d.name, topo::to_string(dtype)));
  require(it->second.value > 0.0, "peak FLOP/s must be positive");
  require(efficiency.value > 0.0 && efficiency.value <= 1.0, "efficiency must be in (0, 1]");
  return it->second.value * efficiency.value;
}

double effective_hbm(const topo::DeviceModel& d) {
  require(d.hbm_bandwidth_bytes_per_s.value > 0.0, "HBM bandwidth must be positive");
  require(d.efficiency.hbm.value > 0.0 && d.efficiency.hbm.value <= 1.0, "HBM efficiency must be in (0, 1]");
  return d.hbm_bandwidth_bytes_per_s.value * d.efficiency.hbm.value;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A split of K leaves each CTA at least this much of the K loop; below it the prologue and the
// reduction outweigh what the extra CTAs gain (CUTLASS split-K examples keep K per split in the
// hundreds).
constexpr std::int64_t kMinKPerSplit = 256;
// Split-K partial sums are kept in fp32 and reduced in a second pass: written once, read once.
constexpr double kSplitKPartialBytes = 4.0;

// One way a library may run the GEMM: an output tile and a split of K across CTAs.
struct GemmPlan {
  std::int64_t tile_m, tile_n, split_k;
};

// Time of `g` under `plan`, alone on the device. Each wave runs one CTA per SM; a partial last wave
// leaves SMs idle but takes a whole wave's time, so the compute time is stretched by
// waves x sm_count / ctas (>= 1).
KernelCost gemm_plan_cost(const GemmKernel& g, const GemmPlan& plan, topo::Dtype dtype, const topo::DeviceModel& d,
                          double flops, double hbm_bytes) {
  KernelCost c;
  c.flops = flops;
  c.hbm_bytes = hbm_bytes;
  if (plan.split_k > 1)
    c.hbm_bytes += 2.0 * kSplitKPartialBytes * static_cast<double>(plan.split_k) * static_cast<double>(g.m) *
                   static_cast<double>(g.n) * static_cast<double>(g.batch);
  c.tiles = ceil_div(g.m, plan.tile_m) * ceil_div(g.n, plan.tile_n) * g.batch * plan.split_k;
  if (c.tiles > 0) {
    const std::int64_t waves = ceil_div(c.tiles, d.sm_count);
    const double quantization = static_cast<double>(waves * d.sm_count) / static_cast<double>(c.tiles);
    c.compute_s = c.flops / effective_peak(d, dtype, d.efficiency.gemm) * quantization;
  }
  c.memory_s = c.hbm_bytes / effective_hbm(d);
  c.duration_ps = seconds_to_ps(std::max(c.compute_s, c.memory_s));
  return c;
}

KernelCost gemm_cost(const GemmKernel& g, topo::Dtype dtype, const topo::DeviceModel& d) {
  require(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 0, "GEMM sizes must be non-negative");
  require(d.sm_count > 0 && d.gemm_tile_m > 0 && d.gemm_tile_n > 0, "SM count and GEMM tile must be positive");
  const double m = static_cast<double>(g.m), n = static_cast<double>(g.n), k = static_cast<double>(g.k);
  const double batch = static_cast<double>(g.batch);
  const double flops = gemm_flops(g);
  const double hbm_bytes = (m * k + k * n) * bytes_per_element(dtype) * batch + m * n * gemm_output_bytes(g, dtype) * batch;

  // The fastest of the plans the device's GEMM library offers, as its heuristics would pick: the
  // main tile first, so that it wins ties and a shape that fills the SMs keeps it.
  std::vector<std::pair<int, int>> tiles{{d.gemm_tile_m, d.gemm_tile_n}};
  tiles.insert(tiles.end(), d.gemm_tile_alternatives.begin(), d.gemm_tile_alternatives.end());
  std::optional<KernelCost> best;
  for (const auto& [tile_m, tile_n] : tiles) {
    require(tile_m > 0 && tile_n > 0, "GEMM tile alternatives must be positive");
    for (std::int64_t split = 1; split <= std::max(1, d.gemm_max_split_k); ++split) {
      if (split > 1 && g.k / split < kMinKPerSplit) break;
      KernelCost c = gemm_plan_cost(g, GemmPlan{tile_m, tile_n, split}, dtype, d, flops, hbm_bytes);
      if (!best || c.duration_ps < best->duration_ps) best = c;
    }
  }
  return *best;
}

KernelCost attention_cost(const AttentionKernel& a, topo::Dtype dtype, const topo::DeviceModel& d) {
  require(a.batch >= 0 && a.heads >= 0 && a.kv_heads >= 0 && a.seq_q >= 0 && a.seq_kv >= 0 && a.head_dim >= 0 &&
              a.q_offset >= 0,
          "attention sizes must be non-negative");
  // Q and O span the queries and query heads, K and V the keys and key/value heads; each is read or
  // written once (FlashAttention keeps S and P on chip). Backward reads them again with dO and writes
  // dQ, dK, dV of the same sizes.
  const double q_elems = static_cast<double>(a.batch) * static_cast<double>(a.seq_q) *
                         static_cast<double>(a.heads) * static_cast<double>(a.head_dim);
  const double kv_elems = static_cast<double>(a.batch) * static_cast<double>(a.seq_kv) *
                          static_cast<double>(a.kv_heads) * static_cast<double>(a.head_dim);
  const double forward_bytes = (2.0 * q_elems + 2.0 * kv_elems) * bytes_per_element(dtype);
  const bool backward = a.pass == Pass::backward;
  KernelCost c;
  // Per pair and head: S = Q K^T is 2 x head_dim FLOPs, O += P V another 2 x head_dim (x 2.5 backward).
  c.flops = attention_flops(a);
  c.hbm_bytes = backward ? 2.0 * forward_bytes : forward_bytes;
  if (c.flops > 0.0) c.compute_s = c.flops / effective_peak(d, dtype, d.efficiency.attention) * a.time_factor;
  c.memory_s = c.hbm_bytes / effective_hbm(d);
  c.duration_ps = seconds_to_ps(std::max(c.compute_s, c.memory_s));
  return c;
}

KernelCost elementwise_cost(const ElementwiseKernel& e, const topo::DeviceModel& d) {
  require(e.bytes >= 0 && e.flops >= 0.0, "element-wise bytes and FLOPs must be non-negative");
  KernelCost c;
  // Their few FLOPs per byte run on the vector units, far from any compute roof: the HBM stream is
  // the whole cost. The FLOPs are kept for counting (hardware FLOPs), not timing.
  c.flops = e.flops;
  c.hbm_bytes = static_cast<double>(e.bytes);
  c.memory_s = c.hbm_bytes / effective_hbm(d);
  c.duration_ps = seconds_to_ps(c.memory_s);
  return c;
}

}  // namespace

Flops gemm_flops(const GemmKernel& g) {
  const double m = static_cast<double>(g.m), n = static_cast<double>(g.n), k = static_cast<double>(g.k);
  return 2.0 * m * n * k * static_cast<double>(g.batch);
}

Flops kernel_flops(const Kernel& kernel) {
  if (const auto* g = std::get_if<GemmKernel>(&kernel)) return gemm_flops(*g);
  if (const auto* a = std::get_if<AttentionKernel>(&kernel)) return attention_flops(*a);
  return std::get<ElementwiseKernel>(kernel).flops;
}

double contended_rate(const KernelCost& cost, double contended_s) {
  const double alone_s = std::max(cost.compute_s, cost.memory_s);
  return std::min(1.0, (alone_s + cost.launch_s) / (contended_s + cost.launch_s));
}

double wave_ratio(std::int64_t tiles, int sm_count, int sms_held) {
  require(sm_count > 0, "SM count must be positive");
  if (sms_held <= 0) return 1.0;
  const int sms_left = std::max(1, sm_count - sms_held);
  // The same tiles run in waves of sms_left instead of sm_count; one wave takes as long as before.
  if (tiles > 0)
    return static_cast<double>(ceil_div(tiles, sms_left)) / static_cast<double>(ceil_div(tiles, sm_count));
  return static_cast<double>(sm_count) / static_cast<double>(sms_left);
}

KernelCost RooflineCostModel::cost(const Kernel& kernel, topo::Dtype dtype, const topo::DeviceModel& device) const {
  if (const auto* a = std::get_if<AttentionKernel>(&kernel); a && a->unfused)
    return unfused_attention_cost(*a, dtype, device);
  KernelCost c = std::holds_alternative<GemmKernel>(kernel)        ? gemm_cost(std::get<GemmKernel>(kernel), dtype, device)
                 : std::holds_alternative<AttentionKernel>(kernel) ? attention_cost(std::get<AttentionKernel>(kernel), dtype, device)
                                                                   : elementwise_cost(std::get<ElementwiseKernel>(kernel), device);
  // A kernel with work is launched: it pays the device's fixed launch time on top of its roofline
  // (the plan search above compares plans without it; it is the same for all of them).
  if (c.duration_ps > 0 && device.kernel_launch_s.value > 0.0) {
    c.launch_s = device.kernel_launch_s.value;
    c.duration_ps = seconds_to_ps(std::max(c.compute_s, c.memory_s) + c.launch_s);
  }
  return c;
}

double RooflineCostModel::rate(const KernelCost& cost, const topo::DeviceModel& device, const DeviceLoad& load) const {
  if (load.sms_held_by_comm <= 0 && load.comm_hbm_bytes_per_s <= 0.0) return 1.0;
  const double alone_s = std::max(cost.compute_s, cost.memory_s);
  if (alone_s <= 0.0) return 1.0;
  require(device.sm_count > 0, "SM count must be positive");

  const double compute_s = cost.compute_s * wave_ratio(cost.tiles, device.sm_count, load.sms_held_by_comm);

  const double bandwidth = effective_hbm(device);
  const double bandwidth_left =
      std::max(bandwidth - std::max(0.0, load.comm_hbm_bytes_per_s), kMinHbmShare * bandwidth);
  const double memory_s = cost.hbm_bytes / bandwidth_left;

  return contended_rate(cost, std::max(compute_s, memory_s));
}

}  // namespace fusesim::model
