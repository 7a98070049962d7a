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
//   binary heap would need a position index kept up to date on every swap, which costs more than the
//   few stale pops.
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
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  // Time of the last popped event: nothing may be scheduled before it.
  TimePs now() const { return now_; }
  const Event& top() const { return heap_.front(); }
  // Events scheduled so far, stale ones included.
  std::uint64_t scheduled() const { return next_seq_; }
  void reserve(std::size_t n) { heap_.reserve(n); }

  void push(TimePs time, std::uint8_t kind, std::uint32_t target, std::uint32_t version = 0) {
    if (time < now_)
      throw std::logic_error("event scheduled at " + std::to_string(time) + " ps, before the current time " +
                             std::to_string(now_) + " ps");
    if (next_seq_ > Event::kMaxSeq) throw std::logic_error("event sequence numbers exhausted");
    Event e;
    e.time = time;
    e.seq_kind = (next_seq_++ << 8) | kind;
    e.target = target;
    e.version = version;
    sift_up(e);
  }

  // Removes and returns the earliest event (the earliest scheduled among equal times).
  Event pop() {
    if (heap_.empty()) throw std::logic_error("pop from an empty event queue");
    Event top = heap_.front();
    Event last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(last);
    now_ = top.time;
    return top;
  }

 private:
  // Bitwise, not short-circuit, so that the compiler can make the comparison branch-free: which
  // child is smaller is a coin flip the branch predictor cannot learn.
  static bool before(const Event& a, const Event& b) {
    return (a.time < b.time) | ((a.time == b.time) & (a.seq_kind < b.seq_kind));
  }

  // "Hole" insertion: parents move down into the hole instead of being swapped, halving the writes.
  void sift_up(const Event& e) {
    std::size_t hole = heap_.size();
    heap_.push_back(e);
    while (hole > 0) {
      const std::size_t parent = (hole - 1) / 2;
      if (!before(e, heap_[parent])) break;
      heap_[hole] = heap_[parent];
      hole = parent;
    }
    heap_[hole] = e;
  }

  // Places `e` (the former last element) after the root was taken. Bottom-up variant: the hole
  // first walks down to a leaf along the smaller children (one comparison per level), then `e`
  // rises from there. `e` came from the bottom, so it seldom rises far: about half the comparisons
  // of the textbook sift-down, which compares `e` against the smaller child at every level.
  void sift_down(const Event& e) {
    const std::size_t n = heap_.size();
    std::size_t hole = 0;
    std::size_t child = 1;
    while (child < n) {
      if (child + 1 < n) child += before(heap_[child + 1], heap_[child]) ? 1 : 0;
      heap_[hole] = heap_[child];
      hole = child;
      child = 2 * hole + 1;
    }
    while (hole > 0) {
      const std::size_t parent = (hole - 1) / 2;
      if (!before(e, heap_[parent])) break;
      heap_[hole] = heap_[parent];
      hole = parent;
    }
    heap_[hole] = e;
  }

  std::vector<Event> heap_;
  std::uint64_t next_seq_ = 0;
  TimePs now_ = 0;
};

}  // namespace fusesim::sim
