#pragma once
// Figures of a sweep through gnuplot: for each figure a data file (<name>.dat), a gnuplot script
// (<name>.gp) that draws <name>.svg and <name>.png from it, and the images when gnuplot is on the
// PATH. Without gnuplot the data and scripts are still written (run `gnuplot <name>.gp` later).
#include <string>
#include <vector>

#include "fusesim/cli/sweep.hpp"

namespace fusesim::cli {

struct PlotReport {
  std::vector<std::string> files;  // written, in order (paths inside the folder)
  bool gnuplot_found = false;
  bool gnuplot_failed = false;     // gnuplot ran and reported an error on a script
  std::string log;                 // lines for stderr: figures written or skipped, and why
};

// Writes the figures of `result` into `out_dir` (created when missing). `gnuplot`: the program to
// run; empty: "gnuplot" looked up on the PATH. InputError when the folder cannot be used.
PlotReport write_plots(const SweepResult& result, const std::string& out_dir, const std::string& gnuplot = "");
// What write_plots checks of its folder before it writes, for a sweep to run before it simulates: the
// folder exists, or its first existing ancestor is a writable folder (it will be created). `option`
// names the flag in the error (--out-dir, --plot).
void check_plot_folder(const std::string& out_dir, const std::string& option);

// The full path of `program` on the PATH, or empty.
std::string find_on_path(const std::string& program);

}  // namespace fusesim::cli
