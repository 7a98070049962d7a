// The parts of a training step outside the transformer layers (include/fusesim/sched/step.hpp).
// Megatron with sequence parallelism: the vocab-parallel embedding's partial output [S, h] is
// reduce-scattered to the sequence shard; the LM head gathers the final norm's shard, multiplies by
// its vocab/tp columns and computes a vocab-parallel cross-entropy (two all-reduces of one value per
// row: the max and the sum of exponentials); the backward reduce-scatters the head's dgrad and
// all-gathers the embedding output's gradient for the scatter-add into the embedding table.
#include "fusesim/sched/step.hpp"
#include "fusesim/util/concat.hpp"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace fusesim::sched {

std::vector<StepWork> accumulation_order(std::int64_t micro_batches, std::int64_t layers, bool forward, bool backward) {
  std::vector<StepWork> out;
  for (std::int64_t mb = 0; mb < micro_batches; ++mb) {
    if (forward) {
      out.push_back(StepWork{StepPhase::forward_begin, mb, -1});
      for (std::int64_t l = 0; l < layers; ++l) out.push_back(StepWork{StepPhase::forward_layer, mb, l});
    }
    if (backward) {
      out.push_back(StepWork{StepPhase::backward_begin, mb, -1});
      for (std::int64_t l = layers - 1; l >= 0; --l) out.push_back(StepWork{StepPhase::backward_layer, mb, l});
      out.push_back(StepWork{StepPhase::backward_end, mb, -1});
    }
  }
  return out;
}

std::string to_string(StepPhase p) {
  switch (p) {
    case StepPhase::forward_begin: return "forward_begin";
    case StepPhase::forward_layer: return "forward_layer";
    case StepPhase::backward_begin: return "backward_begin";
    case StepPhase::backward_layer: return "backward_layer";
    case StepPhase::backward_end: return "backward_end";
    case StepPhase::forward_recv: return "forward_recv";
    case StepPhase::forward_send: return "forward_send";
    case StepPhase::backward_recv: return "backward_recv";
    case StepPhase::backward_send: return "backward_send";
    case StepPhase::backward_weight: return "backward_weight";
  }
  return "?";
}

std::vector<StepWork> pipeline_order(const PipelineShape& shape, std::int64_t stage) {
  const std::int64_t p = shape.stages, v = shape.virtual_stages, m = shape.micro_batches, n = shape.chunk_layers();
  const std::int64_t last_virtual = p * v - 1, total = m * v;
  // The k-th forward (backward) of this stage: which micro-batch, which chunk.
  const auto micro_batch = [&](std::int64_t k) { return v == 1 ? k : (k / (p * v)) * p + k % p; };
  const auto chunk = [&](std::int64_t k, bool forward) {
    if (v == 1) return std::int64_t{0};
    const std::int64_t c = (k / p) % v;
    return forward ? c : v - 1 - c;
  };
  std::vector<StepWork> out;
  const auto forward = [&](std::int64_t k) {
    const std::int64_t mb = micro_batch(k), c = chunk(k, true), vs = c * p + stage, l0 = shape.first_layer(stage, c);
    out.push_back(vs == 0 ? StepWork{StepPhase::forward_begin, mb, -1} : StepWork{StepPhase::forward_recv, mb, l0});
    for (std::int64_t l = l0; l < l0 + n; ++l) out.push_back(StepWork{StepPhase::forward_layer, mb, l});
    if (vs != last_virtual) out.push_back(StepWork{StepPhase::forward_send, mb, l0 + n});
  };
  const auto backward = [&](std::int64_t k) {
    const std::int64_t mb = micro_batch(k), c = chunk(k, false), vs = c * p + stage, l0 = shape.first_layer(stage, c);
    out.push_back(vs == last_virtual ? StepWork{StepPhase::backward_begin, mb, -1}
                                     : StepWork{StepPhase::backward_recv, mb, l0 + n - 1});
    for (std::int64_t l = l0 + n - 1; l >= l0; --l) out.push_back(StepWork{StepPhase::backward_layer, mb, l});
    out.push_back(vs == 0 ? StepWork{StepPhase::backward_end, mb, -1} : StepWork{StepPhase::backward_send, mb, l0 - 1});
  };
  if (shape.zero_bubble) {
    if (v != 1) throw std::invalid_argument("pipeline_order: ZB-H1 runs one chunk per stage (virtual_stages 1)");
    const std::int64_t l0 = shape.first_layer(stage, 0);
    for (const model::PipelineStep& ps : model::zb_h1_passes(p, m, stage)) {
      if (ps.pass == model::PipelinePass::forward) forward(ps.micro_batch);
      if (ps.pass == model::PipelinePass::backward) backward(ps.micro_batch);
      if (ps.pass == model::PipelinePass::weight)
        for (std::int64_t l = l0 + n - 1; l >= l0; --l)
          out.push_back(StepWork{StepPhase::backward_weight, ps.micro_batch, l});
    }
    return out;
  }
  const std::int64_t warmup = model::pipeline_warmup_forwards(p, v, m, stage);
  for (std::int64_t k = 0; k < warmup; ++k) forward(k);
  for (std::int64_t k = 0; k < total - warmup; ++k) {
    forward(warmup + k);
    backward(k);
  }
  for (std::int64_t k = total - warmup; k < total; ++k) backward(k);
  return out;
}

