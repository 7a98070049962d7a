#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "fusesim/model/kernel.hpp"
#include "fusesim/model/workload.hpp"

namespace fusesim::model {

std::string to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::baseline: return "baseline";
    case ScheduleKind::slice: return "slice";
    case ScheduleKind::commfuse: return "commfuse";
  }
  return "?";
}

const std::vector<ScheduleKind>& all_schedule_kinds() {
  static const std::vector<ScheduleKind> kinds = {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse};
  return kinds;
}

std::vector<std::string> schedule_names() {
  std::vector<std::string> out;
  for (ScheduleKind k : all_schedule_kinds()) out.push_back(to_string(k));
  return out;
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  for (ScheduleKind k : all_schedule_kinds())
    if (to_string(k) == name) return k;
  throw std::logic_error("no schedule named '" + name + "'");
}

std::string to_string(CommEngine e) {
  switch (e) {
    case CommEngine::sm_kernel: return "sm_kernel";
    case CommEngine::copy_engine: return "copy_engine";
  }
  return "?";
}

std::string engine_name(const ScheduleOptions& s) {
  using enum CommEngine;
  if (s.collective_engine == sm_kernel && s.p2p_engine == sm_kernel) return "sm";
  if (s.collective_engine == copy_engine && s.p2p_engine == copy_engine) return "copy";
  if (s.collective_engine == sm_kernel && s.p2p_engine == copy_engine) return "auto";
  return "collectives " + to_string(s.collective_engine) + ", p2p " + to_string(s.p2p_engine);
}

void set_engine_mode(ScheduleOptions& s, const std::string& mode) {
  using enum CommEngine;
  if (mode == "sm") {
    s.collective_engine = s.p2p_engine = sm_kernel;
  } else if (mode == "copy") {
    s.collective_engine = s.p2p_engine = copy_engine;
  } else if (mode == "auto") {
    s.collective_engine = sm_kernel;
    s.p2p_engine = copy_engine;
  } else {
    throw std::invalid_argument("set_engine_mode: '" + mode + "' is not sm, copy or auto");
  }
}

std::string to_string(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::one_f_one_b: return "1f1b";
    case PipelineSchedule::interleaved: return "interleaved";
    case PipelineSchedule::zb_h1: return "zb-h1";
  }
  return "?";
}

std::optional<PipelineSchedule> pipeline_schedule_named(std::string_view name) {
  for (PipelineSchedule s : {PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved, PipelineSchedule::zb_h1})
    if (to_string(s) == name) return s;
  return std::nullopt;
}

std::int64_t pipeline_warmup_forwards(std::int64_t stages, std::int64_t virtual_stages, std::int64_t micro_batches,
                                      std::int64_t stage) {
  const std::int64_t total = micro_batches * virtual_stages;
  if (virtual_stages == 1) return std::min(total, stages - stage - 1);
  if (micro_batches == stages) return total;
  return std::min(total, (stages - stage - 1) * 2 + (virtual_stages - 1) * stages);
}

std::vector<PipelineStep> zb_h1_passes(std::int64_t stages, std::int64_t micro_batches, std::int64_t stage) {
  const std::int64_t m = micro_batches;
  std::vector<PipelineStep> out;
  std::int64_t f = 0, b = 0, w = 0;  // the next micro-batch of each pass
  const auto put = [&](PipelinePass pass, std::int64_t& next) { out.push_back(PipelineStep{pass, next++}); };
  for (std::int64_t k = std::min(stages - stage - 1, m); k > 0; --k) put(PipelinePass::forward, f);
  for (std::int64_t k = 0; k < stage && f < m; ++k) {
    put(PipelinePass::forward, f);
    put(PipelinePass::backward, b);
  }
  while (f < m) {
    put(PipelinePass::forward, f);
    put(PipelinePass::backward, b);
    put(PipelinePass::weight, w);
  }
  while (b < m) {
    put(PipelinePass::backward, b);
    put(PipelinePass::weight, w);
  }
  while (w < m) put(PipelinePass::weight, w);
  return out;
}

std::string to_string(DpSharding s) {
  switch (s) {
    case DpSharding::ddp: return "ddp";
    case DpSharding::zero1: return "zero1";
    case DpSharding::zero2: return "zero2";
    case DpSharding::zero3: return "zero3";
  }
  return "?";
}

const std::vector<DpSharding>& all_dp_shardings() {
  static const std::vector<DpSharding> values = {DpSharding::ddp, DpSharding::zero1, DpSharding::zero2,
                                                 DpSharding::zero3};
  return values;
}

std::string to_string(CrossEntropy c) {
  switch (c) {
    case CrossEntropy::torch: return "torch";
    case CrossEntropy::megatron: return "megatron";
  }
  return "?";
}

