// `fusesim search`: the best configurations of a model on a cluster (include/fusesim/cli/search.hpp).
#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "fusesim/cli/commands.hpp"
#include "fusesim/cli/plot.hpp"
#include "fusesim/cli/search.hpp"
#include "fusesim/cli/simulate.hpp"
#include "fusesim/cli/sweep.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

constexpr std::int64_t kMaxAxis = std::int64_t{1} << 20;

// A comma list of `known` values, each named as model::to_string names it (and the workload files).
template <typename T>
std::vector<T> names(const std::string& option, const std::string& text, const std::vector<T>& known) {
  std::vector<T> out;
  if (text.empty()) return out;
  for (const std::string& name : parse_name_axis(option, text)) {
    auto it = std::find_if(known.begin(), known.end(), [&](T k) { return model::to_string(k) == name; });
    if (it == known.end()) {
      std::string list;
      for (T k : known) list += (list.empty() ? "" : ", ") + model::to_string(k);
      throw InputError(kCommandLine, option, fmt::format("'{}' is not one of {}", name, list));
    }
    out.push_back(*it);
  }
  return out;
}

std::vector<int> ints(const std::string& option, const std::string& text) {
  std::vector<int> out;
  if (text.empty()) return out;
  for (std::int64_t v : parse_int_axis(option, text, 1, kMaxAxis)) out.push_back(static_cast<int>(v));
  return out;
}

class SearchCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.add_option("--topology", topology_, "cluster: a topology file or a shipped name")->type_name("FILE|NAME")->capture_default_str();
    sub.add_option("--workload", workload_, "the model (and the run's other settings): a workload file or a shipped name")
        ->type_name("FILE|NAME")
        ->capture_default_str();
    sub.add_option("--gpus", gpus_, "GPUs every configuration uses (default: every rank of the cluster)")->type_name("N");
    sub.add_option("--global-batch", global_batch_,
                   "samples per step (default: the workload's micro_batch x grad_accumulation x dp)")
        ->type_name("N");
    sub.add_option("--seq", seq_, "sequence length (default: the workload's)")->type_name("N");
    const char* axis = "LIST";
    sub.add_option("--tp", tp_, "tensor-parallel degrees (default: every divisor of the devices per node)")->type_name(axis);
    sub.add_option("--up", up_, "Ulysses degrees (default: 1)")->type_name(axis);
    sub.add_option("--pp", pp_, "pipeline degrees (default: every divisor of the layers that divides the GPUs)")->type_name(axis);
    sub.add_option("--virtual-stages", virtual_stages_,
                   "pipeline schedules with pp > 1: 1 is 1F1B, v > 1 interleaved with v chunks (default: 1,2)")
        ->type_name(axis);
    sub.add_flag("--zb-h1", zb_h1_,
                 "with pp > 1, also the zero-bubble schedule ZB-H1 (off by default: each of its candidates "
                 "costs about 10x a 1F1B one)");
    sub.add_option("--micro-batch", micro_batch_, "micro-batch sizes (default: 1,2,4,8)")->type_name(axis);
    sub.add_option("--slices", slices_,
                   "slice-overlap's slice counts k, each a candidate (default: the workload's schedule.slices)")
        ->type_name(axis);
    sub.add_option("--recompute", recompute_, "recomputation: a comma list of none, selective, full, op (default: none,selective,full)")
        ->type_name("LIST");
    sub.add_option("--zero", zero_, "DP sharding: a comma list of ddp, zero1, zero2, zero3 (default: all)")->type_name("LIST");
    sub.add_option("--schedule", schedule_, "overlap schedules: baseline, slice, commfuse, all or a comma list")
        ->type_name("KIND")
        ->capture_default_str();
    sub.add_option("--top", top_, "configurations to print (default 10)")->type_name("N");
    sub.add_option("--jobs", jobs_, "worker threads (default: the machine's hardware threads)")->type_name("N");
    sub.add_option("--profile", profile_, "calibration profile (default: the shipped profile of the cluster's device)")
        ->type_name("FILE|NAME");
    sub.add_flag("--roofline", roofline_, "price kernels with the roofline, no profile");
    sub.add_option("--symmetry", symmetry_,
                   "none, p2p or mirror, as for simulate: mirror simulates DP replica 0 (two nodes' replicas where several share one) of each stage where exact")
        ->type_name("MODE")
        ->capture_default_str();
    sub.add_flag("--full-steps", full_steps_,
                 "simulate every micro-batch of every candidate instead of extrapolating long steps from their steady "
                 "state");
    sub.add_option("--format", format_, "table or json")->type_name("FORMAT")->capture_default_str();
    sub.add_option("--output", output_, "write every simulated configuration to this file: .csv or .json")->type_name("FILE");
    sub.add_flag("--quiet", quiet_, "no progress on standard error");
    sub.add_option("--plot", plot_dir_, "write step time against memory per GPU, the Pareto front marked, into this folder")
        ->type_name("DIR");
    sub.add_option("--shard", shard_,
                   "search only candidates with index % n == i, written with --output as JSON for `fusesim merge`")
        ->type_name("i/n");
    sub.add_option("--write-workloads", workloads_dir_,
                   "write the workload of each of the --top rows into this folder as <rank>.json (the workload file "
                   "with the row's configuration), for simulate --scope step and its --trace")
        ->type_name("DIR");
  }

  int run(Io& io) override {
    SearchSpec spec;
    spec.topology = topology_;
    spec.workload = workload_;
    if (!gpus_.empty()) spec.gpus = parse_positive_int("--gpus", gpus_, 1 << 20);
    if (!global_batch_.empty()) spec.global_batch = parse_positive_int("--global-batch", global_batch_, 1 << 30);
    if (!seq_.empty()) spec.sequence_length = parse_positive_int("--seq", seq_, 1 << 24);
    spec.tps = ints("--tp", tp_);
    spec.ups = ints("--up", up_);
    spec.pps = ints("--pp", pp_);
    if (!virtual_stages_.empty()) spec.virtual_stages = ints("--virtual-stages", virtual_stages_);
    spec.zb_h1 = zb_h1_;
    if (!slices_.empty()) spec.slices = ints("--slices", slices_);
    if (!micro_batch_.empty())
      for (int v : ints("--micro-batch", micro_batch_)) spec.micro_batches.push_back(v);
    spec.recomputes = names<model::Recompute>("--recompute", recompute_, model::all_recomputes());
    spec.shardings = names<model::DpSharding>("--zero", zero_, model::all_dp_shardings());
    spec.schedules = parse_schedules(schedule_);
    if (!top_.empty()) spec.top = static_cast<std::size_t>(parse_positive_int("--top", top_, 1 << 20));
    spec.pricing = model::pricing_choice(profile_, roofline_);
    SimulateRequest symmetry_check;
    apply_symmetry(symmetry_, symmetry_check);  // a bad mode is refused before the search starts
    spec.symmetry = symmetry_;
    spec.steady_state = !full_steps_;
    if (!shard_.empty()) spec.shard = parse_shard(shard_);
    const OutputFormat format = parse_format(format_);
    const int jobs = jobs_.empty() ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))
                                   : parse_positive_int("--jobs", jobs_, 1024);
    std::string file_format;
    if (!output_.empty()) {
      file_format = output_format_for(output_, "");
      check_output_path(output_, "--output");
    }
    if (!plot_dir_.empty()) check_plot_folder(plot_dir_, "--plot");
    if (!workloads_dir_.empty()) {
      check_plot_folder(workloads_dir_, "--write-workloads");
      if (spec.shard.count > 1)
        throw InputError(kCommandLine, "--write-workloads",
                         "a shard does not know the best rows: merge the parts, then search without --shard");
    }
    if (spec.shard.count > 1 && file_format != "json")
      throw InputError(kCommandLine, "--shard",
                       "a shard is written with --output as JSON (name the file .json), so that `fusesim merge` can "
                       "join the parts");

    // Progress on standard error every 10 s or so (a search of large steps takes minutes).
    const auto start = std::chrono::steady_clock::now();
    auto last = start;
    const SearchProgress progress = [&](const SearchResult& so_far, std::size_t left) {
      const auto now = std::chrono::steady_clock::now();
      if (quiet_ || now - last < std::chrono::seconds(10)) return;
      last = now;
      TimePs best = 0;
      for (const SearchRow& row : so_far.rows)
        if (best == 0 || row.step_ps < best) best = row.step_ps;
      io.err << fmt::format("search: {} simulated, {} left out by the bound, {} to look at; best step {:.1f} ms; {:.0f} s\n",
                            so_far.simulated, so_far.bounded, left, ps_to_seconds(best) * 1e3,
                            std::chrono::duration<double>(now - start).count())
             << std::flush;
    };
    const SearchResult result = run_search(spec, jobs, progress);
    if (format == OutputFormat::json) {
      io.out << search_json(result).dump(2) << "\n";
    } else {
      io.out << search_table(result);
    }
    if (!output_.empty())
      write_output_file(output_, file_format == "json" ? search_json(result).dump(2) + "\n" : search_csv(result));
    if (!plot_dir_.empty()) io.err << write_search_plot(result, plot_dir_);
    if (!workloads_dir_.empty())
      io.err << write_search_workloads(result, spec, resolve_input(spec.workload, "workloads").text, workloads_dir_);
    return 0;
  }

 private:
  std::string topology_ = "dgx-h100-4node";
  std::string workload_ = "llama-3-70b-4node";
  std::string gpus_, global_batch_, seq_, tp_, up_, pp_, virtual_stages_, slices_, micro_batch_, recompute_, zero_;
  std::string schedule_ = "all";
  std::string top_, jobs_, profile_;
  bool roofline_ = false;
  std::string symmetry_ = "mirror";
  std::string format_ = "table";
  std::string output_, plot_dir_, shard_, workloads_dir_;
  bool quiet_ = false;
  bool full_steps_ = false;
  bool zb_h1_ = false;
};

}  // namespace

std::unique_ptr<Command> make_search_command() { return std::make_unique<SearchCommand>(); }

}  // namespace fusesim::cli
