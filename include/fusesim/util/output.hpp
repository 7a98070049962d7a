#pragma once
// Output files are written whole or not at all: content goes to "<path>.tmp.<pid>" and is renamed
// over the target only once complete, so an error midway never leaves a half-written file.
#include <string>
#include <string_view>

namespace fusesim {

// Throws InputError (file = path, json path "$") when the file cannot be written.
void write_file_atomically(const std::string& path, std::string_view content);

}  // namespace fusesim
