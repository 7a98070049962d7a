// json_scan against nlohmann::json::sax_parse, the reference it replaces on large inputs: the same
// events for every document both accept, the same documents refused, on hand-picked edge cases and on
// thousands of deterministic mutations of a trace-like document.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fusesim/util/json_scan.hpp"

using fusesim::json_scan;
using fusesim::JsonScanError;
using json = nlohmann::json;

namespace {

// Every event as text; returns false after `stop_after` events (never when negative).
class Recorder final : public nlohmann::json_sax<json> {
 public:
  explicit Recorder(long stop_after = -1) : stop_after_(stop_after) {}
  std::vector<std::string> events;

  bool null() override { return add("null"); }
  bool boolean(bool v) override { return add(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override { return add("i:" + std::to_string(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add("u:" + std::to_string(v)); }
  bool number_float(number_float_t v, const string_t& s) override {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return add(std::string("f:") + buf + "|" + s);
  }
  bool string(string_t& v) override { return add("s:" + v); }
  bool binary(binary_t&) override { return add("binary"); }
  bool start_object(std::size_t) override { return add("{"); }
  bool key(string_t& k) override { return add("k:" + k); }
  bool end_object() override { return add("}"); }
  bool start_array(std::size_t) override { return add("["); }
  bool end_array() override { return add("]"); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  bool add(std::string e) {
    events.push_back(std::move(e));
    return stop_after_ < 0 || static_cast<long>(events.size()) < stop_after_;
  }
  long stop_after_;
};

struct Outcome {
  bool ok;
  std::vector<std::string> events;
};

Outcome reference(const std::string& text) {
  Recorder r;
  const bool ok = json::sax_parse(text, &r);
  return {ok, r.events};
}

Outcome scanned(const std::string& text) {
  Recorder r;
  JsonScanError e;
  const bool ok = json_scan(text, r, e);
  if (!ok) CHECK_FALSE(e.what.empty());  // a refusal always says why
  return {ok, r.events};
}

void same(const std::string& text) {
  INFO("document: " << json(text).dump(-1, ' ', false, json::error_handler_t::replace));
  const Outcome a = reference(text), b = scanned(text);
  REQUIRE(b.ok == a.ok);
  if (a.ok) CHECK(b.events == a.events);
}

}  // namespace

TEST_CASE("json_scan accepts what nlohmann accepts, with the same events", "[util][json_scan]") {
  for (const std::string& doc : std::vector<std::string>{
           "{}", "[]", " \t\r\n[ ] ", "0", "-0", "1", "-1", "12345", "1.5", "-1.25e3", "1E+2", "0.1e1", "1e-400",
           "9223372036854775807", "-9223372036854775808", "-9223372036854775809", "18446744073709551615",
           "18446744073709551616", "123456789012345678901234567890", "1.7976931348623157e308", "4.9e-324",
           "true", "false", "null", R"("")", R"("a\"b\\c\/d\be\ff\ng\rh\ti")", R"("\u0041\u00e9\u20ac\ud83d\ude00")",
           R"("\u0000")", "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"", "\xEF\xBB\xBF{\"bom\": 1}",
           R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.5, "dur": 2, "args": {"correlation": 7}}]})",
           R"({"a": [1, [2, [3, {"b": {}}]], []], "c": {"d": null}})", R"([1,2,3,"x",{"y":[true,false]}])",
           // A NUL byte where a token starts ends the input for nlohmann (found by fuzz_kineto).
           std::string("1\0", 2), std::string("[1] \0garbage", 12), std::string("\"umSms\"\0\0\x0c\n", 11)})
    same(doc);
}

TEST_CASE("json_scan refuses what nlohmann refuses", "[util][json_scan]") {
  for (const std::string& doc : std::vector<std::string>{
           "", " ", "{", "[", "}", "]", "[1,]", "[,1]", "[1 2]", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{1:2}",
           "{\"a\" 1}", "01", "-01", "1.", "-", "+1", ".5", "1e", "1e+", "0x10", "NaN", "Infinity", "1e400",
           "-1e400", "1 2", "[] x", "tru", "nul", "falsey", "\"abc", "\"\\x\"", "\"\x01\"", "\"\\u12\"",
           "\"\\u12g4\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\xC0\xAF\"", "\"\xC3\"",
           "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"", "\"\xF5\x80\x80\x80\"", "\"\xE0\x80\x80\"", "\"\xFF\"",
           "\xEF\xBB", "\xEF\xBB{}", "[\"a\",]", "{\"a\":1}}", "[[]]]", "// c\n1", "'a'",
           std::string("\0", 1), std::string("[\0]", 3), std::string("tr\0ue", 5), std::string("\"a\0b\"", 5),
           std::string("{\"a\":\0}", 7)})
    same(doc);
}

TEST_CASE("json_scan: a refusal names the byte nlohmann counts to", "[util][json_scan]") {
  Recorder r;
  JsonScanError e;
  // "[1,]": the ']' at offset 3 is where a value was expected; positions count from 1.
  CHECK_FALSE(json_scan("[1,]", r, e));
  CHECK(e.byte == 4);
  CHECK(e.what.find("syntax error") == 0);
  // A handler that stops: false, and no syntax error of the scanner's own.
  Recorder stop(3);
  JsonScanError none;
  CHECK_FALSE(json_scan(R"({"a": [1, 2, 3]})", stop, none));
  CHECK(stop.events.size() == 3u);
  CHECK(none.what.empty());
}

TEST_CASE("json_scan reads any depth without recursion", "[util][json_scan]") {
  const std::size_t depth = 200000;
  std::string deep(depth, '[');
  deep += std::string(depth, ']');
  Recorder r;
  JsonScanError e;
  CHECK(json_scan(deep, r, e));
  CHECK(r.events.size() == 2 * depth);
  CHECK_FALSE(json_scan(std::string(depth, '['), r, e));
  CHECK_FALSE(json_scan(std::string(depth, '{'), r, e));
}

TEST_CASE("json_scan agrees with nlohmann on 20,000 mutations of a trace", "[util][json_scan]") {
  const std::string base = R"({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
 "distributedInfo": {"rank": 3}, "traceEvents": [
  {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#12", "pid": 1, "tid": 2, "ts": 1716000000123.456, "dur": 250000.5},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1716000000200, "dur": 4.25, "args": {"correlation": 77}},
  {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4, \"q\\u00e9\">", "ts": 1716000000210.5,
   "dur": 12, "args": {"correlation": 77, "grid": [132, 1, 1], "stream": 7, "blocks per SM": 1.0e0, "neg": -3}},
  {"ph": "i", "name": "\ud83d\ude00 caf\u00e9 \u20ac", "s": "t", "args": {"ok": true, "none": null, "f": false}},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 1716000000300, "dur": 0.001, "args": {"bytes": 18446744073709551615}}
 ]})";
  same(base);
  // Bytes that change the grammar: structure, quotes, escapes, digits and signs, UTF-8 lead and
  // continuation bytes, a control character.
  static const char kInteresting[] = "\0{}[]\":,\\/-+.eE0123456789tfnu \t\n\x01\x7f\x80\xbf\xc3\xe0\xed\xef\xf0\xf4\xff";
  const std::string interesting(kInteresting, sizeof kInteresting - 1);
  std::mt19937_64 rng(20261127);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string doc = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits && !doc.empty(); ++k) {
      const std::size_t at = rng() % doc.size();
      switch (rng() % 4) {
        case 0: doc[at] = interesting[rng() % interesting.size()]; break;
        case 1: doc.erase(at, 1); break;
        case 2: doc.insert(at, 1, interesting[rng() % interesting.size()]); break;
        default: doc.resize(at); break;
      }
    }
    const Outcome a = reference(doc), b = scanned(doc);
    INFO("mutation " << i << ": " << json(doc).dump(-1, ' ', false, json::error_handler_t::replace));
    REQUIRE(b.ok == a.ok);
    if (a.ok) {
      ++accepted;
      REQUIRE(b.events == a.events);
    }
  }
  // Both kinds occur: the comparison covers accepted documents' events as well as refusals.
  CHECK(accepted > 1000);
  CHECK(accepted < 19000);
}
