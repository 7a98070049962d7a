// Baseline: each region's collective whole, then (AG) or before (RS) its GEMM, as Megatron-LM runs
// sequence parallelism without --tp-comm-overlap; the backward's re-gather runs beside the dgrad.
#include "fusesim/sched/strategy.hpp"

namespace fusesim::sched::tpsp {
namespace {

class Baseline final : public TpStrategy {
 public:
  int ag_calls(int, int) const override { return 1; }
  bool own_chunk_in_shard() const override { return false; }
  bool ring_steps() const override { return false; }
  bool async_regather() const override { return true; }
  Deps all_gather(Builder& b, const RegionCall& r, const Rows& g, std::vector<std::vector<AgCall>>*,
                  StreamRef stream) const override {
    return collective_all_gather(b, r, g, 1, stream);
  }
  Deps reduce_scatter(Builder& b, const RegionCall& r, const PerRank& pbuf, const PerRank& out) const override {
    return collective_reduce_scatter(b, r, pbuf, out, 1);
  }
};

}  // namespace

const TpStrategy& baseline_strategy() {
  static const Baseline s;
  return s;
}

}  // namespace fusesim::sched::tpsp
