#pragma once
// The TPSP layer builder (sched/tpsp.cpp), shared with the schedule strategies (sched/strategy.hpp)
// that lower its communication regions: not an interface for other callers.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fusesim/sched/communicator.hpp"
#include "fusesim/sched/dataflow.hpp"
#include "fusesim/sched/dp.hpp"
#include "fusesim/sched/ring.hpp"
#include "fusesim/sched/step.hpp"
#include "fusesim/sched/strategy.hpp"
#include "fusesim/sched/tags.hpp"
#include "fusesim/sched/tpsp.hpp"
#include "fusesim/sched/ulysses.hpp"
#include "fusesim/util/concat.hpp"

namespace fusesim::sched::tpsp {

// The buffers of a forward layer that its backward reads (empty without dataflow).
struct LayerData {
  PerRank x;                     // layer input shard [n, h]
  PerRank w_qkv, w_o, w1, w2;    // weight shards
  PerRank ln1, ln2;              // LayerNorm output shards [n, h] (re-gathered by the backward)
  PerRank qkv, attn, fc1, act;   // [S, qkv_local], [S, q_local], [S, fc1_local], [S, ffn_local]
  PerRank h1;                    // [n, h]
};

class Builder {
 public:
  Builder(const TpspRequest& req, Schedule& out, DataflowProgram& prog)
      : req_(req), sh_(req.shape), g_(out.graph), prog_(prog),
        strategy_(tp_strategy(req)),
        comm_(tp_communicator(req.schedule, strategy_)), pp_comm_(make_communicators(req.schedule).pp),
        t_(req.shape.tp), emit_t_(req.tp_images > 1 && !req.tp_images_by_filter ? 1 : req.shape.tp),
        elem_(topo::bytes_per_element(req.shape.activation_dtype())),
        up_(req, out.graph, prog, tags_, next_instance_) {
    k_ = strategy_.slices(req.schedule);
  }

  static TpCommunicator tp_communicator(const model::ScheduleOptions& schedule, const TpStrategy& strategy) {
    TpCommunicator c = make_communicators(schedule).tp;
    if (!schedule.comm_sms) c.sms = strategy.comm_sms();
    return c;
  }

  void set_replica(int d) { replica_ = d; region_count_ = 0; }
  // Ulysses: the TP group of UP index u holds positions [u seq/up, (u+1) seq/up) of every sample.
  void set_up_index(int u) { up_index_ = u; region_count_ = 0; up_.set_position(replica_, u, stage_first()); }
  int stage_first() const { return layout().first; }
  // The ranks of pipeline stage `stage` (this builder's stage by default).
  RankLayout layout(int stage) const { return RankLayout{t_, sh_.up, sh_.dp, stage * t_ * sh_.up * sh_.dp}; }
  RankLayout layout() const { return layout(stage_); }
  int rank(int ti) const { return layout().rank(ti, up_index_, replica_); }

  void generate();

