// TPSP generator: task counts, ring chunk order, GEMM shapes, validity of every generated graph.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "fusesim/sched/dataflow.hpp"
#include "fusesim/sched/tpsp.hpp"
#include "fusesim/util/error.hpp"
#include "sched_test_util.hpp"

using namespace fusesim;
using namespace fusesim::sched;
using model::ScheduleKind;

namespace {

TpspRequest piece(TpspPiece p, int t, ScheduleKind kind, int k = 1) {
  TpspRequest r;
  r.shape = test::small_tp_shape(t);
  r.kind = kind;
  r.schedule.slices = k;
  r.piece = p;
  r.piece_k = 16 * t;
  r.piece_n = 16 * t;
  return r;
}

// Compute tasks of one op on one rank, in the order they were added (= compute stream order).
std::vector<const Task*> ops_on(const TaskGraph& g, int rank, const std::string& op) {
  std::vector<const Task*> v;
  for (TaskId id = 0; id < g.size(); ++id)
    if (g.task(id).rank == rank && g.task(id).labels.op == op) v.push_back(&g.task(id));
  return v;
}

// The element-wise kernel of rank 0's first task of `op`.
model::ElementwiseKernel ew(const TaskGraph& g, const std::string& op) {
  return std::get<model::ElementwiseKernel>(std::get<ComputeTask>(ops_on(g, 0, op).at(0)->kind).kernel.get());
}

// The GEMM of rank 0's first task of `op`.
model::GemmKernel gemm_of(const TaskGraph& g, const std::string& op) {
  return std::get<model::GemmKernel>(std::get<ComputeTask>(ops_on(g, 0, op).at(0)->kind).kernel.get());
}

}  // namespace

TEST_CASE("task counts per rank of AG+GEMM and GEMM+RS in every schedule", "[sched][tpsp]") {
  for (int t : {2, 4, 8}) {
    // Baseline: one collective and one GEMM per rank.
    for (auto p : {TpspPiece::ag_gemm, TpspPiece::gemm_rs}) {
      auto c = test::count_per_rank(generate_tpsp(piece(p, t, ScheduleKind::baseline)).graph);
      REQUIRE(c.size() == static_cast<std::size_t>(t));
      for (auto& [r, n] : c) {
        CHECK(n.collectives == 1);
        CHECK(n.compute == 1);
        CHECK(n.sends + n.recvs == 0);
      }
    }
    // Slice-overlap with k slices: k collectives and k GEMM slices per rank.
    for (int k : {1, 2, 4})
      for (auto p : {TpspPiece::ag_gemm, TpspPiece::gemm_rs}) {
        auto c = test::count_per_rank(generate_tpsp(piece(p, t, ScheduleKind::slice, k)).graph);
        for (auto& [r, n] : c) {
          CHECK(n.collectives == k);
          CHECK(n.compute == k);
        }
      }
    // Fuse-AG: t GEMM steps, t-1 sends, t-1 receives per rank, no collective.
    const auto counts_ag_gemm =
        test::count_per_rank(generate_tpsp(piece(TpspPiece::ag_gemm, t, ScheduleKind::commfuse)).graph);
    for (auto& [r, n] : counts_ag_gemm) {
      CHECK(n.compute == t);
      CHECK(n.sends == t - 1);
      CHECK(n.recvs == t - 1);
      CHECK(n.collectives == 0);
    }
    // Fuse-RS: t GEMM steps plus t-1 adds (steps 1..t-1), t-1 sends (steps 0..t-2), t-1 receives.
    const auto counts_gemm_rs =
        test::count_per_rank(generate_tpsp(piece(TpspPiece::gemm_rs, t, ScheduleKind::commfuse)).graph);
    for (auto& [r, n] : counts_gemm_rs) {
      CHECK(n.compute == t + (t - 1));
      CHECK(n.adds == t - 1);
      CHECK(n.sends == t - 1);
      CHECK(n.recvs == t - 1);
    }
  }
}

TEST_CASE("task counts of a whole layer, forward and backward", "[sched][tpsp]") {
  TpspRequest r;
  r.shape = test::small_tp_shape(4);
  r.options.scope = Scope::layer;
  r.options.backward = false;
  // Forward baseline per rank: ln1, AG, qkv, attention, out_proj, RS, residual1, ln2, AG, fc1, act,
  // fc2, RS, residual2 = 14.
  r.kind = ScheduleKind::baseline;
  auto g = generate_tpsp(r).graph;
  CHECK(g.size() == 4 * 14);
  // CommFuse forward, t = 4: 6 element-wise/attention tasks; each Fuse-AG t + 2(t-1) = 10 tasks; each
  // Fuse-RS t + 3(t-1) = 13 tasks (GEMM, add, send, recv): 6 + 2x10 + 2x13 = 52.
  r.kind = ScheduleKind::commfuse;
  CHECK(generate_tpsp(r).graph.size() == 4 * 52);
  // Query-split: attention moves into the Fuse-RS steps (t attention tasks instead of one): 52 + 3.
  r.schedule.query_split_attention = true;
  auto qs = generate_tpsp(r).graph;
  CHECK(qs.size() == 4 * 55);
  CHECK(ops_on(qs, 0, "attention").size() == 4);
  // Backward baseline per rank: AG+fc2_dgrad 2, fc2_wgrad 1, act_bwd 1, fc1_dgrad+RS 2, AG+fc1_wgrad 2,
  // ln2_bwd+residual 2, AG+out_proj_dgrad 2, out_proj_wgrad 1, attention_bwd 1, qkv_dgrad+RS 2,
  // AG+qkv_wgrad 2, ln1_bwd+residual 2 = 20.
  r.kind = ScheduleKind::baseline;
  r.schedule.query_split_attention = false;
  r.options.forward = false;
  r.options.backward = true;
  CHECK(generate_tpsp(r).graph.size() == 4 * 20);
  // Stack of 2 layers forward + backward: 2 x (14 + 20) per rank.
  r.options.forward = true;
  r.options.scope = Scope::stack;
  CHECK(generate_tpsp(r).graph.size() == 4 * 2 * 34);
}

