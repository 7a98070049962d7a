// Baseline: each region's collective whole, then (AG) or before (RS) its GEMM, as Megatron-LM runs
// sequence parallelism without --tp-comm-overlap; the backward's re-gather runs beside the dgrad.
// Ulysses: one all-to-all after the QKV projection and one after attention (backward: after the
// out-projection dgrad and after the attention backward), as DeepSpeed-Ulysses runs them. DP: the
// bucketed overlap DDP and FSDP run, or one collective after the backward when the workload asks for
// the serial reference ($.schedule.dp_baseline).
#include "fusesim/sched/strategy.hpp"

namespace fusesim::sched::tpsp {
namespace {

class Baseline final : public Strategy {
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

  UpWorkFn up_producer(UlyssesEmitter&, const UpProducer&) const override { return {}; }
  std::vector<TaskId> up_exchange(UlyssesEmitter& e, const UpExchange& x, int ti) const override {
    return e.collective_exchange(x, ti);
  }
  std::vector<TaskId> up_attention_forward(UlyssesEmitter& e, const UpAttention& a, int ti) const override {
    return e.collective_attention(a, ti);
  }
  std::vector<TaskId> up_attention_backward(UlyssesEmitter& e, const UpAttentionBwd& a, int ti,
                                            TaskId attention_bwd) const override {
    return e.collective_attention_bwd(a, ti, attention_bwd);
  }

  bool dp_serial(const model::ScheduleOptions& o) const override { return o.dp_serial_baseline; }
};

}  // namespace

const Strategy& baseline_strategy() {
  static const Baseline s;
  return s;
}

}  // namespace fusesim::sched::tpsp