  // What the schedule strategies (sched/strategy.hpp) lower a region with: the builder's state and
  // its task, buffer and naming helpers.
  const TpspRequest& req_;
  const TpspShape& sh_;
  TaskGraph& g_;
  DataflowProgram& prog_;
  const TpStrategy& strategy_;
  const TpCommunicator comm_;  // the TP group's streams and engines (UP's and DP's: their emitters')
  const Communicator pp_comm_;  // the pipeline stages' transfers
  int t_;
  // The TP ranks whose tasks are emitted: all t_, or with TP images (TpspRequest::tp_images) the first
  // alone; per-rank vectors keep t_ entries, of which the first emit_t_ are filled.
  int emit_t_;
  int k_;
  int elem_;
  int replica_ = 0;
  int stage_ = 0;  // pipeline stage
  mutable RankGroup group_;  // group()'s, for the (UP index, replica, stage) below
  mutable int group_up_ = -1, group_replica_ = -1, group_stage_ = -1;
  int region_count_ = 0;
  // Step scope and DP (docs/schedules.md "DP", "Step"): the gradient sync, whether this micro-batch
  // syncs (the last one), whether tasks carry data ops, recomputation, the micro-batch's name prefix.
  std::unique_ptr<DpSync> dp_;
  // Why a mirrored DP sync of some stage would not be exact (DpSync::mirror_inexact), the first found.
  std::string mirror_inexact_;
  bool dp_active_ = false;
  bool data_ = true;
  bool recompute_ = false;
  int micro_batch_ = -1;
  std::string mb_prefix_;
  // ZB-H1: while set, backward_layer emits the input-gradient half (B) and leaves here, in the order it
  // would have emitted them, the emissions of its weight gradients (W), each given the work the stage
  // has done when W runs and returning its last tasks.
  using WeightPass = std::function<Deps(const Deps& now)>;
  std::vector<WeightPass>* defer_weights_ = nullptr;
  // `a`, then those of `b` not in it: a W run in place, whose `now` is its own dependencies, gets the
  // same dependency list as before the split.
  static std::vector<TaskId> merged(std::vector<TaskId> a, const std::vector<TaskId>& b) {
    for (TaskId id : b)
      if (std::find(a.begin(), a.end(), id) == a.end()) a.push_back(id);
    return a;
  }
  // Runs `w` on the work done so far, or defers it (ZB-H1).
  void weight_pass(const Deps& now, WeightPass w) {
    if (defer_weights_ != nullptr)
      defer_weights_->push_back(std::move(w));
    else
      w(now);
  }
  struct PrefixMemo {
    int layer = -1;
    const char* pass = nullptr;
    std::string mb, value;
  };
  mutable PrefixMemo prefix_memo_;
  TagCounter tags_{TagSpace::tpsp};
  std::int64_t next_instance_ = 0;
  int up_index_ = 0;
  UlyssesEmitter up_;
  std::map<std::string, int> region_ids_;

  std::int64_t S() const { return sh_.rows() / sh_.up; }  // rows of this UP index's sequence share
  std::int64_t global_row(int ti) const { return up_index_ * S() + ti * n(); }  // of TP index ti's chunk
  // Calls an AG region makes to its work per rank: one per ring step (Fuse-AG), per slice, or one.
  int ag_calls() const { return t_ == 1 ? 1 : strategy_.ag_calls(t_, k_); }
  std::int64_t n() const { return S() / t_; }
  // TP's communication as Megatron's all-reduces: the baseline without sequence parallelism
  // (strategy/tp_allreduce.cpp).
  bool allreduce_form() const { return t_ > 1 && strategy_.all_reduces(); }
  // Rows a TP rank's norms and residual adds are priced on: its own chunk under sequence parallelism,
  // the whole sequence (every rank the same) without it (TpspShape::sequence_parallel).
  std::int64_t elementwise_rows() const { return sh_.sequence_parallel ? n() : S(); }
  RowSpan chunk_span(std::int64_t c) const { return RowSpan{c * n(), n()}; }
  // Slice j of chunk c: slices cut along positions so that every row of a position stays together.
  RowSpan slice_span(std::int64_t c, int j) const {
    const std::int64_t positions = sh_.seq / sh_.up / t_;
    const std::int64_t p0 = j * positions / k_, p1 = (j + 1) * positions / k_;
    return RowSpan{c * n() + p0 * sh_.batch, (p1 - p0) * sh_.batch};
  }
  Bytes bytes(std::int64_t elements) const { return elements * elem_; }