TEST_CASE("Fuse-AG and Fuse-RS visit chunks in the order of the design note", "[sched][tpsp]") {
  for (int t : {2, 3, 4, 8}) {
    const auto ag = generate_tpsp(piece(TpspPiece::ag_gemm, t, ScheduleKind::commfuse)).graph;
    const auto rs = generate_tpsp(piece(TpspPiece::gemm_rs, t, ScheduleKind::commfuse)).graph;
    for (int r = 0; r < t; ++r) {
      auto gemms = ops_on(ag, r, "gemm");
      auto sends = ops_on(ag, r, "send");
      auto recvs = ops_on(ag, r, "recv");
      REQUIRE(gemms.size() == static_cast<std::size_t>(t));
      for (int i = 0; i < t; ++i) {
        // Step i computes chunk (r - i) mod t: own chunk first.
        CHECK(gemms[i]->labels.chunk == ((r - i) % t + t) % t);
        CHECK(gemms[i]->labels.step == i);
        if (i == t - 1) continue;
        // ... sends that same chunk to r+1 and receives (r - i - 1) mod t from r-1.
        CHECK(sends[i]->labels.chunk == ((r - i) % t + t) % t);
        CHECK(std::get<SendTask>(sends[i]->kind).peer == (r + 1) % t);
        CHECK(recvs[i]->labels.chunk == ((r - i - 1) % t + t) % t);
        CHECK(std::get<RecvTask>(recvs[i]->kind).peer == (r + t - 1) % t);
      }
      auto parts = ops_on(rs, r, "gemm");
      auto adds = ops_on(rs, r, "add");
      REQUIRE(parts.size() == static_cast<std::size_t>(t));
      for (int i = 0; i < t; ++i) CHECK(parts[i]->labels.chunk == ((r - 1 - i) % t + t) % t);
      // The own chunk is computed last and finished by the last add.
      CHECK(parts.back()->labels.chunk == r);
      CHECK(adds.back()->labels.chunk == r);
    }
  }
}

TEST_CASE("every generated graph passes validate() with unique names and tags", "[sched][tpsp]") {
  for (int t : {1, 2, 4, 8})
    for (auto kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse})
      for (bool qs : {false, true}) {
        TpspRequest r;
        r.shape = test::small_tp_shape(t);
        r.shape.kv_heads = 1;  // GQA replicated on every rank
        r.shape.dp = 2;
        r.kind = kind;
        r.schedule.slices = 4;
        r.schedule.query_split_attention = qs;
        r.schedule.p2p_engine = qs ? model::CommEngine::sm_kernel : model::CommEngine::copy_engine;
        r.options.scope = Scope::stack;
        const Schedule s = generate_tpsp(r);
        INFO("t=" << t << " kind=" << model::to_string(kind) << " qs=" << qs);
        CHECK_NOTHROW(validate(s.graph));
        CHECK(s.gpus == 2 * t);
        CHECK(s.tokens == 2 * 8 * t);  // sequence x micro batch x dp
        std::set<std::string> names;
        std::set<std::tuple<int, int, std::int64_t>> tags;
        for (TaskId id = 0; id < s.graph.size(); ++id) {
          const Task& task = s.graph.task(id);
          CHECK(names.insert(std::string(task.name)).second);
          // The DP replicas' gradient sync (dp_test.cpp): one baseline all-reduce per rank.
          if (task.labels.region >= 0 && s.graph.regions().at(task.labels.region).parallelism == Parallelism::dp) continue;
          CHECK(task.name.rfind(fmt::format("r{}/L", task.rank), 0) == 0);
          CHECK(task.labels.phase != Phase::none);
          CHECK(!task.labels.op.empty());
          if (const auto* send = std::get_if<SendTask>(&task.kind)) {
            CHECK(tags.insert({task.rank, send->peer, send->tag}).second);
            CHECK(task.stream.kind == (qs ? StreamKind::comm : StreamKind::copy));
          }
          if (task.labels.region >= 0) CHECK(s.graph.regions().at(task.labels.region).parallelism == Parallelism::tpsp);
        }
        // Per layer: 4 forward regions (ag+qkv, out_proj+rs, ag+fc1, fc2+rs) and 6 backward
        // (ag+fc2_dgrad, fc1_dgrad+rs, ag+fc1_wgrad, ag+out_proj_dgrad, qkv_dgrad+rs, ag+qkv_wgrad).
        // Plus the DP sync of the two replicas (region "dp/sync").
        CHECK(s.graph.regions().size() == 2 * (4 + 6) + 1);
      }
}

