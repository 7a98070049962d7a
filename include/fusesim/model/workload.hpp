#pragma once
// A training workload: the model architecture, the batch, the data type, the parallel degrees and
// the schedule to simulate, read from a workload file (schema: docs/workload.md).
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <string>
#include <vector>

#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/json_reader.hpp"
#include "fusesim/util/units.hpp"

namespace fusesim::model {

struct Architecture {
  std::string name;              // "llama-3-70b"
  std::int64_t layers = 0;
  std::int64_t hidden = 0;       // model width h
  std::int64_t heads = 0;        // query heads
  std::int64_t kv_heads = 0;     // key/value heads (== heads without grouped-query attention)
  std::int64_t head_dim = 0;     // hidden / heads unless given
  std::int64_t ffn_hidden = 0;   // MLP inner width
  bool gated_mlp = false;        // SwiGLU-style: FC1 produces 2 x ffn_hidden
  std::int64_t vocab = 0;
  // Megatron-LM pads the vocabulary to a multiple of vocab_divisible_by x tp
  // (--make-vocab-size-divisible-by, default 128; megatron/training/arguments.py and
  // _vocab_size_with_padding in megatron/training/tokenizer/tokenizer.py), so that every TP rank
  // holds an equal vocab shard. $.model.vocab_divisible_by.
  std::int64_t vocab_divisible_by = 128;
  bool causal = true;
  // Rotary position embedding ($.model.rotary_embedding): a kernel turns each query and key row after
  // the QKV projection (and its gradient back in the backward). Learned absolute positions cost one
  // add at the embedding and are not emitted; ALiBi costs nothing outside attention.
  bool rotary = false;
  // Biases in the linear layers ($.model.bias: GPT-2/3, Megatron-LM's GPT, MPT); their gradients are
  // reductions of the layers' output gradients (Workload::bias_grad_fused says where).
  bool bias = false;
  std::string source;            // where the configuration comes from

  std::int64_t q_width() const { return heads * head_dim; }
  std::int64_t kv_width() const { return kv_heads * head_dim; }
  // Parameters of one transformer layer (weights only, norms included) and of the whole model.
  std::int64_t params_per_layer() const;
  std::int64_t params_total() const;  // layers + embedding + LM head (untied), unpadded vocab
  // The vocabulary the embedding and the LM head are built with at tensor-parallel degree `tp`:
  // `vocab` rounded up to a multiple of vocab_divisible_by x tp (0 stays 0). Llama-3's 128256 at
  // tp 8: 129024 = 126 x 1024, 16128 rows per TP rank.
  std::int64_t padded_vocab(std::int64_t tp) const;
};

enum class ScheduleKind { baseline, slice, commfuse };
std::string to_string(ScheduleKind k);
// Every schedule in the order the CLI, workload files and tables list them ("all"); a schedule's
// strategy is registered in sched::schedule_strategy (docs/extending.md).
const std::vector<ScheduleKind>& all_schedule_kinds();
std::vector<std::string> schedule_names();
// The schedule named `name`, one of schedule_names() (callers check the name first).
ScheduleKind parse_schedule_kind(const std::string& name);

// Which engine carries a transfer.
enum class CommEngine { sm_kernel, copy_engine };
std::string to_string(CommEngine e);

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::commfuse;
  int slices = 4;                            // k, for slice-overlap
  // A workload file without engine keys gets sm_kernel for both (schedule.engine "sm", like for
  // like); these struct defaults are the library's for workloads built in code.
  CommEngine collective_engine = CommEngine::sm_kernel;  // baseline and slice collectives
  CommEngine p2p_engine = CommEngine::copy_engine;       // CommFuse P2P steps
  std::optional<int> comm_sms;               // SMs an SM-based kernel holds; default from the device model
  bool query_split_attention = false;        // CommFuse: attention + out-projection per query chunk
  Bytes dp_bucket_bytes = 25 * 1000 * 1000;  // DP bucketed overlap: gradient bucket size ($.schedule.dp_bucket_bytes)
  bool dp_bucket_bytes_given = false;         // the file gave it; else model::dp_bucket_bytes() picks the framework's
  // What the DP baseline is ($.schedule.dp_baseline): "bucketed" (the default: PyTorch DDP's and
  // Megatron's distributed optimizer's overlapped buckets, what users run) or "serial" (one collective
  // after the whole backward, and one parameter all-gather after the optimizer: nobody runs it, but it
  // is the no-overlap reference).
  bool dp_serial_baseline = false;
  // What the TP baseline is ($.schedule.tp_baseline): "collective" (the default: each region's
  // collective whole, Megatron-LM without --tp-comm-overlap) or "te_userbuffers" (Megatron-LM with
  // --tp-comm-overlap: TransformerEngine's ring exchange, pipelined and bulk overlaps per GEMM,
  // src/sched/strategy/te_userbuffers.cpp).
  bool tp_baseline_te_userbuffers = false;
  // CommFuse over DP: fewest rows a ring part may have to be its own wgrad piece GEMM
  // ($.schedule.dp_fuse_min_rows); a gradient with thinner parts is computed whole before its ring.
  std::int64_t dp_fuse_min_rows = 128;
};

