// TPSP generator. The structure follows docs/schedules.md: a layer is a sequence of element-wise
// tasks and four overlapped regions per pass (AG -> column-parallel GEMM, row-parallel GEMM -> RS);
// the layer builder (sched/tpsp_builder.hpp) describes each region's compute as a callback on given
// sequence rows and hands the region to the requested schedule's strategy (sched/strategy.hpp), which
// lowers its communication. The same region code therefore serves the forward GEMMs, the backward
// dgrad/wgrad GEMMs and the query-split attention.
#include "fusesim/sched/tpsp.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "fusesim/sched/strategy.hpp"
#include "fusesim/sched/tpsp_builder.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/concat.hpp"

namespace fusesim::sched {

std::int64_t TpspShape::kv_heads_local() const {
  // With fewer kv heads than ranks each rank keeps the one kv head its query heads use (replicated,
  // as Megatron does for GQA with tp > num_query_groups).
  return kv_heads >= tp ? kv_heads / tp : 1;
}

std::int64_t TpspShape::kv_head0(int r) const {
  if (kv_heads >= tp) return r * (kv_heads / tp);
  const std::int64_t group = heads / kv_heads;  // query heads per kv head
  return (r * (heads / tp)) / group;
}

std::int64_t TpspShape::layer_params() const {
  return hidden * qkv_local() + q_local() * hidden + hidden * fc1_local() + ffn_local() * hidden;
}

namespace tpsp {


// AG -> GEMM. Every rank's shard `g.shard` [n, width] holds its own chunk once `ready` is done; the
// region gathers the chunks into `g.full` [S, width] (see Rows for the own chunk) and runs `work` on
// them, lowered by the schedule's strategy.
Deps Builder::ag_region(const OpCtx& ctx, const Rows& g, std::int64_t width, const Deps& ready, const WorkFn& work,
                        std::vector<std::vector<AgCall>>* plan, bool beside_dgrad) {
  const int region = region_id(ctx);
  const int region_index = region_count_++;
  if (plan != nullptr) {
    if (t_ > 1 && !strategy_.ring_steps())
      throw std::logic_error("TPSP generator: an AG region's calls recorded outside Fuse-AG");
    plan->assign(static_cast<std::size_t>(t_), {});
  }
  if (t_ > 1)
    return strategy_.all_gather(*this, RegionCall{ctx, region, region_index, width, ready, work, beside_dgrad}, g, plan,
                                beside_dgrad ? comm_.regather_stream : comm_.collective_stream);
  // One rank: nothing to gather.
  Deps done(1);
  if (plan != nullptr)
    (*plan)[0].push_back(AgCall{region, -1, {RowSpan{0, S()}}, "", -1, ready[0], {}});
  else
    done[0] = emit_work(ctx, 0, region, work, -1, {RowSpan{0, S()}}, "", -1, -1, true, ready[0]);
  return done;
}

// GEMM -> RS. `work` writes this rank's partial sums into `pbuf` [S, width]; the region leaves the
// reduced own chunk in `out` [n, width] (allocated here; `pbuf` itself when t = 1).
Deps Builder::rs_region(const OpCtx& ctx, const PerRank& pbuf, PerRank& out, std::int64_t width, const Deps& ready,
                        const WorkFn& work) {
  const int region = region_id(ctx);
  const int region_index = region_count_++;
  if (t_ == 1) {
    Deps done(1);
    done[0] = emit_work(ctx, 0, region, work, -1, {RowSpan{0, S()}}, "", -1, -1, true, ready[0]);
    out = pbuf;
    return done;
  }
  out = alloc(ctx, ctx.region + "/out", n(), width);
  return strategy_.reduce_scatter(*this, RegionCall{ctx, region, region_index, width, ready, work}, pbuf, out);
}

Deps Builder::qk_prologue(const OpCtx& ctx, const Deps& ready, bool backward) {
  const std::int64_t S_ = S(), qn = sh_.q_local(), kvn = sh_.kv_local();
  // Eager grouped-query attention materialises K and V at the query heads' width (torchtitan's
  // repeat_kv: expand, then reshape into a copy) before SDPA; the backward sums the copies back.
  const bool repeat = sh_.eager && qn > kvn;
  if (!sh_.rotary && !repeat) return ready;
  const std::int64_t rotated = S_ * (qn + kvn);  // query and key elements
  const std::string bwd = backward ? "_bwd" : "";
  Deps out(static_cast<std::size_t>(t_));
  for (int ti = 0; ti < emit_t_; ++ti) {
    std::vector<TaskId> d = ready[ti];
    if (repeat && backward) d = {stream_kernel(ctx, ti, "repeat_kv_bwd", "add", bytes(2 * S_ * (qn + kvn)), S_, d)};
    if (sh_.rotary && !sh_.eager) {
      d = {stream_kernel(ctx, ti, "rope" + bwd, "rope" + bwd, bytes(2 * rotated), S_, d)};
    } else if (sh_.rotary) {
      // torchtitan's apply_rotary_emb: q and k cast to fp32, multiplied as complex pairs by each
      // position's rotation, cast back: three passes, each a kernel; autograd runs the same three on
      // the gradients (the multiply by the conjugate rotation).
      d = {stream_kernel(ctx, ti, "rope_cast" + bwd, "cast", rotated * (elem_ + 4), S_, d)};
      d = {stream_kernel(ctx, ti, "rope_mul" + bwd, "complex_mul", rotated * 8, S_, d)};
      d = {stream_kernel(ctx, ti, "rope_cast_back" + bwd, "cast", rotated * (4 + elem_), S_, d)};
    }
    if (repeat && !backward) d = {stream_kernel(ctx, ti, "repeat_kv", "copy", bytes(2 * S_ * (kvn + qn)), S_, d)};
    out[ti] = std::move(d);
  }
  return out;
}

// SwiGLU reads gate and up, writes one; GELU reads and writes one. FLOPs: a handful per element.
TaskId Builder::activation(const OpCtx& ctx, int ti, std::int32_t data_op, const std::vector<TaskId>& deps) {
  const std::int64_t S_ = S(), f1 = sh_.fc1_local(), fl = sh_.ffn_local();
  const Flops flops = (sh_.gated ? 6.0 : 8.0) * S_ * fl;
  if (!(sh_.eager && sh_.gated))
    return elementwise(ctx, ti, "act", sh_.gated ? "swiglu" : "gelu", S_ * (f1 + fl), S_, flops, data_op, deps);
  // torchtitan's F.silu(w1(x)) * w3(x): silu reads the gate and writes its output, the multiply reads
  // that and the up half and writes the product.
  const TaskId silu = elementwise(ctx, ti, "act", "silu", 2 * S_ * fl, S_, flops, data_op, deps);
  return stream_kernel(ctx, ti, "act_mul", "swiglu_mul", bytes(3 * S_ * fl), S_, {silu});
}

TaskId Builder::activation_bwd(const OpCtx& ctx, int ti, std::int32_t data_op, const std::vector<TaskId>& deps) {
  const std::int64_t S_ = S(), f1 = sh_.fc1_local(), fl = sh_.ffn_local();
  if (!(sh_.eager && sh_.gated))
    return elementwise(ctx, ti, "act_bwd", sh_.gated ? "swiglu_bwd" : "gelu_bwd", S_ * (2 * f1 + fl), S_,
                       12.0 * S_ * fl, data_op, deps);
  // The multiply's backward is two multiplies (the gradient by each saved operand), then silu's
  // backward reads its gradient and the gate.
  const TaskId mul = stream_kernel(ctx, ti, "act_mul_bwd", "swiglu_mul_bwd", bytes(6 * S_ * fl), S_, deps);
  return elementwise(ctx, ti, "act_bwd", "silu_bwd", 3 * S_ * fl, S_, 12.0 * S_ * fl, data_op, {mul});
}

Builder::LayerOut Builder::forward_layer(int l, const PerRank& x, const Deps& ready) {
  const std::int64_t h = sh_.hidden, S_ = S(), n_ = n(), e_ = elementwise_rows();
  const std::int64_t qn = sh_.q_local(), kvn = sh_.kv_local(), qkvn = sh_.qkv_local();
  const std::int64_t f1 = sh_.fc1_local(), fl = sh_.ffn_local();
  const std::string wp = concat("L", l, "/");
  OpCtx ctx{l, true, "", data_};
  auto with = [&](std::string region) {
    OpCtx c = ctx;
    c.region = std::move(region);
    return c;
  };
  // Weight shards, from the unpartitioned weights of the reference computation.
  const std::int64_t Q = sh_.heads * sh_.head_dim, KV = sh_.kv_heads * sh_.head_dim;
  PerRank w_qkv = alloc(ctx, "w_qkv", h, qkvn, [&](int ti) {
    if (sh_.up > 1) return up_.qkv_weight_pieces(l, ti);  // laid out for the Ulysses all-to-all
    const std::int64_t kv0 = sh_.kv_head0(ti) * sh_.head_dim;
    return std::vector<Piece>{Piece{wp + "w_qkv", Rect{0, ti * qn, h, qn}, 0, 0},
                              Piece{wp + "w_qkv", Rect{0, Q + kv0, h, kvn}, 0, qn},
                              Piece{wp + "w_qkv", Rect{0, Q + KV + kv0, h, kvn}, 0, qn + kvn}};
  });
  PerRank w_o = alloc(ctx, "w_o", qn, h,
                      [&](int ti) { return std::vector<Piece>{Piece{wp + "w_o", Rect{ti * qn, 0, qn, h}, 0, 0}}; });
  PerRank w1 = alloc(ctx, "w1", h, f1, [&](int ti) {
    std::vector<Piece> p{Piece{wp + "w1", Rect{0, ti * fl, h, fl}, 0, 0}};
    if (sh_.gated) p.push_back(Piece{wp + "w1", Rect{0, sh_.ffn + ti * fl, h, fl}, 0, fl});
    return p;
  });
  PerRank w2 = alloc(ctx, "w2", fl, h,
                     [&](int ti) { return std::vector<Piece>{Piece{wp + "w2", Rect{ti * fl, 0, fl, h}, 0, 0}}; });

  // LayerNorm on the local shard, into a local shard: the one the backward re-gathers (Megatron
  // saves the shard, not the gathered tensor).
  const Rows g1{alloc(ctx, "ag+qkv/gather", S_, h), alloc(ctx, "ln1_out", n_, h)};
  Deps d_ln1(static_cast<std::size_t>(t_));
  for (int ti = 0; ti < emit_t_; ++ti)
    d_ln1[ti] = {elementwise(ctx, ti, "ln1", model::norm_op(sh_.norm_kernel, false), 2 * e_ * h, e_, 8.0 * e_ * h,
                             op(ctx, NormOp{ref(x, ti, RowSpan{0, n_}, h), ref(g1.shard, ti, RowSpan{0, n_}, h)}), ready[ti])};

  PerRank qkv = alloc(ctx, "qkv", S_, qkvn);
  WorkFn qkv_work = gemm_work(ctx, "qkv", g1, w_qkv, qkv, h, qkvn, false, projection_parts("qkv"));
  if (sh_.up > 1) {
    up_naming();
    qkv_work = up_work(up_.qkv_work(l, ctx.data, up_locate(g1), w_qkv, qkv), std::move(qkv_work));
  }
  const Deps d_qkv = qk_prologue(ctx, ag_region(with("ag+qkv"), g1, h, d_ln1, qkv_work));

  PerRank attn = alloc(ctx, "attn", S_, qn);
  PerRank po = alloc(ctx, "out_proj_partial", S_, h);
  auto attention = [this, ctx, qkv, attn, qn, kvn](int ti, const RowSpan& s) {
    const std::int64_t q_pos0 = s.row0 / sh_.batch, q_len = s.rows / sh_.batch;
    const std::int64_t kv_len = sh_.causal ? q_pos0 + q_len : sh_.seq;
    AttentionOp a;
    if (ctx.data) {
      a.q = ref(qkv, ti, s, qn);
      a.k = a.v = qkv[static_cast<std::size_t>(ti)];
      a.k_col0 = qn;
      a.v_col0 = qn + kvn;
      a.kv_positions = kv_len;
      a.out = ref(attn, ti, s, qn);
      a.batch = sh_.batch;
      a.heads = sh_.heads / t_;
      a.kv_heads = sh_.kv_heads_local();
      a.head_dim = sh_.head_dim;
      a.q_position0 = q_pos0;
      a.causal = sh_.causal;
    }
    model::AttentionKernel k{sh_.batch, sh_.heads / t_, sh_.kv_heads_local(), q_len, kv_len, sh_.head_dim,
                             sh_.causal, q_pos0, model::Pass::forward};
    k.unfused = sh_.unfused_attention;
    k.time_factor = sh_.attention_time_factor;
    return Work{"attention", k, op(ctx, std::move(a))};
  };
  PerRank attn_out;
  Deps d_attn_rs;
  if (sh_.up > 1) {
    // Ulysses: all-to-all, attention on heads/(tp up) heads of the whole sequence, all-to-all back.
    d_attn_rs = rs_region(with("out_proj+rs"), po, attn_out, h, up_.attention_forward(l, ctx.data, qkv, attn, d_qkv),
                          gemm_work(ctx, "out_proj", Rows{attn, {}}, w_o, po, qn, h));
  } else if (strategy_.ring_steps() && req_.schedule.query_split_attention && t_ > 1) {
    // Query-split: attention and out-projection of one query chunk per Fuse-RS step.
    WorkFn proj = gemm_work(ctx, "out_proj", Rows{attn, {}}, w_o, po, qn, h);
    WorkFn fused = [attention, proj](int ti, int chunk, const std::vector<RowSpan>& rows, bool first) {
      std::vector<Work> w{attention(ti, rows.at(0))};
      for (Work& p : proj(ti, chunk, rows, first)) w.push_back(std::move(p));
      return w;
    };
    d_attn_rs = rs_region(with("attn+out_proj+rs"), po, attn_out, h, d_qkv, fused);
  } else {
    Deps d_att(static_cast<std::size_t>(t_));
    for (int ti = 0; ti < emit_t_; ++ti) {
      Work w = attention(ti, RowSpan{0, S_});
      d_att[ti] = {compute(ti, prefix(ctx) + "/attention", std::move(w.kernel), labels(ctx, -1, "attention"), w.data_op,
                           d_qkv[ti])};
      // Eager SDPA's output [b, heads, s, d] transposed back and made contiguous for the out-projection.
      if (sh_.eager) d_att[ti] = {stream_kernel(ctx, ti, "attention_out_copy", "copy", bytes(2 * S_ * qn), S_, d_att[ti])};
    }
    d_attn_rs = rs_region(with("out_proj+rs"), po, attn_out, h, d_att,
                          gemm_work(ctx, "out_proj", Rows{attn, {}}, w_o, po, qn, h));
  }

  PerRank h1 = alloc(ctx, "h1", n_, h);
  const Rows g2{alloc(ctx, "ag+fc1/gather", S_, h), alloc(ctx, "ln2_out", n_, h)};
  Deps d_ln2(static_cast<std::size_t>(t_));
  for (int ti = 0; ti < emit_t_; ++ti) {
    const TaskId a = residual_add(ctx, ti, "residual1", e_,
                                  op(ctx, AddOp{ref(x, ti, RowSpan{0, n_}, h), ref(attn_out, ti, RowSpan{0, n_}, h),
                                                ref(h1, ti, RowSpan{0, n_}, h)}),
                                  d_attn_rs[ti]);
    d_ln2[ti] = {elementwise(ctx, ti, "ln2", model::norm_op(sh_.norm_kernel, false), 2 * e_ * h, e_, 8.0 * e_ * h,
                             op(ctx, NormOp{ref(h1, ti, RowSpan{0, n_}, h), ref(g2.shard, ti, RowSpan{0, n_}, h)}), {a})};
  }

  PerRank f = alloc(ctx, "fc1_out", S_, f1);
  Deps d_fc1 =
      ag_region(with("ag+fc1"), g2, h, d_ln2, gemm_work(ctx, "fc1", g2, w1, f, h, f1, false, projection_parts("fc1")));

  PerRank act = alloc(ctx, "act", S_, fl);
  Deps d_act(static_cast<std::size_t>(t_));
  for (int ti = 0; ti < emit_t_; ++ti) {
    const std::string kind = sh_.gated ? "swiglu" : "gelu";
    d_act[ti] = {activation(ctx, ti,
                            op(ctx, ActivationOp{kind, ref(f, ti, RowSpan{0, S_}, f1), ref(act, ti, RowSpan{0, S_}, fl)}),
                            d_fc1[ti])};
  }

  PerRank p2 = alloc(ctx, "fc2_partial", S_, h);
  PerRank mlp_out;
  Deps d_fc2 = rs_region(with("fc2+rs"), p2, mlp_out, h, d_act, gemm_work(ctx, "fc2", Rows{act, {}}, w2, p2, fl, h));

  LayerOut out;
  out.y = alloc(ctx, "y", n_, h);
  out.done.resize(static_cast<std::size_t>(t_));
  for (int ti = 0; ti < emit_t_; ++ti)
    out.done[ti] = {residual_add(ctx, ti, "residual2", e_,
                                 op(ctx, AddOp{ref(h1, ti, RowSpan{0, n_}, h), ref(mlp_out, ti, RowSpan{0, n_}, h),
                                               ref(out.y, ti, RowSpan{0, n_}, h)}),
                                 d_fc2[ti])};
  out.saved = LayerData{x, w_qkv, w_o, w1, w2, g1.shard, g2.shard, qkv, attn, f, act, h1};
  return out;
}

// torchtitan's per-op selective checkpointing (activation_checkpoint.selective_ac_option "op",
// _apply_ac_to_transformer_block): a block saves the outputs of its matmuls except every second one
// (in forward order wq, wk, wv, wo, w1, w3, w2: wk, wo and w3 are not saved) and of attention; with
// torch.compile only what the backward reads runs again. That is the norms and the first residual add
// (the GEMM inputs), K's projection, the up half of a gated FC1 and the activation. The residual add
// reads wo's output: with TP the policy saves the reduce-scatter's output it reads instead
// (_c10d_functional.reduce_scatter_tensor), without TP wo's GEMM runs again (on one H200, torchtitan's
// compiled Llama-3.1-8B block ran three forward GEMMs again per layer, wk, wo and w3:
// docs/validation.md, "torchtitan's float8 layer on one H200"). The TP all-gather of a norm's output
// is not repeated here: the backward gathers each column-parallel GEMM's input again anyway
// (backward_layer), which is the gather the recomputation would run.
Deps Builder::recompute_unsaved_ops(int l, Deps ready) {
  const std::int64_t h = sh_.hidden, S_ = S(), e_ = elementwise_rows();
  const std::int64_t fl = sh_.ffn_local();
  // K's columns of this rank's QKV GEMM (up 1: tpsp_request refuses Ulysses with this policy).
  const std::int64_t k_cols = sh_.kv_local();
  recompute_ = true;
  const OpCtx rc{l, true, "", false};
  for (int ti = 0; ti < emit_t_; ++ti) {
    TaskId d =
        elementwise(rc, ti, "ln1", model::norm_op(sh_.norm_kernel, false), 2 * e_ * h, e_, 8.0 * e_ * h, -1, ready[ti]);
    d = compute(ti, prefix(rc) + "/k_proj", model::GemmKernel{S_, k_cols, h, 1}, labels(rc, -1, "k_proj"), -1, {d});
    ready[ti] = {d};
  }
  // The rotated (and, eager, repeated) q and k feed SDPA's backward and are no matmul outputs.
  ready = qk_prologue(rc, ready);
  for (int ti = 0; ti < emit_t_; ++ti) {
    std::vector<TaskId> add_inputs = ready[ti];
    if (t_ == 1)
      add_inputs = {compute(ti, prefix(rc) + "/out_proj", model::GemmKernel{S_, h, sh_.q_local(), 1},
                            labels(rc, -1, "out_proj"), -1, ready[ti])};
    TaskId d = residual_add(rc, ti, "residual1", e_, -1, add_inputs);
    d = elementwise(rc, ti, "ln2", model::norm_op(sh_.norm_kernel, false), 2 * e_ * h, e_, 8.0 * e_ * h, -1, {d});
    if (sh_.gated)
      d = compute(ti, prefix(rc) + "/fc1_up", model::GemmKernel{S_, fl, h, 1}, labels(rc, -1, "fc1_up"), -1, {d});
    d = activation(rc, ti, -1, {d});
    ready[ti] = {d};
  }
  recompute_ = false;
  return ready;
}

// Backward of one layer. Megatron's sequence-parallel linear layers save the local shard of a
// column-parallel GEMM's input and re-gather it for the wgrad; the re-gather is its own AG region
// fused with the (accumulating) wgrad GEMM per chunk. `fw` holds the forward's buffers and `dy` the
// gradient of the layer output, a shard [n, h]; both are empty when there is no dataflow (a backward
// generated without its forward), and then every task carries timing only.
Builder::LayerGrad Builder::backward_layer(int l, const LayerData& fw, const PerRank& dy, const Deps& ready) {
  const std::int64_t h = sh_.hidden, S_ = S(), n_ = n(), e_ = elementwise_rows();
  const std::int64_t qn = sh_.q_local(), kvn = sh_.kv_local(), qkvn = sh_.qkv_local();
  const std::int64_t f1 = sh_.fc1_local(), fl = sh_.ffn_local();
  OpCtx ctx{l, false, "", req_.options.forward && data_};
  auto with = [&](std::string region) { return with_region(ctx, std::move(region)); };
  auto each = [&](auto fn) {
    Deps d(static_cast<std::size_t>(t_));
    for (int ti = 0; ti < emit_t_; ++ti) d[ti] = fn(ti);
    return d;
  };
  const RowSpan all{0, S_}, own{0, n_};
  // A weight gradient over the whole sequence, outside a region. By value: ZB-H1 runs it later.
  auto full_wgrad = [this, ctx, all](int ti, const std::string& name, const WorkFn& work,
                                     const std::vector<TaskId>& deps) {
    Work w = std::move(work(ti, -1, {all}, true).at(0));
    if (w.emit) return w.emit(concat(prefix(ctx), "/", name), labels(ctx, -1, name), deps);
    return compute(ti, concat(prefix(ctx), "/", name), std::move(w.kernel), labels(ctx, -1, name), w.data_op,
                   deps);
  };
  // One weight pass: that gradient on every rank, after `after` and the work done when it runs.
  auto full_wgrads = [this, full_wgrad](std::string name, WorkFn work, Deps after) -> WeightPass {
    return [this, full_wgrad, name = std::move(name), work = std::move(work),
            after = std::move(after)](const Deps& now) {
      Deps done(static_cast<std::size_t>(t_));
      for (int ti = 0; ti < emit_t_; ++ti) done[ti] = {full_wgrad(ti, name, work, merged(after[ti], now[ti]))};
      return done;
    };
  };

  // Bias gradients (model.bias, unless training.bias_grad "fused"): each linear's output gradient
  // summed over its rows by a reduction kernel of its own (PyTorch's and Megatron-LM's
  // grad_output.sum(0)); the rows of a row-parallel layer's are those the rank holds after the
  // reduction its bias follows.
  auto bias_grad = [&](const std::string& name, std::int64_t rows, std::int64_t cols, Deps d) {
    if (!sh_.bias_grad_kernels) return d;
    for (int ti = 0; ti < emit_t_; ++ti)
      d[ti] = {stream_kernel(ctx, ti, name, "bias_grad", bytes(rows * cols + cols), rows, d[ti])};
    return d;
  };

  // Hidden dropout: each branch's gradient is the incoming one through the dropout's mask (gradient and
  // mask read, the branch's written) before the branch's row-parallel GEMM gathers it.
  auto dropout_bwd = [&](const std::string& name, Deps d) {
    if (!sh_.hidden_dropout) return d;
    for (int ti = 0; ti < emit_t_; ++ti)
      d[ti] = {stream_kernel(ctx, ti, name, "dropout_bwd", bytes(2 * e_ * h) + e_ * h, e_, d[ti])};
    return d;
  };

  // FC2 (row-parallel): AG of the incoming gradient, dgrad per chunk; wgrad on the gathered gradient.
  const Rows dY{alloc(ctx, "ag+fc2_dgrad/gather", S_, h), dy};
  PerRank d_act_out = alloc(ctx, "act_grad", S_, fl);
  Deps d_fc2 = bias_grad("fc2_bias_grad", e_, h,
                         ag_region(with("ag+fc2_dgrad"), dY, h, dropout_bwd("residual2_dropout_bwd", ready),
                                   gemm_work(ctx, "fc2_dgrad", dY, fw.w2, d_act_out, h, fl, true)));
  PerRank dw2 = alloc(ctx, "dw2", fl, h);
  const WorkFn fc2_wgrad = wgrad_work(ctx, "fc2_wgrad", Rows{fw.act, {}}, dY, dw2, fl, h);
  weight_pass(d_fc2, full_wgrads("fc2_wgrad", fc2_wgrad, d_fc2));
  const std::string act_kind = sh_.gated ? "swiglu" : "gelu";
  PerRank d_fc1_out = alloc(ctx, "fc1_out_grad", S_, f1);
  Deps d_act = each([&](int ti) {
    return std::vector<TaskId>{activation_bwd(
        ctx, ti,
        op(ctx, ActivationBwdOp{act_kind, ref(fw.fc1, ti, all, f1), ref(d_act_out, ti, all, fl),
                                ref(d_fc1_out, ti, all, f1)}),
        d_fc2[ti])};
  });
  d_act = bias_grad("fc1_bias_grad", S_, f1, std::move(d_act));
  // FC1 (column-parallel): dgrad ends in an RS; wgrad needs the re-gathered LayerNorm output.
  const ColumnGrad fc1_grad = column_parallel_backward(ctx, "fc1", "dw1", d_fc1_out, fw.w1, fw.ln2, f1, d_act);
  const PerRank& d_ln2_out = fc1_grad.d_in;
  const Deps& d_fc1 = fc1_grad.dgrad_done;
  const PerRank& dw1 = fc1_grad.dw;
  PerRank d_ln2_in = alloc(ctx, "ln2_grad", n_, h);
  PerRank dh1 = alloc(ctx, "h1_grad", n_, h);
  Deps d_h1 = each([&](int ti) {
    const TaskId ln = elementwise(
        ctx, ti, "ln2_bwd", model::norm_op(sh_.norm_kernel, true), 3 * e_ * h, e_, 10.0 * e_ * h,
        op(ctx, NormBwdOp{ref(fw.h1, ti, own, h), ref(d_ln2_out, ti, own, h), ref(d_ln2_in, ti, own, h)}), d_fc1[ti]);
    // The residual: the layer output's gradient flows to h1 unchanged, plus the MLP branch's.
    return std::vector<TaskId>{elementwise(
        ctx, ti, "residual2_bwd", "add", 3 * e_ * h, e_, 1.0 * e_ * h,
        op(ctx, AddOp{ref(dy, ti, own, h), ref(d_ln2_in, ti, own, h), ref(dh1, ti, own, h)}), {ln})};
  });
  d_h1 = bias_grad("out_proj_bias_grad", e_, h, dropout_bwd("residual1_dropout_bwd", std::move(d_h1)));
  // Out-projection (row-parallel) and attention.
  const Rows dH1{alloc(ctx, "ag+out_proj_dgrad/gather", S_, h), dh1};
  PerRank d_attn = alloc(ctx, "attn_grad", S_, qn);
  WorkFn out_proj_dgrad = gemm_work(ctx, "out_proj_dgrad", dH1, fw.w_o, d_attn, h, qn, true);
  if (sh_.up > 1) {
    up_naming();
    out_proj_dgrad = up_work(up_.out_proj_dgrad_work(l, ctx.data, up_locate(dH1), fw.w_o, d_attn), std::move(out_proj_dgrad));
  }
  Deps d_o = ag_region(with("ag+out_proj_dgrad"), dH1, h, d_h1, out_proj_dgrad);
  PerRank dw_o = alloc(ctx, "dw_o", qn, h);
  const WorkFn out_proj_wgrad = wgrad_work(ctx, "out_proj_wgrad", Rows{fw.attn, {}}, dH1, dw_o, qn, h);
  PerRank d_qkv_out = alloc(ctx, "qkv_grad", S_, qkvn);
  // Emitted beside each rank's attention backward, unless ZB-H1 defers it.
  if (defer_weights_ != nullptr) weight_pass(d_o, full_wgrads("out_proj_wgrad", out_proj_wgrad, d_o));
  Deps d_att = each([&](int ti) {
    if (defer_weights_ == nullptr) full_wgrad(ti, "out_proj_wgrad", out_proj_wgrad, d_o[ti]);
    if (sh_.up > 1) return std::vector<TaskId>{};  // Ulysses: the attention backward below
    // The whole sequence's queries on this rank's heads: dk and dv collect every query that sees them
    // (query heads of one kv group add into it).
    AttentionBwdOp ab;
    if (ctx.data) {
      AttentionOp& a = ab.fwd;
      a.q = ref(fw.qkv, ti, all, qn);
      a.k = a.v = fw.qkv[static_cast<std::size_t>(ti)];
      a.k_col0 = qn;
      a.v_col0 = qn + kvn;
      a.kv_positions = sh_.seq;
      a.out = ref(fw.attn, ti, all, qn);
      a.batch = sh_.batch;
      a.heads = sh_.heads / t_;
      a.kv_heads = sh_.kv_heads_local();
      a.head_dim = sh_.head_dim;
      a.q_position0 = 0;
      a.causal = sh_.causal;
      ab.dout = ref(d_attn, ti, all, qn);
      const BufferId dq = d_qkv_out[static_cast<std::size_t>(ti)];
      ab.dq = Ref{dq, Rect{0, 0, S_, qn}};
      ab.dk = Ref{dq, Rect{0, qn, S_, kvn}};
      ab.dv = Ref{dq, Rect{0, qn + kvn, S_, kvn}};
    }
    model::AttentionKernel k{sh_.batch, sh_.heads / t_, sh_.kv_heads_local(), sh_.seq, sh_.seq, sh_.head_dim,
                             sh_.causal, 0, model::Pass::backward};
    k.unfused = sh_.unfused_attention;
    k.time_factor = sh_.attention_time_factor;
    // Eager: the out-projection's input gradient transposed to SDPA's layout, a copy.
    const std::vector<TaskId> grad_in =
        sh_.eager ? std::vector<TaskId>{stream_kernel(ctx, ti, "attention_grad_copy", "copy", bytes(2 * S_ * qn), S_,
                                                      d_o[ti])}
                  : d_o[ti];
    return std::vector<TaskId>{compute(ti, prefix(ctx) + "/attention_bwd", k, labels(ctx, -1, "attention_bwd"),
                                       op(ctx, std::move(ab)), grad_in)};
  });
  if (sh_.up > 1) d_att = up_.attention_backward(l, ctx.data, d_attn, d_qkv_out, d_o);
  d_att = qk_prologue(ctx, d_att, true);
  // torch.split's backward: the q, k and v gradients copied into one [S, qkv] tensor, read and written.
  if (sh_.qkv_grad_cat && !sh_.separate_projections && sh_.up == 1)
    for (int ti = 0; ti < emit_t_; ++ti)
      d_att[ti] = {stream_kernel(ctx, ti, "qkv_grad_cat", "copy", bytes(2 * S_ * qkvn), S_, d_att[ti])};
  d_att = bias_grad("qkv_bias_grad", S_, qkvn, d_att);
  // QKV (column-parallel).
  const ColumnGrad qkv_grad = up_.fused_backward() ? up_qkv_backward(ctx, fw, d_att)
                                                   : column_parallel_backward(ctx, "qkv", "dw_qkv", d_qkv_out, fw.w_qkv,
                                                                              fw.ln1, qkvn, d_att);
  const PerRank& d_ln1_out = qkv_grad.d_in;
  const Deps& d_qkv = qkv_grad.dgrad_done;
  const PerRank& dw_qkv = qkv_grad.dw;
  PerRank d_ln1_in = alloc(ctx, "ln1_grad", n_, h);
  LayerGrad out;
  out.dx = alloc(ctx, "x_grad", n_, h);
  out.done = each([&](int ti) {
    const TaskId ln = elementwise(
        ctx, ti, "ln1_bwd", model::norm_op(sh_.norm_kernel, true), 3 * e_ * h, e_, 10.0 * e_ * h,
        op(ctx, NormBwdOp{ref(fw.x, ti, own, h), ref(d_ln1_out, ti, own, h), ref(d_ln1_in, ti, own, h)}), d_qkv[ti]);
    return std::vector<TaskId>{elementwise(
        ctx, ti, "residual1_bwd", "add", 3 * e_ * h, e_, 1.0 * e_ * h,
        op(ctx, AddOp{ref(dh1, ti, own, h), ref(d_ln1_in, ti, own, h), ref(out.dx, ti, own, h)}), {ln})};
  });

  if (ctx.data) backward_checks(l, out.dx, dw_qkv, dw_o, dw1, dw2);
  return out;
}


// The backward of a column-parallel GEMM (QKV, FC1): the dgrad's partial sum reduce-scattered
// into the input gradient, then the weight gradient over the re-gathered saved input shard
// (Megatron saves the shard, not the gathered input). The baseline is what Megatron-LM does without
// --tp-comm-overlap (LinearWithGradAccumulationAndAsyncCommunication.backward, sequence parallel):
// the re-gather is launched asynchronously before the dgrad and runs beside it, and the dgrad's
// reduce-scatter is launched asynchronously before the wgrad and runs beside it. The re-gather
// goes on a second comm stream because this builder emits the dgrad region (compute, then its RS)
// before the wgrad region (AG, then compute), and one stream would queue the AG behind the RS.
Builder::ColumnGrad Builder::column_parallel_backward(const OpCtx& ctx, const std::string& name,
                                                     const std::string& dw_name, const PerRank& d_out,
                                                     const PerRank& weight, const PerRank& saved_shard,
                                                     std::int64_t n_out, const Deps& after) {
  const std::int64_t h = sh_.hidden, S_ = S();
  ColumnGrad g;
  PerRank partial = alloc(ctx, name + "_dgrad_partial", S_, h);
  g.dgrad_done = rs_region(with_region(ctx, name + "_dgrad+rs"), partial, g.d_in, h, after,
                           gemm_work(ctx, name + "_dgrad", Rows{d_out, {}}, weight, partial, n_out, h, true,
                                     projection_parts(name)));
  g.dw = alloc(ctx, dw_name, h, n_out);
  const Rows gathered{alloc(ctx, "ag+" + name + "_wgrad/gather", S_, h), saved_shard};
  // Megatron-LM before --async-tensor-model-parallel-allreduce: the wgrad after the all-reduce.
  Deps wgrad_after = after;
  if (allreduce_form() && sh_.sync_tp_allreduce)
    for (int ti = 0; ti < emit_t_; ++ti) wgrad_after[ti] = merged(after[ti], g.dgrad_done[ti]);
  // Under ZB-H1 the re-gather goes with its wgrad into W, issued when the stage reaches W.
  weight_pass(wgrad_after, [this, ctx, name, gathered, h, after = wgrad_after,
                      work = wgrad_work(ctx, name + "_wgrad", gathered, Rows{d_out, {}}, g.dw, h, n_out, ag_calls(),
                                         projection_parts(name))](
                         const Deps& now) {
    Deps ready = after;
    for (int ti = 0; ti < emit_t_; ++ti) ready[ti] = merged(after[ti], now[ti]);
    return ag_region(with_region(ctx, "ag+" + name + "_wgrad"), gathered, h, ready, work, nullptr,
                     strategy_.async_regather());
  });
  return g;
}

// Ulysses Fuse-A2A: the QKV dgrad and wgrad consume dQKV one head group block at a time, the own
// group first, then each block as the exchange delivers it (UlyssesEmitter::qkv_grad_blocks):
// dX += dQKV[:, p] W_qkv[:, p]^T and dW[:, p] (+)= X^T dQKV[:, p], the mirror image of the forward's
// per-destination projection. The TP regions around them are column_parallel_backward's.
Builder::ColumnGrad Builder::up_qkv_backward(const OpCtx& ctx, const LayerData& fw, const Deps& d_att) {
  const std::int64_t h = sh_.hidden, S_ = S(), qkvn = sh_.qkv_local();
  ColumnGrad g;
  const std::int64_t Wc = up_.group_cols();
  auto blocks_of = [this](int ti, const std::vector<RowSpan>& rows) { return up_.qkv_grad_blocks(ti, rows); };
  auto in_region = [this](int region) -> std::function<void(TaskId)> {
    if (region < 0) return {};
    return [this, region](TaskId id) { g_.task(id).labels.region = region; };
  };
  PerRank partial = alloc(ctx, "qkv_dgrad_partial", S_, h);
  const PerRank w_qkv = fw.w_qkv;
  const WorkFn dgrad = [this, ctx, blocks_of, in_region, partial, w_qkv, Wc, h](int ti, int, const std::vector<RowSpan>& rows,
                                                                             bool) {
    std::int64_t m = 0;
    for (const RowSpan& sp : rows) m += sp.rows;
    std::vector<Work> out;
    for (const UlyssesEmitter::GradBlock& b : blocks_of(ti, rows)) {
      GemmOp gop;
      if (ctx.data) {
        const auto i = static_cast<std::size_t>(ti);
        gop.a = b.buffer;
        gop.a_col0 = b.col0;
        gop.a_cols = Wc;
        gop.b = w_qkv[i];
        gop.b_col0 = b.member * Wc;
        gop.b_cols = Wc;
        gop.c = partial[i];
        gop.c_cols = h;
        gop.transpose_b = true;
        gop.accumulate = !out.empty();
        for (const RowSpan& sp : rows) gop.blocks.push_back(RowBlock{sp.row0 + b.row_offset, sp.row0, sp.rows});
      }
      Work w{concat("qkv_dgrad/g", b.member), model::GemmKernel{m, h, Wc, 1}, op(ctx, std::move(gop))};
      w.after = in_region(b.region);
      w.wait = b.deps;
      out.push_back(std::move(w));
    }
    return out;
  };
  g.dw = alloc(ctx, "dw_qkv", h, qkvn);
  const Rows gathered{alloc(ctx, "ag+qkv_wgrad/gather", S_, h), fw.ln1};
  auto seen = std::make_shared<std::vector<int>>(static_cast<std::size_t>(t_), 0);
  const int calls = ag_calls();
  const WorkFn wgrad = [this, ctx, blocks_of, in_region, gathered, dw = g.dw, Wc, h, qkvn, seen, calls](
                           int ti, int, const std::vector<RowSpan>& rows, bool first) {
    std::int64_t k = 0;
    for (const RowSpan& sp : rows) k += sp.rows;
    // The rank's last call completes the gradient: its last block goes to the DP sync.
    const bool hand_off = dp_active_ && ++(*seen)[static_cast<std::size_t>(ti)] == calls;
    const std::vector<UlyssesEmitter::GradBlock> blocks = blocks_of(ti, rows);
    std::vector<Work> out;
    for (std::size_t j = 0; j < blocks.size(); ++j) {
      const UlyssesEmitter::GradBlock& b = blocks[j];
      WgradOp w;
      if (ctx.data) {
        w.c = dw[static_cast<std::size_t>(ti)];
        w.a_cols = h;
        w.b_col0 = b.col0;
        w.b_cols = Wc;
        w.c_col0 = b.member * Wc;
        w.accumulate = !first;
        // Cut at chunk boundaries: the own chunk of the gathered input lives in the shard.
        for (const RowSpan& sp : rows)
          for (std::int64_t r = sp.row0; r < sp.row0 + sp.rows;) {
            const std::int64_t end = std::min(sp.row0 + sp.rows, (r / n() + 1) * n());
            const Loc la = at(gathered, ti, RowSpan{r, end - r});
            w.blocks.push_back(WgradBlock{la.buffer, la.row0, b.buffer, r + b.row_offset, end - r});
            r = end;
          }
      }
      const std::string name = concat("qkv_wgrad/g", b.member);
      const bool last = hand_off && j + 1 == blocks.size();
      Work wk = last ? dp_wgrad(ctx, "qkv_wgrad", dw, ti, h, qkvn, k, std::move(w), Wc)
                     : Work{name, model::GemmKernel{h, Wc, k, 1, /*accumulate_fp32=*/true}, op(ctx, std::move(w))};
      wk.op = name;
      if (!last || !dp_->fused()) wk.after = in_region(b.region);  // (fused: the DP sync's pieces)
      wk.wait = b.deps;
      out.push_back(std::move(wk));
    }
    return out;
  };
  // The dgrad waits for each block's arrival; the wgrad of a block already here fills that wait,
  // but a stream runs its tasks in the order added, so the two regions' GEMMs go onto the compute
  // stream interleaved: at Fuse-RS step i (chunk c = (ti - 1 - i) mod t), for each block in ring
  // order, dgrad(c, p) then wgrad(c, p), the latter from the Fuse-AG step that holds chunk c
  // ((i + 1) mod t: the own chunk, AG step 0, comes with the last RS step, as the exchange delivers
  // it last). The two rings share the copy engine, whose stream is in order too: the re-gather's
  // Send of AG step i + 1 goes before the RS Send of step i (AG steps 0 and 1 before RS step 0),
  // so that chunk c's X is there when RS step i starts and the running sum does not queue behind
  // the whole re-gather. Baseline (Megatron's asynchronous re-gather beside the dgrad, on the second
  // comm stream, as column_parallel_backward) and slice (one collective per slice) keep the regions
  // one after the other on the compute stream.
  if (strategy_.async_regather() || (t_ > 1 && !strategy_.ring_steps())) {
    g.dgrad_done = rs_region(with_region(ctx, "qkv_dgrad+rs"), partial, g.d_in, h, d_att, dgrad);
    ag_region(with_region(ctx, "ag+qkv_wgrad"), gathered, h, d_att, wgrad, nullptr, strategy_.async_regather());
    return g;
  }
  region_id(with_region(ctx, "qkv_dgrad+rs"));  // the regions keep their order in the graph
  const OpCtx wctx = with_region(ctx, "ag+qkv_wgrad");
  auto plan = std::make_shared<std::vector<std::vector<AgCall>>>();
  ag_region(wctx, gathered, h, d_att, wgrad, plan.get());
  auto rs_step = std::make_shared<std::vector<int>>(static_cast<std::size_t>(t_), 0);
  const WorkFn both = [this, dgrad, wgrad, wctx, plan, rs_step](int ti, int chunk, const std::vector<RowSpan>& rows,
                                                                 bool first) {
    const auto i = static_cast<std::size_t>(ti);
    const int step = (*rs_step)[i]++;
    std::vector<AgCall>& calls = (*plan)[i];
    // AG transfers up to step + 1 (each once; the last AG step has none): AG step s + 1 waits for
    // the Recv of step s.
    for (int s = 0; s <= std::min(step + 1, t_ - 2); ++s) {
      AgCall& c = calls.at(static_cast<std::size_t>(s));
      if (!c.transfer) continue;
      calls.at(static_cast<std::size_t>(s + 1)).deps = {c.transfer(c.deps)};
      c.transfer = {};
    }
    const AgCall& call = calls.at(static_cast<std::size_t>(t_ == 1 ? 0 : (step + 1) % t_));
    std::vector<Work> d = dgrad(ti, chunk, rows, first);
    // The first call emitted writes dW, the later ones add to it (AG step 0 now comes last).
    std::vector<Work> w = wgrad(ti, call.chunk, call.rows, step == 0);
    if (d.size() != w.size()) throw std::logic_error("TPSP generator: QKV dgrad and wgrad blocks differ");
    std::vector<Work> out;
    for (std::size_t j = 0; j < d.size(); ++j) {
      out.push_back(std::move(d[j]));
      // Emitted under the wgrad region's name and labels, waiting for its chunk of X as well.
      auto wk = std::make_shared<Work>(std::move(w[j]));
      Work e{wk->op, wk->kernel, -1};
      e.emit = [this, ti, wctx, call, wk](std::string, TaskLabels, const std::vector<TaskId>& chain) {
        std::vector<TaskId> deps = chain;
        deps.insert(deps.end(), call.deps.begin(), call.deps.end());
        deps.insert(deps.end(), wk->wait.begin(), wk->wait.end());
        TaskLabels lab = labels(wctx, call.region, wk->op);
        lab.chunk = call.chunk;
        lab.step = call.step;
        std::string name = concat(prefix(wctx), "/", wk->op, call.suffix);
        const TaskId id = wk->emit ? wk->emit(std::move(name), std::move(lab), deps)
                                   : compute(ti, std::move(name), wk->kernel, std::move(lab), wk->data_op, deps);
        if (wk->after) wk->after(id);
        return id;
      };
      out.push_back(std::move(e));
    }
    return out;
  };
  g.dgrad_done = rs_region(with_region(ctx, "qkv_dgrad+rs"), partial, g.d_in, h, d_att, both);
  for (int ti = 0; ti < emit_t_; ++ti)
    if ((*rs_step)[static_cast<std::size_t>(ti)] != std::max(1, t_))
      throw std::logic_error("TPSP generator: a QKV wgrad step was not emitted");
  return g;
}

// What each rank must hold: its chunk of the input gradient and its shards of the weight
// gradients, laid out as the weight shards of forward_layer(). With kv heads replicated
// (kv_heads < t) a rank's kv columns of dw_qkv hold only its own query heads' part, whose sum
// over the sharing ranks is not generated (docs/schedules.md): those columns are not compared.
void Builder::backward_checks(int l, const PerRank& dx, const PerRank& dw_qkv, const PerRank& dw_o, const PerRank& dw1,
                              const PerRank& dw2) {
  const std::int64_t h = sh_.hidden, n_ = n(), qn = sh_.q_local(), kvn = sh_.kv_local(), fl = sh_.ffn_local();
  const std::string wp = concat("L", l, "/");
  const std::int64_t Q = sh_.heads * sh_.head_dim, KV = sh_.kv_heads * sh_.head_dim;
  for (int ti = 0; ti < emit_t_; ++ti) {
    const auto i = static_cast<std::size_t>(ti);
    prog_.outputs.push_back(OutputCheck{dx[i], {Piece{wp + "dx", Rect{global_row(ti), 0, n_, h}, 0, 0}}});
    // Ulysses: a rank's weight gradients cover its seq/up positions only; their sum over the UP
    // group is the gradient sync's result, compared in up_gradient_checks().
    if (sh_.up > 1) continue;
    std::vector<Piece> qkv{Piece{wp + "dw_qkv", Rect{0, ti * qn, h, qn}, 0, 0}};
    if (sh_.kv_heads >= t_) {
      const std::int64_t kv0 = sh_.kv_head0(ti) * sh_.head_dim;
      qkv.push_back(Piece{wp + "dw_qkv", Rect{0, Q + kv0, h, kvn}, 0, qn});
      qkv.push_back(Piece{wp + "dw_qkv", Rect{0, Q + KV + kv0, h, kvn}, 0, qn + kvn});
    }
    prog_.outputs.push_back(OutputCheck{dw_qkv[i], std::move(qkv)});
    prog_.outputs.push_back(OutputCheck{dw_o[i], {Piece{wp + "dw_o", Rect{ti * qn, 0, qn, h}, 0, 0}}});
    std::vector<Piece> w1{Piece{wp + "dw1", Rect{0, ti * fl, h, fl}, 0, 0}};
    if (sh_.gated) w1.push_back(Piece{wp + "dw1", Rect{0, sh_.ffn + ti * fl, h, fl}, 0, fl});
    prog_.outputs.push_back(OutputCheck{dw1[i], std::move(w1)});
    prog_.outputs.push_back(OutputCheck{dw2[i], {Piece{wp + "dw2", Rect{ti * fl, 0, fl, h}, 0, 0}}});
  }
}

void Builder::piece_ag_gemm() {
  const std::int64_t K = req_.piece_k, N = req_.piece_n / t_;
  OpCtx ctx{0, true, "ag+gemm", true};
  const Rows x{alloc(ctx, "x/gather", S(), K), alloc(ctx, "x", n(), K, [&](int ti) {
                 return std::vector<Piece>{Piece{"x", Rect{ti * n(), 0, n(), K}, 0, 0}};
               })};
  PerRank w = alloc(ctx, "w", K, N, [&](int ti) { return std::vector<Piece>{Piece{"w", Rect{0, ti * N, K, N}, 0, 0}}; });
  PerRank y = alloc(ctx, "y", S(), N);
  ag_region(ctx, x, K, Deps(static_cast<std::size_t>(t_)), gemm_work(ctx, "gemm", x, w, y, K, N));
  for (int ti = 0; ti < emit_t_; ++ti)
    prog_.outputs.push_back(OutputCheck{y[ti], {Piece{"y", Rect{0, ti * N, S(), N}, 0, 0}}});
}

void Builder::piece_gemm_rs() {
  const std::int64_t K = req_.piece_k / t_, N = req_.piece_n;
  OpCtx ctx{0, true, "gemm+rs", true};
  PerRank x = alloc(ctx, "x", S(), K, [&](int ti) { return std::vector<Piece>{Piece{"x", Rect{0, ti * K, S(), K}, 0, 0}}; });
  PerRank w = alloc(ctx, "w", K, N, [&](int ti) { return std::vector<Piece>{Piece{"w", Rect{ti * K, 0, K, N}, 0, 0}}; });
  PerRank p = alloc(ctx, "partial", S(), N);
  PerRank out;
  rs_region(ctx, p, out, N, Deps(static_cast<std::size_t>(t_)), gemm_work(ctx, "gemm", Rows{x, {}}, w, p, K, N));
  for (int ti = 0; ti < emit_t_; ++ti)
    prog_.outputs.push_back(OutputCheck{out[ti], {Piece{"y", Rect{ti * n(), 0, n(), N}, 0, 0}}});
}

Work Builder::dp_wgrad(const OpCtx& ctx, const std::string& name, const PerRank& c, int ti, std::int64_t a_cols,
                       std::int64_t b_cols, std::int64_t k, WgradOp w, std::int64_t gemm_cols) {
  const DpGradient dg{concat(prefix(ctx), "/", name), ctx.layer, a_cols, b_cols,
                      ctx.data ? c[static_cast<std::size_t>(ti)] : -1};
  const std::int64_t n_cols = gemm_cols > 0 ? gemm_cols : b_cols;
  Work out{name, model::GemmKernel{a_cols, n_cols, k, 1, /*accumulate_fp32=*/true}, -1, {}};
  out.emit = [this, ctx, ti, k, n_cols, w = std::move(w), dg](std::string task_name, TaskLabels lab,
                                                              const std::vector<TaskId>& deps) mutable {
    if (!dp_->fused()) {
      const TaskId id = compute(ti, std::move(task_name), model::GemmKernel{dg.rows, n_cols, k, 1, /*accumulate_fp32=*/true}, std::move(lab),
                                op(ctx, w), deps);
      dp_->gradient(rank(ti), dg, id);
      return id;
    }
    // CommFuse over DP: the last accumulation step of this gradient in dp row pieces, ring order.
    return dp_->fused_gradient(
        rank(ti), dg,
        [&](std::int64_t row0, std::int64_t rows, int step, int region, const std::vector<TaskId>& d) {
          WgradOp piece = w;
          if (ctx.data) {
            piece.a_col0 = w.a_col0 + row0;
            piece.a_cols = rows;
            piece.c_row0 = row0;
          }
          TaskLabels pl = lab;
          pl.region = region;
          pl.step = step;
          return compute(ti, concat(task_name, "/dp", step),
                         model::GemmKernel{rows, n_cols, k, 1, /*accumulate_fp32=*/true}, pl, op(ctx, std::move(piece)),
                         d);
        },
        deps);
  };
  return out;
}

// Ulysses: the weight gradients after the sync over the UP group (all-reduced, ddp) are the
// unpartitioned ones: rank (ti, u) computed X_u^T dY_u over its seq/up positions and the sync adds
// the UP members' sums. Compared at dp 1 only (every DP replica here computes the same data, so the
// sum over replicas would be dp times the reference). Gradients reach the sync per layer, last
// layer first, in the order FC2, FC1, out-projection, QKV. Kv columns of dw_qkv replicated over TP
// or UP ranks hold one sharer's part (see backward_layer) and are not compared.
void Builder::up_gradient_checks(std::int64_t layers) {
  if (sh_.up < 2 || sh_.dp != 1 || req_.step.dp_sharding != model::DpSharding::ddp) return;
  const std::int64_t h = sh_.hidden, qn = sh_.q_local(), fl = sh_.ffn_local();
  const bool kv_split = sh_.kv_heads >= t_ * sh_.up;
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::string wp = concat("L", l, "/");
    const int j0 = static_cast<int>(4 * (layers - 1 - l));
    for (int ti = 0; ti < emit_t_; ++ti) {
      auto check = [&](int j, std::vector<Piece> expect) {
        const BufferId b = dp_->synced(rank(ti), j0 + j);
        if (b >= 0) prog_.outputs.push_back(OutputCheck{b, std::move(expect)});
      };
      check(0, {Piece{wp + "dw2", Rect{ti * fl, 0, fl, h}, 0, 0}});
      std::vector<Piece> w1{Piece{wp + "dw1", Rect{0, ti * fl, h, fl}, 0, 0}};
      if (sh_.gated) w1.push_back(Piece{wp + "dw1", Rect{0, sh_.ffn + ti * fl, h, fl}, 0, fl});
      check(1, std::move(w1));
      check(2, {Piece{wp + "dw_o", Rect{ti * qn, 0, qn, h}, 0, 0}});
      std::vector<Piece> qkv;
      const std::vector<Piece> w = up_.qkv_weight_pieces(static_cast<int>(l), ti);  // q, k, v per member
      for (std::size_t i = 0; i < w.size(); ++i)
        if (i % 3 == 0 || kv_split) qkv.push_back(Piece{wp + "dw_qkv", w[i].from, w[i].to_row, w[i].to_col});
      check(3, std::move(qkv));
    }
  }
}

// One DP replica: micro-batches (Scope::step: gradient accumulation), each forward then backward,
// with the step's embedding and head (StepEmitter), ZeRO-3 parameter gathers prefetched one layer
// ahead, recomputation before each layer's backward; then the DP sync, the optimizer and the
// ZeRO-1/2 parameter gather. Layer and stack scopes: one micro-batch, the layers only.
// With overlap_param_gather (ZeRO-1/2, Megatron-LM's --overlap-param-gather) the parameter gather
// of the previous step's optimizer runs in this step's first forward instead, as ZeRO-3's does: the
// embedding and LM head first (nothing to hide them behind), then each layer one layer ahead. The
// simulated step is the steady-state period: its optimizer's gather belongs to the next step.
void Builder::replica_step(std::int64_t layers, bool train) {
  const std::int64_t h = sh_.hidden;
  const bool step = req_.options.scope == Scope::step;
  const std::int64_t mbs = step ? std::max<std::int64_t>(1, req_.step.micro_batches) : 1;
  const bool zero3 = dp_ && req_.step.dp_sharding == model::DpSharding::zero3;
  const bool overlap_gather = dp_ && step && req_.step.overlap_param_gather &&
                              (req_.step.dp_sharding == model::DpSharding::zero1 ||
                               req_.step.dp_sharding == model::DpSharding::zero2);
  std::unique_ptr<StepEmitter> extra;
  if (step)
    extra = std::make_unique<StepEmitter>(
        g_, next_instance_,
        StepEmitter::Group{group(), S(), h, req_.step.vocab, sh_.activation_dtype(), comm_,
                           grad_dtype(), req_.step.clip_grad, emit_t_, sh_.norm_kernel, req_.step.cross_entropy});
  const auto L = static_cast<std::size_t>(layers);
  Deps ready(static_cast<std::size_t>(t_));
  // ZeRO-3: the layer's parameters, gathered on a stream of their own once `issue` is done (the
  // previous layer's start: one layer of prefetch).
  auto gather = [&](std::int64_t l, bool fwd, const Deps& issue) {
    Deps out(static_cast<std::size_t>(t_));
    for (int ti = 0; ti < emit_t_; ++ti)
      out[ti] = dp_->gather_layer(rank(ti), concat(mb_prefix_, "L", l, "/", fwd ? "fwd" : "bwd"),
                                  static_cast<int>(l), sh_.layer_params(), issue[ti]);
    return out;
  };
  auto merge = [&](Deps a, const Deps& b) {
    for (int ti = 0; ti < emit_t_; ++ti) a[ti].insert(a[ti].end(), b[ti].begin(), b[ti].end());
    return a;
  };
  // FSDP2: what `gather_name` gathered copied out into its parameters on the compute stream, once the
  // gather and `d` are done: FSDP2 waits for its all-gather in the module's pre-forward (or
  // pre-backward) hook and copies there, right before the module runs (DpConfig::fsdp).
  auto copy_out = [&](const std::string& gather_name, int layer, std::int64_t elements, Deps d) {
    for (int ti = 0; ti < emit_t_; ++ti)
      if (const TaskId c = dp_->copy_out(rank(ti), gather_name, layer, elements, d[ti]); c != kNoTask) d[ti] = {c};
    return d;
  };
  auto copy_out_layer = [&](std::int64_t l, bool fwd, const Deps& d) {
    return copy_out(concat(mb_prefix_, "L", l, "/", fwd ? "fwd" : "bwd"), static_cast<int>(l), sh_.layer_params(), d);
  };
  // ZeRO-3: whether layer l's backward gathers it again, or finds it still gathered from its forward
  // (StepOptions::reshard_after_forward).
  const auto regathered = [&](std::int64_t l) {
    switch (req_.step.reshard_after_forward) {
      case model::ReshardAfterForward::always: return true;
      case model::ReshardAfterForward::all_but_last: return l + 1 < layers;
      case model::ReshardAfterForward::never: return false;
    }
    return true;
  };
  const auto backward_gather = [&](std::int64_t l, const Deps& issue) {
    return regathered(l) ? gather(l, false, issue) : Deps(static_cast<std::size_t>(t_));
  };
  // The embedding's or the LM head's rows (vocab / tp) of each TP rank, gathered once `issue` is done.
  auto gather_table = [&](const std::string& name, const Deps& issue) {
    Deps out(static_cast<std::size_t>(t_));
    for (int ti = 0; ti < emit_t_; ++ti)
      out[ti] = dp_->gather_layer(rank(ti), name, -1, (req_.step.vocab / t_) * h, issue[ti]);
    return out;
  };
  // What a micro-batch carries from one piece of work to the next.
  struct MicroBatch {
    std::vector<LayerData> saved;
    std::vector<PerRank> inputs;
    PerRank x, dy;
    Deps head_params;  // overlapped ZeRO-1/2 gather of the LM head's rows (first micro-batch)
  };
  std::vector<MicroBatch> state(static_cast<std::size_t>(mbs));
  Deps next_params;  // the prefetched parameters of the next layer (ZeRO-3, overlapped ZeRO-1/2)
  Deps stage_params;  // overlapped ZeRO-1/2 on a stage after the first: all of its parameters
  const int stages = sh_.pp;
  const PipelineShape pipe{stages, sh_.virtual_stages, mbs, layers, sh_.zero_bubble && stages > 1};
  // ZB-H1: each (micro-batch, layer)'s W, held from its B until the order reaches its backward_weight.
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<WeightPass>> held_weights;
  const auto fresh = [&](MicroBatch& m) {  // the micro-batch's first piece of work on this stage
    if (m.saved.empty()) m.saved.assign(L, LayerData{});
    if (m.inputs.empty()) m.inputs.assign(L, PerRank{});
  };
  // The order is the step assembler's (sched/step.hpp); the layer builder does each piece.
  const std::vector<StepWork> order = stages > 1 ? pipeline_order(pipe, stage_)
                                                 : accumulation_order(mbs, layers, req_.options.forward, req_.options.backward);
  // The layers a micro-batch's forward runs on this stage, in order (a pipeline stage: its chunks'
  // layers, chunk after chunk): each layer's parameters are gathered when the one before it starts.
  std::vector<std::int64_t> forward_layers;
  for (const StepWork& work : order)
    if (work.phase == StepPhase::forward_layer && work.micro_batch == 0) forward_layers.push_back(work.layer);
  std::vector<std::int64_t> next_forward(L, -1);  // per layer, the one this stage's forward runs next
  for (std::size_t i = 0; i + 1 < forward_layers.size(); ++i)
    next_forward[static_cast<std::size_t>(forward_layers[i])] = forward_layers[i + 1];
  for (const StepWork& work : order) {
    const std::int64_t mb = work.micro_batch, l = work.layer;
    MicroBatch& m = state[static_cast<std::size_t>(mb)];
    micro_batch_ = step ? static_cast<int>(mb) : -1;
    mb_prefix_ = mb > 0 ? concat("mb", mb, "/") : "";
    dp_active_ = dp_ != nullptr && mb == mbs - 1;  // the DP sync in the last micro-batch (DDP no_sync, Megatron accumulates; ZeRO-3: reduce_layer)
    const int mbi = static_cast<int>(mb);
    const bool gathers = zero3 || (overlap_gather && mb == 0);
    switch (work.phase) {
      case StepPhase::forward_begin: {
        m.saved.assign(L, LayerData{});
        m.inputs.assign(L, PerRank{});
        OpCtx ctx{0, true, "", data_};
        m.x = alloc(ctx, "x", n(), h, [&](int ti) {
          return std::vector<Piece>{Piece{"x", Rect{global_row(ti), 0, n(), h}, 0, 0}};
        });
        if (overlap_gather && mb == 0) ready = merge(ready, gather_table("embedding", ready));
        // ZeRO-3 as FSDP runs it: the root module (embedding, final norm, LM head) all-gathered when the
        // micro-batch's forward begins, before anything can overlap it, and kept through its backward
        // (FSDP2 does not reshard the root after forward, "its parameters would typically be
        // immediately all-gathered for backward": torch.distributed.fsdp.fully_shard).
        if (zero3 && extra) {
          Deps root(static_cast<std::size_t>(t_));
          const std::int64_t root_params = 2 * (req_.step.vocab / t_) * h + h;
          for (int ti = 0; ti < emit_t_; ++ti)
            root[ti] = dp_->gather_layer(rank(ti), mb_prefix_ + "root", -1, root_params, ready[ti]);
          ready = copy_out(mb_prefix_ + "root", -1, root_params, merge(ready, root));
        }
        if (extra) ready = extra->embedding_forward(mb_prefix_, mbi, ready);
        if (gathers && !forward_layers.empty()) next_params = gather(forward_layers.front(), true, ready);
        break;
      }
      case StepPhase::forward_layer: {
        Deps lr = ready;
        if (mb == 0 && !stage_params.empty()) {
          lr = merge(lr, stage_params);
        } else if (gathers) {
          lr = merge(lr, next_params);
          if (zero3) lr = copy_out_layer(l, true, lr);
          if (const std::int64_t next = next_forward[static_cast<std::size_t>(l)]; next >= 0)
            next_params = gather(next, true, ready);
          // Overlapped ZeRO-1/2 gather: the LM head one layer ahead of its use too.
          if (l + 1 == layers && overlap_gather && mb == 0 && extra) m.head_params = gather_table("lm_head", ready);
        }
        m.inputs[static_cast<std::size_t>(l)] = m.x;
        LayerOut out = forward_layer(static_cast<int>(l), m.x, lr);
        if (data_)
          for (int ti = 0; ti < emit_t_; ++ti)
            prog_.outputs.push_back(
                OutputCheck{out.y[ti], {Piece{concat("L", l, "/y"), Rect{global_row(ti), 0, n(), h}, 0, 0}}});
        m.x = out.y;
        ready = out.done;
        m.saved[static_cast<std::size_t>(l)] = std::move(out.saved);
        break;
      }
      case StepPhase::backward_begin: {
        if (m.saved.empty()) m.saved.assign(L, LayerData{});  // a backward generated without its forward
        if (m.inputs.empty()) m.inputs.assign(L, PerRank{});
        if (!m.head_params.empty()) ready = merge(ready, m.head_params);
        if (extra) ready = extra->head(mb_prefix_, mbi, ready, dp_active_ ? dp_.get() : nullptr);
        OpCtx ctx{static_cast<int>(layers - 1), false, "", train && data_};
        m.dy = alloc(ctx, "y_grad", n(), h, [&](int ti) {
          return std::vector<Piece>{Piece{"dy", Rect{global_row(ti), 0, n(), h}, 0, 0}};
        });
        if (zero3) next_params = backward_gather(layers - 1, ready);
        break;
      }
      case StepPhase::backward_layer: {
        Deps lr = ready;
        if (zero3) {
          if (regathered(l)) lr = copy_out_layer(l, false, merge(lr, next_params));
          if (l > 0) next_params = backward_gather(l - 1, ready);
        }
        if (req_.step.recompute == model::Recompute::full && req_.options.forward &&
            (l + 1) % std::max<std::int64_t>(1, req_.step.recompute_every) == 0) {
          // The layer's forward again, TP communication included, timing only.
          const bool data = data_;
          data_ = false;
          recompute_ = true;
          lr = forward_layer(static_cast<int>(l), m.inputs[static_cast<std::size_t>(l)], lr).done;
          recompute_ = false;
          data_ = data;
        } else if (req_.step.recompute == model::Recompute::selective) {
          // The attention core's forward (its [S, S] scores are not saved), as the rank ran it: the
          // whole sequence on its heads/(tp up) query heads (Ulysses: after the all-to-all; with up 1
          // the TP rank's heads) and the kv heads those use.
          recompute_ = true;
          OpCtx rc{static_cast<int>(l), true, "", false};
          for (int ti = 0; ti < emit_t_; ++ti) {
            model::AttentionKernel k{sh_.batch, sh_.heads / t_ / sh_.up, sh_.kv_heads_up(), sh_.seq, sh_.seq,
                                     sh_.head_dim, sh_.causal, 0, model::Pass::forward};
            k.unfused = sh_.unfused_attention;
            k.time_factor = sh_.attention_time_factor;
            lr[ti] = {compute(ti, prefix(rc) + "/attention", k, labels(rc, -1, "attention"), -1, lr[ti])};
          }
          recompute_ = false;
        } else if (req_.step.recompute == model::Recompute::op && req_.options.forward) {
          lr = recompute_unsaved_ops(static_cast<int>(l), lr);
        }
        if (pipe.zero_bubble) defer_weights_ = &held_weights[{mb, l}];
        LayerGrad g = backward_layer(static_cast<int>(l), m.saved[static_cast<std::size_t>(l)], m.dy, lr);
        defer_weights_ = nullptr;
        // ZeRO-3 before the last micro-batch: FSDP reduce-scatters each layer's gradient anyway.
        if (zero3 && extra && !dp_active_)
          for (int ti = 0; ti < emit_t_; ++ti)
            dp_->reduce_layer(rank(ti), concat(mb_prefix_, "L", l, "/bwd"), static_cast<int>(l),
                              sh_.layer_params(), g.done[ti]);
        m.dy = std::move(g.dx);
        ready = std::move(g.done);
        break;
      }
      case StepPhase::backward_end:
        if (extra) ready = extra->embedding_backward(mb_prefix_, mbi, ready, dp_active_ ? dp_.get() : nullptr);
        // ... and the root module's (embedding, final norm, LM head), gathered per micro-batch likewise.
        if (zero3 && extra && !dp_active_)
          for (int ti = 0; ti < emit_t_; ++ti)
            dp_->reduce_layer(rank(ti), mb_prefix_ + "root", -1, 2 * (req_.step.vocab / t_) * h + h, ready[ti]);
        break;
      case StepPhase::forward_recv: {
        fresh(m);
        // A stage after the first gathers its parameters as one bucket (make_dp_sync), dispatched when
        // the step begins, while the stage waits for its first activation; every layer of its first
        // forward, and the LM head, waits for it.
        if (overlap_gather && mb == 0 && !forward_layers.empty() && l == forward_layers.front()) {
          const std::int64_t table = stage_ == stages - 1 ? (req_.step.vocab / t_) * h : 0;
          const auto own = static_cast<std::int64_t>(forward_layers.size()) * sh_.layer_params() + table;
          Deps all(static_cast<std::size_t>(t_));
          for (int ti = 0; ti < emit_t_; ++ti) all[ti] = dp_->gather_layer(rank(ti), "params", -1, own, ready[ti]);
          stage_params = all;
          if (table > 0) m.head_params = all;
        }
        ready = merge(ready, stage_transfer(false, (stage_ + stages - 1) % stages, true, mb, l, {}));
        OpCtx ctx{static_cast<int>(l), true, "", false};
        m.x = alloc(ctx, "x", n(), h, [](int) { return std::vector<Piece>{}; });
        break;
      }
      case StepPhase::forward_send:
        stage_transfer(true, (stage_ + 1) % stages, true, mb, l, ready);
        break;
      case StepPhase::backward_recv: {
        fresh(m);
        ready = merge(ready, stage_transfer(false, (stage_ + 1) % stages, false, mb, l, {}));
        OpCtx ctx{static_cast<int>(l), false, "", false};
        m.dy = alloc(ctx, "y_grad", n(), h, [](int) { return std::vector<Piece>{}; });
        break;
      }
      case StepPhase::backward_send:
        stage_transfer(true, (stage_ + stages - 1) % stages, false, mb, l, ready);
        break;
      case StepPhase::backward_weight: {
        // The stage's work so far includes the W: the DP sync's serial form (finish_backward) and the
        // optimizer after the last one wait for it.
        const auto it = held_weights.find({mb, l});
        if (it == held_weights.end())
          throw std::logic_error(fmt::format("TPSP generator: the W of micro-batch {} layer {} before its B", mb, l));
        const Deps now = ready;
        for (const WeightPass& w : it->second) ready = merge(ready, w(now));
        held_weights.erase(it);
        break;
      }
    }
  }
  if (!held_weights.empty()) throw std::logic_error("TPSP generator: a B whose W the pipeline order never runs");
  micro_batch_ = -1;
  mb_prefix_.clear();
  dp_active_ = false;
  if (!req_.options.backward) return;
  Deps synced = ready;
  if (dp_)
    for (int ti = 0; ti < emit_t_; ++ti) {
      const auto ends = dp_->finish_backward(rank(ti), ready[ti]);
      synced[ti].insert(synced[ti].end(), ends.begin(), ends.end());
    }
  if (dp_ && train && data_) up_gradient_checks(layers);
  if (!step) return;
  // The stage's layers, the embedding on the first stage, the LM head on the last.
  const std::int64_t table = (req_.step.vocab / t_) * h;
  const std::int64_t own = layers / stages * sh_.layer_params() + (stage_ == 0 ? table : 0) + (stage_ == stages - 1 ? table : 0);
  std::vector<std::int64_t> elements(static_cast<std::size_t>(t_));
  for (int ti = 0; ti < emit_t_; ++ti) elements[ti] = dp_ ? dp_->optimizer_elements(rank(ti)) : own;
  const Deps opt = extra->optimizer(elements, synced);
  if (dp_ && !overlap_gather)
    for (int ti = 0; ti < emit_t_; ++ti) dp_->gather_updated(rank(ti), opt[ti]);
}

std::int64_t Builder::stage_tag(bool forward, std::int64_t mb, std::int64_t layer) const {
  // One tag per (micro-batch, boundary layer, direction); the ranks at both ends tell the positions apart.
  return tag_block(TagSpace::pipeline, (mb * (sh_.layers + 2) + layer + 1) * 2 + (forward ? 1 : 0), 1);
}

// With sequence parallelism each TP rank sends its own n rows (Megatron's p2p tensor shape is
// seq / tp under --sequence-parallel: megatron/core/pipeline_parallel/schedules.py get_tensor_shapes).
// A receive is posted when the step begins (no dependencies): the transfer runs as soon as its
// sender reaches it, and the work that needs it waits for it. A send waits for `after`.
Deps Builder::stage_transfer(bool send, int peer_stage, bool forward, std::int64_t mb, std::int64_t layer,
                             const Deps& after) {
  const RankLayout peer = layout(peer_stage);
  const Bytes size = bytes(n() * sh_.hidden);
  const std::int64_t tag = stage_tag(forward, mb, layer);
  const std::string what = std::string(forward ? "" : "grad_") + (send ? "send" : "recv");
  const std::string op = "pp_" + what;
  Deps out(static_cast<std::size_t>(t_));
  for (int ti = 0; ti < emit_t_; ++ti) {
    TaskLabels lab;
    lab.layer = static_cast<int>(layer);
    lab.micro_batch = micro_batch_;
    lab.phase = forward ? Phase::forward : Phase::backward;
    lab.op = op;
    const int other = peer.rank(ti, up_index_, replica_);
    TaskKind kind = send ? TaskKind{SendTask{other, size, tag, pp_comm_.p2p_engine, pp_comm_.sms}}
                         : TaskKind{RecvTask{other, size, tag}};
    out[ti] = {add(ti, concat(mb_prefix_, "pp/", what, "/L", layer), pp_comm_.p2p_stream(), std::move(kind),
                   std::move(lab), -1, send ? after[ti] : std::vector<TaskId>{})};
  }
  return out;
}

// Every rank of a TP position holds the same weight shard, whichever UP index and DP replica it
// is in; each computed its gradient over its own tokens, so the gradients are summed over the
// up x dp ranks of that position (DeepSpeed-Ulysses syncs over the sequence-parallel ranks too).
// rank = (d * up + u) * tp + ti: the sync's "replicas" are the up x dp pairs (u, d), tp members each.
// A pipeline stage syncs its own layers among its ranks.
void Builder::make_dp_sync() {
  if (dp_ && mirror_inexact_.empty()) mirror_inexact_ = dp_->mirror_inexact();
  dp_.reset();
  if (sh_.dp * sh_.up <= 1 || !req_.options.backward) return;
  DpConfig cfg;
  cfg.dp = sh_.dp * sh_.up;
  cfg.members = sh_.tp;
  cfg.first_rank = stage_first();
  cfg.sharding = req_.step.dp_sharding;
  cfg.kind = req_.dp_kind;
  cfg.schedule = req_.schedule;
  // Megatron-LM does not bucket a later stage's gradients, "since data-parallel communication on these
  // stages is not on the critical path" (megatron/core/distributed/distributed_data_parallel.py,
  // core_r0.8.0): one bucket, reduced once the stage's backward is done and its parameters gathered as one.
  if (stage_ > 0) cfg.schedule.dp_bucket_bytes = std::numeric_limits<Bytes>::max();
  cfg.dtype = sh_.activation_dtype();
  cfg.grad_dtype = grad_dtype();
  if (req_.step.fp8_param_gather) cfg.layer_gather_dtype = topo::Dtype::fp8;
  if (cfg.sharding == model::DpSharding::zero3) cfg.fsdp = req_.step.fsdp;
  cfg.as_p2p = req_.options.dp_as_p2p;
  cfg.mirror = req_.options.mirror_dp;
  // Mirror mode: DP replicas 0..mirror_replicas - 1, i.e. sync replicas (u, d) for every u and those d.
  cfg.simulated = sh_.up * req_.mirror_replicas;
  cfg.cluster = req_.cluster;
  dp_ = std::make_unique<DpSync>(g_, &prog_, cfg);
}

void Builder::generate() {
  if (req_.piece == TpspPiece::ag_gemm || req_.piece == TpspPiece::gemm_rs) {
    prog_.computation = "gemm";
    prog_.inputs = {TensorDecl{"x", S(), req_.piece_k}, TensorDecl{"w", req_.piece_k, req_.piece_n}};
    for (int d = 0; d < sh_.dp; ++d) {
      set_replica(d);
      req_.piece == TpspPiece::ag_gemm ? piece_ag_gemm() : piece_gemm_rs();
    }
    return;
  }
  const std::int64_t layers = req_.options.scope == Scope::layer ? 1 : sh_.layers;
  const std::int64_t h = sh_.hidden;
  // The backward computes something only after a forward: it differentiates what the forward did.
  const bool train = req_.options.forward && req_.options.backward;
  // A step carries timing only (its micro-batches would repeat the same data); DP syncs the gradients.
  // TP images emit the first TP rank's tasks alone: no data (a mirrored schedule has no dataflow).
  // Without sequence parallelism the baseline's all-reduces leave every rank the whole sequence, which
  // the builder's buffers (a shard per rank) do not describe: timing only.
  data_ = req_.options.scope != Scope::step && req_.tp_images == 1 && !allreduce_form();
  make_dp_sync();
  if (req_.options.forward) {
    prog_.computation = train ? "tpsp_train" : "tpsp_forward";
    prog_.attributes = {{"batch", sh_.batch},   {"heads", sh_.heads}, {"kv_heads", sh_.kv_heads},
                        {"head_dim", sh_.head_dim}, {"ffn", sh_.ffn},     {"gated", sh_.gated ? 1 : 0},
                        {"causal", sh_.causal ? 1 : 0}, {"layers", layers}};
    prog_.inputs.push_back(TensorDecl{"x", sh_.rows(), h});
    for (std::int64_t l = 0; l < layers; ++l) {
      const std::string wp = concat("L", l, "/");
      const std::int64_t Q = sh_.heads * sh_.head_dim, KV = sh_.kv_heads * sh_.head_dim;
      prog_.inputs.push_back(TensorDecl{wp + "w_qkv", h, Q + 2 * KV});
      prog_.inputs.push_back(TensorDecl{wp + "w_o", Q, h});
      prog_.inputs.push_back(TensorDecl{wp + "w1", h, sh_.ffn * (sh_.gated ? 2 : 1)});
      prog_.inputs.push_back(TensorDecl{wp + "w2", sh_.ffn, h});
    }
    if (train) prog_.inputs.push_back(TensorDecl{"dy", sh_.rows(), h});  // dL/d(last layer's output)
  }
  // Mirror mode: replicas 0..mirror_replicas - 1 alone; the others are their images (docs/schedules.md,
  // "Symmetry"). The single-GEMM pieces above build every replica.
  const int replicas = req_.options.mirror_dp ? req_.mirror_replicas : sh_.dp;
  // Pipeline stages one after the other, each with its own DP sync (a stage syncs its own layers).
  for (stage_ = 0; stage_ < sh_.pp; ++stage_) {
    if (stage_ > 0) make_dp_sync();
    for (int d = 0; d < replicas; ++d) {
      // Node images (tp_images above tp x up: a node's replicas at tp 1): the first of each group alone.
      const int replica_ranks = sh_.tp * sh_.up;
      if (req_.tp_images > replica_ranks && !req_.tp_images_by_filter && d * replica_ranks % req_.tp_images != 0) continue;
      set_replica(d);
      // Every UP index of the replica draws the same tags and collective instances, so that the
      // Ulysses transfers of one pass match those of the others (TP transfers and collectives of
      // different UP indices involve different ranks and cannot collide).
      const std::int64_t tag0 = tags_.position(), instance0 = next_instance_;
      std::int64_t tag1 = tag0, instance1 = instance0;
      for (int u = 0; u < sh_.up; ++u) {
        tags_.set_position(tag0);
        next_instance_ = instance0;
        set_up_index(u);
        replica_step(layers, train);
        tag1 = std::max(tag1, tags_.position());
        instance1 = std::max(instance1, next_instance_);
      }
      tags_.set_position(tag1);
      next_instance_ = instance1;
    }
  }
  stage_ = sh_.pp - 1;  // dp_ is the last stage's
  if (dp_ && mirror_inexact_.empty()) mirror_inexact_ = dp_->mirror_inexact();
}

}  // namespace tpsp