TEST_CASE("GEMM shapes of Llama-3-70B at TP 8 count GQA and the gated MLP", "[sched][tpsp]") {
  // Llama-3-70B: h 8192, 64 query heads, 8 kv heads, head_dim 128, ffn 28672, SwiGLU.
  TpspRequest r;
  r.shape = TpspShape{8, 1, 1, 8192, 1, 8192, 64, 8, 128, 28672, true, true, 80, topo::Dtype::bf16, false};
  r.kind = ScheduleKind::baseline;
  r.options.backward = false;
  const auto g = generate_tpsp(r).graph;
  auto gemm = [&](const std::string& op) { return gemm_of(g, op); };
  // QKV: N = (q_width + 2 kv_width) / t = (64x128 + 2x8x128) / 8 = (8192 + 2048) / 8 = 1280, K = h = 8192,
  // M = s x b = 8192 (the gathered sequence).
  CHECK(gemm("qkv").n == 1280);
  CHECK(gemm("qkv").k == 8192);
  CHECK(gemm("qkv").m == 8192);
  // Out-projection: K = q_width / t = 1024, N = h.
  CHECK(gemm("out_proj").k == 1024);
  CHECK(gemm("out_proj").n == 8192);
  // FC1: N = 2 x 28672 / 8 = 7168 (gate and up); FC2: K = 28672 / 8 = 3584, N = 8192.
  CHECK(gemm("fc1").n == 7168);
  CHECK(gemm("fc1").k == 8192);
  CHECK(gemm("fc2").k == 3584);
  CHECK(gemm("fc2").n == 8192);
  const auto att = std::get<model::AttentionKernel>(std::get<ComputeTask>(ops_on(g, 0, "attention").at(0)->kind).kernel.get());
  CHECK(att.heads == 8);     // 64 / 8
  CHECK(att.kv_heads == 1);  // 8 / 8
  // TP 16: 8 kv heads cannot be split 16 ways; each rank keeps one (replicated):
  // N = 64 x 128 / 16 + 2 x 128 = 512 + 256 = 768.
  r.shape.tp = 16;
  r.shape.seq = 8192;
  const auto g16 = generate_tpsp(r).graph;
  CHECK(gemm_of(g16, "qkv").n == 768);
  CHECK(r.shape.kv_head0(3) == 1);  // rank 3 holds query heads 12..15, group of 8 -> kv head 1
}

TEST_CASE("Without sequence parallelism every TP rank runs the norms and residual adds on the whole sequence",
          "[sched][tpsp]") {
  // Llama-3-70B's layer shape at TP 8, s 8192: S = 8192 rows, n = S / 8 = 1024 per rank under SP.
  TpspRequest r;
  r.shape = TpspShape{8, 1, 1, 8192, 1, 8192, 64, 8, 128, 28672, true, true, 1, topo::Dtype::bf16, false};
  r.kind = ScheduleKind::baseline;
  const auto sp = generate_tpsp(r).graph;
  r.shape.sequence_parallel = false;
  const auto no_sp = generate_tpsp(r).graph;
  // The norm reads and writes [rows, 8192] bf16: 2 x rows x 8192 x 2 B; the residual add reads two and
  // writes one: 3 x rows x 8192 x 2 B. rows 1024 with SP, 8192 without.
  for (const std::string op : {"ln1", "ln2", "ln1_bwd", "ln2_bwd", "residual1", "residual2", "residual1_bwd",
                               "residual2_bwd"}) {
    INFO(op);
    CHECK(ew(sp, op).rows == 1024);
    CHECK(ew(no_sp, op).rows == 8192);
    CHECK(ew(no_sp, op).bytes == 8 * ew(sp, op).bytes);
  }
  CHECK(ew(sp, "ln1").bytes == 2 * 1024 * 8192 * 2);
  CHECK(ew(sp, "residual1").bytes == 3 * 1024 * 8192 * 2);
  // The activation runs on its FFN columns of the whole sequence either way; the GEMMs are the same.
  CHECK(ew(no_sp, "act").bytes == ew(sp, "act").bytes);
  for (const std::string op : {"qkv", "out_proj", "fc1", "fc2", "qkv_dgrad", "fc1_dgrad", "fc2_dgrad", "out_proj_dgrad",
                               "qkv_wgrad", "fc1_wgrad"}) {
    INFO(op);
    CHECK(gemm_of(no_sp, op).m == gemm_of(sp, op).m);
    CHECK(gemm_of(no_sp, op).n == gemm_of(sp, op).n);
    CHECK(gemm_of(no_sp, op).k == gemm_of(sp, op).k);
  }
}

TEST_CASE("The norms are emitted as the kernel the workload's framework ran", "[sched][tpsp]") {
  TpspRequest r;
  r.shape = TpspShape{8, 1, 1, 8192, 1, 8192, 64, 8, 128, 28672, true, true, 1, topo::Dtype::bf16, false};
  r.kind = ScheduleKind::baseline;
  const auto op_of = [](const TaskGraph& g, const std::string& name) { return ew(g, name).op; };
  const auto fused = generate_tpsp(r).graph;
  r.shape.norm_kernel = model::NormKernel::eager;
  const auto eager = generate_tpsp(r).graph;
  r.shape.norm_kernel = model::NormKernel::apex_legacy;
  const auto legacy = generate_tpsp(r).graph;
  for (const std::string ln : {"ln1", "ln2"}) {
    INFO(ln);
    CHECK(op_of(fused, ln) == "layernorm_train");
    CHECK(op_of(fused, ln + "_bwd") == "layernorm_train_bwd");
    CHECK(op_of(eager, ln) == "layernorm_eager");
    CHECK(op_of(eager, ln + "_bwd") == "layernorm_eager_bwd");
    CHECK(op_of(legacy, ln) == "layernorm_apex_legacy");
    CHECK(op_of(legacy, ln + "_bwd") == "layernorm_apex_legacy_bwd");
    // The kernel changes, not the work: the same bytes and rows.
    CHECK(ew(eager, ln).bytes == ew(fused, ln).bytes);
    CHECK(ew(legacy, ln + "_bwd").rows == ew(fused, ln + "_bwd").rows);
  }
}

