#include <catch2/catch.hpp>

#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"
#include "fusesim/util/units.hpp"

using namespace fusesim;

namespace {
// Runs `f` and returns the InputError it throws; fails the test if it throws nothing.
template <typename F>
InputError input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e;
  }
  FAIL("expected an InputError");
  return InputError("", "", "");
}
}  // namespace

TEST_CASE("units: seconds and picoseconds round-trip, positive never rounds to zero") {
  CHECK(seconds_to_ps(1.0) == 1'000'000'000'000);
  CHECK(seconds_to_ps(2.5e-9) == 2'500);
  CHECK(seconds_to_ps(1e-15) == 1);  // below one tick, still occupies one
  CHECK(seconds_to_ps(0.0) == 0);
  CHECK(ps_to_seconds(3'000'000) == Approx(3e-6));
}

TEST_CASE("json reader: typed access, ranges and paths") {
  auto doc = JsonDocument::parse(R"({"a": {"n": 3, "x": 2.5, "s": "hi", "b": true, "list": [1, 2]},
                                    "bw": {"value": 4.5e11, "source": "datasheet"}})",
                                 "f.json");
  JsonObject root = doc.root();
  JsonObject a = root.object("a");
  CHECK(a.integer("n", 0, 10) == 3);
  CHECK(a.number("x", 0, 10) == 2.5);
  CHECK(a.string("s") == "hi");
  CHECK(a.boolean("b"));
  CHECK(a.array("list").size() == 2);
  CHECK(a.integer_or("missing", 0, 10, 7) == 7);
  SourcedValue bw = root.sourced("bw", 0, 1e15);
  CHECK(bw.value == 4.5e11);
  CHECK(bw.source == "datasheet");
  a.finish();
  root.finish();

  auto e = input_error([&] { (void)a.integer("n", 4, 10); });
  CHECK(e.file() == "f.json");
  CHECK(e.json_path() == "$.a.n");
  e = input_error([&] { (void)a.integer("x", 0, 10); });  // 2.5 is not an integer
  CHECK(e.json_path() == "$.a.x");
  e = input_error([&] { (void)a.number("s", 0, 10); });
  CHECK(e.json_path() == "$.a.s");
  e = input_error([&] { (void)a.at("nope"); });
  CHECK(e.json_path() == "$.a.nope");
  e = input_error([&] { (void)a.array("list").at(5); });
  CHECK(e.json_path() == "$.a.list");
  e = input_error([&] { (void)a.array("list").at(1).as_string(); });
  CHECK(e.json_path() == "$.a.list[1]");
}

TEST_CASE("json reader: unknown keys are refused by finish()") {
  auto doc = JsonDocument::parse(R"({"name": "x", "bandwith": 1})", "t.json");
  JsonObject root = doc.root();
  CHECK(root.string("name") == "x");
  auto e = input_error([&] { root.finish(); });
  CHECK(e.json_path() == "$.bandwith");
  CHECK(e.message() == "unknown key");
}

TEST_CASE("json reader: a figure from outside must carry its source") {
  auto doc = JsonDocument::parse(R"({"peak": 989e12, "eff": {"value": 0.8}, "x": {"value": 1, "source": "s", "extra": 1}})",
                                 "d.json");
  JsonObject root = doc.root();
  CHECK(input_error([&] { (void)root.sourced("peak", 0, 1e18); }).json_path() == "$.peak");
  CHECK(input_error([&] { (void)root.sourced("eff", 0, 1); }).json_path() == "$.eff.source");
  CHECK(input_error([&] { (void)root.sourced("x", 0, 10); }).json_path() == "$.x.extra");
}

TEST_CASE("json reader: syntax errors give line and column at $") {
  auto e = input_error([] { (void)JsonDocument::parse("{\n  \"a\": 1,\n  \"b\": }\n", "bad.json"); });
  CHECK(e.file() == "bad.json");
  CHECK(e.json_path() == "$");
  // The offending '}' is on line 3, column 8.
  CHECK_THAT(e.message(), Catch::Contains("line 3"));
  e = input_error([] { (void)JsonDocument::parse("", "empty.json"); });
  CHECK(e.json_path() == "$");
  e = input_error([] { (void)JsonDocument::parse("[1, 2]", "arr.json").root(); });
  CHECK(e.json_path() == "$");
  CHECK_THAT(e.message(), Catch::Contains("expected an object"));
}

TEST_CASE("json reader: choices name the allowed values") {
  auto doc = JsonDocument::parse(R"({"kind": "rign"})", "c.json");
  auto e = input_error([&] { (void)doc.root().choice("kind", {"ring", "tree"}); });
  CHECK(e.json_path() == "$.kind");
  CHECK_THAT(e.message(), Catch::Contains("'ring', 'tree'"));
}

TEST_CASE("json reader: a missing file is an input error naming it") {
  auto e = input_error([] { (void)JsonDocument::load("/nonexistent/x.json"); });
  CHECK(e.file() == "/nonexistent/x.json");
  CHECK(e.json_path() == "$");
}

TEST_CASE("json reader: a key given twice is refused with its path (the last copy no longer wins)") {
  auto e = input_error([] { (void)JsonDocument::parse(R"({"a": {"b": 1, "c": 2, "b": 3}})", "dup.json"); });
  CHECK(e.file() == "dup.json");
  CHECK(e.json_path() == "$.a.b");
  CHECK_THAT(e.message(), Catch::Contains("twice"));
  // Inside an array: the path counts the elements before it.
  e = input_error([] { (void)JsonDocument::parse(R"({"x": [1, [2], {"k": 0}, {"k": 1, "k": 1}]})", "dup.json"); });
  CHECK(e.json_path() == "$.x[3].k");
  // The same key in sibling objects is fine, and the document reads as before.
  const JsonDocument ok = JsonDocument::parse(R"({"x": [{"k": 0}, {"k": 1}], "k": 2})", "ok.json");
  CHECK(ok.raw()["x"][1]["k"].get<int>() == 1);
  CHECK(ok.raw()["k"].get<int>() == 2);
}

TEST_CASE("json reader: a number beyond a double's range is bad input at its path, not an internal error") {
  auto e = input_error([] { (void)JsonDocument::parse(R"({"model": {"layers": 1e400}})", "big.json"); });
  CHECK(e.file() == "big.json");
  CHECK(e.json_path() == "$.model.layers");
  CHECK_THAT(e.message(), Catch::Contains("1e400"));
  e = input_error([] { (void)JsonDocument::parse(R"({"v": [0, 1, -1e999]})", "big.json"); });
  CHECK(e.json_path() == "$.v[2]");
  e = input_error([] { (void)JsonDocument::parse("1e400", "big.json"); });
  CHECK(e.json_path() == "$");
}