  // Every task of a layer pass names it: formatted once per pass, not once per task.
  const std::string& prefix(const OpCtx& ctx) const {
    const char* pass = ctx.forward ? (recompute_ ? "rcp" : "fwd") : "bwd";
    if (prefix_memo_.layer != ctx.layer || prefix_memo_.pass != pass || prefix_memo_.mb != mb_prefix_) {
      prefix_memo_.layer = ctx.layer;
      prefix_memo_.pass = pass;
      prefix_memo_.mb = mb_prefix_;
      prefix_memo_.value = concat(mb_prefix_, "L", ctx.layer, "/", pass);
    }
    return prefix_memo_.value;
  }
  int region_id(const OpCtx& ctx) {
    const std::string name = prefix(ctx) + "/" + ctx.region;
    auto it = region_ids_.find(name);
    if (it != region_ids_.end()) return it->second;
    const int id = g_.add_region(Region{name, Parallelism::tpsp});
    region_ids_.emplace(name, id);
    return id;
  }
  // The test hook (TpspFault): the chunk index used at `step` of the current region on `ti`.
  std::int64_t chunk_at(int ti, int region_index, int step, std::int64_t c) const {
    const TpspFault& f = req_.fault;
    if (f.tp_index == ti && replica_ == 0 && f.region == region_index && f.step == step) return ring_mod(c + f.shift, t_);
    return c;
  }
  // For a collective's member list the fault swaps the places of members `step` and step + shift.
  std::int64_t member_chunk(int ti, int region_index, int p) const {
    const TpspFault& f = req_.fault;
    if (f.tp_index != ti || replica_ != 0 || f.region != region_index) return p;
    return Ring{t_}.swapped(p, f.step, f.shift);
  }

  TaskLabels labels(const OpCtx& ctx, int region, TaskName op) const {
    TaskLabels l;
    l.region = region;
    l.layer = ctx.layer;
    l.micro_batch = micro_batch_;
    l.phase = ctx.forward ? Phase::forward : Phase::backward;
    l.op = op;
    return l;
  }

  TaskId add(int ti, std::string name, StreamRef stream, TaskKind kind, TaskLabels lab, std::int32_t data_op,
             const std::vector<TaskId>& deps) {
    return add_rank_task(g_, rank(ti), name, stream, std::move(kind), std::move(lab), data_op, deps);
  }

  TaskId compute(int ti, std::string name, model::Kernel kernel, TaskLabels lab, std::int32_t data_op,
                 const std::vector<TaskId>& deps) {
    const auto* gemm = std::get_if<model::GemmKernel>(&kernel);
    if (gemm == nullptr || sh_.dtype != topo::Dtype::fp8)
      return add(ti, std::move(name), StreamRef{StreamKind::compute, 0},
                 ComputeTask{std::move(kernel), sh_.activation_dtype(), recompute_}, std::move(lab), data_op, deps);
    // Transformer Engine casts the GEMM's activation-side operand [m, k] from bf16 to e4m3 (read 2
    // bytes, write 1, with the amax for the next scale) in a kernel of its own before the fp8 GEMM.
    // The weight's cast is cached across micro-batches and left out; a wgrad's operand, cast and
    // transposed together with its forward input by TE, is charged here again (a few us per GEMM). No
    // FLOPs: a cast is no model math, and MFU counts none of it. Dynamic scaling reads the operand once
    // more before (its amax, 2 bytes per element): on one H200, torchtitan's compiled float8 Llama-3.1-8B
    // layer spent 3.2 ms per layer on casts and amax passes more than in bf16, fusesim 1.3 ms with
    // 3 bytes per element (docs/validation.md, "torchtitan's float8 layer on one H200").
    const std::int64_t operand = gemm->m * gemm->k * gemm->batch;
    const std::int64_t cast_bytes_per_element = sh_.fp8_dynamic_scaling ? 5 : 3;
    TaskLabels cast_labels = lab;
    cast_labels.op = "fp8_cast";
    const TaskId cast =
        add(ti, name + "/fp8_cast", StreamRef{StreamKind::compute, 0},
            ComputeTask{model::ElementwiseKernel{"fp8_cast", cast_bytes_per_element * operand, 0.0, gemm->m},
                        topo::Dtype::bf16, recompute_},
            std::move(cast_labels), -1, deps);
    return add(ti, std::move(name), StreamRef{StreamKind::compute, 0},
               ComputeTask{std::move(kernel), sh_.dtype, recompute_}, std::move(lab), data_op, {cast});
  }