TEST_CASE("Without sequence parallelism the baseline's TP communication is Megatron's all-reduces", "[sched][tpsp]") {
  // Llama-3-70B's layer at TP 8, s 8192, forward and backward. The forward all-reduces the out-projection's and
  // FC2's partial sums, the backward the QKV and FC1 dgrads' (ColumnParallelLinear's backward): four per layer,
  // each the whole sequence's [8192, 8192] bf16, 8192 x 8192 x 2 = 134,217,728 B, over the 8 ranks. Nothing is
  // gathered (a column-parallel GEMM's input, and the one its backward saved, is whole on every rank), nothing
  // reduce-scattered, where sequence parallelism runs 2 AG + 2 RS forward and 4 AG + 2 RS backward.
  TpspRequest r;
  r.shape = TpspShape{8, 1, 1, 8192, 1, 8192, 64, 8, 128, 28672, true, true, 1, topo::Dtype::bf16, false};
  r.kind = ScheduleKind::baseline;
  const auto sp = generate_tpsp(r).graph;
  CHECK(ops_on(sp, 0, "all_gather").size() == 6);
  CHECK(ops_on(sp, 0, "reduce_scatter").size() == 4);
  CHECK(ops_on(sp, 0, "all_reduce").empty());
  r.shape.sequence_parallel = false;
  const auto async = generate_tpsp(r).graph;
  CHECK(ops_on(async, 0, "all_gather").empty());
  CHECK(ops_on(async, 0, "reduce_scatter").empty());
  const auto ars = ops_on(async, 0, "all_reduce");
  REQUIRE(ars.size() == 4);
  for (const Task* t : ars) {
    const auto& c = std::get<CollectiveTask>(t->kind);
    CHECK(c.bytes == 134217728);
    CHECK(c.group.size() == 8);
  }
  // Whether FC1's wgrad waits for its dgrad's all-reduce: not with --async-tensor-model-parallel-allreduce
  // (Megatron-LM's default since September 2021; the wgrad follows the dgrad on the compute stream, the
  // all-reduce beside it), and before it, blocking.
  const auto id_of = [](const TaskGraph& g, const std::string& name) {
    for (TaskId id = 0; id < g.size(); ++id)
      if (g.task(id).name == name) return id;
    FAIL("no task " << name);
    return TaskId{0};
  };
  const auto waits = [&](const TaskGraph& g, const std::string& task, const std::string& on) {
    const auto preds = g.predecessors(id_of(g, task));
    return std::find(preds.begin(), preds.end(), id_of(g, on)) != preds.end();
  };
  CHECK_FALSE(waits(async, "r0/L0/bwd/fc1_wgrad", "r0/L0/bwd/fc1_dgrad+rs/ar"));
  CHECK(waits(async, "r0/L0/bwd/ln2_bwd", "r0/L0/bwd/fc1_dgrad+rs/ar"));
  r.shape.sync_tp_allreduce = true;
  const auto sync = generate_tpsp(r).graph;
  CHECK(waits(sync, "r0/L0/bwd/fc1_wgrad", "r0/L0/bwd/fc1_dgrad+rs/ar"));
  CHECK(sync.size() == async.size());
  // Slice-overlap and CommFuse cut sequence parallelism's collectives and keep them.
  r.kind = ScheduleKind::slice;
  r.schedule.slices = 2;
  const auto slice = generate_tpsp(r).graph;
  CHECK(ops_on(slice, 0, "all_reduce").empty());
  CHECK(ops_on(slice, 0, "all_gather").size() == 12);
}

TEST_CASE("Rotary embedding and eager element-wise kernels add the bytes they stream", "[sched][tpsp]") {
  // Llama-3-8B's layer at TP 1, s 8192, bf16: S = 8192 rows, q 32 x 128 = 4096 columns, k and v
  // 8 x 128 = 1024 each, FFN 14336 per branch, h 4096.
  TpspRequest r;
  r.shape = TpspShape{1, 1, 1, 8192, 1, 4096, 32, 8, 128, 14336, true, true, 1, topo::Dtype::bf16, false};
  r.kind = ScheduleKind::baseline;
  const auto plain = generate_tpsp(r).graph;
  r.shape.rotary = true;
  const auto fused = generate_tpsp(r).graph;
  r.shape.eager = true;
  r.shape.separate_projections = true;  // torchtitan's eager Llama (the workload's default with eager)
  const auto eager = generate_tpsp(r).graph;
  r.shape.eager = false;
  const auto separate = generate_tpsp(r).graph;
  const auto has = [](const TaskGraph& g, const std::string& op) { return !ops_on(g, 0, op).empty(); };
  const std::int64_t S = 8192, q = 4096, kv = 1024, f = 14336, h = 4096;
  // Fused: one rope kernel each way, reading and writing q and k once in bf16: 2 x S x (q + kv) x 2 B.
  CHECK(!has(plain, "rope"));
  CHECK(ew(fused, "rope").op == "rope");
  CHECK(ew(fused, "rope").bytes == 2 * S * (q + kv) * 2);
  CHECK(ew(fused, "rope_bwd").bytes == 2 * S * (q + kv) * 2);
  CHECK(fused.size() == plain.size() + 2);
  // Eager: bf16 -> fp32 (2 + 4 B per element), the complex multiply (fp32 in and out: 8 B), fp32 ->
  // bf16 (4 + 2 B), each way; no fused rope.
  CHECK(!has(eager, "rope"));
  CHECK(ew(eager, "rope_cast").bytes == S * (q + kv) * 6);
  CHECK(ew(eager, "rope_mul").bytes == S * (q + kv) * 8);
  CHECK(ew(eager, "rope_cast_back").bytes == S * (q + kv) * 6);
  CHECK(ew(eager, "rope_mul_bwd").bytes == S * (q + kv) * 8);
  // K and V repeated 4x to the 32 query heads: read 2 x S x kv, write 2 x S x q, bf16; summed back.
  CHECK(ew(eager, "repeat_kv").bytes == 2 * S * (kv + q) * 2);
  CHECK(ew(eager, "repeat_kv_bwd").bytes == 2 * S * (kv + q) * 2);
  // SwiGLU as silu (read and write S x f) then a multiply (read two, write one); backward two
  // multiplies, then silu's backward (read two, write one). Fused: one kernel reading gate and up and
  // writing one (3 S f), backward reading three and writing two (5 S f).
  CHECK(ew(fused, "act").bytes == 3 * S * f * 2);
  CHECK(ew(eager, "act").op == "silu");
  CHECK(ew(eager, "act").bytes == 2 * S * f * 2);
  CHECK(ew(eager, "act_mul").bytes == 3 * S * f * 2);
  CHECK(ew(fused, "act_bwd").bytes == 5 * S * f * 2);
  CHECK(ew(eager, "act_mul_bwd").bytes == 6 * S * f * 2);
  CHECK(ew(eager, "act_bwd").bytes == 3 * S * f * 2);
  // SDPA's output and its gradient copied between layouts: read and write S x q.
  CHECK(ew(eager, "attention_out_copy").bytes == 2 * S * q * 2);
  CHECK(ew(eager, "attention_grad_copy").bytes == 2 * S * q * 2);
  // The input gradients of q/k/v (two adds) and of gate/up (one add), each reading two and writing one
  // [S, h].
  CHECK(ew(eager, "qkv_dgrad_sum").bytes == 3 * S * h * 2);
  CHECK(ew(eager, "qkv_dgrad_sum2").bytes == 3 * S * h * 2);
  CHECK(ew(eager, "fc1_dgrad_sum").bytes == 3 * S * h * 2);
  // Counted against the separate projections' graph (whose GEMMs and sums these are): its 2 fused rope
  // kernels out, 6 rope + 2 repeat + 2 act + 2 copies in, and one more sum (eager adds two at a time:
  // q/k/v's in two kernels where torch.compile's one reads three) ...
  CHECK(eager.size() == separate.size() - 2 + 12 + 1);
  // ... over the fused graph's: 2 more forward GEMMs for q/k/v and 1 for gate/up, as many dgrads and
  // wgrads (9), and the fused rope's 2 kernels, each of q/k/v and gate/up's input-gradient sums (2).
  CHECK(separate.size() == plain.size() + 9 + 2 + 2);
  // None of it is model math: the GEMM FLOPs of the layer are those of the plain graph.
  CHECK(ew(eager, "rope_mul").flops == 0.0);
}

