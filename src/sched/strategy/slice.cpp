// Slice-overlap: each region cut along sequence positions into k slices, one collective per slice,
// so that slice j's communication runs beside slice j +- 1's GEMM; the first all-gather and the last
// reduce-scatter stay exposed (the tail latency, design note section 1). Ulysses: the producer (QKV
// projection, attention, out-projection dgrad) cut along the sequence into k slices, each slice's
// all-to-all issued as soon as it is computed. DP: the bucketed overlap (bucketing is DP's slicing).
#include "fusesim/sched/strategy.hpp"
#include "fusesim/sched/tpsp_builder.hpp"

namespace fusesim::sched::tpsp {
namespace {

class Slice final : public Strategy {
 public:
  bool sliced() const override { return true; }
  int slices(const model::ScheduleOptions& o) const override { return o.slices; }
  int ag_calls(int, int slices) const override { return slices; }
  bool own_chunk_in_shard() const override { return false; }
  bool ring_steps() const override { return false; }
  Deps all_gather(Builder& b, const RegionCall& r, const Rows& g, std::vector<std::vector<AgCall>>*,
                  StreamRef stream) const override {
    return collective_all_gather(b, r, g, b.k_, stream);
  }
  Deps reduce_scatter(Builder& b, const RegionCall& r, const PerRank& pbuf, const PerRank& out) const override {
    return collective_reduce_scatter(b, r, pbuf, out, b.k_);
  }

  UpWorkFn up_producer(UlyssesEmitter& e, const UpProducer& p) const override { return e.sliced_producer(p); }
  std::vector<TaskId> up_exchange(UlyssesEmitter& e, const UpExchange& x, int ti) const override {
    return e.issued_exchange(x, ti);
  }
  std::vector<TaskId> up_attention_forward(UlyssesEmitter& e, const UpAttention& a, int ti) const override {
    return e.sliced_attention(a, ti);
  }
  std::vector<TaskId> up_attention_backward(UlyssesEmitter& e, const UpAttentionBwd& a, int ti,
                                            TaskId attention_bwd) const override {
    return e.sliced_attention_bwd(a, ti, attention_bwd);
  }
};

}  // namespace

const Strategy& slice_strategy() {
  static const Slice s;
  return s;
}

}  // namespace fusesim::sched::tpsp
