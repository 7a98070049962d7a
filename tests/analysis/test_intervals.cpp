#include <algorithm>
#include <cstddef>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "fusesim/analysis/intervals.hpp"

using fusesim::TimePs;
using fusesim::analysis::Interval;
using fusesim::analysis::IntervalSet;

TEST_CASE("interval union of overlapping nested disjoint and touching intervals", "[intervals]") {
  // [0,10) + [5,15): overlap merges into [0,15), length 15 (not 10 + 10).
  IntervalSet overlapping({{0, 10}, {5, 15}});
  CHECK(overlapping.intervals() == std::vector<Interval>{{0, 15}});
  CHECK(overlapping.measure_ps() == 15);

  // [0,20) contains [5,10): the union is the outer interval.
  IntervalSet nested({{5, 10}, {0, 20}});
  CHECK(nested.intervals() == std::vector<Interval>{{0, 20}});
  CHECK(nested.measure_ps() == 20);

  // Disjoint pieces stay apart, sorted: 5 + 5 = 10.
  IntervalSet disjoint({{10, 15}, {0, 5}});
  CHECK(disjoint.intervals() == std::vector<Interval>{{0, 5}, {10, 15}});
  CHECK(disjoint.measure_ps() == 10);

  // Touching [0,5) and [5,8) is one interval [0,8) once normalized.
  IntervalSet touching({{5, 8}, {0, 5}});
  CHECK(touching.intervals() == std::vector<Interval>{{0, 8}});

  // Empty and reversed intervals carry no time.
  IntervalSet empties({{3, 3}, {9, 4}});
  CHECK(empties.empty());
  CHECK(empties.measure_ps() == 0);
}

TEST_CASE("interval intersection and difference derived by hand", "[intervals]") {
  // A = [0,10) u [20,30), B = [5,25).
  // A n B = [5,10) u [20,25)  -> 5 + 5 = 10
  // A \ B = [0,5) u [25,30)   -> 5 + 5 = 10
  // B \ A = [10,20)           -> 10
  IntervalSet a({{0, 10}, {20, 30}});
  IntervalSet b({{5, 25}});
  CHECK(a.intersect(b).intervals() == std::vector<Interval>{{5, 10}, {20, 25}});
  CHECK(a.subtract(b).intervals() == std::vector<Interval>{{0, 5}, {25, 30}});
  CHECK(b.subtract(a).intervals() == std::vector<Interval>{{10, 20}});
  CHECK(a.unite(b).intervals() == std::vector<Interval>{{0, 30}});

  // One removed piece spanning two kept intervals: [0,10) u [20,30) minus [8,22) = [0,8) u [22,30).
  CHECK(a.subtract(IntervalSet({{8, 22}})).intervals() == std::vector<Interval>{{0, 8}, {22, 30}});
  // Several removed pieces inside one kept interval: [0,30) minus [2,4) u [6,8) = [0,2) u [4,6) u [8,30).
  CHECK(IntervalSet({{0, 30}}).subtract(IntervalSet({{2, 4}, {6, 8}})).intervals() ==
        std::vector<Interval>{{0, 2}, {4, 6}, {8, 30}});
  // Nested: [0,20) n [5,10) = [5,10); [5,10) \ [0,20) = empty.
  CHECK(IntervalSet({{0, 20}}).intersect(IntervalSet({{5, 10}})).measure_ps() == 5);
  CHECK(IntervalSet({{5, 10}}).subtract(IntervalSet({{0, 20}})).empty());
  // Clip to a window: [0,10) u [20,30) within [5,22) = [5,10) u [20,22).
  CHECK(a.clip(5, 22).intervals() == std::vector<Interval>{{5, 10}, {20, 22}});
  CHECK(a.measure_within_ps(5, 22) == 7);   // 5 + 2
  CHECK(a.measure_within_ps(10, 20) == 0);  // the gap
  CHECK(a.measure_within_ps(22, 5) == 0);   // reversed window
}

