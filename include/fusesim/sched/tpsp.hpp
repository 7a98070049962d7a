#pragma once
// TPSP (Megatron tensor + sequence parallel) schedule generator: one transformer layer or a stack,
// forward and backward, as baseline collectives, slice-overlap (k slices) or CommFuse (Fuse-AG,
// Fuse-RS, optional query-split attention). docs/schedules.md describes the generated DAG.
//
// Layout: ranks of TP group d are RankLayout::rank(0..tp-1, 0, d); every DP replica is generated as
// an independent TP group (the gradient synchronisation across replicas belongs to the DP
// generator). Ulysses (up > 1): UP index u holds seq/up positions; the all-to-alls around
// attention are emitted by sched/ulysses.hpp; ranks (ti, u, d) are RankLayout::rank(ti, u, d).
#include <cstdint>
#include <string>

#include "fusesim/model/workload.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/sched/step.hpp"
#include "fusesim/topo/cluster.hpp"

namespace fusesim::sched {

// The dimensions the generator needs, taken from a workload (or written by hand in tests).
struct TpspShape {
  int tp = 1;
  int up = 1;                       // Ulysses degree: each TP group holds seq/up positions (sched/ulysses.hpp)
  int dp = 1;                       // independent TP groups generated side by side
  std::int64_t seq = 0;             // sequence positions per sample (s)
  std::int64_t batch = 1;           // samples per micro-batch (b)
  std::int64_t hidden = 0;          // h
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t ffn = 0;             // MLP inner width (per branch for gated MLPs)
  bool gated = false;
  bool causal = true;
  std::int64_t layers = 1;
  topo::Dtype dtype = topo::Dtype::bf16;
  bool unfused_attention = false;   // $.training.attention "unfused" (model::AttentionKernel::unfused)
  // Pipeline stages (Scope::step only): pp stages of tp x up x dp ranks each, the stage outermost in
  // the rank order (RankLayout); virtual_stages > 1: interleaved 1F1B (sched/step.hpp pipeline_order).
  int pp = 1;
  int virtual_stages = 1;
  // $.parallel.sequence_parallel false: the norms and residual adds between the TP collectives are
  // priced on all S rows, as every TP rank runs them on the whole sequence without Megatron's
  // sequence parallelism. Under the baseline schedule TP's communication is then Megatron's
  // all-reduces (strategy/tp_allreduce.cpp) and the layer carries no dataflow; slice-overlap and
  // CommFuse keep their all-gathers and reduce-scatters (the data they compute stays each rank's n
  // rows: the others are copies).
  bool sequence_parallel = true;
  // $.model.rotary_embedding: a rope kernel on the query and key columns after the QKV GEMM, its
  // backward before the QKV dgrad.
  bool rotary = false;
  // $.training.elementwise "eager" (torchtitan's Llama in eager PyTorch): the rotary embedding in
  // complex fp32 form (a cast up, a complex multiply, a cast down, each way), SwiGLU as silu then a
  // multiply (backward: two multiplies, then silu's backward), K and V repeated to the query heads
  // before attention (grouped-query attention) and summed back after, the attention output made
  // contiguous (and its gradient), and the separate projections' input gradients summed two at a
  // time. Each is a kernel of its own, priced by the bytes it streams.
  bool eager = false;
  // $.model.bias without $.training.bias_grad "fused": the backward sums each linear's output
  // gradient over its rows in a reduction kernel of its own (Builder::backward_layer).
  bool bias_grad_kernels = false;
  // $.training.hidden_dropout > 0: each residual add is Megatron's fused bias-dropout-add (its 1-byte
  // mask written too) and the backward runs each dropout's backward (gradient and mask read, the
  // branch's gradient written) before the branch.
  bool hidden_dropout = false;
  // $.training.fp8_scaling "dynamic": each fp8 cast is preceded by an amax pass over its operand
  // (Builder::compute).
  bool fp8_dynamic_scaling = false;
  // $.parallel.pp_schedule "zb-h1": each layer's weight gradients split off its backward and run where
  // the ZB-H1 order puts them (PipelineShape::zero_bubble).
  bool zero_bubble = false;
  // $.training.attention_time_factor (model::AttentionKernel::time_factor) of every attention kernel.
  double attention_time_factor = 1.0;
  // $.training.projections "separate" (torchtitan's Llama: wq, wk, wv and w1, w3 as nn.Linear each):
  // the QKV and gated FC1 GEMMs, their dgrads and wgrads run as one GEMM per projection, and the
  // dgrads' outputs are summed by element-wise adds before the reduce-scatter (Builder::projection_parts).
  // Set by name: the positional initializers of TpspShape (tpsp_request, tests) stop before it.
  bool separate_projections = false;
  // $.training.qkv_grad_cat: autograd's cat of the q, k and v gradients into the fused QKV projection's
  // output gradient, a copy kernel between the attention's backward and the projection's. Set by name.
  bool qkv_grad_cat = false;
  // $.training.norm_kernel: the ops the norms are emitted as (model::norm_op).
  model::NormKernel norm_kernel = model::NormKernel::fused;
  // Without sequence parallelism under the baseline schedule (strategy/tp_allreduce.cpp): the
  // column-parallel backward's all-reduce runs before the weight gradient, the compute stream waiting
  // for it, rather than beside it (model::Parallelism::async_tp_allreduce false).
  bool sync_tp_allreduce = false;

