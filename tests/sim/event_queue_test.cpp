#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

#include "fusesim/sim/event_queue.hpp"
#include "fusesim/sim/flow_network.hpp"

using fusesim::TimePs;
using fusesim::sim::Event;
using fusesim::sim::EventQueue;

TEST_CASE("event queue: events come out in time order", "[sim][queue]") {
  EventQueue q;
  // Scheduled out of order; targets name the time so the pop order can be checked against it.
  for (TimePs t : {50, 10, 40, 20, 30, 0}) q.push(t, 1, static_cast<std::uint32_t>(t));
  std::vector<TimePs> popped;
  while (!q.empty()) {
    const Event e = q.pop();
    REQUIRE(e.target == static_cast<std::uint32_t>(e.time));
    REQUIRE(e.kind() == 1);
    popped.push_back(e.time);
  }
  REQUIRE(popped == std::vector<TimePs>{0, 10, 20, 30, 40, 50});
}

TEST_CASE("event queue: equal times run in scheduling order (FIFO)", "[sim][queue]") {
  EventQueue q;
  // Interleave two times; within each time, targets were pushed 0,1,2,... and must come back so.
  for (std::uint32_t i = 0; i < 100; ++i) q.push(i % 2 == 0 ? 7 : 3, static_cast<std::uint8_t>(i % 5), i);
  std::vector<std::uint32_t> at3, at7;
  while (!q.empty()) {
    const Event e = q.pop();
    REQUIRE(e.kind() == e.target % 5);  // the kind packed beside the sequence number survives
    (e.time == 3 ? at3 : at7).push_back(e.target);
  }
  REQUIRE(at3.size() == 50);
  REQUIRE(at7.size() == 50);
  for (std::size_t i = 0; i < 50; ++i) {
    REQUIRE(at3[i] == 2 * i + 1);
    REQUIRE(at7[i] == 2 * i);
  }
}

TEST_CASE("event queue: matches a stable sort of (time, insertion order) on random input", "[sim][queue]") {
  std::mt19937_64 rng(12345);
  std::uniform_int_distribution<TimePs> dt(0, 20);  // small range: many equal times
  EventQueue q;
  std::vector<std::pair<TimePs, std::uint32_t>> reference;
  std::vector<std::pair<TimePs, std::uint32_t>> got;
  std::uint32_t next = 0;
  // Interleave pushes and pops, pushing only at or after the current time, as the engine does.
  for (int round = 0; round < 2000; ++round) {
    const int pushes = static_cast<int>(rng() % 4);
    for (int i = 0; i < pushes; ++i) {
      const TimePs t = q.now() + dt(rng);
      q.push(t, 0, next);
      reference.emplace_back(t, next);
      ++next;
    }
    if (!q.empty() && rng() % 2 == 0) {
      const Event e = q.pop();
      got.emplace_back(e.time, e.target);
    }
  }
  while (!q.empty()) {
    const Event e = q.pop();
    got.emplace_back(e.time, e.target);
  }
  // Reference: since nothing is pushed before the last pop, the pop order is the global order by
  // (time, insertion index).
  std::stable_sort(reference.begin(), reference.end(), [](auto& a, auto& b) { return a.first < b.first; });
  REQUIRE(got == reference);
}

