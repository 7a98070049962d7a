#pragma once
// The shipped topologies/ and workloads/ files, compiled into the binary so that fusesim runs with no
// files beside it. Keys are paths relative to the source tree: "topologies/dgx-h100.json".
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fusesim {

std::optional<std::string_view> embedded_file(std::string_view relative_path);
// The label of a shipped file in errors and reports, "<embedded:topologies/dgx-h100.json>", and back:
// the relative path a label names, or nothing for another label (a file's path).
std::string embedded_label(std::string_view relative_path);
std::optional<std::string> embedded_path(std::string_view label);
// Relative paths of the embedded files under a folder ("topologies"), sorted.
std::vector<std::string> embedded_files(std::string_view folder);

// A folder's subfolder of alternatives: shipped files named "alternatives/NAME" (or NAME alone, where
// the folder itself has none of that name) that no automatic choice takes (profiles/alternatives/:
// a device measured under other software, docs/calibration.md "Which software a profile prices").
inline constexpr std::string_view kAlternativesFolder = "alternatives";

// A JSON argument: an existing path, else the stem of a shipped file in `folder`
// ("dgx-h100" -> topologies/dgx-h100.json) or of its alternatives, else a shipped file's path in the
// source tree ("validation/workloads/mpt-7b-seq2048-8xh100-bf16.json"). Returns the text and the label
// to use in errors.
struct ResolvedInput {
  std::string text;
  std::string label;
};
ResolvedInput resolve_input(const std::string& name_or_path, std::string_view folder);

}  // namespace fusesim
