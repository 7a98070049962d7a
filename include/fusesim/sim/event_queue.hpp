#pragma once
// The simulator's event queue: a min-priority queue of small plain events keyed (time, sequence
// number): a radix heap on time, plus FIFO "lanes" for events scheduled in time order.
//
// Why this shape:
// - Events are 24-byte PODs (no std::function, no heap allocation per event): the engine is meant to
//   process > 10 million events per second on one core, and a type-erased callable per event would
//   cost an allocation and an indirect call each.
// - The sequence number is assigned at scheduling time, so events at equal times run in the order
//   they were scheduled (FIFO). Together with deterministic handlers this makes a run reproducible.
//   Keys are unique, so any exact priority queue pops the same sequence: the queue's structure and
//   the lanes are matters of speed only.
// - Time never goes back: scheduling before the time of the last popped event is a logic error.
// - A radix heap (Ahuja, Mehlhorn, Orlin and Tarjan 1990), because that contract is exactly what it
//   needs: every key pushed is at or after the last one popped. Bucket 0 holds the events at the
//   base time (the time of the last event taken out of the buckets), in sequence order; bucket i
//   holds those whose time first differs from the base in bit i-1, unordered. A push is an append to
//   the bucket its time names (a XOR and a count of leading zeros); a pop takes the front of bucket
//   0, and only when bucket 0 is empty scans the lowest non-empty bucket for its earliest time, makes
//   that the base and spreads that bucket over the lower ones (each event moves down a bucket at a
//   time, so at most 64 times in all, and far fewer where times cluster). The engine's queue holds a
//   few dozen events at a handful of distinct times (every flow of a ring step ends together), which
//   a comparison heap sifts through on every push and pop and this one does not.
//   Sequence order within bucket 0: every new event (push, move, reschedule) gets a sequence number
//   above all others, so appending keeps bucket 0 sorted; a bucket spread into an empty bucket 0 is
//   sorted there once (it arrives nearly sorted).
// - Moving an event is done in place, earlier or later: an event pushed with a non-zero `handle`
//   (the engine gives one per compute slot and per flow) has its (bucket, index) tracked, and move()
//   gives it its new time and a fresh sequence number, the key a push at that moment would give:
//   within its bucket it keeps its place, else it is taken out (the bucket's last event fills the
//   hole) and appended where its new time belongs; cancel() takes it out. So nothing stale is ever
//   queued, and equal times run in the order their events were last scheduled. (Until 2026-12-02 a
//   move later was lazy: the event came up at its old time and was rescheduled then, with the
//   sequence number of that moment, which ordered ties by when the stale event came up; those
//   reschedules were a fifth to a quarter of all pops on contended pipelines.)
// - Looking at the earliest event (top()) must not move the base: the engine looks, then may still
//   schedule events at the current time before that event runs. So each bucket above 0 remembers its
//   earliest event: a spread fills buckets that were empty and notes each one's earliest as it goes,
//   a push compares with it, and only taking out that very event (a move earlier to another bucket)
//   leaves it to a scan of the bucket, done when that bucket is the lowest and its earliest is asked
//   for. (One remembered earliest for the lowest bucket alone, as before, was found by a scan after
//   every spread: about one event read per event popped.)
#include <algorithm>
#include <iterator>
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
  std::uint32_t handle = 0;   // non-zero: the position of this event is tracked (move(), cancel())

  std::uint64_t seq() const { return seq_kind >> 8; }
  std::uint8_t kind() const { return static_cast<std::uint8_t>(seq_kind & 0xff); }

  static constexpr std::uint64_t kMaxSeq = (std::uint64_t{1} << 56) - 1;
};

class EventQueue {
 public:
  EventQueue() { std::fill(std::begin(min_index_), std::end(min_index_), kUnknown); }
  bool empty() const { return heap_empty() && best_lane_ < 0; }
  std::size_t size() const {
    std::size_t n = buckets_[0].size() - head0_;
    for (std::size_t b = 1; b < kBuckets; ++b) n += buckets_[b].size();
    for (const Lane& l : lanes_) n += l.count;
    return n;
  }
  // Time of the last popped event: nothing may be scheduled before it.
  TimePs now() const { return now_; }
  // The earliest event (the earliest scheduled among equal times). The queue must not be empty.
  const Event& top() const { return top_is_lane() ? lanes_[best_lane_].head() : heap_top(); }
  TimePs top_time() const { return top().time; }
  // Sequence numbers handed out so far: pushes, moves and reschedules.
  std::uint64_t scheduled() const { return next_seq_; }
  void reserve(std::size_t n) { buckets_[0].reserve(n); }

