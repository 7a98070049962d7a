#pragma once
// A whole training step (Scope::step, docs/schedules.md "Step"): besides the transformer layers, the
// embedding lookup (vocab-parallel over TP), the final norm, the LM head GEMM (vocab/tp columns) and
// the loss, their backward, gradient accumulation over micro-batches and the optimizer step. The
// layers come from the TPSP generator; this file emits the rest for one TP group, timing only.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fusesim/model/workload.hpp"
#include "fusesim/sched/communicator.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/sched/dp.hpp"

namespace fusesim::sched {

// What a step adds to the layers. Recompute and the DP sharding also apply to layer and stack
// scopes (they change the layers' backward); micro_batches and vocab only to Scope::step.
struct StepOptions {
  std::int64_t micro_batches = 1;  // gradient accumulation: micro-batches per step
  model::Recompute recompute = model::Recompute::none;
  model::DpSharding dp_sharding = model::DpSharding::ddp;
  // The vocabulary as the embedding and the LM head hold it: sched::generate() passes Megatron's
  // padded one (Architecture::padded_vocab(tp)), so that it splits over tp.
  std::int64_t vocab = 0;
  // What DP reduces gradients in (Workload::gradient_dtype()); unset: model::default_grad_reduce_dtype
  // of the compute type. The optimizer reads gradients of this type.
  std::optional<topo::Dtype> grad_dtype;
  // ZeRO-1/2 (Scope::step): the parameter all-gather of each layer in the first micro-batch's forward,
  // one layer ahead, instead of after the optimizer (Parallelism::overlap_param_gather).
  bool overlap_param_gather = false;
  // Recompute::full: only layers l with (l + 1) % recompute_every == 0 (Workload::recompute_every).
  std::int64_t recompute_every = 1;
  // ZeRO-3 with fp8 GEMMs: each layer's parameters gathered in e4m3, 1 byte (torchao's
  // enable_fsdp_float8_all_gather; Workload::fp8_param_gather). The embedding and the LM head stay
  // in the activation type.
  bool fp8_param_gather = false;
  // Scope::step: global-norm clipping before the optimizer (Workload::clip_grad).
  bool clip_grad = true;
  // ZeRO-3: which FSDP makes the copies around its collectives (Parallelism::fsdp). Filled by name
  // after the positional fields above.
  model::FsdpImpl fsdp = model::FsdpImpl::fsdp2;
  // ZeRO-3: which layers' backward gathers them again (Parallelism::reshard_after_forward). Every
  // layer unless a workload says otherwise: fully_shard's own default.
  model::ReshardAfterForward reshard_after_forward = model::ReshardAfterForward::always;
  // Scope::step: the loss's kernels (Workload::cross_entropy).
  model::CrossEntropy cross_entropy = model::CrossEntropy::torch;
};

// The step assembler: the order a replica runs its work in. The layer builder does each piece
// (sched/tpsp.cpp, Builder::replica_step) and carries each micro-batch's state between its pieces,
// so that a pipeline schedule is another order, not another builder (docs/extending.md).
enum class StepPhase : std::uint8_t {
  forward_begin,   // the micro-batch's input (and, in a step, the embedding)
  forward_layer,   // `layer`'s forward
  backward_begin,  // the loss's gradient (in a step, the LM head, loss and their backward)
  backward_layer,  // `layer`'s backward (with its recomputation); with a backward_weight of it, its B only
  backward_end,    // in a step, the embedding's backward
  // Pipeline stages: the activation of the micro-batch from the previous (virtual) stage, or to the
  // next; its gradient from the next stage, or to the previous. `layer`: on the receiving side, the
  // first layer of the chunk the activation enters, or the last layer of the chunk the gradient enters.
  forward_recv,
  forward_send,
  backward_recv,
  backward_send,
  // ZB-H1's W: the weight gradients of `layer` (its wgrad GEMMs, with the re-gathers of their inputs and
  // the hand-off to the DP sync), split off the layer's backward_layer and run later.
  backward_weight,
};
std::string to_string(StepPhase p);
struct StepWork {
  StepPhase phase = StepPhase::forward_begin;
  std::int64_t micro_batch = 0;
  std::int64_t layer = -1;  // -1 outside forward_layer and backward_layer and the stage transfers
  friend bool operator==(const StepWork&, const StepWork&) = default;
};
// Gradient accumulation without a pipeline: micro-batch after micro-batch, each its forward over
// layers 0 .. layers - 1, then its backward over layers - 1 .. 0 (what `forward` and `backward` ask).
std::vector<StepWork> accumulation_order(std::int64_t micro_batches, std::int64_t layers, bool forward, bool backward);

// A pipeline: `stages` ranks' worth of stages, each holding `virtual_stages` chunks of
// layers / (stages x virtual_stages) contiguous layers; virtual stage c x stages + s (chunk c of stage
// s) holds layers [(c stages + s) n, (c stages + s + 1) n). The embedding is on virtual stage 0, the
// LM head and loss on the last.
struct PipelineShape {
  std::int64_t stages = 1;
  std::int64_t virtual_stages = 1;
  std::int64_t micro_batches = 1;
  std::int64_t layers = 1;
  bool zero_bubble = false;  // ZB-H1 (virtual_stages 1): backwards split into B and W (model::zb_h1_passes)
  std::int64_t chunk_layers() const { return layers / (stages * virtual_stages); }
  std::int64_t first_layer(std::int64_t stage, std::int64_t chunk) const {
    return (chunk * stages + stage) * chunk_layers();
  }
};
// What stage `stage` runs, in order, with forward and backward (a pipeline trains):
// model::pipeline_warmup_forwards forwards first, then a forward and a backward in turn, then the
// remaining backwards:
// - virtual_stages 1: PipeDream-flush 1F1B as Megatron-LM runs it (forward_backward_pipelining_
//   without_interleaving);
// - virtual_stages v > 1: Megatron-LM's interleaved 1F1B (forward_backward_pipelining_with_
//   interleaving): the k-th forward is micro-batch (k / (stages v)) stages + k % stages on chunk
//   (k / stages) % v, the k-th backward the same micro-batch on chunk v - 1 - (k / stages) % v.
//   micro_batches must be a multiple of stages.
// - zero_bubble: ZB-H1, model::zb_h1_passes' order of F, B and W.
// A forward on a chunk: its input (forward_begin on virtual stage 0, else forward_recv), its layers,
// then forward_send unless it is the last virtual stage. A backward (ZB-H1: a B): backward_begin on the
// last virtual stage (else backward_recv), its layers last first, then backward_end on virtual stage 0
// (else backward_send). A W: backward_weight of the stage's layers, last first, as the B ran them.
std::vector<StepWork> pipeline_order(const PipelineShape& shape, std::int64_t stage);

// Adam with fp32 master weights and moments, as the fused kernels run it (apex/TE FusedAdam, PyTorch's
// fused AdamW): per parameter it reads and writes the master weight and both moments (3 x 4 B each
// way) and reads the gradient (`grad_bytes`: the type the optimizer reads it in, main_grad_dtype).
// Memory-bound. The low-precision copy of the weights is another pass (master_copy_bytes_per_param).
std::int64_t adam_bytes_per_param(std::int64_t grad_bytes);
// Megatron's _copy_main_params_to_model_params (and FSDP's cast of its fp32 shards): read the fp32
// master weight, write the training type's copy. 0 when the parameters are fp32 themselves.
std::int64_t master_copy_bytes_per_param(topo::Dtype dtype);
// The type the optimizer's passes read the gradients in. With fp32 master weights (training in a half
// type) a gradient held in a half type is cast to fp32 first: Megatron-LM's mixed-precision optimizers
// (Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads, `main_grad.float()`, 2022; the
// distributed optimizer's `shard_model_grad.float()`), and the measured H100 steps of
// docs/validation.md (52 B per parameter, the cast included). Without master weights, the gradient's own.
topo::Dtype main_grad_dtype(topo::Dtype grad_dtype, topo::Dtype dtype);
inline constexpr double kAdamFlopsPerParam = 12.0;

// The optimizer's kernels on a rank that holds `elements` parameters, as StepEmitter::optimizer emits
// them on compute stream 0 in this order (with loss scaling, an all-reduce of the overflow flag over
// TP after grad_unscale; with clipping, the norm's all-reduce over TP between grad_norm and
// grad_scale). Shared with `fusesim search`, whose bound prices them.
struct OptimizerKernels {
  std::optional<model::ElementwiseKernel> grad_cast;     // half gradients to fp32 main gradients (read, write)
  std::optional<model::ElementwiseKernel> grad_unscale;  // fp16 loss scaling: unscale + overflow check (read, write)
  std::optional<model::ElementwiseKernel> grad_norm;     // with clipping: the sum of squares (one read)
  std::optional<model::ElementwiseKernel> grad_scale;    // with clipping: the scaling (read, write)
  model::ElementwiseKernel adam;
  std::optional<model::ElementwiseKernel> master_copy;  // none when the parameters are fp32
  // Every kernel above that runs, in emission order.
  [[nodiscard]] std::vector<model::ElementwiseKernel> all() const;
};
OptimizerKernels optimizer_kernels(std::int64_t elements, topo::Dtype grad_dtype, topo::Dtype dtype, bool clip_grad);

// The tasks of a step outside the layers, for one TP group (one DP replica, one UP position).
class StepEmitter {
 public:
  using Deps = std::vector<std::vector<TaskId>>;  // per TP index
  struct Group {
    RankGroup ranks;                 // the TP group in ring order
    std::int64_t rows = 0;           // S: token rows of a micro-batch on this group
    std::int64_t hidden = 0;
    std::int64_t vocab = 0;          // the whole (padded) vocabulary (each TP rank holds vocab/tp rows)
    topo::Dtype dtype = topo::Dtype::bf16;
    Communicator comm;  // the TP group's (sched/communicator.hpp)
    topo::Dtype grad_dtype = topo::Dtype::fp32;  // what the optimizer reads the gradients as
    bool clip_grad = true;                       // global-norm clipping before the optimizer
    int emitted = 0;  // the TP ranks whose tasks are emitted, the first ones (TP images: 1); 0: all
    model::NormKernel norm = model::NormKernel::fused;  // the final norm's kernel (model::norm_op)
    model::CrossEntropy cross_entropy = model::CrossEntropy::torch;  // the loss's kernels
  };
  // `next_instance`: the generator's collective instance counter (TP collectives of this group).
  StepEmitter(TaskGraph& graph, std::int64_t& next_instance, Group group);

