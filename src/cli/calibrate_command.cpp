// `fusesim calibrate`: the producing side of calibration profiles (docs/microbench.md).
//   fit RAW.json -o OUT.json              fit the "fitted" section from the raw samples
//   import-nccl-tests LOG... -o OUT.json  collective samples (and their fit) from nccl-tests logs
//   kernel-fits PROFILE -o OUT            the profile with fitted.kernel_models (its kernel fits' parameters)
//   plan --workload W --topology T        the GEMM / attention / elementwise shapes the schedules run,
//                                         for tools/microbench/microbench.py --plan
#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <map>
#include <numeric>
#include <optional>
#include <ostream>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "fusesim/analysis/kineto.hpp"
#include "fusesim/cli/commands.hpp"
#include "fusesim/cli/simulate.hpp"
#include "fusesim/model/calibration_fit.hpp"
#include "fusesim/model/nccl_tests.hpp"
#include "fusesim/model/profile.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

std::string today_utc() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// The idle time between two GPU activities that follow each other on the busiest stream of a step:
// under this, the next kernel's launch on the GPU (1.5-2 us on an H100 with the host ahead); at or
// above it, the GPU waited for something else (the step's start, the host, a peer).
constexpr TimePs kKernelGapCeilingPs = 20'000'000;  // 20 us
// Fewer gaps than this in the steps read: too few to say what a step's kernels wait.
constexpr std::size_t kMinKernelGaps = 100;

struct KernelGaps {
  std::size_t count = 0;
  TimePs total_ps = 0;
  std::set<std::int64_t> streams;
};

// Adds the gaps under the ceiling between consecutive activities of the step's busiest stream (the one
// with the most activities; the lowest id among equals).
void add_kernel_gaps(const analysis::MeasuredStep& s, KernelGaps& gaps) {
  std::map<std::int64_t, std::vector<const analysis::TraceActivity*>> by_stream;
  for (const analysis::TraceActivity& a : s.activities) by_stream[a.stream].push_back(&a);
  const auto busiest = std::max_element(by_stream.begin(), by_stream.end(), [](const auto& a, const auto& b) {
    return a.second.size() < b.second.size();
  });
  if (busiest == by_stream.end()) return;
  std::vector<const analysis::TraceActivity*>& on = busiest->second;
  std::stable_sort(on.begin(), on.end(), [](const auto* a, const auto* b) { return a->begin_ps < b->begin_ps; });
  gaps.streams.insert(busiest->first);
  TimePs end = on.front()->end_ps;
  for (std::size_t i = 1; i < on.size(); ++i) {
    const TimePs gap = on[i]->begin_ps - end;
    if (gap >= 0 && gap < kKernelGapCeilingPs) {
      ++gaps.count;
      gaps.total_ps += gap;
    }
    end = std::max(end, on[i]->end_ps);
  }
}