// The engines of a run as one name ($.schedule.engine, --engine; docs/workload.md): "sm" (collectives
// and P2P on SM kernels, as NCCL runs both), "copy" (both on copy engines), "auto" (collectives on SM
// kernels, P2P on copy engines). Another mix, set with collective_engine / p2p_engine, is named
// "collectives <engine>, p2p <engine>".
inline const std::vector<std::string> kEngineModes = {"sm", "copy", "auto"};
std::string engine_name(const ScheduleOptions& s);
// Sets both engines from one of kEngineModes; std::invalid_argument for any other name (callers
// check the name against kEngineModes first and report it with its place).
void set_engine_mode(ScheduleOptions& s, const std::string& mode);

// How data-parallel replicas hold the training state (ZeRO stages; zero3 is FSDP's full sharding).
enum class DpSharding { ddp, zero1, zero2, zero3 };
// Which PyTorch FSDP runs ZeRO-3 ($.parallel.fsdp), for the copies each makes around its collectives
// (sched::DpConfig::fsdp). fsdp1: FullyShardedDataParallel's flat parameter, gathered in place, whose
// gradient autograd concatenates from the views' (llm-foundry's Composer). fsdp2: fully_shard's
// per-parameter DTensors, gathered into one buffer and copied out to each parameter, the gradients
// chunk-concatenated into the reduce-scatter's input (torchtitan).
enum class FsdpImpl { fsdp1, fsdp2 };
// Which ZeRO-3 layers FSDP frees after their forward, to gather them again for their backward
// ($.parallel.reshard_after_forward; torchtitan's --parallelism.fsdp_reshard_after_forward).
// always: every layer (fully_shard's and FSDP1 FULL_SHARD's default); all_but_last: the last layer
// stays gathered, its backward follows at once (torchtitan's "default" without pipelining:
// `reshard_after_forward = layer_id < n_layers - 1`, parallelize.py apply_fsdp); never: every layer
// stays gathered until its backward (ZeRO-2's traffic, torchtitan's "never"). The backward frees each
// layer again, so the next micro-batch's forward gathers it anew.
enum class ReshardAfterForward { always, all_but_last, never };
std::string to_string(DpSharding s);
// Every ZeRO stage, in the order the CLI and workload files list them.
const std::vector<DpSharding>& all_dp_shardings();
std::string to_string(ReshardAfterForward r);
const std::vector<ReshardAfterForward>& all_reshard_after_forward();

// Activation recomputation in backward: counted in HFU, not in MFU.
// op: torchtitan's per-op selective activation checkpointing (selective_ac_option "op"): a layer
// saves the outputs of its matmuls except every second one, and of attention; the rest of its
// forward that the backward needs runs again (docs/workload.md).
enum class Recompute { none, selective, full, op };
std::string to_string(Recompute r);
// Every recomputation, in the order the CLI and workload files list them.
const std::vector<Recompute>& all_recomputes();