  int tp() const { return static_cast<int>(grp_.ranks.size()); }
  int emit_tp() const { return grp_.emitted > 0 ? grp_.emitted : tp(); }
  std::int64_t vocab_local() const { return grp_.vocab / tp(); }

  // `mb`: "mb1/" or "" (names). `dp`: when not null, the weight gradients are handed to it.
  Deps embedding_forward(const std::string& mb, int micro_batch, const Deps& ready);
  Deps head(const std::string& mb, int micro_batch, const Deps& ready, DpSync* dp);
  Deps embedding_backward(const std::string& mb, int micro_batch, const Deps& ready, DpSync* dp);
  // Per rank over `elements[ti]` parameters: the gradient norm (and its all-reduce over the TP group)
  // and the scaling of clipping when the group clips, Adam, the copy of the master weights.
  Deps optimizer(const std::vector<std::int64_t>& elements, const Deps& ready);

 private:
  TaskId add(int ti, const std::string& name, StreamRef stream, TaskKind kind, TaskLabels labels,
             const std::vector<TaskId>& deps);
  TaskId compute(int ti, const std::string& name, model::Kernel k, Phase phase, int micro_batch,
                 const std::vector<TaskId>& deps, int region = -1);
  // One collective over the group on its communicator's collective stream; returns the task of each TP index.
  std::vector<TaskId> collective(const std::string& name, CollectiveKind kind, Bytes bytes, Phase phase,
                                 int micro_batch, const Deps& deps);
  // Gradient `dg` of every TP index, complete after `emit(ti, row0, rows, region, deps)` has run over
  // its rows: handed to DP (fused or not) when `dp` is set.
  using PieceFn = DpSync::PieceFn;
  Deps gradient(const DpGradient& dg, DpSync* dp, const Deps& ready,
                const std::function<TaskId(int ti, std::int64_t row0, std::int64_t rows, int region,
                                           const std::vector<TaskId>& deps)>& emit);
  Bytes bytes(std::int64_t elements) const { return elements * topo::bytes_per_element(grp_.dtype); }

  TaskGraph& g_;
  std::int64_t& next_instance_;
  Group grp_;
};

}  // namespace fusesim::sched
