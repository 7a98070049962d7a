// The ring order of sched/ring.hpp, which Fuse-AG, Fuse-RS, the DP fused gradient, DDP's all-gather
// half and the DP collectives lowered to P2P all follow.
#include <catch2/catch.hpp>

#include <set>
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