// Letters and digits, lowercased: "NVIDIA H100 80GB HBM3" and "nvidia-h100-80gb-hbm3" compare equal.
std::string normalized(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// The device model a topology describes: the one named, else the only one.
const topo::DeviceModel& pick_device_model(const topo::Cluster& cluster, const std::string& name,
                                           const std::string& topology) {
  if (!name.empty()) {
    const auto it = cluster.device_models.find(name);
    if (it == cluster.device_models.end()) {
      throw InputError(kCommandLine, "--device-model", fmt::format("topology {} has no device model '{}'", topology, name));
    }
    return it->second;
  }
  if (cluster.device_models.size() != 1) {
    throw InputError(kCommandLine, "--device-model",
                     fmt::format("topology {} has {} device models: name one", topology, cluster.device_models.size()));
  }
  return cluster.device_models.begin()->second;
}

// Adds the fitted section to a complete document and checks that the profile loader accepts the
// result. `doc` is the raw document as read (its label names the file in errors).
nlohmann::json with_fitted(const JsonDocument& doc, const model::FitOptions& options,
                           const std::string& peak_option = "--peak-tflops") {
  const JsonObject root = doc.root();
  nlohmann::json fitted = model::fit_document(root, options);
  if (fitted.contains("gemm_peak_fraction") && fitted["gemm_peak_fraction"].get<double>() > 1.0) {
    throw InputError(kCommandLine, peak_option,
                     fmt::format("the best GEMM of {} reaches {:.3f} x the peak given: the peak is too low",
                                 doc.file(), fitted["gemm_peak_fraction"].get<double>()));
  }
  nlohmann::json out = doc.raw();
  // A fraction fitted before against a peak given then survives a refit without one.
  if (!fitted.contains("gemm_peak_fraction") && out.contains("fitted") && out["fitted"].is_object() &&
      out["fitted"].contains("gemm_peak_fraction")) {
    fitted["gemm_peak_fraction"] = out["fitted"]["gemm_peak_fraction"];
  }
  out["fitted"] = std::move(fitted);
  return out;
}

std::string describe_fitted(const nlohmann::json& fitted) {
  std::string s;
  if (fitted.contains("collectives")) {
    for (const auto& [op, f] : fitted["collectives"].items()) {
      s += fmt::format("{:<15} {} ranks, {} node(s): latency {:.3g} us, busbw {:.4g} GB/s ({} samples, max error {:.1f}%)\n",
                       op, f["ranks"].get<int>(), f["nodes"].get<int>(), f["latency_s"].get<double>() * 1e6,
                       f["busbw_bytes_per_s"].get<double>() / 1e9, f["samples"].get<int>(),
                       f["max_rel_error"].get<double>() * 100);
    }
  }
  if (fitted.contains("contention")) {
    const auto& c = fitted["contention"];
    if (c.contains("sm_kernel_slowdown_per_sm")) {
      s += fmt::format("contention      GEMM slowdown {:.4g} per SM held by communication\n",
                       c["sm_kernel_slowdown_per_sm"].get<double>());
    }
    if (c.contains("copy_engine_slowdown")) {
      s += fmt::format("contention      GEMM x{:.4g} beside a copy-engine transfer\n", c["copy_engine_slowdown"].get<double>());
    }
  }
  if (fitted.contains("hbm_bytes_per_s")) {
    s += fmt::format("hbm             {:.4g} GB/s\n", fitted["hbm_bytes_per_s"].get<double>() / 1e9);
  }
  if (fitted.contains("gemm_peak_fraction")) {
    s += fmt::format("gemm            best {:.3f} of peak\n", fitted["gemm_peak_fraction"].get<double>());
  }
  return s;
}

// `simulate --profile` refuses a fitted bus bandwidth above the scale-up links' line rate
// (model::apply_profile): no ring beats its links. An all_reduce_perf log gets there when NCCL ran
// NVLS (NVLink SHARP: the NVSwitch reduces, so each GPU sends its data once), which the ring the
// profile calibrates does not describe. Said at import, where the fix is one rerun away, rather than
// at the first simulate. The clusters tried: --topology, else every shipped one of the device. Where
// the curve spans NCCL's protocols (an all_reduce_perf log from bytes to GiBs, NVLS included), simulate
// fits them one by one instead: said too, with the fit's error, for the first cluster that takes it.
void check_fit_on_clusters(const nlohmann::json& out, const std::string& output, const std::string& topology, Io& io) {
  const model::Profile profile = model::parse_profile(JsonDocument::from_json(out, output));
  std::vector<std::string> names;
  if (!topology.empty()) {
    names.push_back(topology);
  } else {
    for (const std::string& f : embedded_files("topologies")) {
      const std::size_t slash = f.find_last_of('/'), dot = f.rfind(".json");
      names.push_back(f.substr(slash + 1, dot - slash - 1));
    }
  }
  bool noted = false;
  for (const std::string& name : names) {
    topo::Cluster cluster = topo::load_cluster_by_name_or_path(name);
    try {
      // A curve that spans the protocols is priced protocol by protocol (model::apply_profile), not by
      // the one latency and bandwidth the summary above prints: say what simulate will take, once.
      for (const std::string& line : model::apply_profile(profile, cluster)) {
        if (noted || line.find("NCCL's protocols fitted") == std::string::npos) continue;
        io.err << fmt::format("note: {}: on {}, `fusesim simulate --profile` prices {}\n", output, name, line);
        noted = true;
      }
    } catch (const InputError& e) {
      // Another device's cluster refuses the profile at $.device: not this warning's business.
      const std::string prefix = "$.fitted.collectives.";
      if (e.json_path().rfind(prefix, 0) != 0) continue;
      const std::string op = e.json_path().substr(prefix.size());
      const std::string fix =
          op == "all_reduce"
              ? "an all-reduce above the line rate ran NVLS (the switch reduces), which the ring model does not "
                "describe: measure all_gather_perf (or reduce_scatter_perf) instead, or rerun all_reduce_perf with "
                "NCCL_NVLS_ENABLE=0"
              : "no ring beats its links: check that the logs were measured on this topology's links";
      io.err << fmt::format("warning: {}: {}: {} (topology {}), so `fusesim simulate --profile` will refuse this "
                            "profile; {}\n",
                            output, e.json_path(), e.message(), name, fix);
      return;
    }
  }
}

class CalibrateCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.require_subcommand(1);

    fit_ = sub.add_subcommand("fit", "fit link, collective, contention, HBM and GEMM parameters from a raw "
                                     "calibration document (microbench.py output) and write it with \"fitted\"");
    fit_->add_option("raw", raw_, "raw calibration JSON")->required();
    fit_->add_option("-o,--output", output_, "the calibration profile to write")->required();
    fit_->add_option("--peak-tflops", peak_tflops_, "dense bf16/fp16 datasheet peak, for gemm_peak_fraction");
    fit_->add_option("--topology", topology_, "take the peak from this topology's device model instead");
    fit_->add_option("--device-model", device_model_, "device model of --topology (default: its only one)");

    import_ = sub.add_subcommand("import-nccl-tests", "read nccl-tests *_perf logs into collective samples and "
                                                      "fit latency and bus bandwidth");
    import_->add_option("logs", logs_, "nccl-tests output files")->required();
    import_->add_option("-o,--output", output_, "the calibration profile to write")->required();
    import_->add_option("--into", into_, "add the samples to this calibration document instead of a new one");
    import_->add_option("--device", device_, "device name (default: from the logs' '# Rank' lines)");
    import_->add_option("--sm-count", sm_count_, "SMs of the device (nccl-tests does not print it)");
    import_->add_option("--topology", topology_, "take the SM count and device model from this topology");
    import_->add_option("--device-model", device_model_, "device model of --topology (default: its only one)");
    import_->add_option("--op", op_, "collective of logs that do not name their program: all_gather, "
                                     "reduce_scatter, all_reduce, all_to_all, p2p");
    import_->add_option("--ranks", ranks_, "ranks, for logs without '# Rank' lines");
    import_->add_option("--nodes", nodes_, "nodes, for logs without '# Rank' lines");
    import_->add_option("--date", date_, "provenance date (default: today, UTC)");

    from_trace_ = sub.add_subcommand("from-trace", "write a calibration profile from a measured Kineto trace: each "
                                                   "GEMM of a profiler step with its shape (a trace taken with "
                                                   "record_shapes=True) and its measured kernel time");
    from_trace_->add_option("trace", trace_, "the Kineto trace (.json or .json.gz)")->required();
    from_trace_->add_option("-o,--output", output_, "the calibration profile to write")->required();
    from_trace_->add_option("--step", step_, "the profiler step (ProfilerStep#N; default: every step)");
    from_trace_->add_option("--topology", topology_, "take the device model and its SM count from this topology "
                                                     "(default: the trace's device name and numSms)");
    from_trace_->add_option("--device-model", device_model_, "device model of --topology (default: its only one)");
    from_trace_->add_option("--date", date_, "provenance date (default: today, UTC)");

    kernel_fits_ = sub.add_subcommand(
        "kernel-fits", "fit a profile's GEMM and small-kernel models from its samples and write the profile with "
                       "fitted.kernel_models, their parameters, which loading it then takes instead of searching again");
    kernel_fits_->add_option("profile", raw_, "calibration profile")->required();
    kernel_fits_->add_option("-o,--output", output_, "the calibration profile to write (may be the one read)")->required();

    plan_ = sub.add_subcommand("plan", "print the kernel shapes the shipped schedules generate for a workload, "
                                       "as JSON for tools/microbench/microbench.py --plan");
    plan_->add_option("--workload", workload_, "workload: a file or a shipped name")->capture_default_str();
    plan_->add_option("--topology", plan_topology_, "cluster: a file or a shipped name")->capture_default_str();
    plan_->add_option("--tp", tp_, "override the tensor-parallel degree");
    // --seq as simulate, sweep and search spell it; --sequence as this option was first named.
    plan_->add_option("--seq,--sequence", sequence_, "override the sequence length");
    plan_->add_option("--slices", slices_, "slice counts of slice-overlap, comma-separated (default: the "
                                           "workload's)");
    plan_->add_option("--scope", scope_, "generate one layer or the whole stack (the same shapes unless the "
                                       "generator varies them by layer)")->capture_default_str();
    plan_->add_option("-o,--output", output_, "write the plan to this file instead of standard output");
  }

  int run(Io& io) override {
    if (!output_.empty()) check_output_path(output_, "--output");  // before the work, not after
    if (fit_->parsed()) return run_fit(io);
    if (import_->parsed()) return run_import(io);
    if (from_trace_->parsed()) return run_from_trace(io);
    if (kernel_fits_->parsed()) return run_kernel_fits(io);
    return run_plan(io);
  }

 private:
  model::FitOptions fit_options(const std::string& profile_file) const {
    model::FitOptions options;
    if (peak_tflops_ && !topology_.empty()) {
      throw InputError(kCommandLine, "--peak-tflops", "give --peak-tflops or --topology, not both");
    }
    if (peak_tflops_) {
      if (!(*peak_tflops_ > 0) || *peak_tflops_ > 1e6) {
        throw InputError(kCommandLine, "--peak-tflops", fmt::format("{} is not a peak in TFLOP/s", *peak_tflops_));
      }
      options.peak_bf16_flops_per_s = *peak_tflops_ * 1e12;
      options.peak_fp16_flops_per_s = *peak_tflops_ * 1e12;
    } else if (!topology_.empty()) {
      const topo::Cluster cluster = topo::load_cluster_by_name_or_path(topology_);
      const topo::DeviceModel& device = pick_device_model(cluster, device_model_, topology_);
      const model::Profile profile = model::load_profile(profile_file);
      model::check_profile_device(profile, device);
      if (device.peak_flops_per_s.count(topo::Dtype::bf16)) options.peak_bf16_flops_per_s = device.peak(topo::Dtype::bf16);
      if (device.peak_flops_per_s.count(topo::Dtype::fp16)) options.peak_fp16_flops_per_s = device.peak(topo::Dtype::fp16);
    }
    return options;
  }

  int run_fit(Io& io) {
    const JsonDocument doc = JsonDocument::load(raw_);
    // The profile loader's strict reading first: a bad raw document is refused with its own paths.
    (void)model::parse_profile(doc);
    const nlohmann::json out = with_fitted(doc, fit_options(raw_), topology_.empty() ? "--peak-tflops" : "--topology");
    write(out, io);
    io.err << describe_fitted(out["fitted"]);
    return 0;
  }

  // The file's own text and key order kept (tools/calibration/build_profiles.py renders the shipped
  // profiles); only fitted.kernel_models is set.
  int run_kernel_fits(Io& io) {
    const JsonDocument doc = JsonDocument::load(raw_);
    const model::Profile profile = model::parse_profile(doc, model::KernelFits::search);
    nlohmann::ordered_json out = nlohmann::ordered_json::parse(read_text_file(raw_));
    out["fitted"]["kernel_models"] = model::kernel_fits_json(profile);
    write_output_file(output_, out.dump(2) + "\n");
    io.err << fmt::format("wrote {}: {} GEMM model(s), {} small-kernel model(s), inputs fnv1a64 {}\n", output_,
                          (profile.gemm_model ? 1 : 0) + (profile.gemm_model_fp8 ? 1 : 0),
                          profile.elementwise_models.size(), model::kernel_fit_inputs_fnv1a64(profile));
    return 0;
  }

  int run_import(Io& io) {
    if (sm_count_ && !topology_.empty()) throw InputError(kCommandLine, "--sm-count", "give --sm-count or --topology");
    model::NcclTestsOptions options;
    options.op = op_;
    if (ranks_) {
      if (*ranks_ < 1 || *ranks_ > (1 << 24)) throw InputError(kCommandLine, "--ranks", "must be in [1, 16777216]");
      options.ranks = *ranks_;
    }
    if (nodes_) {
      if (*nodes_ < 1 || *nodes_ > (1 << 20)) throw InputError(kCommandLine, "--nodes", "must be in [1, 1048576]");
      options.nodes = *nodes_;
    }

    nlohmann::json samples = nlohmann::json::array();
    std::set<std::string> hosts, nccl_versions, tests_versions, devices;
    std::vector<std::string> sources;
    for (const std::string& log : logs_) {
      const std::vector<model::NcclTestsRun> runs = model::load_nccl_tests(log, options);
      for (const model::NcclTestsRun& run : runs) {
        for (const auto& r : run.rank_lines) hosts.insert(r.host);
        if (!run.nccl_version.empty()) nccl_versions.insert(run.nccl_version);
        if (!run.tests_version.empty()) tests_versions.insert(run.tests_version);
        if (!run.device_name.empty()) devices.insert(run.device_name);
        sources.push_back(fmt::format("{} line {} ({}, {} ranks on {} node(s))", log, run.first_line,
                                      run.program.empty() ? run.op : run.program, run.ranks, run.nodes));
        for (const model::NcclTestsRow& row : run.rows) {
          nlohmann::json times = nlohmann::json::array({row.out_of_place_time_s});
          if (row.in_place_time_s > 0) times.push_back(row.in_place_time_s);
          samples.push_back({{"op", run.op},
                             {"ranks", run.ranks},
                             {"nodes", run.nodes},
                             {"bytes", static_cast<std::int64_t>(row.bytes)},
                             {"time_s", times},
                             {"source", fmt::format("nccl-tests {} line {}", log, row.line)}});
        }
      }
    }
    if (devices.size() > 1) {
      throw InputError(logs_.front(), "$", fmt::format("the logs ran on different devices ({}): import one device "
                                                       "model at a time",
                                                       fmt::join(devices, ", ")));
    }

    nlohmann::json doc;
    std::string label = "<import>";
    if (!into_.empty()) {
      if (!device_.empty() || sm_count_ || !topology_.empty()) {
        throw InputError(kCommandLine, "--into", "the device is the --into document's: leave out --device, --sm-count "
                                                 "and --topology");
      }
      const JsonDocument base = JsonDocument::load(into_);
      (void)model::parse_profile(base);
      doc = base.raw();
      label = into_;
      // Samples of another device would be fitted as this one's.
      const std::string name = doc["device"]["name"].get<std::string>();
      for (const std::string& d : devices) {
        const std::string a = normalized(name), b = normalized(d);
        if (a.rfind(b, 0) != 0 && b.rfind(a, 0) != 0) {
          throw InputError(logs_.front(), "$", fmt::format("the logs ran on '{}', the --into document {} on '{}'", d,
                                                           into_, name));
        }
      }
      if (!doc.contains("collectives")) doc["collectives"] = nlohmann::json::array();
      for (auto& s : samples) doc["collectives"].push_back(std::move(s));
    } else {
      std::string device = device_;
      if (device.empty() && !devices.empty()) device = *devices.begin();
      if (device.empty()) throw InputError(kCommandLine, "--device", "the logs have no '# Rank' lines naming the device: give --device");
      nlohmann::json dev = {{"name", device}};
      if (!topology_.empty()) {
        const topo::Cluster cluster = topo::load_cluster_by_name_or_path(topology_);
        const topo::DeviceModel& m = pick_device_model(cluster, device_model_, topology_);
        dev["sm_count"] = m.sm_count;
        dev["model"] = m.name;
      } else if (sm_count_) {
        if (*sm_count_ < 1 || *sm_count_ > 1000000) throw InputError(kCommandLine, "--sm-count", "must be in [1, 1000000]");
        dev["sm_count"] = *sm_count_;
      } else {
        throw InputError(kCommandLine, "--sm-count", "nccl-tests logs do not give the SM count: give --sm-count or --topology");
      }
      nlohmann::json libraries = nlohmann::json::object();
      if (!nccl_versions.empty()) libraries["nccl"] = fmt::format("{}", fmt::join(nccl_versions, ", "));
      if (!tests_versions.empty()) libraries["nccl-tests"] = fmt::format("{}", fmt::join(tests_versions, ", "));
      doc = {{"schema", "fusesim.calibration"},
             {"schema_version", 1},
             {"device", dev},
             {"provenance",
              {{"kind", "measured"},
               {"machine", hosts.empty() ? std::string("unknown (the logs list no hosts)")
                                         : fmt::format("{}", fmt::join(hosts, ", "))},
               {"date", date_.empty() ? today_utc() : date_},
               {"libraries", libraries},
               {"tool", "fusesim calibrate import-nccl-tests"},
               {"source", fmt::format("nccl-tests logs: {}", fmt::join(sources, "; "))}}},
             {"collectives", samples}};
    }
    const JsonDocument built = JsonDocument::from_json(doc, label);
    (void)model::parse_profile(built);
    // The peak options belong to `fit`: an import fits collectives, and keeps a gemm_peak_fraction that
    // an --into document already has.
    const nlohmann::json out = with_fitted(built, model::FitOptions{});
    write(out, io);
    io.err << describe_fitted(out["fitted"]);
    check_fit_on_clusters(out, output_, topology_, io);
    return 0;
  }

  // One GEMM sample per (dtype, shape), its times every occurrence's in the chosen steps: measured
  // inside a training step, so the profile carries no in-step rate to apply on top (docs/calibration.md,
  // "Kernels inside a step").
  int run_from_trace(Io& io) {
    analysis::TraceReadOptions options;
    options.gemm_shapes = true;
    options.keep_activities = true;  // for the gaps between kernels
    const analysis::MeasuredTrace t = analysis::import_kineto(trace_, 0, options);
    if (step_ && std::none_of(t.steps.begin(), t.steps.end(), [&](const auto& s) { return s.step == *step_; }))
      throw InputError(kCommandLine, "--step", fmt::format("{} has no ProfilerStep#{}", trace_, *step_));
    std::map<std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t, std::int64_t>, std::vector<double>> times;
    std::map<std::tuple<std::string, bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>,
             std::vector<double>>
        attention;
    std::int64_t unshaped = 0, unshaped_attention = 0;
    std::vector<std::string> steps;
    KernelGaps gaps;
    for (const analysis::MeasuredStep& s : t.steps) {
      if (step_ && s.step != *step_) continue;
      steps.push_back(s.step < 0 ? std::string("the whole trace") : fmt::format("step {}", s.step));
      add_kernel_gaps(s, gaps);
      unshaped += s.gemm_kernels_without_shape;
      unshaped_attention += s.attention_kernels_without_shape;
      for (const analysis::MeasuredGemm& g : s.gemms)
        times[{g.dtype, g.m, g.n, g.k, g.batch}].push_back(ps_to_seconds(g.time_ps));
      for (const analysis::MeasuredAttention& a : s.attention)
        attention[{a.dtype, a.backward, a.causal, a.batch, a.heads, a.kv_heads, a.seq, a.head_dim}].push_back(
            ps_to_seconds(a.time_ps));
    }
    if (times.empty())
      throw InputError(trace_, "$.traceEvents",
                       "no GEMM with its shape: profile with record_shapes=True (the aten::mm, addmm, bmm and "
                       "baddbmm ops' \"Input Dims\" give the shapes), in bf16 or fp16");
    nlohmann::json dev = {{"name", t.device.empty() ? std::string("unknown (the trace names no device)") : t.device}};
    if (!topology_.empty()) {
      const topo::Cluster cluster = topo::load_cluster_by_name_or_path(topology_);
      const topo::DeviceModel& m = pick_device_model(cluster, device_model_, topology_);
      if (t.sm_count > 0 && t.sm_count != m.sm_count)
        throw InputError(trace_, "$.deviceProperties[0].numSms",
                         fmt::format("{} SMs, where {}'s device model {} has {}", t.sm_count, topology_, m.name,
                                     m.sm_count));
      dev["sm_count"] = m.sm_count;
      dev["model"] = m.name;
    } else if (t.sm_count > 0) {
      dev["sm_count"] = t.sm_count;
    } else {
      throw InputError(kCommandLine, "--topology", "the trace gives no numSms: name the topology of its device");
    }
    const std::string where = fmt::format("trace: {}, rank {}, {}", trace_, t.rank, fmt::join(steps, ", "));
    // The samples are kernels' own times; a step's kernels also wait for each other's launch
    // (docs/calibration.md, "Kernels inside a step"): the mean gap, where the trace holds enough.
    if (gaps.count >= kMinKernelGaps)
      dev["kernel_gap_s"] = {
          {"value", ps_to_seconds(gaps.total_ps) / static_cast<double>(gaps.count)},
          {"source", fmt::format("the mean of the {} gaps under 20 us between consecutive GPU activities on the busiest "
                                 "stream ({}) of {}",
                                 gaps.count, fmt::join(gaps.streams, ", "), where)}};
    nlohmann::json gemm = nlohmann::json::array();
    for (const auto& [key, ts] : times) {
      const auto& [dtype, m, n, k, batch] = key;
      gemm.push_back({{"dtype", dtype}, {"m", m}, {"n", n}, {"k", k}, {"batch", batch}, {"time_s", ts}, {"source", where}});
    }
    nlohmann::json attn = nlohmann::json::array();
    for (const auto& [key, ts] : attention) {
      const auto& [dtype, backward, causal, batch, heads, kv_heads, seq, head_dim] = key;
      attn.push_back({{"dtype", dtype}, {"pass", backward ? "backward" : "forward"}, {"causal", causal},
                      {"batch", batch}, {"heads", heads}, {"kv_heads", kv_heads}, {"seq", seq},
                      {"head_dim", head_dim}, {"time_s", ts}, {"source", where}});
    }
    nlohmann::json doc = {{"schema", "fusesim.calibration"},
                                {"schema_version", 1},
                                {"device", dev},
                                {"provenance",
                                 {{"kind", "measured"},
                                  {"machine", "the machine the trace was taken on"},
                                  {"date", date_.empty() ? today_utc() : date_},
                                  {"tool", "fusesim calibrate from-trace"},
                                  {"notes", "GEMM and FlashAttention kernel times measured inside a training step "
                                            "(each aten op's kernels summed); no in-step rate applies on top"},
                                  {"source", where}}},
                                {"gemm", gemm}};
    if (!attn.empty()) doc["attention"] = std::move(attn);
    const JsonDocument built = JsonDocument::from_json(doc, trace_);
    (void)model::parse_profile(built);
    write(with_fitted(built, model::FitOptions{}), io);
    const auto count = [](const auto& m) {
      return std::accumulate(m.begin(), m.end(), std::size_t{0}, [](std::size_t a, const auto& kv) { return a + kv.second.size(); });
    };
    io.err << fmt::format("{} GEMM shapes from {} ops, {} attention shapes from {} ops{}{}\n", times.size(), count(times),
                          attention.size(), count(attention),
                          unshaped ? fmt::format("; {} GEMM kernels launched by no shaped aten::*mm op left out", unshaped)
                                   : std::string(),
                          unshaped_attention ? fmt::format("; {} attention kernels launched by no shaped FlashAttention "
                                                           "op left out",
                                                           unshaped_attention)
                                             : std::string());
    return 0;
  }

  int run_plan(Io& io) {
    SimulateRequest request;
    request.topology = plan_topology_;
    request.workload = workload_;
    request.force_memory = true;  // nothing runs: the plan only needs the shapes
    if (tp_) request.tp = *tp_;
    if (sequence_) request.sequence_length = *sequence_;
    const std::vector<sched::Scope> scopes = parse_scopes(scope_);
    if (scopes.size() != 1) throw InputError(kCommandLine, "--scope", "name one scope: layer or stack");
    request.schedules = model::all_schedule_kinds();

    std::vector<int> slice_counts;
    if (!slices_.empty()) {
      std::size_t pos = 0;
      while (pos <= slices_.size()) {
        const std::size_t comma = slices_.find(',', pos);
        slice_counts.push_back(parse_positive_int("--slices", slices_.substr(pos, comma - pos), 1024));
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    }
    if (!slice_counts.empty()) request.slices = slice_counts.front();
    const PreparedJob job = prepare_job(request);
    if (slice_counts.empty()) slice_counts.push_back(job.workload.schedule.slices);

    // Shape -> the schedules that run it, in a deterministic order.
    using GemmKey = std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
    using AttnKey = std::tuple<std::string, std::string, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                               std::int64_t, std::int64_t>;
    using EltKey = std::tuple<std::string, std::string, std::int64_t>;
    std::map<GemmKey, std::set<std::string>> gemms;
    std::map<AttnKey, std::set<std::string>> attns;
    std::map<EltKey, std::set<std::string>> elts;

    const auto walk = [&](model::ScheduleKind kind, int slices) {
      model::Workload w = job.workload;
      w.schedule.slices = slices;
      w.schedule.kind = kind;
      try {
        model::validate_workload(w, job.workload_label);
      } catch (const InputError& e) {
        if (kind == model::ScheduleKind::slice && e.json_path().rfind("$.schedule.slices", 0) == 0) {
          throw InputError(kCommandLine, "--slices", fmt::format("{} (workload {})", e.message(), job.workload_label));
        }
        throw;
      }
      sched::GenerateOptions options;
      options.scope = scopes[0];
      options.backward = w.backward;
      const sched::Schedule schedule = sched::generate(w, job.workload_label, job.cluster, kind, options);
      const std::string tag = kind == model::ScheduleKind::slice ? fmt::format("slice-{}", slices) : model::to_string(kind);
      const auto& g = schedule.graph.graph();
      for (auto [it, end] = boost::vertices(g); it != end; ++it) {
        const sched::Task& task = g[*it];
        const auto* c = std::get_if<sched::ComputeTask>(&task.kind);
        if (!c) continue;
        const std::string dtype = topo::to_string(c->dtype);
        if (const auto* k = std::get_if<model::GemmKernel>(&c->kernel.get())) {
          gemms[{dtype, k->m, k->n, k->k, k->batch}].insert(tag);
        } else if (const auto* a = std::get_if<model::AttentionKernel>(&c->kernel.get())) {
          attns[{dtype, a->pass == model::Pass::forward ? "forward" : "backward", a->causal, a->batch, a->heads,
                 a->kv_heads, a->seq_q, a->seq_kv, a->head_dim}]
              .insert(tag);
        } else if (const auto* e = std::get_if<model::ElementwiseKernel>(&c->kernel.get())) {
          elts[{dtype, e->op, static_cast<std::int64_t>(e->bytes)}].insert(tag);
        }
      }
    };
    walk(model::ScheduleKind::baseline, job.workload.schedule.slices);
    for (int k : slice_counts) walk(model::ScheduleKind::slice, k);
    walk(model::ScheduleKind::commfuse, job.workload.schedule.slices);

    const auto tags = [](const std::set<std::string>& s) { return nlohmann::json(std::vector<std::string>(s.begin(), s.end())); };
    nlohmann::json plan = {{"schema", "fusesim.microbench-plan"},
                           {"schema_version", 1},
                           {"workload", job.workload_label},
                           {"topology", job.topology_label},
                           {"tp", job.workload.parallel.tp},
                           {"up", job.workload.parallel.up},
                           {"dp", job.workload.parallel.dp},
                           {"sequence_length", job.workload.sequence_length},
                           {"slices", slice_counts},
                           {"scope", sched::to_string(scopes[0])},
                           {"gemm", nlohmann::json::array()},
                           {"attention", nlohmann::json::array()},
                           {"elementwise", nlohmann::json::array()}};
    for (const auto& [k, s] : gemms) {
      const auto& [dtype, m, n, kk, batch] = k;
      plan["gemm"].push_back({{"dtype", dtype}, {"m", m}, {"n", n}, {"k", kk}, {"batch", batch}, {"schedules", tags(s)}});
    }
    for (const auto& [k, s] : attns) {
      const auto& [dtype, pass, causal, batch, heads, kv_heads, seq_q, seq_kv, head_dim] = k;
      plan["attention"].push_back({{"dtype", dtype},      {"pass", pass},         {"causal", causal},
                                   {"batch", batch},      {"heads", heads},       {"kv_heads", kv_heads},
                                   {"seq_q", seq_q},      {"seq_kv", seq_kv},     {"head_dim", head_dim},
                                   {"schedules", tags(s)}});
    }
    for (const auto& [k, s] : elts) {
      const auto& [dtype, op, bytes] = k;
      plan["elementwise"].push_back({{"dtype", dtype}, {"op", op}, {"bytes", bytes}, {"schedules", tags(s)}});
    }
    const std::string text = plan.dump(1) + "\n";
    if (output_.empty()) {
      io.out << text << std::flush;
    } else {
      write_output_file(output_, text);
    }
    return 0;
  }

  void write(const nlohmann::json& out, Io& io) {
    write_output_file(output_, out.dump(1) + "\n");
    io.err << fmt::format("wrote {}\n", output_);
  }

  CLI::App* fit_ = nullptr;
  CLI::App* import_ = nullptr;
  CLI::App* plan_ = nullptr;
  CLI::App* from_trace_ = nullptr;
  CLI::App* kernel_fits_ = nullptr;
  std::string trace_;
  std::optional<int> step_;
  std::string raw_, output_, topology_, device_model_;
  std::optional<double> peak_tflops_;
  std::vector<std::string> logs_;
  std::string into_, device_, op_, date_;
  std::optional<int> sm_count_, ranks_, nodes_;
  std::string workload_ = "llama-3-70b";
  std::string plan_topology_ = "dgx-h100";
  std::optional<int> tp_;
  std::optional<std::int64_t> sequence_;
  std::string slices_;
  std::string scope_ = "layer";
};

}  // namespace

std::unique_ptr<Command> make_calibrate_command() { return std::make_unique<CalibrateCommand>(); }

}  // namespace fusesim::cli
