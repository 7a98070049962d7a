#pragma once
// Output files are written whole or not at all: content goes to "<path>.tmp.<pid>" and is renamed
// over the target only once complete, so an error midway never leaves a half-written file.
#include <string>
#include <string_view>

namespace fusesim {

// Throws InputError (file = path, json path "$") when the file cannot be written.
void write_file_atomically(const std::string& path, std::string_view content);

// `content` as a gzip member (RFC 1952; zlib, best compression). The header carries no time stamp
// or name, so the same content gives the same bytes.
std::string gzip_compress(std::string_view content);

// write_file_atomically, gzip-compressed when the path ends in ".gz" (Perfetto and chrome://tracing
// open a gzip-compressed trace as it is).
void write_maybe_gzipped(const std::string& path, std::string_view content);

}  // namespace fusesim
