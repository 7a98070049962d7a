#pragma once
// Factories of the built-in subcommands (one source file each in src/cli/).
#include <memory>

#include "fusesim/cli/app.hpp"

namespace fusesim::cli {

std::unique_ptr<Command> make_simulate_command();  // src/cli/simulate_command.cpp
std::unique_ptr<Command> make_list_command();      // src/cli/list_command.cpp
std::unique_ptr<Command> make_verify_command();    // src/cli/verify_command.cpp
std::unique_ptr<Command> make_generate_command();       // src/cli/generate_command.cpp
std::unique_ptr<Command> make_simulate_dag_command();   // src/cli/generate_command.cpp
std::unique_ptr<Command> make_calibrate_command();      // src/cli/calibrate_command.cpp
std::unique_ptr<Command> make_validate_command();       // src/cli/validate_command.cpp
std::unique_ptr<Command> make_sweep_command();          // src/cli/sweep_command.cpp
std::unique_ptr<Command> make_search_command();         // src/cli/search_command.cpp
std::unique_ptr<Command> make_merge_command();          // src/cli/merge_command.cpp
std::unique_ptr<Command> make_check_command();          // src/cli/check_command.cpp
std::unique_ptr<Command> make_trace_command();          // src/cli/trace_command.cpp
std::unique_ptr<Command> make_plot_command();           // src/cli/plot_command.cpp
std::unique_ptr<Command> make_routes_command();         // src/cli/routes_command.cpp

}  // namespace fusesim::cli
