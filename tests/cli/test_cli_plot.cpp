// `fusesim plot` and `sweep --plot`: data files and gnuplot scripts always, images when gnuplot is on
// the PATH.
#include <algorithm>
#include <cstdlib>
#include <fstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "fusesim/cli/plot.hpp"
#include "fusesim/cli/sweep.hpp"
#include "process.hpp"

using namespace fusesim;
using namespace fusesim::cli;
using namespace fusesim::testing;

namespace {

const char* kFigures[] = {"exposed_comm_vs_seq", "step_time_vs_seq",     "speedup_vs_seq", "speedup_vs_tp",
                          "best_schedule_map",   "overlap_ratio_vs_seq", "mfu_vs_seq"};

// The data lines of a .dat file (comments and blank lines left out).
std::vector<std::string> data_lines(const std::string& text);

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

std::vector<std::string> data_lines(const std::string& text) {
  std::vector<std::string> out;
  for (const std::string& l : lines_of(text))
    if (!l.empty() && l[0] != '#') out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("plot writes data and scripts of every figure - images when gnuplot is present", "[cli][plot]") {
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
  // TP does not vary: no figure against it and no map; five against sequence length, the speed-up
  // among them.
  CHECK(rep.log.find("the TP degree does not vary") != std::string::npos);
  CHECK(rep.files.size() == 10);  // 5 figures x (.dat, .gp)
  CHECK(std::filesystem::exists(dir.file("out/speedup_vs_seq.dat")));
  CHECK_FALSE(std::filesystem::exists(dir.file("out/best_schedule_map.dat")));
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

TEST_CASE("plot reads a sweep CSV and draws what it draws from the JSON", "[cli][plot]") {
  ScratchDir dir;
  const std::vector<std::string> sweep{"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "2k,4k",
                                       "--tp", "2,4", "--quiet"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> v = sweep;
    v.insert(v.end(), more.begin(), more.end());
    return v;
  };
  REQUIRE(run_fusesim(with({"--output", "r.json"}), dir).exit_code == 0);
  REQUIRE(run_fusesim(with({"--output", "r.csv"}), dir).exit_code == 0);
  const auto j = run_fusesim({"plot", "r.json", "--out-dir", "pj", "--gnuplot", "/nonexistent/gnuplot"}, dir);
  const auto c = run_fusesim({"plot", "r.csv", "--out-dir", "pc", "--gnuplot", "/nonexistent/gnuplot"}, dir);
  INFO(c.err);
  REQUIRE(c.exit_code == j.exit_code);
  CHECK(c.err.find("JSON") == std::string::npos);
  // The same data, figure by figure (the CSV holds no sweep spec: the "# sweep:" comment differs).
  for (const char* f : kFigures) {
    INFO(f);
    const std::string a = slurp(dir.file(std::string("pj/") + f + ".dat"));
    const std::string b = slurp(dir.file(std::string("pc/") + f + ".dat"));
    REQUIRE_FALSE(a.empty());
    CHECK(data_lines(a) == data_lines(b));
  }
  // A malformed CSV is bad input naming the file and the line.
  {
    std::ofstream(dir.file("bad.csv")) << slurp(dir.file("r.csv")) << "1,2,3\n";
  }
  const auto bad = run_fusesim({"plot", "bad.csv", "--out-dir", "pb"}, dir);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.rfind("error: bad.csv: line 14: ", 0) == 0);  // header + 12 rows, then the bad one
  {
    std::ofstream(dir.file("cols.csv")) << "config,topology,speed\n";
  }
  const auto cols = run_fusesim({"plot", "cols.csv", "--out-dir", "pb"}, dir);
  CHECK(cols.exit_code == 2);
  CHECK(cols.err.rfind("error: cols.csv: line 1: column 3: ", 0) == 0);
}

TEST_CASE("plot: speed-up against sequence length alone, one y range per figure, the best-schedule map",
          "[cli][plot]") {
  ScratchDir dir;
  REQUIRE(run_fusesim({"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "2k,4k", "--tp",
                       "4,8", "--output", "r.json", "--quiet"},
                      dir)
              .exit_code == 0);
  const SweepResult res = read_sweep_json(dir.file("r.json"));
  REQUIRE(res.rows.size() == 12);  // configurations (seq, tp): 0 (2k, 4), 1 (2k, 8), 2 (4k, 4), 3 (4k, 8)
  auto step = [&](std::size_t config, std::size_t schedule) {
    return row_number(res.rows[config * 3 + schedule], "step_time_s");
  };
  REQUIRE(run_fusesim({"plot", "r.json", "--out-dir", "p", "--gnuplot", "/nonexistent/gnuplot"}, dir).exit_code == 1);

  // Speed-up against sequence length: baseline / time; panel 0 is TP 4 (configurations 0 and 2).
  const auto sp = data_lines(slurp(dir.file("p/speedup_vs_seq.dat")));
  REQUIRE(sp.size() == 4);
  CHECK(sp[0] == fmt::format("2048 1 {:.9g} {:.9g}", step(0, 0) / step(0, 1), step(0, 0) / step(0, 2)));
  CHECK(sp[1] == fmt::format("4096 1 {:.9g} {:.9g}", step(2, 0) / step(2, 1), step(2, 0) / step(2, 2)));

  // One y range for both panels of the exposed-communication figure: 0 to 1.08 x the largest value of
  // either panel, in ms.
  double most = 0;
  for (const SweepRow& row : res.rows) most = std::max(most, row_number(row, "exposed_comm_s") * 1e3);
  const std::string gp = slurp(dir.file("p/exposed_comm_vs_seq.gp"));
  const std::string range = fmt::format("set yrange [0:{:.6g}]", most * 1.08);
  CHECK(gp.find(range) != std::string::npos);
  std::size_t ranges = 0;
  for (std::size_t at = gp.find("set yrange"); at != std::string::npos; at = gp.find("set yrange", at + 1)) {
    CHECK(gp.compare(at, range.size(), range) == 0);  // svg and png: the same range, set once for all panels
    ++ranges;
  }
  CHECK(ranges == 2);

  // The map: per (seq, tp), the schedule of least step time and its speed-up over baseline.
  const auto map = data_lines(slurp(dir.file("p/best_schedule_map.dat")));
  REQUIRE(map.size() == 4);
  for (std::size_t config = 0; config < 4; ++config) {
    std::size_t best = 0;
    for (std::size_t k = 1; k < 3; ++k)
      if (step(config, k) < step(config, best)) best = k;
    const std::string name = row_string(res.rows[config * 3 + best], "schedule");
    const std::int64_t seq = row_integer(res.rows[config * 3], "sequence_length");
    const std::int64_t tp = row_integer(res.rows[config * 3], "tp");
    INFO(map[config]);
    CHECK(map[config].rfind(fmt::format("{} {} ", seq, tp), 0) == 0);
    CHECK(map[config].find(fmt::format("\"{} {:.2f}x\" {} {:.9g}", name, step(config, 0) / step(config, best), name,
                                       step(config, 0) / step(config, best))) != std::string::npos);
  }
}

TEST_CASE("configurations skipped for memory or divisibility keep their rows with a status, and show in the "
          "figures",
          "[cli][plot][sweep]") {
  ScratchDir dir;
  // llama-3-8b on one DGX H100: TP 1 needs over 150 GB per rank (> 80 GB), TP 4 fits, 32 heads do not
  // divide by TP 3.
  const std::vector<std::string> sweep{"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq",
                                       "2k,4k", "--tp", "1,4,3", "--quiet"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> v = sweep;
    v.insert(v.end(), more.begin(), more.end());
    return v;
  };
  REQUIRE(run_fusesim(with({"--output", "r.csv"}), dir).exit_code == 0);
  REQUIRE(run_fusesim(with({"--output", "r.json"}), dir).exit_code == 0);
  // CSV: 6 configurations x 3 schedules, in configuration order; status last, metrics empty when skipped.
  const auto csv = lines_of(slurp(dir.file("r.csv")));
  REQUIRE(csv.size() == 19);
  CHECK(csv[0].size() > 7);
  CHECK(csv[0].substr(csv[0].size() - 7) == ",status");
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  const std::size_t columns = row_columns().size();
  const std::string empty_metrics(columns - config_column_count() - 1, ',');
  for (std::size_t i = 1; i < csv.size(); ++i) {
    INFO(csv[i]);
    const std::size_t config = (i - 1) / 3;  // tp 1, 4, 3 for seq 2k, then for 4k
    const std::size_t tp_index = config % 3;
    if (tp_index == 0) CHECK(ends_with(csv[i], empty_metrics + ",skipped-memory"));
    if (tp_index == 1) CHECK(ends_with(csv[i], ",ok"));
    if (tp_index == 2) CHECK(ends_with(csv[i], empty_metrics + ",skipped-divisibility"));
    CHECK(csv[i].rfind(std::to_string(config) + ",dgx-h100,", 0) == 0);
  }
  // JSON: the same rows, null metrics; the reasons in "skipped"; read back and written again, the same.
  const std::string json_text = slurp(dir.file("r.json"));
  CHECK(json_text.find("\"step_time_s\": null") != std::string::npos);
  CHECK(json_text.find("\"status\": \"skipped-memory\"") != std::string::npos);
  const SweepResult res = read_sweep_json(dir.file("r.json"));
  CHECK(res.rows.size() == 6);
  REQUIRE(res.skipped.size() == 4);
  CHECK(problem_status(res.skipped[0]) == "skipped-memory");
  CHECK(problem_status(res.skipped[1]) == "skipped-divisibility");
  CHECK(sweep_json(res) == json_text);
  CHECK(sweep_csv(res) == slurp(dir.file("r.csv")));
  CHECK(sweep_csv(read_sweep_csv(dir.file("r.csv"))) == slurp(dir.file("r.csv")));

  // Parts of the sweep merge into the same file, skipped rows in their places.
  REQUIRE(run_fusesim(with({"--shard", "0/2", "--output", "a.json"}), dir).exit_code == 0);
  REQUIRE(run_fusesim(with({"--shard", "1/2", "--output", "b.json"}), dir).exit_code == 0);
  REQUIRE(run_fusesim({"merge", "b.json", "a.json", "-o", "m.json"}, dir).exit_code == 0);
  CHECK(slurp(dir.file("m.json")) == json_text);

  // The figures mark them where they would have been: TP 1 and TP 3 panels, both sequence lengths.
  REQUIRE(run_fusesim({"plot", "r.csv", "--out-dir", "p", "--gnuplot", "/nonexistent/gnuplot"}, dir).exit_code == 1);
  const std::string dat = slurp(dir.file("p/speedup_vs_seq.dat"));
  CHECK(dat.find("# panel 0: dgx-h100, llama-3-8b, TP 1\n# not simulated: 2048 skipped-memory\n"
                 "# not simulated: 4096 skipped-memory\n") != std::string::npos);
  CHECK(dat.find("# panel 2: dgx-h100, llama-3-8b, TP 3\n# not simulated: 2048 skipped-divisibility\n") !=
        std::string::npos);
  const std::string gp = slurp(dir.file("p/speedup_vs_seq.gp"));
  CHECK(gp.find("set label 1 \"skipped-memory\" at first 2048, graph 0.03") != std::string::npos);
  CHECK(gp.find("set label 2 \"skipped-divisibility\" at first 4096, graph 0.03") != std::string::npos);
  const auto map = data_lines(slurp(dir.file("p/best_schedule_map.dat")));
  REQUIRE(map.size() == 6);
  CHECK(map[0] == "2048 1 12434877 \"skipped-memory\" - ?");  // grey #bdbdbd
  CHECK(map[1] == "2048 3 12434877 \"skipped-divisibility\" - ?");  // rows by (seq, tp): TP 1, 3, 4
  // gnuplot draws panels that hold no point at all (every configuration of TP 1 skipped).
  if (!find_on_path("gnuplot").empty()) {
    const auto drawn = run_fusesim({"plot", "r.json", "--out-dir", "g"}, dir);
    INFO(drawn.err);
    CHECK(drawn.exit_code == 0);
    CHECK(std::filesystem::file_size(dir.file("g/speedup_vs_seq.png")) > 1000);
  }
}
