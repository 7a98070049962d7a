// Workload files: reading, range checks, consistency checks, fit to a cluster, parameter counts.
// The schema and every check (with the JSON path it reports) are documented in docs/workload.md.
#include "fusesim/model/workload.hpp"

#include <algorithm>
#include <set>
#include <string>

#include <fmt/format.h>

#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"

namespace fusesim::model {
namespace {

// Ranges. They refuse values no real model or run has, and keep every product the simulator forms
// (weights, activations, FLOPs) far from int64 overflow: hidden x q_width x 4 x layers stays below
// 1e6 x 16384 x 4096 x 4 x 1000 < 2.7e17.
constexpr std::int64_t kMaxLayers = 1000;
constexpr std::int64_t kMaxHidden = 1'000'000;
constexpr std::int64_t kMaxHeads = 16384;
constexpr std::int64_t kMaxHeadDim = 4096;
constexpr std::int64_t kMaxFfn = 10'000'000;
constexpr std::int64_t kMaxVocab = 10'000'000;
// Megatron-LM's --make-vocab-size-divisible-by default is 128 (megatron/training/arguments.py); the
// bound keeps vocab_divisible_by x tp x kMaxDegree far from int64 overflow.
constexpr std::int64_t kDefaultVocabDivisibleBy = 128;
constexpr std::int64_t kMaxVocabDivisibleBy = 1'000'000;
constexpr std::int64_t kMaxSequence = 16 * 1024 * 1024;
constexpr std::int64_t kMaxMicroBatch = 65536;
constexpr std::int64_t kMaxGradAccumulation = 1'000'000;
constexpr std::int64_t kMaxDegree = 65536;
constexpr std::int64_t kMaxWorld = 1 << 20;
constexpr std::int64_t kMaxSlices = 1024;
constexpr std::int64_t kMaxCommSms = 1024;
// The widest activation of one micro-batch (tokens x widest row) must stay below 2^48 elements, so
// that its size in bytes is exact as a double and far from int64 overflow.
constexpr std::int64_t kMaxActivationElements = std::int64_t{1} << 48;

constexpr int kSchemaVersion = 1;

const std::vector<std::string> kEngines = {"sm_kernel", "copy_engine"};
const std::vector<std::string> kPipelineSchedules = {"1f1b", "interleaved", "zb-h1"};
const std::vector<std::string> kOptimizers = {"adam", "sgd"};
const std::vector<std::string> kNormKernels = {"fused", "apex_legacy", "eager"};
const std::vector<std::string> kGradReduceDtypes = {"fp32", "bf16", "fp16"};
// A gradient bucket larger than 1 TiB is no bucket; the bound also keeps bucket counts and buffer
// sums far from int64 overflow.
constexpr std::int64_t kMaxBucketBytes = std::int64_t{1} << 40;
// PyTorch DDP's bucket_cap_mb default, 25 MB (torch.nn.parallel.DistributedDataParallel,
// https://pytorch.org/docs/1.7.0/generated/torch.nn.parallel.DistributedDataParallel.html).
constexpr std::int64_t kDefaultBucketBytes = 25'000'000;

// "tp x up x dp = 2 x 1 x 4 = 8", with "x pp" when there are pipeline stages.
std::string degrees(const Parallelism& p) {
  if (p.pp == 1)
    return fmt::format("tp x up x dp = {} x {} x {} = {}", p.tp, p.up, p.dp, std::int64_t{p.tp} * p.up * p.dp);
  return fmt::format("tp x up x dp x pp = {} x {} x {} x {} = {}", p.tp, p.up, p.dp, p.pp,
                     std::int64_t{p.tp} * p.up * p.dp * p.pp);
}


}  // namespace

topo::Dtype default_grad_reduce_dtype(topo::Dtype compute) {
  return compute == topo::Dtype::fp16 ? topo::Dtype::fp16 : topo::Dtype::fp32;
}

namespace {

NormKernel parse_norm_kernel(const std::string& s) {
  if (s == "apex_legacy") return NormKernel::apex_legacy;
  if (s == "eager") return NormKernel::eager;
  return NormKernel::fused;
}

CommEngine parse_engine(const std::string& s) {
  return s == "sm_kernel" ? CommEngine::sm_kernel : CommEngine::copy_engine;
}


[[noreturn]] void fail_at(const std::string& file, const std::string& path, const std::string& message) {
  throw InputError(file, path, message);
}

Architecture parse_model(const JsonObject& m) {
  Architecture a;
  a.name = m.string("name");
  a.layers = m.integer("layers", 1, kMaxLayers);
  a.hidden = m.integer("hidden", 1, kMaxHidden);
  a.heads = m.integer("heads", 1, kMaxHeads);
  a.kv_heads = m.integer("kv_heads", 1, kMaxHeads);
  const auto head_dim = m.find("head_dim");
  if (head_dim) {
    a.head_dim = head_dim->as_integer(1, kMaxHeadDim);
  } else {
    // Without an explicit head size the heads split the model width evenly.
    if (a.hidden % a.heads != 0)
      fail_at(m.file(), m.path() + ".heads",
              fmt::format("hidden {} is not divisible by heads {}; give model.head_dim explicitly if the "
                          "heads do not split the width evenly",
                          a.hidden, a.heads));
    a.head_dim = a.hidden / a.heads;
    if (a.head_dim > kMaxHeadDim)
      fail_at(m.file(), m.path() + ".heads",
              fmt::format("hidden / heads = {} exceeds the largest head size {}", a.head_dim, kMaxHeadDim));
  }
  a.ffn_hidden = m.integer("ffn_hidden", 1, kMaxFfn);
  a.gated_mlp = m.boolean("gated_mlp");
  a.vocab = m.integer("vocab", 0, kMaxVocab);
  a.vocab_divisible_by = m.integer_or("vocab_divisible_by", 1, kMaxVocabDivisibleBy, kDefaultVocabDivisibleBy);
  a.causal = m.boolean_or("causal", true);
  a.rotary = m.boolean_or("rotary_embedding", false);
  a.bias = m.boolean_or("bias", false);
  a.source = m.string("source");
  m.finish();
  if (a.heads % a.kv_heads != 0)
    fail_at(m.file(), m.path() + ".kv_heads",
            fmt::format("kv_heads {} does not divide heads {} (each key/value head serves a whole group of "
                        "query heads)",
                        a.kv_heads, a.heads));
  return a;
}

}  // namespace

std::string to_string(Optimizer o) { return o == Optimizer::sgd ? "sgd" : "adam"; }

const char* norm_op(NormKernel kernel, bool backward) {
  switch (kernel) {
    case NormKernel::apex_legacy: return backward ? "layernorm_apex_legacy_bwd" : "layernorm_apex_legacy";
    case NormKernel::eager: return backward ? "layernorm_eager_bwd" : "layernorm_eager";
    case NormKernel::fused: break;
  }
  return backward ? "layernorm_train_bwd" : "layernorm_train";
}

std::int64_t Architecture::params_per_layer() const {
  // Attention: Q, K, V projections (K and V only kv_width wide under grouped-query attention) and the
  // output projection back to the model width. No biases (Llama-style).
  const std::int64_t attention = hidden * (q_width() + 2 * kv_width()) + q_width() * hidden;
  // MLP: FC1 (gate and up halves when gated) and FC2.
  const std::int64_t mlp = hidden * ffn_hidden * (gated_mlp ? 2 : 1) + ffn_hidden * hidden;
  // Two norms (before attention, before the MLP), one scale vector each (RMSNorm).
  const std::int64_t norms = 2 * hidden;
  return attention + mlp + norms;
}

std::int64_t Architecture::params_total() const {
  // Token embedding and an untied LM head, both vocab x hidden, and the final norm.
  return layers * params_per_layer() + 2 * vocab * hidden + hidden;
}

std::int64_t Architecture::padded_vocab(std::int64_t tp) const {
  const std::int64_t multiple = vocab_divisible_by * tp;
  return (vocab + multiple - 1) / multiple * multiple;
}

void validate_workload(const Workload& w, const std::string& file) {
  const Architecture& a = w.arch;
  const Parallelism& p = w.parallel;
  const std::int64_t tp = p.tp, up = p.up, dp = p.dp, pp = p.pp;
  const std::int64_t world = tp * up * dp * pp;
  if (world > kMaxWorld)
    fail_at(file, "$.parallel",
            fmt::format("{} ranks exceeds the limit of {}", degrees(p), kMaxWorld));
  // Pipeline stages hold equal shares of the layers; interleaved 1F1B cuts each stage's share into
  // virtual_stages chunks and, as Megatron-LM requires (megatron/core/pipeline_parallel/schedules.py,
  // forward_backward_pipelining_with_interleaving), runs micro-batches in groups of pp.
  const std::int64_t chunks = pp * p.virtual_stages;
  if (a.layers % chunks != 0)
    fail_at(file, "$.parallel.pp",
            p.virtual_stages > 1
                ? fmt::format("model.layers {} is not divisible by pp x virtual_stages = {} x {} = {}", a.layers, pp,
                              p.virtual_stages, chunks)
                : fmt::format("model.layers {} is not divisible by pp {}", a.layers, pp));
  if (p.pp_schedule == PipelineSchedule::interleaved) {
    if (pp < 2) fail_at(file, "$.parallel.pp_schedule", "the interleaved schedule needs pp >= 2");
    if (p.virtual_stages < 2)
      fail_at(file, "$.parallel.virtual_stages",
              fmt::format("the interleaved schedule needs virtual_stages >= 2, not {}", p.virtual_stages));
    if (w.grad_accumulation % pp != 0)
      fail_at(file, "$.training.grad_accumulation",
              fmt::format("the interleaved schedule runs micro-batches in groups of pp: grad_accumulation {} is "
                          "not a multiple of pp {}",
                          w.grad_accumulation, pp));
  } else if (p.pp_schedule == PipelineSchedule::zb_h1) {
    if (pp < 2) fail_at(file, "$.parallel.pp_schedule", "the zb-h1 schedule needs pp >= 2");
    if (p.virtual_stages != 1)
      fail_at(file, "$.parallel.virtual_stages",
              fmt::format("the zb-h1 schedule runs one chunk of layers per stage: virtual_stages must be 1, not {}",
                          p.virtual_stages));
    // Ulysses' Fuse-A2A backward computes the QKV dgrad and wgrad block by block in one region
    // (sched/tpsp.cpp up_qkv_backward): its weight gradient cannot be deferred without re-ordering it.
    if (up > 1) fail_at(file, "$.parallel.pp_schedule", fmt::format("the zb-h1 schedule needs up 1, not {}", up));
  } else if (p.virtual_stages != 1) {
    fail_at(file, "$.parallel.virtual_stages",
            fmt::format("virtual_stages {} needs pp_schedule \"interleaved\"", p.virtual_stages));
  }
  // Not modelled with stages yet: the per-layer parameter gathers prefetch across the stage's layers
  // in model order, which a pipeline breaks up.
  if (pp > 1 && p.dp_sharding == DpSharding::zero3)
    fail_at(file, "$.parallel.dp_sharding", "dp_sharding zero3 with pp > 1 is not supported (use zero1 or zero2)");
  // Query heads are split over the tensor-parallel ranks, then over the Ulysses ranks.
  if (a.heads % tp != 0)
    fail_at(file, "$.parallel.tp",
            fmt::format("model.heads {} is not divisible by tp {}", a.heads, tp));
  if (a.heads % (tp * up) != 0)
    fail_at(file, "$.parallel.up",
            fmt::format("model.heads {} is not divisible by tp x up = {} x {} = {}", a.heads, tp, up, tp * up));
  // Key/value heads are split like the query heads, or replicated when there are fewer of them than
  // ranks (each rank then holds the one its query heads use).
  auto kv_ok = [&](std::int64_t ways) { return a.kv_heads % ways == 0 || ways % a.kv_heads == 0; };
  if (!kv_ok(tp))
    fail_at(file, "$.parallel.tp",
            fmt::format("model.kv_heads {} and tp {}: neither divides the other, so key/value heads can be "
                        "neither split nor replicated evenly",
                        a.kv_heads, tp));
  if (!kv_ok(tp * up))
    fail_at(file, "$.parallel.up",
            fmt::format("model.kv_heads {} and tp x up = {}: neither divides the other, so key/value heads "
                        "can be neither split nor replicated evenly",
                        a.kv_heads, tp * up));
  // Sequence parallelism: every rank of a TP x UP group holds an equal shard of the sequence.
  if (w.sequence_length % (tp * up) != 0)
    fail_at(file, "$.training.sequence_length",
            fmt::format("sequence_length {} is not divisible by tp x up = {} x {} = {}", w.sequence_length,
                        tp, up, tp * up));
  // Slice-overlap cuts each rank's shard into `slices` equal slices, each gathered (or scattered) by its
  // own collective.
  if (w.schedule.kind == ScheduleKind::slice) {
    const std::int64_t parts = tp * up * w.schedule.slices;
    if (w.sequence_length % parts != 0)
      fail_at(file, "$.schedule.slices",
              fmt::format("slice-overlap needs sequence_length divisible by tp x up x slices = {} x {} x {} = "
                          "{}; {} is not",
                          tp, up, w.schedule.slices, parts, w.sequence_length));
  }
  // The widest row of one micro-batch: hidden, fused QKV, FC1 output (x2 gated) or the (padded) logits.
  const std::int64_t widest = std::max({a.hidden, a.q_width() + 2 * a.kv_width(),
                                        a.ffn_hidden * (a.gated_mlp ? 2 : 1), a.padded_vocab(tp)});
  const std::int64_t tokens = w.tokens_per_microbatch();
  if (tokens > kMaxActivationElements / widest)
    fail_at(file, w.micro_batch > 1 ? "$.training.micro_batch" : "$.training.sequence_length",
            fmt::format("sequence_length x micro_batch = {} tokens with rows {} wide make an activation of more "
                        "than 2^48 elements",
                        tokens, widest));
}

Bytes dp_bucket_bytes(const Workload& w) {
  if (w.schedule.dp_bucket_bytes_given) return w.schedule.dp_bucket_bytes;
  if (w.parallel.dp_sharding == DpSharding::zero1 || w.parallel.dp_sharding == DpSharding::zero2) {
    const std::int64_t elements = std::max<std::int64_t>(40'000'000, std::int64_t{1'000'000} * w.parallel.dp);
    return elements * topo::bytes_per_element(w.gradient_dtype());
  }
  return w.schedule.dp_bucket_bytes;
}

Workload parse_workload(const JsonDocument& doc) {
  const JsonObject root = doc.root();
  const std::string& file = doc.file();
  const JsonValue version = root.at("schema_version");
  if (version.as_integer(0, 1'000'000) != kSchemaVersion)
    version.fail(fmt::format("unsupported schema_version {} (this fusesim reads version {})",
                             version.as_integer(0, 1'000'000), kSchemaVersion));

  Workload w;
  w.name = root.string("name");
  w.arch = parse_model(root.object("model"));

  const JsonObject t = root.object("training");
  w.sequence_length = t.integer("sequence_length", 1, kMaxSequence);
  w.micro_batch = t.integer("micro_batch", 1, kMaxMicroBatch);
  w.grad_accumulation = t.integer_or("grad_accumulation", 1, kMaxGradAccumulation, 1);
  w.dtype = topo::parse_dtype(t.at("dtype"));
  w.recompute = value_named(t.choice_or("recompute", names_of(all_recomputes()), "none"), all_recomputes());
  if (t.has("recompute_every")) {
    const JsonValue v = t.at("recompute_every");
    w.recompute_every = v.as_integer(1, 1000);
    if (w.recompute != Recompute::full)
      v.fail("recompute_every needs training.recompute \"full\" (it picks which layers are recomputed fully)");
  }
  w.optimizer = t.choice_or("optimizer", kOptimizers, "adam") == "sgd" ? Optimizer::sgd : Optimizer::adam;
  w.norm_kernel = parse_norm_kernel(t.choice_or("norm_kernel", kNormKernels, "fused"));
  w.cross_entropy =
      value_named(t.choice_or("cross_entropy", names_of(all_cross_entropies()), "torch"), all_cross_entropies());
  w.unfused_attention = t.choice_or("attention", {"flash", "unfused"}, "flash") == "unfused";
  if (t.has("attention_time_factor")) {
    // A kernel ten times slower than FlashAttention-2, or ten times faster, is not one a run used.
    w.attention_time_factor = t.sourced("attention_time_factor", 0.1, 10.0);
    if (w.unfused_attention)
      t.at("attention_time_factor")
          .fail("attention_time_factor prices a fused attention kernel against FlashAttention-2: it needs "
                "training.attention \"flash\"");
  }
  w.eager_elementwise = t.choice_or("elementwise", {"fused", "eager"}, "fused") == "eager";
  w.separate_projections =
      t.choice_or("projections", {"fused", "separate"}, w.eager_elementwise ? "separate" : "fused") == "separate";
  if (t.has("qkv_grad_cat")) {
    const JsonValue v = t.at("qkv_grad_cat");
    w.qkv_grad_cat = v.as_bool();
    if (w.qkv_grad_cat && w.separate_projections)
      v.fail("qkv_grad_cat concatenates the gradients of a fused QKV projection: it needs training.projections "
             "\"fused\"");
  }
  w.hidden_dropout = t.number_or("hidden_dropout", 0.0, 0.99, 0.0);
  if (t.has("bias_grad")) {
    w.bias_grad_fused = t.choice("bias_grad", {"kernel", "fused"}) == "fused";
    if (!w.arch.bias) t.at("bias_grad").fail("bias_grad needs model.bias true (a model without biases has no bias gradient)");
  }
  // torchtitan's per-op policy saves the output of the fused attention kernel (SDPA); an unfused
  // attention's score GEMMs and softmax are not ops it names.
  if (w.recompute == Recompute::op && w.unfused_attention)
    t.at("recompute").fail(
        "recompute \"op\" is torchtitan's per-op checkpointing, which saves a fused attention's output: "
        "it needs training.attention \"flash\"");
  if (t.has("grad_reduce_dtype")) {
    const std::string g = t.choice("grad_reduce_dtype", kGradReduceDtypes);
    w.grad_reduce_dtype = g == "fp32" ? topo::Dtype::fp32 : g == "bf16" ? topo::Dtype::bf16 : topo::Dtype::fp16;
  }
  w.clip_grad = t.boolean_or("clip_grad", true);
  const std::optional<JsonValue> fp8_gather =
      t.has("fp8_param_gather") ? std::optional<JsonValue>(t.at("fp8_param_gather")) : std::nullopt;
  if (fp8_gather) {
    w.fp8_param_gather = fp8_gather->as_bool();
    if (w.fp8_param_gather && w.dtype != topo::Dtype::fp8)
      fp8_gather->fail("fp8_param_gather needs training.dtype \"fp8\" (the gathered weights feed fp8 GEMMs)");
  }
  if (t.has("fp8_scaling")) {
    w.fp8_dynamic_scaling = t.choice("fp8_scaling", {"delayed", "dynamic"}) == "dynamic";
    if (w.dtype != topo::Dtype::fp8) t.at("fp8_scaling").fail("fp8_scaling needs training.dtype \"fp8\"");
  }
  t.finish();

  const JsonObject p = root.object("parallel");
  w.parallel.tp = static_cast<int>(p.integer("tp", 1, kMaxDegree));
  w.parallel.up = static_cast<int>(p.integer("up", 1, kMaxDegree));
  w.parallel.dp = static_cast<int>(p.integer("dp", 1, kMaxDegree));
  w.parallel.dp_sharding =
      value_named(p.choice_or("dp_sharding", names_of(all_dp_shardings()), "ddp"), all_dp_shardings());
  w.parallel.pp = static_cast<int>(p.integer_or("pp", 1, kMaxDegree, 1));
  w.parallel.pp_schedule = *pipeline_schedule_named(p.choice_or("pp_schedule", kPipelineSchedules, "1f1b"));
  w.parallel.virtual_stages = static_cast<int>(p.integer_or("virtual_stages", 1, kMaxLayers, 1));
  if (p.has("overlap_param_gather")) {
    const JsonValue v = p.at("overlap_param_gather");
    w.parallel.overlap_param_gather = v.as_bool();
    // Only ZeRO-1/2 gather the updated parameters after the optimizer: DDP holds them all, ZeRO-3
    // gathers each layer before its use anyway.
    if (w.parallel.overlap_param_gather && w.parallel.dp_sharding != DpSharding::zero1 &&
        w.parallel.dp_sharding != DpSharding::zero2)
      v.fail(fmt::format("overlap_param_gather needs dp_sharding zero1 or zero2 (the distributed optimizer), not {}",
                         to_string(w.parallel.dp_sharding)));
  }
  if (auto f = p.find("fsdp")) {
    w.parallel.fsdp = p.choice("fsdp", {"fsdp1", "fsdp2"}) == "fsdp1" ? FsdpImpl::fsdp1 : FsdpImpl::fsdp2;
    if (w.parallel.dp_sharding != DpSharding::zero3)
      f->fail(fmt::format("fsdp says which FSDP shards the parameters: it needs dp_sharding zero3, not {}",
                          to_string(w.parallel.dp_sharding)));
  }
  // FSDP1's FULL_SHARD frees every layer after its forward (Composer: the MPT runs); torchtitan's
  // fully_shard keeps the last one.
  if (w.parallel.fsdp == FsdpImpl::fsdp1) w.parallel.reshard_after_forward = ReshardAfterForward::always;
  if (auto f = p.find("reshard_after_forward")) {
    w.parallel.reshard_after_forward =
        value_named(p.choice("reshard_after_forward", names_of(all_reshard_after_forward())), all_reshard_after_forward());
    if (w.parallel.dp_sharding != DpSharding::zero3)
      f->fail(fmt::format("reshard_after_forward says which layers FSDP gathers again for their backward: it "
                          "needs dp_sharding zero3, not {}",
                          to_string(w.parallel.dp_sharding)));
  }
  if (auto sp = p.find("sequence_parallel")) {
    w.parallel.sequence_parallel = sp->as_bool();
    if (!w.parallel.sequence_parallel && w.parallel.up > 1)
      sp->fail(fmt::format("sequence_parallel false needs up 1, not {} (Ulysses splits the sequence the norms run on)",
                           w.parallel.up));
  }
  if (auto async = p.find("async_tp_allreduce")) {
    w.parallel.async_tp_allreduce = async->as_bool();
    if (w.parallel.sequence_parallel)
      async->fail("async_tp_allreduce describes TP's all-reduces without sequence parallelism: it needs "
                  "parallel.sequence_parallel false");
  }
  p.finish();
  if (w.fp8_param_gather && w.parallel.dp_sharding != DpSharding::zero3)
    fp8_gather->fail(fmt::format(
        "fp8_param_gather needs parallel.dp_sharding zero3 (it is how FSDP gathers layers), not {}",
        to_string(w.parallel.dp_sharding)));

  const JsonObject s = root.object("schedule");
  w.schedule.kind = parse_schedule_kind(s.choice("kind", schedule_names()));
  w.schedule.slices = static_cast<int>(s.integer_or("slices", 1, kMaxSlices, 4));
  if (auto mode = s.find("engine")) {
    const std::string m = s.choice("engine", kEngineModes);
    if (s.has("collective_engine") || s.has("p2p_engine"))
      mode->fail("engine sets both collective_engine and p2p_engine; give engine or those two, not both");
    set_engine_mode(w.schedule, m);
  } else {
    // Like for like unless the file says otherwise: the CommFuse paper's P2P is NCCL's, an SM
    // kernel, as are the collectives it is compared with.
    w.schedule.collective_engine = parse_engine(s.choice_or("collective_engine", kEngines, "sm_kernel"));
    w.schedule.p2p_engine = parse_engine(s.choice_or("p2p_engine", kEngines, "sm_kernel"));
  }
  if (auto sms = s.find("comm_sms")) w.schedule.comm_sms = static_cast<int>(sms->as_integer(1, kMaxCommSms));
  w.schedule.query_split_attention = s.boolean_or("query_split_attention", false);
  w.schedule.dp_bucket_bytes = s.integer_or("dp_bucket_bytes", 1, kMaxBucketBytes, kDefaultBucketBytes);
  w.schedule.dp_bucket_bytes_given = s.has("dp_bucket_bytes");
  w.schedule.dp_serial_baseline = s.choice_or("dp_baseline", {"bucketed", "serial"}, "bucketed") == "serial";
  w.schedule.tp_baseline_te_userbuffers =
      s.choice_or("tp_baseline", {"collective", "te_userbuffers"}, "collective") == "te_userbuffers";
  if (w.schedule.tp_baseline_te_userbuffers && !w.parallel.sequence_parallel)
    fail_at(file, "$.schedule.tp_baseline",
            "te_userbuffers overlaps sequence-parallel GEMMs (TransformerEngine needs --sequence-parallel for "
            "--tp-comm-overlap): not with parallel.sequence_parallel false");
  // 128: the M of the GEMM tiles the shipped device models use first (gemm_tile.m): a piece of
  // fewer rows leaves part of every tile idle (docs/schedules.md "DP").
  w.schedule.dp_fuse_min_rows = s.integer_or("dp_fuse_min_rows", 1, kMaxFfn, 128);
  s.finish();

  w.backward = root.boolean_or("backward", true);
  root.finish();

  validate_workload(w, file);
  return w;
}

Workload load_workload(const std::string& name_or_path) {
  const ResolvedInput in = resolve_input(name_or_path, "workloads");
  return parse_workload(JsonDocument::parse(in.text, in.label));
}

void check_fits(const Workload& w, const std::string& workload_file, const topo::Cluster& c) {
  const std::int64_t world = static_cast<std::int64_t>(w.parallel.tp) * w.parallel.up * w.parallel.dp * w.parallel.pp;
  if (world > c.num_ranks())
    fail_at(workload_file, "$.parallel",
            fmt::format("{} ranks, but cluster '{}' has {}", degrees(w.parallel), c.name, c.num_ranks()));
  // A tensor-parallel group exchanges activations every layer: it must sit on the scale-up domain of
  // one node, and the groups must tile the node.
  if (w.parallel.tp > c.devices_per_node || c.devices_per_node % w.parallel.tp != 0)
    fail_at(workload_file, "$.parallel.tp",
            fmt::format("tp {} must divide the {} devices per node of cluster '{}' (a tensor-parallel group "
                        "stays inside one node)",
                        w.parallel.tp, c.devices_per_node, c.name));
  // The ranks the run uses are 0..world-1; each of their device models must support the data type and
  // leave SMs to compute beside communication.
  std::set<std::string> checked;
  for (std::int64_t r = 0; r < world; ++r) {
    const std::string& model_name = c.rank_model.at(static_cast<std::size_t>(r));
    if (!checked.insert(model_name).second) continue;
    const topo::DeviceModel& d = c.device_models.at(model_name);
    if (d.peak_flops_per_s.find(w.dtype) == d.peak_flops_per_s.end())
      fail_at(workload_file, "$.training.dtype",
              fmt::format("device model '{}' of cluster '{}' gives no peak FLOP/s for {}", model_name, c.name,
                          topo::to_string(w.dtype)));
    if (w.schedule.comm_sms && *w.schedule.comm_sms >= d.sm_count)
      fail_at(workload_file, "$.schedule.comm_sms",
              fmt::format("comm_sms {} leaves no SM for compute on device model '{}' ({} SMs)",
                          *w.schedule.comm_sms, model_name, d.sm_count));
  }
}

}  // namespace fusesim::model
