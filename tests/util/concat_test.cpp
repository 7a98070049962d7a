#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "fusesim/util/concat.hpp"

using fusesim::concat;

TEST_CASE("concat joins strings and integers as fmt::format's {} does", "[util][concat]") {
  const std::string layer = "L12";
  CHECK(concat("r", 3, "/", layer, "/send/c", 0) == "r3/L12/send/c0");
  CHECK(concat(std::string_view("mb"), -4, "/", std::int64_t{1234567890123}) == "mb-4/1234567890123");
  CHECK(concat() == "");
  CHECK(concat("", layer, "") == "L12");
  // The extremes of the widest integers fit the piece's 24 characters (20 digits and a sign).
  CHECK(concat(std::numeric_limits<std::int64_t>::min()) == "-9223372036854775808");
  CHECK(concat(std::numeric_limits<std::uint64_t>::max()) == "18446744073709551615");
  // A byte-sized integer is a number, as fmt prints it, not a character.
  CHECK(concat(std::uint8_t{7}) == "7");
  for (const int n : {0, 9, 10, -1, 65535, std::numeric_limits<int>::max()})
    CHECK(concat("{", n, "}/", layer) == fmt::format("{{{}}}/{}", n, layer));
}