TEST_CASE("qkv_grad_cat: torch.split's backward copies the q, k and v gradients into one", "[sched][tpsp]") {
  // MPT-1B's layer as llm-foundry runs it at TP 1 (h 2048, 16 heads, micro-batch 8 x 2048 = S 16,384
  // rows, bf16): the fused Wqkv's output [S, 3 h] split into q, k and v; autograd's cat of their
  // gradients reads and writes S x 3h: 2 x 16,384 x 6,144 x 2 B = 402,653,184 B (the committed H100
  // trace's CatArrayBatchedCopy of [8, 2048, 2048] x 3, 0.138 ms per layer). It comes after the
  // attention's backward and before the QKV dgrad; one task more than without it.
  TpspRequest r;
  r.shape = TpspShape{1, 1, 1, 2048, 8, 2048, 16, 16, 128, 8192, false, true, 1, topo::Dtype::bf16, false};
  r.kind = ScheduleKind::baseline;
  const auto plain = generate_tpsp(r).graph;
  r.shape.qkv_grad_cat = true;
  const auto cat = generate_tpsp(r).graph;
  CHECK(ops_on(plain, 0, "qkv_grad_cat").empty());
  REQUIRE(cat.size() == plain.size() + 1);
  const model::ElementwiseKernel& k = ew(cat, "qkv_grad_cat");
  CHECK(k.op == "copy");
  CHECK(k.bytes == 402'653'184);
  CHECK(k.flops == 0.0);
  TaskId id = kNoTask;
  for (TaskId t = 0; t < cat.size(); ++t)
    if (cat.task(t).labels.op == "qkv_grad_cat") id = t;
  REQUIRE(id != kNoTask);
  bool after_attention = false;
  for (TaskId p : cat.predecessors(id)) after_attention |= cat.task(p).labels.op == "attention_bwd";
  CHECK(after_attention);
  bool before_dgrad = false;
  for (TaskId s : cat.successors(id)) before_dgrad |= cat.task(s).name.find("qkv_dgrad") != std::string::npos;
  CHECK(before_dgrad);
}

