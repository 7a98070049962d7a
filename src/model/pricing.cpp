// Which model prices a run: the shipped profile of the cluster's device by default, the roofline on
// request, or a profile the user names. docs/calibration.md, "Which model prices a run".
#include "fusesim/model/pricing.hpp"

#include <set>
#include <utility>

#include <fmt/format.h>

#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"

namespace fusesim::model {
namespace {

std::shared_ptr<const LoadedProfile> read_profile(const std::string& name_or_path) {
  const ResolvedInput in = resolve_input(name_or_path, "profiles");
  auto loaded = std::make_shared<LoadedProfile>();
  loaded->profile = parse_profile(JsonDocument::parse(in.text, in.label));
  loaded->label = in.label;
  loaded->digest = fnv1a64_hex(in.text);
  return loaded;
}

std::string stem(const std::string& relative_path) {
  const auto slash = relative_path.rfind('/');
  const std::string name = slash == std::string::npos ? relative_path : relative_path.substr(slash + 1);
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

}  // namespace

// FNV-1a: std::hash would differ between standard libraries, and a version mark must not.
std::string fnv1a64_hex(std::string_view text) {
  std::uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

PricingChoice pricing_choice(const std::string& profile_option, bool roofline_flag) {
  if (roofline_flag && !profile_option.empty())
    throw InputError("<command line>", "--roofline",
                     "--roofline and --profile exclude each other (the roofline prices kernels without a profile)");
  if (roofline_flag) return {PricingMode::roofline, ""};
  if (!profile_option.empty()) return {PricingMode::profile, profile_option};
  return {};
}

std::shared_ptr<const LoadedProfile> ProfileCache::load(const std::string& name_or_path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = loaded_[name_or_path];
  if (!slot) slot = read_profile(name_or_path);
  return slot;
}

std::optional<std::string> ProfileCache::shipped_for(const std::string& device_model) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!shipped_by_device_) {
    // Only the device block of each shipped profile is looked at here; the chosen one is parsed
    // whole (and fitted) by load().
    std::map<std::string, std::string> by_device;
    for (const std::string& file : embedded_files("profiles")) {
      const auto text = embedded_file(file);
      if (!text) continue;
      const nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
      if (!doc.is_object() || !doc.contains("device") || !doc["device"].is_object()) continue;
      const auto& device = doc["device"];
      if (!device.contains("model") || !device["model"].is_string()) continue;
      // Two shipped profiles for one device model would make the default ambiguous; the
      // shipped-files test refuses that, and here the first in name order would win.
      by_device.emplace(device["model"].get<std::string>(), stem(file));
    }
    shipped_by_device_ = std::move(by_device);
  }
  const auto it = shipped_by_device_->find(device_model);
  if (it == shipped_by_device_->end()) return std::nullopt;
  return it->second;
}

std::string Pricing::describe() const {
  if (!profile) return reason.empty() ? "roofline (--roofline)" : "roofline (" + reason + ")";
  const Profile& p = profile->profile;
  return fmt::format("profile {} ({}, {} {}, fnv1a64 {})", p.device_model.empty() ? p.device_name : p.device_model,
                     profile->label, p.kind, p.date, profile->digest);
}

nlohmann::json Pricing::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  j["model"] = profile ? "profile" : "roofline";
  j["profile"] = profile ? nlohmann::json(profile->label) : nlohmann::json(nullptr);
  j["profile_date"] = profile ? nlohmann::json(profile->profile.date) : nlohmann::json(nullptr);
  j["profile_digest"] = profile ? nlohmann::json(profile->digest) : nlohmann::json(nullptr);
  j["reason"] = reason;
  return j;
}

Pricing pricing_for(const PricingChoice& choice, topo::Cluster& cluster, ProfileCache* cache) {
  ProfileCache local;
  ProfileCache& profiles = cache ? *cache : local;
  Pricing pricing;
  switch (choice.mode) {
    case PricingMode::roofline:
      pricing.costs = std::make_unique<RooflineCostModel>();
      return pricing;
    case PricingMode::profile:
      pricing.profile = profiles.load(choice.profile);
      apply_profile(pricing.profile->profile, cluster);
      pricing.costs = std::make_unique<CalibratedCostModel>(pricing.profile->profile);
      return pricing;
    case PricingMode::automatic:
      break;
  }
  const std::set<std::string> models(cluster.rank_model.begin(), cluster.rank_model.end());
  if (models.size() != 1) {
    pricing.reason = "the cluster mixes device models; a shipped profile describes one";
    pricing.costs = std::make_unique<RooflineCostModel>();
    return pricing;
  }
  const std::string& device_model = *models.begin();
  const std::optional<std::string> shipped = profiles.shipped_for(device_model);
  if (!shipped) {
    pricing.reason = fmt::format("no shipped profile for device model '{}'", device_model);
    pricing.costs = std::make_unique<RooflineCostModel>();
    return pricing;
  }
  pricing.profile = profiles.load(*shipped);
  check_profile_device(pricing.profile->profile, cluster.device_models.at(device_model));
  pricing.costs = std::make_unique<CalibratedCostModel>(pricing.profile->profile);
  return pricing;
}

}  // namespace fusesim::model