std::int64_t adam_bytes_per_param(std::int64_t grad_bytes) { return 2 * 3 * 4 + grad_bytes; }

std::int64_t master_copy_bytes_per_param(topo::Dtype dtype) {
  return dtype == topo::Dtype::fp32 ? 0 : 4 + topo::bytes_per_element(dtype);
}

topo::Dtype main_grad_dtype(topo::Dtype grad_dtype, topo::Dtype dtype) {
  return dtype == topo::Dtype::fp32 ? grad_dtype : topo::Dtype::fp32;
}

std::vector<model::ElementwiseKernel> OptimizerKernels::all() const {
  std::vector<model::ElementwiseKernel> out;
  for (const auto* k : {&grad_cast, &grad_unscale, &grad_norm, &grad_scale})
    if (*k) out.push_back(**k);
  out.push_back(adam);
  if (master_copy) out.push_back(*master_copy);
  return out;
}

OptimizerKernels optimizer_kernels(std::int64_t elements, topo::Dtype grad_dtype, topo::Dtype dtype, bool clip_grad) {
  const topo::Dtype main = main_grad_dtype(grad_dtype, dtype);
  const std::int64_t grad_bytes = topo::bytes_per_element(grad_dtype), main_bytes = topo::bytes_per_element(main);
  const auto n = static_cast<double>(elements);
  OptimizerKernels k{};
  k.adam = model::ElementwiseKernel{"adam", elements * adam_bytes_per_param(main_bytes), kAdamFlopsPerParam * n};
  if (main != grad_dtype) k.grad_cast = model::ElementwiseKernel{"copy", elements * (grad_bytes + main_bytes), 0.0};
  // fp16 trains with dynamic loss scaling (Megatron-LM's DynamicGradScaler, torch.cuda.amp.GradScaler):
  // every step unscales the gradients and checks them for inf/NaN in one pass
  // (torch._amp_foreach_non_finite_check_and_unscale_), then agrees on the overflow flag.
  if (dtype == topo::Dtype::fp16)
    k.grad_unscale = model::ElementwiseKernel{"grad_scale", 2 * elements * main_bytes, n};
  if (clip_grad) {
    k.grad_norm = model::ElementwiseKernel{"grad_norm", elements * main_bytes, 2.0 * n};
    k.grad_scale = model::ElementwiseKernel{"grad_scale", 2 * elements * main_bytes, n};
  }
  if (const std::int64_t copy_bytes = master_copy_bytes_per_param(dtype); copy_bytes > 0)
    k.master_copy = model::ElementwiseKernel{"copy", elements * copy_bytes, 0.0};
  return k;
}

StepEmitter::StepEmitter(TaskGraph& graph, std::int64_t& next_instance, Group group)
    : g_(graph), next_instance_(next_instance), grp_(std::move(group)) {}

TaskId StepEmitter::add(int ti, const std::string& name, StreamRef stream, TaskKind kind, TaskLabels labels,
                        const std::vector<TaskId>& deps) {
  return add_rank_task(g_, grp_.ranks[static_cast<std::size_t>(ti)], name, stream, std::move(kind),
                       std::move(labels), -1, deps);
}

