#pragma once
// Data-parallel gradient synchronisation (docs/schedules.md, "DP"). A DpSync is told, rank by rank,
// when the backward finishes each weight gradient, and emits the synchronisation across the DP
// replicas as the requested schedule's strategy (sched/strategy.hpp, dp_*) chooses:
//   baseline  one collective over the rank's whole gradient after the backward;
//   slice     buckets of ScheduleOptions::dp_bucket_bytes in the order the backward produces the
//             gradients, one collective per bucket, issued when the bucket's last gradient is done;
//   commfuse  the last accumulation step of each weight-gradient GEMM cut into dp row pieces in ring
//             order, fused with a ring P2P reduce-scatter (Fuse-RS over DP); DDP adds the
//             all-gather half as ring P2P.
// Sharding: ddp all-reduces; zero1/zero2 reduce-scatter and all-gather the updated parameters after
// the optimizer; zero3 also all-gathers each layer's parameters before its forward and backward.
//
// Ranks: the members of one DP group hold the same (tp, up) position: rank = replica x members +
// member (RankLayout with DP outermost), so a DP group spans nodes. Streams: gradient collectives
// and ZeRO parameter gathers on comm stream 3, in the order issued (the DP group's one NCCL
// communicator, as DDP, FSDP and Megatron-LM use it), DP P2P on copy engine 2 (or comm stream 4 for
// SM-kernel P2P), so that DP traffic never waits behind TP (stream 0) or Ulysses (stream 1)
// transfers in stream order; they meet on the links only.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fusesim/model/workload.hpp"
#include "fusesim/sched/communicator.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/sched/dataflow.hpp"
#include "fusesim/sched/generate.hpp"