// The names of `values` (their to_string), in their order, and the value named `name` among them:
// what workload files, the CLI and search files read. std::logic_error where none is (callers check
// the name against names_of first).
template <class T>
std::vector<std::string> names_of(const std::vector<T>& values) {
  std::vector<std::string> out;
  for (T v : values) out.push_back(to_string(v));
  return out;
}
template <class T>
T value_named(const std::string& name, const std::vector<T>& values) {
  for (T v : values)
    if (to_string(v) == name) return v;
  throw std::logic_error("no value named " + name);
}

// The optimizer whose state each rank keeps ($.training.optimizer; memory model: docs/memory.md).
// adam: Adam with fp32 master weights, momentum and variance; sgd: SGD with momentum (fp32 master
// weights and momentum).
enum class Optimizer { adam, sgd };
std::string to_string(Optimizer o);

// The kernel that runs the layers' norms in training ($.training.norm_kernel, docs/workload.md):
// fused: a one-pass training kernel (Apex's persistent FastLayerNorm, which Megatron-LM runs since
// 2021-10; Transformer Engine's; torchtitan's fused Triton RMSNorm); apex_legacy: Apex's older
// FusedLayerNorm, which Megatron-LM carried in megatron/fused_kernels before that; eager: PyTorch's
// native layer_norm kernels (torch.nn.LayerNorm; llm-foundry's LPLayerNorm).
enum class NormKernel : std::uint8_t { fused, apex_legacy, eager };
std::string to_string(NormKernel k);
// The softmax cross-entropy of the LM head's logits as the run's framework computed it
// ($.training.cross_entropy, docs/workload.md): torch: F.cross_entropy on logits.float() (cast,
// log-softmax, NLL; backward the NLL's zeroed gradient, the log-softmax's backward, the cast back:
// torchtitan, llm-foundry); megatron: Megatron-LM's unfused vocab-parallel cross-entropy (cast, max,
// subtract, exp, sum and divide in place; backward a multiply and the cast back:
// megatron/core/tensor_parallel/cross_entropy.py, and megatron/mpu/cross_entropy.py before it).
enum class CrossEntropy : std::uint8_t { torch, megatron };
std::string to_string(CrossEntropy c);
const std::vector<CrossEntropy>& all_cross_entropies();
// HBM bytes per logit element (the logits in `logit_bytes` per element) of the forward and of the
// backward of `c`, for an S x V shard of logits.
std::int64_t cross_entropy_forward_bytes(CrossEntropy c, std::int64_t logit_bytes);
std::int64_t cross_entropy_backward_bytes(CrossEntropy c, std::int64_t logit_bytes);

// The element-wise op (ElementwiseKernel::op) a training graph emits for a norm run by `kernel`: its
// forward, or its backward. The profiles price each (model::small_kernel_model).
const char* norm_op(NormKernel kernel, bool backward);

// The type gradients are accumulated and reduced in over DP when the workload does not say
// ($.training.grad_reduce_dtype): fp32, except for fp16 training. Megatron-LM forces fp32 main
// gradients and their reduction for bf16 ("bfloat16 requires gradient accumulation and all-reduce to
// be done in fp32", megatron/training/arguments.py; --grad-reduce-in-bf16 opts out) and keeps fp16
// gradients for fp16 (--accumulate-allreduce-grads-in-fp32 defaults off); torchtitan's FSDP2 reduces
// in training.mixed_precision_reduce = "float32" (torchtitan/config/job_config.py); fp8 recipes keep
// Megatron's bf16 rule. fp32 and tf32 training have fp32 gradients.
topo::Dtype default_grad_reduce_dtype(topo::Dtype compute);