  // The Send and Recv of a TP ring exchange (Fuse-AG, Fuse-RS) on `ti`, on the P2P stream; `send_data`
  // and `recv_data` say where each message's rows are.
  RingPorts ring_ports(const OpCtx& ctx, int region, int ti, Bytes chunk_bytes,
                       std::function<Ref(const RingMessage&)> send_data,
                       std::function<Ref(const RingMessage&)> recv_data) {
    auto step_labels = [this, ctx, region](const char* name, const RingMessage& m) {
      TaskLabels l = labels(ctx, region, name);
      l.chunk = m.chunk;
      l.step = m.step;
      return l;
    };
    RingPorts p;
    p.send = [this, ctx, ti, chunk_bytes, step_labels, send_data = std::move(send_data)](
                 const RingMessage& m, const std::vector<TaskId>& deps) {
      return add(ti, concat(prefix(ctx), "/", ctx.region, "/send/c", m.chunk), comm_.p2p_stream(),
                 SendTask{rank(Ring{t_}.next(ti)), chunk_bytes, m.tag(), comm_.p2p_engine, comm_.sms},
                 step_labels("send", m), op(ctx, SendOp{send_data(m)}), deps);
    };
    p.recv = [this, ctx, ti, chunk_bytes, step_labels, recv_data = std::move(recv_data)](
                 const RingMessage& m, const std::vector<TaskId>& deps) {
      std::string name = concat(prefix(ctx), "/", ctx.region, "/recv/c", m.chunk);
      if (m.sender < emit_t_)
        return add(ti, std::move(name), comm_.p2p_stream(), RecvTask{rank(m.sender), chunk_bytes, m.tag()},
                   step_labels("recv", m), op(ctx, RecvOp{recv_data(m)}), deps);
      // TP images (emit_t_ 1): the sender is an image. Turning the TP group by one member maps its Send
      // onto ti's own Send of the same step to ti + 1, and ti + 1 onto ti: ti + 1 receives that Send
      // exactly when ti receives its predecessor's, so a proxy Recv there (ti + 1's alias is ti, whose
      // links, HBM and SMs it loads), named as ti's receive and posted with its deps, stands in for it.
      return add_proxy_task(g_, rank(Ring{t_}.next(ti)), rank(ti), name, comm_.p2p_stream(),
                            RecvTask{rank(ti), chunk_bytes, m.tag_base + ti}, step_labels("recv", m), deps);
    };
    return p;
  }
  topo::Dtype grad_dtype() const { return req_.step.grad_dtype.value_or(model::default_grad_reduce_dtype(sh_.dtype)); }
  // The TP group of the current (UP index, replica), one shared list for all its collectives.
  const RankGroup& group() const {
    if (group_up_ != up_index_ || group_replica_ != replica_ || group_stage_ != stage_) {
      group_ = layout().tp_group(up_index_, replica_);
      group_up_ = up_index_;
      group_replica_ = replica_;
      group_stage_ = stage_;
    }
    return group_;
  }

  PerRank alloc(const OpCtx& ctx, const std::string& name, std::int64_t rows, std::int64_t cols,
                const std::function<std::vector<Piece>(int ti)>& init = {}) {
    PerRank out;
    if (!ctx.data) return out;
    for (int ti = 0; ti < t_; ++ti) {
      BufferDecl b;
      b.name = concat("r", rank(ti), "/", prefix(ctx), "/", name);
      b.rank = rank(ti);
      b.rows = rows;
      b.cols = cols;
      if (init) b.init = init(ti);
      out.push_back(prog_.add_buffer(std::move(b)));
    }
    return out;
  }
  std::int32_t op(const OpCtx& ctx, DataOp d) { return ctx.data ? prog_.add_op(std::move(d)) : -1; }
  Ref ref(const PerRank& b, int ti, RowSpan s, std::int64_t width) const {
    return b.empty() ? Ref{} : Ref{b[static_cast<std::size_t>(ti)], rows_rect(s.row0, s.rows, width)};
  }

