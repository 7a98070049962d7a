// Spearman's rank correlation on series whose ranks are worked out by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "fusesim/analysis/rank_correlation.hpp"

using namespace fusesim::analysis;

TEST_CASE("fractional ranks share ties", "[analysis][rank]") {
  CHECK(fractional_ranks({10, 30, 20}) == std::vector<double>{1, 3, 2});
  // 5 is first; the two 7s take ranks 2 and 3, 2.5 each; 9 is 4th.
  CHECK(fractional_ranks({7, 5, 9, 7}) == std::vector<double>{2.5, 1, 4, 2.5});
  CHECK(fractional_ranks({}).empty());
}

TEST_CASE("Spearman's rho: same order 1, reversed -1, one swap by hand", "[analysis][rank]") {
  CHECK(*spearman({1, 2, 3, 4}, {10, 200, 3000, 40000}) == Approx(1.0));
  CHECK(*spearman({1, 2, 3, 4}, {4, 3, 2, 1}) == Approx(-1.0));
  // Ranks (1, 2, 3, 4) against (1, 3, 2, 4): no ties, rho = 1 - 6 sum d^2 / (n (n^2 - 1))
  // = 1 - 6 x 2 / (4 x 15) = 0.8.
  CHECK(*spearman({0.40, 0.45, 0.50, 0.60}, {0.41, 0.55, 0.52, 0.70}) == Approx(0.8));
  // Ties: x ranks (1, 2.5, 2.5, 4), y ranks (1, 2, 3, 4): means 2.5; sum of products of deviations
  // (-1.5)(-1.5) + 0(-0.5) + 0(0.5) + 1.5(1.5) = 4.5; sxx = 4.5, syy = 5 -> 4.5 / sqrt(22.5) = 0.9487.
  CHECK(*spearman({1, 2, 2, 3}, {1, 2, 3, 4}) == Approx(4.5 / std::sqrt(22.5)));
}

TEST_CASE("Spearman's rho is undefined without an order to compare", "[analysis][rank]") {
  CHECK(!spearman({1}, {2}).has_value());
  CHECK(!spearman({1, 1, 1}, {1, 2, 3}).has_value());
  CHECK_THROWS_AS(spearman({1, 2}, {1}), std::invalid_argument);
}
