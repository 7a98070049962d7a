#pragma once
// Schedules as strategies: how a schedule lowers each communication pattern of a step
// (docs/schedules.md): TP's all-gather before a column-parallel GEMM (an AG region) and reduce-scatter
// after a row-parallel GEMM (an RS region), Ulysses' all-to-alls around attention, and DP's gradient
// sync. The generators describe the ops (the layer builder, sched/tpsp_builder.hpp; the Ulysses
// emitter, sched/ulysses.hpp; the DP sync, sched/dp.hpp) and hand each pattern to the strategy of the
// schedule requested for its group; the strategies live one per file in src/sched/strategy/ and are
// registered in schedule_strategy() (docs/extending.md).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fusesim/model/workload.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/sched/dataflow.hpp"
#include "fusesim/sched/ulysses.hpp"

namespace fusesim::sched::tpsp {

class Builder;  // sched/tpsp_builder.hpp

using PerRank = std::vector<BufferId>;          // one buffer per TP index; empty when no dataflow
using Deps = std::vector<std::vector<TaskId>>;  // per TP index

// One compute task of a region step. data_op -1: timing only.
struct Work {
  std::string op;
  model::Kernel kernel;
  std::int32_t data_op = -1;
  // When set, emits the task(s) itself (a weight gradient handed to the DP sync) and returns the
  // last one on the compute stream; emit_work passes the name, labels and dependencies it would use.
  std::function<TaskId(std::string name, TaskLabels labels, const std::vector<TaskId>& deps)> emit = {};
  std::function<void(TaskId)> after = {};  // called with the task's id (Ulysses: issue its all-to-all or Send)
  std::vector<TaskId> wait = {};  // further dependencies (Ulysses Fuse-A2A backward: the Recvs of its block)
};
// Emits the compute for TP index `ti` on the given rows of the full sequence (chunk: the ring
// chunk, -1 when the rows span several chunks). `first`: the rank's first call in the region (a
// weight gradient accumulated over the steps is written by the first and added to by the others).
using WorkFn = std::function<std::vector<Work>(int ti, int chunk, const std::vector<RowSpan>& rows, bool first)>;

// A sequence-long operand [S, w] as tasks read it. A plain one lives in `full` at its own rows. A
// gathered one starts as the local shard [n, w] of the own chunk; the region gathers the other
// chunks into `full`, and the own chunk too in baseline and slice (their collectives copy every
// member's part), but not in Fuse-AG (and t = 1), which reads the own chunk from the shard.
struct Rows {
  PerRank full;
  PerRank shard;  // empty for a plain operand
};
// Where a row range lies in a rank's buffers.
struct Loc {
  BufferId buffer = -1;
  std::int64_t row0 = 0;
};

struct OpCtx {
  int layer = 0;
  bool forward = true;
  std::string region;  // "ag+qkv"
  bool data = true;    // emit data ops
};

inline Rect rows_rect(std::int64_t row0, std::int64_t rows, std::int64_t cols) { return Rect{row0, 0, rows, cols}; }

// One call an AG region makes to its work, recorded instead of emitted (ag_region's `plan`).
struct AgCall {
  // Emits the step's Send and Recv, the Send waiting for `at_step`; returns the Recv.
  using Transfer = std::function<TaskId(const std::vector<TaskId>& at_step)>;
  int region = -1;
  int chunk = -1;
  std::vector<RowSpan> rows;
  std::string suffix;
  int step = -1;
  std::vector<TaskId> deps;  // step 0: the region's `ready`; a later step waits for the previous one's Recv
  Transfer transfer;         // empty at the last step (and t = 1)
};

// One region as the builder hands it to a strategy: the tasks of TP index ti wait for ready[ti];
// work(ti, chunk, rows, first) emits the compute on the given rows of the full sequence.
struct RegionCall {
  const OpCtx& ctx;
  int region = -1;         // the graph's region id
  int region_index = 0;    // the region's place in the pass (the fault hooks of the tests)
  std::int64_t width = 0;  // columns of the communicated operand
  const Deps& ready;
  const WorkFn& work;
  // An AG region that is the backward's re-gather of a column-parallel GEMM's saved input, run
  // beside the dgrad (async_regather strategies only).
  bool regather = false;
};

class TpStrategy {
 public:
  virtual ~TpStrategy() = default;
  // Slices the regions' collectives are cut into (slice-overlap's k); 1: one collective per region.
  virtual int slices(const model::ScheduleOptions&) const { return 1; }
  // SMs the TP communication kernels hold when the workload gives no schedule.comm_sms: -1 takes the
  // device's defaults (NCCL's channels), a library with its own (TE's userbuffers) says how many.
  virtual int comm_sms() const { return -1; }
  // Calls an AG region makes to its work per rank with t > 1 ranks and `slices` slices.
  virtual int ag_calls(int t, int slices) const = 0;
  // Whether a gathered operand's own chunk is read from its shard (a ring reads it where it is)
  // rather than copied into the gathered buffer with the others (a collective copies every part).
  virtual bool own_chunk_in_shard() const = 0;
  // Whether the regions exchange chunks over the ring step by step (Fuse-AG, Fuse-RS): the
  // query-split attention and the interleaved QKV dgrad and wgrad of the Ulysses backward build on it,
  // and only such a strategy records an AG region's calls (`plan`).
  virtual bool ring_steps() const = 0;
  // Megatron-LM without --tp-comm-overlap: the backward's re-gather of a column-parallel GEMM's input
  // is launched asynchronously beside the dgrad, on a second comm stream (Builder::backward_layer).
  virtual bool async_regather() const { return false; }
  // Whether the regions' communication is Megatron's all-reduces of TP without sequence parallelism
  // (strategy/tp_allreduce.cpp): no gather anywhere, the dgrad's all-reduce the builder's to place.
  virtual bool all_reduces() const { return false; }
  // AG -> GEMM with t > 1: gathers g's chunks (shard -> full) and runs r.work on them. `plan`
  // (ring_steps() only): records each rank's calls instead of emitting them (Builder::ag_region).
  // `collective_stream`: where collectives go (the TP communicator's, or its re-gather stream).
  virtual Deps all_gather(Builder& b, const RegionCall& r, const Rows& g, std::vector<std::vector<AgCall>>* plan,
                          StreamRef collective_stream) const = 0;
  // GEMM -> RS with t > 1: r.work writes the partial sums into `pbuf` [S, width]; the reduced own
  // chunk goes into `out` [n, width].
  virtual Deps reduce_scatter(Builder& b, const RegionCall& r, const PerRank& pbuf, const PerRank& out) const = 0;
};

// The TP strategy a request's layers run: its own (TpspRequest::tp_strategy), or the TP part of
// schedule_strategy(kind, options), except the baseline without sequence parallelism, which runs
// Megatron's all-reduces (strategy/tp_allreduce.cpp).
const TpStrategy& tp_strategy(const TpspRequest& r);

// The collective lowering baseline and slice share (src/sched/strategy/collective_regions.cpp):
// each region as `slices` collectives, the work of slice j after its all-gather or before its
// reduce-scatter.
Deps collective_all_gather(Builder& b, const RegionCall& r, const Rows& g, int slices, StreamRef stream);
Deps collective_reduce_scatter(Builder& b, const RegionCall& r, const PerRank& pbuf, const PerRank& out, int slices);

}  // namespace fusesim::sched::tpsp

