// Memory per rank: the terms, their formulas and sources are in docs/memory.md; this file follows it
// term by term.
#include "fusesim/model/memory.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "fusesim/util/error.hpp"

namespace fusesim::model {
namespace {

// Extreme but accepted workloads (1000 layers of 2^48-element activations) exceed int64 bytes; the
// sums saturate rather than wrap, so such a run is refused as "too large" instead of passing as small.
constexpr Bytes kSaturated = std::numeric_limits<Bytes>::max();

Bytes mul(Bytes a, Bytes b) {
  Bytes out = 0;
  return __builtin_mul_overflow(a, b, &out) ? kSaturated : out;
}
Bytes add(Bytes a, Bytes b) {
  Bytes out = 0;
  return __builtin_add_overflow(a, b, &out) ? kSaturated : out;
}
template <typename... Rest>
Bytes mul(Bytes a, Bytes b, Rest... rest) {
  return mul(mul(a, b), rest...);
}
template <typename... Rest>
Bytes add(Bytes a, Bytes b, Rest... rest) {
  return add(add(a, b), rest...);
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// NCCL_BUFFSIZE default, 4 MiB: "Default is 4194304 (4 MB)", NCCL environment variables,
// https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-buffsize
constexpr Bytes kNcclBuffsizeBytes = 4 * 1024 * 1024;
// HCCL_BUFFSIZE default, 200 M per communication domain (Ascend CANN documentation, HCCL_BUFFSIZE,
// https://www.hiascend.com/doc_center/source/zh/canncommercial/63RC2/modeldev/tfmigr1/tfmigr1_000155.html);
// read as MiB.
constexpr Bytes kHcclBuffsizeBytes = 200 * 1024 * 1024;

// Bytes per stored weight, gradient and activation element. FP8 training recipes (Transformer Engine)
// keep weights in 16-bit and cast per GEMM, and keep most saved activations in 16-bit: counted as 2.
Bytes storage_bytes(topo::Dtype d) { return d == topo::Dtype::fp8 ? 2 : topo::bytes_per_element(d); }

// Optimizer state per parameter (ZeRO paper, Rajbhandari et al. 2020, section 3.1: mixed-precision
// Adam keeps an fp32 copy of the parameters, momentum and variance, K = 12 bytes). With fp32
// weights the master copy is the weights themselves. SGD with momentum: master copy and momentum.
Bytes optimizer_bytes_per_param(const Workload& w) {
  const bool mixed = storage_bytes(w.dtype) < 4;
  if (w.optimizer == Optimizer::sgd) return mixed ? 8 : 4;
  return mixed ? 12 : 8;
}

// Key/value heads one rank holds when the heads are split `ways` ways: a share, or one replicated
// head when there are fewer heads than ranks.
std::int64_t kv_heads_local(const Architecture& a, std::int64_t ways) {
  return a.kv_heads >= ways ? ceil_div(a.kv_heads, ways) : 1;
}

// Parameters of one layer on one TP rank.
std::int64_t layer_params_per_tp_rank(const Architecture& a, std::int64_t tp) {
  const std::int64_t q_local = ceil_div(a.heads, tp) * a.head_dim;
  const std::int64_t kv_local = kv_heads_local(a, tp) * a.head_dim;
  const std::int64_t ffn_local = ceil_div(a.ffn_hidden, tp);
  const std::int64_t attention = a.hidden * (q_local + 2 * kv_local) + q_local * a.hidden;
  const std::int64_t mlp = a.hidden * ffn_local * (a.gated_mlp ? 2 : 1) + ffn_local * a.hidden;
  return attention + mlp + 2 * a.hidden;
}

// Token rows of a micro-batch whose norm and GEMM inputs one rank keeps: its sequence-parallel shard
// (tokens / (tp up)), or without sequence parallelism the whole of its Ulysses share (tokens / up).
std::int64_t norm_input_rows(const Workload& w) {
  const std::int64_t ways = std::int64_t{w.parallel.up} * (w.parallel.sequence_parallel ? w.parallel.tp : 1);
  return ceil_div(w.tokens_per_microbatch(), ways);
}

// Unfused attention (training.attention "unfused") keeps its scores for the backward: the softmax
// output and the dropout output (e bytes each) and the 1-byte dropout mask per (query, key) pair of
// this rank's heads, 5 a s^2 b bytes per layer in 16 bits (the 5as/h term of Korthikanti et al.,
// Reducing Activation Recomputation in Large Transformer Models, 2022, eq. 1). FlashAttention keeps
// none of it.
Bytes attention_score_bytes(const Workload& w) {
  if (!w.unfused_attention) return 0;
  const std::int64_t n = std::int64_t{w.parallel.tp} * w.parallel.up;
  const Bytes e = storage_bytes(w.dtype);
  return mul(w.tokens_per_microbatch(), w.sequence_length, ceil_div(w.arch.heads, n), 2 * e + 1);
}

// Activation bytes of one layer on one rank, nothing recomputed (docs/memory.md, "Activations").
Bytes layer_activation_bytes(const Workload& w) {
  const Architecture& a = w.arch;
  const std::int64_t tp = w.parallel.tp, up = w.parallel.up, n = tp * up;
  const std::int64_t tokens = w.tokens_per_microbatch();
  const std::int64_t shard = norm_input_rows(w);
  const std::int64_t gemm_tokens = ceil_div(tokens, up);  // tokens a TP rank's GEMMs see
  const std::int64_t heads = ceil_div(a.heads, n);     // query heads in this rank's attention
  const std::int64_t kv = kv_heads_local(a, n);
  const std::int64_t ffn = ceil_div(a.ffn_hidden, tp);
  const Bytes e = storage_bytes(w.dtype);
  // Inputs of the two norms and of the QKV and FC1 GEMMs, each [s/(tp up), h].
  const Bytes inputs = mul(4, shard, a.hidden, e);
  // Q, K, V and the attention output, over the whole sequence for this rank's heads. Eager PyTorch
  // (training.elementwise "eager") hands SDPA K and V repeated to the query heads, and SDPA keeps
  // its inputs.
  const std::int64_t kv_kept = w.eager_elementwise ? std::max(kv, heads) : kv;
  const Bytes attention = mul(tokens, add(mul(2, heads), mul(2, kv_kept)), a.head_dim, e);
  // FlashAttention's softmax statistics: one fp32 log-sum-exp per query row and head; unfused, the
  // scores instead.
  const Bytes softmax = w.unfused_attention ? attention_score_bytes(w) : mul(tokens, heads, 4);
  // FC1 output (gate and up halves when gated) and the activation's output (FC2 input); eager SwiGLU's
  // multiply keeps silu's output besides.
  const Bytes mlp = mul(gemm_tokens, ffn, a.gated_mlp ? (w.eager_elementwise ? 4 : 3) : 2, e);
  // Hidden dropout: the 1-byte masks of the two dropouts after attention and the MLP, on the rows the
  // residual adds run on (Korthikanti et al.'s 2 sbh of the 34).
  const Bytes masks = w.hidden_dropout > 0.0 ? mul(2, shard, a.hidden) : 0;
  return add(inputs, attention, softmax, mlp, masks);
}

// Recompute::op (torchtitan's per-op checkpointing): what a layer keeps when it saves its matmuls'
// outputs but every second one, and attention's. Of the norm and GEMM inputs the layer input (the
// first norm's) and the out-projection's reduced output (the residual add's, from which the second
// norm's input is recomputed); of Q, K, V and the attention output all but K (the second matmul);
// the log-sum-exp; of the MLP the gate half (or the ungated FC1 output), not the up half nor the
// activation's output.
Bytes op_checkpointed_layer_bytes(const Workload& w) {
  const Architecture& a = w.arch;
  const std::int64_t tp = w.parallel.tp, up = w.parallel.up, n = tp * up;
  const std::int64_t tokens = w.tokens_per_microbatch();
  const std::int64_t shard = norm_input_rows(w);
  const std::int64_t gemm_tokens = ceil_div(tokens, up);
  const std::int64_t heads = ceil_div(a.heads, n);
  const std::int64_t kv = kv_heads_local(a, n);
  const std::int64_t ffn = ceil_div(a.ffn_hidden, tp);
  const Bytes e = storage_bytes(w.dtype);
  const Bytes inputs = mul(2, shard, a.hidden, e);
  const Bytes attention = mul(tokens, add(mul(2, heads), kv), a.head_dim, e);
  const Bytes softmax = mul(tokens, heads, 4);
  const Bytes mlp = mul(gemm_tokens, ffn, e);
  return add(inputs, attention, softmax, mlp);
}

// Bytes of the activations outside the layers: final norm input and output (LM head input) and the
// fp32 logits the vocab-parallel cross entropy keeps for its backward.
Bytes head_activation_bytes(const Workload& w) {
  const Architecture& a = w.arch;
  if (a.vocab == 0) return 0;
  const std::int64_t tp = w.parallel.tp, up = w.parallel.up;
  const std::int64_t tokens = w.tokens_per_microbatch();
  const Bytes norms = mul(2, norm_input_rows(w), a.hidden, storage_bytes(w.dtype));
  const Bytes logits = mul(ceil_div(tokens, up), a.padded_vocab(tp) / tp, 4);
  return add(norms, logits);
}

std::string with_commas(std::int64_t v) {
  std::string digits = std::to_string(v);
  std::string out;
  const int n = static_cast<int>(digits.size());
  for (int i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out += ',';
    out += digits[static_cast<std::size_t>(i)];
  }
  return out;
}

std::int64_t sharded_over_dp(std::int64_t params, const Parallelism& p, DpSharding from) {
  // The gradient sync runs over the up x dp ranks holding the same weight shard (sched/tpsp.cpp),
  // so ZeRO shards the training state over all of them.
  return p.dp_sharding >= from ? ceil_div(params, static_cast<std::int64_t>(p.dp) * p.up) : params;
}

}  // namespace

std::string format_gb(Bytes b) { return fmt::format("{:.1f} GB", static_cast<double>(b) / 1e9); }

std::int64_t params_per_tp_rank(const Architecture& a, int tp) {
  // Embedding and LM head: vocab-parallel, each TP rank holding padded_vocab / tp rows (Megatron's
  // padding to a multiple of vocab_divisible_by x tp); final norm replicated.
  return a.layers * layer_params_per_tp_rank(a, tp) + 2 * (a.padded_vocab(tp) / tp) * a.hidden + a.hidden;
}

namespace {
// `layers` layers' worth of saved activations (layer x micro-batch units), and the LM head's when `head`.
Bytes activation_bytes(const Workload& w, std::int64_t layers, bool head_too) {
  const Bytes layer = layer_activation_bytes(w);
  const Bytes head = head_too ? head_activation_bytes(w) : 0;
  switch (w.recompute) {
    case Recompute::none:
      return add(mul(layers, layer), head);
    case Recompute::selective:
      // Selective recomputation drops the attention-score term 5as/h of Korthikanti et al.; with
      // FlashAttention nothing of that size is ever stored, so it saves nothing there.
      return add(mul(layers, layer - attention_score_bytes(w)), head);
    case Recompute::op:
      return add(mul(layers, op_checkpointed_layer_bytes(w)), head);
    case Recompute::full: {
      // A recomputed layer keeps only its input, [norm_input_rows, h]; the backward rebuilds one layer at a
      // time. With recompute_every k only every k-th layer is recomputed; the others keep everything.
      const Bytes input = mul(norm_input_rows(w), w.arch.hidden, storage_bytes(w.dtype));
      const std::int64_t recomputed = layers / std::max<std::int64_t>(1, w.recompute_every);
      return add(mul(recomputed, input), mul(layers - recomputed, layer), recomputed > 0 ? layer : 0, head);
    }
  }
  return 0;
}
}  // namespace

Bytes activation_bytes_per_rank(const Workload& w) { return activation_bytes(w, w.arch.layers, true); }

std::int64_t stage_params_per_tp_rank(const Architecture& a, const Parallelism& p, int stage) {
  const std::int64_t table = (a.padded_vocab(p.tp) / p.tp) * a.hidden;
  return a.layers / p.pp * layer_params_per_tp_rank(a, p.tp) + (stage == 0 ? table : 0) +
         (stage == p.pp - 1 ? table + a.hidden : 0);
}

std::int64_t stage_layers_in_flight(const Workload& w, int stage) {
  const std::int64_t pp = w.parallel.pp, v = w.parallel.virtual_stages, m = w.grad_accumulation;
  if (pp == 1) return w.arch.layers;
  // The warm-up forwards and the first steady one, each a chunk of layers / (pp v) layers.
  return std::min(m * v, pipeline_warmup_forwards(pp, v, m, stage) + 1) * (w.arch.layers / (pp * v));
}

Bytes weight_pass_bytes(const Workload& w) {
  const Architecture& a = w.arch;
  const std::int64_t tp = w.parallel.tp, up = w.parallel.up;
  const std::int64_t shard = norm_input_rows(w);
  const std::int64_t gemm_tokens = ceil_div(w.tokens_per_microbatch(), up);
  const std::int64_t q = ceil_div(a.heads, tp) * a.head_dim, kv = kv_heads_local(a, tp) * a.head_dim;
  const std::int64_t ffn = ceil_div(a.ffn_hidden, tp);
  const Bytes e = storage_bytes(w.dtype);
  // GEMM inputs: the QKV and FC1 inputs as the shards W re-gathers, the out-projection's and FC2's whole.
  const Bytes inputs = add(mul(2, shard, a.hidden, e), mul(gemm_tokens, add(q, ffn), e));
  const Bytes output_grads = mul(gemm_tokens, add(q, mul(2, kv), mul(ffn, a.gated_mlp ? 2 : 1), mul(2, a.hidden)), e);
  return add(inputs, output_grads);
}

WeightPassPeak zb_h1_peak(std::int64_t stages, std::int64_t micro_batches, std::int64_t stage, Bytes forward_unit,
                          Bytes weight_unit) {
  WeightPassPeak now, peak;
  Bytes peak_bytes = 0;
  for (const PipelineStep& ps : zb_h1_passes(stages, micro_batches, stage)) {
    if (ps.pass == PipelinePass::forward) ++now.forwards;
    if (ps.pass == PipelinePass::backward) {
      --now.forwards;
      ++now.weights;
    }
    if (ps.pass == PipelinePass::weight) --now.weights;
    const Bytes b = add(mul(now.forwards, forward_unit), mul(now.weights, weight_unit));
    if (b > peak_bytes) {
      peak_bytes = b;
      peak = now;
    }
  }
  return peak;
}

Bytes communicator_buffer_bytes(const Workload& w, const topo::DeviceModel& device) {
  if (device.vendor == "huawei") return kHcclBuffsizeBytes;
  const int channels =
      w.schedule.comm_sms.value_or(static_cast<int>(std::lround(device.contention.default_comm_sms.value)));
  return mul(std::max(channels, 1), kNcclBuffsizeBytes);
}

Bytes comm_buffer_bytes_per_rank(const Workload& w, ScheduleKind kind, Bytes communicator_bytes) {
  const Architecture& a = w.arch;
  const Parallelism& p = w.parallel;
  const std::int64_t tokens = w.tokens_per_microbatch();
  const Bytes e = storage_bytes(w.dtype);
  Bytes total = 0;
  if (p.tp > 1) {
    // A TP group works on the tokens of its Ulysses shard, s/up. Their gathered [s/up, h] input of the
    // column-parallel GEMMs exists in every schedule (the collective's output, or the buffer the
    // Fuse-AG ring fills chunk by chunk).
    const std::int64_t group_tokens = ceil_div(tokens, p.up);
    total = add(total, communicator_bytes, mul(group_tokens, a.hidden, e));
    // The row-parallel GEMM's partial sums: the whole [s/up, h] before the reduce-scatter (baseline,
    // and slice-overlap, whose k slices together cover it); CommFuse's Fuse-RS holds one chunk being
    // computed and the running sum received: 2 x [s/(tp up), h].
    total = add(total, kind == ScheduleKind::commfuse ? mul(2, ceil_div(group_tokens, p.tp), a.hidden, e)
                                                      : mul(group_tokens, a.hidden, e));
  }
  if (p.up > 1) {
    // The all-to-all of Q, K, V cannot write over its own input: a receive buffer of the same size,
    // [s/up, (q + 2 kv)/tp] (collective or Fuse-A2A ring alike).
    const std::int64_t width = (ceil_div(a.heads, p.tp) + 2 * kv_heads_local(a, p.tp)) * a.head_dim;
    total = add(total, communicator_bytes, mul(ceil_div(tokens, p.up), width, e));
  }
  if (p.pp > 1) {
    // The pipeline's communicator and the activation received and the gradient sent, [s/(tp up), h]
    // each (Megatron's p2p buffers under sequence parallelism).
    total = add(total, communicator_bytes, mul(2, ceil_div(tokens, std::int64_t{p.tp} * p.up), a.hidden, e));
  }
  const std::int64_t sync_ranks = static_cast<std::int64_t>(p.dp) * p.up;  // the gradient sync's group
  if (sync_ranks > 1) {
    total = add(total, communicator_bytes);
    const std::int64_t layer_params = layer_params_per_tp_rank(a, p.tp);
    if (kind == ScheduleKind::slice) {
      // Bucketed overlap: one bucket being reduced while the next one fills.
      total = add(total, mul(2, dp_bucket_bytes(w)));
    } else if (kind == ScheduleKind::commfuse) {
      // Ring P2P of one layer's gradient in dp chunks: the chunk sent and the chunk received.
      total = add(total, mul(2, ceil_div(layer_params, sync_ranks), topo::bytes_per_element(w.gradient_dtype())));
    }
    // The baseline reduces the gradient buffer in place once the backward is over: nothing more.
    if (p.dp_sharding == DpSharding::zero3) {
      // ZeRO-3 gathers each layer's parameters before use; the next layer's are prefetched (torchtitan's
      // last layer, kept from its forward, is the one prefetched at the backward's start). Without
      // resharding after forward every layer stays gathered until its backward. The root module
      // (embedding, final norm, LM head rows of the TP rank) stays gathered through the micro-batch
      // (sched/tpsp.cpp).
      const std::int64_t gathered_layers =
          p.reshard_after_forward == ReshardAfterForward::never ? std::max<std::int64_t>(2, w.arch.layers) : 2;
      total = add(total, mul(gathered_layers, layer_params, e));
      if (a.vocab > 0) total = add(total, mul(add(mul(2, a.padded_vocab(p.tp) / p.tp, a.hidden), a.hidden), e));
    }
  }
  return total;
}

MemoryReport memory_per_rank(const Workload& w, const topo::DeviceModel& device,
                             const std::vector<ScheduleKind>& kinds) {
  // Every stage's own report; the one that needs most is the run's.
  MemoryReport worst = stage_memory(w, device, kinds, 0);
  for (int s = 1; s < w.parallel.pp; ++s) {
    MemoryReport r = stage_memory(w, device, kinds, s);
    if (r.total_bytes > worst.total_bytes) worst = std::move(r);
  }
  return worst;
}

MemoryReport stage_memory(const Workload& w, const topo::DeviceModel& device, const std::vector<ScheduleKind>& kinds,
                          int stage) {
  MemoryReport r;
  const Parallelism& p = w.parallel;
  const Bytes e = storage_bytes(w.dtype);
  r.stage = stage;
  r.stages = p.pp;
  r.params_per_rank = p.pp > 1 ? stage_params_per_tp_rank(w.arch, p, stage) : params_per_tp_rank(w.arch, p.tp);
  const std::int64_t held_params = sharded_over_dp(r.params_per_rank, p, DpSharding::zero3);
  const std::int64_t held_grads = sharded_over_dp(r.params_per_rank, p, DpSharding::zero2);
  const std::int64_t held_states = sharded_over_dp(r.params_per_rank, p, DpSharding::zero1);
  const Bytes k = optimizer_bytes_per_param(w);
  r.parameters_bytes = mul(held_params, e);
  // Gradients are held in the type DP reduces them in (Megatron's fp32 main_grad buffer for bf16).
  const Bytes ge = topo::bytes_per_element(w.gradient_dtype());
  r.gradients_bytes = mul(held_grads, ge);
  r.optimizer_bytes = mul(held_states, k);
  std::int64_t held_layers = stage_layers_in_flight(w, stage);
  r.activations_bytes = activation_bytes(w, held_layers, stage == p.pp - 1);
  std::string weight_note;
  if (p.pp > 1 && p.pp_schedule == PipelineSchedule::zb_h1) {
    // The Ws held back keep their inputs past 1F1B's peak: the largest state between passes counts.
    const std::int64_t chunk = w.arch.layers / p.pp;
    const Bytes per_weight = mul(chunk, weight_pass_bytes(w));
    const WeightPassPeak peak = zb_h1_peak(p.pp, w.grad_accumulation, stage,
                                           activation_bytes(w, chunk, false), per_weight);
    held_layers = peak.forwards * chunk;
    r.activations_bytes = add(activation_bytes(w, held_layers, stage == p.pp - 1), mul(peak.weights, per_weight));
    if (peak.weights > 0)
      weight_note = fmt::format(" + {} layers' W inputs ({} micro-batches x {} layers, B done, W pending, {} each)",
                                peak.weights * chunk, peak.weights, chunk, format_gb(weight_pass_bytes(w)));
  }
  const Bytes communicator = communicator_buffer_bytes(w, device);
  for (ScheduleKind kind : kinds) {
    const Bytes b = comm_buffer_bytes_per_rank(w, kind, communicator);
    if (r.comm_buffers_schedule.empty() || b > r.comm_buffers_bytes) {
      r.comm_buffers_bytes = b;
      r.comm_buffers_schedule = to_string(kind);
    }
  }
  r.total_bytes = add(r.parameters_bytes, r.gradients_bytes, r.optimizer_bytes, r.activations_bytes,
                      r.comm_buffers_bytes);
  r.capacity_bytes = static_cast<Bytes>(std::llround(std::min(device.hbm_bytes.value, 9.0e18)));
  r.device_model = device.name;

  const std::string dtype = topo::to_string(w.dtype);
  const std::string dp_note = p.up > 1 ? fmt::format("{} over up x dp = {}", to_string(p.dp_sharding), p.up * p.dp)
                                       : fmt::format("{} over dp {}", to_string(p.dp_sharding), p.dp);
  const std::string stage_note = p.pp > 1 ? fmt::format(", stage {} of pp {}", stage, p.pp) : "";
  r.breakdown.push_back({"parameters", r.parameters_bytes,
                         fmt::format("{} params (tp {}{}){} x {} B", with_commas(r.params_per_rank), p.tp, stage_note,
                                     held_params != r.params_per_rank ? ", " + dp_note : "", e)});
  r.breakdown.push_back({"gradients", r.gradients_bytes,
                         fmt::format("{} params{} x {} B ({})", with_commas(held_grads),
                                     held_grads != r.params_per_rank ? " (" + dp_note + ")" : "", ge,
                                     topo::to_string(w.gradient_dtype()))});
  r.breakdown.push_back(
      {"optimizer state", r.optimizer_bytes,
       fmt::format("{} params{} x {} B ({}{})", with_commas(held_states),
                   held_states != r.params_per_rank ? " (" + dp_note + ")" : "", k, to_string(w.optimizer),
                   e < 4 ? ", fp32 master weights" : "")});
  r.breakdown.push_back(
      {"activations", r.activations_bytes,
       fmt::format("{} layers{}{}, {} tokens per micro-batch, sequence sharded over tp x up = {}, recompute {}, "
                   "{} ({} B)",
                   held_layers,
                   p.pp > 1 ? fmt::format(" x micro-batches in flight ({} {})", to_string(p.pp_schedule), stage_note.substr(2))
                            : "",
                   weight_note, w.tokens_per_microbatch(), p.tp * p.up, to_string(w.recompute), dtype,
                   storage_bytes(w.dtype))});
  r.breakdown.push_back({"communication buffers", r.comm_buffers_bytes,
                         fmt::format("schedule {} (the largest of those run), {} MiB per communicator",
                                     r.comm_buffers_schedule.empty() ? "-" : r.comm_buffers_schedule,
                                     communicator / (1024 * 1024))});
  return r;
}

MemoryReport memory_per_rank(const Workload& w, const topo::Cluster& c, const std::vector<ScheduleKind>& kinds) {
  const std::int64_t world = std::min<std::int64_t>(w.parallel.world(), c.num_ranks());
  const topo::DeviceModel* smallest = nullptr;
  for (int r = 0; r < world; ++r) {
    const topo::DeviceModel& d = c.device(r);
    if (!smallest || d.hbm_bytes.value < smallest->hbm_bytes.value) smallest = &d;
  }
  if (!smallest) throw InputError(c.name, "$", "the cluster has no ranks");
  return memory_per_rank(w, *smallest, kinds);
}

void check_memory(const MemoryReport& r, const Workload& w, const std::string& workload_file) {
  if (r.fits()) return;
  const auto gb = [](Bytes b) { return fmt::format("{:.1f}", static_cast<double>(b) / 1e9); };
  std::string advice = w.parallel.pp > 1 ? "raise tp, dp or pp" : "raise tp or dp";
  if (w.parallel.dp > 1 && w.parallel.dp_sharding != DpSharding::zero3) advice += ", use a higher dp_sharding";
  if (w.parallel.dp == 1) advice += " (with dp_sharding zero1..zero3 to shard the training state over dp)";
  if (w.recompute != Recompute::full) advice += ", set training.recompute to full";
  throw InputError(
      workload_file, "$.parallel",
      fmt::format("needs {} per rank (parameters {}, gradients {}, optimizer state {}, activations {}, "
                  "communication buffers {} GB) but device '{}' has {}; {}, or pass --force-memory",
                  format_gb(r.total_bytes), gb(r.parameters_bytes), gb(r.gradients_bytes), gb(r.optimizer_bytes),
                  gb(r.activations_bytes), gb(r.comm_buffers_bytes), r.device_model, format_gb(r.capacity_bytes),
                  advice));
}

nlohmann::json to_json(const MemoryReport& r) {
  nlohmann::json breakdown = nlohmann::json::array();
  for (const MemoryItem& item : r.breakdown)
    breakdown.push_back({{"what", item.what}, {"bytes", item.bytes}, {"formula", item.formula}});
  return {{"params_per_rank", r.params_per_rank},
          {"parameters_bytes", r.parameters_bytes},
          {"gradients_bytes", r.gradients_bytes},
          {"optimizer_bytes", r.optimizer_bytes},
          {"activations_bytes", r.activations_bytes},
          {"comm_buffers_bytes", r.comm_buffers_bytes},
          {"comm_buffers_schedule", r.comm_buffers_schedule},
          {"total_bytes", r.total_bytes},
          {"capacity_bytes", r.capacity_bytes},
          {"device_model", r.device_model},
          {"fits", r.fits()},
          {"breakdown", std::move(breakdown)}};
}

std::string format_memory_line(const MemoryReport& r) {
  const auto gb = [](Bytes b) { return fmt::format("{:.1f}", static_cast<double>(b) / 1e9); };
  return fmt::format(
      "memory per rank{}: {} of {} ({}){}: parameters {}, gradients {}, optimizer {}, activations {}, "
      "comm buffers {} GB\n",
      r.stages > 1 ? fmt::format(" (pipeline stage {} of {}, the fullest)", r.stage, r.stages) : "",
      format_gb(r.total_bytes), format_gb(r.capacity_bytes), r.device_model, r.fits() ? "" : ", DOES NOT FIT",
      gb(r.parameters_bytes), gb(r.gradients_bytes), gb(r.optimizer_bytes), gb(r.activations_bytes),
      gb(r.comm_buffers_bytes));
}

}  // namespace fusesim::model
