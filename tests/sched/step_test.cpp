// Scope::step (sched/step.hpp): task counts per micro-batch and layer derived by hand, gradient
// accumulation and DP sync placement, and recomputation counted in HFU but not in MFU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "../sim/sim_test_util.hpp"
#include "fusesim/analysis/metrics.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/sched/dag_json.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/sched/tpsp.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/util/error.hpp"
#include "sched_test_util.hpp"

using namespace fusesim;
using namespace fusesim::sched;
using model::ScheduleKind;

namespace {

TpspRequest request(int tp, int dp, Scope scope, std::int64_t micro_batches = 1,
                    model::Recompute rc = model::Recompute::none) {
  TpspRequest r;
  r.shape = test::small_tp_shape(tp);
  r.shape.dp = dp;
  r.shape.layers = 3;
  r.kind = r.dp_kind = ScheduleKind::baseline;
  r.schedule.kind = ScheduleKind::baseline;
  r.options.scope = scope;
  r.step = StepOptions{micro_batches, rc, model::DpSharding::ddp, 64 * tp, std::nullopt, false, 1};
  return r;
}

}  // namespace

TEST_CASE("A step's tasks: per micro-batch the layers plus 14 per rank, then the optimizer's 5", "[step]") {
  // Per micro-batch and TP rank (tp > 1): embedding lookup + its reduce-scatter (2); head forward:
  // final norm, all-gather, LM head GEMM, cross-entropy, the loss all-reduce (5); head backward:
  // cross-entropy backward, dgrad GEMM, its reduce-scatter, wgrad GEMM, final norm backward (5);
  // embedding backward: all-gather + scatter-add (2). 14 per rank... plus nothing else: the layers'
  // tasks are those of the stack scope. After the last micro-batch, per rank: the gradient norm, its
  // all-reduce over TP, the clipping scale, Adam, the copy of the master weights (5).
  for (int tp : {2, 4}) {
    const std::size_t stack = generate_tpsp(request(tp, 1, Scope::stack)).graph.size();
    for (std::int64_t mbs : {1, 2, 3}) {
      const Schedule s = generate_tpsp(request(tp, 1, Scope::step, mbs));
      validate(s.graph);
      CHECK(s.graph.size() == static_cast<std::size_t>(mbs) * (stack + 14 * tp) + 5 * tp);
      CHECK(s.tokens == 8 * tp * mbs);
    }
  }
}

TEST_CASE("The final norm is the kernel the workload's framework ran", "[step]") {
  for (const auto& [kernel, fwd, bwd] :
       {std::tuple{model::NormKernel::fused, "layernorm_train", "layernorm_train_bwd"},
        std::tuple{model::NormKernel::eager, "layernorm_eager", "layernorm_eager_bwd"},
        std::tuple{model::NormKernel::apex_legacy, "layernorm_apex_legacy", "layernorm_apex_legacy_bwd"}}) {
    TpspRequest r = request(2, 1, Scope::step);
    r.shape.norm_kernel = kernel;
    const Schedule s = generate_tpsp(r);
    std::map<std::string, std::string> op;
    for (TaskId id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      if (const auto* c = std::get_if<ComputeTask>(&t.kind); c && t.rank == 0)
        if (const auto* e = std::get_if<model::ElementwiseKernel>(&c->kernel.get()))
          op[std::string(t.name.substr(t.name.find('/') + 1))] = e->op;
    }
    INFO(model::to_string(kernel));
    CHECK(op.at("head/fwd/final_norm") == fwd);
    CHECK(op.at("head/bwd/final_norm_bwd") == bwd);
  }
}

