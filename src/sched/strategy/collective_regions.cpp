// Regions lowered to collectives, as baseline (one per region) and slice-overlap (one per slice)
// run them: slice j's all-gather, then the work on the gathered slice; or the work on slice j, then
// its reduce-scatter. Slices cut along positions (Builder::slice_span), so that every row of a
// position stays in one slice.
#include <fmt/format.h>

#include "fusesim/sched/strategy.hpp"
#include "fusesim/sched/tpsp_builder.hpp"
#include "fusesim/util/concat.hpp"

namespace fusesim::sched::tpsp {
namespace {

RowSpan slice_or_chunk(const Builder& b, int slices, std::int64_t c, int j) {
  return slices == 1 ? b.chunk_span(c) : b.slice_span(c, j);
}

std::string slice_suffix(int slices, int j) { return slices == 1 ? "" : concat("/k", j); }

}  // namespace

Deps collective_all_gather(Builder& b, const RegionCall& r, const Rows& g, int slices, StreamRef comm) {
  const int t = b.t_;
  const OpCtx& ctx = r.ctx;
  const std::int64_t width = r.width;
  Deps done(static_cast<std::size_t>(t));
  for (int j = 0; j < slices; ++j) {
    const std::int64_t instance = b.next_instance_++;
    for (int ti = 0; ti < b.emit_t_; ++ti) {
      auto span = [&](std::int64_t c) { return slice_or_chunk(b, slices, c, j); };
      CollectiveOp cop;
      std::vector<RowSpan> rows;
      if (ctx.data) {
        const RowSpan own = span(ti);
        cop.in.push_back(b.ref(g.shard, ti, RowSpan{own.row0 - ti * b.n(), own.rows}, width));
      }
      for (int p = 0; p < t; ++p) {
        if (ctx.data) cop.out.push_back(b.ref(g.full, ti, span(b.member_chunk(ti, r.region_index, p)), width));
        rows.push_back(span(p));
      }
      TaskLabels lab = b.labels(ctx, r.region, "all_gather");
      lab.slice = slices == 1 ? -1 : j;
      const std::string suffix = slice_suffix(slices, j);
      const TaskId ag = b.add(ti, concat(b.prefix(ctx), "/", ctx.region, "/ag", suffix), comm,
                              CollectiveTask{CollectiveKind::all_gather, b.group(), b.bytes(t * rows[0].rows * width),
                                             instance, b.comm_.collective_engine, b.comm_.sms},
                              std::move(lab), b.op(ctx, std::move(cop)), r.ready[static_cast<std::size_t>(ti)]);
      auto ids = b.emit_work(ctx, ti, r.region, r.work, -1, rows, suffix, -1, slices == 1 ? -1 : j, j == 0, {ag});
      auto& d = done[static_cast<std::size_t>(ti)];
      d.insert(d.end(), ids.begin(), ids.end());
    }
  }
  return done;
}

Deps collective_reduce_scatter(Builder& b, const RegionCall& r, const PerRank& pbuf, const PerRank& out, int slices) {
  const int t = b.t_;
  const OpCtx& ctx = r.ctx;
  const std::int64_t width = r.width;
  const StreamRef comm = b.comm_.collective_stream;
  Deps done(static_cast<std::size_t>(t));
  for (int j = 0; j < slices; ++j) {
    const std::int64_t instance = b.next_instance_++;
    for (int ti = 0; ti < b.emit_t_; ++ti) {
      auto span = [&](std::int64_t c) { return slice_or_chunk(b, slices, c, j); };
      std::vector<RowSpan> rows;
      for (int p = 0; p < t; ++p) rows.push_back(span(p));
      const std::string suffix = slice_suffix(slices, j);
      auto ids = b.emit_work(ctx, ti, r.region, r.work, -1, rows, suffix, -1, slices == 1 ? -1 : j, j == 0,
                             r.ready[static_cast<std::size_t>(ti)]);
      CollectiveOp cop;
      if (ctx.data) {
        for (int p = 0; p < t; ++p)
          cop.in.push_back(b.ref(pbuf, ti, span(b.member_chunk(ti, r.region_index, p)), width));
        const RowSpan own = span(ti);
        cop.out.push_back(b.ref(out, ti, RowSpan{own.row0 - ti * b.n(), own.rows}, width));
      }
      TaskLabels lab = b.labels(ctx, r.region, "reduce_scatter");
      lab.slice = slices == 1 ? -1 : j;
      const TaskId rs = b.add(ti, concat(b.prefix(ctx), "/", ctx.region, "/rs", suffix), comm,
                              CollectiveTask{CollectiveKind::reduce_scatter, b.group(), b.bytes(t * rows[0].rows * width),
                                             instance, b.comm_.collective_engine, b.comm_.sms},
                              std::move(lab), b.op(ctx, std::move(cop)), ids);
      done[static_cast<std::size_t>(ti)].push_back(rs);
    }
  }
  return done;
}

}  // namespace fusesim::sched::tpsp
