#pragma once
// Exact arithmetic on sets of half-open time intervals [begin, end) in integer picoseconds: the
// measures behind compute, comm, overlap and exposed communication (docs/metrics.md). Integers, not
// doubles, so that |A ∩ B| + |A \ B| == |A| holds exactly and results do not depend on the order in
// which intervals were added.
#include <vector>

#include "fusesim/util/units.hpp"

namespace fusesim::analysis {

struct Interval {
  TimePs begin_ps = 0;
  TimePs end_ps = 0;
  TimePs length_ps() const { return end_ps > begin_ps ? end_ps - begin_ps : 0; }
  friend bool operator==(const Interval&, const Interval&) = default;
};

// A union of intervals kept normalized: sorted, disjoint, non-empty, and not touching (intervals
// that meet end to start are merged), so two sets with the same points compare equal.
class IntervalSet {
 public:
  IntervalSet() = default;
  // Empty intervals (end <= begin) are dropped.
  explicit IntervalSet(std::vector<Interval> intervals);

  const std::vector<Interval>& intervals() const { return parts_; }
  bool empty() const { return parts_.empty(); }
  TimePs measure_ps() const;  // total length of the union

  IntervalSet unite(const IntervalSet& other) const;
  IntervalSet intersect(const IntervalSet& other) const;
  IntervalSet subtract(const IntervalSet& other) const;  // points of *this not in `other`
  IntervalSet clip(TimePs begin_ps, TimePs end_ps) const;
  // |this ∩ [begin, end)| without building the intersection: a binary search, then the parts inside.
  TimePs measure_within_ps(TimePs begin_ps, TimePs end_ps) const;

  friend bool operator==(const IntervalSet&, const IntervalSet&) = default;

 private:
  std::vector<Interval> parts_;
};

}  // namespace fusesim::analysis
