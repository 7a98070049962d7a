#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "fusesim/util/hex_float.hpp"

namespace {
std::string hex(double v) {
  std::string out;
  fusesim::append_hex_float(out, v);
  return out;
}
}  // namespace

// The profile fit digest (model::kernel_fit_inputs_fnv1a64) was defined over fmt's "{:a}" text and
// shipped profiles store it: the appended form must be the same text, byte for byte.
TEST_CASE("append_hex_float writes what fmt's {:a} writes") {
  CHECK(hex(3.0) == "0x1.8p+1");  // 3 = 1.5 x 2^1, 1.5 = 0x1.8
  CHECK(hex(-0.0) == "-0x0p+0");
  CHECK(hex(1.0) == "0x1p+0");
  for (double v : {0.0, -0.0, 1.0, 0.1, 4096.0, 1e-6, 5e-324, -5e-324, 1e-310, std::numeric_limits<double>::max(),
                   std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()})
    CHECK(hex(v) == fmt::format("{:a}", v));
  std::mt19937_64 bits(7);
  int differ = 0;
  for (int i = 0; i < 200000; ++i) {
    const std::uint64_t b = bits();
    double v = 0;
    std::memcpy(&v, &b, sizeof v);
    if (hex(v) != fmt::format("{:a}", v)) ++differ;
    // Shapes and times as profiles hold them: integers and short binary fractions.
    const double w = std::ldexp(static_cast<double>(b % 1000000), -static_cast<int>(b % 48));
    if (hex(w) != fmt::format("{:a}", w)) ++differ;
  }
  CHECK(differ == 0);
}