// Exactness against a brute-force reference: every picosecond of a small window marked by hand.
TEST_CASE("interval arithmetic matches a per-picosecond reference on random sets", "[intervals]") {
  std::mt19937 rng(12345);
  constexpr TimePs kWindow = 200;
  std::uniform_int_distribution<TimePs> point(0, kWindow);
  std::uniform_int_distribution<int> count(0, 8);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<Interval> xs, ys;
    std::vector<bool> in_x(kWindow, false), in_y(kWindow, false);
    auto fill = [&](std::vector<Interval>& v, std::vector<bool>& mark) {
      const int n = count(rng);
      for (int i = 0; i < n; ++i) {
        TimePs p = point(rng), q = point(rng);
        if (p > q) std::swap(p, q);
        v.push_back({p, q});
        for (TimePs t = p; t < q; ++t) mark[static_cast<std::size_t>(t)] = true;
      }
    };
    fill(xs, in_x);
    fill(ys, in_y);
    const IntervalSet x(xs), y(ys);
    TimePs both = 0, only_x = 0, either = 0, cx = 0;
    for (std::size_t t = 0; t < kWindow; ++t) {
      both += (in_x[t] && in_y[t]) ? 1 : 0;
      only_x += (in_x[t] && !in_y[t]) ? 1 : 0;
      either += (in_x[t] || in_y[t]) ? 1 : 0;
      cx += in_x[t] ? 1 : 0;
    }
    REQUIRE(x.measure_ps() == cx);
    REQUIRE(x.intersect(y).measure_ps() == both);
    REQUIRE(x.subtract(y).measure_ps() == only_x);
    REQUIRE(x.unite(y).measure_ps() == either);
    // measure_within_ps over a random window, against the marks (an empty or reversed window is 0).
    const TimePs w0 = point(rng), w1 = point(rng);
    TimePs inside = 0;
    for (TimePs t = w0; t < w1; ++t) inside += in_x[static_cast<std::size_t>(t)] ? 1 : 0;
    REQUIRE(x.measure_within_ps(w0, w1) == inside);
    // Normal form: sorted, non-empty, separated by gaps.
    const IntervalSet u = x.unite(y);
    const auto& parts = u.intervals();
    for (std::size_t i = 0; i < parts.size(); ++i) {
      REQUIRE(parts[i].begin_ps < parts[i].end_ps);
      if (i > 0) REQUIRE(parts[i - 1].end_ps < parts[i].begin_ps);
    }
  }
}

TEST_CASE("intervals in the order transfers land give the union a sorted list gives", "[intervals]") {
  // [1,3) and [5,7) landed after intervals that start later: sorted, [0,2) [1,3) [4,6) [5,7) [8,9),
  // whose union is [0,3) u [4,7) u [8,9): 3 + 3 + 1 = 7.
  const IntervalSet landed({{0, 2}, {4, 6}, {1, 3}, {8, 9}, {5, 7}});
  CHECK(landed.intervals() == std::vector<Interval>{{0, 3}, {4, 7}, {8, 9}});
  CHECK(landed.measure_ps() == 7);
  // The first interval starts after every other: all but it are out of order, still the same union.
  CHECK(IntervalSet({{50, 60}, {0, 10}, {20, 30}, {5, 25}}).intervals() == std::vector<Interval>{{0, 30}, {50, 60}});
  // Random nearly sorted lists (a few intervals moved later) against the same list sorted first.
  std::mt19937_64 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<Interval> sorted;
    TimePs t = 0;
    for (int i = 0; i < 400; ++i) {
      t += static_cast<TimePs>(rng() % 50);
      sorted.push_back({t, t + 1 + static_cast<TimePs>(rng() % 40)});
    }
    std::vector<Interval> landing = sorted;
    for (int k = 0; k < 20; ++k) {
      const std::size_t from = rng() % landing.size(), to = std::min(landing.size() - 1, from + rng() % 30);
      const Interval moved = landing[from];
      landing.erase(landing.begin() + static_cast<std::ptrdiff_t>(from));
      landing.insert(landing.begin() + static_cast<std::ptrdiff_t>(to), moved);
    }
    CHECK(IntervalSet(landing).intervals() == IntervalSet(sorted).intervals());
  }
}
