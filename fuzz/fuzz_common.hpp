#pragma once
// Shared by the fuzz targets: the contract every reader of user input keeps. Bad input raises
// fusesim::InputError (exit code 2 in `fusesim`); any other exception escaping a reader is an internal
// error (exit 1) and a finding, so it is left to escape: libFuzzer reports the abort as a crash and
// keeps the input. Sanitizer reports, leaks and timeouts are findings the same way.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"

namespace fusesim::fuzz {

// The label an InputError names; a real file name would only make the messages longer.
inline constexpr const char* kFile = "<fuzz>";

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `read` on the input parsed as JSON; InputError (a syntax error included) is the expected
// outcome for most inputs.
template <typename Read>
int read_json(const std::uint8_t* data, std::size_t size, Read read) {
  try {
    read(JsonDocument::parse(as_text(data, size), kFile));
  } catch (const InputError&) {
  }
  return 0;
}

}  // namespace fusesim::fuzz
