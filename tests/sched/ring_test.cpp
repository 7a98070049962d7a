// The ring order of sched/ring.hpp, which Fuse-AG, Fuse-RS, the DP fused gradient, DDP's all-gather
// half and the DP collectives lowered to P2P all follow.
#include <catch2/catch.hpp>

#include <set>
#include <tuple>
#include <vector>

#include "fusesim/sched/ring.hpp"

using fusesim::sched::Ring;
using fusesim::sched::ring_mod;

TEST_CASE("ring arithmetic wraps both ways", "[sched][ring]") {
  CHECK(ring_mod(-1, 4) == 3);
  CHECK(ring_mod(-9, 4) == 3);
  CHECK(ring_mod(9, 4) == 1);
  const Ring ring{4};
  CHECK(ring.next(3) == 0);
  CHECK(ring.prev(0) == 3);
  CHECK(ring.next(1) == 2);
}

TEST_CASE("the ring's chunk tables for four members, by hand", "[sched][ring]") {
  // Gather: member r holds (r - s) mod 4 at step s. Reduce: member r reduces (r - 1 - s) mod 4.
  //   step:        0  1  2  3            0  1  2  3
  //   member 0:    0  3  2  1            3  2  1  0
  //   member 1:    1  0  3  2            0  3  2  1
  //   member 2:    2  1  0  3            1  0  3  2
  const Ring ring{4};
  const int gather[3][4] = {{0, 3, 2, 1}, {1, 0, 3, 2}, {2, 1, 0, 3}};
  const int reduce[3][4] = {{3, 2, 1, 0}, {0, 3, 2, 1}, {1, 0, 3, 2}};
  for (int r = 0; r < 3; ++r)
    for (int s = 0; s < 4; ++s) {
      CAPTURE(r, s);
      CHECK(ring.gather_chunk(r, s) == gather[r][s]);
      CHECK(ring.reduce_chunk(r, s) == reduce[r][s]);
    }
  // Tags: base + step x 4 + sender. Member 2's message at step 1 is 100 + 4 + 2 = 106.
  CHECK(ring.tags_per_exchange() == 16);
  CHECK(ring.tag(100, 1, 2) == 106);
}

TEST_CASE("each member receives what its predecessor sends, and the exchanges complete", "[sched][ring]") {
  for (int t : {1, 2, 3, 4, 7, 8}) {
    CAPTURE(t);
    const Ring ring{t};
    std::set<std::int64_t> tags;
    for (int r = 0; r < t; ++r) {
      std::set<int> gathered{ring.gather_chunk(r, 0)}, reduced;
      CHECK(ring.gather_chunk(r, 0) == r);  // an all-gather starts from the own chunk
      for (int s = 0; s + 1 < t; ++s) {
        // What r receives at step s is what its predecessor holds and sends at step s.
        CHECK(ring.gather_recv_chunk(r, s) == ring.gather_chunk(ring.prev(r), s));
        gathered.insert(ring.gather_recv_chunk(r, s));
        // The running sum r reduces at step s + 1 is the one its predecessor passed on at step s.
        CHECK(ring.reduce_chunk(r, s + 1) == ring.reduce_chunk(ring.prev(r), s));
        tags.insert(ring.tag(0, s, r));
      }
      for (int s = 0; s < t; ++s) reduced.insert(ring.reduce_chunk(r, s));
      CHECK(ring.reduce_chunk(r, t - 1) == r);  // a reduce-scatter ends with the own chunk
      CHECK(static_cast<int>(gathered.size()) == t);
      CHECK(static_cast<int>(reduced.size()) == t);
    }
    // Every message of an exchange has its own tag inside the exchange's block.
    CHECK(static_cast<int>(tags.size()) == t * (t - 1));
    for (std::int64_t tag : tags) CHECK((tag >= 0 && tag < ring.tags_per_exchange()));
  }
}

