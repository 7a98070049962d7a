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
      {"list", "list the shipped topologies and workloads", make_list_command},
  };
}

}  // namespace fusesim::cli
