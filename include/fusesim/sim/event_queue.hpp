#pragma once
// The simulator's event queue: a min-priority queue of small plain events keyed (time, sequence
// number): a 4-ary heap, plus FIFO "lanes" for events scheduled in time order.
//
// Why this shape:
// - Events are 24-byte PODs (no std::function, no heap allocation per event): the engine is meant to
//   process > 10 million events per second on one core, and a type-erased callable per event would
//   cost an allocation and an indirect call each.
// - The sequence number is assigned at scheduling time, so events at equal times run in the order
//   they were scheduled (FIFO). Together with deterministic handlers this makes a run reproducible.
//   Keys are unique, so any exact priority queue pops the same sequence: the heap's arity and the
//   lanes are matters of speed only.
// - Time never goes back: scheduling before the time of the last popped event is a logic error.
// - Moving an event EARLIER is done in place: an event pushed with a non-zero `handle` (the engine
//   gives one per compute slot and per flow) has its heap position tracked, and move_earlier() gives
//   it a new time and a fresh sequence number and sifts it up. That is exactly the key a new push
//   would have had, and the event it replaces never did anything when it popped, so the pop order
//   of the events that do something is that of "push a new event, drop the stale one when it pops",
//   without the stale pops (a sixth of all pops on contended pipelines). Keeping the index costs one
//   store per move of a heap entry, off the chain of dependent loads that bounds a sift.
// - Moving an event LATER is left lazy: the event comes up at its old time, finds that its target
//   now ends later and is turned into that later event in place (reschedule_top(): one sift, a fresh
//   sequence number as a push at that moment would give). Doing it eagerly would change the sequence
//   number, hence the order among equal times, hence results.
// - 4-ary: half the depth of a binary heap, and the four children are compared in two independent
//   pairs, so a pop waits on about half as many dependent loads and compares. (A structure of
//   arrays, times apart from the rest, measured about 7% slower in the engine than this array of
//   24-byte events.)
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "fusesim/util/units.hpp"

namespace fusesim::sim {

struct Event {
  // Scheduling order in the high 56 bits, the handler's kind in the low 8 bits. Packing them keeps
  // the event at 24 bytes, and since sequence numbers are unique the packed word orders exactly as
  // the sequence number does: the kind never influences ordering. It comes before `time` so that
  // the two words, read as one little-endian 128-bit integer, are the key (time, sequence).
  std::uint64_t seq_kind = 0;
  TimePs time = 0;
  std::uint32_t target = 0;   // task, flow or collective the event is about (the engine's choice)
  std::uint32_t handle = 0;   // non-zero: the position of this event is tracked (move_earlier())

  std::uint64_t seq() const { return seq_kind >> 8; }
  std::uint8_t kind() const { return static_cast<std::uint8_t>(seq_kind & 0xff); }

  static constexpr std::uint64_t kMaxSeq = (std::uint64_t{1} << 56) - 1;
};

class EventQueue {
 public:
  bool empty() const { return heap_.empty() && best_lane_ < 0; }
  std::size_t size() const {
    std::size_t n = heap_.size();
    for (const Lane& l : lanes_) n += l.count;
    return n;
  }
  // Time of the last popped event: nothing may be scheduled before it.
  TimePs now() const { return now_; }
  // The earliest event (the earliest scheduled among equal times). The queue must not be empty.
  const Event& top() const { return top_is_lane() ? lanes_[best_lane_].head() : heap_.front(); }
  TimePs top_time() const { return top().time; }
  // Sequence numbers handed out so far: pushes, moves earlier and reschedules.
  std::uint64_t scheduled() const { return next_seq_; }
  void reserve(std::size_t n) { heap_.reserve(n); }

  // Whether the event pushed with `handle` (non-zero) is still in the heap.
  bool queued(std::uint32_t handle) const { return handle < pos_.size() && pos_[handle] != kNotQueued; }
  // Gives the queued event of `handle` the new, earlier time and a fresh sequence number (the key a
  // push now would give) and restores the heap order. Throws std::logic_error if it is not queued or
  // would not move earlier.
  void move_earlier(std::uint32_t handle, TimePs time, std::uint8_t kind) {
    if (handle == 0 || !queued(handle) || time >= heap_[pos_[handle]].time)
      throw std::logic_error("move_earlier: no such event, or not earlier");
    const std::size_t hole = pos_[handle];
    sift_up(hole, next_seq_kind(time, kind), time, heap_[hole].target, handle);
  }

  // The new event is kept in registers and written once, field by field, into its final slot: an
  // Event built in memory and then copied would be stored as two words and reloaded as one 16-byte
  // word, a store-forwarding stall on every push. (Likewise in sift_down() and the lanes.)
  // A non-zero `handle` (at most one queued event per handle) makes the event's position tracked.
  void push(TimePs time, std::uint8_t kind, std::uint32_t target, std::uint32_t handle = 0) {
    if (handle >= pos_.size()) pos_.resize(std::size_t{handle} + 1, kNotQueued);
    const std::uint64_t seq_kind = next_seq_kind(time, kind);
    const std::size_t hole = heap_.size();
    heap_.emplace_back();
    sift_up(hole, seq_kind, time, target, handle);
  }