namespace {

[[noreturn]] void refuse(const TpspRequest& r, const std::string& path, const std::string& msg) {
  throw InputError(r.label, path, msg);
}

void check(const TpspRequest& r) {
  const TpspShape& s = r.shape;
  if (s.tp < 1) refuse(r, "$.parallel.tp", "tp must be >= 1");
  if (s.dp < 1) refuse(r, "$.parallel.dp", "dp must be >= 1");
  if (s.up < 1) refuse(r, "$.parallel.up", "up must be >= 1");
  if (s.seq < 1 || s.seq % (s.tp * s.up) != 0)
    refuse(r, "$.training.sequence_length",
           concat("sequence length ", s.seq, " is not a positive multiple of tp x up = ", s.tp * s.up));
  if (s.batch < 1) refuse(r, "$.training.micro_batch", "micro batch must be >= 1");
  if (schedule_strategy(r.kind, r.schedule).sliced() || (s.up > 1 && up_strategy(r).sliced())) {
    if (r.schedule.slices < 1) refuse(r, "$.schedule.slices", "slices must be >= 1");
    if (s.seq / (s.tp * s.up) < r.schedule.slices)
      refuse(r, "$.schedule.slices",
             fmt::format("{} slices do not fit in a sequence chunk of {} positions (sequence {} / (tp {} x up {}))",
                         r.schedule.slices, s.seq / (s.tp * s.up), s.seq, s.tp, s.up));
  }
  if (r.piece != TpspPiece::layers) {
    if (s.up != 1) refuse(r, "$.parallel.up", "the single-GEMM pieces are TPSP only (up = 1)");
    if (r.piece_k < 1 || r.piece_n < 1) refuse(r, "$", "GEMM dimensions must be positive");
    if (r.piece == TpspPiece::ag_gemm && r.piece_n % s.tp != 0) refuse(r, "$", "N must be a multiple of tp");
    if (r.piece == TpspPiece::gemm_rs && r.piece_k % s.tp != 0) refuse(r, "$", "K must be a multiple of tp");
    return;
  }
  if (s.hidden < 1 || s.head_dim < 1 || s.ffn < 1 || s.layers < 1) refuse(r, "$.model", "model dimensions must be positive");
  if (s.heads < 1 || s.heads % s.tp != 0)
    refuse(r, "$.parallel.tp", fmt::format("model.heads {} cannot be split over tp = {}", s.heads, s.tp));
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0)
    refuse(r, "$.model.kv_heads", fmt::format("{} query heads are not a multiple of {} kv heads", s.heads, s.kv_heads));
  if (s.kv_heads % s.tp != 0 && s.tp % s.kv_heads != 0)
    refuse(r, "$.parallel.tp",
           concat("model.kv_heads ", s.kv_heads, " neither divide among nor replicate evenly over tp = ", s.tp));
  if (s.ffn % s.tp != 0)
    refuse(r, "$.parallel.tp", fmt::format("model.ffn_hidden {} is not a multiple of tp = {}", s.ffn, s.tp));
  if (s.up > 1) {
    // Ulysses: each TP rank's heads split over the UP ranks; its kv heads split likewise, or each UP
    // rank keeps (a copy of) the one kv head its query heads use.
    if (s.heads % (s.tp * s.up) != 0)
      refuse(r, "$.parallel.up", fmt::format("model.heads {} cannot be split over tp x up = {}", s.heads, s.tp * s.up));
    const std::int64_t kt = s.kv_heads_local();
    if (kt % s.up != 0 && s.up % kt != 0)
      refuse(r, "$.parallel.up",
             concat(kt, " kv heads per TP rank neither divide among nor replicate evenly over up = ", s.up));
  }
  if (s.dp > 1 && r.schedule.dp_bucket_bytes < 1)
    refuse(r, "$.schedule.dp_bucket_bytes", "the DP bucket size must be >= 1 byte");
  if (s.pp < 1) refuse(r, "$.parallel.pp", "pp must be >= 1");
  if (s.pp > 1) {
    if (r.options.scope != Scope::step)
      refuse(r, "$.parallel.pp", "pipeline parallelism needs a whole step (scope step): stages pass micro-batches");
    if (!r.options.forward || !r.options.backward)
      refuse(r, "$.parallel.pp", "pipeline parallelism is simulated for training (forward and backward)");
    if (s.layers % (std::int64_t{s.pp} * s.virtual_stages) != 0)
      refuse(r, "$.parallel.pp",
             fmt::format("model.layers {} is not divisible by pp x virtual_stages = {}", s.layers,
                         std::int64_t{s.pp} * s.virtual_stages));
    if (s.virtual_stages > 1 && r.step.micro_batches % s.pp != 0)
      refuse(r, "$.training.grad_accumulation",
             fmt::format("the interleaved schedule runs micro-batches in groups of pp: {} is not a multiple of {}",
                         r.step.micro_batches, s.pp));
    if (r.step.dp_sharding == model::DpSharding::zero3)
      refuse(r, "$.parallel.dp_sharding", "ZeRO-3 is not supported with pp > 1");
  }
  if (s.zero_bubble) {
    if (s.pp < 2) refuse(r, "$.parallel.pp_schedule", "the zb-h1 schedule needs pp >= 2");
    if (s.virtual_stages != 1)
      refuse(r, "$.parallel.virtual_stages",
             fmt::format("the zb-h1 schedule runs one chunk of layers per stage: virtual_stages must be 1, not {}",
                         s.virtual_stages));
    if (s.up > 1) refuse(r, "$.parallel.pp_schedule", fmt::format("the zb-h1 schedule needs up 1, not {}", s.up));
  }
  if (s.virtual_stages < 1) refuse(r, "$.parallel.virtual_stages", "virtual_stages must be >= 1");
  if (r.options.scope == Scope::step) {
    // A workload of blocks alone (no vocabulary) is the usual way here: say what to run instead.
    if (r.step.vocab < 1)
      refuse(r, "$.model.vocab",
             "a step needs the model's vocabulary (embedding and LM head), which this workload does not give: "
             "set model.vocab, or simulate --scope layer or stack");
    if (r.step.vocab % s.tp != 0)
      refuse(r, "$.model.vocab",
             concat("a step needs a vocabulary that splits over tp = ", s.tp, " (vocab ", r.step.vocab, ")"));
    if (r.step.micro_batches < 1) refuse(r, "$.training.grad_accumulation", "grad_accumulation must be >= 1");
  }
}

}  // namespace