// The order a pipeline stage runs its micro-batches in ($.parallel.pp_schedule; docs/schedules.md
// "Pipeline"). one_f_one_b: PipeDream-flush, Megatron-LM's forward_backward_pipelining_without_
// interleaving (warm-up forwards, one forward one backward, cool-down backwards); interleaved: Megatron's
// interleaved 1F1B, each rank holding `virtual_stages` chunks of layers (Narayanan et al., SC'21); zb_h1:
// the zero-bubble schedule ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024), 1F1B with
// each backward split into B (input gradients) and W (weight gradients), W deferred (zb_h1_passes).
enum class PipelineSchedule { one_f_one_b, interleaved, zb_h1 };
std::string to_string(PipelineSchedule s);  // "1f1b", "interleaved", "zb-h1"
// The schedule to_string names `name`; nullopt for any other name.
std::optional<PipelineSchedule> pipeline_schedule_named(std::string_view name);
// The forwards stage `stage` of `stages` runs before its first backward, of the micro_batches x
// virtual_stages chunk forwards it runs in all (virtual_stages 1: 1F1B). Megatron-LM's warm-up counts:
// min(stages - stage - 1, m) for 1F1B; (stages - stage - 1) x 2 + (v - 1) x stages for the interleaved
// schedule, or every forward when m == stages. The order (sched::pipeline_order) and the memory it
// keeps (model::stage_layers_in_flight) both follow from it.
std::int64_t pipeline_warmup_forwards(std::int64_t stages, std::int64_t virtual_stages, std::int64_t micro_batches,
                                      std::int64_t stage);

// ZB-H1's passes on stage `stage` of `stages`, in order, each of one micro-batch: F (forward), B (the
// backward's input gradients) and W (its weight gradients), each micro-batch's W after its B, the Ws in
// micro-batch order. The order is the authors' uniform B-W split (ZeroBubbleH1Pipeline.steps with
// --enable-zbh1-exact-semantics, microsoft/Megatron-DeepSpeed megatron/core/pipeline_parallel/
// deepspeed_zbh1_schedule.py; the paper's figure 3, top): 1F1B's min(stages - stage - 1, m) warm-up
// forwards; then `stage` times F, B, their Ws held back (the paper delays the Ws so that a stage runs
// its B as soon as the next stage's gradient arrives; the held-back Ws fill the drain, where 1F1B leaves
// stage s idle); then F, B, W while forwards remain; then B, W; then the held-back Ws. Stage 0 runs
// each W right after its B. sched::pipeline_order and the memory model (model::stage_memory) both
// follow it.
enum class PipelinePass : std::uint8_t { forward, backward, weight };
struct PipelineStep {
  PipelinePass pass = PipelinePass::forward;
  std::int64_t micro_batch = 0;
};
std::vector<PipelineStep> zb_h1_passes(std::int64_t stages, std::int64_t micro_batches, std::int64_t stage);

