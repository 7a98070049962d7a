#pragma once
// The overrides of a workload that the commands share, integers (--seq, --tp, ...) and names
// (--recompute, --zero): simulate's and generate's options, the request fields a sweep configuration
// or a check entry sets, the sweep's configuration columns and check's entry keys. One row per
// override, so that adding one is adding a row: every command parses it with the same bound or names,
// applies it the same way and, when the workload it makes is refused, names the option instead of the
// file (rethrow_for_overrides).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fusesim/model/workload.hpp"
#include "fusesim/util/error.hpp"

namespace fusesim::cli {

struct SimulateRequest;  // cli/simulate.hpp

struct WorkloadOverride {
  std::string_view option;     // "--seq": the command line's name, and the culprit in errors
  std::string_view key;        // "sequence_length": check's entry key and the sweep's column
  std::string_view json_path;  // "$.training.sequence_length": the workload key it replaces
  std::string_view what;       // "sequence length", for help texts
  std::int64_t max = 0;        // the largest value any command takes (the least is 1)
  // The request's field, one of the two (a count of tokens or samples, or a degree).
  std::optional<std::int64_t> SimulateRequest::*wide = nullptr;
  std::optional<int> SimulateRequest::*narrow = nullptr;
  std::int64_t (*get)(const model::Workload&) = nullptr;
  void (*set)(model::Workload&, std::int64_t) = nullptr;

  std::optional<std::int64_t> requested(const SimulateRequest& r) const;
  void request(SimulateRequest& r, std::int64_t value) const;  // value within [1, max]
  // The error's JSON path is this override's key, or a key below it.
  bool names(const std::string& json_path) const;
};

// In the order of the sweep's configuration columns and of check's entry keys (--update writes
// them so): sequence_length, micro_batch, grad_accumulation, tp, up, pp, dp, slices.
const std::vector<WorkloadOverride>& workload_overrides();
// The row of an option ("--tp"); std::out_of_range if there is none.
const WorkloadOverride& workload_override(std::string_view option);

// The overrides of a workload that take a name: --recompute ($.training.recompute) and --zero
// ($.parallel.dp_sharding), in the order of the sweep's columns and check's keys (recompute,
// dp_sharding). A ZeRO stage that cannot carry the workload's overlapped parameter gather (ZeRO-1/2
// only) or fp8 gather (ZeRO-3 only) turns that gather off, as `fusesim search` does.
struct NamedOverride {
  std::string_view option;                 // "--recompute"
  std::string_view key;                    // "recompute": check's entry key and the sweep's column
  std::vector<std::string_view> json_paths;  // the workload keys an error blames it for, the first its own
  std::string_view what;                   // for help texts
  std::optional<std::string> SimulateRequest::*field = nullptr;
  std::vector<std::string> names;          // the values it takes, as the workload files spell them
  std::string (*get)(const model::Workload&) = nullptr;
  void (*set)(model::Workload&, const std::string&) = nullptr;  // a value of `names`

  bool known(const std::string& value) const;
  // "'x' is not one of none, selective, full, op"
  std::string unknown(const std::string& value) const;
  bool blamed_for(const std::string& json_path) const;
};
const std::vector<NamedOverride>& named_overrides();
const NamedOverride& named_override(std::string_view option);  // std::out_of_range if none

// The command line's text of each override's option, by option name ("--tp"), parsed into the request
// within the table's bounds (an empty text: not given).
void parse_overrides(const std::map<std::string, std::string>& text_by_option, SimulateRequest& r);

// Each requested override within its bounds or names; InputError naming the option otherwise.
void check_overrides(const SimulateRequest& r);

// The requested overrides written into the workload (values as check_overrides allows them).
void set_overrides(const SimulateRequest& r, model::Workload& w);
bool any_override(const SimulateRequest& r);

// An override that makes the workload invalid is the command line's fault, not the file's: the
// error names the option (--pp-schedule for the pipeline schedule's keys; a parallel degree for
// another $.parallel key the degrees may have broken, such as the product of the degrees; --seq for
// slices that no longer divide the sequence). Errors at keys no override touched pass unchanged.
[[noreturn]] void rethrow_for_overrides(const InputError& e, const SimulateRequest& r, const std::string& workload);

}  // namespace fusesim::cli
