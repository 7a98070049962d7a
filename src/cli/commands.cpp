// The registry of subcommands. A new subcommand is one source file with a make_*_command() factory
// (declared in cli/commands.hpp) and one line here.
#include "fusesim/cli/commands.hpp"

namespace fusesim::cli {

std::vector<CommandSpec> registered_commands() {
  return {
      {"simulate", "simulate overlap schedules of a workload on a cluster and report the metrics",
       make_simulate_command},
      {"simulate-dag", "simulate a task graph from a file (a schedule of your own, or one `generate` wrote)",
       make_simulate_dag_command},
      {"generate", "write a generated schedule's task graph as a JSON file", make_generate_command},
      {"verify", "run every schedule's data movement and arithmetic on small matrices and compare with the "
                 "unpartitioned computation",
       make_verify_command},
      {"validate", "compare predictions with published (or your own) measurements: error per case and MAPE, "
                   "roofline and calibration profile",
       make_validate_command},
      {"sweep", "simulate a grid of configurations (sequence, TP, UP, DP, micro-batch, slices, clusters, "
                "workloads) and write one row per run as CSV or JSON",
       make_sweep_command},
      {"search", "find the best configurations of a model on a cluster: tp x up x pp x dp x micro-batch x "
                 "recompute x ZeRO x overlap schedule, pruned by memory and divisibility, simulated in the order "
                 "of an exact lower bound",
       make_search_command},
      {"merge", "join the parts of a sharded sweep (sweep --shard i/n) into one result file", make_merge_command},
      {"plot", "draw the figures of a sweep result with gnuplot (SVG and PNG, with data and scripts)",
       make_plot_command},
      {"check", "re-run the configurations of a baseline file and fail when a metric regressed", make_check_command},
      {"list", "list the shipped topologies and workloads", make_list_command},
      {"routes", "print the route between two ranks of a cluster (links, bottleneck, latency) or a summary of all",
       make_routes_command},
      {"trace", "read measured Kineto traces (a file per rank): compute, communication, overlap, exposed "
                "communication and idle time per step, time by kernel class",
       make_trace_command},
      {"calibrate", "fit a calibration profile from microbenchmark samples or nccl-tests logs, or plan the shapes to measure",
       make_calibrate_command},
  };
}

}  // namespace fusesim::cli
