// Parsing nccl-tests output (model/nccl_tests.hpp): the constructed logs of tests/data/calibrate/
// (three layouts: 2.17, 2.13 under mpirun --tag-output, before 2.13), small inline logs for the
// per-iteration/timestamp layout and for every refusal, each naming the file and the line.
#include <catch2/catch.hpp>

#include <string>

#include "fusesim/model/calibration_fit.hpp"
#include "fusesim/model/nccl_tests.hpp"
#include "fusesim/util/error.hpp"

using namespace fusesim;
using namespace fusesim::model;

namespace {

const std::string kData = std::string(FUSESIM_SOURCE_DIR) + "/tests/data/calibrate/";

void expect_error(const std::string& text, const std::string& line, const std::string& message_part,
                  const NcclTestsOptions& options = {}) {
  try {
    parse_nccl_tests(text, "t.log", options);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.file() == "t.log");
    CHECK(e.json_path() == line);
    CHECK_THAT(e.message(), Catch::Contains(message_part));
  }
}

// A minimal 2.13+ log of all_gather on 2 ranks; rows appended by the tests.
const std::string kHead =
    "# Collective test starting: all_gather_perf\n"                                              // line 1
    "# nThread 1 nGpus 2 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20\n"   // line 2
    "#  Rank  0 Group  0 Pid    100 on       h0 device  0 [0x18] NVIDIA H100 80GB HBM3\n"         // line 3
    "#  Rank  1 Group  0 Pid    100 on       h0 device  1 [0x28] NVIDIA H100 80GB HBM3\n"         // line 4
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n";

}  // namespace

TEST_CASE("nccl-tests 2.17 log: header, ranks, rows", "[nccl-tests]") {
  const auto runs = load_nccl_tests(kData + "all_gather_h100x8_v2.17.log");
  REQUIRE(runs.size() == 1);
  const NcclTestsRun& r = runs[0];
  CHECK(r.program == "all_gather_perf");
  CHECK(r.op == "all_gather");
  CHECK(r.tests_version == "2.17.6");
  CHECK(r.nccl_version == "2.27.3");  // nccl-library=22703: 2 x 10000 + 27 x 100 + 3
  CHECK(r.nthreads == 1);
  CHECK(r.ngpus == 8);
  CHECK(r.ranks == 8);
  CHECK(r.nodes == 1);
  CHECK(r.device_name == "NVIDIA H100 80GB HBM3");
  CHECK(r.rank_lines.size() == 8);
  CHECK(r.rank_lines[7].device == 7);
  CHECK(r.rank_lines[7].host == "dgx-h100-07");
  REQUIRE(r.rows.size() == 11);
  // Line 19: "1024 32 float none -1 12.00 0.09 0.07 0 11.76 0.09 0.08 0" (lines 1-18: 6 header lines,
  // 8 ranks, "#", the 3 column-header lines).
  CHECK(r.rows[0].line == 19);
  CHECK(r.rows[0].bytes == 1024);
  CHECK(r.rows[0].out_of_place_time_s == Approx(12.00e-6));
  CHECK(r.rows[0].in_place_time_s == Approx(11.76e-6));
  // Last row: 1 GiB, 12 + 1073741824 x 7/8 / 360e9 x 1e6 = 2621.79 us out of place.
  CHECK(r.rows[10].bytes == 1073741824.0);
  CHECK(r.rows[10].out_of_place_time_s == Approx(2621.79e-6));
  CHECK(r.rows[10].busbw_GBps == Approx(358.35));
  REQUIRE(r.avg_busbw_GBps);
  CHECK(*r.avg_busbw_GBps == Approx(143.471));

  // The samples take the mean of out-of-place and in-place (0.98 x): 0.99 x (12 us + bytes x 7/8 / 360e9),
  // so the fit gives latency 0.99 x 12 us = 11.88 us and busbw 360e9 / 0.99 = 363.64 GB/s, up to the
  // printed precision (0.005 us on >= 11.76 us: < 0.05%).
  const auto samples = collective_samples(r);
  REQUIRE(samples.size() == 11);
  CHECK(samples[0].time_s == Approx((12.00e-6 + 11.76e-6) / 2));
  CHECK(samples[0].ranks == 8);
  const CollectiveFit f = fit_collective(samples);
  CHECK(f.latency_s == Approx(11.88e-6).epsilon(2e-3));
  CHECK(f.busbw_bytes_per_s == Approx(360e9 / 0.99).epsilon(1e-3));
  CHECK(f.max_rel_error < 1e-3);
}

