// CommFuse (design note section 2): the regions' collectives replaced by ring-ordered P2P steps fused
// with the compute, in the orders of sched/ring.hpp. Fuse-AG computes the chunk a member holds while
// passing it on; Fuse-RS computes the partial of the chunk a member reduces, adds the running sum
// received and passes it on. No collective is left exposed at the end of the region. Ulysses
// (Fuse-A2A): the producer computed per destination in ring order, each piece sent while the next is
// computed, the own piece last; the QKV backward consumes dQKV block by block. DP: each weight
// gradient's last accumulation step fused with a ring reduce-scatter (Fuse-RS over DP).
#include <fmt/format.h>

#include "fusesim/sched/strategy.hpp"
#include "fusesim/sched/tpsp_builder.hpp"
#include "fusesim/util/concat.hpp"

namespace fusesim::sched::tpsp {
namespace {

class CommFuse final : public Strategy {
 public:
  int ag_calls(int t, int) const override { return t; }
  bool own_chunk_in_shard() const override { return true; }
  bool ring_steps() const override { return true; }

  // Fuse-AG: step i computes the chunk the member holds, passes it on and receives the next; step 0
  // computes the own chunk from the shard.
  Deps all_gather(Builder& b, const RegionCall& r, const Rows& g, std::vector<std::vector<AgCall>>* plan,
                  StreamRef) const override {
    const int t = b.t_;
    const std::int64_t width = r.width;
    const Ring ring{t};
    const std::int64_t tag0 = b.tags_.reserve(ring.tags_per_exchange());
    Deps done(static_cast<std::size_t>(t));
    for (int ti = 0; ti < b.emit_t_; ++ti) {
      Builder* bp = &b;
      const RingPorts ports = b.ring_ports(
          r.ctx, r.region, ti, b.bytes(b.n() * width),
          [bp, g, ti, width](const RingMessage& m) {
            const Loc src = bp->at(g, ti, bp->chunk_span(m.chunk));
            return Ref{src.buffer, rows_rect(src.row0, bp->n(), width)};
          },
          [bp, g, ti, width](const RingMessage& m) { return bp->ref(g.full, ti, bp->chunk_span(m.chunk), width); });
      const std::vector<TaskId>& ready = r.ready[static_cast<std::size_t>(ti)];
      if (plan == nullptr) {
        auto& d = done[static_cast<std::size_t>(ti)];
        ring_all_gather(ring, ti, tag0, ready,
                        [&](int i, int c, const std::vector<TaskId>& have) {
                          const std::int64_t cc = b.chunk_at(ti, r.region_index, i, c);
                          auto ids = b.emit_work(r.ctx, ti, r.region, r.work, static_cast<int>(cc), {b.chunk_span(cc)},
                                                 concat("/c", cc), i, -1, i == 0, have);
                          d.insert(d.end(), ids.begin(), ids.end());
                        },
                        ports);
        continue;
      }
      for (int i = 0; i < t; ++i) {
        const std::int64_t cc = b.chunk_at(ti, r.region_index, i, ring.gather_chunk(ti, i));
        AgCall::Transfer transfer;
        if (i < t - 1)
          transfer = [ring, ti, i, tag0, ports](const std::vector<TaskId>& at_step) {
            return ring_gather_step(ring, ti, i, tag0, at_step, ports);
          };
        (*plan)[static_cast<std::size_t>(ti)].push_back(AgCall{r.region, static_cast<int>(cc), {b.chunk_span(cc)},
                                                               concat("/c", cc), i,
                                                               i == 0 ? ready : std::vector<TaskId>{}, transfer});
      }
    }
    return done;
  }

  // Fuse-RS: step i computes the partial of the chunk the member reduces; from step 1 on it adds the
  // running sum received from r - 1 and passes it to r + 1; the own chunk comes last and its add is
  // the result.
  Deps reduce_scatter(Builder& b, const RegionCall& r, const PerRank& pbuf, const PerRank& out) const override {
    const int t = b.t_;
    const OpCtx& ctx = r.ctx;
    const std::int64_t width = r.width;
    PerRank recv_buf = b.alloc(ctx, ctx.region + "/recv", b.S(), width);
    PerRank sum_buf = b.alloc(ctx, ctx.region + "/sum", b.S(), width);
    const Ring ring{t};
    const std::int64_t tag0 = b.tags_.reserve(ring.tags_per_exchange());
    const model::ElementwiseKernel add_kernel{"add", b.bytes(3 * b.n() * width), static_cast<Flops>(b.n() * width)};
    Deps done(static_cast<std::size_t>(t));
    for (int ti = 0; ti < b.emit_t_; ++ti) {
      RingPorts ports = b.ring_ports(
          ctx, r.region, ti, b.bytes(b.n() * width),
          // Step 0 passes on the own partial, later steps the running sum.
          [&, ti](const RingMessage& m) { return b.ref(m.step == 0 ? pbuf : sum_buf, ti, b.chunk_span(m.chunk), width); },
          [&, ti](const RingMessage& m) { return b.ref(recv_buf, ti, b.chunk_span(m.chunk), width); });
      ports.add = [&, ti](const RingMessage& m, TaskId partial, TaskId received, bool last) {
        TaskLabels al = b.labels(ctx, r.region, "add");
        al.chunk = m.chunk;
        al.step = m.step;
        const RowSpan span = b.chunk_span(m.chunk);
        return b.compute(ti, concat(b.prefix(ctx), "/", ctx.region, "/add/c", m.chunk), add_kernel,
                         std::move(al),
                         b.op(ctx, AddOp{b.ref(pbuf, ti, span, width), b.ref(recv_buf, ti, span, width),
                                         last ? b.ref(out, ti, RowSpan{0, b.n()}, width) : b.ref(sum_buf, ti, span, width)}),
                         {partial, received});
      };
      const TaskId result = ring_reduce_scatter(
          ring, ti, tag0,
          [&](int i, int c) {
            const std::int64_t cc = b.chunk_at(ti, r.region_index, i, c);
            return b
                .emit_work(ctx, ti, r.region, r.work, static_cast<int>(cc), {b.chunk_span(cc)}, concat("/c", cc),
                           i, -1, i == 0, i == 0 ? r.ready[static_cast<std::size_t>(ti)] : std::vector<TaskId>{})
                .back();
          },
          ports);
      done[static_cast<std::size_t>(ti)].push_back(result);
    }
    return done;
  }

  UpWorkFn up_producer(UlyssesEmitter& e, const UpProducer& p) const override { return e.ring_producer(p); }
  std::vector<TaskId> up_exchange(UlyssesEmitter& e, const UpExchange& x, int ti) const override {
    return e.ring_exchange(x, ti);
  }
  std::vector<TaskId> up_attention_forward(UlyssesEmitter& e, const UpAttention& a, int ti) const override {
    return e.ring_attention(a, ti);
  }
  std::vector<TaskId> up_attention_backward(UlyssesEmitter& e, const UpAttentionBwd& a, int ti,
                                            TaskId attention_bwd) const override {
    return e.ring_attention_bwd(a, ti, attention_bwd);
  }
  bool up_fused_backward() const override { return true; }

  bool dp_fused() const override { return true; }
};

}  // namespace

const Strategy& commfuse_strategy() {
  static const CommFuse s;
  return s;
}

}  // namespace fusesim::sched::tpsp
