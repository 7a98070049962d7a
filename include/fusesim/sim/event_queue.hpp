#pragma once
// The simulator's event queue: a binary min-heap of small plain events keyed (time, sequence number).
//
// Why this shape:
// - Events are 24-byte PODs (no std::function, no heap allocation per event): the engine is meant to
//   process > 10 million events per second on one core, and a type-erased callable per event would
//   cost an allocation and an indirect call each.
// - The sequence number is assigned at scheduling time, so events at equal times run in the order
//   they were scheduled (FIFO). Together with deterministic handlers this makes a run reproducible.
// - Time never goes back: scheduling before the time of the last popped event is a logic error.
// - There is no erase. A handler that wants to cancel or move an event bumps a version counter of
//   its own (per task, per flow) and schedules a new one; the stale event still pops later and is
//   recognised because its `version` no longer matches (lazy deletion). Erasing from the middle of a
//   heap would need a position index kept up to date on every move. An event that finds, when it
//   comes up, that its target now ends later is turned into that later event in place
//   (reschedule_top(): one sift instead of a pop and a push).
// - Any exact priority queue on the unique (time, sequence) keys pops the same sequence; the heap's
//   shape (4-ary) is a matter of speed only.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "fusesim/util/units.hpp"

namespace fusesim::sim {

struct Event {
  TimePs time = 0;
  // Scheduling order in the high 56 bits, the handler's kind in the low 8 bits. Packing them keeps
  // the event at 24 bytes, and since sequence numbers are unique the packed word orders exactly as
  // the sequence number does: the kind never influences ordering.
  std::uint64_t seq_kind = 0;
  std::uint32_t target = 0;   // task, flow or collective the event is about (the engine's choice)
  std::uint32_t version = 0;  // compared against the target's current version (lazy cancellation)

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
  // Events scheduled so far, stale ones included.
  std::uint64_t scheduled() const { return next_seq_; }
  void reserve(std::size_t n) { heap_.reserve(n); }

  void push(TimePs time, std::uint8_t kind, std::uint32_t target, std::uint32_t version = 0) {
    const Event e = make(time, kind, target, version);
    std::size_t hole = heap_.size();
    heap_.push_back(e);
    sift_up(hole, e);
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
  void push_lane(std::uint32_t lane, TimePs time, std::uint8_t kind, std::uint32_t target, std::uint32_t version = 0) {
    Lane& l = lanes_.at(lane);
    if (l.count > 0 && time < l.last_time) throw std::logic_error("lane events must be scheduled in time order");
    const Event e = make(time, kind, target, version);
    l.push(e);
    if (l.count == 1 && (best_lane_ < 0 || before(e, lanes_[best_lane_].head()))) best_lane_ = static_cast<int>(lane);
  }

  // Removes and returns the earliest event (the earliest scheduled among equal times).
  Event pop() {
    const Event top = take_top();
    drop_top();
    return top;
  }

  // The engine's way to look at the earliest event before deciding what to do with it: take_top()
  // makes it the current one (now() moves to its time), then either drop_top() removes it, or
  // reschedule_top() turns it into a new event (a fresh sequence number, as push() would give),
  // for a heap event in one sift instead of a pop and a push.
  const Event& take_top() {
    if (empty()) throw std::logic_error("pop from an empty event queue");
    const Event& e = top();
    now_ = e.time;
    return e;
  }
  void drop_top() {
    if (top_is_lane()) {
      lanes_[best_lane_].pop();
      pick_best_lane();
    } else {
      remove_top();
    }
  }
  void reschedule_top(TimePs time, std::uint8_t kind, std::uint32_t target, std::uint32_t version = 0) {
    if (top_is_lane()) {
      drop_top();
      push(time, kind, target, version);
    } else {
      sift_down(0, make(time, kind, target, version));
    }
  }

 private:
  // 4-ary: half the depth of a binary heap, and the four children of a node are compared in two
  // independent pairs, so a pop waits on about half as many dependent loads and compares.
  static constexpr std::size_t kArity = 4;

  // A ring buffer (power-of-two capacity).
  struct Lane {
    std::vector<Event> buf;
    std::size_t first = 0;
    std::size_t count = 0;
    TimePs last_time = 0;
    const Event& head() const { return buf[first]; }
    void push(const Event& e) {
      if (count == buf.size()) grow();
      buf[(first + count) & (buf.size() - 1)] = e;
      ++count;
      last_time = e.time;
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

  // Bitwise, not short-circuit, so that the compiler can make the comparison branch-free: which
  // child is smaller is a coin flip the branch predictor cannot learn.
  static bool before(const Event& a, const Event& b) {
    return (a.time < b.time) | ((a.time == b.time) & (a.seq_kind < b.seq_kind));
  }

  bool top_is_lane() const {
    return best_lane_ >= 0 && (heap_.empty() || before(lanes_[best_lane_].head(), heap_.front()));
  }

  void pick_best_lane() {
    best_lane_ = -1;
    for (std::size_t i = 0; i < lanes_.size(); ++i)
      if (lanes_[i].count > 0 && (best_lane_ < 0 || before(lanes_[i].head(), lanes_[best_lane_].head())))
        best_lane_ = static_cast<int>(i);
  }

  Event make(TimePs time, std::uint8_t kind, std::uint32_t target, std::uint32_t version) {
    if (time < now_)
      throw std::logic_error("event scheduled at " + std::to_string(time) + " ps, before the current time " +
                             std::to_string(now_) + " ps");
    if (next_seq_ > Event::kMaxSeq) throw std::logic_error("event sequence numbers exhausted");
    Event e;
    e.time = time;
    e.seq_kind = (next_seq_++ << 8) | kind;
    e.target = target;
    e.version = version;
    return e;
  }

  void remove_top() {
    const Event last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0, last);
  }

  // "Hole" insertion: parents move down into the hole instead of being swapped, halving the writes.
  void sift_up(std::size_t hole, const Event& e) {
    while (hole > 0) {
      const std::size_t parent = (hole - 1) / kArity;
      if (!before(e, heap_[parent])) break;
      heap_[hole] = heap_[parent];
      hole = parent;
    }
    heap_[hole] = e;
  }

  // Places `e` at `hole` or below: the smallest child moves up while it is earlier than `e`.
  void sift_down(std::size_t hole, const Event& e) {
    const std::size_t n = heap_.size();
    Event* h = heap_.data();
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
      if (!before(h[best], e)) break;
      h[hole] = h[best];
      hole = best;
    }
    h[hole] = e;
  }

  std::vector<Event> heap_;
  std::vector<Lane> lanes_;
  int best_lane_ = -1;  // the lane with the earliest head; -1 when every lane is empty
  std::uint64_t next_seq_ = 0;
  TimePs now_ = 0;
};

}  // namespace fusesim::sim