TEST_CASE("The optimizer's passes and the loss carry the bytes derived by hand", "[step]") {
  // tp 2, one micro-batch, fp32 gradients (bf16 training's default), bf16 weights. Per rank the
  // optimizer updates n = 3 layers x (QKV 32 x 32 + proj 16 x 32 + FC1 32 x 32 + FC2 16 x 32 = 3,072)
  // + embedding and LM head 2 x (vocab 128 / tp 2 = 64 rows) x 32 = 9,216 + 4,096 = 13,312 parameters
  // (norm gains are not in the shards the optimizer sees: layer_params counts the GEMM weights).
  // grad_norm reads them (4 B each), grad_scale reads and writes (8 B), Adam reads and writes the
  // master weight and moments and reads the gradient (28 B), master_copy reads fp32, writes bf16
  // (6 B); the norm's all-reduce moves one fp32 value. The loss: S = 16 rows x 64 local logits =
  // 1,024 logits, 14 B each forward (cast 2 + 4, log-softmax 4 + 4), 22 B backward (zeroed gradient
  // 4, log-softmax backward 12, cast back 4 + 2). Megatron's vocab-parallel cross-entropy (run with
  // clipping here): 38 B forward (cast 2 + 4, max 4, subtract 8, exp 8, sum 4, divide 8, each fp32 in
  // place), 14 B backward (multiply in place 8, cast back 4 + 2), as ops of their own (the profiles'
  // cross_entropy samples time PyTorch's softmax kernels).
  for (bool clip : {true, false}) {
    TpspRequest r = request(2, 1, Scope::step);
    r.step.clip_grad = clip;
    if (clip) r.step.cross_entropy = model::CrossEntropy::megatron;
    const Schedule s = generate_tpsp(r);
    validate(s.graph);
    std::map<std::string, std::int64_t> bytes;
    std::map<std::string, std::string> ops;
    std::int64_t norm_ar = -1;
    for (TaskId id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      if (t.rank != 0) continue;
      const std::string name(t.name.substr(t.name.find('/') + 1));  // without "r0/"
      if (const auto* c = std::get_if<ComputeTask>(&t.kind))
        if (const auto* e = std::get_if<model::ElementwiseKernel>(&c->kernel.get())) {
          bytes[name] = e->bytes;
          ops[name] = e->op;
        }
      if (const auto* c = std::get_if<CollectiveTask>(&t.kind); c && name == "optimizer/grad_norm_ar")
        norm_ar = c->bytes;
    }
    constexpr std::int64_t n = 13'312;
    CHECK(bytes.at("optimizer/adam") == 28 * n);
    CHECK(bytes.at("optimizer/master_copy") == 6 * n);
    CHECK(bytes.at("head/fwd/cross_entropy") == (clip ? 38 : 14) * 1'024);
    CHECK(bytes.at("head/bwd/cross_entropy_bwd") == (clip ? 14 : 22) * 1'024);
    CHECK(ops.at("head/fwd/cross_entropy") == (clip ? "cross_entropy_megatron" : "cross_entropy"));
    CHECK(ops.at("head/bwd/cross_entropy_bwd") == (clip ? "cross_entropy_megatron_bwd" : "cross_entropy_bwd"));
    if (clip) {
      CHECK(bytes.at("optimizer/grad_norm") == 4 * n);
      CHECK(bytes.at("optimizer/grad_scale") == 8 * n);
      CHECK(norm_ar == 4);
    } else {
      CHECK(bytes.count("optimizer/grad_norm") == 0);
      CHECK(bytes.count("optimizer/grad_scale") == 0);
      CHECK(norm_ar == -1);
    }
  }
}

TEST_CASE("Half gradients are cast to fp32 main gradients, and fp16 unscales them, before clipping", "[step]") {
  // The same n = 13,312 parameters per rank as above. fp16 training keeps fp16 gradients (its default
  // reduction type): Megatron-LM's mixed-precision optimizer casts them to fp32 main gradients
  // (2 B read, 4 B written: 6 B), unscales them and checks for inf/NaN in one pass (8 B: fp32 read and
  // written), all-reduces the overflow flag over TP (one fp32 value), then clips and steps on fp32:
  // grad_norm 4 B, grad_scale 8 B, Adam 24 + 4 = 28 B, master_copy 4 + 2 = 6 B. bf16 training with
  // bf16 gradients (`grad_reduce_dtype: bf16`) casts them the same way but has no loss scale.
  constexpr std::int64_t n = 13'312;
  for (const auto& [dtype, grad, unscale] : {std::tuple{topo::Dtype::fp16, topo::Dtype::fp16, true},
                                            std::tuple{topo::Dtype::bf16, topo::Dtype::bf16, false},
                                            std::tuple{topo::Dtype::bf16, topo::Dtype::fp32, false}}) {
    TpspRequest r = request(2, 1, Scope::step);
    r.shape.dtype = dtype;
    r.step.grad_dtype = grad;
    const Schedule s = generate_tpsp(r);
    validate(s.graph);
    std::map<std::string, std::int64_t> bytes;
    std::map<std::string, TaskId> id_of;
    for (TaskId id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      if (t.rank != 0) continue;
      const std::string name(t.name.substr(t.name.find('/') + 1));
      id_of[name] = id;
      if (const auto* c = std::get_if<ComputeTask>(&t.kind))
        if (const auto* e = std::get_if<model::ElementwiseKernel>(&c->kernel.get())) bytes[name] = e->bytes;
      if (const auto* c = std::get_if<CollectiveTask>(&t.kind)) bytes[name] = c->bytes;
    }
    const bool cast = grad != topo::Dtype::fp32;
    CHECK(bytes.count("optimizer/grad_cast") == (cast ? 1u : 0u));
    if (cast) CHECK(bytes.at("optimizer/grad_cast") == 6 * n);
    CHECK(bytes.count("optimizer/grad_unscale") == (unscale ? 1u : 0u));
    CHECK(bytes.count("optimizer/found_inf_ar") == (unscale ? 1u : 0u));
    CHECK(bytes.at("optimizer/grad_norm") == 4 * n);
    CHECK(bytes.at("optimizer/grad_scale") == 8 * n);
    CHECK(bytes.at("optimizer/adam") == 28 * n);
    CHECK(bytes.at("optimizer/master_copy") == 6 * n);
    if (unscale) {
      CHECK(bytes.at("optimizer/grad_unscale") == 8 * n);
      CHECK(bytes.at("optimizer/found_inf_ar") == 4);
      // In Megatron's order: cast, unscale, the flag's all-reduce, then the norm.
      const auto deps_of = [&](const std::string& name) {
        const auto d = s.graph.predecessors(id_of.at(name));
        return std::set<TaskId>(d.begin(), d.end());
      };
      CHECK(deps_of("optimizer/grad_unscale").count(id_of.at("optimizer/grad_cast")) == 1);
      CHECK(deps_of("optimizer/found_inf_ar").count(id_of.at("optimizer/grad_unscale")) == 1);
      CHECK(deps_of("optimizer/grad_norm").count(id_of.at("optimizer/found_inf_ar")) == 1);
    }
  }
}

TEST_CASE("Gradient accumulation: DP syncs only during the last micro-batch", "[step][dp]") {
  // tp 2 x dp 2, bucketed ddp: every gradient handed to DP belongs to the last micro-batch (names
  // without "mb" prefix are micro-batch 0, so use two micro-batches and check the bucket deps).
  TpspRequest r = request(2, 2, Scope::step, 2);
  r.dp_kind = ScheduleKind::commfuse;
  const Schedule s = generate_tpsp(r);
  validate(s.graph);
  int fused_pieces = 0;
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.name.find("/dp0") == std::string::npos) continue;
    ++fused_pieces;
    // Only micro-batch 1 ("mb1/") carries the fused DP pieces.
    CHECK(t.name.find("mb1/") != std::string::npos);
  }
  // Per rank: 3 layers x 4 weights, one step-0 piece "/dp0" each (the LM head's and the embedding's
  // pieces are named by their first row); 4 ranks.
  CHECK(fused_pieces == 3 * 4 * 4);
}

TEST_CASE("Separate projections in a step: the DP sync takes each weight once, after its last part", "[step][dp]") {
  // tp 2 x dp 2, two micro-batches, the test shape gated (SwiGLU: q/k/v and gate/up each split). The
  // wgrad of QKV runs as qkv_wgrad.q, .k, .v on the compute stream, the last handing the whole
  // gradient to the DP sync (CommFuse over DP: the last part cut into its row pieces): as many DP
  // pieces and the same FLOPs as with the fused projections.
  for (auto dp_kind : {ScheduleKind::baseline, ScheduleKind::commfuse}) {
    TpspRequest r = request(2, 2, Scope::step, 2);
    r.shape.gated = true;
    r.dp_kind = dp_kind;
    const Schedule fused = generate_tpsp(r);
    r.shape.separate_projections = true;
    const Schedule sep = generate_tpsp(r);
    validate(sep.graph);
    const auto named = [](const TaskGraph& g, const std::string& part) {
      int n = 0;
      for (TaskId id = 0; id < g.size(); ++id) n += g.task(id).name.find(part) != std::string::npos;
      return n;
    };
    CHECK(named(sep.graph, "/dp0") == named(fused.graph, "/dp0"));
    CHECK(test::graph_flops(sep.graph) == test::graph_flops(fused.graph));
    // One q part and one gate part per layer, rank and micro-batch (baseline TP: one wgrad call per
    // region): 4 ranks x 2 micro-batches x 3 layers.
    CHECK(named(sep.graph, "qkv_wgrad.q") == 4 * 2 * 3);
    CHECK(named(sep.graph, "fc1_wgrad.gate") == 4 * 2 * 3);
  }
}