struct Parallelism {
  int tp = 1;  // tensor (+ sequence) parallel degree
  int up = 1;  // Ulysses sequence parallel degree
  int dp = 1;  // data parallel degree
  // Pipeline parallel degree: stages of contiguous layers, the embedding on the first, the LM head and
  // the loss on the last ($.parallel.pp). Ranks: the stage is outermost (Megatron's tp-cp-dp-pp order).
  int pp = 1;
  PipelineSchedule pp_schedule = PipelineSchedule::one_f_one_b;  // $.parallel.pp_schedule
  int virtual_stages = 1;  // interleaved: chunks of layers per rank ($.parallel.virtual_stages)
  DpSharding dp_sharding = DpSharding::ddp;  // $.parallel.dp_sharding
  // ZeRO-1/2: the updated parameters' all-gather overlapped with the next step's forward, layer by
  // layer, as Megatron-LM's --overlap-param-gather does ($.parallel.overlap_param_gather); otherwise
  // it runs after the optimizer, exposed.
  bool overlap_param_gather = false;
  // ZeRO-3 only: which FSDP ($.parallel.fsdp, default fsdp2, PyTorch's FSDP today).
  FsdpImpl fsdp = FsdpImpl::fsdp2;
  // ZeRO-3 only ($.parallel.reshard_after_forward): default all_but_last with fsdp2 (torchtitan's
  // policy), always with fsdp1 (Composer's FULL_SHARD).
  ReshardAfterForward reshard_after_forward = ReshardAfterForward::all_but_last;
  // Megatron-LM's --sequence-parallel ($.parallel.sequence_parallel, default true). Without it (the
  // runs before Korthikanti et al., 2022) every TP rank runs the norms and residual adds between the
  // TP collectives on the whole sequence and keeps their inputs whole; TP communicates by all-reduces
  // (sched/strategy/tp_allreduce.cpp, under the baseline schedule).
  bool sequence_parallel = true;
  // Without sequence parallelism: whether a column-parallel GEMM's backward all-reduce of its input
  // gradient runs beside the weight gradient (Megatron-LM's --async-tensor-model-parallel-allreduce,
  // on by default since September 2021, commits 16c90445 and f3e57f6f) or before it, blocking, as in
  // the runs of Narayanan et al. 2021 ($.parallel.async_tp_allreduce, default true).
  bool async_tp_allreduce = true;
  int world() const { return tp * up * dp * pp; }
  int stage_ranks() const { return tp * up * dp; }  // the ranks of one pipeline stage
};

struct Workload {
  std::string name;
  Architecture arch;
  std::int64_t sequence_length = 0;   // tokens per sample
  std::int64_t micro_batch = 1;       // samples per micro-batch
  std::int64_t grad_accumulation = 1; // micro-batches per step
  topo::Dtype dtype = topo::Dtype::bf16;
  Parallelism parallel;
  ScheduleOptions schedule;
  bool backward = true;               // simulate backward as well as forward
  Recompute recompute = Recompute::none;  // $.training.recompute
  // With full recomputation, only every k-th layer (the k-th, 2k-th, ...) is recomputed
  // ($.training.recompute_every; torchtitan's per-layer selective checkpointing with
  // selective_ac_option "k"); 1: every layer.
  std::int64_t recompute_every = 1;
  bool recomputes_layer(std::int64_t layer) const {
    return recompute == Recompute::full && (layer + 1) % recompute_every == 0;
  }
  Optimizer optimizer = Optimizer::adam;   // $.training.optimizer
  NormKernel norm_kernel = NormKernel::fused;  // $.training.norm_kernel
  CrossEntropy cross_entropy = CrossEntropy::torch;  // $.training.cross_entropy
  std::optional<topo::Dtype> grad_reduce_dtype;  // $.training.grad_reduce_dtype; unset: the default above
  // $.training.attention: "flash" (FlashAttention, the default) or "unfused" (Megatron-LM before
  // FlashAttention: the scores through HBM, model::unfused_attention_parts).
  bool unfused_attention = false;
  // $.training.attention_time_factor: the fused attention kernel's time over FlashAttention-2's, whose
  // samples the profiles hold, with its source (1: FlashAttention-2 itself; model::AttentionKernel::time_factor).
  SourcedValue attention_time_factor{1.0, ""};
  // $.training.elementwise "eager": the element-wise ops as eager PyTorch runs torchtitan's Llama code
  // without torch.compile, each its own kernel (sched::TpspShape::eager); "fused" (default): as
  // Megatron-LM, Transformer Engine and torch.compile fuse them.
  bool eager_elementwise = false;
  // $.training.projections "separate": q, k and v, and the gate and up halves of a gated FFN, are
  // linears of their own (torchtitan's Llama, Hugging Face's), not one fused GEMM each (Megatron-LM's
  // linear_qkv and linear_fc1) (sched::TpspShape::separate_projections). Default: "separate" with
  // elementwise "eager" (torchtitan's eager Llama code), else "fused".
  bool separate_projections = false;
  // $.training.qkv_grad_cat: the fused QKV projection's output split into q, k and v by torch.split, so
  // that autograd concatenates their gradients back into one tensor for the projection's backward
  // (SplitWithSizesBackward0's cat: llm-foundry's MPT; Megatron-LM's split_tensor_along_last_dim before
  // Transformer Engine's SplitAlongDim, whose backward needs no copy) (sched::TpspShape::qkv_grad_cat).
  bool qkv_grad_cat = false;
  // $.training.bias_grad "fused": the bias gradients come out of the wgrad GEMMs' epilogue, as
  // Transformer Engine computes them (cuBLASLt's BGRADB); "kernel" (default): each a reduction kernel
  // of its own, as PyTorch's and Megatron-LM's linear layers compute grad_output.sum(0).
  bool bias_grad_fused = false;
  // $.training.hidden_dropout: the dropout after the attention and MLP blocks (Megatron-LM's
  // --hidden-dropout, 0.1 by default), fused with the bias and the residual add; 0: none. Its cost does
  // not depend on the probability: a 1-byte mask per element written forward, read backward.
  double hidden_dropout = 0.0;
  // $.training.fp8_param_gather (dtype fp8 with ZeRO-3 only): the layers' parameters gathered in e4m3,
  // as torchao's float8 training does with enable_fsdp_float8_all_gather.
  bool fp8_param_gather = false;
  // $.training.fp8_scaling "dynamic" (dtype fp8 only): each fp8 cast scales by its operand's own amax,
  // which a reduction pass over the operand computes first (torchao's float8 tensorwise recipe,
  // Transformer Engine's Float8CurrentScaling); "delayed" (default): the scale comes from the amax
  // history of earlier steps and the cast records this amax in the same pass (TE's DelayedScaling).
  bool fp8_dynamic_scaling = false;
  // $.training.clip_grad: global-norm gradient clipping before the optimizer, what Megatron-LM
  // (--clip-grad 1.0), torchtitan (max_norm 1.0) and llm-foundry's yamls (gradient_clipping, norm 1.0)
  // run by default: a pass reading every gradient, an all-reduce of the norm, a pass scaling them.
  bool clip_grad = true;