TEST_CASE("nccl-tests 2.13 log through mpirun --tag-output: two nodes, NCCL banner", "[nccl-tests]") {
  const auto runs = load_nccl_tests(kData + "all_reduce_h100x16_2node_mpi_v2.13.log");
  REQUIRE(runs.size() == 1);
  const NcclTestsRun& r = runs[0];
  CHECK(r.program == "all_reduce_perf");  // from the mpirun line
  CHECK(r.op == "all_reduce");
  CHECK(r.nccl_version == "2.18.5");      // "NCCL INFO NCCL version 2.18.5+cuda12.2"
  CHECK(r.tests_version.empty());
  CHECK(r.ranks == 16);
  CHECK(r.nodes == 2);                    // hosts dgx-a and dgx-b
  REQUIRE(r.rows.size() == 11);
  // Line 27: 2 preamble lines, nThread, "#", "Using devices", 16 ranks, the NCCL INFO line, "#", 3 header lines.
  CHECK(r.rows[0].line == 27);
  // 45 + 1048576 x 2 x 15/16 / 180e9 x 1e6 = 45 + 10.92 = 55.92 us.
  CHECK(r.rows[0].out_of_place_time_s == Approx(55.92e-6));
  const CollectiveFit f = fit_collective(collective_samples(r));
  CHECK(f.latency_s == Approx(45e-6).epsilon(1e-3));
  CHECK(f.busbw_bytes_per_s == Approx(180e9).epsilon(1e-3));
}

TEST_CASE("pre-2.13 log: no program name, the user gives the collective", "[nccl-tests]") {
  const std::string path = kData + "reduce_scatter_a100x8_old.log";
  try {
    load_nccl_tests(path);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.file() == path);
    CHECK(e.json_path() == "line 2");  // the run starts at its "# nThread" line
    CHECK_THAT(e.message(), Catch::Contains("--op"));
  }
  NcclTestsOptions options;
  options.op = "reduce_scatter";
  const auto runs = load_nccl_tests(path, options);
  REQUIRE(runs.size() == 1);
  const NcclTestsRun& r = runs[0];
  CHECK(r.op == "reduce_scatter");
  CHECK(r.ranks == 8);  // "#   Rank  0 Pid ..." lines, without Group
  CHECK(r.nodes == 1);
  CHECK(r.device_name == "A100-SXM4-40GB");
  REQUIRE(r.rows.size() == 8);
  // 20 + 65536 x 7/8 / 230e9 x 1e6 = 20.249 us, printed 20.25.
  CHECK(r.rows[0].out_of_place_time_s == Approx(20.25e-6));
  const CollectiveFit f = fit_collective(collective_samples(r));
  CHECK(f.latency_s == Approx(20e-6).epsilon(2e-3));
  CHECK(f.busbw_bytes_per_s == Approx(230e9).epsilon(1e-3));
}

TEST_CASE("the log's program and ranks win over the command line only when they agree", "[nccl-tests]") {
  NcclTestsOptions options;
  options.op = "all_reduce";
  try {
    load_nccl_tests(kData + "all_gather_h100x8_v2.17.log", options);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.json_path() == "line 2");
    CHECK_THAT(e.message(), Catch::Contains("not all_reduce"));
  }
  NcclTestsOptions ranks;
  ranks.ranks = 4;
  CHECK_THROWS_AS(load_nccl_tests(kData + "all_gather_h100x8_v2.17.log", ranks), InputError);
  NcclTestsOptions bad_op;
  bad_op.op = "broadcast";
  CHECK_THROWS_AS(load_nccl_tests(kData + "all_gather_h100x8_v2.17.log", bad_op), InputError);
}

