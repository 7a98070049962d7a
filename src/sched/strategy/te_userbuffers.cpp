// TransformerEngine's TP communication overlap (Megatron-LM --tp-comm-overlap, userbuffers), a
// method per GEMM as TE assigns them by default (transformer_engine/pytorch/module/base.py,
// initialize_ub): "ring_exchange" for the all-gather before qkv_fprop, fc1_fprop, proj_dgrad and
// fc2_dgrad (copy-engine P2P around the ring, each chunk's GEMM while the next moves: Fuse-AG);
// "pipeline" for the reduce-scatter after proj_fprop and fc2_fprop (num_splits 4: the GEMM in four
// chunks along the sequence, each chunk's reduce-scatter beside the next chunk's GEMM, on 16 SMs);
// "bulk" for qkv/fc1 dgrad and wgrad (the re-gather of the saved input beside the dgrad, the dgrad's
// reduce-scatter beside the wgrad, on 16 SMs). It is what the TP baseline is with
// schedule.tp_baseline "te_userbuffers". Ulysses and DP: the baseline's (TE's overlap is TP's only).
#include "fusesim/sched/strategy.hpp"
#include "fusesim/sched/tpsp_builder.hpp"

namespace fusesim::sched::tpsp {

const Strategy& baseline_strategy();  // strategy/baseline.cpp: Ulysses and DP as the baseline runs them
const Strategy& commfuse_strategy();  // strategy/commfuse.cpp: its Fuse-AG is TE's ring exchange

namespace {

// TE's num_splits default for the pipeline method.
constexpr int kPipelineSplits = 4;
// TE's num_sm default for the pipeline and bulk methods (initialize_ub; TransformerEngine#750), not
// NCCL's channel count of the device: userbuffers kernels are TE's own.
constexpr int kUserbuffersSms = 16;

class TeUserbuffers final : public Strategy {
 public:
  int slices(const model::ScheduleOptions&) const override { return kPipelineSplits; }
  int comm_sms() const override { return kUserbuffersSms; }
  // Only the wgrad re-gathers count their calls (Builder::ag_calls): one bulk collective each.
  int ag_calls(int, int) const override { return 1; }
  // The ring exchange reads the own chunk where it is, as Fuse-AG does.
  bool own_chunk_in_shard() const override { return true; }
  bool ring_steps() const override { return false; }
  bool async_regather() const override { return true; }
  Deps all_gather(Builder& b, const RegionCall& r, const Rows& g, std::vector<std::vector<AgCall>>*,
                  StreamRef stream) const override {
    if (r.regather) return collective_all_gather(b, r, g, 1, stream);
    return commfuse_strategy().all_gather(b, r, g, nullptr, stream);
  }
  Deps reduce_scatter(Builder& b, const RegionCall& r, const PerRank& pbuf, const PerRank& out) const override {
    return collective_reduce_scatter(b, r, pbuf, out, r.ctx.forward ? kPipelineSplits : 1);
  }

  UpWorkFn up_producer(UlyssesEmitter& e, const UpProducer& p) const override {
    return baseline_strategy().up_producer(e, p);
  }
  std::vector<TaskId> up_exchange(UlyssesEmitter& e, const UpExchange& x, int ti) const override {
    return baseline_strategy().up_exchange(e, x, ti);
  }
  std::vector<TaskId> up_attention_forward(UlyssesEmitter& e, const UpAttention& a, int ti) const override {
    return baseline_strategy().up_attention_forward(e, a, ti);
  }
  std::vector<TaskId> up_attention_backward(UlyssesEmitter& e, const UpAttentionBwd& a, int ti,
                                            TaskId attention_bwd) const override {
    return baseline_strategy().up_attention_backward(e, a, ti, attention_bwd);
  }
  bool dp_serial(const model::ScheduleOptions& o) const override { return baseline_strategy().dp_serial(o); }
};

}  // namespace

const Strategy& te_userbuffers_strategy() {
  static const TeUserbuffers s;
  return s;
}

}  // namespace fusesim::sched::tpsp