TaskId StepEmitter::compute(int ti, const std::string& name, model::Kernel k, Phase phase,
                            int micro_batch, const std::vector<TaskId>& deps, int region) {
  TaskLabels l;
  l.region = region;
  l.micro_batch = micro_batch;
  l.phase = phase;
  l.op = std::string_view(name).substr(name.rfind('/') + 1);
  return add(ti, name, StreamRef{StreamKind::compute, 0}, ComputeTask{std::move(k), grp_.dtype, false}, std::move(l),
             deps);
}

std::vector<TaskId> StepEmitter::collective(const std::string& name, CollectiveKind kind, Bytes bytes,
                                            Phase phase, int micro_batch, const Deps& deps) {
  const std::int64_t instance = next_instance_++;
  std::vector<TaskId> out;
  const std::string op = to_string(kind);
  for (int ti = 0; ti < emit_tp(); ++ti) {
    TaskLabels l;
    l.micro_batch = micro_batch;
    l.phase = phase;
    l.op = op;
    out.push_back(add(ti, name, grp_.comm.collective_stream,
                      CollectiveTask{kind, grp_.ranks, bytes, instance, grp_.comm.collective_engine, grp_.comm.sms},
                      std::move(l), deps[static_cast<std::size_t>(ti)]));
  }
  return out;
}

StepEmitter::Deps StepEmitter::gradient(
    const DpGradient& dg, DpSync* dp, const Deps& ready,
    const std::function<TaskId(int, std::int64_t, std::int64_t, int, const std::vector<TaskId>&)>& emit) {
  Deps done(static_cast<std::size_t>(tp()));
  for (int ti = 0; ti < emit_tp(); ++ti) {
    const int rank = grp_.ranks[static_cast<std::size_t>(ti)];
    const auto& deps = ready[static_cast<std::size_t>(ti)];
    if (dp != nullptr && dp->fused()) {
      done[ti] = {dp->fused_gradient(rank, dg, [&](std::int64_t row0, std::int64_t rows, int, int region,
                                                   const std::vector<TaskId>& d) {
        return emit(ti, row0, rows, region, d);
      }, deps)};
    } else {
      done[ti] = {emit(ti, 0, dg.rows, -1, deps)};
      if (dp != nullptr) dp->gradient(rank, dg, done[ti][0]);
    }
  }
  return done;
}

StepEmitter::Deps StepEmitter::embedding_forward(const std::string& mb, int micro_batch, const Deps& ready) {
  const std::int64_t S = grp_.rows, h = grp_.hidden;
  Deps d(static_cast<std::size_t>(tp()));
  // Each rank reads the rows of its vocab shard that the tokens hit (S/tp rows on average) and
  // writes the partial [S, h] (zeros for tokens outside its shard).
  for (int ti = 0; ti < emit_tp(); ++ti)
    d[ti] = {compute(ti, mb + "embedding/fwd/lookup",
                     model::ElementwiseKernel{"embedding", bytes(S * h / tp() + S * h), 0.0}, Phase::forward, micro_batch,
                     ready[static_cast<std::size_t>(ti)])};
  if (tp() == 1) return d;
  const auto rs = collective(mb + "embedding/fwd/rs", CollectiveKind::reduce_scatter, bytes(S * h), Phase::forward,
                             micro_batch, d);
  for (int ti = 0; ti < emit_tp(); ++ti) d[ti] = {rs[static_cast<std::size_t>(ti)]};
  return d;
}