  // Whether the event pushed with `handle` (non-zero) is still in the heap.
  bool queued(std::uint32_t handle) const { return handle < pos_.size() && pos_[handle].bucket != kNotQueued; }
  // Gives the queued event of `handle` a new time, earlier or later, and a fresh sequence number (the
  // key a push now would give: among equal times it runs after everything scheduled before this
  // move) and puts it where that time belongs. Throws std::logic_error if it is not queued or is due
  // now (in bucket 0: at the base, which is never after now(), so due at now()).
  void move(std::uint32_t handle, TimePs time, std::uint8_t kind) {
    const Pos p = tracked(handle);
    const std::uint64_t seq_kind = next_seq_kind(time, kind);  // may refuse: before anything changes
    const std::size_t b = bucket_of(time);
    if (b != p.bucket) {
      const std::uint32_t target = buckets_[p.bucket][p.index].target;
      remove(p);
      insert(seq_kind, time, target, handle, false);
      return;
    }
    // Within its bucket it keeps its place; only the bucket's earliest may change.
    Event& e = buckets_[b][p.index];
    e.seq_kind = seq_kind;
    e.time = time;
    const Key k = key(time, seq_kind);
    std::uint32_t& earliest = min_index_[b];
    if (earliest == p.index) {
      if (k < min_key_[b]) min_key_[b] = k;
      else earliest = kUnknown;  // it moved later: another may come first now, found when needed
    } else if (earliest != kUnknown && k < min_key_[b]) {
      earliest = p.index;
      min_key_[b] = k;
    }
  }
  // Takes the queued event of `handle` out (the same errors as move()).
  void cancel(std::uint32_t handle) {
    remove(tracked(handle));
    pos_[handle].bucket = kNotQueued;
  }

  // A non-zero `handle` (at most one queued event per handle) makes the event's position tracked.
  void push(TimePs time, std::uint8_t kind, std::uint32_t target, std::uint32_t handle = 0) {
    if (handle >= pos_.size()) pos_.resize(std::size_t{handle} + 1, Pos{});
    insert(next_seq_kind(time, kind), time, target, handle, false);
  }