  // Lanes: FIFO side queues for events that are scheduled in time order, such as those a fixed
  // delay after the current time (a transfer's latency phase: route latency + step latency; a
  // collective's base latency; "now" itself). Since sequence numbers only grow, such a FIFO is
  // already sorted by (time, sequence), so these events skip the heap: O(1) in and out, and the
  // heap stays smaller. The pop order is exactly that of a single heap.
  std::uint32_t add_lane() {
    lanes_.emplace_back();
    return static_cast<std::uint32_t>(lanes_.size() - 1);
  }
  std::size_t num_lanes() const { return lanes_.size(); }
  // Throws std::logic_error if `time` is before the last time pushed to this lane.
  void push_lane(std::uint32_t lane, TimePs time, std::uint8_t kind, std::uint32_t target) {
    Lane& l = lanes_.at(lane);
    if (l.count > 0 && time < l.last_time) throw std::logic_error("lane events must be scheduled in time order");
    const std::uint64_t seq_kind = next_seq_kind(time, kind);
    l.push(seq_kind, time, target);
    if (l.count == 1) {
      if (lane < 64) nonempty_lanes_ |= std::uint64_t{1} << lane;
      if (best_lane_ < 0 || key(time, seq_kind) < key(lanes_[best_lane_].head())) best_lane_ = static_cast<int>(lane);
    }
  }

  // Removes and returns the earliest event (the earliest scheduled among equal times).
  Event pop() {
    const Event e = take_top();
    drop_top();
    return e;
  }

  // The engine's way to look at the earliest event before deciding what to do with it: take_top()
  // makes it the current one (now() moves to its time), then either drop_top() removes it, or
  // reschedule_top() turns it into a new event (a fresh sequence number, as push() would give),
  // for a heap event in one sift instead of a pop and a push.
  const Event& take_top() {
    if (empty()) throw std::logic_error("pop from an empty event queue");
    top_lane_ = top_is_lane();
    const Event& e = top_lane_ ? lanes_[best_lane_].head() : heap_.front();
    now_ = e.time;
    return e;
  }
  void drop_top() {
    if (top_lane_) {
      Lane& l = lanes_[best_lane_];
      l.pop();
      if (l.count == 0 && best_lane_ < 64) nonempty_lanes_ &= ~(std::uint64_t{1} << best_lane_);
      pick_best_lane();
    } else {
      pos_[heap_.front().handle] = kNotQueued;
      const Event& last = heap_.back();
      const std::uint64_t seq_kind = last.seq_kind;
      const TimePs time = last.time;
      const std::uint32_t target = last.target, handle = last.handle;
      heap_.pop_back();
      if (!heap_.empty()) sift_down(0, seq_kind, time, target, handle);
    }
  }
  void reschedule_top(TimePs time, std::uint8_t kind, std::uint32_t target, std::uint32_t handle = 0) {
    if (top_lane_) {
      drop_top();
      push(time, kind, target, handle);
    } else {
      if (handle >= pos_.size()) pos_.resize(std::size_t{handle} + 1, kNotQueued);
      if (heap_.front().handle != handle) pos_[heap_.front().handle] = kNotQueued;
      sift_down(0, next_seq_kind(time, kind), time, target, handle);
    }
  }

 private:
  static constexpr std::size_t kArity = 4;
  static constexpr std::uint32_t kNotQueued = ~std::uint32_t{0};

  // A ring buffer (power-of-two capacity).
  struct Lane {
    std::vector<Event> buf;
    std::size_t first = 0;
    std::size_t count = 0;
    TimePs last_time = 0;
    const Event& head() const { return buf[first]; }
    void push(std::uint64_t seq_kind, TimePs time, std::uint32_t target) {
      if (count == buf.size()) grow();
      Event& e = buf[(first + count) & (buf.size() - 1)];
      e.seq_kind = seq_kind;
      e.time = time;
      e.target = target;
      e.handle = 0;
      ++count;
      last_time = time;
    }
    void pop() {
      first = (first + 1) & (buf.size() - 1);
      --count;
    }
    void grow() {
      std::vector<Event> bigger(buf.empty() ? 64 : 2 * buf.size());
      for (std::size_t i = 0; i < count; ++i) bigger[i] = buf[(first + i) & (buf.size() - 1)];
      buf.swap(bigger);
      first = 0;
    }
  };

