// `fusesim plot` and `sweep --plot`: data files and gnuplot scripts always, images when gnuplot is on
// the PATH.
#include <cstdlib>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "fusesim/cli/plot.hpp"
#include "fusesim/cli/sweep.hpp"
#include "process.hpp"

using namespace fusesim;
using namespace fusesim::cli;
using namespace fusesim::testing;

namespace {

const char* kFigures[] = {"exposed_comm_vs_seq", "step_time_vs_seq", "speedup_vs_tp", "overlap_ratio_vs_seq",
                          "mfu_vs_seq"};

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    const auto nl = s.find('\n', pos);
    out.push_back(s.substr(pos, nl - pos));
    pos = nl == std::string::npos ? s.size() : nl + 1;
  }
  return out;
}

}  // namespace

TEST_CASE("plot writes data and scripts of every figure; images when gnuplot is present", "[cli][plot]") {
  ScratchDir dir;
  // 3 sequences x 2 TP degrees x 3 schedules (the memory check is not the point here).
  REQUIRE(run_fusesim({"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "2k:8k:x2", "--tp", "2,4", "--output", "r.json",
                       "--quiet", "--force-memory"},
                      dir)
              .exit_code == 0);
  const auto r = run_fusesim({"plot", "r.json", "--out-dir", "plots"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const bool gnuplot = !find_on_path("gnuplot").empty();
  for (const char* f : kFigures) {
    const std::string stem = dir.file(std::string("plots/") + f);
    CHECK(std::filesystem::exists(stem + ".dat"));
    CHECK(std::filesystem::exists(stem + ".gp"));
    if (gnuplot) {
      CHECK(std::filesystem::file_size(stem + ".svg") > 1000);
      const std::string png = slurp(stem + ".png");
      REQUIRE(png.size() > 1000);
      CHECK(png.substr(1, 3) == "PNG");
      CHECK(slurp(stem + ".svg").find("<svg") != std::string::npos);
    }
  }

  // The step-time data: one block per TP degree (the panels), a line per sequence length, columns
  // x, baseline, slice, commfuse, in milliseconds: the sweep's seconds x 1000.
  const SweepResult res = read_sweep_json(dir.file("r.json"));
  const auto dat = lines_of(slurp(dir.file("plots/step_time_vs_seq.dat")));
  std::vector<std::string> data;
  for (const std::string& l : dat)
    if (!l.empty() && l[0] != '#') data.push_back(l);
  REQUIRE(data.size() == 6);  // 2 panels x 3 sequence lengths
  CHECK(slurp(dir.file("plots/step_time_vs_seq.dat")).find("# panel 1: dgx-h100, llama-3-8b, TP 4") != std::string::npos);
  // Rows 0..2 of the sweep: configuration 0 = (seq 2048, TP 2), baseline, slice, commfuse.
  CHECK(data[0] == fmt::format("2048 {:.9g} {:.9g} {:.9g}", row_number(res.rows[0], "step_time_s") * 1e3,
                               row_number(res.rows[1], "step_time_s") * 1e3,
                               row_number(res.rows[2], "step_time_s") * 1e3));
  // Speed-up against TP: x = TP degree, baseline 1 by definition, the others baseline / time.
  const auto sp = lines_of(slurp(dir.file("plots/speedup_vs_tp.dat")));
  std::vector<std::string> sp_data;
  for (const std::string& l : sp)
    if (!l.empty() && l[0] != '#') sp_data.push_back(l);
  REQUIRE(sp_data.size() == 6);  // 3 panels (sequence lengths) x 2 TP degrees
  const double b = row_number(res.rows[0], "step_time_s"), c = row_number(res.rows[2], "step_time_s");
  CHECK(sp_data[0] == fmt::format("2 1 {:.9g} {:.9g}", b / row_number(res.rows[1], "step_time_s"), b / c));

  const std::string gp = slurp(dir.file("plots/exposed_comm_vs_seq.gp"));
  CHECK(gp.find("set logscale x 2") != std::string::npos);
  CHECK(gp.find("set output \"exposed_comm_vs_seq.svg\"") != std::string::npos);
  CHECK(gp.find("set output \"exposed_comm_vs_seq.png\"") != std::string::npos);
  CHECK(gp.find("\"2k\" 2048") != std::string::npos);
}

TEST_CASE("plot without gnuplot writes data and scripts and says so", "[cli][plot]") {
  ScratchDir dir;
  SweepSpec spec;
  spec.workloads = {"commfuse-tpsp-block"};
  spec.sequence_lengths = {1024, 2048};
  spec.tps = {4};
  SweepOptions opt;
  const SweepResult res = run_sweep(spec, opt);
  REQUIRE(res.rows.size() == 6);
  // PATH pointing at an empty folder: no gnuplot to be found.
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  ::setenv("PATH", dir.path().c_str(), 1);
  const PlotReport rep = write_plots(res, dir.file("out"));
  ::setenv("PATH", saved.c_str(), 1);
  CHECK_FALSE(rep.gnuplot_found);
  CHECK(rep.log.find("gnuplot is not on the PATH") != std::string::npos);
  // TP does not vary: no speed-up figure, the other four against sequence length.
  CHECK(rep.log.find("no speed-up figure") != std::string::npos);
  CHECK(rep.files.size() == 8);  // 4 figures x (.dat, .gp)
  CHECK(std::filesystem::exists(dir.file("out/mfu_vs_seq.gp")));
  CHECK_FALSE(std::filesystem::exists(dir.file("out/mfu_vs_seq.png")));
  CHECK_FALSE(std::filesystem::exists(dir.file("out/speedup_vs_tp.dat")));
}

TEST_CASE("sweep --plot draws beside the sweep, and a bad folder is exit 2", "[cli][plot]") {
  ScratchDir dir;
  const auto r = run_fusesim({"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "4096", "--tp", "2,4,8", "--output",
                              "r.csv", "--plot", "figs", "--quiet"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  // Only TP varies: speed-up, overlap ratio and MFU against TP.
  CHECK(std::filesystem::exists(dir.file("figs/speedup_vs_tp.dat")));
  CHECK(std::filesystem::exists(dir.file("figs/overlap_ratio_vs_tp.gp")));
  CHECK(std::filesystem::exists(dir.file("figs/mfu_vs_tp.dat")));
  CHECK_FALSE(std::filesystem::exists(dir.file("figs/step_time_vs_seq.dat")));

  {
    std::ofstream(dir.file("afile")) << "x";
  }
  REQUIRE(run_fusesim({"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--tp", "2,4", "--output", "r.json", "--quiet"}, dir)
              .exit_code == 0);
  const auto bad = run_fusesim({"plot", "r.json", "--out-dir", "afile"}, dir);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("afile") != std::string::npos);
  const auto notsweep = run_fusesim({"plot", "afile"}, dir);
  CHECK(notsweep.exit_code == 2);
}
