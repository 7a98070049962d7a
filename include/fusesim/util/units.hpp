#pragma once
// Units used throughout fusesim. Simulated time is an integer number of picoseconds: a 1 KiB hop on
// a 450 GB/s link lasts ~2.3 ns, so nanoseconds would round such hops by tens of percent, while an
// int64 of picoseconds still spans 106 days of simulated time.
#include <cmath>
#include <cstdint>
#include <limits>

namespace fusesim {

using TimePs = std::int64_t;      // simulated time, picoseconds
using Bytes = std::int64_t;       // sizes of buffers and transfers, bytes
using Flops = double;             // floating-point operations (a count, not a rate)
using BytesPerSecond = double;    // bandwidths
using FlopsPerSecond = double;    // compute throughput

inline constexpr TimePs kPsPerSecond = 1'000'000'000'000;
inline constexpr TimePs kPsPerMicrosecond = 1'000'000;
inline constexpr TimePs kPsPerNanosecond = 1'000;
inline constexpr TimePs kTimeNever = std::numeric_limits<TimePs>::max();

// Rounded to the nearest picosecond; a positive duration never rounds to zero so that every
// nonzero piece of work occupies its resource for at least one tick.
// A time beyond the range (or not a number) is kTimeNever, never a wrapped or negative value.
inline TimePs seconds_to_ps(double seconds) {
  const double ps = seconds * static_cast<double>(kPsPerSecond);
  if (!(ps > -9.2e18 && ps < 9.2e18)) return ps < 0.0 ? 0 : kTimeNever;
  const auto rounded = static_cast<TimePs>(std::llround(ps));
  return (ps > 0.0 && rounded == 0) ? TimePs{1} : rounded;
}
inline double ps_to_seconds(TimePs ps) { return static_cast<double>(ps) / static_cast<double>(kPsPerSecond); }

}  // namespace fusesim