TEST_CASE("overlap_param_gather: ZeRO-1/2's parameter gather moves into the first forward, layer by layer",
          "[step][dp]") {
  // tp 2 x dp 2, ZeRO-1, two micro-batches. Without overlap: the updated parameters are all-gathered
  // after the optimizer in buckets ("dp/param_ag/bucket<i>"). With it (Megatron's
  // --overlap-param-gather): one gather for the embedding rows before the first forward, one per layer
  // in micro-batch 0's forward only ("L<l>/fwd/dp_param_ag"), one for the LM head rows, none after the
  // optimizer. The same parameters move: 3 layers x layer params + 2 x (vocab/tp) x h per rank.
  auto gathers = [](bool overlap) {
    TpspRequest r = request(2, 2, Scope::step, 2);
    r.step.dp_sharding = model::DpSharding::zero1;
    r.step.overlap_param_gather = overlap;
    const Schedule s = generate_tpsp(r);
    validate(s.graph);
    std::map<std::string, Bytes> bytes;  // per gather task name of rank 0
    for (TaskId id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      const auto* c = std::get_if<CollectiveTask>(&t.kind);
      if (t.rank != 0 || c == nullptr || c->kind != CollectiveKind::all_gather || t.labels.phase == Phase::none)
        continue;
      if (t.labels.op != "dp_param_all_gather" && t.labels.op != "dp_all_gather") continue;
      bytes[std::string(t.name)] = c->bytes;
    }
    return bytes;
  };
  const auto after = gathers(false);
  const auto during = gathers(true);
  Bytes total_after = 0, total_during = 0;
  for (const auto& [name, b] : after) {
    CHECK(name.find("dp/param_ag/bucket") != std::string::npos);
    total_after += b;
  }
  // Rank 0's layer (h 32, 2 of 4 query heads and 1 of 2 kv heads of 8, ffn 32 / 2 = 16 gated): QKV
  // 32 x (16 + 2 x 8) = 1,024; O 16 x 32 = 512; FC1 32 x 2 x 16 = 1,024; FC2 16 x 32 = 512 -> 3,072
  // parameters of 2 bytes; embedding and LM head 128 / 2 = 64 rows each of 32.
  CHECK(during.size() == 3 + 2);
  CHECK(during.count("r0/embedding/dp_param_ag") == 1);
  CHECK(during.count("r0/lm_head/dp_param_ag") == 1);
  for (int l = 0; l < 3; ++l) CHECK(during.at(fmt::format("r0/L{}/fwd/dp_param_ag", l)) == 3'072 * 2);
  CHECK(during.at("r0/embedding/dp_param_ag") == 64 * 32 * 2);
  for (const auto& [name, b] : during) total_during += b;
  CHECK(total_during == (3 * 3'072 + 2 * 64 * 32) * 2);
  CHECK(total_after == total_during);

  // Hidden behind the forward instead of exposed after the optimizer, the same bytes take less of the
  // step (roofline on one DGX H100) once layers are large enough for their GEMMs to outlast a gather
  // (h 2048, 2048 tokens: on the toy layers above, a collective's base latency per layer costs more
  // than one bucket after the optimizer).
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100");
  const model::RooflineCostModel costs;
  auto step_ps = [&](bool overlap) {
    TpspRequest r = request(2, 2, Scope::step, 2);
    r.shape.seq = 2048;
    r.shape.hidden = 2048;
    r.shape.heads = 16;
    r.shape.kv_heads = 8;
    r.shape.head_dim = 128;
    r.shape.ffn = 8192;
    r.step.vocab = 32768;
    r.step.dp_sharding = model::DpSharding::zero1;
    r.step.overlap_param_gather = overlap;
    sim::Simulator sim(c, costs);
    return sim.run(generate_tpsp(r).graph).makespan_ps;
  };
  CHECK(step_ps(true) < step_ps(false));
}

TEST_CASE("ZeRO-2 runs ZeRO-1's step: the same task graph, only the memory differs", "[step][dp]") {
  // Megatron-LM's distributed optimizer (ZeRO-1) already reduce-scatters the gradients and gathers
  // the updated parameters; sharding the gradients too (ZeRO-2) frees memory (docs/memory.md) and
  // moves nothing else. `fusesim search` simulates one of the two and gives both the step
  // (docs/cli.md "fusesim search"), so the generator must keep them alike: every DP schedule, with
  // and without the overlapped parameter gather, with pipeline stages.
  for (const ScheduleKind kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse})
    for (const bool overlap : {false, true})
      for (const int pp : {1, 2}) {
        INFO(model::to_string(kind) << " overlap_param_gather " << overlap << " pp " << pp);
        auto graph = [&](model::DpSharding sharding) {
          TpspRequest r = request(2, 2, Scope::step, 2);
          r.kind = r.dp_kind = r.schedule.kind = kind;
          r.shape.layers = 4;
          r.shape.pp = pp;
          r.step.dp_sharding = sharding;
          r.step.overlap_param_gather = overlap;
          DagFile dag;
          dag.graph = generate_tpsp(r).graph;
          return dag_to_json(dag);
        };
        CHECK(graph(model::DpSharding::zero1) == graph(model::DpSharding::zero2));
      }
}

TEST_CASE("Without TP or Ulysses, slice-overlap runs baseline's step, and without DP every schedule does", "[step][dp]") {
  // At tp = up = 1 no TP or Ulysses collective is left to schedule: the overlap schedule acts on the
  // DP sync alone, whose baseline (bucketed: DDP's and Megatron's overlapped buckets) is
  // slice-overlap's DP form (docs/schedules.md "DP"). With dp = 1 as well there is nothing to overlap
  // (pipeline sends do not depend on the schedule). `fusesim search` simulates one of such candidates
  // and gives the others its step (docs/cli.md "fusesim search").
  for (const int dp : {1, 2})
    for (const auto sharding : {model::DpSharding::ddp, model::DpSharding::zero1, model::DpSharding::zero3})
      for (const int pp : {1, 2}) {
        if (pp > 1 && sharding == model::DpSharding::zero3) continue;
        INFO("dp " << dp << " " << model::to_string(sharding) << " pp " << pp);
        auto graph = [&](ScheduleKind kind) {
          TpspRequest r = request(1, dp, Scope::step, 2);
          r.kind = r.dp_kind = r.up_kind = r.schedule.kind = kind;
          r.shape.layers = 4;
          r.shape.pp = pp;
          r.step.dp_sharding = sharding;
          DagFile dag;
          dag.graph = generate_tpsp(r).graph;
          return dag_to_json(dag);
        };
        const nlohmann::json baseline = graph(ScheduleKind::baseline);
        CHECK(graph(ScheduleKind::slice) == baseline);
        CHECK((graph(ScheduleKind::commfuse) == baseline) == (dp == 1));
      }
}

TEST_CASE("estimated_tasks: the graph's size from four small probes", "[step]") {
  // A + B m + C l + D l m fitted on 1 and 2 layers and micro-batches: exact for any l and m without
  // stages (each part of the graph repeats per layer, per micro-batch, or per both), across DP
  // shardings, schedules and recomputation; with stages within the stage transfers of the pipeline.
  for (auto sharding : {model::DpSharding::ddp, model::DpSharding::zero1, model::DpSharding::zero3})
    for (auto kind : {ScheduleKind::baseline, ScheduleKind::commfuse})
      for (auto rc : {model::Recompute::none, model::Recompute::full}) {
        TpspRequest r = request(2, 2, Scope::step, 5, rc);
        r.shape.layers = 7;
        r.step.dp_sharding = sharding;
        r.kind = r.dp_kind = kind;
        r.schedule.kind = kind;
        INFO(model::to_string(sharding) << " " << model::to_string(kind) << " " << model::to_string(rc));
        CHECK(estimated_tasks(r) == static_cast<double>(generate_tpsp(r).graph.size()));
      }
  TpspRequest r = request(2, 2, Scope::step, 8);
  r.shape.layers = 8;
  r.shape.pp = 4;
  r.step.dp_sharding = model::DpSharding::zero1;
  const auto built = static_cast<double>(generate_tpsp(r).graph.size());
  CHECK(estimated_tasks(r) < built);
  CHECK(estimated_tasks(r) > 0.9 * built);
}

TEST_CASE("Recomputation counts in HFU, not in MFU", "[step][metrics]") {
  // Full recompute repeats each layer's forward before its backward, so the hardware FLOPs exceed the
  // model FLOPs by exactly the layers' forward FLOPs: HFU / MFU = (F + F_fwd) / F, with F the model
  // FLOPs of the step and F_fwd those of a forward-only stack of the same layers.
  // The roofline on a shipped cluster: FLOPs follow from the kernels' shapes (the test cost model has
  // no attention).
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100");
  const model::RooflineCostModel costs;
  auto metrics = [&](const TpspRequest& r) {
    const Schedule s = generate_tpsp(r);
    sim::Simulator sim(c, costs);
    return analysis::analyze(s, sim.run(s.graph), c, costs, topo::Dtype::bf16);
  };
  TpspRequest fwd = request(2, 1, Scope::stack);
  fwd.options.backward = false;
  const double f_fwd = metrics(fwd).model_flops;
  const auto none = metrics(request(2, 1, Scope::step));
  const auto full = metrics(request(2, 1, Scope::step, 1, model::Recompute::full));
  CHECK(full.model_flops == Approx(none.model_flops).epsilon(1e-12));
  CHECK(full.hardware_flops == Approx(none.model_flops + f_fwd).epsilon(1e-12));
  CHECK(full.hfu / full.mfu == Approx((none.model_flops + f_fwd) / none.model_flops).epsilon(1e-12));
  CHECK(none.hfu == none.mfu);
  // Full recomputation of every second layer (recompute_every 2, torchtitan's per-layer selective
  // checkpointing): of the 3 identical layers only layer 1 ((1 + 1) % 2 == 0) runs its forward again:
  // a third of F_fwd more.
  TpspRequest alternate = request(2, 1, Scope::step, 1, model::Recompute::full);
  alternate.step.recompute_every = 2;
  const auto alt = metrics(alternate);
  CHECK(alt.model_flops == Approx(none.model_flops).epsilon(1e-12));
  CHECK(alt.hardware_flops == Approx(none.model_flops + f_fwd / 3).epsilon(1e-12));
  // Selective: the attention forward of each layer again, counted in HFU only.
  const auto sel = metrics(request(2, 1, Scope::step, 1, model::Recompute::selective));
  CHECK(sel.hardware_flops > sel.model_flops);
  CHECK(sel.model_flops == Approx(none.model_flops).epsilon(1e-12));
  // Per-op (torchtitan's "op" policy): of each layer the ops the backward reads and the layer did not
  // save run again. Per TP rank (tp 2: S 16 rows gathered, n 8 rows of the shard, h 32, one KV head of
  // 8 columns, 16 FFN columns): ln1 8 n h = 2,048; K's projection 2 S 8 h = 8,192; residual add n h =
  // 256; ln2 2,048; FC1's up half 2 S 16 h = 16,384; SwiGLU 6 S 16 = 1,536 -> 30,464, x 3 layers x
  // 2 ranks = 182,784 FLOPs more in HFU.
  const auto per_op = metrics(request(2, 1, Scope::step, 1, model::Recompute::op));
  CHECK(per_op.model_flops == Approx(none.model_flops).epsilon(1e-12));
  CHECK(per_op.hardware_flops - per_op.model_flops == Approx(182'784.0).epsilon(1e-9));
}

TEST_CASE("ZeRO-3 gathers the root module once per micro-batch - fp8 gathers halve the layers' bytes", "[step][dp]") {
  // ZeRO-3 over dp 2 with fp8 GEMMs: each layer's parameter all-gather carries its tp-rank's layer
  // parameters once per forward and once per backward; torchao's fp8 all-gather halves those bytes
  // (e4m3 against bf16). The root module (FSDP's: embedding, final norm, LM head) is gathered once, in
  // bf16 either way: per rank (2 x vocab/tp x h + h) x 2 B = (2 x 64 x 32 + 32) x 2 = 8,256, over the
  // tp x dp = 4 ranks 33,024.
  auto gathers = [](bool fp8_gather) {
    TpspRequest r = request(2, 2, Scope::step);
    r.shape.dtype = topo::Dtype::fp8;
    r.step.dp_sharding = model::DpSharding::zero3;
    r.step.fp8_param_gather = fp8_gather;
    const Schedule s = generate_tpsp(r);
    std::map<std::string, Bytes> bytes;  // by layer ("L0".. or "table"), summed over ranks
    for (TaskId id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      const auto* c = std::get_if<CollectiveTask>(&t.kind);
      if (c == nullptr || t.labels.op != "dp_param_all_gather") continue;
      bytes[t.labels.layer >= 0 ? fmt::format("L{}", t.labels.layer) : "table"] += c->bytes;
    }
    return bytes;
  };
  const auto bf16 = gathers(false), fp8 = gathers(true);
  REQUIRE(bf16.size() == 4);  // L0, L1, L2 and the root module
  CHECK(bf16.at("table") == 33'024);
  for (const auto& [key, b] : bf16) {
    CHECK(b > 0);
    CHECK(fp8.at(key) * (key == "table" ? 1 : 2) == b);
  }
}

TEST_CASE("ZeRO-3 reduce-scatters every layer's gradient in each micro-batch, as FSDP does", "[step][dp]") {
  // PyTorch FSDP keeps no unsharded gradient to accumulate into, so without no_sync (Composer never
  // calls it for FSDP, torchtitan neither) each micro-batch's backward reduce-scatters every layer and
  // the root module. tp 2 x dp 2, 3 layers, 3 micro-batches: in micro-batches 0 and 1, per rank, one
  // reduce-scatter per layer and one for the root: 2 x 4 per rank, 32 over the 4 ranks; micro-batch 2
  // is the bucketed sync of the last micro-batch, as before. Each carries the fp32 gradients of what
  // the layer's gather carries in bf16 parameters: twice its bytes; the root (2 x 64 x 32 + 32) x 4 B
  // = 16,512 per rank.
  TpspRequest r = request(2, 2, Scope::step, 3);
  r.step.dp_sharding = model::DpSharding::zero3;
  const Schedule s = generate_tpsp(r);
  validate(s.graph);
  std::map<std::string, Bytes> gathered;  // per rank and layer, bf16 parameters, first forward
  int reduced = 0;
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    const auto* c = std::get_if<CollectiveTask>(&t.kind);
    if (c != nullptr && t.labels.op == "dp_param_all_gather" && t.name.rfind("mb", 0) != 0)
      gathered[fmt::format("{}/{}", t.rank, t.labels.layer)] = c->bytes;
  }
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.name.find("/dp_grad_rs") == std::string::npos) continue;
    ++reduced;
    INFO(t.name);
    CHECK(t.name.find("mb2/") == std::string::npos);
    CHECK(t.labels.op == "dp_reduce_scatter");
    const auto& c = std::get<CollectiveTask>(t.kind);
    CHECK(c.kind == CollectiveKind::reduce_scatter);
    if (t.labels.layer < 0)
      CHECK(c.bytes == 16'512);
    else
      CHECK(c.bytes == 2 * gathered.at(fmt::format("{}/{}", t.rank, t.labels.layer)));
  }
  CHECK(reduced == 32);
  // One micro-batch: nothing but the last micro-batch's sync.
  r.step.micro_batches = 1;
  const Schedule one = generate_tpsp(r);
  for (TaskId id = 0; id < one.graph.size(); ++id) CHECK(one.graph.task(id).name.find("/dp_grad_rs") == std::string::npos);
}

TEST_CASE("ZeRO-3's gathers and reduce-scatters run on the DP communicator one after another, as issued",
          "[step][dp]") {
  // PyTorch: "for NCCL backend, any collectives, even if issued in different streams, contend for the
  // same per-device NCCL stream" (torch/distributed/fsdp/api.py, BackwardPrefetch). tp 2 x dp 2, 3
  // layers, 3 micro-batches, on one DGX H100 (roofline). In micro-batch 0's backward each rank issues,
  // by hand from the generator's order (the next layer's gather before a layer's gradients, its
  // reduce-scatter after them): gather L2 (at the backward's start), gather L1, reduce-scatter L2,
  // gather L0, reduce-scatter L1, reduce-scatter L0, reduce-scatter of the root module; they run in
  // that order, each after the one before it has ended, on comm stream 3.
  TpspRequest r = request(2, 2, Scope::step, 3);
  r.shape.seq = 1024;
  r.shape.hidden = 1024;
  r.shape.heads = 8;
  r.shape.kv_heads = 8;
  r.shape.head_dim = 128;
  r.shape.ffn = 4096;
  r.step.vocab = 8192;
  r.step.dp_sharding = model::DpSharding::zero3;
  const Schedule s = generate_tpsp(r);
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100");
  const model::RooflineCostModel costs;
  sim::Simulator sim(c, costs);
  const sim::SimResult res = sim.run(s.graph);
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    std::vector<TaskId> dp;  // the rank's DP collectives, in the order issued
    for (TaskId id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      if (t.rank != rank || !std::holds_alternative<CollectiveTask>(t.kind) ||
          (t.labels.op != "dp_param_all_gather" && t.labels.op != "dp_reduce_scatter"))
        continue;
      CHECK(t.stream == StreamRef{StreamKind::comm, 3});
      dp.push_back(id);
    }
    REQUIRE(dp.size() > 1);
    for (std::size_t i = 1; i < dp.size(); ++i)
      CHECK(res.tasks[dp[i]].start_ps >= res.tasks[dp[i - 1]].end_ps);
    std::vector<std::string> backward;
    for (TaskId id : dp) {
      const Task& t = s.graph.task(id);
      const bool later = t.name.find("mb1/") != std::string::npos || t.name.find("mb2/") != std::string::npos;
      // (the last micro-batch's bucketed sync, "dp/bucket<b>", is checked below)
      const bool layer_rs = t.name.find("/dp_grad_rs") != std::string::npos;
      if (later || (t.labels.op == "dp_reduce_scatter" ? !layer_rs : t.labels.phase != Phase::backward))
        continue;
      backward.push_back(fmt::format("{} {}", t.labels.op == "dp_param_all_gather" ? "ag" : "rs",
                                     t.labels.layer >= 0 ? fmt::format("L{}", t.labels.layer) : "root"));
    }
    CHECK(backward == std::vector<std::string>{"ag L2", "ag L1", "rs L2", "ag L0", "rs L1", "rs L0", "rs root"});
    // The last micro-batch syncs in buckets, each issued as soon as its last gradient is done: the first
    // (the backward's first gradients) after the gather of layer 1's backward and before layer 0's.
    const auto at = [&](const std::string& suffix) {
      for (std::size_t i = 0; i < dp.size(); ++i) {
        const std::string_view name = s.graph.task(dp[i]).name;
        if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
          return i;
      }
      FAIL("no DP collective named ..." << suffix);
      return dp.size();
    };
    CHECK(at("mb2/L1/bwd/dp_param_ag") < at("dp/bucket0/reduce_scatter"));
    CHECK(at("dp/bucket0/reduce_scatter") < at("mb2/L0/bwd/dp_param_ag"));
  }
}

namespace {

// The copy kernel `id` moves (ComputeTask of an element-wise "copy"); 0 for any other task.
Bytes copy_bytes(const TaskGraph& g, TaskId id) {
  const auto* c = std::get_if<ComputeTask>(&g.task(id).kind);
  if (c == nullptr) return 0;
  const auto* e = std::get_if<model::ElementwiseKernel>(&c->kernel.get());
  return e != nullptr && e->op == "copy" ? e->bytes : 0;
}

// The one predecessor of `id` whose op is `op` (FAIL when there is not exactly one).
TaskId predecessor_with_op(const TaskGraph& g, TaskId id, const std::string& op) {
  TaskId found = kNoTask;
  int n = 0;
  for (TaskId p : g.predecessors(id))
    if (g.task(p).labels.op == op) {
      found = p;
      ++n;
    }
  INFO(g.task(id).name << " <- " << op);
  REQUIRE(n == 1);
  return found;
}

}  // namespace

TEST_CASE("FSDP2 copies each gathered layer out on the compute stream right before the layer runs",
          "[step][dp]") {
  // tp 2 x dp 2 ZeRO-3, 3 layers, 2 micro-batches. FSDP2 gathers a module's shards into one buffer and
  // copies it out to each parameter in the module's pre-forward / pre-backward hook, on the compute
  // stream: per gather of G bytes (g per element), a copy reading and writing it, 2 G bytes, that
  // waits for the gather and is the last thing on compute stream 0 before the module's own kernels
  // (the root module: before the embedding lookup). Before each gather, on compute stream 2, the
  // rank's shard (elements E / dp, E = G / g) is cast from its fp32 sharded parameter (4 + g bytes
  // per element) and copied into the gather's input buffer (2 g): bf16, 10 B per shard element; with
  // torchao's fp8 gather of the layers (g = 1) 7 B. FSDP1 gathers into its flat parameter in place:
  // no copy-out, the shard cast alone (6 B per element in bf16).
  for (const auto& [impl, fp8] : {std::pair{model::FsdpImpl::fsdp2, false}, std::pair{model::FsdpImpl::fsdp2, true},
                                  std::pair{model::FsdpImpl::fsdp1, false}}) {
    TpspRequest r = request(2, 2, Scope::step, 2);
    r.step.dp_sharding = model::DpSharding::zero3;
    r.step.fsdp = impl;
    if (fp8) {
      r.shape.dtype = topo::Dtype::fp8;
      r.step.fp8_param_gather = true;
    }
    const Schedule s = generate_tpsp(r);
    validate(s.graph);
    const std::vector<TaskId> next = stream_successors(s.graph);
    int gathers = 0, copies = 0;
    for (TaskId id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      if (t.labels.op == "fsdp_copy_out") ++copies;
      const auto* c = std::get_if<CollectiveTask>(&t.kind);
      if (c == nullptr || t.labels.op != "dp_param_all_gather") continue;
      ++gathers;
      INFO(t.name << (impl == model::FsdpImpl::fsdp1 ? " fsdp1" : " fsdp2") << (fp8 ? " fp8" : ""));
      const std::int64_t g = fp8 && t.labels.layer >= 0 ? 1 : 2;
      const std::int64_t shard = (c->bytes / g + 1) / 2;  // E / dp, rounded up
      const TaskId in = predecessor_with_op(s.graph, id, "fsdp_gather_copy_in");
      CHECK(s.graph.task(in).stream == StreamRef{StreamKind::compute, 2});
      CHECK(copy_bytes(s.graph, in) == shard * (4 + g + (impl == model::FsdpImpl::fsdp2 ? 2 * g : 0)));
      if (impl == model::FsdpImpl::fsdp1) continue;
      TaskId out = kNoTask;
      for (TaskId q = 0; q < s.graph.size(); ++q)
        if (s.graph.task(q).labels.op == "fsdp_copy_out") {
          const auto preds = s.graph.predecessors(q);
          if (std::find(preds.begin(), preds.end(), id) != preds.end()) out = q;
        }
      REQUIRE(out != kNoTask);
      const Task& o = s.graph.task(out);
      CHECK(o.stream == StreamRef{StreamKind::compute, 0});
      CHECK(copy_bytes(s.graph, out) == 2 * c->bytes);
      // What runs next on the compute stream is the module's own first kernel.
      REQUIRE(next[out] != kNoTask);
      const std::string_view first = s.graph.task(next[out]).name;
      const std::string module(o.name.substr(0, o.name.size() - std::string("/fsdp_copy_out").size()));
      if (t.labels.layer >= 0)
        CHECK(first.rfind(module + "/", 0) == 0);
      else
        CHECK(first.find("embedding/fwd/lookup") != std::string::npos);
    }
    // Per rank and micro-batch: the root and the 3 layers forward, the 3 layers backward; 4 ranks.
    CHECK(gathers == 4 * 2 * 7);
    CHECK(copies == (impl == model::FsdpImpl::fsdp2 ? gathers : 0));
  }
}

TEST_CASE("FSDP packs the gradients before each reduce-scatter: FSDP2's chunk-cat, FSDP1's cat and cast",
          "[step][dp]") {
  // Before a reduce-scatter of E gradient elements (R bytes, r per element in the reduce type) the
  // gradients autograd left in bf16 (p = 2) are packed, once they are done, on the compute stream:
  // FSDP2's _chunk_cat into the reduce-scatter's input, reading p and writing r per element,
  // E (p + r) bytes; FSDP1's autograd concatenating its views' gradients into the flat one, 2 p E,
  // then, where r differs from p, the cast into the reduce type on its post-backward stream
  // (compute stream 3 here), E (p + r). fp32 reduction (r = 4, R = 4 E): FSDP2 1.5 R, FSDP1 R then
  // 1.5 R; bf16 reduction (R = 2 E): FSDP2 2 R, FSDP1 2 R and no cast. Every reduce-scatter of the
  // step: the per-layer ones of the micro-batches before the last and the last one's buckets.
  for (const auto impl : {model::FsdpImpl::fsdp2, model::FsdpImpl::fsdp1})
    for (const auto reduce : {topo::Dtype::fp32, topo::Dtype::bf16}) {
      TpspRequest r = request(2, 2, Scope::step, 2);
      r.step.dp_sharding = model::DpSharding::zero3;
      r.step.fsdp = impl;
      r.step.grad_dtype = reduce;
      const Schedule s = generate_tpsp(r);
      validate(s.graph);
      int reduced = 0, packs = 0;
      for (TaskId id = 0; id < s.graph.size(); ++id) {
        const Task& t = s.graph.task(id);
        if (t.labels.op.rfind("fsdp_grad_", 0) == 0) ++packs;
        const auto* c = std::get_if<CollectiveTask>(&t.kind);
        if (c == nullptr || t.labels.op != "dp_reduce_scatter") continue;
        ++reduced;
        INFO(t.name);
        const Bytes R = c->bytes;
        if (impl == model::FsdpImpl::fsdp2) {
          const TaskId in = predecessor_with_op(s.graph, id, "fsdp_grad_copy_in");
          CHECK(s.graph.task(in).stream == StreamRef{StreamKind::compute, 0});
          CHECK(copy_bytes(s.graph, in) * (reduce == topo::Dtype::fp32 ? 2 : 1) == (reduce == topo::Dtype::fp32 ? 3 : 2) * R);
        } else if (reduce == topo::Dtype::fp32) {
          const TaskId cast = predecessor_with_op(s.graph, id, "fsdp_grad_cast");
          CHECK(s.graph.task(cast).stream == StreamRef{StreamKind::compute, 3});
          CHECK(2 * copy_bytes(s.graph, cast) == 3 * R);
          const TaskId cat = predecessor_with_op(s.graph, cast, "fsdp_grad_cat");
          CHECK(s.graph.task(cat).stream == StreamRef{StreamKind::compute, 0});
          CHECK(copy_bytes(s.graph, cat) == R);
        } else {
          const TaskId cat = predecessor_with_op(s.graph, id, "fsdp_grad_cat");
          CHECK(copy_bytes(s.graph, cat) == 2 * R);
        }
      }
      CHECK(reduced > 0);
      CHECK(packs == reduced * (impl == model::FsdpImpl::fsdp1 && reduce == topo::Dtype::fp32 ? 2 : 1));
    }
}

TEST_CASE("FSDP's copies only where FSDP runs: not with DDP or ZeRO-1, no packing before CommFuse's DP ring",
          "[step][dp]") {
  // The copies belong to ZeRO-3 as FSDP runs it. CommFuse over DP sends each gradient part from where
  // its piece GEMM wrote it, with no reduce-scatter input to pack; its layers still come out of FSDP's
  // gathers (tp 2 x dp 2, 3 layers, one micro-batch: 7 gathers per rank, 28 copy-outs).
  const auto ops = [](model::DpSharding sharding, ScheduleKind dp_kind) {
    TpspRequest r = request(2, 2, Scope::step);
    r.step.dp_sharding = sharding;
    r.dp_kind = dp_kind;
    const Schedule s = generate_tpsp(r);
    validate(s.graph);
    std::map<std::string, int> n;
    for (TaskId id = 0; id < s.graph.size(); ++id)
      if (s.graph.task(id).labels.op.rfind("fsdp_", 0) == 0) ++n[std::string(s.graph.task(id).labels.op)];
    return n;
  };
  CHECK(ops(model::DpSharding::ddp, ScheduleKind::baseline).empty());
  CHECK(ops(model::DpSharding::zero1, ScheduleKind::baseline).empty());
  const auto fused = ops(model::DpSharding::zero3, ScheduleKind::commfuse);
  CHECK(fused.at("fsdp_copy_out") == 28);
  CHECK(fused.at("fsdp_gather_copy_in") == 28);
  CHECK(fused.count("fsdp_grad_copy_in") == 0);
}

TEST_CASE("reshard_after_forward: torchtitan's last layer and 'never' skip their backward gathers", "[step][dp]") {
  // tp 2 x dp 2 ZeRO-3 (FSDP2), 3 layers, 2 micro-batches. Per rank and micro-batch FSDP gathers the
  // root and the 3 layers for the forward; for the backward, `always` gathers the 3 layers again (7
  // gathers), torchtitan's all_but_last layers 1 and 0 only (6: layer 2 stays gathered from its
  // forward), `never` none (4). Each gather has its copy-out. 4 ranks x 2 micro-batches.
  const auto run = [](model::ReshardAfterForward policy) {
    TpspRequest r = request(2, 2, Scope::step, 2);
    r.step.dp_sharding = model::DpSharding::zero3;
    r.step.reshard_after_forward = policy;
    const Schedule s = generate_tpsp(r);
    validate(s.graph);
    std::map<std::string, int> n;  // gathers and copy-outs, by pass and layer
    for (TaskId id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      if (t.labels.op != "dp_param_all_gather" && t.labels.op != "fsdp_copy_out") continue;
      const bool bwd = t.name.find("/bwd/") != std::string::npos;
      ++n[fmt::format("{} {} {}", t.labels.op == "fsdp_copy_out" ? "copy" : "ag", bwd ? "bwd" : "fwd",
                      t.labels.layer >= 0 ? fmt::format("L{}", t.labels.layer) : "root")];
    }
    return n;
  };
  using model::ReshardAfterForward;
  const auto always = run(ReshardAfterForward::always);
  const auto last = run(ReshardAfterForward::all_but_last);
  const auto never = run(ReshardAfterForward::never);
  for (const auto* n : {&always, &last, &never}) {
    for (const char* what : {"ag fwd root", "ag fwd L0", "ag fwd L1", "ag fwd L2", "copy fwd root", "copy fwd L0",
                             "copy fwd L1", "copy fwd L2"})
      CHECK(n->at(what) == 8);
  }
  CHECK(always.size() == 14);
  for (const char* what : {"ag bwd L0", "ag bwd L1", "ag bwd L2", "copy bwd L0", "copy bwd L1", "copy bwd L2"})
    CHECK(always.at(what) == 8);
  CHECK(last.size() == 12);
  for (const char* what : {"ag bwd L0", "ag bwd L1", "copy bwd L0", "copy bwd L1"}) CHECK(last.at(what) == 8);
  CHECK(never.size() == 8);
  // Layer 2's backward, kept gathered, starts from the head's gradient alone: in micro-batch 0 of rank
  // 0, no gather or copy-out among the ancestors its first kernel has after the LM head's backward.
  TpspRequest r = request(2, 2, Scope::step, 2);
  r.step.dp_sharding = model::DpSharding::zero3;
  r.step.reshard_after_forward = ReshardAfterForward::all_but_last;
  const Schedule s = generate_tpsp(r);
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.rank != 0 || t.name.rfind("L2/bwd/", 0) != 0) continue;
    for (TaskId p : s.graph.predecessors(id)) {
      INFO(t.name << " <- " << s.graph.task(p).name);
      CHECK(s.graph.task(p).labels.op != "fsdp_copy_out");
      CHECK(s.graph.task(p).labels.op != "dp_param_all_gather");
    }
  }
}

