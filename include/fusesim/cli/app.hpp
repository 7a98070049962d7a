#pragma once
// The command-line front end: a registry of subcommands (one file each under src/cli/), parsed with
// CLI11. Library code here never exits and never maps exceptions to exit codes: bad input surfaces
// as InputError (command-line values with file "<command line>"), and only main() turns exceptions
// into exit statuses (0 ok, 2 bad input, 1 internal error).
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace fusesim::cli {

// Where a command writes what it prints (tests pass string streams).
struct Io {
  std::ostream& out;
  std::ostream& err;
};

inline constexpr const char* kCommandLine = "<command line>";

class Command {
 public:
  virtual ~Command() = default;
  // Declares the subcommand's options on `sub`, bound to members of this object.
  virtual void configure(CLI::App& sub) = 0;
  // Runs once the command line parsed. Throws InputError on bad input; returns the exit status.
  virtual int run(Io& io) = 0;
};

struct CommandSpec {
  std::string name;
  std::string description;
  std::function<std::unique_ptr<Command>()> make;
};

// Every subcommand, in the order `fusesim --help` lists them (src/cli/commands.cpp). A new one is a
// new file and one line there.
std::vector<CommandSpec> registered_commands();

// Parses argv and runs the chosen subcommand; with none, prints the help. Help requests return 0.
// CLI11 parse errors become InputError("<command line>", "--option" or "$", message).
int run(int argc, const char* const* argv, Io& io);

// One-line form of an error for stderr: "error: <file>: <json path>: <message>", with any newline
// inside the message folded into "; " so that the line stays one line.
std::string format_input_error(const std::string& file, const std::string& json_path, const std::string& message);
// `s` with newlines folded into "; " (errors are reported on one line).
std::string one_line(const std::string& s);

}  // namespace fusesim::cli
