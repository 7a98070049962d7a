#pragma once
// Reading the text that nccl-tests' *_perf programs print (github.com/NVIDIA/nccl-tests), so that
// logs users already have become calibration samples. Header-driven: the column header line names
// the columns, so the formats of several versions parse (with or without the redop and root
// columns, "error" or "#wrong", "time" or "cputime", the per-iteration columns and the timestamp
// of recent versions), as do logs of OpenMPI's --tag-output ("[1,0]<stdout>:" prefixes).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fusesim/model/calibration_fit.hpp"

namespace fusesim::model {

struct NcclTestsRank {
  int rank = 0;
  int group = 0;
  std::string host;
  int device = 0;
  std::string device_name;  // "NVIDIA H100 80GB HBM3"
};

struct NcclTestsRow {
  int line = 0;              // 1-based line in the file
  double bytes = 0;          // "size" (B): the full buffer
  double out_of_place_time_s = 0;
  double in_place_time_s = 0;  // 0 when the log has no in-place column
  double algbw_GBps = 0;       // out-of-place, as printed
  double busbw_GBps = 0;
};

// One run of a *_perf program (a log may hold several, one after the other).
struct NcclTestsRun {
  std::string program;        // "all_gather_perf", when the log says it
  std::string op;             // fusesim name: all_gather, reduce_scatter, all_reduce, all_to_all, p2p
  std::string tests_version;  // "2.17.6", from "# nccl-tests version"
  std::string nccl_version;   // "2.27.3", from "nccl-library=" or an "NCCL version 2.x.y" line
  int nthreads = 1, ngpus = 1;
  std::vector<NcclTestsRank> rank_lines;
  int ranks = 0;              // communicator size
  int nodes = 0;              // distinct hosts among the ranks
  std::string device_name;    // of rank 0
  std::vector<NcclTestsRow> rows;
  std::optional<double> avg_busbw_GBps;  // "# Avg bus bandwidth"
  int first_line = 0;
};

struct NcclTestsOptions {
  std::string op;              // used when the log does not name its program; checked against it otherwise
  std::optional<int> ranks;    // used when the log has no "# Rank" lines; checked against them otherwise
  std::optional<int> nodes;
};

// fusesim op of an nccl-tests program: "all_gather_perf" (or "all_gather_perf_mpi", a path to it)
// -> "all_gather", sendrecv -> "p2p", alltoall -> "all_to_all"; "" when it is none of the five
// fusesim models (broadcast, reduce, gather, scatter, hypercube).
std::string op_from_program(std::string_view program);

// Throws InputError(file, "line N", ...) on a malformed line, a log with no data rows, an op it
// cannot determine, or a program fusesim does not model. Rows of size 0 are skipped: NCCL returns
// without launching a kernel for an empty buffer, so their time is host overhead, not a transfer.
std::vector<NcclTestsRun> parse_nccl_tests(std::string_view text, const std::string& file,
                                           const NcclTestsOptions& options = {});
std::vector<NcclTestsRun> load_nccl_tests(const std::string& path, const NcclTestsOptions& options = {});

// One sample per row (time: the median of out-of-place and in-place, i.e. their mean).
std::vector<CollectiveSample> collective_samples(const NcclTestsRun& run);

}  // namespace fusesim::model
