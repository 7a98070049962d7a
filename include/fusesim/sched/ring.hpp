#pragma once
// The ring order every ring-ordered exchange of the schedules follows (design note section 2): the
// Fuse-AG and Fuse-RS regions of TPSP (sched/tpsp.cpp), the DP fused gradient and the all-gather half
// of DDP's all-reduce, and the DP collectives lowered to P2P (sched/dp.cpp). Stated once here so that
// the chunk a member handles at a step, its peers and its message tags cannot drift apart between them
// (tests/sched/ring_test.cpp). The exchanges themselves (ring_reduce_scatter, ring_all_gather,
// ring_collective) emit their steps in that order through the caller's ports, so that the step
// structure (what waits for what) is written once too.
#include <cstdint>
#include <functional>
#include <vector>

#include "fusesim/sched/dag.hpp"

namespace fusesim::sched {

// a mod m in [0, m) whatever the sign of a: the member before member 0 is member m - 1.
constexpr std::int64_t ring_mod(std::int64_t a, std::int64_t m) { return ((a % m) + m) % m; }

// A ring over the members 0 .. size - 1 of a group: member r sends to r + 1 and receives from r - 1.
// A ring exchange takes size - 1 steps (the reduce-scatter order: size steps of compute, the last
// without a transfer). Chunks are numbered like members: chunk c is the one member c owns at the end
// of a reduce-scatter and at the start of an all-gather.
struct Ring {
  int size = 1;

  constexpr int wrap(std::int64_t member) const { return static_cast<int>(ring_mod(member, size)); }
  constexpr int next(int member) const { return wrap(member + 1); }
  constexpr int prev(int member) const { return wrap(member - 1); }

  // All-gather order: at step s member r holds chunk (r - s) mod size (its own at step 0, then the one
  // it received at step s - 1), passes it to r + 1 and receives chunk (r - s - 1) mod size from r - 1,
  // which is what r - 1 holds at step s. After size - 1 steps every member holds every chunk.
  constexpr int gather_chunk(int member, int step) const { return wrap(member - step); }
  constexpr int gather_recv_chunk(int member, int step) const { return gather_chunk(member, step + 1); }

  // Reduce-scatter order: at step s member r reduces chunk (r - 1 - s) mod size (its own partial at
  // step 0; from step 1 on added to the running sum of that chunk received from r - 1) and passes the
  // sum to r + 1; at the last step, size - 1, the chunk is r's own, complete.
  constexpr int reduce_chunk(int member, int step) const { return wrap(member - 1 - step); }

  // The fault hooks of the tests (TpspFault, DpFault): members `step` and step + shift (both wrapped)
  // trade places in a member list; any other keeps its own. A swap rather than a shift, so that a
  // later write of the member a shift collides with cannot undo the fault.
  constexpr int swapped(int member, std::int64_t step, std::int64_t shift) const {
    const int a = wrap(step), b = wrap(step + shift);
    return member == a ? b : (member == b ? a : member);
  }

  // Message tags: a ring exchange draws one block of tags_per_exchange() from its allocator; the
  // message `sender` sends at `step` carries tag(base, step, sender), and its receiver, sender + 1,
  // names the same tag with the same call.
  constexpr std::int64_t tags_per_exchange() const { return static_cast<std::int64_t>(size) * size; }
  constexpr std::int64_t tag(std::int64_t base, int step, int sender) const {
    return base + static_cast<std::int64_t>(step) * size + sender;
  }
};

// One message of a ring exchange as one member sees it: the member's step, the chunk the message
// carries, and the tag its sender puts on it, tag_base + sender (Ring::tag with sender 0 gives the
// base; a receiver that stands in for another, as DP's mirror proxies do, needs the base apart).
struct RingMessage {
  int step = 0;
  int chunk = 0;
  std::int64_t tag_base = 0;
  int sender = 0;
  std::int64_t tag() const { return tag_base + sender; }
};

// What a ring exchange emits on one member. The exchange decides the order of the tasks, the chunk
// and tag of each message and the edges between steps; the ports decide what a task is (names,
// streams, engines, labels, data), which differ between TPSP, DP and the P2P collectives.
struct RingPorts {
  // Sends m.chunk to the next member once `deps` are done.
  std::function<TaskId(const RingMessage& m, const std::vector<TaskId>& deps)> send;
  // Receives m.chunk from the previous member; `deps`: when the receive is posted.
  std::function<TaskId(const RingMessage& m, const std::vector<TaskId>& deps)> recv;
  // Reduce-scatter: adds the running sum received (`received`) to the own partial of m.chunk (done
  // at `partial`); `last`: m.chunk is the member's own and the sum is the result.
  std::function<TaskId(const RingMessage& m, TaskId partial, TaskId received, bool last)> add;
};

// Fuse-RS on `member` (the reduce order above): at each step `compute(step, chunk)` emits the
// member's partial of the chunk it reduces and returns the task after which it is ready; from step 1
// on the running sum received from the previous member is added to it, and every step but the last
// passes the sum on. Returns the last step's add (the reduced own chunk; with one member, the
// compute). Tags: the block of Ring::tags_per_exchange() at `tag0`.
TaskId ring_reduce_scatter(const Ring& ring, int member, std::int64_t tag0,
                           const std::function<TaskId(int step, int chunk)>& compute, const RingPorts& ports);

// Step `step` of a ring all-gather on `member`: sends the chunk it holds once `have` is done and
// receives the next one (the receive waits for nothing: it is posted at once). Returns the Recv.
TaskId ring_gather_step(const Ring& ring, int member, int step, std::int64_t tag0, const std::vector<TaskId>& have,
                        const RingPorts& ports);

// Fuse-AG on `member` (the gather order above): at each step `compute(step, chunk, have)` runs on
// the chunk the member holds, `have` being the tasks after which it is here (`ready` at step 0, then
// the previous step's Recv), and every step but the last passes that chunk on (ring_gather_step).
// Without `compute`, a plain ring all-gather. Returns the last Recv (`ready` with one member).
std::vector<TaskId> ring_all_gather(
    const Ring& ring, int member, std::int64_t tag0, std::vector<TaskId> ready,
    const std::function<void(int step, int chunk, const std::vector<TaskId>& have)>& compute, const RingPorts& ports);

// A collective lowered to ring P2P steps on `member`, as NCCL's ring runs it: size - 1 reduce-scatter
// steps, then (all-reduce) size - 1 all-gather steps, or the all-gather steps alone. Step s sends
// what step s - 1 received (the reduction happens in the receive) and every receive is posted with
// `deps`, as NCCL's kernel posts its buffers when the collective starts. RingMessage::chunk is the
// chunk sent (Send) or received (Recv). Tags: 2 x Ring::tags_per_exchange() at `tag0`, by step over
// both halves. Returns the last Recv.
TaskId ring_collective(const Ring& ring, int member, bool reduce, bool gather, std::int64_t tag0,
                       const std::vector<TaskId>& deps, const RingPorts& ports);

}  // namespace fusesim::sched