  // One 128-bit comparison of (time, sequence) (times are never negative): branch-free, since which
  // child is smaller is a coin flip the branch predictor cannot learn, and a few instructions.
  __extension__ using Key = unsigned __int128;
  static Key key(TimePs time, std::uint64_t seq_kind) {
    return (static_cast<Key>(static_cast<std::uint64_t>(time)) << 64) | seq_kind;
  }
  static Key key(const Event& e) { return key(e.time, e.seq_kind); }
  static bool before(const Event& a, const Event& b) { return key(a) < key(b); }

  bool top_is_lane() const {
    return best_lane_ >= 0 && (heap_.empty() || before(lanes_[best_lane_].head(), heap_.front()));
  }

  // Visits the non-empty lanes only (the first 64 through a bit mask): a queue has a dozen lanes, of
  // which one or two hold events at a time, and this runs at every lane pop.
  void pick_best_lane() {
    best_lane_ = -1;
    for (std::uint64_t m = nonempty_lanes_; m != 0; m &= m - 1) {
      const int i = __builtin_ctzll(m);
      if (best_lane_ < 0 || before(lanes_[static_cast<std::size_t>(i)].head(), lanes_[best_lane_].head())) best_lane_ = i;
    }
    for (std::size_t i = 64; i < lanes_.size(); ++i)
      if (lanes_[i].count > 0 && (best_lane_ < 0 || before(lanes_[i].head(), lanes_[best_lane_].head())))
        best_lane_ = static_cast<int>(i);
  }

  // The sequence word of a new event; the throws live apart, out of the inlined path.
  std::uint64_t next_seq_kind(TimePs time, std::uint8_t kind) {
    if (time < now_ || next_seq_ > Event::kMaxSeq) refuse(time);
    return (next_seq_++ << 8) | kind;
  }
  [[gnu::cold, gnu::noinline, noreturn]] void refuse(TimePs time) const {
    if (time < now_)
      throw std::logic_error("event scheduled at " + std::to_string(time) + " ps, before the current time " +
                             std::to_string(now_) + " ps");
    throw std::logic_error("event sequence numbers exhausted");
  }

  // Places the event at `hole` or above: the parent moves down while it is later. The event comes in
  // registers and is written once (see push()). Every entry moved has its position recorded (handle
  // 0, the untracked events, share a scratch entry).
  void sift_up(std::size_t hole, std::uint64_t seq_kind, TimePs time, std::uint32_t target, std::uint32_t handle) {
    const Key k = key(time, seq_kind);
    Event* h = heap_.data();
    std::uint32_t* pos = pos_.data();
    while (hole > 0) {
      const std::size_t parent = (hole - 1) / kArity;
      if (!(k < key(h[parent]))) break;
      h[hole] = h[parent];
      pos[h[hole].handle] = static_cast<std::uint32_t>(hole);
      hole = parent;
    }
    h[hole].seq_kind = seq_kind;
    h[hole].time = time;
    h[hole].target = target;
    h[hole].handle = handle;
    pos[handle] = static_cast<std::uint32_t>(hole);
  }

  // Places the event at `hole` or below: the smallest child moves up while it is earlier. The event
  // comes in registers and is written once (see push()).
  void sift_down(std::size_t hole, std::uint64_t seq_kind, TimePs time, std::uint32_t target, std::uint32_t handle) {
    const Key k = key(time, seq_kind);
    const std::size_t n = heap_.size();
    Event* h = heap_.data();
    std::uint32_t* pos = pos_.data();
    for (;;) {
      const std::size_t c = kArity * hole + 1;
      std::size_t best;
      if (c + kArity <= n) {
        const std::size_t b01 = c + (before(h[c + 1], h[c]) ? 1 : 0);
        const std::size_t b23 = c + 2 + (before(h[c + 3], h[c + 2]) ? 1 : 0);
        best = before(h[b23], h[b01]) ? b23 : b01;
      } else if (c < n) {
        best = c;
        for (std::size_t k = c + 1; k < n; ++k)
          if (before(h[k], h[best])) best = k;
      } else {
        break;
      }
      if (!(key(h[best]) < k)) break;
      h[hole] = h[best];
      pos[h[hole].handle] = static_cast<std::uint32_t>(hole);
      hole = best;
    }
    h[hole].seq_kind = seq_kind;
    h[hole].time = time;
    h[hole].target = target;
    h[hole].handle = handle;
    pos[handle] = static_cast<std::uint32_t>(hole);
  }

  std::vector<Event> heap_;
  std::vector<std::uint32_t> pos_ = std::vector<std::uint32_t>(1, kNotQueued);  // by handle: index in heap_
  std::vector<Lane> lanes_;
  std::uint64_t nonempty_lanes_ = 0;  // bit i: lane i (< 64) holds events
  int best_lane_ = -1;     // the lane with the earliest head; -1 when every lane is empty
  bool top_lane_ = false;  // whether the event take_top() returned came from a lane
  std::uint64_t next_seq_ = 0;
  TimePs now_ = 0;
};

}  // namespace fusesim::sim