const std::vector<CrossEntropy>& all_cross_entropies() {
  static const std::vector<CrossEntropy> values = {CrossEntropy::torch, CrossEntropy::megatron};
  return values;
}

// Per logit, fp32 = 4 B, the logits' own type l B:
//   torch forward: cast (read l, write 4), log_softmax (read 4, write 4): l + 12;
//   torch backward: the NLL's dense gradient zeroed (write 4), log_softmax's backward (read the
//   gradient and the saved output, write: 12), the cast back (read 4, write l): l + 20;
//   megatron forward: cast (l + 4), max (4), subtract in place (8), exp in place (8), sum (4), divide
//   in place (8): l + 36;
//   megatron backward: the saved softmax multiplied in place by the loss's gradient (8), the cast
//   back (4 + l): l + 12.
std::int64_t cross_entropy_forward_bytes(CrossEntropy c, std::int64_t logit_bytes) {
  return logit_bytes + (c == CrossEntropy::megatron ? 36 : 12);
}
std::int64_t cross_entropy_backward_bytes(CrossEntropy c, std::int64_t logit_bytes) {
  return logit_bytes + (c == CrossEntropy::megatron ? 12 : 20);
}

std::string to_string(ReshardAfterForward r) {
  switch (r) {
    case ReshardAfterForward::always: return "always";
    case ReshardAfterForward::all_but_last: return "all_but_last";
    case ReshardAfterForward::never: return "never";
  }
  return "?";
}

const std::vector<ReshardAfterForward>& all_reshard_after_forward() {
  static const std::vector<ReshardAfterForward> values = {ReshardAfterForward::always, ReshardAfterForward::all_but_last,
                                                          ReshardAfterForward::never};
  return values;
}

std::string to_string(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
    case Recompute::op: return "op";
  }
  return "?";
}

const std::vector<Recompute>& all_recomputes() {
  static const std::vector<Recompute> values = {Recompute::none, Recompute::selective, Recompute::full, Recompute::op};
  return values;
}

std::string to_string(NormKernel k) {
  switch (k) {
    case NormKernel::fused: return "fused";
    case NormKernel::apex_legacy: return "apex_legacy";
    case NormKernel::eager: return "eager";
  }
  return "?";
}

std::optional<std::string> kernel_size_error(const Kernel& k) {
  const auto d = [](std::int64_t v) { return static_cast<double>(v); };
  double flops = 0.0;
  double largest = 0.0;  // elements of the largest operand
  if (const auto* g = std::get_if<GemmKernel>(&k)) {
    flops = 2.0 * d(g->m) * d(g->n) * d(g->k) * d(g->batch);
    largest = std::max({d(g->m) * d(g->k), d(g->k) * d(g->n), d(g->m) * d(g->n)}) * d(g->batch);
  } else if (const auto* a = std::get_if<AttentionKernel>(&k)) {
    // The backward's 2.5x of the forward's QK^T and PV, over every (query, key) pair.
    flops = 2.5 * 4.0 * d(a->batch) * d(a->heads) * d(a->seq_q) * d(a->seq_kv) * d(a->head_dim);
    largest = std::max(d(a->seq_q) * d(a->heads), d(a->seq_kv) * d(a->kv_heads)) * d(a->batch) * d(a->head_dim);
    // Unfused, the scores of every head are a tensor in HBM.
    if (a->unfused) largest = std::max(largest, d(a->batch) * d(a->heads) * d(a->seq_q) * d(a->seq_kv));
    // The causal pair count is formed in 64-bit integers from seq_q x (q_offset + seq_kv).
    if (!(d(a->seq_q) * (d(a->q_offset) + d(a->seq_kv)) <= 1e18))
      return fmt::format("seq_q x (q_offset + seq_kv) = {:.3g} (query, key) positions is beyond the 1e18 one kernel may have",
                         d(a->seq_q) * (d(a->q_offset) + d(a->seq_kv)));
  } else {
    const auto& e = std::get<ElementwiseKernel>(k);
    flops = e.flops;
    largest = d(e.bytes);
  }
  if (!(flops <= kMaxKernelFlops))
    return fmt::format("{:.3g} FLOPs is beyond the {:.0e} one kernel may have", flops, kMaxKernelFlops);
  if (!(largest <= kMaxKernelElements))
    return fmt::format("an operand of {:.3g} elements is beyond the 2^50 one kernel may have", largest);
  return std::nullopt;
}

std::string kernel_kind(const Kernel& k) {
  switch (k.index()) {
    case 0: return "gemm";
    case 1: return "attention";
    default: return "elementwise";
  }
}

}  // namespace fusesim::model
