// Slice-overlap: each region cut along sequence positions into k slices, one collective per slice,
// so that slice j's communication runs beside slice j +- 1's GEMM; the first all-gather and the last
// reduce-scatter stay exposed (the tail latency, design note section 1).
#include "fusesim/sched/strategy.hpp"
#include "fusesim/sched/tpsp_builder.hpp"

namespace fusesim::sched::tpsp {
namespace {

class Slice final : public TpStrategy {
 public:
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
};

}  // namespace

const TpStrategy& slice_strategy() {
  static const Slice s;
  return s;
}

}  // namespace fusesim::sched::tpsp
