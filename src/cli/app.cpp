#include "fusesim/cli/app.hpp"

#include <ostream>

#include "fusesim/util/error.hpp"

namespace fusesim::cli {
namespace {

// CLI11 names the option in its message ("--slices: 1 required INT missing"); use it as the path.
std::string option_named_in(const std::string& message) {
  auto is_alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  for (std::size_t i = 0; i + 2 < message.size(); ++i) {
    if (message[i] != '-' || message[i + 1] != '-' || !is_alpha(message[i + 2])) continue;
    std::size_t end = i + 2;
    while (end < message.size() && (is_alpha(message[end]) || message[end] == '-' ||
                                    (message[end] >= '0' && message[end] <= '9')))
      ++end;
    return message.substr(i, end - i);
  }
  return "$";
}

}  // namespace

std::string one_line(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      if (!out.empty() && out.back() != ' ') out += "; ";
    } else if (c != '\r') {
      out += c;
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  return out;
}

std::string format_input_error(const std::string& file, const std::string& json_path, const std::string& message) {
  return "error: " + one_line(file) + ": " + one_line(json_path) + ": " + one_line(message);
}

int run(int argc, const char* const* argv, Io& io) {
  CLI::App app{"fusesim: a discrete-event simulator of communication/computation overlap schedules "
               "(baseline collectives, slice-overlap, CommFuse) for distributed LLM training",
               "fusesim"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", std::string("fusesim ") + FUSESIM_VERSION);
  std::vector<std::unique_ptr<Command>> commands;
  std::vector<CLI::App*> subs;
  for (const CommandSpec& spec : registered_commands()) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.description);
    commands.push_back(spec.make());
    commands.back()->configure(*sub);
    subs.push_back(sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    // --help: CLI11 prints the help of the subcommand that was asked for.
    app.exit(e, io.out, io.err);
    return 0;
  } catch (const CLI::ParseError& e) {
    const std::string option = option_named_in(e.what());
    std::string message = e.what();
    if (message.rfind(option + ": ", 0) == 0) message.erase(0, option.size() + 2);  // CLI11 repeats it
    throw InputError(kCommandLine, option, message);
  }
  for (std::size_t i = 0; i < subs.size(); ++i)
    if (app.got_subcommand(subs[i])) return commands[i]->run(io);
  io.out << app.help();
  return 0;
}

}  // namespace fusesim::cli