namespace fusesim::sched {

class Strategy;  // sched/strategy.hpp

// Test hook: on DP index `replica`, in every synchronisation, the part used at ring step / member
// position `step` is shifted by `shift` (CommFuse: the piece computed; collectives: members `step`
// and step + shift trade parts; an all-reduce reads the next gradient of its bucket in place of
// gradient `step`; collectives as ring P2P: ring chunks `step` and step + shift trade places in the
// replica's reads of its own gradient and own reduced part). A correct reference executor must then
// report a wrong or missing result.
struct DpFault {
  int replica = -1;  // -1: no fault
  int step = 0;
  int shift = 1;
};

struct DpConfig {
  int dp = 1;
  int members = 1;  // ranks per replica (tp x up): rank = first_rank + replica x members + member
  int first_rank = 0;  // the pipeline stage's first rank
  model::DpSharding sharding = model::DpSharding::ddp;
  model::ScheduleKind kind = model::ScheduleKind::baseline;
  model::ScheduleOptions schedule;  // dp_bucket_bytes, engines, comm_sms
  topo::Dtype dtype = topo::Dtype::bf16;       // of the parameters gathered (ZeRO)
  topo::Dtype grad_dtype = topo::Dtype::fp32;  // of the gradients reduced (Workload::gradient_dtype())
  // Of a layer's parameters gathered (ZeRO-3, gather_layer with layer >= 0); unset: `dtype`.
  std::optional<topo::Dtype> layer_gather_dtype;
  // ZeRO-3: the FSDP whose copies around the gathers and reduce-scatters run (copy kernels priced by
  // the bytes they stream; docs/schedules.md, "FSDP's copies"). Unset: none (the collectives alone).
  // Both keep fp32 sharded parameters (mixed precision: FSDP's MixedPrecision / MixedPrecisionPolicy
  // cast them to `dtype` to gather) and get gradients from autograd in `dtype`.
  //   before each gather, beside compute: the shard cast to the gathered type (4 + g bytes per shard
  //     element; none when it is fp32 already); FSDP2 also copies it into the all-gather's input
  //     buffer (+ 2 g: foreach_all_gather on its all_gather_copy_in_stream);
  //   FSDP2, on the compute stream before the layer runs: the gathered buffer copied out into each
  //     parameter (2 g per element: foreach_all_gather_copy_out's split_with_sizes_copy, in
  //     wait_for_unshard);
  //   before each gradient reduce-scatter, on the compute stream once the gradients are done: FSDP2's
  //     _chunk_cat of the gradients into the reduce-scatter's input in the reduce type (p + r bytes
  //     per element: foreach_reduce_scatter_copy_in, which the compute stream waits for before it frees
  //     the gradients in every version of _fsdp_collectives.py);
  //     FSDP1's autograd concatenating the views' gradients into the flat parameter's (2 p: the split
  //     of FlatParamHandle._get_unflat_views, differentiated), then on its post-backward stream the
  //     cast to the reduce type (p + r where they differ: _post_backward_hook).
  // CommFuse's fused DP ring sends each gradient part from where its piece GEMM wrote it: no
  // reduce-scatter input to pack.
  std::optional<model::FsdpImpl> fsdp;
  DpFault fault;
  // GenerateOptions::dp_as_p2p / mirror_dp (docs/schedules.md, "Symmetry"): collectives as ring P2P
  // steps (with dataflow when the program is given: `fusesim verify` checks it); with `mirror` only
  // the ranks of the first `simulated` replicas call in (one DP replica: its `up` Ulysses indices,
  // which come first in the ring), and replica 0's receive from the last replica is a proxy Recv on
  // replica `simulated` (named as replica 0's own receive, which it stands in for), timing only.
  bool as_p2p = false;
  bool mirror = false;
  int simulated = 1;
  // The rings a collective lowered to P2P runs, as NCCL and the engine's collectives run them
  // (topo/rings.hpp: one per member a node holds, each entering and leaving a node on one rail, each
  // carrying an equal share): from `cluster`, the DP group of each member; else from `replica_nodes`
  // (the node of each replica, `fusesim verify`); neither: one ring in replica order. CommFuse's
  // fused ring runs in replica order whatever the rings.
  const topo::Cluster* cluster = nullptr;
  std::vector<int> replica_nodes;
};

// One weight gradient of one rank. `buffer`: the local gradient [rows, cols] in the dataflow program
// (-1: timing only).
struct DpGradient {
  std::string name;  // "L3/bwd/fc2_wgrad"
  int layer = -1;
  std::int64_t rows = 0, cols = 0;
  BufferId buffer = -1;
  std::int64_t elements() const { return rows * cols; }
};

// Rows [row0, row0 + rows) of a gradient split into `parts` near-equal row ranges.
struct RowPart {
  std::int64_t row0 = 0, rows = 0;
};
RowPart row_part(std::int64_t rows, int parts, int p);

// The bucketing rule, one gradient at a time: a bucket closes once it holds at least the cap (a
// gradient larger than the cap fills a bucket alone). Both the backward's gradient buckets
// (DpSync::gradient, issued as they fill) and the parameter gathers' (dp_buckets) follow it, so that
// the two cut the gradients alike.
struct BucketFill {
  Bytes filled = 0;
  // Adds a gradient's bytes; true when that closes the bucket (the next one starts empty).
  bool add(Bytes bytes, Bytes cap) {
    filled += bytes;
    if (filled < cap) return false;
    filled = 0;
    return true;
  }
};

// Gradient indices per bucket: gradients in order, cut by BucketFill; the last bucket takes the rest.
std::vector<std::vector<int>> dp_buckets(const std::vector<Bytes>& gradient_bytes, Bytes bucket_bytes);

class DpSync {
 public:
  // `program` may be null (timing only).
  DpSync(TaskGraph& graph, DataflowProgram* program, DpConfig config);

  const DpConfig& config() const { return cfg_; }
  // The gradients fused with a ring reduce-scatter in the backward (fused_gradient), or collectives
  // after the backward (serial) or per bucket as gradients complete: the strategy's choice.
  bool fused() const;
  bool serial() const;

  // Non-fused schedules: gradient `g` is final on `rank` once `done` has run. Bucketed: the bucket it
  // fills is issued now when full (the buckets of dp_buckets), so that on the DP communicator's stream
  // it comes where it is issued, among the ZeRO-3 gathers of the backward.
  void gradient(int rank, const DpGradient& g, TaskId done);

  // CommFuse: emits piece(row0, rows, step, region, deps) for the dp row parts of the gradient's
  // last accumulation step, in ring order, with the ring reduce-scatter between them (the piece task
  // belongs to `region`, the sync's). The running-sum adds run on compute stream 1, beside the
  // backward. Returns the last piece (what the backward's next kernels follow); the reduced gradient
  // is ready when finish_backward()'s tasks are. `deps` gate the first piece.
  using PieceFn = std::function<TaskId(std::int64_t row0, std::int64_t rows, int step, int region,
                                       const std::vector<TaskId>& deps)>;
  TaskId fused_gradient(int rank, const DpGradient& g, const PieceFn& piece, const std::vector<TaskId>& deps);