TEST_CASE("the fault hook's swap trades two members and leaves the rest", "[sched][ring]") {
  // Four members, step 3, shift 2: members 3 and (3 + 2) mod 4 = 1 trade places; 0 and 2 keep theirs.
  // A negative step wraps like a member: step -1 is member 3.
  const Ring r{4};
  CHECK(r.swapped(3, 3, 2) == 1);
  CHECK(r.swapped(1, 3, 2) == 3);
  CHECK(r.swapped(0, 3, 2) == 0);
  CHECK(r.swapped(2, 3, 2) == 2);
  CHECK(r.swapped(3, -1, 2) == 1);
  // Applied to every member it is a permutation, and applying it twice restores the order.
  for (int shift = 0; shift < 4; ++shift)
    for (int step = 0; step < 4; ++step) {
      std::vector<int> seen(4, 0);
      for (int m = 0; m < 4; ++m) {
        ++seen[static_cast<std::size_t>(r.swapped(m, step, shift))];
        CHECK(r.swapped(r.swapped(m, step, shift), step, shift) == m);
      }
      for (int c : seen) CHECK(c == 1);
    }
}

namespace {

// What ring exchange drivers emit on a member, recorded in order: the ports hand out ids 0, 1, 2, ...
struct Event {
  char what;  // 'c' compute, 's' send, 'r' recv, 'a' add
  int member, step, chunk;
  std::int64_t tag;  // sends and receives: the message's tag
  std::vector<fusesim::sched::TaskId> deps;
};

struct Recorder {
  std::vector<Event> events;
  fusesim::sched::RingPorts ports(int member) {
    using fusesim::sched::RingMessage;
    using fusesim::sched::TaskId;
    fusesim::sched::RingPorts p;
    p.send = [this, member](const RingMessage& m, const std::vector<TaskId>& deps) {
      return push({'s', member, m.step, m.chunk, m.tag(), deps});
    };
    p.recv = [this, member](const RingMessage& m, const std::vector<TaskId>& deps) {
      return push({'r', member, m.step, m.chunk, m.tag(), deps});
    };
    p.add = [this, member](const RingMessage& m, TaskId partial, TaskId received, bool) {
      return push({'a', member, m.step, m.chunk, -1, {partial, received}});
    };
    return p;
  }
  fusesim::sched::TaskId push(Event e) {
    events.push_back(std::move(e));
    return static_cast<fusesim::sched::TaskId>(events.size() - 1);
  }
};

// Every Send of member s carrying chunk c and tag T has exactly one Recv of member s + 1 with the
// same chunk and tag, and no Recv is left without its Send.
void check_pairs(const std::vector<Event>& events, const Ring& ring) {
  std::multiset<std::tuple<int, int, std::int64_t>> sent, received;  // (receiver, chunk, tag)
  for (const Event& e : events) {
    if (e.what == 's') sent.emplace(ring.next(e.member), e.chunk, e.tag);
    if (e.what == 'r') received.emplace(e.member, e.chunk, e.tag);
  }
  CHECK(sent == received);
  CHECK(std::set<std::tuple<int, int, std::int64_t>>(sent.begin(), sent.end()).size() == sent.size());
}

}  // namespace

