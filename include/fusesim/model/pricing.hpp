#pragma once
// Which model prices a run's kernels (docs/calibration.md, "Which model prices a run"). By default a
// cluster whose device model has a shipped calibration profile is priced by it; `--roofline` asks for
// the roofline of docs/kernel-model.md, `--profile` for a profile of the user's. Every report names
// what priced it, with the profile's version (its date and a digest of its text), so that two
// reports can be compared knowing whether the same measurements stood behind them.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/model/kernel.hpp"
#include "fusesim/model/profile.hpp"
#include "fusesim/topo/cluster.hpp"

namespace fusesim::model {

enum class PricingMode {
  automatic,  // the shipped profile of the cluster's device model when there is one, else the roofline
  roofline,   // --roofline
  profile,    // --profile FILE|NAME
};

struct PricingChoice {
  PricingMode mode = PricingMode::automatic;
  std::string profile;  // mode == profile: a path or a shipped name
};

// The command-line pair --profile / --roofline as a choice; InputError ("<command line>") when both
// are given.
PricingChoice pricing_choice(const std::string& profile_option, bool roofline_flag);

// FNV-1a 64 of `text` as 16 hex digits: the profile version mark (stable across machines and builds).
std::string fnv1a64_hex(std::string_view text);

// The shipped profiles' names (for ProfileCache::load): first those the automatic choice picks among,
// one per device model (profiles/NAME.json, named NAME), then, with `alternatives`, the others
// (profiles/alternatives/NAME.json, named "alternatives/NAME": a device also measured under other
// software, docs/calibration.md "Which software a profile prices"), each part in name order.
std::vector<std::string> shipped_profile_names(bool alternatives = false);

// A loaded profile with what identifies its version.
struct LoadedProfile {
  Profile profile;
  std::string label;   // the file, or <embedded:profiles/NAME.json>
  std::string digest;  // FNV-1a 64 of the file's bytes, 16 hex digits
};

// Profiles loaded (and fitted) once and shared by every run that names them: a sweep prices
// thousands of configurations with the same few profiles. Thread-safe.
class ProfileCache {
 public:
  std::shared_ptr<const LoadedProfile> load(const std::string& name_or_path);
  // The shipped profile whose device.model is `device_model` (its name for load()), if any; the
  // alternatives are never chosen here (shipped_profile_names).
  std::optional<std::string> shipped_for(const std::string& device_model);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const LoadedProfile>> loaded_;
  std::optional<std::map<std::string, std::string>> shipped_by_device_;  // device model -> shipped name
};

struct Pricing {
  std::unique_ptr<KernelCostModel> costs;
  std::shared_ptr<const LoadedProfile> profile;  // null: the roofline
  std::string reason;  // why the roofline, when it prices an automatic run (no shipped profile ...)
  // What an explicitly named profile set in the cluster's links (apply_profile), one line each.
  std::vector<std::string> links_applied;
  // Where the cluster's device runs the profiled device's kernels (topo::KernelsAs): at which rates.
  std::string kernels_as;

  // "profile h100-sxm (<embedded:profiles/h100-sxm.json>, 2026-11-24, fnv1a64 0123...)" or "roofline
  // ...", then "; links: ..." when the profile set some.
  std::string describe() const;
  // {"model": "profile"|"roofline", "profile": label|null, "profile_date", "profile_digest", "reason",
  //  "links_applied": [...]}.
  nlohmann::json to_json() const;
};

// The cost model for `choice` on `cluster`. An explicitly named profile is checked against the
// cluster's devices and its fitted links are applied to the cluster (apply_profile), as a profile
// measured on the user's machine describes that machine's links. A shipped profile chosen
// automatically prices kernels only: the shipped topologies' communication constants were set from
// the same published figures, and a cluster of the user's keeps the links it describes.
// `cache` may be null (the profile is then loaded for this call alone).
Pricing pricing_for(const PricingChoice& choice, topo::Cluster& cluster, ProfileCache* cache = nullptr);

}  // namespace fusesim::model
