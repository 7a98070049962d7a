// Megatron-LM's tensor parallelism without --sequence-parallel, the baseline of the runs before
// Korthikanti et al. 2022 ($.parallel.sequence_parallel false): every TP rank holds the whole
// sequence between the TP GEMMs, so a column-parallel GEMM gathers nothing (its forward input and the
// input its backward saved are whole on every rank), and the partial sums of a row-parallel GEMM, or
// of a column-parallel dgrad, are all-reduced by one collective (mpu/mappings.py
// reduce_from_tensor_model_parallel_region; ColumnParallelLinear's backward). A row-parallel dgrad
// gets its whole output gradient from the all-reduce before it and gathers nothing either. The regions
// keep their builder names ("ag+qkv" holds the QKV GEMM alone, "out_proj+rs" ends in the all-reduce).
// Whether the dgrad's all-reduce runs beside the weight gradient is the builder's
// (TpspShape::sync_tp_allreduce); the strategy is the baseline's only: slice-overlap and CommFuse cut
// the reduce-scatter and all-gather of sequence parallelism and keep them.
#include "fusesim/sched/strategy.hpp"
#include "fusesim/sched/tpsp_builder.hpp"
#include "fusesim/util/concat.hpp"

namespace fusesim::sched::tpsp {
namespace {

class TpAllReduce final : public TpStrategy {
 public:
  int ag_calls(int, int) const override { return 1; }
  bool own_chunk_in_shard() const override { return false; }
  bool ring_steps() const override { return false; }
  bool all_reduces() const override { return true; }
  Deps all_gather(Builder& b, const RegionCall& r, const Rows&, std::vector<std::vector<AgCall>>*,
                  StreamRef) const override {
    Deps done(static_cast<std::size_t>(b.t_));
    for (int ti = 0; ti < b.emit_t_; ++ti)
      done[static_cast<std::size_t>(ti)] = b.emit_work(r.ctx, ti, r.region, r.work, -1, {RowSpan{0, b.S()}}, "", -1, -1,
                                                       true, r.ready[static_cast<std::size_t>(ti)]);
    return done;
  }
  Deps reduce_scatter(Builder& b, const RegionCall& r, const PerRank&, const PerRank&) const override {
    Deps done(static_cast<std::size_t>(b.t_));
    const std::int64_t instance = b.next_instance_++;
    for (int ti = 0; ti < b.emit_t_; ++ti) {
      const auto ids = b.emit_work(r.ctx, ti, r.region, r.work, -1, {RowSpan{0, b.S()}}, "", -1, -1, true,
                                   r.ready[static_cast<std::size_t>(ti)]);
      done[static_cast<std::size_t>(ti)] = {
          b.add(ti, concat(b.prefix(r.ctx), "/", r.ctx.region, "/ar"), b.comm_.collective_stream,
                CollectiveTask{CollectiveKind::all_reduce, b.group(), b.bytes(b.S() * r.width), instance,
                               b.comm_.collective_engine, b.comm_.sms},
                b.labels(r.ctx, r.region, "all_reduce"), -1, ids)};
    }
    return done;
  }
};

}  // namespace

const TpStrategy& tp_allreduce_strategy() {
  static const TpAllReduce s;
  return s;
}

}  // namespace fusesim::sched::tpsp