double estimated_tasks(const TpspRequest& request) {
  TpspRequest probe = request;
  probe.shape.pp = 1;
  probe.shape.virtual_stages = 1;
  probe.shape.zero_bubble = false;  // the same tasks, in another order
  probe.reserve_tasks = 0;  // room for the whole graph, not for a probe of a layer or two
  const auto size = [&](std::int64_t l, std::int64_t m) {
    probe.shape.layers = l;
    probe.step.micro_batches = m;
    return static_cast<double>(generate_tpsp(probe).graph.size());
  };
  const double t11 = size(1, 1), t21 = size(2, 1), t12 = size(1, 2), t22 = size(2, 2);
  const double d = t22 - t21 - t12 + t11, c = t21 - t11 - d, b = t12 - t11 - d, a = t11 - b - c - d;
  const auto L = static_cast<double>(request.options.scope == Scope::layer ? 1 : request.shape.layers);
  const auto M = static_cast<double>(request.options.scope == Scope::step ? std::max<std::int64_t>(1, request.step.micro_batches) : 1);
  return a + b * M + c * L + d * L * M;
}

Schedule generate_tpsp(const TpspRequest& request) {
  check(request);
  Schedule s;
  s.graph = TaskGraph(request.shape.tp * request.shape.up * request.shape.dp * request.shape.pp);
  s.graph.reserve(request.reserve_tasks);
  const std::optional<Parallelism>& par = request.options.parallelism;
  s.parallelism = par.value_or(Parallelism::tpsp);
  s.kind = s.parallelism == Parallelism::dp ? request.dp_kind
           : s.parallelism == Parallelism::up ? request.up_kind
                                               : request.kind;
  s.scope = request.options.scope;
  s.tokens = request.shape.rows() * request.shape.dp *
             (request.options.scope == Scope::step ? std::max<std::int64_t>(1, request.step.micro_batches) : 1);
  s.gpus = request.shape.tp * request.shape.up * request.shape.dp * request.shape.pp;
  s.pipeline_stages = request.shape.pp;
  auto program = std::make_shared<DataflowProgram>();
  tpsp::Builder builder(request, s, *program);
  builder.generate();
  s.mirror_inexact = builder.mirror_inexact_;
  // The P2P form of the DP sync carries no data: without it the program would not compute a step.
  const bool dp_p2p =
      request.shape.dp * request.shape.up > 1 && (request.options.dp_as_p2p || request.options.mirror_dp);
  // TP images emit the first TP rank's tasks alone: no data either (Builder::generate).
  if (!dp_p2p && request.tp_images == 1) s.dataflow = std::move(program);
  if (request.options.mirror_dp && (request.shape.dp > 1 || request.tp_images > 1) &&
      request.piece == TpspPiece::layers) {
    // The simulated replicas' ranks of each stage do the work; a transfer end on a proxy rank loads the
    // rank of the simulated group in the same position, as the mirrored transfer into that rank would.
    // With TP images, the first of each TP group stands for its group: the others' tasks are not
    // emitted, or built and dropped (each TP rank's tasks wait on its own and on collectives alone,
    // which retain() checks), and a transfer end on one of them loads the first of its group.
    int tp_images = request.tp_images;
    const int members = request.shape.tp * request.shape.up * request.mirror_replicas;
    const int stage_ranks = request.shape.tp * request.shape.up * request.shape.dp;
    if (tp_images > 1 && request.tp_images_by_filter) {
      std::vector<bool> keep(s.graph.size());
      for (TaskId id = 0; id < s.graph.size(); ++id) keep[id] = s.graph.task(id).rank % tp_images == 0;
      // Where a task waits for another TP rank's, the ranks are not images of one another: the graph
      // stays whole (replicas mirrored alone), saying why, for generate() to build it so.
      if (const auto edge = s.graph.retain(keep)) {
        s.tp_images_refused = fmt::format("task '{}' waits for '{}' of another TP rank",
                                          s.graph.task(edge->second).name, s.graph.task(edge->first).name);
        tp_images = 1;
      }
    }
    s.simulated_ranks = members / tp_images * request.shape.pp;
    s.replicas = request.shape.dp / request.mirror_replicas;
    s.tp_images = tp_images;
    std::vector<int> alias(static_cast<std::size_t>(s.graph.num_ranks()));
    for (std::size_t r = 0; r < alias.size(); ++r) {
      const int rank = static_cast<int>(r), first = rank / stage_ranks * stage_ranks;
      const int local = (rank - first) % members;
      alias[r] = first + local - local % tp_images;
    }
    s.graph.set_load_alias(std::move(alias), stage_ranks, tp_images);
  }
  return s;
}