// move() and cancel() must pop exactly what the lazy scheme they replace popped: "push a new event
// with a fresh sequence number (none, for a cancel) and drop the old one, as stale, when it comes
// up". The reference below is that scheme, in a plain sorted list keyed (time, sequence); both see the
// same random operations (tracked pushes, moves earlier and later, cancels, moves later by rescheduling
// at the top, untracked pushes, pops), with few distinct times so that ties are common; and again with
// times spread over 40 bits, so that events sit in many buckets of the radix heap and each pop above
// bucket 0 spreads a bucket.
TEST_CASE("event queue: move and cancel pop what push-and-drop-stale pops", "[sim][queue]") {
  const TimePs spread = GENERATE(TimePs{6}, TimePs{1} << 40);
  std::mt19937_64 rng(777);
  EventQueue q;
  struct Ref {
    TimePs time;
    std::uint64_t seq;
    std::uint32_t target;
    std::uint32_t version;  // of the target when pushed; 0: untracked
  };
  std::vector<Ref> ref;  // live and stale events of the reference
  std::uint64_t ref_seq = 0;
  constexpr std::uint32_t kTargets = 12;
  std::vector<std::uint32_t> version(kTargets, 0);
  std::vector<TimePs> queued_at(kTargets, -1);  // -1: the target has no event queued
  std::vector<std::pair<TimePs, std::uint32_t>> got, want;
  auto earlier = [](const Ref& a, const Ref& b) { return a.time != b.time ? a.time < b.time : a.seq < b.seq; };
  auto live = [&](const Ref& r) { return r.version == 0 || r.version == version[r.target]; };
  auto ref_pop = [&] {  // the earliest live reference event, stale ones dropped on the way
    for (;;) {
      auto it = std::min_element(ref.begin(), ref.end(), earlier);
      const Ref r = *it;
      ref.erase(it);
      if (live(r)) return r;
    }
  };
  for (int round = 0; round < 4000; ++round) {
    const std::uint32_t x = static_cast<std::uint32_t>(rng() % kTargets);
    // Half the events near the present (ties), half anywhere in the spread.
    const TimePs t = q.now() + static_cast<TimePs>(rng() % (rng() % 2 == 0 ? 6 : static_cast<std::uint64_t>(spread)));
    switch (rng() % 5) {
      case 4: {  // a look at the top, which the queue may remember while events move under it
        if (q.empty()) break;
        const Ref* first = nullptr;
        for (const Ref& r : ref)
          if (live(r) && (first == nullptr || earlier(r, *first))) first = &r;
        REQUIRE(first != nullptr);
        REQUIRE(q.top().time == first->time);
        REQUIRE(q.top().target == first->target);
        break;
      }
      case 0:  // an untracked event (target outside the tracked ones)
        q.push(t, 2, kTargets + x);
        ref.push_back({t, ref_seq++, kTargets + x, 0});
        break;
      case 1:  // the target's end: pushed if none is queued, else moved (earlier or later) or cancelled
        if (queued_at[x] < 0) {
          q.push(t, 1, x, x + 1);
          ref.push_back({t, ref_seq++, x, ++version[x]});
          queued_at[x] = t;
        } else if (queued_at[x] > q.now()) {  // one due now may sit in bucket 0, which does not move
          REQUIRE(q.queued(x + 1));
          if (rng() % 4 == 0) {
            q.cancel(x + 1);
            ++version[x];
            queued_at[x] = -1;
            REQUIRE_FALSE(q.queued(x + 1));
          } else {
            q.move(x + 1, t, 1);
            ref.push_back({t, ref_seq++, x, ++version[x]});
            queued_at[x] = t;
          }
        }
        break;
      default: {  // pop (cases 2 and 3); a tracked event is sometimes moved later in place instead
        if (q.empty()) break;
        const Event& top = q.take_top();
        const std::uint32_t target = top.target, handle = top.handle;
        const TimePs time = top.time;
        const Ref r = ref_pop();
        REQUIRE(r.time == time);
        REQUIRE(r.target == target);
        if (handle != 0 && rng() % 3 == 0) {
          const TimePs later = time + 1 + static_cast<TimePs>(rng() % static_cast<std::uint64_t>(spread));
          q.reschedule_top(later, 1, target, handle);
          ref.push_back({later, ref_seq++, target, ++version[target]});
          queued_at[target] = later;
        } else {
          q.drop_top();
          got.emplace_back(time, target);
          want.emplace_back(r.time, r.target);
          if (handle != 0) {
            REQUIRE_FALSE(q.queued(handle));
            queued_at[target] = -1;
          }
        }
      }
    }
  }
  REQUIRE(got.size() > 1000);
  REQUIRE(got == want);
  REQUIRE(q.scheduled() == ref_seq);  // the same sequence numbers were handed out
  q.push(q.now() + 10, 1, 0, 100);
  REQUIRE_THROWS_AS(q.move(100, q.now() - 1, 1), std::logic_error);  // into the past
  REQUIRE_THROWS_AS(q.move(101, q.now() + 1, 1), std::logic_error);  // nothing queued
  REQUIRE_THROWS_AS(q.cancel(101), std::logic_error);
  REQUIRE_THROWS_AS(q.move(0, q.now() + 1, 1), std::logic_error);    // untracked
  REQUIRE(q.scheduled() == ref_seq + 1);                              // a refused move hands out nothing
  // An event due now (bucket 0: at the base, which a pop from the buckets has just set) stays put.
  while (!q.empty()) q.pop();
  q.push(q.now() + 10, 1, 0, 100);
  q.pop();
  q.push(q.now(), 1, 0, 100);
  REQUIRE_THROWS_AS(q.move(100, q.now() + 5, 1), std::logic_error);
  REQUIRE_THROWS_AS(q.cancel(100), std::logic_error);
  REQUIRE(q.pop().time == q.now());
}

