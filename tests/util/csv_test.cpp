#include <catch2/catch.hpp>

#include <string>

#include "fusesim/util/csv.hpp"

using fusesim::util::csv_field;

TEST_CASE("csv_field quotes a field only when it must, doubling the quotes inside", "[util][csv]") {
  CHECK(csv_field("Llama-2-70b-hf") == "Llama-2-70b-hf");
  CHECK(csv_field("") == "");
  CHECK(csv_field("<embedded:profiles/h100-sxm.json>") == "<embedded:profiles/h100-sxm.json>");
  // RFC 4180: a comma, a quote or a line break makes the field quoted; each quote inside is doubled.
  CHECK(csv_field("a,b") == "\"a,b\"");
  CHECK(csv_field("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(csv_field("two\nlines") == "\"two\nlines\"");
  CHECK(csv_field("cr\r") == "\"cr\r\"");
  CHECK(csv_field("\"") == "\"\"\"\"");
}