StepEmitter::Deps StepEmitter::head(const std::string& mb, int micro_batch, const Deps& ready, DpSync* dp) {
  const std::int64_t S = grp_.rows, h = grp_.hidden, n = S / tp(), V = vocab_local();
  const auto loss_op = [&](bool backward) {
    const std::string op = grp_.cross_entropy == model::CrossEntropy::megatron ? "cross_entropy_megatron" : "cross_entropy";
    return backward ? op + "_bwd" : op;
  };
  Deps d(static_cast<std::size_t>(tp()));
  for (int ti = 0; ti < emit_tp(); ++ti)
    d[ti] = {compute(ti, mb + "head/fwd/final_norm",
                     model::ElementwiseKernel{model::norm_op(grp_.norm, false), bytes(2 * n * h), 8.0 * n * h},
                     Phase::forward, micro_batch, ready[static_cast<std::size_t>(ti)])};
  if (tp() > 1) {
    const auto ag = collective(mb + "head/fwd/ag", CollectiveKind::all_gather, bytes(S * h), Phase::forward, micro_batch, d);
    for (int ti = 0; ti < emit_tp(); ++ti) d[ti] = {ag[static_cast<std::size_t>(ti)]};
  }
  for (int ti = 0; ti < emit_tp(); ++ti) {
    const TaskId logits = compute(ti, mb + "head/fwd/lm_head", model::GemmKernel{S, V, h, 1}, Phase::forward, micro_batch, d[ti]);
    // Softmax cross-entropy in fp32 as the run's framework computes it (model::CrossEntropy:
    // F.cross_entropy on logits.float(), or Megatron's vocab-parallel one; docs/schedules.md, "Step").
    // Megatron's passes are plain streams and reductions, an op of their own: the profiles' samples of
    // "cross_entropy" time PyTorch's softmax kernels.
    d[ti] = {compute(ti, mb + "head/fwd/cross_entropy",
                     model::ElementwiseKernel{loss_op(false),
                                              S * V * model::cross_entropy_forward_bytes(grp_.cross_entropy, bytes(1)),
                                              5.0 * static_cast<double>(S * V)},
                     Phase::forward, micro_batch, {logits})};
  }
  if (tp() > 1) {
    // The row max and the row sum of exponentials over the vocab shards: one fp32 value per row each.
    const auto ar = collective(mb + "head/fwd/loss_ar", CollectiveKind::all_reduce, 2 * 4 * S, Phase::forward, micro_batch, d);
    for (int ti = 0; ti < emit_tp(); ++ti) d[ti] = {ar[static_cast<std::size_t>(ti)]};
  }
  // Backward: the logits' gradient, the dgrad (partial over the vocab shards, reduce-scattered to
  // the sequence shard), the weight gradient over the gathered input, the final norm's backward.
  Deps dlog(static_cast<std::size_t>(tp()));
  for (int ti = 0; ti < emit_tp(); ++ti)
    // The loss's backward to the logits' gradient in their type (model::cross_entropy_backward_bytes).
    dlog[ti] = {compute(ti, mb + "head/bwd/cross_entropy_bwd",
                        model::ElementwiseKernel{loss_op(true),
                                                 S * V * model::cross_entropy_backward_bytes(grp_.cross_entropy, bytes(1)),
                                                 2.0 * static_cast<double>(S * V)},
                        Phase::backward, micro_batch, d[ti])};
  Deps dgrad(static_cast<std::size_t>(tp()));
  for (int ti = 0; ti < emit_tp(); ++ti)
    dgrad[ti] = {compute(ti, mb + "head/bwd/lm_head_dgrad", model::GemmKernel{S, h, V, 1}, Phase::backward, micro_batch, dlog[ti])};
  Deps after = dgrad;
  if (tp() > 1) {
    const auto rs = collective(mb + "head/bwd/rs", CollectiveKind::reduce_scatter, bytes(S * h), Phase::backward,
                               micro_batch, dgrad);
    for (int ti = 0; ti < emit_tp(); ++ti) after[ti] = {rs[static_cast<std::size_t>(ti)]};
  }
  const DpGradient dg{mb + "head/bwd/lm_head_wgrad", -1, h, V, -1};
  gradient(dg, dp, dgrad, [&](int ti, std::int64_t row0, std::int64_t rows, int region, const std::vector<TaskId>& deps) {
    const std::string suffix = rows == h ? "" : concat("/r", row0);
    return compute(ti, mb + "head/bwd/lm_head_wgrad" + suffix, model::GemmKernel{rows, V, S, 1, /*accumulate_fp32=*/true}, Phase::backward,
                   micro_batch, deps, region);
  });
  Deps out(static_cast<std::size_t>(tp()));
  for (int ti = 0; ti < emit_tp(); ++ti)
    out[ti] = {compute(ti, mb + "head/bwd/final_norm_bwd",
                       model::ElementwiseKernel{model::norm_op(grp_.norm, true), bytes(3 * n * h), 10.0 * n * h},
                       Phase::backward, micro_batch, after[ti])};
  return out;
}

