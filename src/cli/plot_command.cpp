// `fusesim plot`: the figures of a sweep result file, through gnuplot.
#include <ostream>

#include "fusesim/cli/commands.hpp"
#include "fusesim/cli/plot.hpp"
#include "fusesim/cli/sweep.hpp"

namespace fusesim::cli {
namespace {

class PlotCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.add_option("results", input_, "a sweep result file (.json or .csv, written by `fusesim sweep` or `fusesim merge`)")
        ->type_name("FILE")
        ->required();
    sub.add_option("--out-dir", out_dir_, "folder for the figures (created when missing)")
        ->type_name("DIR")
        ->capture_default_str();
    sub.add_option("--gnuplot", gnuplot_, "the gnuplot program (default: gnuplot on the PATH)")->type_name("FILE");
  }

  int run(Io& io) override {
    const SweepResult result = read_sweep_file(input_);
    const PlotReport report = write_plots(result, out_dir_, gnuplot_);
    io.err << report.log;
    for (const std::string& f : report.files) io.out << f << "\n";
    return report.gnuplot_failed ? 1 : 0;
  }

 private:
  std::string input_;
  std::string out_dir_ = "plots";
  std::string gnuplot_;
};

}  // namespace

std::unique_ptr<Command> make_plot_command() { return std::make_unique<PlotCommand>(); }

}  // namespace fusesim::cli