TEST_CASE("Separate projections: one GEMM per linear, their input gradients summed before the RS", "[sched][tpsp]") {
  // torchtitan's Llama 3.1 8B layer at TP 8, s 8192, micro-batch 1, bf16: S = 8192 rows, h 4096; per
  // rank q 32 / 8 x 128 = 512 columns, k and v 8 / 8 x 128 = 128 each (QKV 768 fused), FFN
  // 14336 / 8 = 1792 per branch (FC1 3584 fused).
  TpspRequest r;
  r.shape = TpspShape{8, 1, 1, 8192, 1, 4096, 32, 8, 128, 14336, true, true, 1, topo::Dtype::bf16, false};
  r.kind = ScheduleKind::baseline;
  const auto fused = generate_tpsp(r).graph;
  r.shape.separate_projections = true;
  const auto sep = generate_tpsp(r).graph;
  const std::int64_t S = 8192, h = 4096, q = 512, kv = 128, f = 1792;
  auto same = [](const model::GemmKernel& k, std::int64_t m, std::int64_t n, std::int64_t kk) {
    return k.m == m && k.n == n && k.k == kk;
  };
  CHECK(same(gemm_of(fused, "qkv"), S, q + 2 * kv, h));
  CHECK(ops_on(sep, 0, "qkv").empty());
  // Forward: [S, h] x [h, N] per projection.
  CHECK(same(gemm_of(sep, "qkv.q"), S, q, h));
  CHECK(same(gemm_of(sep, "qkv.k"), S, kv, h));
  CHECK(same(gemm_of(sep, "qkv.v"), S, kv, h));
  CHECK(same(gemm_of(sep, "fc1.gate"), S, f, h));
  CHECK(same(gemm_of(sep, "fc1.up"), S, f, h));
  // dgrad: [S, N] x [N, h] per projection, contracting over its own columns.
  CHECK(same(gemm_of(sep, "qkv_dgrad.q"), S, h, q));
  CHECK(same(gemm_of(sep, "qkv_dgrad.v"), S, h, kv));
  CHECK(same(gemm_of(sep, "fc1_dgrad.up"), S, h, f));
  // wgrad: [h, S] x [S, N] per projection, the last one completing the gradient.
  CHECK(same(gemm_of(sep, "qkv_wgrad.k"), h, kv, S));
  CHECK(same(gemm_of(sep, "qkv_wgrad.v"), h, kv, S));
  CHECK(same(gemm_of(sep, "fc1_wgrad.gate"), h, f, S));
  // torch.compile sums the three [S, h] input gradients in one kernel (reads three, writes one) and the
  // two of gate/up in another (reads two, writes one), bf16, on all S rows: before the reduce-scatter,
  // whose input the sum is.
  CHECK(ew(sep, "qkv_dgrad_sum").bytes == 4 * S * h * 2);
  CHECK(ew(sep, "fc1_dgrad_sum").bytes == 3 * S * h * 2);
  const Task* sum = ops_on(sep, 0, "qkv_dgrad_sum").at(0);
  bool rs_waits_for_sum = false;
  for (const Task* rs : ops_on(sep, 0, "reduce_scatter")) {
    TaskId id = 0;
    while (&sep.task(id) != rs) ++id;
    for (TaskId p : sep.predecessors(id)) rs_waits_for_sum |= &sep.task(p) == sum;
  }
  CHECK(rs_waits_for_sum);
  // The same arithmetic: the layer's FLOPs are the fused layer's.
  CHECK(test::graph_flops(sep) == test::graph_flops(fused));
}

TEST_CASE("Bias gradients: one reduction per linear over the rows of its output gradient", "[sched][tpsp]") {
  // A GPT layer at TP 4, s 2048, h 1024, 16 heads, ffn 4096, bf16: S = 2048 rows, n = 512 per rank.
  // Column-parallel QKV and FC1 sum their [S, N/t] output gradients: QKV N = 3 x 1024 / 4 = 768, FC1
  // 4096 / 4 = 1024; the row-parallel out-projection and FC2 biases follow the reduce-scatter, so
  // theirs are over the rank's n = 512 rows of [n, h]. Each reads rows x cols x 2 B and writes cols x 2 B.
  TpspRequest r;
  r.shape = TpspShape{4, 1, 1, 2048, 1, 1024, 16, 16, 64, 4096, false, true, 1, topo::Dtype::bf16, false};
  r.kind = ScheduleKind::baseline;
  const auto plain = generate_tpsp(r).graph;
  r.shape.bias_grad_kernels = true;
  const auto biased = generate_tpsp(r).graph;
  CHECK(ew(biased, "qkv_bias_grad").bytes == (2048 * 768 + 768) * 2);
  CHECK(ew(biased, "fc1_bias_grad").bytes == (2048 * 1024 + 1024) * 2);
  CHECK(ew(biased, "out_proj_bias_grad").bytes == (512 * 1024 + 1024) * 2);
  CHECK(ew(biased, "fc2_bias_grad").bytes == (512 * 1024 + 1024) * 2);
  CHECK(ew(biased, "fc2_bias_grad").rows == 512);
  CHECK(ew(biased, "qkv_bias_grad").op == "bias_grad");
  CHECK(ew(biased, "qkv_bias_grad").flops == 0.0);
  // Four per rank, nothing else.
  CHECK(biased.size() == plain.size() + 4 * 4);
}

TEST_CASE("Hidden dropout: masks written by the residual adds, read by the dropouts' backward", "[sched][tpsp]") {
  // The GPT layer of the bias test at TP 4: the residual adds run on n = 512 rows of h = 1024. Fused
  // bias-dropout-add reads two and writes one in bf16 and writes the 1-byte mask: (3 x 2 + 1) x 512 x
  // 1024 = 3,670,016 B instead of 3,145,728. Each dropout's backward reads the gradient and the mask
  // and writes the branch's gradient: (2 x 2 + 1) x 512 x 1024 = 2,621,440 B. The backward's residual
  // adds are plain adds.
  TpspRequest r;
  r.shape = TpspShape{4, 1, 1, 2048, 1, 1024, 16, 16, 64, 4096, false, true, 1, topo::Dtype::bf16, false};
  r.kind = ScheduleKind::baseline;
  const auto plain = generate_tpsp(r).graph;
  r.shape.hidden_dropout = true;
  const auto dropped = generate_tpsp(r).graph;
  for (const std::string op : {"residual1", "residual2"}) {
    CHECK(ew(plain, op).bytes == 3'145'728);
    CHECK(ew(dropped, op).bytes == 3'670'016);
    CHECK(ew(dropped, op).op == "dropout_add");
  }
  CHECK(ew(dropped, "residual2_bwd").bytes == 3'145'728);
  CHECK(ew(dropped, "residual1_dropout_bwd").bytes == 2'621'440);
  CHECK(ew(dropped, "residual2_dropout_bwd").bytes == 2'621'440);
  CHECK(dropped.size() == plain.size() + 2 * 4);
}