  // After the rank's backward (`after`: its last tasks): baseline issues its one collective, slice
  // its buckets. Returns every task the optimizer must wait for (ends of all of the rank's syncs).
  std::vector<TaskId> finish_backward(int rank, const std::vector<TaskId>& after);

  // Elements of the parameters the rank's optimizer updates: all of its gradients (ddp), or its
  // 1/dp share (ZeRO): of a fused gradient the row part it reduced, of the others an even share of
  // their flat buffer, padded to a multiple of dp as Megatron-LM's distributed optimizer and FSDP pad
  // it (every replica the same).
  std::int64_t optimizer_elements(int rank) const;

  // ZeRO-1/2: all-gathers the updated parameter parts after the optimizer (`after`), bucketed as the
  // gradients were (one collective in baseline). Nothing for ddp and zero3. Returns the ends.
  std::vector<TaskId> gather_updated(int rank, const std::vector<TaskId>& after);

  // ZeRO-3: all-gathers the rank's `elements` parameters of `layer` before its forward or backward.
  // Returns the tasks after which the layer's parameters are here (one per ring in the P2P form).
  std::vector<TaskId> gather_layer(int rank, const std::string& name, int layer, std::int64_t elements,
                                   const std::vector<TaskId>& deps);
  // FSDP2 (DpConfig::fsdp): the copy of a gathered layer (gather_layer's `name`, `layer`, `elements`)
  // out into its parameters, on the compute stream once `deps` (the gather's ends, and what the
  // compute stream ran before) are done. Returns it; kNoTask when the sync makes no such copy.
  TaskId copy_out(int rank, const std::string& name, int layer, std::int64_t elements, const std::vector<TaskId>& deps);

  // ZeRO-3 in a micro-batch before the last: reduce-scatters the rank's `elements` gradients of
  // `layer` once its backward (`deps`) is done, timing only, as FSDP does in every micro-batch (it
  // keeps no unsharded gradient to accumulate into: PyTorch FSDP without no_sync, Composer, torchtitan).
  // Returns the collective's ends (one per ring in the P2P form); nothing waits for them but the
  // stream after them.
  std::vector<TaskId> reduce_layer(int rank, const std::string& name, int layer, std::int64_t elements,
                                   const std::vector<TaskId>& deps);

  // The buffers holding the synchronised gradient j of `rank` (in the order given): the full
  // all-reduced gradient (ddp), or the reduced own row part (ZeRO, other rows unwritten) until
  // gather_updated() fills the full one in gathered(). -1 without dataflow.
  BufferId synced(int rank, int j) const;
  BufferId gathered(int rank, int j) const;

  // Mirror mode: why the replicas' ring steps or optimizer parts differ (a gradient whose rows do not
  // split evenly into dp row parts where the sync cuts rows: the fused ring, ZeRO's own parts), so
  // that replica 0 does not stand for the others; empty when they are alike.
  const std::string& mirror_inexact() const { return mirror_inexact_; }

 private:
  struct Grad {
    DpGradient g;
    TaskId done = kNoTask;
    BufferId synced = -1, gathered = -1;
    bool cut_by_rows = false;  // reduced part by part as computed (fused): the rank owns its row part
  };
  struct RankState {
    std::vector<Grad> grads;
    std::vector<TaskId> ends;
    std::int64_t collectives = 0;
    std::int64_t fused = 0;
    // Bucketed sync: the gradients of the bucket not yet issued, its fill, and the buckets issued.
    std::vector<int> bucket;
    BucketFill fill;
    int buckets = 0;
  };
  // Issues the rank's open bucket (bucketed sync), if it holds any gradient.
  void issue_bucket(int rank);
  // What syncs the gradients: an all-reduce (ddp) or a reduce-scatter (ZeRO).
  CollectiveKind gradient_kind() const;

