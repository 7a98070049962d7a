#pragma once
// One CSV field as RFC 4180 writes it: as it is, or quoted (a quote inside doubled) when it holds a
// comma, a quote or a line break. What sweep and validate write, and what sweep's reader takes.
#include <string>
#include <string_view>

namespace fusesim::util {

inline std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(text);
  std::string quoted = "\"";
  for (char ch : text) {
    if (ch == '"') quoted += '"';
    quoted += ch;
  }
  return quoted + "\"";
}

}  // namespace fusesim::util