TEST_CASE("newest layout with per-iteration columns and a timestamp", "[nccl-tests]") {
  // 2 ranks, all_gather: busbw = algbw x 1/2. 1 MiB in 10.00 us: algbw 104.86 GB/s, busbw 52.43.
  const std::string text =
      "# Collective test starting: all_gather_perf\n"
      "# nThread 1 nGpus 2 minBytes 0 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20\n"
      "#  Rank  0 Group  0 Pid    100 on       h0 device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n"
      "#  Rank  1 Group  0 Pid    100 on       h0 device  1 [0000:28:00] NVIDIA H100 80GB HBM3\n"
      "#       size         count      type   redop    root     time   algbw   busbw #wrong    i_min    i_max    "
      "i_p99    i_cv%     time   algbw   busbw #wrong    i_min    i_max    i_p99    i_cv%           timestamp\n"
      "           0             0     float    none      -1     0.10    0.00    0.00      0     0.09     0.12     "
      "0.12     3.10     0.10    0.00    0.00      0     0.09     0.12     0.12     3.10 2025-03-14 10:22:01\n"
      "     1048576        131072     float    none      -1    10.00  104.86   52.43    N/A     9.90    10.40    "
      "10.40     1.00  1.0e+01  104.86   52.43    N/A     9.90    10.40    10.40     1.00 2025-03-14 10:22:02\n"
      "# Avg bus bandwidth    : 26.215\n";
  const auto runs = parse_nccl_tests(text, "t.log");
  REQUIRE(runs.size() == 1);
  // The 0-byte row is skipped (NCCL launches nothing for an empty buffer).
  REQUIRE(runs[0].rows.size() == 1);
  CHECK(runs[0].rows[0].line == 7);
  CHECK(runs[0].rows[0].out_of_place_time_s == Approx(10.00e-6));
  CHECK(runs[0].rows[0].in_place_time_s == Approx(10.0e-6));  // "%7.1e" form
}

TEST_CASE("several programs in one file are separate runs", "[nccl-tests]") {
  const std::string row1 = "        1024           128     float    none      -1    10.00    0.10    0.05      0    10.00    0.10    0.05      0\n";
  const std::string row2 = "     1048576        131072     float    none      -1    20.00   52.43   26.21      0    20.00   52.43   26.21      0\n";
  const std::string text = kHead + row1 + row2 + "# Avg bus bandwidth    : 13.13\n" +
                           "./build/sendrecv_perf -b 1K -e 1M -g 2\n"
                           "# nThread 1 nGpus 2 minBytes 1024 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20\n"
                           "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
                           "        1024           256     float     sum      -1     8.00    0.13    0.13      0     8.00    0.13    0.13      0\n";
  const auto runs = parse_nccl_tests(text, "t.log");
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].op == "all_gather");
  CHECK(runs[0].rows.size() == 2);
  CHECK(runs[1].program == "sendrecv_perf");
  CHECK(runs[1].op == "p2p");
  CHECK(runs[1].ranks == 2);  // no rank lines: nThread 1 x nGpus 2
  CHECK(runs[1].rows[0].line == 13);
}

TEST_CASE("malformed logs are refused with the line", "[nccl-tests]") {
  const std::string row = "        1024           128     float    none      -1    10.00    0.10    0.05      0    10.00    0.10    0.05      0\n";
  // Line 7: a field missing.
  expect_error(kHead + "        1024           128     float    none      -1    10.00    0.10    0.05      0    10.00    0.10\n",
               "line 7", "fields");
  // A time that is not a number.
  expect_error(kHead + "        1024           128     float    none      -1    abc    0.10    0.05      0    10.00    0.10    0.05      0\n",
               "line 7", "time");
  // Wrong elements: the run failed its check.
  expect_error(kHead + row + "        2048           256     float    none      -1    10.00    0.20    0.10      5    10.00    0.20    0.10      5\n",
               "line 8", "wrong elements");
  // busbw / algbw = 1 is not all_gather's 1/2 on 2 ranks (an all_reduce log run under the wrong name).
  expect_error(kHead + "     1048576        131072     float    none      -1    20.00   52.43   52.43      0    20.00   52.43   52.43      0\n",
               "line 7", "bus factor");
  // A program fusesim does not model.
  std::string bcast = kHead;
  bcast.replace(bcast.find("all_gather_perf"), 15, "broadcast_perf");
  expect_error(bcast + row, "line 1", "broadcast_perf");
  // A header and no rows.
  expect_error(kHead, "line 6", "no nccl-tests results");
  // A rank line without its fields.
  expect_error("# nThread 1 nGpus 2\n#  Rank  x Group 0\n", "line 2", "Rank");
  // An empty file.
  expect_error("", "line 1", "no nccl-tests results");
}