  // Whether a gathered operand's own chunk stays in the shard only (see Rows).
  bool own_in_shard() const { return t_ == 1 || strategy_.own_chunk_in_shard(); }
  // Rows `s` of operand `r` on `ti`. Where the own chunk lives in the shard only, a range touching
  // it must lie within it (callers cut at chunk boundaries).
  Loc at(const Rows& r, int ti, RowSpan s) const {
    const auto i = static_cast<std::size_t>(ti);
    const std::int64_t own0 = ti * n(), own1 = own0 + n();
    if (!r.shard.empty() && own_in_shard() && s.row0 < own1 && s.row0 + s.rows > own0) {
      if (s.row0 < own0 || s.row0 + s.rows > own1)
        throw std::logic_error("TPSP generator: a row range straddles the own chunk of a gathered operand");
      return Loc{r.shard[i], s.row0 - own0};
    }
    if (r.full.empty()) return Loc{-1, s.row0};  // no dataflow
    return Loc{r.full[i], s.row0};
  }
  // The blocks of A^T B over `rows`, cut at chunk boundaries so that each block reads one buffer of
  // each operand, and merged again where consecutive pieces continue in the same buffers.
  std::vector<WgradBlock> wgrad_blocks(const Rows& a, const Rows& b, int ti, const std::vector<RowSpan>& rows) const {
    std::vector<WgradBlock> out;
    for (const RowSpan& s : rows)
      for (std::int64_t r = s.row0; r < s.row0 + s.rows;) {
        const std::int64_t end = std::min(s.row0 + s.rows, (r / n() + 1) * n());
        const RowSpan piece{r, end - r};
        const Loc la = at(a, ti, piece), lb = at(b, ti, piece);
        r = end;
        if (!out.empty()) {
          WgradBlock& p = out.back();
          if (p.a == la.buffer && p.a_row0 + p.rows == la.row0 && p.b == lb.buffer && p.b_row0 + p.rows == lb.row0) {
            p.rows += piece.rows;
            continue;
          }
        }
        out.push_back(WgradBlock{la.buffer, la.row0, lb.buffer, lb.row0, piece.rows});
      }
    return out;
  }

  std::vector<TaskId> emit_work(const OpCtx& ctx, int ti, int region, const WorkFn& work, int chunk,
                                const std::vector<RowSpan>& rows, const std::string& suffix, int step, int slice,
                                bool first, std::vector<TaskId> deps) {
    std::vector<TaskId> ids;
    for (Work& w : work(ti, chunk, rows, first)) {
      deps.insert(deps.end(), w.wait.begin(), w.wait.end());
      TaskLabels lab = labels(ctx, region, w.op);
      lab.chunk = chunk;
      lab.step = step;
      lab.slice = slice;
      std::string name = concat(prefix(ctx), "/", w.op, suffix);
      const TaskId id = w.emit ? w.emit(std::move(name), std::move(lab), deps)
                               : compute(ti, std::move(name), std::move(w.kernel), std::move(lab), w.data_op, deps);
      if (w.after) w.after(id);
      ids.push_back(id);
      deps = {id};
    }
    return ids;
  }

  // `rows`: the token rows the kernel runs over (a row-wise kernel gives each to one block).
  TaskId elementwise(const OpCtx& ctx, int ti, const std::string& name, std::string kind, std::int64_t traffic_elems,
                     std::int64_t rows, Flops flops, std::int32_t data_op, const std::vector<TaskId>& deps) {
    return compute(ti, concat(prefix(ctx), "/", name),
                   model::ElementwiseKernel{std::move(kind), bytes(traffic_elems), flops, rows}, labels(ctx, -1, name),
                   data_op, deps);
  }
  // A residual add of `rows` x h (reads two, writes one); with hidden dropout Megatron's fused
  // bias-dropout-add, which also writes the dropout's 1-byte mask.
  TaskId residual_add(const OpCtx& ctx, int ti, const std::string& name, std::int64_t rows, std::int32_t data_op,
                      const std::vector<TaskId>& deps) {
    const std::int64_t n = rows * sh_.hidden;
    const bool dropout = sh_.hidden_dropout && ctx.forward;
    return compute(ti, concat(prefix(ctx), "/", name),
                   model::ElementwiseKernel{dropout ? "dropout_add" : "add", bytes(3 * n) + (dropout ? n : 0),
                                            static_cast<Flops>(n), rows},
                   labels(ctx, -1, name), data_op, deps);
  }

