#include "fusesim/cli/plot.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "fusesim/cli/app.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

namespace fs = std::filesystem;

struct Figure {
  std::string name;    // file stem
  std::string title;
  std::string x;       // "sequence_length" or "tp"
  std::string metric;  // a row column; "speedup" = baseline step time / step time
  std::string ylabel;
  double scale = 1.0;  // metric x scale = plotted value
  bool ylog = false;
  std::string yrange = "[0:*]";
  bool map = false;    // the best-schedule map over sequence length x TP (x and metric unused)
};

struct Style {
  const char* color;
  int point;
  int dash;
};
Style style_of(const std::string& schedule) {
  if (schedule == "baseline") return {"#4d4d4d", 7, 1};
  if (schedule == "slice") return {"#e66101", 5, 1};
  if (schedule == "commfuse") return {"#0571b0", 9, 1};
  return {"#7b3294", 11, 1};
}

// Shell word for std::system: single quotes, with embedded ones closed and escaped.
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A gnuplot string literal (double quotes; backslashes and quotes escaped).
std::string gp_string(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

std::string tick_label(const std::string& x, std::int64_t v) {
  if (x == "sequence_length" && v >= 1024 && v % 1024 == 0) return fmt::format("{}k", v / 1024);
  return std::to_string(v);
}

std::string short_name(const std::string& name_or_path) {
  const fs::path p(name_or_path);
  return p.has_extension() ? p.stem().string() : name_or_path;
}

// Columns that tell panels apart, with how a panel title shows them.
struct KeyColumn {
  const char* column;
  const char* label;  // "{}" replaced by the value
};
const std::vector<KeyColumn> kKeyColumns{
    {"topology", "{}"},          {"workload", "{}"},  {"parallelism", "{}"},      {"engine", "engines {}"},
    {"scope", "{} scope"},
    {"passes", "{}"},            {"sequence_length", "seq {}"}, {"tp", "TP {}"}, {"up", "UP {}"},
    {"pp", "PP {}"},             {"dp", "DP {}"},             {"micro_batch", "micro-batch {}"},
    {"grad_accumulation", "{} micro-batches"}, {"slices", "k = {}"}, {"recompute", "recompute {}"},
    {"dp_sharding", "{}"},
};

std::string cell_text(const SweepRow& row, const std::string& column) {
  const std::size_t i = static_cast<std::size_t>(
      std::find(row_columns().begin(), row_columns().end(), column) - row_columns().begin());
  const Cell& c = row.cells.at(i);
  if (const auto* s = std::get_if<std::string>(&c)) return *s;
  if (const auto* v = std::get_if<std::int64_t>(&c)) return std::to_string(*v);
  return fmt::format("{}", std::get<double>(c));
}

struct Panel {
  std::vector<std::string> key;  // kKeyColumns values (the x column's left empty)
  // x -> schedule -> value
  std::map<std::int64_t, std::map<std::string, double>> points;
  std::map<std::int64_t, double> baseline_step;  // for speed-up
  std::map<std::int64_t, std::string> skipped;    // x -> status of a configuration not simulated
};

// Every row in configuration order, with its status ("ok", or that of a configuration not simulated,
// whose rows hold the configuration columns only: the row_* accessors of those columns read them), so
// that panels come in the order of the sweep whichever configurations ran.
template <typename Fn>
void for_each_row_with_status(const SweepResult& result, Fn fn) {
  std::vector<std::pair<std::size_t, const SweepProblem*>> problems;
  for (const auto* list : {&result.skipped, &result.failed})
    for (const SweepProblem& p : *list) problems.push_back({p.config, &p});
  std::stable_sort(problems.begin(), problems.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::size_t k = 0;
  auto flush_until = [&](std::size_t config) {
    for (; k < problems.size() && problems[k].first < config; ++k)
      for (const std::vector<Cell>& cells : problems[k].second->rows)
        fn(SweepRow{problems[k].first, cells}, problem_status(*problems[k].second));
  };
  static const std::string ok = "ok";
  for (const SweepRow& row : result.rows) {
    flush_until(row.config);
    fn(row, ok);
  }
  flush_until(static_cast<std::size_t>(-1));
}

struct Built {
  std::vector<Panel> panels;
  std::vector<std::string> schedules;  // present, in first-seen order
  std::vector<std::int64_t> xs;        // every x value, ascending
  std::vector<std::string> titles;     // one per panel
};

Built build(const SweepResult& result, const Figure& f) {
  Built b;
  std::map<std::vector<std::string>, std::size_t> index;
  std::set<std::int64_t> xs;
  auto panel_of = [&](const SweepRow& row) -> Panel& {
    std::vector<std::string> key;
    for (const KeyColumn& k : kKeyColumns) key.push_back(k.column == f.x ? "" : cell_text(row, k.column));
    auto [it, inserted] = index.emplace(key, b.panels.size());
    if (inserted) b.panels.push_back(Panel{key, {}, {}, {}});
    return b.panels[it->second];
  };
  for_each_row_with_status(result, [&](const SweepRow& row, const std::string& status) {
    Panel& p = panel_of(row);
    if (status != "ok") {
      const std::int64_t x = row_integer(row, f.x);
      xs.insert(x);
      p.skipped[x] = status;
      return;
    }
    const std::int64_t x = row_integer(row, f.x);
    const std::string& schedule = row_string(row, "schedule");
    if (std::find(b.schedules.begin(), b.schedules.end(), schedule) == b.schedules.end())
      b.schedules.push_back(schedule);
    xs.insert(x);
    const double step = row_number(row, "step_time_s");
    if (f.metric == "speedup") {
      if (schedule == "baseline") p.baseline_step[x] = step;
      p.points[x][schedule] = step;
    } else {
      p.points[x][schedule] = row_number(row, f.metric) * f.scale;
    }
  });
  if (f.metric == "speedup") {
    for (Panel& p : b.panels)
      for (auto& [x, by_schedule] : p.points) {
        const auto base = p.baseline_step.find(x);
        for (auto& [s, v] : by_schedule) v = base == p.baseline_step.end() || v <= 0 ? -1.0 : base->second / v;
      }
  }
  b.xs.assign(xs.begin(), xs.end());
  // Titles name the cluster and workload always, the other key columns only where panels differ.
  for (const Panel& p : b.panels) {
    std::vector<std::string> parts;
    for (std::size_t k = 0; k < kKeyColumns.size(); ++k) {
      if (kKeyColumns[k].column == f.x) continue;
      bool varies = false;
      for (const Panel& q : b.panels) varies = varies || q.key[k] != p.key[k];
      if (k < 2 || varies) {
        std::string v = k < 2 ? short_name(p.key[k]) : p.key[k];
        if (std::string(kKeyColumns[k].column) == "sequence_length") v = tick_label("sequence_length", std::stoll(v));
        parts.push_back(fmt::format(fmt::runtime(kKeyColumns[k].label), v));
      }
    }
    b.titles.push_back(fmt::format("{}", fmt::join(parts, ", ")));
  }
  return b;
}

std::string data_file(const Built& b, const Figure& f, const SweepResult& result) {
  std::string out = fmt::format("# fusesim plot data: {} ({} against {})\n", f.title, f.ylabel, f.x);
  out += "# sweep: " + result.spec.dump() + "\n";
  out += fmt::format("# one block per panel (gnuplot index 0, 1, ...); columns: {} {}; ? = not run\n", f.x,
                     fmt::join(b.schedules, " "));
  for (std::size_t i = 0; i < b.panels.size(); ++i) {
    if (i > 0) out += "\n\n";
    out += fmt::format("# panel {}: {}\n", i, b.titles[i]);
    for (const auto& [x, by_schedule] : b.panels[i].points) {
      out += std::to_string(x);
      for (const std::string& s : b.schedules) {
        const auto v = by_schedule.find(s);
        out += v == by_schedule.end() || v->second < 0 ? std::string(" ?") : fmt::format(" {:.9g}", v->second);
      }
      out += "\n";
    }
    for (const auto& [x, status] : b.panels[i].skipped) out += fmt::format("# not simulated: {} {}\n", x, status);
  }
  return out;
}

// One y range for every panel of a figure, so that panels compare at a glance (gnuplot would scale
// each panel to its own data). Values < 0 stand for "not run".
std::string shared_yrange(const Built& b, const Figure& f) {
  double lo = 0, hi = 0;
  bool any = false;
  for (const Panel& p : b.panels)
    for (const auto& [x, by_schedule] : p.points)
      for (const auto& [s, v] : by_schedule) {
        if (v < 0 || (f.ylog && v <= 0)) continue;
        lo = any ? std::min(lo, v) : v;
        hi = any ? std::max(hi, v) : v;
        any = true;
      }
  if (f.ylog) {
    if (!any) return "[1:10]";
    return fmt::format("[{:.6g}:{:.6g}]", lo / 1.25, hi * 1.25);
  }
  if (f.yrange != "[0:*]" && f.yrange != "[*:*]") return f.yrange;
  if (f.metric == "speedup") {
    // The baseline's 1 is always in range: it is the reference line.
    lo = any ? std::min(lo, 1.0) : 1.0;
    hi = any ? std::max(hi, 1.0) : 1.0;
    const double pad = hi > lo ? (hi - lo) * 0.08 : 0.05;
    return fmt::format("[{:.6g}:{:.6g}]", lo - pad, hi + pad);
  }
  // "[0:*]": from 0, headroom above the highest point of any panel.
  return fmt::format("[0:{:.6g}]", any && hi > 0 ? hi * 1.08 : 1.0);
}

// Panels side by side: a near-square grid, at most 4 wide.
std::size_t layout_columns(std::size_t panels) {
  std::size_t c = 1;
  while (c * c < panels && c < 4) ++c;
  return c;
}

std::string script_body(const Built& b, const Figure& f, const std::string& data_name) {
  std::string s;
  const std::size_t n = b.panels.size();
  const std::size_t cols = layout_columns(n);
  const std::size_t rows = (n + cols - 1) / cols;
  s += "set datafile missing \"?\"\n";
  s += "set grid lc rgb \"#d0d0d0\"\n";
  s += "set border lw 1.2\n";
  // Below the plot, so that the legend never hides a curve.
  s += "set key below horizontal Left reverse samplen 2.5 width 2 height 1\n";
  s += "set logscale x 2\n";
  std::vector<std::string> tics;
  const std::size_t every = b.xs.size() > 10 ? 2 : 1;
  for (std::size_t i = 0; i < b.xs.size(); ++i)
    if (i % every == 0) tics.push_back(fmt::format("\"{}\" {}", tick_label(f.x, b.xs[i]), b.xs[i]));
  s += fmt::format("set xtics ({})\n", fmt::join(tics, ", "));
  if (b.xs.size() == 1) s += fmt::format("set xrange [{}:{}]\n", b.xs[0] / 2.0, b.xs[0] * 2.0);
  else s += fmt::format("set xrange [{}:{}]\n", b.xs.front() / 1.25, b.xs.back() * 1.25);
  s += fmt::format("set xlabel {}\n", gp_string(f.x == "tp" ? "TP degree (GPUs per tensor-parallel group)"
                                                              : "sequence length (tokens, log2 scale)"));
  s += fmt::format("set ylabel {}\n", gp_string(f.ylabel));
  s += f.ylog ? "set logscale y 10\n" : "unset logscale y\n";
  s += fmt::format("set yrange {}\n", shared_yrange(b, f));
  s += fmt::format("set multiplot layout {},{} title {} font \",15\"\n", rows, cols, gp_string(f.title));
  for (std::size_t i = 0; i < n; ++i) {
    s += fmt::format("set title {} font \",12\"\n", gp_string(b.titles[i]));
    std::vector<std::string> curves;
    if (f.metric == "speedup") curves.push_back("1 with lines dt 2 lc rgb \"#999999\" notitle");
    for (std::size_t c = 0; c < b.schedules.size(); ++c) {
      const Style st = style_of(b.schedules[c]);
      curves.push_back(fmt::format("{} index {} using 1:{} with linespoints lw 2 pt {} ps 1.1 dt {} lc rgb \"{}\" "
                                   "title {}",
                                   gp_string(data_name), i, c + 2, st.point, st.dash, st.color,
                                   gp_string(b.schedules[c])));
    }
    // Configurations not simulated (memory, divisibility): a red note standing at their x, so that a
    // gap in a curve is not read as a missing measurement.
    int label = 0;
    for (const auto& [x, status] : b.panels[i].skipped)
      s += fmt::format("set label {} {} at first {}, graph 0.03 rotate by 90 left front tc rgb \"#b2182b\" font \",9\"\n",
                       ++label, gp_string(status), x);
    s += "plot " + fmt::format("{}", fmt::join(curves, ", \\\n     ")) + "\n";
    if (label > 0) s += "unset label\n";
  }
  s += "unset multiplot\n";
  return s;
}

// The best-schedule map: per panel (the key columns other than sequence length and TP), one cell per
// (sequence length, TP) coloured by the schedule with the least step time and labelled with it and
// its speed-up over baseline; grey with the status where the configuration was not simulated.
struct MapCell {
  std::map<std::string, double> step;  // schedule -> step time
  std::string status;                  // not simulated: its status
};
struct MapPanel {
  std::vector<std::string> key;
  std::map<std::pair<std::int64_t, std::int64_t>, MapCell> cells;  // (seq, tp)
};
struct BuiltMap {
  std::vector<MapPanel> panels;
  std::vector<std::string> titles;
  std::set<std::int64_t> seqs, tps;
  std::vector<std::string> schedules;
};

BuiltMap build_map(const SweepResult& result) {
  BuiltMap b;
  std::map<std::vector<std::string>, std::size_t> index;
  auto panel_of = [&](const SweepRow& row) -> MapPanel& {
    std::vector<std::string> key;
    for (const KeyColumn& k : kKeyColumns) {
      const std::string c = k.column;
      key.push_back(c == "sequence_length" || c == "tp" ? "" : cell_text(row, c));
    }
    auto [it, inserted] = index.emplace(key, b.panels.size());
    if (inserted) b.panels.push_back(MapPanel{key, {}});
    return b.panels[it->second];
  };
  for_each_row_with_status(result, [&](const SweepRow& row, const std::string& status) {
    const std::int64_t seq = row_integer(row, "sequence_length"), tp = row_integer(row, "tp");
    b.seqs.insert(seq);
    b.tps.insert(tp);
    if (status != "ok") {
      panel_of(row).cells[{seq, tp}].status = status;
      return;
    }
    const std::string& schedule = row_string(row, "schedule");
    if (std::find(b.schedules.begin(), b.schedules.end(), schedule) == b.schedules.end())
      b.schedules.push_back(schedule);
    panel_of(row).cells[{seq, tp}].step[schedule] = row_number(row, "step_time_s");
  });
  for (const MapPanel& p : b.panels) {
    std::vector<std::string> parts;
    for (std::size_t k = 0; k < kKeyColumns.size(); ++k) {
      const std::string c = kKeyColumns[k].column;
      if (c == "sequence_length" || c == "tp") continue;
      bool varies = false;
      for (const MapPanel& q : b.panels) varies = varies || q.key[k] != p.key[k];
      if (k < 2 || varies)
        parts.push_back(fmt::format(fmt::runtime(kKeyColumns[k].label), k < 2 ? short_name(p.key[k]) : p.key[k]));
    }
    b.titles.push_back(fmt::format("{}", fmt::join(parts, ", ")));
  }
  return b;
}

int rgb_of(const std::string& color) { return std::stoi(color.substr(1), nullptr, 16); }
constexpr const char* kSkippedColor = "#bdbdbd";

std::string map_data(const BuiltMap& b, const SweepResult& result) {
  std::string out = "# fusesim plot data: best schedule (least step time) over sequence length x TP degree\n";
  out += "# sweep: " + result.spec.dump() + "\n";
  out += "# one block per panel; columns: sequence_length tp colour(0xRRGGBB) \"label\" best speedup_over_baseline "
         "(? when baseline did not run); a configuration not simulated: grey, its status\n";
  for (std::size_t i = 0; i < b.panels.size(); ++i) {
    if (i > 0) out += "\n\n";
    out += fmt::format("# panel {}: {}\n", i, b.titles[i]);
    for (const auto& [at, cell] : b.panels[i].cells) {
      if (cell.step.empty()) {
        out += fmt::format("{} {} {} \"{}\" - ?\n", at.first, at.second, rgb_of(kSkippedColor), cell.status);
        continue;
      }
      // Least step time; ties go to the first schedule in the sweep's order (deterministic).
      std::string best;
      for (const std::string& s : b.schedules) {
        const auto it = cell.step.find(s);
        if (it != cell.step.end() && (best.empty() || it->second < cell.step.at(best))) best = s;
      }
      const auto base = cell.step.find("baseline");
      const bool has_speedup = base != cell.step.end() && cell.step.at(best) > 0;
      const double speedup = has_speedup ? base->second / cell.step.at(best) : 0.0;
      const std::string label = has_speedup ? fmt::format("{} {:.2f}x", best, speedup) : best;
      out += fmt::format("{} {} {} \"{}\" {} {}\n", at.first, at.second, rgb_of(style_of(best).color), label, best,
                         has_speedup ? fmt::format("{:.9g}", speedup) : std::string("?"));
    }
  }
  return out;
}

std::string map_script_body(const BuiltMap& b, const std::string& data_name) {
  std::string s;
  const std::size_t n = b.panels.size();
  const std::size_t cols = layout_columns(n);
  const std::size_t rows = (n + cols - 1) / cols;
  s += "set grid lc rgb \"#e0e0e0\"\nset border lw 1.2\n";
  s += "set key below horizontal Left reverse samplen 1 width 2\n";
  s += "set logscale x 2\nset logscale y 2\n";
  std::vector<std::string> xt, yt;
  for (std::int64_t v : b.seqs) xt.push_back(fmt::format("\"{}\" {}", tick_label("sequence_length", v), v));
  for (std::int64_t v : b.tps) yt.push_back(fmt::format("\"{}\" {}", v, v));
  s += fmt::format("set xtics ({})\nset ytics ({})\n", fmt::join(xt, ", "), fmt::join(yt, ", "));
  s += fmt::format("set xrange [{}:{}]\n", *b.seqs.begin() / 1.6, *b.seqs.rbegin() * 1.6);
  s += fmt::format("set yrange [{}:{}]\n", *b.tps.begin() / 1.6, *b.tps.rbegin() * 1.6);
  s += "set xlabel \"sequence length (tokens, log2 scale)\"\nset ylabel \"TP degree\"\n";
  s += fmt::format("set multiplot layout {},{} title {} font \",15\"\n", rows, cols,
                   gp_string("Best schedule (least step time; label: speed-up over baseline)"));
  for (std::size_t i = 0; i < n; ++i) {
    s += fmt::format("set title {} font \",12\"\n", gp_string(b.titles[i]));
    std::vector<std::string> curves;
    curves.push_back(fmt::format("{} index {} using 1:2:3 with points pt 5 ps 5 lc rgb variable notitle",
                                 gp_string(data_name), i));
    curves.push_back(fmt::format("'' index {} using 1:2:4 with labels font \",8\" offset 0,-2.2 notitle", i));
    // Legend: one entry per schedule colour, and the grey of configurations not simulated.
    for (const std::string& sch : b.schedules)
      curves.push_back(fmt::format("keyentry with points pt 5 ps 1.5 lc rgb \"{}\" title {}", style_of(sch).color,
                                   gp_string(sch)));
    curves.push_back(fmt::format("keyentry with points pt 5 ps 1.5 lc rgb \"{}\" title \"not simulated\"", kSkippedColor));
    s += "plot " + fmt::format("{}", fmt::join(curves, ", \\\n     ")) + "\n";
  }
  s += "unset multiplot\n";
  return s;
}

// The png terminal to use: pngcairo where this gnuplot has it (Debian's gnuplot-nox does), else the
// libgd png terminal.
std::string png_terminal(const std::string& gnuplot) {
  if (gnuplot.empty()) return "pngcairo";
  std::string cmd = quote(gnuplot) + " -e 'set terminal' 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return "png";
  std::string text;
  char buf[4096];
  for (std::size_t got; (got = std::fread(buf, 1, sizeof buf, pipe)) > 0;) text.append(buf, got);
  ::pclose(pipe);
  return text.find("pngcairo") != std::string::npos ? "pngcairo" : "png";
}

std::string script(std::size_t n, const std::string& body, const Figure& f, const std::string& png_term) {
  const std::size_t cols = layout_columns(n);
  const std::size_t rows = (n + cols - 1) / cols;
  const std::size_t w = 600 * cols + 40, h = 460 * rows + 60;
  std::string s = fmt::format(
      "# fusesim plot: {}. Data: {}.dat (one block per panel). Draws {}.svg and {}.png:\n#   gnuplot {}.gp\n",
      f.title, f.name, f.name, f.name, f.name);
  s += fmt::format("set terminal svg size {},{} dynamic noenhanced font \"sans,12\" background rgb \"white\"\n", w, h);
  s += fmt::format("set output \"{}.svg\"\n", f.name);
  s += body;
  s += "set output\nreset\n";
  if (png_term == "pngcairo") {
    s += fmt::format("set terminal pngcairo size {},{} noenhanced font \"sans,11\" background rgb \"white\"\n", w, h);
  } else {
    s += fmt::format("set terminal png size {},{} noenhanced background rgb \"white\"\n", w, h);
  }
  s += fmt::format("set output \"{}.png\"\n", f.name);
  s += body;
  s += "set output\n";
  return s;
}

std::size_t distinct(const SweepResult& r, const std::string& column) {
  std::set<std::int64_t> v;
  for_each_row_with_status(r, [&](const SweepRow& row, const std::string&) { v.insert(row_integer(row, column)); });
  return v.size();
}

}  // namespace

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::string all(path);
  std::size_t pos = 0;
  while (pos <= all.size()) {
    const std::size_t colon = all.find(':', pos);
    const std::string dir = all.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / program;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  return "";
}

void check_plot_folder(const std::string& out_dir, const std::string& option) {
  std::error_code ec;
  if (out_dir.empty()) throw InputError(kCommandLine, option, "expected a folder");
  fs::path p(out_dir);
  if (fs::exists(p, ec)) {
    if (!fs::is_directory(p, ec)) throw InputError(out_dir, option, "is a file, not a folder");
    return;
  }
  // The first ancestor that exists must be a folder we may create in.
  fs::path up = fs::absolute(p, ec).parent_path();
  while (!up.empty() && !fs::exists(up, ec) && up != up.root_path()) up = up.parent_path();
  if (!fs::is_directory(up, ec) || ::access(up.c_str(), W_OK) != 0)
    throw InputError(out_dir, option, "cannot create this folder: '" + up.string() + "' is not a folder this user may write in");
}

PlotReport write_plots(const SweepResult& result, const std::string& out_dir, const std::string& gnuplot_arg) {
  PlotReport report;
  std::error_code ec;
  check_plot_folder(out_dir, "--out-dir");
  fs::create_directories(out_dir, ec);
  if (!fs::is_directory(out_dir)) throw InputError(out_dir, "$", "cannot create this folder: " + ec.message());

  if (result.rows.empty()) {
    report.log = "plot: no results to draw (every configuration was skipped or failed)\n";
    return report;
  }
  const bool seq_varies = distinct(result, "sequence_length") > 1;
  const bool tp_varies = distinct(result, "tp") > 1;
  std::vector<Figure> figures;
  if (seq_varies) {
    figures.push_back({"exposed_comm_vs_seq", "Exposed communication vs sequence length", "sequence_length",
                       "exposed_comm_s", "exposed communication on the critical rank (ms)", 1e3});
    figures.push_back({"step_time_vs_seq", "Step time vs sequence length", "sequence_length", "step_time_s",
                       "step time (ms, log scale)", 1e3, true});
    figures.push_back({"speedup_vs_seq", "Speed-up over baseline vs sequence length", "sequence_length", "speedup",
                       "speed-up over baseline (baseline time / time)", 1.0, false, "[*:*]"});
  }
  if (tp_varies)
    figures.push_back({"speedup_vs_tp", "Speed-up over baseline vs TP degree", "tp", "speedup",
                       "speed-up over baseline (baseline time / time)", 1.0, false, "[*:*]"});
  if (seq_varies && tp_varies) {
    Figure map{"best_schedule_map", "Best schedule over sequence length x TP degree", "sequence_length", "",
               "TP degree"};
    map.map = true;
    figures.push_back(map);
  }
  if (seq_varies || tp_varies) {
    const std::string x = seq_varies ? "sequence_length" : "tp";
    const std::string against = seq_varies ? "sequence length" : "TP degree";
    const std::string suffix = seq_varies ? "_vs_seq" : "_vs_tp";
    figures.push_back({"overlap_ratio" + suffix, "Overlap ratio vs " + against, x, "overlap_ratio",
                       "overlap ratio (overlapped / all communication)", 1.0, false, "[0:1.05]"});
    figures.push_back({"mfu" + suffix, "MFU vs " + against, x, "mfu", "model FLOPs utilization (%)", 100.0, false,
                       "[0:*]"});
  } else {
    report.log += "plot: neither the sequence length nor the TP degree varies in this sweep; nothing to draw\n";
    return report;
  }
  if (!tp_varies) report.log += "plot: the TP degree does not vary; no figures against it, no best-schedule map\n";
  if (!seq_varies)
    report.log += "plot: the sequence length does not vary; no figures against it, no best-schedule map\n";

  // One scope throughout: say which in every figure's title (panels name it when it varies).
  std::set<std::string> scopes;
  for (const SweepRow& row : result.rows) scopes.insert(row_string(row, "scope"));
  if (scopes.size() == 1)
    for (Figure& f : figures) f.title += *scopes.begin() == "layer" ? " (one layer)" : " (" + *scopes.begin() + " scope)";

  const std::string gnuplot = gnuplot_arg.empty() ? find_on_path("gnuplot") : gnuplot_arg;
  report.gnuplot_found = !gnuplot.empty();
  const std::string term = png_terminal(gnuplot);
  for (const Figure& f : figures) {
    const fs::path dat = fs::path(out_dir) / (f.name + ".dat");
    const fs::path gp = fs::path(out_dir) / (f.name + ".gp");
    if (f.map) {
      const BuiltMap m = build_map(result);
      write_output_file(dat.string(), map_data(m, result), "--out-dir");
      write_output_file(gp.string(), script(m.panels.size(), map_script_body(m, f.name + ".dat"), f, term), "--out-dir");
    } else {
      const Built b = build(result, f);
      write_output_file(dat.string(), data_file(b, f, result), "--out-dir");
      write_output_file(gp.string(), script(b.panels.size(), script_body(b, f, f.name + ".dat"), f, term), "--out-dir");
    }
    report.files.push_back(dat.string());
    report.files.push_back(gp.string());
    if (gnuplot.empty()) continue;
    const fs::path log = fs::path(out_dir) / (f.name + ".gnuplot.log");
    const std::string cmd = "cd " + quote(out_dir) + " && " + quote(gnuplot) + " " + quote(f.name + ".gp") + " >" +
                            quote(log.filename().string()) + " 2>&1";
    const int status = std::system(cmd.c_str());
    std::string text;
    try {
      text = read_text_file(log.string());
    } catch (const InputError&) {
    }
    fs::remove(log, ec);
    if (status != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      report.gnuplot_failed = true;
      report.log += fmt::format("plot: gnuplot failed on {}: {}\n", gp.string(), one_line(text));
      continue;
    }
    report.files.push_back((fs::path(out_dir) / (f.name + ".svg")).string());
    report.files.push_back((fs::path(out_dir) / (f.name + ".png")).string());
  }
  std::vector<std::string> names;
  for (const Figure& f : figures) names.push_back(f.name);
  if (gnuplot.empty()) {
    report.log += fmt::format("plot: gnuplot is not on the PATH: wrote the data and scripts of {} into {}; draw them "
                              "with `gnuplot <name>.gp` there (Debian: apt-get install gnuplot-nox)\n",
                              fmt::join(names, ", "), out_dir);
  } else if (!report.gnuplot_failed) {
    report.log += fmt::format("plot: wrote {} into {} (.svg, .png, with their .dat and .gp)\n", fmt::join(names, ", "),
                              out_dir);
  }
  return report;
}

}  // namespace fusesim::cli