TEST_CASE("Per-op recomputation and separate projections are refused with Ulysses, naming the key", "[step]") {
  // torchtitan's policy re-runs K's projection; with Ulysses K would also cross the all-to-all again,
  // which the recomputation does not emit: the generator refuses rather than under-count. Ulysses
  // projects each head group's block of QKV apart already, so separate projections are refused too
  // (torchtitan, whose policy and projections these are, has no Ulysses), and so is torch.split's
  // gradient cat (the frameworks that split so have no Ulysses).
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  const std::vector<std::pair<std::string, std::function<void(model::Workload&)>>> refused{
      {"$.training.recompute", [](model::Workload& w) { w.recompute = model::Recompute::op; }},
      {"$.training.projections", [](model::Workload& w) { w.separate_projections = true; }},
      {"$.training.qkv_grad_cat", [](model::Workload& w) { w.qkv_grad_cat = true; }}};
  for (const auto& [path, set] : refused) {
    model::Workload w = model::load_workload("llama-3-8b-ulysses");
    w.arch.layers = 1;
    set(w);
    GenerateOptions o;
    o.scope = Scope::layer;
    try {
      generate(w, "llama-3-8b-ulysses", c, ScheduleKind::baseline, o);
      FAIL(path << " with up 4 was accepted");
    } catch (const fusesim::InputError& e) {
      CHECK(e.json_path() == path);
      CHECK(e.file() == "llama-3-8b-ulysses");
    }
    w.parallel.up = 1;
    CHECK_NOTHROW(generate(w, "llama-3-8b-ulysses", c, ScheduleKind::baseline, o));
  }
}

