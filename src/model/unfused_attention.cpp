// Attention as Megatron-LM computed it before FlashAttention (include/fusesim/model/kernel.hpp,
// unfused_attention_parts): the kernels it runs and their cost as a sequence.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "fusesim/model/kernel.hpp"

namespace fusesim::model {

namespace {

// FlashAttention's benchmarks count the backward pass as 2.5x the forward FLOPs (two matrix products
// forward, five backward: S recomputed, dV, dP, dQ, dK): Dao-AILab/flash-attention,
// benchmarks/benchmark_flash_attention.py, flops().
constexpr double kBackwardFactor = 2.5;

// (query, key) pairs a causal mask leaves: query i at absolute position q_offset + i sees keys
// 0 .. q_offset + i, of which at most seq_kv exist.
std::int64_t causal_pairs(std::int64_t seq_q, std::int64_t seq_kv, std::int64_t q_offset) {
  // Queries whose key count q_offset + i + 1 has not reached seq_kv: a rising run q_offset+1, q_offset+2, ...
  const std::int64_t rising = std::clamp<std::int64_t>(seq_kv - q_offset, 0, seq_q);
  const std::int64_t first = q_offset + 1;
  return rising * first + rising * (rising - 1) / 2 + (seq_q - rising) * seq_kv;
}

}  // namespace

Flops attention_flops(const AttentionKernel& a) {
  const std::int64_t pairs = a.causal ? causal_pairs(a.seq_q, a.seq_kv, a.q_offset) : a.seq_q * a.seq_kv;
  const double forward = 4.0 * static_cast<double>(a.batch) * static_cast<double>(a.heads) *
                         static_cast<double>(pairs) * static_cast<double>(a.head_dim);
  return a.pass == Pass::backward ? kBackwardFactor * forward : forward;
}

std::vector<Kernel> unfused_attention_parts(const AttentionKernel& a, topo::Dtype dtype) {
  const std::int64_t bh = a.batch * a.heads;  // one matrix product per (sample, query head)
  const std::int64_t sq = a.seq_q, sk = a.seq_kv, d = a.head_dim;
  const std::int64_t e = topo::bytes_per_element(dtype);
  const std::int64_t scores = bh * sq * sk;  // E
  const std::int64_t rows = bh * sq;          // a softmax row per (sample, head, query)
  const auto E = static_cast<double>(scores);
  if (a.pass == Pass::forward)
    return {GemmKernel{sq, sk, d, bh},
            // Scale, mask, max, exp, sum, divide: a few FLOPs per score, on the vector units.
            ElementwiseKernel{"softmax", 2 * scores * e, 5.0 * E, rows},
            // Dropout: one multiply by the mask per score.
            ElementwiseKernel{"dropout", 2 * scores * e + scores, E, rows},
            GemmKernel{sq, d, sk, bh}};
  return {GemmKernel{sk, d, sq, bh},  // dV = P^T dO
          GemmKernel{sq, sk, d, bh},  // dP = dO V^T
          ElementwiseKernel{"dropout_backward", 2 * scores * e + scores, E, rows},
          ElementwiseKernel{"softmax_backward", 3 * scores * e, 3.0 * E, rows},
          GemmKernel{sq, d, sk, bh},   // dQ = dS K
          GemmKernel{sk, d, sq, bh}};  // dK = dS^T Q
}

KernelCost KernelCostModel::unfused_attention_cost(const AttentionKernel& a, topo::Dtype dtype,
                                                   const topo::DeviceModel& device) const {
  KernelCost total;
  for (const Kernel& part : unfused_attention_parts(a, dtype)) {
    const KernelCost c = cost(part, dtype, device);
    total.hbm_bytes += c.hbm_bytes;
    total.compute_s += c.compute_s;
    total.memory_s += c.memory_s;
    total.launch_s += c.launch_s;
    total.duration_ps += c.duration_ps;
  }
  // tiles stays 0: the parts' waves differ, so contention for SMs spreads over the SMs left.
  total.flops = attention_flops(a);
  return total;
}

}  // namespace fusesim::model
