// Parser of nccl-tests *_perf output (include/fusesim/model/nccl_tests.hpp).
#include "fusesim/model/nccl_tests.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"

namespace fusesim::model {
namespace {

std::vector<std::string> split_ws(std::string_view s) {
  std::vector<std::string> out;
  std::istringstream in{std::string(s)};
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

// The whitespace of split_ws (istream >>, the C locale's isspace): a line that trims to something
// must split into at least one word (a line of a form feed or vertical tab alone was read as a data
// row with no fields; found by fuzz/fuzz_nccl_tests.cpp).
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// OpenMPI --tag-output prefixes every line with "[jobid,rank]<stdout>:" (or <stderr>).
std::string_view strip_mpi_tag(std::string_view s) {
  if (s.empty() || s.front() != '[') return s;
  const std::size_t close = s.find("]<std");
  if (close == std::string_view::npos) return s;
  const std::size_t colon = s.find(">:", close);
  if (colon == std::string_view::npos) return s;
  return s.substr(colon + 2);
}

std::optional<long long> parse_int(std::string_view s) {
  long long v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// A number as printed with %f, %g or %e ("12.90", "1.2e+05", "10094").
std::optional<double> parse_double(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Half a unit of the last printed digit: the rounding error of a printed value.
double half_ulp_printed(const std::string& s) {
  if (s.find_first_of("eE") != std::string::npos) {
    const auto v = parse_double(s);
    return v ? std::abs(*v) * 0.05 : 0.0;  // %.1e keeps two significant digits
  }
  const std::size_t dot = s.find('.');
  const std::size_t decimals = dot == std::string::npos ? 0 : s.size() - dot - 1;
  return 0.5 * std::pow(10.0, -static_cast<double>(decimals));
}

// "2.18.5" from an NCCL_VERSION_CODE: 2.9 and later encode major*10000 + minor*100 + patch, earlier
// releases major*1000 + minor*100 + patch (nccl.h).
std::string version_from_code(long long code) {
  if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100);
}

// A word naming an nccl-tests program, anywhere in the line ("./build/all_reduce_perf -b 8").
std::string find_program(std::string_view line) {
  for (const std::string& raw : split_ws(line)) {
    std::string_view w = raw;
    const std::size_t slash = w.rfind('/');
    if (slash != std::string_view::npos) w.remove_prefix(slash + 1);
    std::string_view stem = w;
    if (stem.size() > 4 && stem.substr(stem.size() - 4) == "_mpi") stem.remove_suffix(4);
    if (stem.size() > 5 && stem.substr(stem.size() - 5) == "_perf") return std::string(stem);
  }
  return "";
}

struct Columns {
  std::vector<std::string> names;
  int size = -1;
  int time_oop = -1, time_ip = -1;  // algbw and busbw follow each time column
  int wrong_oop = -1;               // "#wrong" (a count; the older "error" is a max deviation)
  bool timestamp = false;
  bool has_root = false;
};

std::optional<Columns> parse_column_header(std::string_view content) {
  const std::vector<std::string> t = split_ws(content);
  if (t.size() < 4 || t[0] != "size" || t[1] != "count") return std::nullopt;
  Columns c;
  c.names = t;
  c.size = 0;
  for (int i = 0; i < static_cast<int>(t.size()); ++i) {
    if (t[i] == "time" || t[i] == "cputime") {
      if (c.time_oop < 0) {
        c.time_oop = i;
      } else if (c.time_ip < 0) {
        c.time_ip = i;
      }
    }
    if (t[i] == "#wrong" && c.wrong_oop < 0) c.wrong_oop = i;
    if (t[i] == "timestamp") c.timestamp = true;
    if (t[i] == "root") c.has_root = true;
  }
  if (c.time_oop < 0) return std::nullopt;
  const auto is = [&](int i, const char* name) { return i < static_cast<int>(t.size()) && t[i] == name; };
  if (!is(c.time_oop + 1, "algbw") || !is(c.time_oop + 2, "busbw")) return std::nullopt;
  if (c.time_ip >= 0 && (!is(c.time_ip + 1, "algbw") || !is(c.time_ip + 2, "busbw"))) c.time_ip = -1;
  return c;
}

class Parser {
 public:
  Parser(const std::string& file, const NcclTestsOptions& options) : file_(file), options_(options) {}

  [[noreturn]] void fail(int line, const std::string& message) const {
    throw InputError(file_, fmt::format("line {}", line), message);
  }

  std::vector<NcclTestsRun> parse(std::string_view text) {
    int line_no = 0;
    std::size_t pos = 0;
    while (pos <= text.size()) {
      if (pos == text.size() && line_no > 0) break;  // the newline ending the last line starts no new one
      const std::size_t nl = text.find('\n', pos);
      const std::string_view raw = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
      ++line_no;
      line(raw, line_no);
      if (nl == std::string_view::npos) break;
      pos = nl + 1;
    }
    close_run();
    if (runs_.empty()) fail(line_no, "no nccl-tests results found (no data rows under a 'size count ...' header)");
    return std::move(runs_);
  }

 private:
  void start_run_if_needed(int line_no) {
    // A header line after data rows begins the next program's output.
    if (current_ && !current_->rows.empty()) close_run();
    if (!current_) {
      current_.emplace();
      current_->first_line = line_no;
      current_->nccl_version = pending_nccl_version_;
      current_->program = pending_program_;
      pending_program_.clear();
      columns_.reset();
    }
  }

  void line(std::string_view raw, int line_no) {
    std::string_view s = trim(strip_mpi_tag(raw));
    // NCCL's own banner ("NCCL version 2.18.5+cuda12.2", plain or inside an "NCCL INFO" line).
    if (const std::size_t v = s.find("NCCL version "); v != std::string_view::npos) {
      const std::vector<std::string> t = split_ws(s.substr(v + 13));
      if (!t.empty()) {
        const std::string ver = t[0].substr(0, t[0].find('+'));
        pending_nccl_version_ = ver;
        if (current_ && current_->nccl_version.empty()) current_->nccl_version = ver;
      }
      return;
    }
    const bool comment = !s.empty() && s.front() == '#';
    if (comment) s = trim(s.substr(1));
    if (s.empty()) return;

    if (starts_with(s, "nccl-tests version")) {
      start_run_if_needed(line_no);
      const std::vector<std::string> t = split_ws(s);
      if (t.size() >= 3) current_->tests_version = t[2];
      for (const std::string& w : t) {
        if (starts_with(w, "nccl-library=")) {
          const auto code = parse_int(std::string_view(w).substr(13));
          if (!code) fail(line_no, fmt::format("cannot read the NCCL version code in '{}'", w));
          current_->nccl_version = version_from_code(*code);
        }
      }
      return;
    }
    if (starts_with(s, "Collective test starting:")) {
      start_run_if_needed(line_no);
      const std::string p = find_program(s.substr(25));
      if (p.empty()) fail(line_no, "no program name after 'Collective test starting:'");
      current_->program = p;
      return;
    }
    if (starts_with(s, "Collective test concluded:")) return;
    if (starts_with(s, "nThread")) {
      start_run_if_needed(line_no);
      const std::vector<std::string> t = split_ws(s);
      for (std::size_t i = 0; i + 1 < t.size(); ++i) {
        if (t[i] == "nThread" || t[i] == "nGpus") {
          const auto v = parse_int(t[i + 1]);
          if (!v || *v < 1 || *v > 1 << 20) fail(line_no, fmt::format("{} '{}' is not a positive count", t[i], t[i + 1]));
          (t[i] == "nThread" ? current_->nthreads : current_->ngpus) = static_cast<int>(*v);
        }
      }
      return;
    }
    if (starts_with(s, "Rank ")) {
      start_run_if_needed(line_no);
      current_->rank_lines.push_back(parse_rank(s, line_no));
      return;
    }
    if (starts_with(s, "Avg bus bandwidth")) {
      if (!current_) return;
      const std::size_t colon = s.find(':');
      const std::vector<std::string> t = split_ws(colon == std::string_view::npos ? "" : s.substr(colon + 1));
      const auto v = t.empty() ? std::nullopt : parse_double(t[0]);
      if (!v) fail(line_no, "cannot read the average bus bandwidth");
      current_->avg_busbw_GBps = *v;
      return;
    }
    if (comment) {
      if (auto c = parse_column_header(s)) {
        start_run_if_needed(line_no);
        columns_ = std::move(c);
      }
      return;  // unit line, section titles, "Using devices", "Out of bounds values", ...
    }
    // A command line or other text that names the program, before the run prints its header.
    if (const std::string p = find_program(s); !p.empty() && !parse_int(split_ws(s)[0])) {
      if (current_ && !current_->rows.empty()) close_run();
      if (current_ && current_->program.empty()) {
        current_->program = p;
      } else {
        pending_program_ = p;
      }
      return;
    }
    if (!columns_ || !current_) return;  // text before any results table: NCCL INFO lines, banners
    const std::vector<std::string> t = split_ws(s);
    if (!parse_int(t[0])) {
      // Text after a table (a warning, a shell prompt) ends nothing; a data row always starts with a size.
      // A line that starts like a number but is not a byte count (1e308, 2^70, a megabyte of digits)
      // is a broken row, not text: refused, not dropped.
      const char c0 = t[0].front();
      const bool numeric = (c0 >= '0' && c0 <= '9') ||
                           ((c0 == '-' || c0 == '+' || c0 == '.') && t[0].size() > 1 && t[0][1] >= '0' && t[0][1] <= '9');
      if (numeric) {
        const std::string shown = t[0].size() > 40 ? t[0].substr(0, 40) + "..." : t[0];
        fail(line_no, fmt::format("size '{}' is not a byte count (a whole number below 2^63)", shown));
      }
      return;
    }
    data_row(t, line_no);
  }

  NcclTestsRank parse_rank(std::string_view s, int line_no) const {
    // "Rank  0 Group  0 Pid  1234 on host device  0 [0x1b] NVIDIA H100 80GB HBM3" (Group since 2.13;
    // the bus id is "[0x1b]" in older and "[0000:1b:00]" in newer versions).
    const std::vector<std::string> t = split_ws(s);
    NcclTestsRank r;
    std::size_t i = 0;
    const auto need_int = [&](const char* key) -> int {
      if (i + 1 >= t.size() || t[i] != key) fail(line_no, fmt::format("rank line: expected '{}'", key));
      const auto v = parse_int(t[i + 1]);
      if (!v || *v < 0) fail(line_no, fmt::format("rank line: '{}' after {} is not a number", t[i + 1], key));
      i += 2;
      return static_cast<int>(*v);
    };
    r.rank = need_int("Rank");
    if (i < t.size() && t[i] == "Group") r.group = need_int("Group");
    (void)need_int("Pid");
    if (i + 1 >= t.size() || t[i] != "on") fail(line_no, "rank line: expected 'on <host>'");
    r.host = t[i + 1];
    i += 2;
    r.device = need_int("device");
    if (i < t.size() && !t[i].empty() && t[i].front() == '[') ++i;
    std::string name;
    for (; i < t.size(); ++i) name += (name.empty() ? "" : " ") + t[i];
    r.device_name = name;
    return r;
  }

  void data_row(const std::vector<std::string>& t, int line_no) {
    const Columns& c = *columns_;
    const int ncols = static_cast<int>(c.names.size());
    const int ntok = static_cast<int>(t.size());
    // A timestamp value is two words ("2025-03-14 10:22:01") under one column name.
    const int expected = ncols + (c.timestamp ? 1 : 0);
    if (ntok != expected) {
      fail(line_no, fmt::format("data row has {} fields, the column header above has {}", ntok, expected));
    }
    const auto number = [&](int i, const char* what) {
      const auto v = parse_double(t[i]);
      if (!v || *v < 0) fail(line_no, fmt::format("{} '{}' is not a non-negative number", what, t[i]));
      return *v;
    };
    const auto size = parse_int(t[c.size]);
    if (!size || *size < 0) fail(line_no, fmt::format("size '{}' is not a byte count", t[c.size]));
    if (c.wrong_oop >= 0 && t[c.wrong_oop] != "N/A") {
      const double wrong = number(c.wrong_oop, "#wrong");
      if (wrong > 0) fail(line_no, fmt::format("the test found {} wrong elements: its timings are not trusted", t[c.wrong_oop]));
    }
    if (*size == 0) return;
    NcclTestsRow row;
    row.line = line_no;
    row.bytes = static_cast<double>(*size);
    const double oop_us = number(c.time_oop, "time");
    row.algbw_GBps = number(c.time_oop + 1, "algbw");
    row.busbw_GBps = number(c.time_oop + 2, "busbw");
    if (oop_us <= 0) fail(line_no, "time is 0");
    row.out_of_place_time_s = oop_us * 1e-6;
    if (c.time_ip >= 0) {
      const double ip_us = number(c.time_ip, "in-place time");
      if (ip_us <= 0) fail(line_no, "in-place time is 0");
      row.in_place_time_s = ip_us * 1e-6;
    }
    algbw_text_.push_back({t[c.time_oop + 1], t[c.time_oop + 2]});
    current_->rows.push_back(row);
  }

  void close_run() {
    if (!current_) return;
    NcclTestsRun run = std::move(*current_);
    current_.reset();
    std::vector<std::pair<std::string, std::string>> bw_text = std::move(algbw_text_);
    algbw_text_.clear();
    const bool had_root = columns_ && columns_->has_root;
    columns_.reset();
    if (run.rows.empty()) return;  // a header with no results (a run that failed before its table)
    const int at = run.first_line;

    // The op: the program the log names, else the user's.
    std::string op;
    if (!run.program.empty()) {
      op = op_from_program(run.program);
      if (op.empty()) {
        fail(at, fmt::format("{} measures a collective fusesim does not model (all_gather, reduce_scatter, "
                             "all_reduce, all_to_all, sendrecv)",
                             run.program));
      }
      if (!options_.op.empty() && options_.op != op) {
        fail(at, fmt::format("the log is {} ({}), not {} as the command line says", run.program, op, options_.op));
      }
    } else if (!options_.op.empty()) {
      op = options_.op;
    } else {
      fail(at, "the log does not name its program ('# Collective test starting:' or the command line): give the "
               "collective (--op)");
    }
    run.op = op;

    // Ranks: the "# Rank" lines of the first group (split communicators run one collective each).
    if (!run.rank_lines.empty()) {
      const int group = run.rank_lines.front().group;
      std::set<std::string> hosts;
      int n = 0;
      for (const NcclTestsRank& r : run.rank_lines) {
        if (r.group != group) continue;
        ++n;
        hosts.insert(r.host);
      }
      run.ranks = n;
      run.nodes = static_cast<int>(hosts.size());
      run.device_name = run.rank_lines.front().device_name;
      if (options_.ranks && *options_.ranks != run.ranks) {
        fail(at, fmt::format("the log lists {} ranks, the command line says {}", run.ranks, *options_.ranks));
      }
      if (options_.nodes && *options_.nodes != run.nodes) {
        fail(at, fmt::format("the log's ranks run on {} host(s), the command line says {}", run.nodes, *options_.nodes));
      }
    } else {
      // Without rank lines only one process is known: nThread x nGpus ranks, unless told otherwise.
      run.ranks = options_.ranks.value_or(run.nthreads * run.ngpus);
      run.nodes = options_.nodes.value_or(1);
    }
    if (op != "p2p" && run.ranks < 2) {
      fail(at, fmt::format("{} over {} rank: nothing moves; a log of 2 or more ranks is needed", op, run.ranks));
    }
    if (run.nodes < 1 || run.nodes > run.ranks) fail(at, fmt::format("{} nodes for {} ranks", run.nodes, run.ranks));

    // Since the root column appeared (2.13), every program prints algbw = size / time and
    // busbw = algbw x the bus factor of its collective; a mismatch means a wrong op or rank count.
    if (had_root) {
      const double factor = bus_factor(op, run.ranks);
      for (std::size_t i = 0; i < run.rows.size(); ++i) {
        const NcclTestsRow& r = run.rows[i];
        if (r.algbw_GBps <= 0) continue;
        const double tol = half_ulp_printed(bw_text[i].second) + factor * half_ulp_printed(bw_text[i].first) +
                           2e-3 * r.busbw_GBps;
        if (std::abs(r.busbw_GBps - r.algbw_GBps * factor) > tol) {
          fail(r.line, fmt::format("busbw {} / algbw {} is not the bus factor {:.4f} of {} over {} ranks: wrong "
                                   "collective or rank count",
                                   r.busbw_GBps, r.algbw_GBps, factor, op, run.ranks));
        }
      }
    }
    runs_.push_back(std::move(run));
  }

  std::string file_;
  NcclTestsOptions options_;
  std::vector<NcclTestsRun> runs_;
  std::optional<NcclTestsRun> current_;
  std::optional<Columns> columns_;
  std::vector<std::pair<std::string, std::string>> algbw_text_;  // printed algbw, busbw of each row
  std::string pending_nccl_version_;
  std::string pending_program_;
};

}  // namespace

std::string op_from_program(std::string_view program) {
  std::string p = find_program(program);
  if (p.empty()) p = std::string(program);
  if (p == "all_gather_perf") return "all_gather";
  if (p == "reduce_scatter_perf") return "reduce_scatter";
  if (p == "all_reduce_perf") return "all_reduce";
  if (p == "alltoall_perf") return "all_to_all";
  if (p == "sendrecv_perf") return "p2p";
  return "";
}

std::vector<NcclTestsRun> parse_nccl_tests(std::string_view text, const std::string& file,
                                           const NcclTestsOptions& options) {
  if (!options.op.empty() &&
      std::find(collective_ops().begin(), collective_ops().end(), options.op) == collective_ops().end()) {
    throw InputError("<command line>", "--op", fmt::format("unknown collective '{}'", options.op));
  }
  Parser parser(file, options);
  return parser.parse(text);
}

std::vector<NcclTestsRun> load_nccl_tests(const std::string& path, const NcclTestsOptions& options) {
  const std::string text = read_text_file(path);
  return parse_nccl_tests(text, path, options);
}

std::vector<CollectiveSample> collective_samples(const NcclTestsRun& run) {
  std::vector<CollectiveSample> out;
  out.reserve(run.rows.size());
  for (const NcclTestsRow& r : run.rows) {
    CollectiveSample s;
    s.op = run.op;
    s.ranks = run.ranks;
    s.nodes = run.nodes;
    s.bytes = r.bytes;
    s.time_s = r.in_place_time_s > 0 ? 0.5 * (r.out_of_place_time_s + r.in_place_time_s) : r.out_of_place_time_s;
    out.push_back(s);
  }
  return out;
}

}  // namespace fusesim::model
