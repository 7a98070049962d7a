// The registry of subcommands. A new subcommand is one source file with a make_*_command() factory
// (declared in cli/commands.hpp) and one line here.
#include "fusesim/cli/commands.hpp"

namespace fusesim::cli {

std::vector<CommandSpec> registered_commands() {
  return {
      {"simulate", "simulate overlap schedules of a workload on a cluster and report the metrics",
       make_simulate_command},
      {"verify", "run every schedule's data movement and arithmetic on small matrices and compare with the "
                 "unpartitioned computation",
       make_verify_command},
      {"list", "list the shipped topologies and workloads", make_list_command},
  };
}

}  // namespace fusesim::cli