namespace fusesim::sched {

// A schedule's lowering of every pattern: TP's regions (the TpStrategy it is), Ulysses' all-to-alls
// (up_*) and DP's gradient sync (dp_*). The Ulysses lowerings to choose from are the emitter's
// building blocks (collective, sliced, ring: UlyssesEmitter); DP's are the DpSync's (one collective
// after the backward, bucketed collectives as gradients complete, the ring fused with the weight
// gradient).
class Strategy : public tpsp::TpStrategy {
 public:
  // Whether the schedule cuts its communication into ScheduleOptions::slices slices (the option
  // must then fit a sequence chunk).
  virtual bool sliced() const { return false; }
  int up_slices(const model::ScheduleOptions& o) const { return sliced() ? o.slices : 1; }

  // Ulysses. The producer of an exchange (QKV projection, out-projection dgrad) on rows of the local
  // sequence; an empty function: the layer builder's plain GEMM (the exchange comes in up_exchange).
  virtual UpWorkFn up_producer(UlyssesEmitter& e, const UpProducer& p) const = 0;
  // What attention (or its backward) on TP index ti waits for once the producer has run.
  virtual std::vector<TaskId> up_exchange(UlyssesEmitter& e, const UpExchange& x, int ti) const = 0;
  // Attention and the exchange of its output back; returns what the out-projection waits for.
  virtual std::vector<TaskId> up_attention_forward(UlyssesEmitter& e, const UpAttention& a, int ti) const = 0;
  // The dQ/dK/dV exchange after the attention backward; returns what the QKV backward waits for.
  virtual std::vector<TaskId> up_attention_backward(UlyssesEmitter& e, const UpAttentionBwd& a, int ti,
                                                    TaskId attention_bwd) const = 0;
  // Whether the QKV backward consumes dQKV block by block as it lands (UlyssesEmitter::qkv_grad_blocks).
  virtual bool up_fused_backward() const { return false; }

  // DP. Whether each weight gradient's last accumulation step is fused with a ring reduce-scatter
  // over DP (DpSync::fused_gradient) rather than synchronised by collectives.
  virtual bool dp_fused() const { return false; }
  // Whether the collectives wait for the whole backward, one over all gradients (the serial
  // reference), rather than one per bucket as the bucket's gradients complete.
  virtual bool dp_serial(const model::ScheduleOptions&) const { return false; }
};

// The strategy of a schedule (the baseline's as the options' tp_baseline says); the registration of
// every strategy (src/sched/strategy/registry.cpp).
const Strategy& schedule_strategy(model::ScheduleKind kind, const model::ScheduleOptions& options);
// The strategy that lowers a request's Ulysses exchanges: its own (up_strategy) or up_kind's.
const Strategy& up_strategy(const TpspRequest& request);

}  // namespace fusesim::sched
