#include "fusesim/cli/overrides.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusesim/cli/app.hpp"
#include "fusesim/cli/simulate.hpp"

namespace fusesim::cli {

std::optional<std::int64_t> WorkloadOverride::requested(const SimulateRequest& r) const {
  if (wide != nullptr) return r.*wide;
  if (const std::optional<int>& v = r.*narrow) return *v;
  return std::nullopt;
}

void WorkloadOverride::request(SimulateRequest& r, std::int64_t value) const {
  if (wide != nullptr) {
    r.*wide = value;
  } else {
    r.*narrow = static_cast<int>(value);
  }
}

bool WorkloadOverride::names(const std::string& path) const {
  if (path.size() < json_path.size() || path.compare(0, json_path.size(), json_path) != 0) return false;
  return path.size() == json_path.size() || path[json_path.size()] == '.' || path[json_path.size()] == '[';
}

const std::vector<WorkloadOverride>& workload_overrides() {
  // Bounds: a sequence of up to 2^30 tokens; counts of samples, micro-batches, data-parallel replicas
  // and slices up to 2^20; tensor, Ulysses and pipeline degrees up to 2^16 (a degree is at most the
  // cluster's ranks, which the cluster's own checks bound further).
  using W = model::Workload;
  using R = SimulateRequest;
  static const std::vector<WorkloadOverride> table{
      {"--seq", "sequence_length", "$.training.sequence_length", "sequence length", std::int64_t{1} << 30,
       &R::sequence_length, nullptr, [](const W& w) { return w.sequence_length; },
       [](W& w, std::int64_t v) { w.sequence_length = v; }},
      {"--micro-batch", "micro_batch", "$.training.micro_batch", "micro-batch (samples)", std::int64_t{1} << 20,
       &R::micro_batch, nullptr, [](const W& w) { return w.micro_batch; },
       [](W& w, std::int64_t v) { w.micro_batch = v; }},
      {"--grad-accumulation", "grad_accumulation", "$.training.grad_accumulation",
       "gradient accumulation (micro-batches per step)", std::int64_t{1} << 20, &R::grad_accumulation, nullptr,
       [](const W& w) { return w.grad_accumulation; }, [](W& w, std::int64_t v) { w.grad_accumulation = v; }},
      {"--tp", "tp", "$.parallel.tp", "tensor-parallel degree", std::int64_t{1} << 16, nullptr, &R::tp,
       [](const W& w) { return std::int64_t{w.parallel.tp}; },
       [](W& w, std::int64_t v) { w.parallel.tp = static_cast<int>(v); }},
      {"--up", "up", "$.parallel.up", "Ulysses degree", std::int64_t{1} << 16, nullptr, &R::up,
       [](const W& w) { return std::int64_t{w.parallel.up}; },
       [](W& w, std::int64_t v) { w.parallel.up = static_cast<int>(v); }},
      {"--pp", "pp", "$.parallel.pp", "pipeline-parallel degree (stages)", std::int64_t{1} << 16, nullptr, &R::pp,
       [](const W& w) { return std::int64_t{w.parallel.pp}; },
       [](W& w, std::int64_t v) { w.parallel.pp = static_cast<int>(v); }},
      {"--dp", "dp", "$.parallel.dp", "data-parallel degree", std::int64_t{1} << 20, nullptr, &R::dp,
       [](const W& w) { return std::int64_t{w.parallel.dp}; },
       [](W& w, std::int64_t v) { w.parallel.dp = static_cast<int>(v); }},
      {"--slices", "slices", "$.schedule.slices", "k of slice-overlap", std::int64_t{1} << 20, nullptr, &R::slices,
       [](const W& w) { return std::int64_t{w.schedule.slices}; },
       [](W& w, std::int64_t v) { w.schedule.slices = static_cast<int>(v); }},
  };
  return table;
}

bool NamedOverride::known(const std::string& value) const {
  return std::find(names.begin(), names.end(), value) != names.end();
}

std::string NamedOverride::unknown(const std::string& value) const {
  return fmt::format("'{}' is not one of {}", value, fmt::join(names, ", "));
}

bool NamedOverride::blamed_for(const std::string& path) const {
  return std::find(json_paths.begin(), json_paths.end(), path) != json_paths.end();
}

const std::vector<NamedOverride>& named_overrides() {
  using model::DpSharding;
  using W = model::Workload;
  static const std::vector<NamedOverride> table{
      {"--recompute",
       "recompute",
       {"$.training.recompute", "$.training.recompute_every"},
       "activation recomputation",
       &SimulateRequest::recompute,
       model::names_of(model::all_recomputes()),
       [](const W& w) { return model::to_string(w.recompute); },
       [](W& w, const std::string& v) { w.recompute = model::value_named(v, model::all_recomputes()); }},
      {"--zero",
       "dp_sharding",
       {"$.parallel.dp_sharding", "$.parallel.overlap_param_gather", "$.training.fp8_param_gather"},
       "DP sharding (ZeRO stage)",
       &SimulateRequest::dp_sharding,
       model::names_of(model::all_dp_shardings()),
       [](const W& w) { return model::to_string(w.parallel.dp_sharding); },
       [](W& w, const std::string& v) {
         const DpSharding z = model::value_named(v, model::all_dp_shardings());
         w.parallel.dp_sharding = z;
         w.parallel.overlap_param_gather =
             w.parallel.overlap_param_gather && (z == DpSharding::zero1 || z == DpSharding::zero2);
         w.fp8_param_gather = w.fp8_param_gather && z == DpSharding::zero3;
       }},
  };
  return table;
}

const NamedOverride& named_override(std::string_view option) {
  for (const NamedOverride& o : named_overrides())
    if (o.option == option) return o;
  throw std::out_of_range("no named override " + std::string(option));
}

const WorkloadOverride& workload_override(std::string_view option) {
  for (const WorkloadOverride& o : workload_overrides())
    if (o.option == option) return o;
  throw std::out_of_range("no workload override " + std::string(option));
}

void parse_overrides(const std::map<std::string, std::string>& text_by_option, SimulateRequest& r) {
  for (const WorkloadOverride& o : workload_overrides()) {
    const std::string option(o.option);
    if (const auto it = text_by_option.find(option); it != text_by_option.end() && !it->second.empty())
      o.request(r, parse_positive_int(option, it->second, static_cast<int>(o.max)));
  }
  for (const NamedOverride& o : named_overrides()) {
    const std::string option(o.option);
    if (const auto it = text_by_option.find(option); it != text_by_option.end() && !it->second.empty()) {
      if (!o.known(it->second)) throw InputError(kCommandLine, option, o.unknown(it->second));
      r.*o.field = it->second;
    }
  }
}

void check_overrides(const SimulateRequest& r) {
  for (const WorkloadOverride& o : workload_overrides())
    if (const std::optional<std::int64_t> v = o.requested(r); v && (*v < 1 || *v > o.max))
      throw InputError(kCommandLine, std::string(o.option),
                       fmt::format("value {} is outside the allowed range [1, {}]", *v, o.max));
  for (const NamedOverride& o : named_overrides())
    if (const std::optional<std::string>& v = r.*o.field; v && !o.known(*v))
      throw InputError(kCommandLine, std::string(o.option), o.unknown(*v));
}

void set_overrides(const SimulateRequest& r, model::Workload& w) {
  for (const WorkloadOverride& o : workload_overrides())
    if (const std::optional<std::int64_t> v = o.requested(r)) o.set(w, *v);
  for (const NamedOverride& o : named_overrides())
    if (const std::optional<std::string>& v = r.*o.field) o.set(w, *v);
}

bool any_override(const SimulateRequest& r) {
  for (const WorkloadOverride& o : workload_overrides())
    if (o.requested(r)) return true;
  for (const NamedOverride& o : named_overrides())
    if (r.*o.field) return true;
  return false;
}

[[noreturn]] void rethrow_for_overrides(const InputError& e, const SimulateRequest& r, const std::string& workload) {
  const std::string& path = e.json_path();
  const auto blame = [&](std::string_view option) {
    throw InputError(kCommandLine, std::string(option), fmt::format("{} (workload {})", e.message(), workload));
  };
  for (const WorkloadOverride& o : workload_overrides())
    if (o.requested(r) && o.names(path)) blame(o.option);
  for (const NamedOverride& o : named_overrides())
    if (r.*o.field && o.blamed_for(path)) blame(o.option);
  if ((path == "$.parallel.pp_schedule" || path == "$.parallel.virtual_stages") && r.pp_schedule)
    blame("--pp-schedule");
  if (path.rfind("$.parallel", 0) == 0) {
    for (const WorkloadOverride& o : workload_overrides())
      if (o.requested(r) && o.json_path.rfind("$.parallel", 0) == 0) blame(o.option);
    for (const NamedOverride& o : named_overrides())
      if (r.*o.field && o.json_paths.front().rfind("$.parallel", 0) == 0) blame(o.option);
  }
  if (path.rfind("$.schedule.slices", 0) == 0 && r.sequence_length) blame("--seq");
  throw e;
}

}  // namespace fusesim::cli
