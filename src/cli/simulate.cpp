#include "fusesim/cli/simulate.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <future>
#include <optional>

#include <fmt/format.h>

#include "fusesim/analysis/chrome_trace.hpp"
#include "fusesim/cli/app.hpp"
#include "fusesim/cli/overrides.hpp"
#include "fusesim/model/kernel.hpp"
#include "fusesim/model/profile.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"

namespace fusesim::cli {
namespace {

std::vector<std::string> split_commas(const std::string& value) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (true) {
    const auto comma = value.find(',', pos);
    out.push_back(value.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void apply_overrides(const SimulateRequest& r, model::Workload& w, const std::string& wl) {
  check_overrides(r);
  set_overrides(r, w);
  if (r.pp_schedule) {
    const auto schedule = model::pipeline_schedule_named(*r.pp_schedule);
    if (!schedule)
      throw InputError(kCommandLine, "--pp-schedule",
                       fmt::format("'{}' is not 1f1b, interleaved or zb-h1", *r.pp_schedule));
    w.parallel.pp_schedule = *schedule;
    if (*schedule != model::PipelineSchedule::interleaved) w.parallel.virtual_stages = 1;
  }
  if (r.engine) model::set_engine_mode(w.schedule, parse_engine_mode("--engine", *r.engine));
  if (!any_override(r) && !r.pp_schedule) return;
  try {
    model::validate_workload(w, wl);
  } catch (const InputError& e) {
    rethrow_for_overrides(e, r, wl);
  }
}

}  // namespace

std::vector<model::ScheduleKind> parse_schedules(const std::string& value) {
  using model::ScheduleKind;
  if (value == "all") return model::all_schedule_kinds();
  std::vector<ScheduleKind> out;
  for (const std::string& name : split_commas(value)) {
    bool found = false;
    for (ScheduleKind k : model::all_schedule_kinds()) {
      if (model::to_string(k) == name) {
        if (std::find(out.begin(), out.end(), k) != out.end())
          throw InputError(kCommandLine, "--schedule", fmt::format("'{}' is given twice", name));
        out.push_back(k);
        found = true;
      }
    }
    if (!found)
      throw InputError(kCommandLine, "--schedule",
                       fmt::format("'{}' is not one of {}, all (or a comma list)", name,
                                   fmt::join(model::schedule_names(), ", ")));
  }
  return out;
}

std::vector<sched::Scope> parse_scopes(const std::string& value) {
  if (value == "layer") return {sched::Scope::layer};
  if (value == "stack") return {sched::Scope::stack};
  if (value == "both") return {sched::Scope::layer, sched::Scope::stack};
  if (value == "step") return {sched::Scope::step};
  throw InputError(kCommandLine, "--scope", fmt::format("'{}' is not one of layer, stack, both, step", value));
}

std::vector<sched::Parallelism> parse_parallelisms(const std::string& value) {
  if (value == "all") return {};  // every parallelism the workload uses: parallelisms_for decides
  std::vector<sched::Parallelism> out;
  for (const std::string& name : split_commas(value)) {
    const std::optional<sched::Parallelism> p = sched::parse_parallelism(name);
    // custom names a user's graph, pp the stage transfers: neither has schedules to compare
    if (!p || *p == sched::Parallelism::custom || *p == sched::Parallelism::pp)
      throw InputError(kCommandLine, "--parallelism",
                       fmt::format("'{}' is not one of tpsp, up, dp, all (or a comma list)", name));
    if (std::find(out.begin(), out.end(), *p) != out.end())
      throw InputError(kCommandLine, "--parallelism", fmt::format("'{}' is given twice", name));
    out.push_back(*p);
  }
  return out;
}

std::vector<sched::Parallelism> parallelisms_for(const SimulateRequest& request, const model::Workload& w) {
  using sched::Parallelism;
  if (!request.parallelisms.empty()) {
    // A parallelism the workload does not use has no communication to schedule: its three rows would
    // be the same run three times, under a name that suggests a comparison.
    for (Parallelism p : request.parallelisms) {
      const bool used = p == Parallelism::tpsp ? w.parallel.tp > 1
                        : p == Parallelism::up ? w.parallel.up > 1
                                               : w.parallel.up * w.parallel.dp > 1;
      if (!used)
        throw InputError(kCommandLine, "--parallelism",
                         fmt::format("'{}' has nothing to schedule: workload '{}' runs tp {} up {} dp {} ({})",
                                     sched::to_string(p), w.name, w.parallel.tp, w.parallel.up, w.parallel.dp,
                                     p == Parallelism::tpsp ? "tpsp needs tp > 1"
                                     : p == Parallelism::up ? "up needs up > 1"
                                                            : "dp needs a gradient sync: dp > 1, or up > 1"));
    }
    return request.parallelisms;
  }
  std::vector<Parallelism> out;
  if (w.parallel.tp > 1) out.push_back(Parallelism::tpsp);
  if (w.parallel.up > 1) out.push_back(Parallelism::up);
  if (w.parallel.dp > 1) out.push_back(Parallelism::dp);
  if (out.empty()) out.push_back(Parallelism::tpsp);
  return out;
}

std::string parse_engine_mode(const std::string& option, const std::string& value) {
  if (std::find(model::kEngineModes.begin(), model::kEngineModes.end(), value) == model::kEngineModes.end())
    throw InputError(kCommandLine, option,
                     fmt::format("'{}' is not sm (collectives and P2P on SM kernels), copy (both on copy engines) or "
                                 "auto (collectives on SM kernels, P2P on copy engines)",
                                 value));
  return value;
}

OutputFormat parse_format(const std::string& value) {
  if (value == "table") return OutputFormat::table;
  if (value == "json") return OutputFormat::json;
  throw InputError(kCommandLine, "--format", fmt::format("'{}' is not one of table, json", value));
}

int parse_positive_int(const std::string& option, const std::string& value, int max) {
  int v = 0;
  const char* first = value.data();
  const char* last = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(first, last, v);
  if (value.empty() || ec != std::errc() || ptr != last)
    throw InputError(kCommandLine, option, fmt::format("'{}' is not an integer", value));
  if (v < 1 || v > max)
    throw InputError(kCommandLine, option, fmt::format("value {} is outside the allowed range [1, {}]", v, max));
  return v;
}

void apply_symmetry(const std::string& value, SimulateRequest& request) {
  if (value != "none" && value != "p2p" && value != "mirror")
    throw InputError(kCommandLine, "--symmetry", fmt::format("'{}' is not none, p2p or mirror", value));
  request.dp_as_p2p = value == "p2p";
  request.mirror_dp = value == "mirror";
}

std::set<int> parse_index_list(const std::string& option, const std::string& value, int max) {
  std::set<int> out;
  auto number = [&](std::string_view text) {
    int v = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || ptr != text.data() + text.size())
      throw InputError(kCommandLine, option,
                       fmt::format("'{}' is not an index, a range A-B or a comma list of them", std::string(text)));
    if (v < 0 || v > max)
      throw InputError(kCommandLine, option, fmt::format("value {} is outside the allowed range [0, {}]", v, max));
    return v;
  };
  const std::string_view all(value);
  std::size_t pos = 0;
  while (true) {
    const std::size_t comma = all.find(',', pos);
    const std::string_view item = all.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    const std::size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      out.insert(number(item));
    } else {
      const int a = number(item.substr(0, dash)), b = number(item.substr(dash + 1));
      if (a > b) throw InputError(kCommandLine, option, fmt::format("range {}-{} is empty (write the lower end first)", a, b));
      for (int i = a; i <= b; ++i) out.insert(i);
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

analysis::TraceFilter parse_trace_filter(const std::string& trace, const std::string& ranks, const std::string& layers) {
  analysis::TraceFilter filter;
  // 1 << 24: far above any cluster or model; the real bound is checked once they are loaded.
  if (!ranks.empty()) filter.ranks = parse_index_list("--trace-ranks", ranks, 1 << 24);
  if (!layers.empty()) filter.layers = parse_index_list("--trace-layers", layers, 1 << 24);
  if (trace.empty() && (filter.ranks || filter.layers))
    throw InputError(kCommandLine, filter.ranks ? "--trace-ranks" : "--trace-layers", "needs --trace FILE");
  return filter;
}

void check_trace_filter(const analysis::TraceFilter& filter, const topo::Cluster& cluster, std::int64_t layers) {
  if (filter.ranks && !filter.ranks->empty() && *filter.ranks->rbegin() >= cluster.num_ranks())
    throw InputError(kCommandLine, "--trace-ranks",
                     fmt::format("rank {} is outside the cluster's ranks [0, {}] ({})", *filter.ranks->rbegin(),
                                 cluster.num_ranks() - 1, cluster.name));
  if (layers > 0 && filter.layers && !filter.layers->empty() && *filter.layers->rbegin() >= layers)
    throw InputError(kCommandLine, "--trace-layers",
                     fmt::format("layer {} is outside the workload's layers [0, {}]", *filter.layers->rbegin(),
                                 layers - 1));
}

PreparedJob prepare_job(const SimulateRequest& request) {
  PreparedJob job{topo::load_cluster_by_name_or_path(request.topology), model::load_workload(request.workload),
                  resolve_input(request.topology, "topologies").label,
                  resolve_input(request.workload, "workloads").label, model::MemoryReport{}};
  model::Workload& w = job.workload;
  const std::string& wl = job.workload_label;
  apply_overrides(request, w, wl);
  // The file's schedule.kind may not be slice, so its checks of `slices` have not run yet; run them
  // now rather than after the other schedules were simulated.
  if (std::find(request.schedules.begin(), request.schedules.end(), model::ScheduleKind::slice) !=
      request.schedules.end()) {
    model::Workload probe = w;
    probe.schedule.kind = model::ScheduleKind::slice;
    try {
      model::validate_workload(probe, wl);
    } catch (const InputError& e) {
      rethrow_for_overrides(e, request, wl);
    }
  }
  if (request.forward_only) w.backward = false;
  try {
    model::check_fits(w, wl, job.cluster);
    // Memory per rank for the schedules to run and the file's own (which runs the parallelisms not
    // compared); refused when over the device memory unless forced (docs/memory.md).
    std::vector<model::ScheduleKind> kinds = request.schedules;
    kinds.push_back(w.schedule.kind);
    job.memory = model::memory_per_rank(w, job.cluster, kinds);
    if (!request.force_memory) model::check_memory(job.memory, w, wl);
  } catch (const InputError& e) {
    rethrow_for_overrides(e, request, wl);
  }
  return job;
}

SimulateReport simulate(const SimulateRequest& request) {
  PreparedJob job = prepare_job(request);
  const topo::Cluster& cluster = job.cluster;
  model::Workload& w = job.workload;
  const std::string& wl = job.workload_label;
  SimulateReport report;
  report.topology_label = job.topology_label;
  report.workload_label = job.workload_label;
  report.cluster_name = cluster.name;
  report.memory = job.memory;

  if (request.record_traces) {
    check_trace_filter(request.trace_filter, cluster, w.arch.layers);
    // A layer-scope graph holds layer 0 alone: another layer would give a trace with no layer in it.
    const bool layer_scope_only = std::all_of(request.scopes.begin(), request.scopes.end(),
                                              [](sched::Scope s) { return s == sched::Scope::layer; });
    const auto& layers = request.trace_filter.layers;
    if (layer_scope_only && layers && !layers->empty() && *layers->rbegin() > 0)
      throw InputError(kCommandLine, "--trace-layers",
                       fmt::format("layer {}: --scope layer simulates layer 0 alone; trace layer {} with --scope stack",
                                   *layers->rbegin(), *layers->rbegin()));
  }
  // The default pricing reads the cluster and nothing else, and the generators price nothing: the
  // shipped profile (parsed and its kernel models rebuilt, tens of milliseconds at every start) is
  // read on a second thread while the first graph is built. An explicit profile sets the cluster's
  // links (apply_profile), so it is read before.
  std::future<model::Pricing> pending;
  std::optional<model::Pricing> pricing;
  if (request.pricing.mode == model::PricingMode::automatic)
    pending = std::async(std::launch::async,
                         [&] { return model::pricing_for(request.pricing, job.cluster, request.profiles.get()); });
  else
    pricing = model::pricing_for(request.pricing, job.cluster, request.profiles.get());
  std::optional<sim::Simulator> simulator;
  const auto priced = [&]() -> const model::KernelCostModel& {
    if (!pricing) pricing = pending.get();
    if (!simulator) {
      if (pricing->profile) report.profile_label = pricing->profile->label;
      report.pricing = pricing->describe();
      report.pricing_json = pricing->to_json();
      simulator.emplace(cluster, *pricing->costs);
      // The analysis reads P2P records alone; a trace sees every step through its observer.
      simulator->set_transfer_records(sim::TransferRecords::p2p_only);
    }
    return *pricing->costs;
  };
  std::int64_t network_sends_on_sm = 0;
  std::optional<sim::TreeAllReduce> best_tree_all_reduce;
  // Whatever fails before the pricing is taken reports the pricing's error first, if it has one, as
  // when the pricing was read before anything else.
  try {
    // A pipeline passes micro-batches between stages: only a whole step has them. The default scopes
    // (layer and stack) become the step; a scope asked for by name is refused by the generator.
    std::vector<sched::Scope> scopes = request.scopes;
    if (w.parallel.pp > 1 && scopes == std::vector<sched::Scope>{sched::Scope::layer, sched::Scope::stack}) {
      scopes = {sched::Scope::step};
      report.notes.push_back(fmt::format("pp {}: the whole step is simulated (a pipeline has no layer or stack scope)",
                                         w.parallel.pp));
    }
    report.scopes = scopes;
    std::vector<sched::Parallelism> parallelisms = parallelisms_for(request, w);
    if (request.max_parallelisms > 0 && parallelisms.size() > request.max_parallelisms)
      parallelisms.resize(request.max_parallelisms);
    for (sched::Parallelism parallelism : parallelisms)
    for (sched::Scope scope : scopes) {
      for (model::ScheduleKind kind : request.schedules) {
        sched::GenerateOptions options;
        options.parallelism = parallelism;
        options.scope = scope;
        options.forward = true;
        options.backward = w.backward;
        options.dp_as_p2p = request.dp_as_p2p;
        options.mirror_dp = request.mirror_dp;
        options.mirror_tp = request.mirror_dp;
        // A generator's refusal of a value an override set (a graph too large for its micro-batches)
        // names the option, as the workload's checks do.
        const sched::Schedule schedule = [&] {
          try {
            return sched::generate(w, wl, cluster, kind, options);
          } catch (const InputError& e) {
            rethrow_for_overrides(e, request, wl);
          }
        }();
        network_sends_on_sm = std::max(network_sends_on_sm, schedule.network_sends_on_sm);
        const auto note_once = [&](const std::string& note) {
          if (std::find(report.notes.begin(), report.notes.end(), note) == report.notes.end())
            report.notes.push_back(note);
        };
        if (!schedule.symmetry_fallback.empty())
          note_once("--symmetry mirror: every rank simulated, the DP sync as collectives (--symmetry none), because " +
                    schedule.symmetry_fallback);
        if (!schedule.symmetry_unchecked.empty()) note_once("--symmetry mirror: " + schedule.symmetry_unchecked);
        if (request.record_traces && request.trace_filter.ranks && schedule.simulated_ranks > 0) {
          const std::vector<int> simulated =
              sched::counted_ranks(schedule.graph.num_ranks(), schedule.simulated_ranks, schedule.pipeline_stages,
                                   schedule.tp_images);
          for (int r : *request.trace_filter.ranks)
            if (!std::binary_search(simulated.begin(), simulated.end(), r))
              throw InputError(kCommandLine, "--trace-ranks",
                               fmt::format("rank {} is not simulated with --symmetry mirror (the first {} ranks of each "
                                           "stage{} stand for the others); trace it with --symmetry none",
                                           r, schedule.simulated_ranks * schedule.tp_images / schedule.pipeline_stages,
                                           schedule.tp_images > 1
                                               ? fmt::format(", the first of each {} ranks in turn", schedule.tp_images)
                                               : std::string()));
        }
        const model::KernelCostModel& costs = priced();
        std::optional<analysis::ChromeTraceRecorder> recorder;
        if (request.record_traces) {
          recorder.emplace(cluster, &costs, schedule.graph.regions(), request.trace_filter);
          if (schedule.pipeline_stages > 1) recorder->label_stages(schedule.gpus / schedule.pipeline_stages);
        }
        const sim::SimResult result = simulator->run(schedule.graph, recorder ? &*recorder : nullptr);
        if (result.best_tree_all_reduce && (!best_tree_all_reduce || *best_tree_all_reduce < *result.best_tree_all_reduce))
          best_tree_all_reduce = result.best_tree_all_reduce;
        SimulateRun run;
        run.metrics = analysis::analyze(schedule, result, cluster, costs, w.dtype);
        if (recorder) run.trace_json = recorder->to_json().dump();
        report.runs.push_back(std::move(run));
      }
    }
  } catch (...) {
    if (pending.valid()) pending.get();
    throw;
  }
  priced();  // the report names the pricing even where nothing was simulated
  // Two rows of the DP comparison that are one schedule read as a fault of the simulator without this.
  const auto asked = [&](model::ScheduleKind k) {
    return std::find(request.schedules.begin(), request.schedules.end(), k) != request.schedules.end();
  };
  const bool dp_compared = std::any_of(report.runs.begin(), report.runs.end(),
                                       [](const SimulateRun& r) { return r.metrics.parallelism == "dp"; });
  if (dp_compared && asked(model::ScheduleKind::baseline) && asked(model::ScheduleKind::slice) &&
      !w.schedule.dp_serial_baseline)
    report.notes.push_back(
        "dp: baseline and slice are the same schedule, the bucketed overlap PyTorch DDP and Megatron-LM run "
        "($.schedule.dp_baseline \"serial\" makes baseline one collective after the whole backward; "
        "docs/schedules.md \"DP: gradient synchronisation\")");
  if (network_sends_on_sm > 0) report.notes.push_back(network_sends_note(network_sends_on_sm));
  if (best_tree_all_reduce) report.notes.push_back(tree_all_reduce_note(*best_tree_all_reduce));
  report.workload = std::move(w);
  return report;
}

std::string network_sends_note(std::int64_t sends) {
  return fmt::format("{} point-to-point sends between nodes run on SM kernels, not the copy engines the engine "
                     "choice asked for: a copy engine cannot drive the network (NCCL's inter-node send/recv is an "
                     "SM kernel and a proxy thread)",
                     sends);
}

std::string tree_all_reduce_note(const sim::TreeAllReduce& r) {
  return fmt::format("all-reduces across nodes run as NCCL's tree where its tuning model prices it below the ring "
                     "(docs/engine.md, section 6): the all-reduce of {} bytes over {} ranks on {} nodes takes {:.1f} us "
                     "by that model as {}, {:.1f} us as a ring (the largest gain in these runs)",
                     r.bytes, r.ranks, r.nodes, r.tree_s * 1e6, r.nvls ? "an NVLS tree" : "a tree", r.ring_s * 1e6);
}

nlohmann::json report_json(const SimulateReport& report) {
  const model::Workload& w = report.workload;
  nlohmann::json doc = nlohmann::json::object();
  doc["topology"] = report.cluster_name;
  doc["topology_file"] = report.topology_label;
  doc["workload"] = w.name;
  doc["workload_file"] = report.workload_label;
  doc["profile"] = report.profile_label.empty() ? nlohmann::json(nullptr) : nlohmann::json(report.profile_label);
  doc["pricing"] = report.pricing_json;
  doc["model"] = w.arch.name;
  doc["dtype"] = topo::to_string(w.dtype);
  doc["sequence_length"] = w.sequence_length;
  doc["micro_batch"] = w.micro_batch;
  doc["grad_accumulation"] = w.grad_accumulation;
  doc["parallel"] = {{"tp", w.parallel.tp}, {"up", w.parallel.up}, {"dp", w.parallel.dp}};
  if (w.parallel.pp > 1) {
    doc["parallel"]["pp"] = w.parallel.pp;
    doc["parallel"]["pp_schedule"] = model::to_string(w.parallel.pp_schedule);
    doc["parallel"]["virtual_stages"] = w.parallel.virtual_stages;
  }
  doc["backward"] = w.backward;
  doc["engine"] = model::engine_name(w.schedule);
  doc["slices"] = w.schedule.slices;
  nlohmann::json results = nlohmann::json::array();
  for (const SimulateRun& run : report.runs) results.push_back(analysis::to_json(run.metrics));
  doc["results"] = std::move(results);
  doc["memory"] = model::to_json(report.memory);
  doc["notes"] = report.notes;
  return doc;
}

std::string report_table(const SimulateReport& report, bool regions) {
  const model::Workload& w = report.workload;
  std::string out = fmt::format(
      "{} ({}) on {}: tp {} up {} dp {}, sequence {} x micro-batch {}, {}, {}, slice-overlap k = {}, engines {}\n\n",
      w.name, w.arch.name, report.cluster_name, w.parallel.tp, w.parallel.up, w.parallel.dp, w.sequence_length,
      w.micro_batch, topo::to_string(w.dtype), w.backward ? "forward+backward" : "forward only", w.schedule.slices,
      model::engine_name(w.schedule));
  if (w.parallel.pp > 1)
    out.insert(out.size() - 2, fmt::format(", pp {} ({}{}, {} micro-batches)", w.parallel.pp,
                                           model::to_string(w.parallel.pp_schedule),
                                           w.parallel.virtual_stages > 1 ? fmt::format(" v {}", w.parallel.virtual_stages) : "",
                                           w.grad_accumulation));
  else if (w.grad_accumulation > 1)  // the micro-batches of one step (a step scope runs them all)
    out.insert(out.size() - 2, fmt::format(", {} micro-batches per step", w.grad_accumulation));
  out.insert(out.size() - 1, "kernels priced by " + report.pricing + "\n");
  // Mirrored runs list fewer ranks than the job has; a reader must know the rest were not dropped.
  std::size_t fewest = 0, most = 0;
  for (const SimulateRun& run : report.runs) {
    const std::size_t n = run.metrics.ranks.size();
    fewest = fewest == 0 ? n : std::min(fewest, n);
    most = std::max(most, n);
  }
  if (!report.runs.empty() && fewest < static_cast<std::size_t>(report.runs.front().metrics.gpus))
    out.insert(out.size() - 1,
               fmt::format("ranks simulated: {}{} of {}, the others their images (DP replicas, and TP ranks or at tp 1 "
                           "a node's replicas where their transfers turn onto one another; --symmetry mirror: the same "
                           "figures as every rank, docs/schedules.md \"Symmetry\")\n",
                           fewest, most != fewest ? fmt::format(" to {}", most) : "", report.runs.front().metrics.gpus));
  std::vector<analysis::StepMetrics> rows;
  for (const SimulateRun& run : report.runs) rows.push_back(run.metrics);
  // A row compares one parallelism's schedules; without this line a reader cannot tell what the
  // other parallelisms of the same step ran (the same row appears under two parallelisms when both
  // run the workload's schedule).
  const int parallelisms = (w.parallel.tp > 1) + (w.parallel.up > 1) + (w.parallel.dp > 1);
  if (parallelisms > 1)
    out.insert(out.size() - 1, fmt::format("each row varies the schedule of its parallelism (par); the others run the "
                                           "workload's schedule.kind, {}\n",
                                           model::to_string(w.schedule.kind)));
  out += analysis::format_table(rows);
  for (const SimulateRun& run : report.runs) {
    if (run.metrics.stages.empty()) continue;
    std::string line = fmt::format("pipeline bubble, {} {} ({}):", run.metrics.schedule, run.metrics.parallelism,
                                   run.metrics.scope);
    for (const analysis::StageMetrics& st : run.metrics.stages)
      line += fmt::format(" stage {} {:.1f} ms ({:.1f}%){}", st.stage, ps_to_seconds(st.bubble_ps) * 1e3,
                          st.bubble_fraction * 100.0, st.stage + 1 < static_cast<int>(run.metrics.stages.size()) ? "," : "");
    out += line + "\n";
  }
  for (const SimulateRun& run : report.runs) {
    if (!run.metrics.critical_path) continue;
    const analysis::CriticalPath& cp = *run.metrics.critical_path;
    const double T = static_cast<double>(run.metrics.step_time_ps);
    const auto pct = [&](TimePs ps) { return 100.0 * static_cast<double>(ps) / T; };
    std::string stages;
    for (std::size_t st = 0; st < cp.stage_compute_ps.size(); ++st)
      stages += fmt::format("{}stage {} {:.1f}%", st == 0 ? "" : ", ", st, pct(cp.stage_compute_ps[st]));
    out += fmt::format("pipeline critical path, {} {} ({}): {} tasks, compute {:.1f}% ({}), communication {:.1f}%, "
                       "waiting {:.1f}%\n",
                       run.metrics.schedule, run.metrics.parallelism, run.metrics.scope, cp.tasks, pct(cp.compute_ps),
                       stages, pct(cp.comm_ps), pct(cp.wait_ps));
  }
  out += "\n" + model::format_memory_line(report.memory) + "\n";
  for (const std::string& note : report.notes) out += "note: " + note + "\n";
  if (regions) {
    for (const SimulateRun& run : report.runs) {
      out += fmt::format("\nregions of {} ({}), critical rank {}:\n", run.metrics.schedule, run.metrics.scope,
                         run.metrics.critical_rank);
      out += analysis::format_region_table(run.metrics);
    }
  }
  return out;
}

std::string trace_path(const std::string& base, const SimulateRequest& request, model::ScheduleKind kind,
                       sched::Scope scope) {
  return trace_path(base, request, std::nullopt, kind, scope);
}

std::string trace_path(const std::string& base, const SimulateRequest& request,
                       std::optional<sched::Parallelism> parallelism, model::ScheduleKind kind, sched::Scope scope) {
  std::string infix;
  if (parallelism) infix += "." + sched::to_string(*parallelism);
  if (request.schedules.size() > 1) infix += "." + model::to_string(kind);
  if (request.scopes.size() > 1) infix += "." + sched::to_string(scope);
  if (infix.empty()) return base;
  const std::filesystem::path p(base);
  std::string ext = p.extension().string();
  // The schedule goes before ".json.gz", not between its two parts: the file must still end in
  // .json.gz for Perfetto to recognise it.
  if (ext == ".gz" && p.stem().extension() == ".json") ext = ".json.gz";
  const std::string stem = ext.empty() ? base : base.substr(0, base.size() - ext.size());
  return stem + infix + ext;
}

}  // namespace fusesim::cli
