#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "fusesim/analysis/table.hpp"

using fusesim::analysis::Align;
using fusesim::analysis::Table;

TEST_CASE("Table aligns columns, two spaces apart, without trailing blanks", "[analysis][table]") {
  Table t({{"name", Align::left}, {"ms", Align::right}});
  t.add_row({"a", "12.5"});
  t.add_row({"longer", "3"});
  // Widths: name max(4, 6) = 6, ms max(2, 4) = 4.
  CHECK(t.render() ==
        "name      ms\n"
        "------  ----\n"
        "a       12.5\n"
        "longer     3\n");
  CHECK_THROWS_AS(t.add_row({"one cell"}), std::invalid_argument);
}

TEST_CASE("A wrapped column breaks a long cell at spaces onto continuation lines", "[analysis][table]") {
  Table t({{"id", Align::left}, {"text", Align::left, 10}, {"n", Align::right}});
  t.add_row({"x", "one two three four", "7"});
  t.add_row({"y", "short", "8"});
  t.add_row({"z", "averyverylongword ok", "9"});
  // "one two three four" at 10: "one two" (7; + " three" would be 13), "three four" (10).
  // "averyverylongword" (17) exceeds 10 and stays whole on its own line, then "ok".
  // Widths: id 2, text max(4, 7, 10, 5, 17, 2) = 17, n 1.
  CHECK(t.render() ==
        "id  text               n\n"
        "--  -----------------  -\n"
        "x   one two            7\n"
        "    three four\n"
        "y   short              8\n"
        "z   averyverylongword  9\n"
        "    ok\n");
}

TEST_CASE("A cell within the wrap width stays on one line", "[analysis][table]") {
  Table t({{"text", Align::left, 10}});
  t.add_row({"exactly 10"});
  CHECK(t.render() ==
        "text\n"
        "----------\n"
        "exactly 10\n");
}
