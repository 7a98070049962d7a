#include "fusesim/util/embedded.hpp"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"

namespace fusesim {
namespace detail {
// Generated at build time from topologies/ and workloads/ (cmake/embed.cmake); ends with {"", ""}.
extern const std::pair<std::string_view, std::string_view> kEmbeddedFiles[];
}  // namespace detail

std::optional<std::string_view> embedded_file(std::string_view relative_path) {
  for (auto* e = detail::kEmbeddedFiles; !e->first.empty(); ++e)
    if (e->first == relative_path) return e->second;
  return std::nullopt;
}

std::vector<std::string> embedded_files(std::string_view folder) {
  std::vector<std::string> out;
  const std::string prefix = std::string(folder) + "/";
  for (auto* e = detail::kEmbeddedFiles; !e->first.empty(); ++e)
    if (e->first.substr(0, prefix.size()) == prefix) out.emplace_back(e->first);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {
constexpr std::string_view kLabelOpen = "<embedded:";
}  // namespace

std::string embedded_label(std::string_view relative_path) {
  return std::string(kLabelOpen) + std::string(relative_path) + ">";
}

std::optional<std::string> embedded_path(std::string_view label) {
  if (label.size() <= kLabelOpen.size() || label.substr(0, kLabelOpen.size()) != kLabelOpen || label.back() != '>')
    return std::nullopt;
  return std::string(label.substr(kLabelOpen.size(), label.size() - kLabelOpen.size() - 1));
}

ResolvedInput resolve_input(const std::string& name_or_path, std::string_view folder) {
  // `--topology ""` printed "error: : $: no such file": an empty name is a command-line mistake.
  if (name_or_path.empty())
    throw InputError("<command line>", "$", "an empty name: give a file, or the name of a shipped one (fusesim list)");
  std::error_code ec;
  if (std::filesystem::is_regular_file(name_or_path, ec)) return {read_text_file(name_or_path), name_or_path};
  std::string key = std::string(folder) + "/" + name_or_path;
  if (key.size() < 5 || key.substr(key.size() - 5) != ".json") key += ".json";
  if (auto text = embedded_file(key)) return {std::string(*text), embedded_label(key)};
  // An alternative (profiles/alternatives/NAME.json: a device measured under other software) by its
  // bare name too, where no file of the folder itself has it.
  const std::string alternatives = std::string(folder) + "/" + std::string(kAlternativesFolder) + "/";
  const std::string alternative = alternatives + key.substr(folder.size() + 1);
  if (auto text = embedded_file(alternative)) return {std::string(*text), embedded_label(alternative)};
  // A shipped file named by its path in the source tree ("validation/workloads/sc21-gpt-1.7b.json", as
  // the validation cases name their workloads) reads the same from any working directory.
  if (auto text = embedded_file(name_or_path)) return {std::string(*text), embedded_label(name_or_path)};
  std::string names;
  // Only the folder's own files, then its alternatives, are names: validation/ also ships the cases'
  // workloads in validation/workloads/, which `--cases NAME` does not read.
  std::string alternative_names;
  for (const auto& f : embedded_files(folder)) {
    const auto stem = std::filesystem::path(f).stem().string();
    if (f.find('/', folder.size() + 1) == std::string::npos)
      names += (names.empty() ? "" : ", ") + stem;
    else if (f.rfind(alternatives, 0) == 0 && f.find('/', alternatives.size()) == std::string::npos)
      alternative_names += ", " + std::string(kAlternativesFolder) + "/" + stem;
  }
  names += names.empty() && !alternative_names.empty() ? alternative_names.substr(2) : alternative_names;
  // A directory or a device read as "no such file", which sent users looking for a typo.
  if (std::filesystem::exists(name_or_path, ec))
    throw InputError(name_or_path, "$",
                     "not a regular file (a directory or a device): give a JSON file, or the name of a shipped one (" +
                         names + ")");
  throw InputError(name_or_path, "$", "no such file, and not the name of a shipped one (" + names + ")");
}

}  // namespace fusesim