TEST_CASE("Fuse-RS on one member of three, task by task", "[sched][ring]") {
  // Member 1 of 3, tags at 100 (tag(base, step, sender) = base + 3 step + sender). Reduce order:
  // chunk (1 - 1 - s) mod 3 = 0, 2, 1. Step 0: compute c0 (id 0), send it (tag 100 + 0 + 1 = 101,
  // after 0). Step 1: compute c2 (2), receive c2 from member 0 as sent at its step 0 (tag 100, id 3),
  // add (4, after 2 and 3), send the sum (tag 100 + 3 + 1 = 104, after 4). Step 2: compute c1 (6),
  // receive c1 (tag 100 + 3 + 0 = 103, id 7), add (8): the result.
  using namespace fusesim::sched;
  Recorder rec;
  const Ring ring{3};
  const TaskId result = ring_reduce_scatter(
      ring, 1, 100, [&](int step, int chunk) { return rec.push({'c', 1, step, chunk, -1, {}}); }, rec.ports(1));
  const std::vector<std::tuple<char, int, int, std::int64_t>> want = {
      {'c', 0, 0, -1}, {'s', 0, 0, 101}, {'c', 1, 2, -1}, {'r', 1, 2, 100}, {'a', 1, 2, -1},
      {'s', 1, 2, 104}, {'c', 2, 1, -1}, {'r', 2, 1, 103}, {'a', 2, 1, -1}};
  REQUIRE(rec.events.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    const Event& e = rec.events[i];
    CHECK(std::tuple<char, int, int, std::int64_t>{e.what, e.step, e.chunk, e.tag} == want[i]);
  }
  CHECK(rec.events[1].deps == std::vector<TaskId>{0});
  CHECK(rec.events[4].deps == std::vector<TaskId>{2, 3});
  CHECK(rec.events[5].deps == std::vector<TaskId>{4});
  CHECK(rec.events[7].deps.empty());  // a receive is posted at once
  CHECK(result == 8);
}

TEST_CASE("ring exchanges pair every Send with one Recv and end where the orders say", "[sched][ring]") {
  using namespace fusesim::sched;
  for (int t : {1, 2, 3, 4, 8}) {
    CAPTURE(t);
    const Ring ring{t};
    Recorder rs, ag, ar;
    for (int r = 0; r < t; ++r) {
      // Fuse-RS: t computes, one per chunk; the result is the add of the own chunk (the compute when t = 1).
      std::set<int> computed;
      const TaskId end = ring_reduce_scatter(
          ring, r, 0, [&](int step, int chunk) { computed.insert(chunk); return rs.push({'c', r, step, chunk, -1, {}}); },
          rs.ports(r));
      CHECK(static_cast<int>(computed.size()) == t);
      CHECK(rs.events[end].chunk == r);
      CHECK(rs.events[end].what == (t == 1 ? 'c' : 'a'));
      // Fuse-AG: step s computes the chunk held, which arrived with the previous step's Recv.
      std::vector<int> held;
      const std::vector<TaskId> ready{ag.push({'c', r, -1, r, -1, {}})};
      std::vector<TaskId> last_have;
      const std::vector<TaskId> after = ring_all_gather(
          ring, r, 0, ready,
          [&](int step, int chunk, const std::vector<TaskId>& have) {
            held.push_back(chunk);
            if (step == 0) CHECK(have == ready);
            else CHECK((have.size() == 1 && ag.events[have[0]].what == 'r' && ag.events[have[0]].chunk == chunk));
            last_have = have;
          },
          ag.ports(r));
      CHECK(after == last_have);
      CHECK(static_cast<int>(std::set<int>(held.begin(), held.end()).size()) == t);
      // An all-reduce lowered to 2 (t - 1) steps: each step's Send waits for the previous Recv, and
      // what a step sends is what the one before received.
      const std::size_t first = ar.events.size();
      const TaskId done = ring_collective(ring, r, true, true, 0, {}, ar.ports(r));
      std::vector<Event> mine(ar.events.begin() + static_cast<std::ptrdiff_t>(first), ar.events.end());
      CHECK(static_cast<int>(mine.size()) == 4 * (t - 1));
      for (std::size_t i = 2; i < mine.size(); i += 2) {
        CHECK(mine[i].deps == std::vector<TaskId>{static_cast<TaskId>(first + i - 1)});
        CHECK(mine[i].chunk == mine[i - 1].chunk);
      }
      if (t > 1) CHECK(done == ar.events.size() - 1);
    }
    check_pairs(rs.events, ring);
    check_pairs(ag.events, ring);
    check_pairs(ar.events, ring);
  }
}
