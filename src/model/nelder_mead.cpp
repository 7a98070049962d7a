// Nelder-Mead search shared by the model fits (include/fusesim/model/nelder_mead.hpp).
#include "fusesim/model/nelder_mead.hpp"

#include <algorithm>
#include <numeric>

namespace fusesim::model {

std::vector<double> nelder_mead(const std::function<double(const std::vector<double>&)>& f, std::vector<double> x0,
                                const std::vector<double>& steps, int iterations) {
  const std::size_t n = x0.size();
  std::vector<std::vector<double>> pts{x0};
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<double> p = x0;
    p[i] += steps[i];
    pts.push_back(p);
  }
  std::vector<double> vals;
  for (const auto& p : pts) vals.push_back(f(p));
  for (int it = 0; it < iterations; ++it) {
    std::vector<std::size_t> order(n + 1);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return vals[a] < vals[b]; });
    std::vector<std::vector<double>> p2;
    std::vector<double> v2;
    for (std::size_t i : order) p2.push_back(pts[i]), v2.push_back(vals[i]);
    pts = std::move(p2);
    vals = std::move(v2);
    if (vals[n] - vals[0] < 1e-12) break;
    std::vector<double> c(n, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) c[j] += pts[i][j] / static_cast<double>(n);
    auto along = [&](double t) {
      std::vector<double> x(n);
      for (std::size_t j = 0; j < n; ++j) x[j] = c[j] + t * (pts[n][j] - c[j]);
      return x;
    };
    const std::vector<double> xr = along(-1.0);
    const double fr = f(xr);
    if (fr < vals[0]) {
      const std::vector<double> xe = along(-2.0);
      const double fe = f(xe);
      if (fe < fr) pts[n] = xe, vals[n] = fe;
      else pts[n] = xr, vals[n] = fr;
    } else if (fr < vals[n - 1]) {
      pts[n] = xr, vals[n] = fr;
    } else {
      const std::vector<double> xc = along(0.5);
      const double fc = f(xc);
      if (fc < vals[n]) {
        pts[n] = xc, vals[n] = fc;
      } else {
        for (std::size_t i = 1; i <= n; ++i) {
          for (std::size_t j = 0; j < n; ++j) pts[i][j] = pts[0][j] + 0.5 * (pts[i][j] - pts[0][j]);
          vals[i] = f(pts[i]);
        }
      }
    }
  }
  return pts[static_cast<std::size_t>(std::min_element(vals.begin(), vals.end()) - vals.begin())];
}

}  // namespace fusesim::model