  // A kernel that moves data the reference computation does not model (a cast, a copy, one multiply
  // of an unfused SwiGLU): timing only, no FLOPs counted, `bytes` read and written in all.
  TaskId stream_kernel(const OpCtx& ctx, int ti, const std::string& name, std::string kind, Bytes bytes_moved,
                       std::int64_t rows, const std::vector<TaskId>& deps) {
    return compute(ti, concat(prefix(ctx), "/", name),
                   model::ElementwiseKernel{std::move(kind), bytes_moved, 0.0, rows}, labels(ctx, -1, name), -1, deps);
  }
  // The kernels between the QKV GEMM and attention (rotary embedding, eager K/V repeat) on every rank,
  // after `ready`; `ready` itself when there are none. `backward`: theirs, between the attention
  // backward and the QKV dgrad.
  Deps qk_prologue(const OpCtx& ctx, const Deps& ready, bool backward = false);
  // The activation between FC1 and FC2 on rank ti: one kernel (carrying `data_op`), or eager SwiGLU's
  // silu then multiply. Returns the last.
  TaskId activation(const OpCtx& ctx, int ti, std::int32_t data_op, const std::vector<TaskId>& deps);
  TaskId activation_bwd(const OpCtx& ctx, int ti, std::int32_t data_op, const std::vector<TaskId>& deps);

  // Ulysses (sched/ulysses.hpp): the emitter's work on rows of `a`, or `plain` where it gives none.
  WorkFn up_work(UpWorkFn f, WorkFn plain) {
    if (!f) return plain;
    return [f = std::move(f)](int ti, int, const std::vector<RowSpan>& rows, bool first) {
      std::vector<Work> out;
      for (UpWork& w : f(ti, rows, first))
        out.push_back(Work{std::move(w.op), std::move(w.kernel), w.data_op, {}, std::move(w.after)});
      return out;
    };
  }
  UpLocate up_locate(const Rows& a) const {
    return [this, a](int ti, RowSpan s) {
      const Loc l = at(a, ti, s);
      return std::pair<BufferId, std::int64_t>{l.buffer, l.row0};
    };
  }
  void up_naming() { up_.set_naming(mb_prefix_, recompute_, micro_batch_); }

  // `plan` (Fuse-AG and t = 1 only): nothing is emitted; each rank's calls go into (*plan)[ti] in step
  // order, with their transfers, for the caller to emit where it wants them: step i's transfer before
  // the call of step i + 1, which waits for its Recv.
  // `beside_dgrad`: its collectives go on the TP communicator's re-gather stream rather than its
  // collective stream, so that the baseline backward's re-gather is issued beside the dgrad (see
  // backward_layer).
  Deps ag_region(const OpCtx& ctx, const Rows& g, std::int64_t width, const Deps& ready, const WorkFn& work,
                 std::vector<std::vector<AgCall>>* plan = nullptr, bool beside_dgrad = false);
  Deps rs_region(const OpCtx& ctx, const PerRank& pbuf, PerRank& out, std::int64_t width, const Deps& ready,
                 const WorkFn& work);

  struct LayerOut {
    PerRank y;
    Deps done;
    LayerData saved;
  };
  struct LayerGrad {
    PerRank dx;  // gradient of the layer input, shard [n, h]
    Deps done;
  };
  LayerOut forward_layer(int l, const PerRank& x, const Deps& ready);
  LayerGrad backward_layer(int l, const LayerData& fw, const PerRank& dy, const Deps& ready);
  // The backward of a column-parallel GEMM (QKV, FC1): the dgrad's reduce-scattered input gradient,
  // when the dgrad is done, and the weight gradient.
  struct ColumnGrad {
    Deps dgrad_done;
    PerRank d_in;
    PerRank dw;
  };
  ColumnGrad column_parallel_backward(const OpCtx& ctx, const std::string& name, const std::string& dw_name,
                                      const PerRank& d_out, const PerRank& weight, const PerRank& saved_shard,
                                      std::int64_t n_out, const Deps& after);
  // Ulysses Fuse-A2A: the QKV backward consuming dQKV block by block (backward_layer).
  ColumnGrad up_qkv_backward(const OpCtx& ctx, const LayerData& fw, const Deps& after);
  // What each rank must hold after layer l's backward (the reference executor compares it).
  void backward_checks(int l, const PerRank& dx, const PerRank& dw_qkv, const PerRank& dw_o, const PerRank& dw1,
                       const PerRank& dw2);
  static OpCtx with_region(OpCtx ctx, std::string region) {
    ctx.region = std::move(region);
    return ctx;
  }
  // Recompute::op: the forward ops of layer l the backward reads and the layer did not save.
  Deps recompute_unsaved_ops(int l, Deps ready);
  void piece_ag_gemm();
  void piece_gemm_rs();

