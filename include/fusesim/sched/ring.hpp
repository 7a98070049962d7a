#pragma once
// The ring order every ring-ordered exchange of the schedules follows (design note section 2): the
// Fuse-AG and Fuse-RS regions of TPSP (sched/tpsp.cpp), the DP fused gradient and the all-gather half
// of DDP's all-reduce, and the DP collectives lowered to P2P (sched/dp.cpp). Stated once here so that
// the chunk a member handles at a step, its peers and its message tags cannot drift apart between them
// (tests/sched/ring_test.cpp).
#include <cstdint>

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

}  // namespace fusesim::sched
