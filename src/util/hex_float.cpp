#include "fusesim/util/hex_float.hpp"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace fusesim {

void append_hex_float(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += fmt::format("{:a}", value);
    return;
  }
  // std::to_chars writes the same shortest hex digits as printf's %a, without the sign and the "0x".
  if (std::signbit(value)) {
    out += '-';
    value = -value;
  }
  out += "0x";
  char digits[32];
  const auto end = std::to_chars(digits, digits + sizeof digits, value, std::chars_format::hex).ptr;
  out.append(digits, end);
}

}  // namespace fusesim