  // A projection run as separate linears (TpspShape::separate_projections): one column block of its
  // weight each, named op + suffix.
  struct Part {
    const char* suffix;
    std::int64_t col0, cols;
  };
  // The parts of the column-parallel projection `name` ("qkv", "fc1"); empty when it is one GEMM.
  std::vector<Part> projection_parts(const std::string& name) const {
    if (!sh_.separate_projections) return {};
    const std::int64_t qn = sh_.q_local(), kvn = sh_.kv_local(), fl = sh_.ffn_local();
    if (name == "qkv") return {Part{".q", 0, qn}, Part{".k", qn, kvn}, Part{".v", qn + kvn, kvn}};
    if (name == "fc1" && sh_.gated) return {Part{".gate", 0, fl}, Part{".up", fl, fl}};
    return {};
  }

  // C[rows, :nn] = A[rows, :k] x op(B): a forward GEMM, or a dgrad (transpose_b: the weight shard
  // used as B^T). One buffer of A per call: the rows of one call never mix the shard and the gather
  // buffer (Fuse-AG and t = 1 pass one chunk, baseline and slice read the gather buffer only).
  // `parts`: separate linears (projection_parts). Forward, each computes its column block of C; a
  // dgrad's parts each contract over their block (the first writes C, the others add to it, as the sum
  // autograd takes), and their outputs are then summed by element-wise adds that the dataflow does
  // not model (it accumulates in place): eager PyTorch adds two at a time, torch.compile in one kernel.
  WorkFn gemm_work(const OpCtx& ctx, std::string name, const Rows& a, const PerRank& b, const PerRank& c,
                   std::int64_t k, std::int64_t nn, bool transpose_b = false, std::vector<Part> parts = {}) {
    return [this, ctx, name, a, b, c, k, nn, transpose_b, parts](int ti, int, const std::vector<RowSpan>& rows, bool) {
      GemmOp g;
      std::int64_t m = 0;
      for (const RowSpan& s : rows) {
        const Loc src = at(a, ti, s);
        if (!g.blocks.empty() && src.buffer != g.a)
          throw std::logic_error("TPSP generator: one GEMM reads rows from two buffers of A");
        g.a = src.buffer;
        g.blocks.push_back(RowBlock{src.row0, s.row0, s.rows});
        m += s.rows;
      }
      if (ctx.data) {
        g.b = b[static_cast<std::size_t>(ti)];
        g.c = c[static_cast<std::size_t>(ti)];
        g.a_cols = k;
        g.c_cols = nn;
        g.transpose_b = transpose_b;
      }
      if (parts.empty()) return std::vector<Work>{Work{name, model::GemmKernel{m, nn, k, 1}, op(ctx, std::move(g))}};
      std::vector<Work> out;
      for (const Part& p : parts) {
        GemmOp pg = g;
        if (ctx.data) {
          pg.b_col0 = p.col0;
          pg.b_cols = p.cols;
          if (transpose_b) {
            pg.a_col0 = p.col0;
            pg.a_cols = p.cols;
            pg.accumulate = !out.empty();
          } else {
            pg.c_col0 = p.col0;
            pg.c_cols = p.cols;
          }
        }
        const model::GemmKernel kernel =
            transpose_b ? model::GemmKernel{m, nn, p.cols, 1} : model::GemmKernel{m, p.cols, k, 1};
        out.push_back(Work{name + p.suffix, kernel, op(ctx, std::move(pg))});
      }
      if (transpose_b) {
        const auto n = static_cast<std::int64_t>(parts.size());
        if (sh_.eager)
          for (std::int64_t i = 1; i < n; ++i)
            out.push_back(Work{i == 1 ? name + "_sum" : concat(name, "_sum", i),
                               model::ElementwiseKernel{"add", bytes(3 * m * nn), 0.0, m}, -1});
        else
          out.push_back(Work{name + "_sum", model::ElementwiseKernel{"add", bytes((n + 1) * m * nn), 0.0, m}, -1});
      }
      return out;
    };
  }
  // dW[a_cols, b_cols] (+)= A[rows]^T B[rows]: a weight gradient, written by the region's first call
  // and accumulated by the later ones. `calls`: how many calls per rank the region makes; the last
  // one completes the gradient and hands it to the DP sync (dp_wgrad).
  // `parts`: separate linears (projection_parts), each the weight gradient of its column block; the
  // last one completes the gradient.
  WorkFn wgrad_work(const OpCtx& ctx, std::string name, const Rows& a, const Rows& b, const PerRank& c,
                    std::int64_t a_cols, std::int64_t b_cols, int calls = 1, std::vector<Part> parts = {}) {
    auto seen = std::make_shared<std::vector<int>>(static_cast<std::size_t>(t_), 0);
    if (parts.empty()) parts.push_back(Part{"", 0, b_cols});
    return [this, ctx, name, a, b, c, a_cols, b_cols, calls, seen, parts](int ti, int, const std::vector<RowSpan>& rows,
                                                                           bool first) {
      WgradOp w;
      std::int64_t k = 0;
      for (const RowSpan& s : rows) k += s.rows;
      if (ctx.data) {
        w.c = c[static_cast<std::size_t>(ti)];
        w.a_cols = a_cols;
        w.b_cols = b_cols;
        w.accumulate = !first;
        w.blocks = wgrad_blocks(a, b, ti, rows);
      }
      const bool completes = dp_active_ && ++(*seen)[static_cast<std::size_t>(ti)] == calls;
      std::vector<Work> out;
      for (const Part& p : parts) {
        WgradOp pw = w;
        if (ctx.data) {
          pw.b_col0 = p.col0;
          pw.b_cols = p.cols;
          pw.c_col0 = p.col0;
        }
        const std::string op_name = name + p.suffix;
        if (completes && &p == &parts.back()) {
          // The DP sync's gradient keeps the whole weight's name and shape.
          Work last = dp_wgrad(ctx, name, c, ti, a_cols, b_cols, k, std::move(pw), p.cols);
          last.op = op_name;
          out.push_back(std::move(last));
        } else {
          out.push_back(Work{op_name, model::GemmKernel{a_cols, p.cols, k, 1, /*accumulate_fp32=*/true},
                             op(ctx, std::move(pw)), {}});
        }
      }
      return out;
    };
  }
  // `gemm_cols`: the GEMM's width when it computes only a column block of the gradient (0: all).
  Work dp_wgrad(const OpCtx& ctx, const std::string& name, const PerRank& c, int ti, std::int64_t a_cols,
                std::int64_t b_cols, std::int64_t k, WgradOp w, std::int64_t gemm_cols = 0);
  void up_gradient_checks(std::int64_t layers);
  void replica_step(std::int64_t layers, bool train);
  // Pipeline stages: the activation (forward) or gradient (backward) of micro-batch `mb` at `layer`
  // (StepWork::layer) sent to (`send`, after `after`), or received from, the same position of stage
  // `peer_stage`.
  Deps stage_transfer(bool send, int peer_stage, bool forward, std::int64_t mb, std::int64_t layer, const Deps& after);
  std::int64_t stage_tag(bool forward, std::int64_t mb, std::int64_t layer) const;
  void make_dp_sync();
};
}  // namespace fusesim::sched::tpsp
