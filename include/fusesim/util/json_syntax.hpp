#pragma once
// The one-line message of a JSON syntax error, for the readers that run nlohmann's parser themselves
// (JsonDocument::parse, the Kineto trace reader).
#include <cstddef>
#include <string>
#include <string_view>

#include "fusesim/util/error.hpp"

namespace fusesim {

// nlohmann's parse error at `byte` (its parse_error::byte: one past the offending character) in
// `text`, with nlohmann's message `what`, as an InputError at "$" naming the line and the column.
InputError json_syntax_error(std::string file, std::string_view text, std::size_t byte, const std::string& what);

}  // namespace fusesim
