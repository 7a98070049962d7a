#pragma once
// Errors. Bad input raises InputError, which names the file and the JSON path of the offending
// value; main turns it into exit code 2. Anything else that escapes is an internal error (exit 1).
#include <stdexcept>
#include <string>

namespace fusesim {

class InputError : public std::runtime_error {
 public:
  // file: the file (or "<embedded:name>", "<command line>") the input came from.
  // json_path: where in it, as "$.node.scale_up.link.bandwidth_bytes_per_s" ("$" for the whole).
  InputError(std::string file, std::string json_path, std::string message);
  const std::string& file() const noexcept { return file_; }
  const std::string& json_path() const noexcept { return json_path_; }
  const std::string& message() const noexcept { return message_; }

 private:
  std::string file_;
  std::string json_path_;
  std::string message_;
};

// A task graph that cannot run: a cycle, an unmatched send/recv, a collective whose members disagree.
class GraphError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace fusesim