TEST_CASE("Per-op recomputation re-runs the GEMMs whose outputs the backward reads and no policy saved", "[step]") {
  // torchtitan's op policy saves wq, wv, w1 and w2 (every second mm not) and attention; the backward
  // reads K (attention's backward), the up half of FC1 (the activation's backward) and the first
  // residual add (norm 2's backward), which adds wo's output: without TP wo runs again too, with TP the
  // reduce-scatter's output the add reads is saved. Llama-3-8B, S = 8192 rows, h = 4096, 8 KV heads of
  // 128, FFN 14336. TP 1: k_proj [8192, 1024, 4096], out_proj [8192, 4096, 4096], fc1_up
  // [8192, 14336, 4096]; TP 8 (rank 0, the gathered sequence): k_proj [8192, 128, 4096] and fc1_up
  // [8192, 1792, 4096] only. (On one H200 the compiled torchtitan block ran 3 GEMMs again per layer.)
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100");
  model::Workload w = model::load_workload("llama-3-8b");
  w.arch.layers = 1;
  w.recompute = model::Recompute::op;
  GenerateOptions o;
  o.scope = Scope::layer;
  const auto recomputed = [&](int tp) {
    w.parallel.tp = tp;
    w.parallel.dp = 8 / tp;
    const Schedule s = generate(w, "llama-3-8b", c, ScheduleKind::baseline, o);
    std::vector<std::pair<std::string, std::array<std::int64_t, 3>>> gemms;
    for (TaskId id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      const auto* ct = std::get_if<ComputeTask>(&t.kind);
      if (t.rank != 0 || ct == nullptr || !ct->recompute) continue;
      if (const auto* k = std::get_if<model::GemmKernel>(&ct->kernel.get()))
        gemms.push_back({std::string(t.labels.op), {k->m, k->n, k->k}});
    }
    return gemms;
  };
  using G = std::vector<std::pair<std::string, std::array<std::int64_t, 3>>>;
  CHECK(recomputed(1) ==
        G{{"k_proj", {8192, 1024, 4096}}, {"out_proj", {8192, 4096, 4096}}, {"fc1_up", {8192, 14336, 4096}}});
  CHECK(recomputed(8) == G{{"k_proj", {8192, 128, 4096}}, {"fc1_up", {8192, 1792, 4096}}});
}

