#include <algorithm>
#include <cstring>

#include "fusesim/model/kernel.hpp"

namespace fusesim::model {
namespace {

// Cheap on purpose (it runs once per compute task a graph adds): equal hashes are confirmed by
// same_kernel(), so the hash only has to spread the few hundred distinct kernels of a graph.
std::uint64_t mix(std::uint64_t h, std::uint64_t v) { return (h ^ v) * 0x9e3779b97f4a7c15ULL; }

std::uint64_t bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

std::uint64_t word(std::int64_t v) { return static_cast<std::uint64_t>(v); }

}  // namespace

bool same_kernel(const Kernel& x, const Kernel& y) {
  if (x.index() != y.index()) return false;
  if (const auto* a = std::get_if<GemmKernel>(&x)) {
    const auto& b = std::get<GemmKernel>(y);
    return a->m == b.m && a->n == b.n && a->k == b.k && a->batch == b.batch && a->accumulate_fp32 == b.accumulate_fp32;
  }
  if (const auto* a = std::get_if<AttentionKernel>(&x)) {
    const auto& b = std::get<AttentionKernel>(y);
    return a->batch == b.batch && a->heads == b.heads && a->kv_heads == b.kv_heads && a->seq_q == b.seq_q &&
           a->seq_kv == b.seq_kv && a->head_dim == b.head_dim && a->causal == b.causal && a->q_offset == b.q_offset &&
           a->pass == b.pass && a->unfused == b.unfused && bits(a->time_factor) == bits(b.time_factor);
  }
  const auto& a = std::get<ElementwiseKernel>(x);
  const auto& b = std::get<ElementwiseKernel>(y);
  return a.op == b.op && a.bytes == b.bytes && bits(a.flops) == bits(b.flops) && a.rows == b.rows;
}

std::uint64_t kernel_hash(const Kernel& k) {
  std::uint64_t h = mix(0x243f6a8885a308d3ULL, k.index());
  if (const auto* g = std::get_if<GemmKernel>(&k)) {
    h = mix(mix(h, word(g->m)), word(g->n));
    h = mix(mix(h, word(g->k)), word(g->batch) * 2 + (g->accumulate_fp32 ? 1 : 0));
  } else if (const auto* a = std::get_if<AttentionKernel>(&k)) {
    h = mix(mix(h, word(a->seq_q)), word(a->seq_kv));
    const std::uint64_t flags = static_cast<std::uint64_t>(a->pass) * 2 + (a->causal ? 1 : 0);
    h = mix(mix(h, word(a->q_offset)), word(a->heads) * 4 + flags);
    h = mix(mix(h, bits(a->time_factor)), word(a->batch) * 2 + (a->unfused ? 1 : 0));
  } else {
    const auto& e = std::get<ElementwiseKernel>(k);
    std::uint64_t head = 0;
    std::memcpy(&head, e.op.data(), std::min<std::size_t>(e.op.size(), 8));
    h = mix(mix(h, head ^ e.op.size()), word(e.bytes));
    h = mix(mix(h, bits(e.flops)), word(e.rows));
  }
  return h ^ (h >> 32);
}

}  // namespace fusesim::model
