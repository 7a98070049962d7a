#pragma once
// Spearman's rank correlation: whether a model orders cases as the measurements do (issue 12 asks it
// of the MFU of published training runs), however far off each value is.
#include <optional>
#include <vector>

namespace fusesim::analysis {

// Ranks 1..n of `values`, ties sharing the mean of the ranks they span (1, 2.5, 2.5, 4).
std::vector<double> fractional_ranks(const std::vector<double>& values);

// Pearson's correlation of the fractional ranks of `x` and `y` (of equal size). nullopt with fewer
// than 2 pairs or when either side's ranks are all equal (no order to compare).
std::optional<double> spearman(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace fusesim::analysis
