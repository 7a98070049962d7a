#pragma once
// Every file fusesim writes (reports, traces, sweep results and parts, merges, plot data and scripts,
// profiles, baselines, task graphs) goes through write_output_file, which never replaces what the
// user points at with something else (docs/cli.md, "Output files"):
//   - "-" is standard output;
//   - a path that does not exist, or a regular file, is written whole or not at all: the content goes
//     to "<path>.tmp.<pid>" in the same folder, is flushed to disk (fsync) and renamed over the path,
//     keeping an existing file's permissions; an error midway, SIGINT or SIGTERM removes the temporary
//     file and leaves the old file as it was;
//   - a symbolic link is followed (the link stays a link) and its final target written by these rules;
//   - a character device, FIFO or socket (/dev/null, /dev/stdout, a pipe) is written to in place;
//   - a directory, a block device, or a path whose folder does not exist is refused: InputError
//     (file = the path, json path = the option, e.g. "--output"), exit 2.
#include <cstdint>
#include <string>
#include <string_view>

namespace fusesim {

void write_output_file(const std::string& path, std::string_view content, std::string_view option = "--output");

// The checks write_output_file makes before writing, for a command to run before long work (a sweep
// refuses `--output missing/dir/x.csv` before it simulates anything). Writes nothing.
void check_output_path(const std::string& path, std::string_view option = "--output");

// `content` as a gzip member (RFC 1952; zlib, best compression). The header carries no time stamp
// or name, so the same content gives the same bytes.
std::string gzip_compress(std::string_view content);
// The content of a gzip (or zlib) stream; std::length_error once it would exceed `max_bytes`,
// std::runtime_error when it is not a valid stream.
std::string gzip_decompress(std::string_view compressed, std::uint64_t max_bytes);

// write_output_file, gzip-compressed when the path ends in ".gz" (Perfetto and chrome://tracing
// open a gzip-compressed trace as it is).
void write_maybe_gzipped(const std::string& path, std::string_view content, std::string_view option = "--output");

// Installs SIGINT and SIGTERM handlers that remove the temporary file being written, if any, then end
// the process as the signal would have. For main(): a library does not take over a program's signals.
void remove_temporary_files_on_interrupt();

namespace output_detail {
// The temporary files being written now, for the signal handler (tests/util/output_test.cpp uses these
// to stand in for a write interrupted midway). Returns the slot, or -1 when all are taken.
int register_temporary(const std::string& path);
void unregister_temporary(int slot);
}  // namespace output_detail

}  // namespace fusesim