  int replica(int rank) const { return (rank - cfg_.first_rank) / cfg_.members; }
  int member(int rank) const { return (rank - cfg_.first_rank) % cfg_.members; }
  int peer(int rank, int dp_index) const { return cfg_.first_rank + dp_index * cfg_.members + member(rank); }
  // The DP group of `rank` (its peers in every replica), one shared list per member position.
  const RankGroup& group(int rank) const;
  mutable std::vector<RankGroup> groups_;  // group()'s, by member position
  int region(const std::string& name);
  // Gradient bytes (reductions, the fused ring, buckets) and parameter bytes (ZeRO gathers).
  Bytes bytes(std::int64_t elements) const { return elements * topo::bytes_per_element(cfg_.grad_dtype); }
  Bytes param_bytes(std::int64_t elements) const { return elements * topo::bytes_per_element(cfg_.dtype); }
  // Bytes per element of a gather of `layer`'s parameters (-1: the embedding, LM head or a bucket).
  std::int64_t gathered_bytes_per_element(int layer) const;
  // FSDP's copies before a reduce-scatter of `elements` gradients (DpConfig::fsdp): returns what the
  // reduce-scatter waits for, `deps` when no copy is made.
  // `labels`: the reduce-scatter's (region, layer, phase); the copies take them with their own op.
  std::vector<TaskId> pack_gradients(int rank, const std::string& name, const TaskLabels& labels,
                                     std::int64_t elements, const std::vector<TaskId>& deps);
  TaskId copy_task(int rank, const std::string& name, StreamRef stream, Bytes bytes, TaskLabels labels,
                   const std::vector<TaskId>& deps);
  BufferId alloc(int rank, const std::string& name, std::int64_t rows, std::int64_t cols);
  std::int32_t op(DataOp d);
  int fault_part(int rank, int part) const;  // the fault's member position swap
  TaskId add(int rank, std::string name, StreamRef stream, TaskKind kind, TaskLabels labels, std::int32_t data_op,
             const std::vector<TaskId>& deps);
  // The collective task, or in the P2P form each ring's last receive.
  std::vector<TaskId> collective(int rank, CollectiveKind kind, const std::vector<int>& grads,
                                 const std::string& region_name, const std::vector<TaskId>& deps, bool params);
  // The receive of one DP ring step on `rank` from replica `from`, its ring predecessor (the Send
  // tagged `tag_of(from)`; `sent_bytes(sender)`: what that replica's Send carries). Mirror mode, where
  // `from` is not simulated: a proxy on the replica `simulated` places further on receiving the Send
  // of `from` shifted alike, with the same name and deps. Returns the task consumers wait for.
  TaskId ring_recv(int rank, int from, const std::string& name, StreamRef stream, Bytes bytes,
                   const std::function<Bytes(int sender)>& sent_bytes,
                   const std::function<std::int64_t(int sender)>& tag_of, const TaskLabels& labels,
                   std::int32_t data_op, const std::vector<TaskId>& deps);
  // The rings of `rank`'s DP group (DpConfig::cluster / replica_nodes): each the order of replicas.
  const std::vector<std::vector<int>>& rings(int rank);
  // SMs each of `rings` concurrent rings' transfers holds: the rank's one kernel's worth shared.
  int ring_sms(int rank, int rings) const;
  // A collective as ring P2P steps (as_p2p) on each of the rank's rings (rings()), ring k on
  // ring_stream(stream, k): returns each ring's last receive. `grads`: the rank's gradients (indices
  // into its list) the collective moves, with dataflow when they carry buffers; empty: timing only
  // (ZeRO-3 layer gathers).
  // A collective over the rank's DP group that carries no data (ZeRO-3's layer gathers and
  // reduce-scatters): one task, or its ring of P2P steps in the P2P form.
  std::vector<TaskId> timing_collective(int rank, CollectiveKind kind, Bytes total, const std::string& name,
                                        StreamRef stream, TaskLabels labels, const std::vector<TaskId>& deps);
  std::vector<TaskId> p2p_collective(int rank, CollectiveKind kind, Bytes total, const std::string& name, StreamRef stream,
                        const TaskLabels& labels, const std::vector<TaskId>& deps, const std::vector<int>& grads);

  TaskGraph& g_;
  DataflowProgram* prog_;
  DpConfig cfg_;
  const Strategy& strategy_;  // cfg_.kind's
  DpCommunicator comm_;  // DP's streams and engines (sched/communicator.hpp)
  std::map<int, RankState> ranks_;
  std::map<std::string, int> regions_;
  std::map<int, std::vector<std::vector<int>>> rings_;  // by member (rank within a replica)
  std::string mirror_inexact_;
  void note_rows(const DpGradient& g, bool cut_by_rows);
};

}  // namespace fusesim::sched