TEST_CASE("fp8 as Transformer Engine runs it: fp8 GEMMs after a cast, everything else bf16", "[sched][tpsp]") {
  TpspRequest r;
  r.shape = TpspShape{8, 1, 1, 8192, 1, 8192, 64, 8, 128, 28672, true, true, 2, topo::Dtype::fp8, false};
  r.kind = ScheduleKind::baseline;
  const auto g = generate_tpsp(r).graph;
  r.shape.dtype = topo::Dtype::bf16;
  const auto bf16 = generate_tpsp(r).graph;
  const auto dtype_of = [](const Task* t) { return std::get<ComputeTask>(t->kind).dtype; };
  // Every GEMM runs in fp8 and depends on a cast of its [m, k] operand: 3 bytes per element (bf16 read,
  // e4m3 written), FC1's forward on rank 0 m = 8192, k = 8192.
  const auto casts = ops_on(g, 0, "fp8_cast");
  REQUIRE_FALSE(casts.empty());
  const Task* fc1 = ops_on(g, 0, "fc1").at(0);
  CHECK(dtype_of(fc1) == topo::Dtype::fp8);
  const auto find = [&](const std::string& name) {
    for (TaskId id = 0; id < g.size(); ++id)
      if (g.task(id).name == name) return id;
    return kNoTask;
  };
  const TaskId fc1_id = find(std::string(fc1->name));
  const TaskId cast_id = find(fc1->name + "/fp8_cast");
  REQUIRE(cast_id != kNoTask);
  CHECK(g.predecessors(fc1_id) == std::vector<TaskId>{cast_id});
  const auto cast = std::get<model::ElementwiseKernel>(std::get<ComputeTask>(g.task(cast_id).kind).kernel.get());
  CHECK(cast.bytes == 3 * 8192 * 8192);
  CHECK(dtype_of(&g.task(cast_id)) == topo::Dtype::bf16);
  // One cast per GEMM, and the bf16 graph has the same GEMMs and no casts.
  std::size_t gemms = 0;
  for (TaskId id = 0; id < g.size(); ++id)
    if (const auto* c = std::get_if<ComputeTask>(&g.task(id).kind); c && std::holds_alternative<model::GemmKernel>(c->kernel.get()))
      ++gemms;
  CHECK(g.size() == bf16.size() + gemms);
  CHECK(ops_on(bf16, 0, "fp8_cast").empty());
  // Attention, norms and the TP collectives stay in bf16: the same bytes as the bf16 graph's.
  CHECK(dtype_of(ops_on(g, 0, "attention").at(0)) == topo::Dtype::bf16);
  const auto collective_bytes = [](const TaskGraph& graph) {
    Bytes b = 0;
    for (TaskId id = 0; id < graph.size(); ++id)
      if (const auto* c = std::get_if<CollectiveTask>(&graph.task(id).kind)) b += c->bytes;
    return b;
  };
  CHECK(collective_bytes(g) == collective_bytes(bf16));
  // Dynamic scaling (torchao's tensorwise recipe) reads each operand once more for its amax: 2 + 3 = 5
  // bytes per element, FC1's cast 5 x 8192 x 8192; the same tasks otherwise.
  r.shape.dtype = topo::Dtype::fp8;
  r.shape.fp8_dynamic_scaling = true;
  const auto dynamic = generate_tpsp(r).graph;
  CHECK(dynamic.size() == g.size());
  CHECK(std::get<model::ElementwiseKernel>(std::get<ComputeTask>(dynamic.task(cast_id).kind).kernel.get()).bytes ==
        5 * 8192 * 8192);
  CHECK(dynamic.task(cast_id).name == fc1->name + "/fp8_cast");
}

TEST_CASE("slice and CommFuse cut the GEMM rows, the sum is the whole sequence", "[sched][tpsp]") {
  // AG+GEMM on t = 4, S = 32 rows: slice k = 4 gives 4 GEMMs of 8 rows (2 positions from each of 4
  // chunks); CommFuse gives 4 GEMMs of one chunk of 8 rows.
  auto rows = [](const TaskGraph& g) {
    std::vector<std::int64_t> m;
    for (const Task* t : ops_on(g, 0, "gemm")) m.push_back(std::get<model::GemmKernel>(std::get<ComputeTask>(t->kind).kernel.get()).m);
    return m;
  };
  CHECK(rows(generate_tpsp(piece(TpspPiece::ag_gemm, 4, ScheduleKind::slice, 4)).graph) == std::vector<std::int64_t>{8, 8, 8, 8});
  CHECK(rows(generate_tpsp(piece(TpspPiece::ag_gemm, 4, ScheduleKind::commfuse)).graph) == std::vector<std::int64_t>{8, 8, 8, 8});
  CHECK(rows(generate_tpsp(piece(TpspPiece::ag_gemm, 4, ScheduleKind::baseline)).graph) == std::vector<std::int64_t>{32});
  // Causal query-split attention, t = 4, s = 32: chunk c sees (c + 1) x 8 keys from position 8c.
  TpspRequest r;
  r.shape = test::small_tp_shape(4);
  r.kind = ScheduleKind::commfuse;
  r.schedule.query_split_attention = true;
  r.options.backward = false;
  const auto g = generate_tpsp(r).graph;
  for (const Task* t : ops_on(g, 1, "attention")) {
    const auto a = std::get<model::AttentionKernel>(std::get<ComputeTask>(t->kind).kernel.get());
    CHECK(a.seq_q == 8);
    CHECK(a.q_offset == 8 * t->labels.chunk);
    CHECK(a.seq_kv == 8 * (t->labels.chunk + 1));
  }
}

