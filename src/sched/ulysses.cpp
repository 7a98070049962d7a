// Ulysses all-to-alls around attention, in three schedules (docs/schedules.md, "Ulysses"):
//   baseline  one all-to-all after the QKV projection and one after attention (backward:
//             after the out-projection dgrad and after the attention backward);
//   slice     the producer (QKV projection, attention, out-projection dgrad) cut along the sequence
//             into k slices, each slice's all-to-all issued as soon as its slice is computed;
//   commfuse  Fuse-A2A: the producer computed per destination in ring order u+1, ..., u-1, each
//             piece sent by P2P while the next is computed, the own piece last (it needs no transfer,
//             so the last thing on the critical path is a compute, not a transfer). After the
//             attention backward the consumer is fused instead: the QKV dgrad/wgrad take dQKV one
//             head group block at a time, own block first, each received one as it lands.
// Data layout (per TP index ti, UP index u; qg = heads/(tp*up) x head_dim, kvg likewise for the kv
// heads after the exchange, W = qg + 2 kvg):
//   qkv   [S/up, up*W]  member-major blocks [q_p | k_p | v_p] (the weight shard is laid out so);
//   hs    [S, W]        head-sharded q | k | v of every position (rows of member p at p*S/up);
//   hs_o  [S, qg]       attention output before the exchange back; attn [S/up, qg*up] after it.
#include "fusesim/sched/ulysses.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "fusesim/sched/ring.hpp"
#include "fusesim/sched/strategy.hpp"
#include "fusesim/util/concat.hpp"

