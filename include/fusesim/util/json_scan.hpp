// A strict JSON scanner that feeds a nlohmann SAX handler: the same events, in the same order, and the
// same documents accepted and refused as nlohmann::json::sax_parse (strict mode, no comments), at the
// speed of a byte loop. nlohmann's lexer reads one character at a time through an input adapter and
// converts every number; the large inputs fusesim reads this way (profiler traces of hundreds of MB,
// docs/traces.md) are mostly strings it skips, so they are scanned in place and copied only when
// they hold escapes. Equivalence with nlohmann is tested (tests/util/json_scan_test.cpp) and fuzzed
// (fuzz/fuzz_kineto.cpp), down to its quirks: a NUL byte where a token starts ends the input.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fusesim {

struct JsonScanError {
  // One past the offending byte, as nlohmann counts its position (json_syntax_error's `byte`).
  std::size_t byte = 0;
  std::string what;  // "syntax error ...": json_syntax_error keeps the part from "syntax error"
};

// Scans `text` as one JSON value and calls the handler for each event. Returns true when the whole
// text is one valid value and the handler accepted every event; false when the handler returned false
// (its own error state says why; `error` is left empty) or when the text is not valid JSON (`error`
// says where). Nesting is kept on a heap stack: any depth is read without recursion.
bool json_scan(std::string_view text, nlohmann::json_sax<nlohmann::json>& handler, JsonScanError& error);

}  // namespace fusesim