TEST_CASE("collective sizes: full buffer n, ring engine from the schedule", "[sched][tpsp]") {
  // AG+GEMM, t = 4, S = 32 rows of K = 64 bf16: the all-gather output is 32 x 64 x 2 = 4096 bytes;
  // slice k = 2: 2048 per slice. Fuse-AG P2P chunk: 8 x 64 x 2 = 1024.
  auto bytes_of = [](const TaskGraph& g) {
    std::vector<Bytes> b;
    for (TaskId id = 0; id < g.size(); ++id) {
      if (g.task(id).rank != 0) continue;
      if (auto* c = std::get_if<CollectiveTask>(&g.task(id).kind)) b.push_back(c->bytes);
      if (auto* s = std::get_if<SendTask>(&g.task(id).kind)) b.push_back(s->bytes);
    }
    return b;
  };
  CHECK(bytes_of(generate_tpsp(piece(TpspPiece::ag_gemm, 4, ScheduleKind::baseline)).graph) == std::vector<Bytes>{4096});
  CHECK(bytes_of(generate_tpsp(piece(TpspPiece::ag_gemm, 4, ScheduleKind::slice, 2)).graph) == std::vector<Bytes>{2048, 2048});
  CHECK(bytes_of(generate_tpsp(piece(TpspPiece::ag_gemm, 4, ScheduleKind::commfuse)).graph) == std::vector<Bytes>{1024, 1024, 1024});
}

TEST_CASE("bad shapes and parallelisms are refused with the JSON path", "[sched][tpsp]") {
  auto path_of = [](TpspRequest r) {
    try {
      generate_tpsp(r);
    } catch (const InputError& e) {
      CHECK(e.file() == "w.json");
      return e.json_path();
    }
    return std::string("no error");
  };
  TpspRequest r;
  r.label = "w.json";
  r.shape = test::small_tp_shape(4);
  r.shape.heads = 6;  // 6 heads over 4 ranks
  CHECK(path_of(r) == "$.parallel.tp");
  r.shape = test::small_tp_shape(4);
  r.shape.seq = 30;
  CHECK(path_of(r) == "$.training.sequence_length");
  r.shape = test::small_tp_shape(4);
  r.kind = ScheduleKind::slice;
  r.schedule.slices = 16;  // 8 positions per chunk
  CHECK(path_of(r) == "$.schedule.slices");

  model::Workload w;
  w.arch.layers = 1;
  w.arch.hidden = 32;
  w.arch.heads = 4;
  w.arch.kv_heads = 4;
  w.arch.head_dim = 8;
  w.arch.ffn_hidden = 64;
  w.sequence_length = 16;
  w.parallel = model::Parallelism{2, 2, 1};
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100");  // 8 ranks
  // Ulysses (up > 1) is generated (sched/ulysses.hpp): the degree reaches the shape.
  CHECK(tpsp_request(w, "w.json", c, ScheduleKind::commfuse, GenerateOptions{}).shape.up == 2);
  w.parallel = model::Parallelism{4, 1, 4};  // 16 ranks on 8
  CHECK_THROWS_AS(tpsp_request(w, "w.json", c, ScheduleKind::commfuse, GenerateOptions{}), InputError);
  w.parallel = model::Parallelism{4, 1, 2};
  const Schedule s = generate(w, "w.json", c, ScheduleKind::commfuse, GenerateOptions{});
  CHECK(s.gpus == 8);
  CHECK(s.tokens == 32);
  // DP group 1 runs on ranks 4..7.
  std::set<int> ranks;
  for (TaskId id = 0; id < s.graph.size(); ++id) ranks.insert(s.graph.task(id).rank);
  CHECK(ranks == std::set<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("task counts per rank of a layer, forward and backward, in every schedule", "[sched][tpsp]") {
  // Per rank and layer: 14 compute tasks outside the regions (forward ln1, attention, residual1, ln2,
  // act, residual2; backward fc2_wgrad, act_bwd, ln2_bwd, residual2_bwd, out_proj_wgrad,
  // attention_bwd, ln1_bwd, residual1_bwd), 6 AG regions (forward ag+qkv, ag+fc1; backward
  // ag+fc2_dgrad, ag+fc1_wgrad, ag+out_proj_dgrad, ag+qkv_wgrad) and 4 RS regions (forward
  // out_proj+rs, fc2+rs; backward fc1_dgrad+rs, qkv_dgrad+rs). Per region:
  //   baseline: 1 collective + 1 GEMM;  slice: k collectives + k GEMMs;
  //   commfuse AG: t GEMMs, t-1 sends, t-1 receives; RS: also t-1 adds.
  // So baseline: 14 + 10 = 24 compute, 10 collectives; slice: 14 + 10k compute, 10k collectives;
  // commfuse: 14 + 6t + 4(2t - 1) = 10 + 14t compute (4(t-1) adds), 10(t-1) sends and receives.
  // Query-split moves the forward attention into the t steps of out_proj+rs: t-1 more compute.
  for (int t : {2, 3, 4, 8})
    for (auto kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse})
      for (int k : {1, 2, 4})
        for (bool qs : {false, true}) {
          if ((kind != ScheduleKind::slice && k > 1) || (qs && kind != ScheduleKind::commfuse)) continue;
          TpspRequest r;
          r.shape = test::small_tp_shape(t);
          r.shape.layers = 1;
          r.kind = kind;
          r.schedule.slices = k;
          r.schedule.query_split_attention = qs;
          const auto c = test::count_per_rank(generate_tpsp(r).graph);
          INFO("t=" << t << " " << model::to_string(kind) << " k=" << k << " qs=" << qs);
          REQUIRE(c.size() == static_cast<std::size_t>(t));
          for (const auto& [rank, n] : c) {
            if (kind == ScheduleKind::commfuse) {
              CHECK(n.compute == 10 + 14 * t + (qs ? t - 1 : 0));
              CHECK(n.adds == 4 * (t - 1));
              CHECK(n.sends == 10 * (t - 1));
              CHECK(n.recvs == 10 * (t - 1));
              CHECK(n.collectives == 0);
            } else {
              const int kk = kind == ScheduleKind::slice ? k : 1;
              CHECK(n.compute == 14 + 10 * kk);
              CHECK(n.collectives == 10 * kk);
              CHECK(n.sends + n.recvs + n.adds == 0);
            }
          }
        }
}