  // fp8 training as Transformer Engine runs it: the GEMMs of the layers take e4m3 operands, cast from
  // bf16 just before; activations, attention, norms, communication and the embedding and LM head stay
  // in bf16. Every other dtype runs everything in itself.
  topo::Dtype activation_dtype() const { return dtype == topo::Dtype::fp8 ? topo::Dtype::bf16 : dtype; }

  std::int64_t rows() const { return seq * batch; }            // S: token rows of the full sequence
  std::int64_t chunk_rows() const { return rows() / tp; }       // n: rows of one sequence chunk
  std::int64_t q_local() const { return heads / tp * head_dim; }
  std::int64_t kv_heads_local() const;                          // kv_heads/tp, or 1 when replicated (kv_heads < tp)
  std::int64_t kv_local() const { return kv_heads_local() * head_dim; }
  // N of the QKV GEMM. With up > 1 the shard is laid out for the Ulysses all-to-all: up blocks of
  // up_group_cols(), kv heads repeated in every block that uses them (sched/ulysses.hpp).
  std::int64_t qkv_local() const { return up > 1 ? up * up_group_cols() : q_local() + 2 * kv_local(); }
  std::int64_t kv_heads_up() const;    // kv heads per rank after the Ulysses all-to-all (1: replicated)
  std::int64_t up_group_cols() const;  // q, k and v columns per rank after the Ulysses all-to-all
  std::int64_t fc1_local() const { return ffn / tp * (gated ? 2 : 1); }  // N of FC1
  std::int64_t ffn_local() const { return ffn / tp; }                    // K of FC2
  std::int64_t layer_params() const;  // weights of one layer on one TP rank (what its optimizer updates)
  // First kv head held by tp rank r (GQA: query head j uses kv head j / (heads / kv_heads)).
  std::int64_t kv_head0(int r) const;
};

// What to generate. `layers` is the real thing; `ag_gemm` and `gemm_rs` are one overlapped GEMM on
// their own (Y = X W with K = piece_k, N = piece_n), used by the reference executor.
enum class TpspPiece { layers, ag_gemm, gemm_rs };

// Test hook: on TP rank `tp_index` of the first DP group, in the `region`-th overlapped region
// generated (0-based), the chunk index used at ring step / slice member `step` is shifted by
// `shift`. CommFuse: the compute of that step works on chunk (c + shift) mod t; baseline and slice:
// the collective's members `step` and (step + shift) mod t trade places (an all-gather puts each
// one's rows where the other's belong; a reduce-scatter sends each one the other's partial). A
// correct reference executor must then report a wrong or missing result.
struct TpspFault {
  int tp_index = -1;  // -1: no fault
  int region = 0;
  int step = 0;
  int shift = 1;
};

namespace tpsp {
class TpStrategy;  // sched/strategy.hpp
}
class Strategy;  // sched/strategy.hpp

struct TpspRequest {
  TpspShape shape;
  model::ScheduleKind kind = model::ScheduleKind::baseline;       // the TPSP collectives' schedule
  model::ScheduleKind up_kind = model::ScheduleKind::baseline;    // the Ulysses all-to-alls' (up > 1)
  model::ScheduleKind dp_kind = model::ScheduleKind::baseline;    // the DP gradient sync's (dp > 1)
  model::ScheduleOptions schedule;       // slices, engines, comm_sms, query_split_attention
  StepOptions step;                      // micro-batches, recompute, DP sharding, vocab (sched/step.hpp)
  GenerateOptions options;               // scope, forward, backward
  // Mirror mode (options.mirror_dp): the DP replicas simulated, 0..mirror_replicas - 1 of each stage,
  // the others their images. generate() picks the fewest whose DP ring hops repeat along the ring
  // (a node's worth where several replicas share a node; docs/schedules.md "Symmetry").
  int mirror_replicas = 1;
  // With the mirror: the consecutive ranks each simulated rank stands for (1: itself). TP images (tp):
  // where every TP transfer is a collective of the TP group, inside one node, the TP ranks of a replica
  // run the same tasks and each one's collectives are the others' turned within the group. Node images
  // (at tp 1, a node's ranks): the node's replicas, whose DP rings turn onto one another. The first of
  // each group is simulated, the others are images, as the replicas beyond the simulated ones are
  // (generate() decides; docs/schedules.md "Symmetry").
  int tp_images = 1;
  // With TP images: build every TP rank and drop the others' tasks (TaskGraph::retain, which finds
  // any task waiting for another TP rank's), instead of emitting the first's alone. generate() builds
  // its probe both ways and requires the same graph.
  bool tp_images_by_filter = false;
  TpspPiece piece = TpspPiece::layers;
  std::int64_t piece_k = 0, piece_n = 0;
  TpspFault fault;
  // A TP strategy of one's own in place of `kind`'s (docs/extending.md); not owned.
  const tpsp::TpStrategy* tp_strategy = nullptr;
  // A Ulysses schedule of one's own in place of `up_kind`'s (its up_* lowerings); not owned.
  const Strategy* up_strategy = nullptr;
  std::string label = "<tpsp>";         // file named by InputErrors
  // The cluster the ranks run on: the DP sync's P2P form runs the rings NCCL would on it
  // (topo/rings.hpp); not owned; null: one ring in replica order.
  const topo::Cluster* cluster = nullptr;
  // Tasks to make room for before building (TaskGraph::reserve), from estimated_tasks; 0: none. A
  // graph grown by doubling copies its tasks at every growth and holds up to 3x their memory at once.
  std::size_t reserve_tasks = 0;
};

// Checks the request (InputError naming `label` and the JSON path of the offending setting) and
// generates the schedule with its dataflow program. Every task carries its data op when the forward
// is generated; a backward generated without its forward (options.forward = false) carries timing
// only (data_op = -1), having nothing to differentiate.
Schedule generate_tpsp(const TpspRequest& request);

// How many tasks generate_tpsp(request) builds, from four small probes instead of the graph: a graph
// repeats its layers and micro-batches, so its size is A + B m + C l + D l m tasks for l layers and
// m micro-batches (D: a layer's forward and backward; B: a micro-batch's embedding and head; C: a
// layer's gradient sync and optimizer share, once per step; A: the rest), and probes of 1 and 2
// layers and micro-batches (pipeline stages folded into one: each layer lives on one stage) give the
// four. Exact without pipeline stages; with them short by the stage transfers and each stage's own
// optimizer and sync, a few tasks per micro-batch and stage (tests/sched/step_test.cpp).
double estimated_tasks(const TpspRequest& request);

// From a workload: shape from the architecture, batch and parallel degrees; refuses a
// world larger than the cluster.
TpspRequest tpsp_request(const model::Workload& workload, const std::string& workload_label,
                         const topo::Cluster& cluster, model::ScheduleKind kind, const GenerateOptions& options);

}  // namespace fusesim::sched