StepEmitter::Deps StepEmitter::embedding_backward(const std::string& mb, int micro_batch, const Deps& ready,
                                                  DpSync* dp) {
  const std::int64_t S = grp_.rows, h = grp_.hidden, V = vocab_local();
  Deps d = ready;
  if (tp() > 1) {
    const auto ag = collective(mb + "embedding/bwd/ag", CollectiveKind::all_gather, bytes(S * h), Phase::backward,
                               micro_batch, ready);
    for (int ti = 0; ti < emit_tp(); ++ti) d[ti] = {ag[static_cast<std::size_t>(ti)]};
  }
  // Scatter-add of the gathered gradient rows into the table rows of this rank's vocab shard.
  const DpGradient dg{mb + "embedding/bwd/embedding_grad", -1, V, h, -1};
  return gradient(dg, dp, d, [&](int ti, std::int64_t row0, std::int64_t rows, int region, const std::vector<TaskId>& deps) {
    const std::string suffix = rows == V ? "" : concat("/r", row0);
    const std::int64_t tokens = S * rows / V;  // the tokens that hit these rows, on average
    return compute(ti, mb + "embedding/bwd/scatter_add" + suffix,
                   model::ElementwiseKernel{"embedding_bwd", bytes(3 * tokens * h / tp()),
                                            static_cast<Flops>(tokens * h / tp())},
                   Phase::backward, micro_batch, deps, region);
  });
}

StepEmitter::Deps StepEmitter::optimizer(const std::vector<std::int64_t>& elements, const Deps& ready) {
  Deps d(static_cast<std::size_t>(tp()));
  std::vector<OptimizerKernels> k;
  for (int ti = 0; ti < emit_tp(); ++ti)
    k.push_back(optimizer_kernels(elements[static_cast<std::size_t>(ti)], grp_.grad_dtype, grp_.dtype, grp_.clip_grad));
  // Each pass waits for the one before it on the rank's compute stream; `at` is where the next starts.
  Deps at = ready;
  const auto pass = [&](const char* name, const std::optional<model::ElementwiseKernel> OptimizerKernels::*kernel) {
    for (int ti = 0; ti < emit_tp(); ++ti)
      at[ti] = {compute(ti, name, *(k[ti].*kernel), Phase::optimizer, -1, at[static_cast<std::size_t>(ti)])};
  };
  // One fp32 value over the TP group (the overflow flag's max, the norm's sum of squares). Over DP
  // (ZeRO shards) and PP the same values meet too: a few microseconds, not emitted (docs/schedules.md).
  const auto agree = [&](const char* name) {
    if (tp() <= 1) return;
    const auto ar = collective(name, CollectiveKind::all_reduce, 4, Phase::optimizer, -1, at);
    for (int ti = 0; ti < emit_tp(); ++ti) at[ti] = {ar[static_cast<std::size_t>(ti)]};
  };
  if (k.front().grad_cast) pass("optimizer/grad_cast", &OptimizerKernels::grad_cast);
  if (k.front().grad_unscale) {
    pass("optimizer/grad_unscale", &OptimizerKernels::grad_unscale);
    agree("optimizer/found_inf_ar");
  }
  if (grp_.clip_grad) {
    // The global norm: every rank sums the squares of its gradients (one read), the sums meet,
    // every rank scales its gradients (read, write).
    pass("optimizer/grad_norm", &OptimizerKernels::grad_norm);
    agree("optimizer/grad_norm_ar");
    pass("optimizer/grad_scale", &OptimizerKernels::grad_scale);
  }
  for (int ti = 0; ti < emit_tp(); ++ti) {
    d[ti] = {compute(ti, "optimizer/adam", k[ti].adam, Phase::optimizer, -1, at[static_cast<std::size_t>(ti)])};
    if (k[ti].master_copy) d[ti] = {compute(ti, "optimizer/master_copy", *k[ti].master_copy, Phase::optimizer, -1, d[ti])};
  }
  return d;
}

}  // namespace fusesim::sched