  // Lanes: FIFO side queues for events that are scheduled in time order, such as those a fixed
  // delay after the current time (a transfer's latency phase: route latency + step latency; a
  // collective's base latency; "now" itself). Since sequence numbers only grow, such a FIFO is
  // already sorted by (time, sequence), so these events skip the buckets: O(1) in and out. The pop
  // order is exactly that of a single queue.
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
  // reschedule_top() turns it into a new event (a fresh sequence number, as push() would give).
  const Event& take_top() {
    if (empty()) throw std::logic_error("pop from an empty event queue");
    top_lane_ = top_is_lane();
    if (top_lane_) {
      now_ = lanes_[best_lane_].head().time;
      return lanes_[best_lane_].head();
    }
    if (head0_ == buckets_[0].size()) spread();
    const Event& e = buckets_[0][head0_];
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
      std::vector<Event>& b0 = buckets_[0];
      pos_[b0[head0_].handle].bucket = kNotQueued;
      if (++head0_ == b0.size()) {
        b0.clear();
        head0_ = 0;
      }
    }
  }
  void reschedule_top(TimePs time, std::uint8_t kind, std::uint32_t target, std::uint32_t handle = 0) {
    drop_top();
    push(time, kind, target, handle);
  }

 private:
  static constexpr std::size_t kBuckets = 65;  // bucket 0, and one per bit of a 64-bit time
  static constexpr std::uint32_t kNotQueued = ~std::uint32_t{0};
  static constexpr std::uint32_t kUnknown = ~std::uint32_t{0};
  static constexpr std::size_t kKeptSpare = 4096;  // events

  struct Pos {
    std::uint32_t bucket = kNotQueued;
    std::uint32_t index = 0;
  };

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

  // One 128-bit comparison of (time, sequence) (times are never negative).
  __extension__ using Key = unsigned __int128;
  static Key key(TimePs time, std::uint64_t seq_kind) {
    return (static_cast<Key>(static_cast<std::uint64_t>(time)) << 64) | seq_kind;
  }
  static Key key(const Event& e) { return key(e.time, e.seq_kind); }
  static bool before(const Event& a, const Event& b) { return key(a) < key(b); }

  bool heap_empty() const { return head0_ == buckets_[0].size() && upper_ == 0; }
  // The bucket of a time at or after the base: 0 at the base, else 1 + the highest bit it differs in.
  std::size_t bucket_of(TimePs time) const {
    const auto diff = static_cast<std::uint64_t>(time) ^ static_cast<std::uint64_t>(base_);
    return diff == 0 ? 0 : 64 - static_cast<std::size_t>(__builtin_clzll(diff));
  }
  // The earliest event of the buckets: bucket 0's front, else the earliest of the lowest non-empty
  // bucket above it (every time in bucket i is below every time in bucket i + 1).
  const Event& heap_top() const {
    if (head0_ < buckets_[0].size()) return buckets_[0][head0_];
    const std::size_t b = lowest_bucket();
    return buckets_[b][min_index_[b]];
  }
  // The lowest non-empty bucket above 0, its earliest event known (found by a scan if it is not).
  std::size_t lowest_bucket() const {
    const auto b = static_cast<std::size_t>(__builtin_ctzll(upper_)) + 1;
    if (min_index_[b] == kUnknown) {
      const std::vector<Event>& v = buckets_[b];
      std::size_t best = 0;
      for (std::size_t i = 1; i < v.size(); ++i)
        if (before(v[i], v[best])) best = i;
      min_index_[b] = static_cast<std::uint32_t>(best);
      min_key_[b] = key(v[best]);
    }
    return b;
  }

  bool top_is_lane() const {
    return best_lane_ >= 0 && (heap_empty() || before(lanes_[best_lane_].head(), heap_top()));
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

  // Appends the event to the bucket of its time. The event comes in registers and is written once,
  // field by field: an Event built in memory and then copied would be stored as two words and
  // reloaded as one 16-byte word, a store-forwarding stall on every push. `earliest`: the caller
  // knows the event is the earliest of its bucket (the earliest one, moved earlier within its bucket).
  void insert(std::uint64_t seq_kind, TimePs time, std::uint32_t target, std::uint32_t handle, bool earliest) {
    const std::size_t b = bucket_of(time);
    std::vector<Event>& v = buckets_[b];
    const auto index = static_cast<std::uint32_t>(v.size());
    Event& e = v.emplace_back();
    e.seq_kind = seq_kind;
    e.time = time;
    e.target = target;
    e.handle = handle;
    pos_[handle] = Pos{static_cast<std::uint32_t>(b), index};
    if (b == 0) return;
    upper_ |= std::uint64_t{1} << (b - 1);
    // Its sequence number is the newest, so it is its bucket's earliest only if its time is strictly
    // below the earliest one's (which stays unknown if it was).
    const Key k = key(time, seq_kind);
    if (index == 0 || earliest || (min_index_[b] != kUnknown && k < min_key_[b])) {
      min_index_[b] = index;
      min_key_[b] = k;
    }
  }

  Pos tracked(std::uint32_t handle) const {
    if (handle == 0 || !queued(handle)) throw std::logic_error("no queued event has this handle");
    if (pos_[handle].bucket == 0) throw std::logic_error("an event due now cannot move");
    return pos_[handle];
  }

  // Takes the event at `p` (above bucket 0) out: the bucket's last event fills the hole.
  void remove(Pos p) {
    std::vector<Event>& v = buckets_[p.bucket];
    const auto last = static_cast<std::uint32_t>(v.size() - 1);
    if (p.index != last) {
      Event& hole = v[p.index];
      const Event& moved = v[last];
      hole.seq_kind = moved.seq_kind;
      hole.time = moved.time;
      hole.target = moved.target;
      hole.handle = moved.handle;
      pos_[hole.handle].index = p.index;
    }
    std::uint32_t& earliest = min_index_[p.bucket];
    if (earliest == p.index) earliest = kUnknown;  // the next earliest is found when it is needed
    else if (earliest == last) earliest = p.index;
    v.pop_back();
    if (v.empty()) upper_ &= ~(std::uint64_t{1} << (p.bucket - 1));
  }

  // Bucket 0 is empty: the earliest event above it sets the new base, and its bucket is spread over
  // the buckets below (relative to the new base every one of its events lands lower; the buckets
  // above it keep their events where they are, since the base moved only in bits they do not differ
  // in). The events at the new base land in bucket 0 and are put in sequence order.
  void spread() {
    const std::size_t b = lowest_bucket();
    base_ = buckets_[b][min_index_[b]].time;
    min_index_[b] = kUnknown;
    std::vector<Event>& b0 = buckets_[0];
    head0_ = 0;
    b0.clear();
    if (buckets_[b].size() == 1) {  // the common case where times are spread out: no spreading to do
      const Event& e = buckets_[b].front();
      pos_[e.handle] = Pos{0, 0};
      b0.push_back(e);
      buckets_[b].clear();
      upper_ &= ~(std::uint64_t{1} << (b - 1));
      return;
    }
    spare_.swap(buckets_[b]);
    upper_ &= ~(std::uint64_t{1} << (b - 1));
    // The buckets below b were empty: each one's earliest is known once the spread is done.
    for (const Event& e : spare_) {
      const std::size_t to = bucket_of(e.time);
      std::vector<Event>& v = buckets_[to];
      const auto index = static_cast<std::uint32_t>(v.size());
      pos_[e.handle] = Pos{static_cast<std::uint32_t>(to), index};
      v.push_back(e);
      if (to != 0) {
        upper_ |= std::uint64_t{1} << (to - 1);
        const Key k = key(e);
        if (index == 0 || k < min_key_[to]) {
          min_index_[to] = index;
          min_key_[to] = k;
        }
      }
    }
    // A spread bucket can be most of the queue; its buffer is released rather than kept beside the
    // buckets it filled (a million pending events would otherwise hold several times their size).
    if (spare_.capacity() > kKeptSpare) std::vector<Event>().swap(spare_);
    else spare_.clear();
    bool sorted = true;
    for (std::size_t i = 1; i < b0.size() && sorted; ++i) sorted = b0[i - 1].seq_kind < b0[i].seq_kind;
    if (!sorted) {
      std::sort(b0.begin(), b0.end(), [](const Event& x, const Event& y) { return x.seq_kind < y.seq_kind; });
      for (std::size_t i = 0; i < b0.size(); ++i) pos_[b0[i].handle].index = static_cast<std::uint32_t>(i);
    }
  }

  std::vector<Event> buckets_[kBuckets];
  std::size_t head0_ = 0;             // bucket 0's events before this one have been popped
  std::uint64_t upper_ = 0;           // bit i: bucket i + 1 holds events
  TimePs base_ = 0;                   // every event in the buckets is at or after it
  std::vector<Event> spare_;          // the bucket being spread
  // Per bucket above 0, the index and key of its earliest event, or kUnknown: found by a scan when
  // the bucket is the lowest and its earliest is asked for, kept up to date by pushes and spreads.
  mutable std::uint32_t min_index_[kBuckets];  // all kUnknown at construction
  mutable Key min_key_[kBuckets] = {};
  std::vector<Pos> pos_ = std::vector<Pos>(1);  // by handle (0: untracked events share this entry)
  std::vector<Lane> lanes_;
  std::uint64_t nonempty_lanes_ = 0;  // bit i: lane i (< 64) holds events
  int best_lane_ = -1;     // the lane with the earliest head; -1 when every lane is empty
  bool top_lane_ = false;  // whether the event take_top() returned came from a lane
  std::uint64_t next_seq_ = 0;
  TimePs now_ = 0;
};

}  // namespace fusesim::sim
