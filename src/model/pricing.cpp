// Which model prices a run: the shipped profile of the cluster's device by default, the roofline on
// request, or a profile the user names. docs/calibration.md, "Which model prices a run".
#include "fusesim/model/pricing.hpp"

#include <algorithm>
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

// Reads a profile's device.model and stops: the shipped profiles are megabytes of samples after a
// device block of a few lines, and the default pricing looks at every one of them to pick one.
class DeviceModelScan final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::optional<std::string> model;

  bool null() override { return leave_value(); }
  bool boolean(bool) override { return leave_value(); }
  bool number_integer(number_integer_t) override { return leave_value(); }
  bool number_unsigned(number_unsigned_t) override { return leave_value(); }
  bool number_float(number_float_t, const string_t&) override { return leave_value(); }
  bool binary(binary_t&) override { return leave_value(); }
  bool string(string_t& value) override {
    if (depth_ == 2 && in_device_ && key_ == "model") {
      model = value;
      return false;  // found: stop reading
    }
    return leave_value();
  }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    key_ = k;
    if (depth_ == 1) device_key_ = k == "device";
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  int depth_ = 0;
  bool device_key_ = false;  // the top-level key just read is "device"
  bool in_device_ = false;   // inside the top-level "device" object
  std::string key_;

  // A value other than the device block's model: keep reading only while the device block may
  // still come.
  bool leave_value() const { return depth_ >= 1; }
  bool open(bool object) {
    if (depth_ == 0 && !object) return false;  // not a profile
    if (depth_ == 1 && device_key_) {
      if (!object) return false;
      in_device_ = true;
    }
    ++depth_;
    return true;
  }
  bool close() {
    --depth_;
    // The device block ended without a model, or the document ended without a device block.
    return !(depth_ <= 1 && in_device_) && depth_ > 0;
  }
};

std::optional<std::string> device_model_of(std::string_view text) {
  DeviceModelScan scan;
  nlohmann::json::sax_parse(text, &scan);
  return scan.model;
}

constexpr std::string_view kProfilesFolder = "profiles/";

// "profiles/h100-sxm.json" -> "h100-sxm", "profiles/alternatives/x.json" -> "alternatives/x": what
// resolve_input finds it by.
std::string profile_name(const std::string& embedded_path) {
  std::string name = embedded_path.substr(kProfilesFolder.size());
  return name.substr(0, name.size() - std::string_view(".json").size());
}

// "h800-sxm runs h100-sxm's kernels at ..." for each device model of the cluster that runs the
// profiled device's kernels (topo::KernelsAs), empty where none does.
std::string kernels_as_line(const Profile& profile, const topo::Cluster& cluster) {
  std::string out;
  for (const auto& [name, device] : cluster.device_models) {
    const topo::KernelsAs* as = kernels_as_for(profile, device);
    if (!as || std::find(cluster.rank_model.begin(), cluster.rank_model.end(), name) == cluster.rank_model.end())
      continue;
    out += fmt::format("{}{} runs {}'s kernels at {:.4g} (GEMM), {:.4g} (attention), {:.4g} (element-wise) of their "
                       "rates there",
                       out.empty() ? "" : "; ", name, profile.device_model, as->gemm.value, as->attention.value,
                       as->elementwise.value);
  }
  return out;
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

std::vector<std::string> shipped_profile_names(bool alternatives) {
  const std::string alternatives_folder = std::string(kProfilesFolder) + std::string(kAlternativesFolder) + "/";
  std::vector<std::string> defaults, others;
  for (const std::string& file : embedded_files("profiles")) {
    if (file.size() <= kProfilesFolder.size() + 5 || file.substr(file.size() - 5) != ".json") continue;
    if (file.find('/', kProfilesFolder.size()) == std::string::npos) defaults.push_back(profile_name(file));
    else if (file.starts_with(alternatives_folder) && file.find('/', alternatives_folder.size()) == std::string::npos)
      others.push_back(profile_name(file));
  }
  if (alternatives) defaults.insert(defaults.end(), others.begin(), others.end());
  return defaults;
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
    for (const std::string& name : shipped_profile_names()) {
      const auto text = embedded_file(std::string(kProfilesFolder) + name + ".json");
      if (!text) continue;
      std::optional<std::string> model = device_model_of(*text);
      if (!model) continue;
      // Two shipped profiles for one device model would make the default ambiguous; the
      // shipped-files test refuses that, and here the first in name order would win.
      by_device.emplace(std::move(*model), name);
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
  std::string out =
      fmt::format("profile {} ({}, {} {}, fnv1a64 {})", p.device_model.empty() ? p.device_name : p.device_model,
                  profile->label, p.kind, p.date, profile->digest);
  if (!kernels_as.empty()) out += "; " + kernels_as;
  for (std::size_t i = 0; i < links_applied.size(); ++i) out += (i == 0 ? "; links: " : "; ") + links_applied[i];
  return out;
}

nlohmann::json Pricing::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  j["model"] = profile ? "profile" : "roofline";
  j["profile"] = profile ? nlohmann::json(profile->label) : nlohmann::json(nullptr);
  j["profile_date"] = profile ? nlohmann::json(profile->profile.date) : nlohmann::json(nullptr);
  j["profile_digest"] = profile ? nlohmann::json(profile->digest) : nlohmann::json(nullptr);
  j["reason"] = reason;
  j["links_applied"] = links_applied;
  if (!kernels_as.empty()) j["kernels_as"] = kernels_as;  // only where it applies: other reports keep their bytes
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
      pricing.links_applied = apply_profile(pricing.profile->profile, cluster);
      pricing.kernels_as = kernels_as_line(pricing.profile->profile, cluster);
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
  const topo::DeviceModel& device = cluster.device_models.at(device_model);
  // A profile of the device itself first, else one of the device whose kernels it runs (kernels_as).
  std::optional<std::string> shipped = profiles.shipped_for(device_model);
  if (!shipped && device.kernels_as) shipped = profiles.shipped_for(device.kernels_as->device_model);
  if (!shipped) {
    pricing.reason = device.kernels_as ? fmt::format("no shipped profile for device model '{}' nor for '{}', whose "
                                                     "kernels it runs",
                                                     device_model, device.kernels_as->device_model)
                                       : fmt::format("no shipped profile for device model '{}'", device_model);
    pricing.costs = std::make_unique<RooflineCostModel>();
    return pricing;
  }
  pricing.profile = profiles.load(*shipped);
  check_profile_device(pricing.profile->profile, device);
  pricing.kernels_as = kernels_as_line(pricing.profile->profile, cluster);
  pricing.costs = std::make_unique<CalibratedCostModel>(pricing.profile->profile);
  return pricing;
}

}  // namespace fusesim::model