TEST_CASE("A step refuses a vocabulary that does not split over tp", "[step]") {
  TpspRequest r = request(4, 1, Scope::step);
  r.step.vocab = 30;
  CHECK_THROWS_AS(generate_tpsp(r), fusesim::InputError);
}

TEST_CASE("A step generated from a workload uses Megatron's padded vocabulary", "[step]") {
  // Llama-3-8B at TP 8: the vocabulary 128,256 padded to a multiple of 128 x 8 = 1024 is 129,024
  // (ceil(125.25) = 126 x 1024), 16,128 rows per TP rank; with vocab_divisible_by 1 only to a
  // multiple of 8: 128,256 = 8 x 16,032 as it is. Tokens per TP group S = 8192.
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100");
  model::Workload w = model::load_workload("llama-3-8b");
  w.arch.layers = 1;
  REQUIRE(w.parallel.tp == 8);
  GenerateOptions o;
  o.scope = Scope::step;
  for (const auto& [divisible_by, rows] : {std::pair<std::int64_t, std::int64_t>{128, 16'128}, {1, 16'032}}) {
    w.arch.vocab_divisible_by = divisible_by;
    const Schedule s = generate(w, "llama-3-8b", c, ScheduleKind::commfuse, o);
    int heads = 0, wgrads = 0;
    for (TaskId id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      const auto* ct = std::get_if<ComputeTask>(&t.kind);
      if (ct == nullptr) continue;
      if (t.labels.op == "lm_head") {
        const auto& k = std::get<model::GemmKernel>(ct->kernel.get());
        CHECK(k.m == 8192);
        CHECK(k.n == rows);
        CHECK(k.k == 4096);
        ++heads;
      }
      if (t.labels.op == "lm_head_wgrad") {
        const auto& k = std::get<model::GemmKernel>(ct->kernel.get());
        CHECK(k.n == rows);  // the LM head's weight gradient [h, V_t/tp]
        ++wgrads;
      }
    }
    CHECK(heads == 8);
    CHECK(wgrads == 8);
  }
}