TpspRequest tpsp_request(const model::Workload& w, const std::string& label, const topo::Cluster& cluster,
                         model::ScheduleKind kind, const GenerateOptions& options) {
  TpspRequest r;
  r.label = label;
  r.cluster = &cluster;
  if (w.parallel.world() > cluster.num_ranks())
    throw InputError(label, "$.parallel",
                     fmt::format("tp x up x dp x pp = {} ranks, but cluster '{}' has {}", w.parallel.world(), cluster.name,
                                 cluster.num_ranks()));
  // With Ulysses the recomputed K would cross the all-to-all again, which recompute_unsaved_ops does
  // not emit; torchtitan, whose policy it is, has no Ulysses.
  if (w.recompute == model::Recompute::op && w.parallel.up > 1)
    throw InputError(label, "$.training.recompute",
                     concat("recompute \"op\" (torchtitan's per-op checkpointing) needs up 1, not ", w.parallel.up));
  // Ulysses projects each head group's block of QKV apart already (UlyssesEmitter); torchtitan, whose
  // separate projections these are, has no Ulysses.
  if (w.separate_projections && w.parallel.up > 1)
    throw InputError(label, "$.training.projections",
                     concat("projections \"separate\" needs up 1, not ", w.parallel.up));
  // Ulysses' all-to-all carries q, k and v in head-group blocks; the frameworks that split with
  // torch.split (llm-foundry, Megatron-LM of 2021-2022) have no Ulysses.
  if (w.qkv_grad_cat && w.parallel.up > 1)
    throw InputError(label, "$.training.qkv_grad_cat", concat("qkv_grad_cat needs up 1, not ", w.parallel.up));
  const model::Architecture& a = w.arch;
  r.shape = TpspShape{w.parallel.tp, w.parallel.up, w.parallel.dp, w.sequence_length, w.micro_batch, a.hidden,
                      a.heads, a.kv_heads, a.head_dim, a.ffn_hidden, a.gated_mlp, a.causal, a.layers, w.dtype,
                      w.unfused_attention, w.parallel.pp, w.parallel.virtual_stages, w.parallel.sequence_parallel,
                      a.rotary,           w.eager_elementwise, a.bias && !w.bias_grad_fused,
                      w.hidden_dropout > 0.0, w.fp8_dynamic_scaling,
                      w.parallel.pp_schedule == model::PipelineSchedule::zb_h1};
  r.shape.attention_time_factor = w.attention_time_factor.value;
  r.shape.norm_kernel = w.norm_kernel;
  r.shape.separate_projections = w.separate_projections;
  r.shape.qkv_grad_cat = w.qkv_grad_cat;
  r.shape.sync_tp_allreduce = !w.parallel.sequence_parallel && !w.parallel.async_tp_allreduce;
  // `kind` is the compared parallelism's schedule; the others run the workload file's.
  const auto compared = [&](Parallelism p) { return !options.parallelism || *options.parallelism == p; };
  r.kind = compared(Parallelism::tpsp) ? kind : w.schedule.kind;
  r.up_kind = compared(Parallelism::up) ? kind : w.schedule.kind;
  r.dp_kind = compared(Parallelism::dp) ? kind : w.schedule.kind;
  // TE's pipelined reduce-scatter cuts each TP chunk into 4 along positions (te_userbuffers.cpp).
  if (r.kind == model::ScheduleKind::baseline && w.schedule.tp_baseline_te_userbuffers && w.parallel.tp > 1 &&
      w.sequence_length % (std::int64_t{w.parallel.tp} * w.parallel.up * 4) != 0)
    throw InputError(label, "$.schedule.tp_baseline",
                     fmt::format("te_userbuffers splits each TP chunk in 4: the sequence {} must be divisible by "
                                 "tp x up x 4 = {}",
                                 w.sequence_length, std::int64_t{w.parallel.tp} * w.parallel.up * 4));
  r.schedule = w.schedule;
  r.schedule.dp_bucket_bytes = model::dp_bucket_bytes(w);
  r.options = options;
  r.step = StepOptions{w.grad_accumulation, w.recompute,      w.parallel.dp_sharding,          a.vocab,
                       w.gradient_dtype(),  w.parallel.overlap_param_gather, w.recompute_every,
                       w.fp8_param_gather,  w.clip_grad};
  r.step.fsdp = w.parallel.fsdp;
  r.step.reshard_after_forward = w.parallel.reshard_after_forward;
  r.step.cross_entropy = w.cross_entropy;
  return r;
}

}  // namespace fusesim::sched
