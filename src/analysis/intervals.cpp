#include "fusesim/analysis/intervals.hpp"

#include <algorithm>
#include <iterator>

namespace fusesim::analysis {

IntervalSet::IntervalSet(std::vector<Interval> intervals) {
  std::erase_if(intervals, [](const Interval& i) { return i.end_ps <= i.begin_ps; });
  const auto before = [](const Interval& a, const Interval& b) {
    return a.begin_ps != b.begin_ps ? a.begin_ps < b.begin_ps : a.end_ps < b.end_ps;
  };
  // A rank's compute intervals come in its streams' order, already sorted, and its transfers in the
  // order they landed, nearly sorted by start (a few hundred of 30,000 out of place on a Llama-3-70B
  // step), where a full sort of them cost 3% of a search candidate's instructions. So the
  // intervals that keep the order are kept, the others (those starting before one already kept)
  // sorted apart and merged in. Intervals that compare equal are equal: the order is the same as a
  // full sort's.
  if (!std::is_sorted(intervals.begin(), intervals.end(), before)) {
    std::vector<Interval> kept, stray;
    kept.reserve(intervals.size());
    for (const Interval& i : intervals) (kept.empty() || !before(i, kept.back()) ? kept : stray).push_back(i);
    std::sort(stray.begin(), stray.end(), before);
    intervals.clear();
    std::merge(kept.begin(), kept.end(), stray.begin(), stray.end(), std::back_inserter(intervals), before);
  }
  for (const Interval& i : intervals) {
    if (!parts_.empty() && i.begin_ps <= parts_.back().end_ps) {
      parts_.back().end_ps = std::max(parts_.back().end_ps, i.end_ps);
    } else {
      parts_.push_back(i);
    }
  }
}

TimePs IntervalSet::measure_ps() const {
  TimePs total = 0;
  for (const Interval& i : parts_) total += i.length_ps();
  return total;
}

IntervalSet IntervalSet::unite(const IntervalSet& other) const {
  std::vector<Interval> all = parts_;
  all.insert(all.end(), other.parts_.begin(), other.parts_.end());
  return IntervalSet(std::move(all));
}

IntervalSet IntervalSet::intersect(const IntervalSet& other) const {
  // Both sides are sorted and disjoint: one merge-like sweep.
  std::vector<Interval> out;
  std::size_t a = 0, b = 0;
  while (a < parts_.size() && b < other.parts_.size()) {
    const Interval& x = parts_[a];
    const Interval& y = other.parts_[b];
    const TimePs lo = std::max(x.begin_ps, y.begin_ps);
    const TimePs hi = std::min(x.end_ps, y.end_ps);
    if (lo < hi) out.push_back({lo, hi});
    if (x.end_ps < y.end_ps) {
      ++a;
    } else {
      ++b;
    }
  }
  return IntervalSet(std::move(out));
}

IntervalSet IntervalSet::subtract(const IntervalSet& other) const {
  std::vector<Interval> out;
  std::size_t b = 0;
  for (const Interval& x : parts_) {
    TimePs cursor = x.begin_ps;
    while (b < other.parts_.size() && other.parts_[b].end_ps <= cursor) ++b;
    // Walk the removed pieces that overlap x without consuming them: one of them may reach into the
    // next interval of *this.
    std::size_t k = b;
    while (k < other.parts_.size() && other.parts_[k].begin_ps < x.end_ps) {
      const Interval& y = other.parts_[k];
      if (y.begin_ps > cursor) out.push_back({cursor, y.begin_ps});
      cursor = std::max(cursor, y.end_ps);
      if (cursor >= x.end_ps) break;
      ++k;
    }
    if (cursor < x.end_ps) out.push_back({cursor, x.end_ps});
  }
  return IntervalSet(std::move(out));
}

IntervalSet IntervalSet::clip(TimePs begin_ps, TimePs end_ps) const {
  return intersect(IntervalSet({{begin_ps, end_ps}}));
}

TimePs IntervalSet::measure_within_ps(TimePs begin_ps, TimePs end_ps) const {
  TimePs total = 0;
  if (end_ps <= begin_ps) return total;
  // The first part that ends after begin_ps; parts are sorted and disjoint, so their ends are sorted too.
  auto it = std::upper_bound(parts_.begin(), parts_.end(), begin_ps,
                             [](TimePs t, const Interval& part) { return t < part.end_ps; });
  for (; it != parts_.end() && it->begin_ps < end_ps; ++it)
    total += std::min(it->end_ps, end_ps) - std::max(it->begin_ps, begin_ps);
  return total;
}

}  // namespace fusesim::analysis