TEST_CASE("the step assembler's accumulation order, by hand", "[sched][step]") {
  // Two micro-batches of two layers: mb 0 forward (begin, L0, L1), backward (begin, L1, L0, end),
  // then mb 1 likewise: 2 x (3 + 4) = 14 pieces.
  using sched::StepPhase;
  using sched::StepWork;
  const std::vector<StepWork> want = {
      {StepPhase::forward_begin, 0, -1},  {StepPhase::forward_layer, 0, 0},  {StepPhase::forward_layer, 0, 1},
      {StepPhase::backward_begin, 0, -1}, {StepPhase::backward_layer, 0, 1}, {StepPhase::backward_layer, 0, 0},
      {StepPhase::backward_end, 0, -1},   {StepPhase::forward_begin, 1, -1}, {StepPhase::forward_layer, 1, 0},
      {StepPhase::forward_layer, 1, 1},   {StepPhase::backward_begin, 1, -1}, {StepPhase::backward_layer, 1, 1},
      {StepPhase::backward_layer, 1, 0},  {StepPhase::backward_end, 1, -1}};
  CHECK(sched::accumulation_order(2, 2, true, true) == want);
  // Forward only: begin and the layers per micro-batch; backward only: the backward's pieces.
  CHECK(sched::accumulation_order(1, 3, true, false).size() == 4);
  const std::vector<StepWork> bwd = sched::accumulation_order(1, 2, false, true);
  CHECK(bwd == std::vector<StepWork>(want.begin() + 3, want.begin() + 7));
}
