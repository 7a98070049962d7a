#pragma once
// `fusesim search` (docs/cli.md "search"): for a model, a cluster, a global batch and a sequence
// length, every configuration tp x up x pp x dp x pipeline schedule x micro-batch x recompute x ZeRO
// stage x overlap schedule that uses the GPUs asked for; those that cannot run are pruned, counted by
// reason; the others are simulated (a whole step each) in the order of an exact lower bound on their
// step time, until no configuration left can enter the best N (or improve its overlap schedule's
// best): the best N are those an exhaustive simulation of every candidate would find.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/cli/sweep.hpp"
#include "fusesim/model/pricing.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/util/units.hpp"

namespace fusesim::cli {

struct SearchSpec {
  std::string topology = "dgx-h100-4node";
  std::string workload = "llama-3-70b-4node";
  std::optional<int> gpus;                   // default: every rank of the cluster
  std::optional<std::int64_t> global_batch;  // samples per step; default: the workload's micro_batch x grad_accumulation x dp
  std::optional<std::int64_t> sequence_length;  // default: the workload's
  // The axes; empty: tp every divisor of the devices per node, up 1, pp every divisor of the layers
  // that divides the GPUs, micro-batch 1, 2, 4, 8, recompute none, selective, full, every ZeRO stage.
  std::vector<int> tps, ups, pps;
  std::vector<std::int64_t> micro_batches;
  std::vector<model::Recompute> recomputes;
  std::vector<model::DpSharding> shardings;
  std::vector<model::ScheduleKind> schedules = model::all_schedule_kinds();
  // Pipeline schedules with pp > 1: 1 is 1F1B, v > 1 interleaved 1F1B with v chunks per rank.
  std::vector<int> virtual_stages{1, 2};
  // With pp > 1 also ZB-H1 (pp_schedule "zb-h1"), after the virtual_stages axis. Off by default: on
  // Llama-3-70B over 64 H100 its candidates took 8x a 1F1B one's time to simulate, and the whole
  // search 199 s and 22 GB instead of 72 s and 1.5 GB (BENCHMARKS.md, "fusesim search").
  bool zb_h1 = false;
  // Slice-overlap's slice counts k (each a candidate of its own); empty: the workload's
  // schedule.slices alone. The other schedules have no k.
  std::vector<int> slices;
  std::size_t top = 10;
  model::PricingChoice pricing;
  // simulate --symmetry for every candidate: none, p2p or mirror (DP replica 0 of each stage where
  // exact, every rank where not; docs/schedules.md "Symmetry").
  std::string symmetry = "mirror";
  // Steps of many micro-batches are extrapolated from their steady state (docs/cli.md "fusesim search",
  // "Steady state"): false (--full-steps) simulates every micro-batch of every candidate.
  bool steady_state = true;
  // --shard i/n: only the candidates whose enumeration index % n == i (and, in shard 0, the counts of
  // those pruned before they get an index); the parts join with merge_searches (`fusesim merge`).
  Shard shard;
};

struct SearchCandidate {
  std::size_t index = 0;  // in enumeration order (the tie-break)
  model::Workload workload;
  model::ScheduleKind kind = model::ScheduleKind::baseline;
  // "tp 8 up 1 pp 2 dp 4 1f1b mb 1x16 recompute full zero1 commfuse"
  std::string describe() const;
};

struct SearchRow {
  SearchCandidate candidate;
  TimePs lower_bound_ps = 0;
  TimePs step_ps = 0;
  double tokens_per_s_per_gpu = 0.0;
  double mfu = 0.0;
  TimePs exposed_comm_ps = 0;     // the critical rank's
  double bubble_fraction = 0.0;   // the largest stage bubble's fraction of the step; 0 without pp
  Bytes memory_bytes = 0;         // per rank, the fullest stage (docs/memory.md)
  // The step was extrapolated from simulated steps of fewer micro-batches whose figures grow by the
  // same amount per micro-batch (SearchSpec::steady_state); false: every micro-batch simulated.
  bool extrapolated = false;
};

struct SearchResult {
  std::string topology_label, workload_label, cluster_name, model_name;
  int gpus = 0;
  std::int64_t global_batch = 0;
  std::int64_t sequence_length = 0;
  std::size_t candidates = 0;
  std::map<std::string, std::size_t> pruned;  // why a candidate cannot run -> how many
  std::size_t simulated = 0;
  std::size_t bounded = 0;   // could run, not simulated: their bound is above the N-th best and their schedule's best
  std::size_t extrapolated = 0;  // of the simulated, those whose step was extrapolated from its steady state
  std::size_t same_graph = 0;    // of the simulated, those given the step of a candidate with the same task graph
  std::vector<SearchRow> rows;  // simulated, shortest step first (ties: enumeration order)
  std::size_t top = 10;
  std::string pricing;          // what priced the kernels
  std::string symmetry;         // SearchSpec::symmetry
  Shard shard;                  // SearchSpec::shard
  // The search's definition (files, GPUs, batch, sequence, every axis as expanded, top, symmetry):
  // the parts of a sharded search must agree on it.
  nlohmann::json spec;
};

// Called between batches with the result so far (rows unsorted) and the candidates left to look at.
using SearchProgress = std::function<void(const SearchResult& so_far, std::size_t left)>;
// Throws InputError for bad input (files, options: "<command line>" and the option).
SearchResult run_search(const SearchSpec& spec, int jobs, const SearchProgress& progress = {});

// The rows on the Pareto front of step time against memory per GPU: no other row has a shorter
// step and no more memory, or less memory and no longer step. Indices into rows, by memory.
std::vector<std::size_t> pareto_front(const std::vector<SearchRow>& rows);

// A search written by search_json (a shard's part); InputError with the file and JSON path on bad input.
SearchResult read_search_json(const std::string& path);
SearchResult parse_search_json(const JsonDocument& doc);
// The parts of a sharded search joined: every shard once, the same spec; rows, counts and pruning
// reasons summed. Each shard's bound left out only candidates that could not enter its own best N or
// its schedule's best, so the joined best N and each schedule's best are the unsharded search's (its
// other rows: whatever the shards simulated). InputError names the part and the JSON path.
SearchResult merge_searches(const std::vector<std::string>& paths, const std::vector<SearchResult>& parts);
// Whether a JSON file is a search result (its "format"), so that `fusesim merge` can tell the kinds apart.
bool is_search_json(const JsonDocument& doc);

std::string search_table(const SearchResult& r);
nlohmann::json search_json(const SearchResult& r);
std::string search_csv(const SearchResult& r);
// The workload of each of the best `top` rows (SearchResult::top), written into `dir` as <rank>.json:
// the search's workload file (`workload_text`, its keys and order kept) with the row's configuration
// written over it (sequence, micro-batch, gradient accumulation, recomputation, degrees, pipeline
// schedule, ZeRO stage and its gathers, schedule kind and slices), so that `fusesim simulate
// --workload <dir>/<rank>.json --scope step --schedule <kind>` runs that row and reports its step.
// Returns the lines to print (the files, and the command for the best row).
std::string write_search_workloads(const SearchResult& r, const SearchSpec& spec, const std::string& workload_text,
                                   const std::string& dir);
// The same for a search read back from its parts (`fusesim merge --write-workloads`): the workload file
// the parts name (workload_file) read again, each row's configuration put on it as the search built
// its candidates, and the simulate command printed with the search's topology, symmetry and
// --profile / --roofline. InputError naming the workload file where it cannot be read.
std::string write_merged_search_workloads(const SearchResult& merged, const std::string& dir);
// Step time against memory per GPU, the Pareto front marked: <dir>/search.dat, search.gp and, with
// gnuplot on the PATH, search.svg. Returns the lines to print (files written, or why not drawn).
std::string write_search_plot(const SearchResult& r, const std::string& dir);

}  // namespace fusesim::cli