// The engine looks at the earliest event (top()) and may then still schedule events at the current
// time, which must run first; it also mixes the lanes (fixed delays after now) with the buckets. The
// reference is the global order by (time, scheduling order) of everything scheduled.
TEST_CASE("event queue: looking at the top, then scheduling at the present, with lanes, keeps the order",
          "[sim][queue]") {
  std::mt19937_64 rng(4242);
  EventQueue q;
  const std::uint32_t lanes[2] = {q.add_lane(), q.add_lane()};
  const TimePs lane_delay[2] = {0, 1'000};
  struct Ref {
    TimePs time;
    std::uint64_t seq;
    std::uint32_t target;
  };
  std::vector<Ref> ref;
  std::uint64_t seq = 0;
  std::vector<std::uint32_t> got, want;
  std::uint32_t next = 0;
  for (int round = 0; round < 20000; ++round) {
    switch (rng() % 5) {
      case 0: {  // anywhere ahead, from the present to 2^40 ps on
        const TimePs t = q.now() + static_cast<TimePs>(rng() % (std::uint64_t{1} << (rng() % 41)));
        q.push(t, 0, next);
        ref.push_back({t, seq++, next++});
        break;
      }
      case 1: {  // a lane: a fixed delay after now, so in time order
        const int l = static_cast<int>(rng() % 2);
        q.push_lane(lanes[l], q.now() + lane_delay[l], 0, next);
        ref.push_back({q.now() + lane_delay[l], seq++, next++});
        break;
      }
      case 2:  // look, then schedule at the present: it must come before what was looked at
        if (!q.empty() && q.top_time() > q.now()) {
          q.push(q.now(), 0, next);
          ref.push_back({q.now(), seq++, next++});
        }
        break;
      default: {
        if (q.empty()) break;
        const Event e = q.pop();
        got.push_back(e.target);
      }
    }
  }
  while (!q.empty()) got.push_back(q.pop().target);
  std::sort(ref.begin(), ref.end(), [](const Ref& a, const Ref& b) { return a.time != b.time ? a.time < b.time : a.seq < b.seq; });
  for (const Ref& r : ref) want.push_back(r.target);
  REQUIRE(got.size() > 5000);
  REQUIRE(got == want);
  REQUIRE(q.size() == 0);
}

TEST_CASE("event queue: scheduling into the past is refused", "[sim][queue]") {
  EventQueue q;
  q.push(100, 0, 0);
  q.pop();
  REQUIRE(q.now() == 100);
  REQUIRE_THROWS_AS(q.push(99, 0, 1), std::logic_error);
  REQUIRE_NOTHROW(q.push(100, 0, 2));  // the present is allowed
  REQUIRE(q.pop().target == 2);
  REQUIRE_THROWS_AS(q.pop(), std::logic_error);  // empty
}

TEST_CASE("event queue: events are small plain values", "[sim][queue]") {
  STATIC_REQUIRE(std::is_trivially_copyable_v<Event>);
  STATIC_REQUIRE(sizeof(Event) == 24);
}

TEST_CASE("ceil_ps rounds up but forgives floating-point noise", "[sim][queue]") {
  using fusesim::sim::ceil_ps;
  REQUIRE(ceil_ps(0.0) == 0);
  REQUIRE(ceil_ps(-3.0) == 0);
  REQUIRE(ceil_ps(10.0) == 10);
  REQUIRE(ceil_ps(10.25) == 11);
  REQUIRE(ceil_ps(13333333.333333334) == 13333334);
  // 800000 / 0.8 is 1000000 in exact arithmetic; the double division may land a hair above.
  REQUIRE(ceil_ps(800000.0 / 0.8) == 1000000);
  REQUIRE(ceil_ps(1000000.0000000002) == 1000000);
  REQUIRE(ceil_ps(1e30) == fusesim::kTimeNever);
}