namespace fusesim::sched {

std::int64_t TpspShape::kv_heads_up() const {
  const std::int64_t kt = kv_heads_local();
  return kt >= up ? kt / up : 1;  // fewer kv heads than UP ranks: each keeps the one its queries use
}

std::int64_t TpspShape::up_group_cols() const { return (heads / tp / up + 2 * kv_heads_up()) * head_dim; }

namespace {

// Adjacent spans merged: one transfer per contiguous run of rows.
std::vector<RowSpan> runs_of(const std::vector<RowSpan>& rows) {
  std::vector<RowSpan> out;
  for (const RowSpan& s : rows) {
    if (s.rows == 0) continue;
    if (!out.empty() && out.back().row0 + out.back().rows == s.row0)
      out.back().rows += s.rows;
    else
      out.push_back(s);
  }
  return out;
}

}  // namespace

UlyssesEmitter::UlyssesEmitter(const TpspRequest& req, TaskGraph& graph, DataflowProgram& program,
                               TagCounter& tags, std::int64_t& next_instance)
    : req_(req), strategy_(up_strategy(req)), sh_(req.shape), g_(graph), prog_(program),
      tags_(tags), next_instance_(next_instance), tp_(req.shape.tp), up_(req.shape.up),
      k_(strategy_.up_slices(req.schedule)),
      full_rows_(req.shape.rows()), elem_(topo::bytes_per_element(req.shape.activation_dtype())),
      comm_(make_communicators(req.schedule).up) {}

void UlyssesEmitter::set_position(int dp_index, int up_index, int first_rank) {
  first_rank_ = first_rank;
  d_ = dp_index;
  u_ = up_index;
  region_count_ = 0;
}

void UlyssesEmitter::set_naming(std::string micro_batch_prefix, bool recompute, int micro_batch) {
  mb_prefix_ = std::move(micro_batch_prefix);
  recompute_ = recompute;
  micro_batch_ = micro_batch;
}

int UlyssesEmitter::rank(int ti, int u) const { return RankLayout{tp_, up_, sh_.dp, first_rank_}.rank(ti, u, d_); }

std::int64_t UlyssesEmitter::qg() const { return sh_.heads / tp_ / up_ * sh_.head_dim; }
std::int64_t UlyssesEmitter::kvg() const { return sh_.kv_heads_up() * sh_.head_dim; }

std::vector<Piece> UlyssesEmitter::qkv_weight_pieces(int layer, int ti) const {
  const std::string w = concat("L", layer, "/w_qkv");
  const std::int64_t h = sh_.hidden, hd = sh_.head_dim;
  const std::int64_t Q = sh_.heads * hd, KV = sh_.kv_heads * hd;
  const std::int64_t qh_t = sh_.heads / tp_, qh_u = qh_t / up_, kvh_t = sh_.kv_heads_local();
  std::vector<Piece> out;
  for (int p = 0; p < up_; ++p) {
    const std::int64_t c0 = p * W();
    out.push_back(Piece{w, Rect{0, (ti * qh_t + p * qh_u) * hd, h, qg()}, 0, c0});
    // Member p's first query head (TP-local p*qh_u) uses TP-local kv head (p*qh_u) / (qh_t/kvh_t).
    const std::int64_t kv = sh_.kv_head0(ti) + (p * qh_u) / (qh_t / kvh_t);
    out.push_back(Piece{w, Rect{0, Q + kv * hd, h, kvg()}, 0, c0 + qg()});
    out.push_back(Piece{w, Rect{0, Q + KV + kv * hd, h, kvg()}, 0, c0 + qg() + kvg()});
  }
  return out;
}

int UlyssesEmitter::open_region(const std::string& name, Pending& p) {
  auto it = regions_.find(name);
  p.region = it != regions_.end() ? it->second : g_.add_region(Region{name, Parallelism::up});
  regions_.emplace(name, p.region);
  p.region_index = region_count_++;
  p.tag0 = tags_.reserve(local_rows() * up_ * up_);
  p.transfers.assign(static_cast<std::size_t>(tp_), {});
  p.runs.assign(static_cast<std::size_t>(tp_), {});
  p.dst.clear();
  return p.region;
}

// The test hook (TpspFault, read for UP index fault.tp_index of the first DP replica): a collective's
// members `step` and step + shift trade places; a Fuse-A2A send at ring distance `step` carries the
// piece of the member `shift` further on.
int UlyssesEmitter::fault_swap(int region_index, int p) const {
  const TpspFault& f = req_.fault;
  if (f.tp_index != u_ || d_ != 0 || f.region != region_index) return p;
  return Ring{up_}.swapped(p, f.step, f.shift);
}
int UlyssesEmitter::fault_shift(int region_index, int step, int p) const {
  const TpspFault& f = req_.fault;
  if (f.tp_index != u_ || d_ != 0 || f.region != region_index || f.step != step) return p;
  return static_cast<int>(ring_mod(p + f.shift, up_));
}

std::string UlyssesEmitter::prefix(int layer, bool forward) const {
  return concat(mb_prefix_, "L", layer, "/", forward ? (recompute_ ? "rcp" : "fwd") : "bwd");
}

TaskLabels UlyssesEmitter::labels(int layer, bool forward, int region, TaskName op) const {
  TaskLabels l;
  l.region = region;
  l.layer = layer;
  l.micro_batch = micro_batch_;
  l.phase = forward ? Phase::forward : Phase::backward;
  l.op = op;
  return l;
}

TaskId UlyssesEmitter::add(int ti, std::string name, StreamRef stream, TaskKind kind, TaskLabels lab,
                           std::int32_t data_op, const std::vector<TaskId>& deps) {
  return add_rank_task(g_, rank(ti, u_), name, stream, std::move(kind), std::move(lab), data_op, deps);
}

UpPerRank UlyssesEmitter::alloc(bool data, const std::string& name, std::int64_t rows, std::int64_t cols,
                                const std::function<std::vector<Piece>(int ti)>& init) {
  UpPerRank out;
  if (!data) return out;
  for (int ti = 0; ti < tp_; ++ti) {
    BufferDecl b;
    b.rank = rank(ti, u_);
    b.name = concat("r", b.rank, "/", name);
    b.rows = rows;
    b.cols = cols;
    if (init) b.init = init(ti);
    out.push_back(prog_.add_buffer(std::move(b)));
  }
  return out;
}

// Stream index 1 (a second copy engine, a second communicator's stream): the UP transfers must not
// queue behind the TP ring's P2P steps and collectives on stream 0, which run at the same time.
const RankGroup& UlyssesEmitter::group(int ti) const {
  RankGroup& g = groups_[{first_rank_, d_, ti}];
  if (g.empty()) g = RankLayout{tp_, up_, sh_.dp, first_rank_}.up_group(ti, d_);
  return g;
}

std::int64_t UlyssesEmitter::tag(const Pending& p, std::int64_t row0, int src, int dst) const {
  return p.tag0 + (row0 * up_ + src) * up_ + dst;
}

// Slice s of k of every span, cut at position boundaries (the samples of a position stay together).
std::vector<RowSpan> UlyssesEmitter::sub_slices(const std::vector<RowSpan>& rows, int s) const {
  std::vector<RowSpan> out;
  const std::int64_t b = sh_.batch;
  for (const RowSpan& span : rows) {
    const std::int64_t positions = span.rows / b;
    const std::int64_t p0 = s * positions / k_, p1 = (s + 1) * positions / k_;
    if (p1 > p0) out.push_back(RowSpan{span.row0 + p0 * b, (p1 - p0) * b});
  }
  return out;
}

UpWork UlyssesEmitter::producer_gemm(const UpProducer& p, int ti, const std::vector<RowSpan>& rows, BufferId b,
                                     BufferId cbuf, std::int64_t c_row_offset, std::int64_t c_col0, std::int64_t n,
                                     std::string opname) {
  GemmOp g;
  std::int64_t m = 0;
  for (const RowSpan& s : rows) {
    m += s.rows;
    if (!p.data) continue;
    const auto [buf, row0] = p.a(ti, s);
    if (!g.blocks.empty() && buf != g.a) throw std::logic_error("Ulysses generator: one GEMM reads rows from two buffers of A");
    g.a = buf;
    g.blocks.push_back(RowBlock{row0, s.row0 + c_row_offset, s.rows});
  }
  g.b = b;
  g.c = cbuf;
  g.a_cols = p.k;
  g.c_col0 = c_col0;
  g.c_cols = n;
  g.transpose_b = p.transpose_b;
  return UpWork{std::move(opname), model::GemmKernel{m, n, p.k, 1}, op(p.data, std::move(g)), {}};
}

UpWorkFn UlyssesEmitter::producer(int layer, bool forward, bool data, UpLocate a, const UpPerRank& b_whole,
                                  std::int64_t k, bool transpose_b,
                                  const std::function<std::vector<Piece>(int ti, int p)>& b_group, std::int64_t b_rows,
                                  std::int64_t b_cols, const UpPerRank& c, std::int64_t gc, const std::string& name,
                                  Pending& pending) {
  UpProducer p;
  p.layer = layer;
  p.forward = forward;
  p.data = data;
  p.prefix = prefix(layer, forward);
  p.name = name;
  p.region = open_region(p.prefix + "/" + name + "+a2a", pending);
  pending.dst = alloc(data, concat(p.prefix, "/up/", name, "_heads"), full_rows_, gc);
  p.a = std::move(a);
  p.b_whole = b_whole;
  p.k = k;
  p.transpose_b = transpose_b;
  p.b_group = b_group;
  p.b_rows = b_rows;
  p.b_cols = b_cols;
  p.c = c;
  p.group_cols = gc;
  p.pending = &pending;
  return strategy_.up_producer(*this, p);
}

namespace {
BufferId at(bool data, const UpPerRank& v, int ti) { return data ? v[static_cast<std::size_t>(ti)] : BufferId{-1}; }
}  // namespace

UpWorkFn UlyssesEmitter::sliced_producer(const UpProducer& pr) {
  const UpPerRank dst = pr.pending->dst;
  Pending* pend = pr.pending;
  const std::int64_t S_loc = local_rows(), gc = pr.group_cols;
  return [=, this](int ti, const std::vector<RowSpan>& rows, bool) {
    std::vector<UpWork> works;
    for (int s = 0; s < k_; ++s) {
      const std::vector<RowSpan> sub = sub_slices(rows, s);
      if (sub.empty()) continue;
      UpWork w = producer_gemm(pr, ti, sub, at(pr.data, pr.b_whole, ti), at(pr.data, pr.c, ti), 0, 0, gc * up_,
                               concat(pr.name, "/s", s));
      w.after = [=, this](TaskId id) {
        if (tp_ == 1) g_.task(id).labels.region = pr.region;
        for (const RowSpan& run : runs_of(sub)) {
          CollectiveOp cop;
          if (pr.data)
            for (int p = 0; p < up_; ++p) {
              cop.in.push_back(Ref{at(pr.data, pr.c, ti), Rect{run.row0, p * gc, run.rows, gc}});
              cop.out.push_back(Ref{at(pr.data, dst, ti), Rect{fault_swap(pend->region_index, p) * S_loc + run.row0,
                                                               0, run.rows, gc}});
            }
          TaskLabels lab = labels(pr.layer, pr.forward, pr.region, "all_to_all");
          lab.slice = s;
          const TaskId x = add(ti, concat(pr.prefix, "/", pr.name, "+a2a/a2a/r", run.row0),
                               comm_.collective_stream,
                               CollectiveTask{CollectiveKind::all_to_all, group(ti), bytes(run.rows * gc * up_),
                                              next_instance_++, comm_.collective_engine, comm_.sms},
                               std::move(lab), op(pr.data, std::move(cop)), {id});
          pend->transfers[static_cast<std::size_t>(ti)].push_back(x);
        }
      };
      works.push_back(std::move(w));
    }
    return works;
  };
}

UpWorkFn UlyssesEmitter::ring_producer(const UpProducer& pr) {
  const UpPerRank dst = pr.pending->dst;
  Pending* pend = pr.pending;
  const std::int64_t S_loc = local_rows(), gc = pr.group_cols;
  // One weight block per destination, computed in ring order, the own one last.
  std::vector<std::vector<BufferId>> wg(static_cast<std::size_t>(tp_));
  if (pr.data)
    for (int ti = 0; ti < tp_; ++ti)
      for (int p = 0; p < up_; ++p) {
        BufferDecl bd;
        bd.rank = rank(ti, u_);
        bd.name = concat("r", bd.rank, "/", pr.prefix, "/up/", pr.name, "_w/g", p);
        bd.rows = pr.b_rows;
        bd.cols = pr.b_cols;
        bd.init = pr.b_group(ti, p);
        wg[static_cast<std::size_t>(ti)].push_back(prog_.add_buffer(std::move(bd)));
      }
  return [=, this](int ti, const std::vector<RowSpan>& rows, bool) {
    const std::vector<RowSpan> runs = runs_of(rows);
    auto& rec = pend->runs[static_cast<std::size_t>(ti)];
    rec.insert(rec.end(), runs.begin(), runs.end());
    std::vector<UpWork> works;
    for (int i = 1; i <= up_; ++i) {
      const int step = i % up_;  // ring distance; the own piece (distance 0) comes last
      const int p = static_cast<int>(ring_mod(u_ + step, up_));
      const BufferId b = pr.data ? wg[static_cast<std::size_t>(ti)][static_cast<std::size_t>(p)] : -1;
      const std::string rows_tag = runs.empty() ? "" : concat("/r", runs.front().row0);
      if (step == 0) {
        // The own head group goes straight to its place among the head-sharded rows.
        UpWork w = producer_gemm(pr, ti, rows, b, at(pr.data, dst, ti), u_ * S_loc, 0, gc,
                                 concat(pr.name, "/g", p, rows_tag));
        w.after = [=, this](TaskId id) {
          if (tp_ == 1) g_.task(id).labels.region = pr.region;
        };
        works.push_back(std::move(w));
        continue;
      }
      UpWork w = producer_gemm(pr, ti, rows, b, at(pr.data, pr.c, ti), 0, p * gc, gc,
                               concat(pr.name, "/g", p, rows_tag));
      w.after = [=, this](TaskId id) {
        if (tp_ == 1) g_.task(id).labels.region = pr.region;
        const int src_block = fault_shift(pend->region_index, step, p);
        for (const RowSpan& run : runs) {
          TaskLabels lab = labels(pr.layer, pr.forward, pr.region, "send");
          lab.step = step;
          lab.chunk = p;
          add(ti, concat(pr.prefix, "/", pr.name, "+a2a/send/g", p, "/r", run.row0), comm_.p2p_stream(),
              SendTask{rank(ti, p), bytes(run.rows * gc), tag(*pend, run.row0, u_, p), comm_.p2p_engine, comm_.sms},
              std::move(lab), op(pr.data, SendOp{Ref{at(pr.data, pr.c, ti), Rect{run.row0, src_block * gc, run.rows, gc}}}),
              {id});
        }
      };
      works.push_back(std::move(w));
    }
    return works;
  };
}

void UlyssesEmitter::finish_pre(int layer, bool forward, bool data, const UpPerRank& src, std::int64_t gc,
                                const UpDeps& ready, Pending& pending, std::vector<std::vector<TaskId>>& wait) {
  const UpExchange x{layer, forward, data, src, gc, ready, pending,
                     g_.regions()[static_cast<std::size_t>(pending.region)].name};
  wait.assign(static_cast<std::size_t>(tp_), {});
  for (int ti = 0; ti < tp_; ++ti) wait[static_cast<std::size_t>(ti)] = strategy_.up_exchange(*this, x, ti);
}

std::vector<TaskId> UlyssesEmitter::collective_exchange(const UpExchange& x, int ti) {
  const auto i = static_cast<std::size_t>(ti);
  const std::int64_t S_loc = local_rows(), gc = x.group_cols;
  CollectiveOp cop;
  if (x.data)
    for (int p = 0; p < up_; ++p) {
      cop.in.push_back(Ref{x.src[i], Rect{0, p * gc, S_loc, gc}});
      cop.out.push_back(Ref{x.pending.dst[i], Rect{fault_swap(x.pending.region_index, p) * S_loc, 0, S_loc, gc}});
    }
  return {add(ti, x.region_name + "/a2a", comm_.collective_stream,
              CollectiveTask{CollectiveKind::all_to_all, group(ti), bytes(S_loc * gc * up_), next_instance_++,
                             comm_.collective_engine, comm_.sms},
              labels(x.layer, x.forward, x.pending.region, "all_to_all"), op(x.data, std::move(cop)), x.ready[i])};
}

std::vector<TaskId> UlyssesEmitter::issued_exchange(const UpExchange& x, int ti) {
  const auto i = static_cast<std::size_t>(ti);
  std::vector<TaskId> w = x.ready[i];
  w.insert(w.end(), x.pending.transfers[i].begin(), x.pending.transfers[i].end());
  return w;
}

std::vector<TaskId> UlyssesEmitter::ring_exchange(const UpExchange& x, int ti) {
  const auto i = static_cast<std::size_t>(ti);
  const std::int64_t S_loc = local_rows(), gc = x.group_cols;
  std::vector<TaskId> w = x.ready[i];
  for (const RowSpan& run : x.pending.runs[i])
    for (int step = 1; step < up_; ++step) {
      const int from = static_cast<int>(ring_mod(u_ - step, up_));
      TaskLabels lab = labels(x.layer, x.forward, x.pending.region, "recv");
      lab.step = step;
      lab.chunk = u_;
      w.push_back(add(ti, concat(x.region_name, "/recv/u", from, "/r", run.row0), comm_.p2p_stream(),
                      RecvTask{rank(ti, from), bytes(run.rows * gc), tag(x.pending, run.row0, from, u_)},
                      std::move(lab),
                      op(x.data, RecvOp{Ref{x.data ? x.pending.dst[i] : -1,
                                            Rect{from * S_loc + run.row0, 0, run.rows, gc}}}),
                      {}));
    }
  return w;
}

UpWorkFn UlyssesEmitter::qkv_work(int layer, bool data, UpLocate ln, const UpPerRank& w_qkv, const UpPerRank& qkv) {
  const std::int64_t Wc = W();
  auto group_pieces = [this, layer, Wc](int ti, int p) {
    std::vector<Piece> out;
    for (Piece piece : qkv_weight_pieces(layer, ti))
      if (piece.to_col >= p * Wc && piece.to_col < (p + 1) * Wc) {
        piece.to_col -= p * Wc;
        out.push_back(std::move(piece));
      }
    return out;
  };
  return producer(layer, true, data, std::move(ln), w_qkv, sh_.hidden, false, group_pieces, sh_.hidden, Wc, qkv, Wc,
                  "qkv", pre_);
}

UpDeps UlyssesEmitter::attention_forward(int layer, bool data, const UpPerRank& qkv, const UpPerRank& attn,
                                         const UpDeps& ready) {
  if (pre_.region < 0) throw std::logic_error("Ulysses generator: attention before the QKV projection");
  const std::string pre = prefix(layer, true);
  const std::int64_t S_loc = local_rows(), b = sh_.batch;
  std::vector<std::vector<TaskId>> wait;
  finish_pre(layer, true, data, qkv, W(), ready, pre_, wait);
  Saved& sv = saved_[{d_, u_, layer}];
  sv.hs = pre_.dst;
  sv.hs_o = alloc(data, pre + "/up/attn_heads", full_rows_, qg());
  pre_.region = -1;
  Pending post;
  const int region = open_region(pre + "/attn+a2a", post);
  const std::int64_t qh = sh_.heads / tp_ / up_, kvh = sh_.kv_heads_up();
  // Attention of query rows [row0, row0 + rows) of the full sequence on this rank's heads.
  auto attention = [&](int ti, std::int64_t row0, std::int64_t rows, Ref out, std::vector<TaskId> deps,
                       const std::string& name) {
    const std::int64_t q_pos0 = row0 / b, q_len = rows / b;
    const std::int64_t kv_len = sh_.causal ? q_pos0 + q_len : sh_.seq;
    AttentionOp a;
    if (data) {
      const BufferId hs = sv.hs[static_cast<std::size_t>(ti)];
      a.q = Ref{hs, Rect{row0, 0, rows, qg()}};
      a.k = a.v = hs;
      a.k_col0 = qg();
      a.v_col0 = qg() + kvg();
      a.kv_positions = kv_len;
      a.out = out;
      a.batch = b;
      a.heads = qh;
      a.kv_heads = kvh;
      a.head_dim = sh_.head_dim;
      a.q_position0 = q_pos0;
      a.causal = sh_.causal;
    }
    model::AttentionKernel k{b, qh, kvh, q_len, kv_len, sh_.head_dim, sh_.causal, q_pos0, model::Pass::forward};
    k.unfused = sh_.unfused_attention;
    k.time_factor = sh_.attention_time_factor;
    return add(ti, pre + "/" + name, StreamRef{StreamKind::compute, 0}, ComputeTask{k, sh_.activation_dtype(), false},
               labels(layer, true, region, "attention"), op(data, std::move(a)), deps);
  };
  auto hs_o = [&](int ti, std::int64_t row0, std::int64_t rows) {
    return data ? Ref{sv.hs_o[static_cast<std::size_t>(ti)], Rect{row0, 0, rows, qg()}} : Ref{};
  };
  auto attn_at = [&](int ti, std::int64_t row0, std::int64_t rows, int member) {
    return data ? Ref{attn[static_cast<std::size_t>(ti)], Rect{row0, member * qg(), rows, qg()}} : Ref{};
  };
  auto a2a = [&](int ti, std::int64_t local0, std::int64_t rows, const std::vector<TaskId>& deps, const std::string& name,
                 int slice) {
    CollectiveOp cop;
    if (data)
      for (int p = 0; p < up_; ++p) {
        cop.in.push_back(hs_o(ti, p * S_loc + local0, rows));
        cop.out.push_back(attn_at(ti, local0, rows, fault_swap(post.region_index, p)));
      }
    TaskLabels lab = labels(layer, true, region, "all_to_all");
    lab.slice = slice;
    return add(ti, pre + "/attn+a2a/" + name, comm_.collective_stream,
               CollectiveTask{CollectiveKind::all_to_all, group(ti), bytes(rows * qg() * up_), next_instance_++,
                              comm_.collective_engine, comm_.sms},
               std::move(lab), op(data, std::move(cop)), deps);
  };
  const UpAttention site{layer, data, region, post, wait, attention, a2a, hs_o, attn_at};
  UpDeps done(static_cast<std::size_t>(tp_));
  for (int ti = 0; ti < tp_; ++ti) done[static_cast<std::size_t>(ti)] = strategy_.up_attention_forward(*this, site, ti);
  return done;
}

std::vector<TaskId> UlyssesEmitter::collective_attention(const UpAttention& a, int ti) {
  const std::int64_t S_loc = local_rows();
  const TaskId at = a.attention(ti, 0, full_rows_, a.heads_out(ti, 0, full_rows_),
                                a.wait[static_cast<std::size_t>(ti)], "attention");
  return {a.all_to_all(ti, 0, S_loc, {at}, "a2a", -1)};
}

// Slice s: positions [s P/k, (s+1) P/k) of every member's shard; its all-to-all overlaps slice s+1.
std::vector<TaskId> UlyssesEmitter::sliced_attention(const UpAttention& a, int ti) {
  const std::int64_t S_loc = local_rows(), b = sh_.batch, P = sh_.seq / up_;
  std::vector<TaskId> done;
  for (int s = 0; s < k_; ++s) {
    const std::int64_t p0 = s * P / k_, p1 = (s + 1) * P / k_;
    if (p1 == p0) continue;
    std::vector<TaskId> deps = a.wait[static_cast<std::size_t>(ti)];
    TaskId last = 0;
    for (int p = 0; p < up_; ++p) {
      const std::int64_t row0 = p * S_loc + p0 * b;
      last = a.attention(ti, row0, (p1 - p0) * b, a.heads_out(ti, row0, (p1 - p0) * b), deps,
                         concat("attention/s", s, "/q", p));
      deps = {last};
    }
    done.push_back(a.all_to_all(ti, p0 * b, (p1 - p0) * b, {last}, concat("a2a/s", s), s));
  }
  return done;
}

// Fuse-A2A after attention: the query chunk of member u+1, u+2, ... is computed and sent to its owner
// while the next one is computed; the own chunk comes last, written in place.
std::vector<TaskId> UlyssesEmitter::ring_attention(const UpAttention& a, int ti) {
  const std::int64_t S_loc = local_rows();
  const std::string pre = prefix(a.layer, true);
  std::vector<TaskId> done;
  std::vector<TaskId> deps = a.wait[static_cast<std::size_t>(ti)];
  for (int step = 1; step <= up_; ++step) {
    const int d = step % up_;
    const int p = static_cast<int>(ring_mod(u_ + d, up_));
    if (d == 0) {
      // Straight into its place; a copy keeps the head-sharded output whole for the backward.
      const TaskId own =
          a.attention(ti, p * S_loc, S_loc, a.out_at(ti, 0, S_loc, u_), deps, concat("attention/q", p));
      done.push_back(own);
      TaskLabels cl = labels(a.layer, true, a.region, "copy");
      cl.chunk = u_;
      add(ti, pre + "/attn+a2a/copy", StreamRef{StreamKind::compute, 0},
          ComputeTask{model::ElementwiseKernel{"copy", bytes(2 * S_loc * qg()), 0.0}, sh_.activation_dtype(), false},
          std::move(cl), op(a.data, CopyOp{a.out_at(ti, 0, S_loc, u_), a.heads_out(ti, u_ * S_loc, S_loc)}), {own});
      break;
    }
    const TaskId at = a.attention(ti, p * S_loc, S_loc, a.heads_out(ti, p * S_loc, S_loc), deps,
                                  concat("attention/q", p));
    deps = {at};
    TaskLabels lab = labels(a.layer, true, a.region, "send");
    lab.step = d;
    lab.chunk = p;
    const int src_chunk = fault_shift(a.post.region_index, d, p);
    add(ti, concat(pre, "/attn+a2a/send/q", p), comm_.p2p_stream(),
        SendTask{rank(ti, p), bytes(S_loc * qg()), tag(a.post, 0, u_, p), comm_.p2p_engine, comm_.sms},
        std::move(lab), op(a.data, SendOp{a.heads_out(ti, src_chunk * S_loc, S_loc)}), {at});
  }
  for (int step = 1; step < up_; ++step) {
    const int from = static_cast<int>(ring_mod(u_ - step, up_));
    TaskLabels lab = labels(a.layer, true, a.region, "recv");
    lab.step = step;
    lab.chunk = u_;
    done.push_back(add(ti, concat(pre, "/attn+a2a/recv/u", from), comm_.p2p_stream(),
                       RecvTask{rank(ti, from), bytes(S_loc * qg()), tag(a.post, 0, from, u_)}, std::move(lab),
                       op(a.data, RecvOp{a.out_at(ti, 0, S_loc, from)}), {}));
  }
  return done;
}

UpWorkFn UlyssesEmitter::out_proj_dgrad_work(int layer, bool data, UpLocate dh, const UpPerRank& w_o,
                                             const UpPerRank& d_attn) {
  const std::int64_t qn = sh_.q_local(), h = sh_.hidden, q = qg();
  auto group_pieces = [layer, qn, h, q](int ti, int p) {
    return std::vector<Piece>{Piece{concat("L", layer, "/w_o"), Rect{ti * qn + p * q, 0, q, h}, 0, 0}};
  };
  return producer(layer, false, data, std::move(dh), w_o, h, true, group_pieces, q, h, d_attn, q, "out_proj_dgrad",
                  dout_);
}

UpDeps UlyssesEmitter::attention_backward(int layer, bool data, const UpPerRank& d_attn, const UpPerRank& d_qkv,
                                          const UpDeps& ready) {
  if (dout_.region < 0) throw std::logic_error("Ulysses generator: attention backward before the out-projection dgrad");
  const std::string pre = prefix(layer, false);
  const std::int64_t S_loc = local_rows(), b = sh_.batch, Wc = W();
  std::vector<std::vector<TaskId>> wait;
  finish_pre(layer, false, data, d_attn, qg(), ready, dout_, wait);
  const UpPerRank d_o = dout_.dst;
  dout_.region = -1;
  const auto it = saved_.find({d_, u_, layer});
  data = data && it != saved_.end() && !it->second.hs.empty();
  const UpPerRank d_hs = alloc(data, pre + "/up/qkv_grad_heads", full_rows_, Wc);
  Pending post;
  const int region = open_region(pre + "/attn_bwd+a2a", post);
  const std::int64_t qh = sh_.heads / tp_ / up_, kvh = sh_.kv_heads_up();
  auto dhs = [&](int ti, std::int64_t row0, std::int64_t rows) {
    return data ? Ref{d_hs[static_cast<std::size_t>(ti)], Rect{row0, 0, rows, Wc}} : Ref{};
  };
  auto dq_at = [&](int ti, std::int64_t row0, std::int64_t rows, int member) {
    return data ? Ref{d_qkv[static_cast<std::size_t>(ti)], Rect{row0, member * Wc, rows, Wc}} : Ref{};
  };
  auto a2a = [&](int ti, std::int64_t local0, std::int64_t rows, const std::vector<TaskId>& deps, const std::string& name,
                 int slice) {
    CollectiveOp cop;
    if (data)
      for (int p = 0; p < up_; ++p) {
        cop.in.push_back(dhs(ti, p * S_loc + local0, rows));
        cop.out.push_back(dq_at(ti, local0, rows, fault_swap(post.region_index, p)));
      }
    TaskLabels lab = labels(layer, false, region, "all_to_all");
    lab.slice = slice;
    return add(ti, pre + "/attn_bwd+a2a/" + name, comm_.collective_stream,
               CollectiveTask{CollectiveKind::all_to_all, group(ti), bytes(rows * Wc * up_), next_instance_++,
                              comm_.collective_engine, comm_.sms},
               std::move(lab), op(data, std::move(cop)), deps);
  };
  const UpAttentionBwd site{layer, data, region, post, a2a, dhs, dq_at};
  UpDeps done(static_cast<std::size_t>(tp_));
  for (int ti = 0; ti < tp_; ++ti) {
    const auto i = static_cast<std::size_t>(ti);
    AttentionBwdOp ab;
    if (data) {
      const Saved& sv = it->second;
      AttentionOp& a = ab.fwd;
      const BufferId hs = sv.hs[i];
      a.q = Ref{hs, Rect{0, 0, full_rows_, qg()}};
      a.k = a.v = hs;
      a.k_col0 = qg();
      a.v_col0 = qg() + kvg();
      a.kv_positions = sh_.seq;
      a.out = Ref{sv.hs_o[i], Rect{0, 0, full_rows_, qg()}};
      a.batch = b;
      a.heads = qh;
      a.kv_heads = kvh;
      a.head_dim = sh_.head_dim;
      a.q_position0 = 0;
      a.causal = sh_.causal;
      ab.dout = Ref{d_o[i], Rect{0, 0, full_rows_, qg()}};
      ab.dq = Ref{d_hs[i], Rect{0, 0, full_rows_, qg()}};
      ab.dk = Ref{d_hs[i], Rect{0, qg(), full_rows_, kvg()}};
      ab.dv = Ref{d_hs[i], Rect{0, qg() + kvg(), full_rows_, kvg()}};
    }
    model::AttentionKernel k{b, qh, kvh, sh_.seq, sh_.seq, sh_.head_dim, sh_.causal, 0, model::Pass::backward};
    k.unfused = sh_.unfused_attention;
    k.time_factor = sh_.attention_time_factor;
    const TaskId ab_id = add(ti, pre + "/attention_bwd", StreamRef{StreamKind::compute, 0},
                             ComputeTask{k, sh_.activation_dtype(), false}, labels(layer, false, region, "attention_bwd"),
                             op(data, std::move(ab)), wait[i]);
    done[i] = strategy_.up_attention_backward(*this, site, ti, ab_id);
  }
  if (strategy_.up_fused_backward()) {
    bwd_hs_ = d_hs;
    bwd_dqkv_ = data ? d_qkv : UpPerRank{};
    bwd_region_ = region;
  }
  return done;
}

std::vector<TaskId> UlyssesEmitter::collective_attention_bwd(const UpAttentionBwd& a, int ti, TaskId attention_bwd) {
  return {a.all_to_all(ti, 0, local_rows(), {attention_bwd}, "a2a", -1)};
}

// dK and dV are complete only once every query is done: the slices' all-to-alls pipeline with each
// other, not with the attention backward.
std::vector<TaskId> UlyssesEmitter::sliced_attention_bwd(const UpAttentionBwd& a, int ti, TaskId attention_bwd) {
  const std::int64_t b = sh_.batch, P = sh_.seq / up_;
  std::vector<TaskId> done;
  for (int s = 0; s < k_; ++s) {
    const std::int64_t p0 = s * P / k_, p1 = (s + 1) * P / k_;
    if (p1 > p0) done.push_back(a.all_to_all(ti, p0 * b, (p1 - p0) * b, {attention_bwd}, concat("a2a/s", s), s));
  }
  return done;
}

// Fuse-A2A backward: one Send per (TP chunk, destination), chunks in the order the QKV dgrad's TP
// region consumes them (a ring reduce-scatter: (ti - 1 - i) mod tp at step i), destinations in ring
// order; the own group's rows never move (qkv_grad_blocks reads them from the head-sharded gradient).
std::vector<TaskId> UlyssesEmitter::ring_attention_bwd(const UpAttentionBwd& a, int ti, TaskId attention_bwd) {
  const std::int64_t S_loc = local_rows(), Wc = W(), n = S_loc / tp_;
  const std::string pre = prefix(a.layer, false);
  const tpsp::TpStrategy& tp = tpsp::tp_strategy(req_);
  const bool ring_rs = tp.ring_steps() && tp_ > 1;
  for (int i = 0; i < tp_; ++i) {
    const std::int64_t c = ring_rs ? ring_mod(ti - 1 - i, tp_) : i;
    for (int d = 1; d < up_; ++d) {
      const int p = static_cast<int>(ring_mod(u_ + d, up_));
      TaskLabels lab = labels(a.layer, false, a.region, "send");
      lab.step = d;
      lab.chunk = p;
      const int src_chunk = fault_shift(a.post.region_index, d, p);
      add(ti, concat(pre, "/attn_bwd+a2a/send/q", p, "/r", c * n), comm_.p2p_stream(),
          SendTask{rank(ti, p), bytes(n * Wc), tag(a.post, c * n, u_, p), comm_.p2p_engine, comm_.sms},
          std::move(lab), op(a.data, SendOp{a.d_heads(ti, src_chunk * S_loc + c * n, n)}), {attention_bwd});
    }
    for (int d = 1; d < up_; ++d) {
      const int from = static_cast<int>(ring_mod(u_ - d, up_));
      TaskLabels lab = labels(a.layer, false, a.region, "recv");
      lab.step = d;
      lab.chunk = u_;
      bwd_recv_[{ti, c, from}] =
          add(ti, concat(pre, "/attn_bwd+a2a/recv/u", from, "/r", c * n), comm_.p2p_stream(),
              RecvTask{rank(ti, from), bytes(n * Wc), tag(a.post, c * n, from, u_)}, std::move(lab),
              op(a.data, RecvOp{a.d_qkv_at(ti, c * n, n, from)}), {});
    }
  }
  return {attention_bwd};
}

bool UlyssesEmitter::fused_backward() const { return up_ > 1 && strategy_.up_fused_backward(); }

std::vector<UlyssesEmitter::GradBlock> UlyssesEmitter::qkv_grad_blocks(int ti, const std::vector<RowSpan>& rows) const {
  if (!fused_backward()) throw std::logic_error("Ulysses generator: dQKV blocks outside the Fuse-A2A backward");
  const auto i = static_cast<std::size_t>(ti);
  const std::int64_t n = local_rows() / tp_;
  std::vector<GradBlock> out;
  for (int d = 0; d < up_; ++d) {
    GradBlock b;
    b.member = static_cast<int>(ring_mod(u_ - d, up_));
    b.region = tp_ == 1 ? bwd_region_ : -1;
    if (d == 0) {
      b.buffer = bwd_hs_.empty() ? -1 : bwd_hs_[i];
      b.row_offset = u_ * local_rows();
    } else {
      b.buffer = bwd_dqkv_.empty() ? -1 : bwd_dqkv_[i];
      b.col0 = b.member * W();
      for (const RowSpan& s : rows)
        for (std::int64_t c = s.row0 / n; s.rows > 0 && c <= (s.row0 + s.rows - 1) / n; ++c) {
          const TaskId r = bwd_recv_.at({ti, c, b.member});
          if (std::find(b.deps.begin(), b.deps.end(), r) == b.deps.end()) b.deps.push_back(r);
        }
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace fusesim::sched