  topo::Dtype gradient_dtype() const { return grad_reduce_dtype.value_or(default_grad_reduce_dtype(dtype)); }

  std::int64_t tokens_per_microbatch() const { return sequence_length * micro_batch; }
};

// Reads and checks a workload file: divisibility (heads by tp*up, kv heads, sequence by tp*up*...,
// hidden by heads) is checked here; fit to a cluster by check_fits().
// The DP bucket a workload's bucketed gradient sync uses: the file's `schedule.dp_bucket_bytes`, else
// the default of the framework its sharding stands for: Megatron-Core's distributed optimizer for
// zero1/zero2, max(40M, 1M x dp) gradient elements (megatron/core/distributed/
// distributed_data_parallel.py, core_r0.8.0) in the gradient type; PyTorch DDP's bucket_cap_mb of
// 25 MB for ddp and zero3.
Bytes dp_bucket_bytes(const Workload& w);

Workload load_workload(const std::string& name_or_path);   // path or shipped name ("llama-3-70b")
Workload parse_workload(const JsonDocument& doc);
// The consistency checks of parse_workload (divisibility of heads, key/value heads and sequence by the
// parallel degrees and slices), for a Workload changed after loading (a command-line override of the
// schedule or the degrees). InputError naming `workload_file` and the JSON path of the key at fault.
void validate_workload(const Workload& w, const std::string& workload_file);
// Parallel degrees against a cluster: world size (tp x up x dp) at most the number of ranks (the run
// uses ranks 0..world-1), tp a divisor of the devices per node; the data type must have a peak on the
// device models used and comm_sms must leave SMs to compute. InputError at $.parallel, $.parallel.tp,
// $.training.dtype or $.schedule.comm_sms naming `workload_file`.
void check_fits(const Workload& w, const std::string& workload_file, const topo::Cluster& c);

}  // namespace fusesim::model
