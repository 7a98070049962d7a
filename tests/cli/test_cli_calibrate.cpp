// `fusesim calibrate` end to end: tools/microbench/microbench.py --dry-run (the synthetic device), then
// `calibrate fit`, whose fitted section must recover the script's synthetic constants; nccl-tests
// import; the plan of a small workload; and bad inputs (exit 2, one line naming the file).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/model/profile.hpp"
#include "process.hpp"

using namespace fusesim::testing;
using nlohmann::json;

namespace {

const std::string kMicrobench = source_path("tools/microbench/microbench.py");
const std::string kLogs = source_path("tests/data/calibrate/");

// The dry run needs only python3 (Debian package python3, tools/install-deps.sh).
ProcessResult run_microbench(const std::vector<std::string>& args, const ScratchDir& dir) {
  std::string cmd = "cd " + shell_quote(dir.path().string()) + " && python3 " + shell_quote(kMicrobench);
  for (const auto& a : args) cmd.append(" ").append(shell_quote(a));
  cmd.append(" >.stdout 2>.stderr");
  const int status = std::system(cmd.c_str());
  ProcessResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(dir.path() / ".stdout");
  r.err = slurp(dir.path() / ".stderr");
  return r;
}

json read_json(const std::string& path) { return json::parse(slurp(path)); }

// The synthetic device of microbench.py (its SYNTHETIC table), restated here so that a change there
// that the fit no longer recovers fails this test.
struct Synthetic {
  const char* op;
  double latency_s;
  double busbw;
};
const Synthetic kCollectives[] = {{"all_gather", 12e-6, 360e9},
                                  {"reduce_scatter", 14e-6, 350e9},
                                  {"all_reduce", 20e-6, 370e9},
                                  {"all_to_all", 16e-6, 320e9},
                                  {"p2p", 8e-6, 380e9}};

void check_synthetic_fit(const json& fitted, double tolerance, double sm_tolerance) {
  for (const Synthetic& s : kCollectives) {
    INFO(s.op);
    REQUIRE(fitted["collectives"].contains(s.op));
    const json& c = fitted["collectives"][s.op];
    CHECK(c["ranks"] == 8);
    CHECK(c["nodes"] == 1);
    CHECK(c["latency_s"].get<double>() == Approx(s.latency_s).epsilon(tolerance));
    CHECK(c["busbw_bytes_per_s"].get<double>() == Approx(s.busbw).epsilon(tolerance));
  }
  CHECK(fitted["contention"]["sm_kernel_slowdown_per_sm"].get<double>() == Approx(0.008).epsilon(sm_tolerance));
  CHECK(fitted["contention"]["copy_engine_slowdown"].get<double>() == Approx(1.04).epsilon(tolerance));
  CHECK(fitted["hbm_bytes_per_s"].get<double>() == Approx(3.0e12).epsilon(tolerance));
}

void check_one_error_line(const ProcessResult& r, const std::string& file, const std::string& path_part) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  const auto lines = r.err_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].rfind("error: " + file + ": ", 0) == 0);
  CHECK(lines[0].find(path_part) != std::string::npos);
}

}  // namespace

TEST_CASE("calibrate fit recovers the synthetic constants of the microbench dry run", "[cli][calibrate]") {
  ScratchDir dir;
  const ProcessResult mb = run_microbench({"--dry-run", "-o", "raw.json"}, dir);
  INFO("microbench stderr: " << mb.err);
  REQUIRE(mb.exit_code == 0);
  const json raw = read_json(dir.file("raw.json"));
  CHECK(raw["schema"] == "fusesim.calibration");
  CHECK(raw["schema_version"] == 1);
  CHECK(raw["provenance"]["kind"] == "synthetic");
  CHECK_FALSE(raw.contains("fitted"));
  for (const char* section : {"gemm", "attention", "elementwise", "copy", "contention", "stream_wait", "collectives"}) {
    INFO(section);
    CHECK(raw[section].size() > 0);
  }

  const ProcessResult fit = run_fusesim({"calibrate", "fit", "raw.json", "-o", "fitted.json", "--peak-tflops", "989"}, dir);
  INFO("fit stderr: " << fit.err);
  REQUIRE(fit.exit_code == 0);
  const json out = read_json(dir.file("fitted.json"));
  // The samples are untouched, the fitted section added.
  CHECK(out["gemm"] == raw["gemm"]);
  CHECK(out["collectives"] == raw["collectives"]);
  const json& f = out["fitted"];
  // Noiseless synthetic samples follow the fitted models exactly.
  check_synthetic_fit(f, 1e-9, 1e-9);
  for (const Synthetic& s : kCollectives) CHECK(f["collectives"][s.op]["max_rel_error"].get<double>() < 1e-9);
  // The best GEMM is the largest, 16384^3: 2 x 16384^3 = 8.796e12 FLOP at 989e12 x 0.75 takes 11.859 ms,
  // plus the 5 us launch: 0.75 x 11.859 / 11.864 = 0.74968 of the peak.
  const double flops = 2.0 * std::pow(16384.0, 3);
  const double t = 5e-6 + flops / (989e12 * 0.75);
  CHECK(f["gemm_peak_fraction"].get<double>() == Approx(flops / t / 989e12).epsilon(1e-9));
  CHECK(f["gemm_peak_fraction"].get<double>() < 0.75);

  // The profile loader reads the result and takes the fitted values as they are.
  const fusesim::model::Profile p = fusesim::model::load_profile(dir.file("fitted.json"));
  CHECK(p.kind == "synthetic");
  CHECK(p.sm_count == 132);
  REQUIRE(p.fitted_collectives.count("all_gather") == 1);
  CHECK(p.fitted_collectives.at("all_gather").busbw_bytes_per_s == Approx(360e9));
  REQUIRE(p.hbm_bytes_per_s);
  CHECK(*p.hbm_bytes_per_s == Approx(3.0e12));
  // The stream-wait chain: 200 hops of a 4 us kernel on one stream, plus 1 us per hop on two
  // (SYNTHETIC's memory_launch_s and stream_wait_s): (200 x 5 us - 200 x 4 us) / 200 = 1 us.
  CHECK(out["stream_wait"] == raw["stream_wait"]);
  REQUIRE(p.stream_wait_s);
  CHECK(*p.stream_wait_s == Approx(1e-6).epsilon(1e-9));
}

TEST_CASE("microbench --fusesim writes one fitted calibration file - noisy samples fit within the noise",
          "[cli][calibrate]") {
  ScratchDir dir;
  const ProcessResult mb = run_microbench(
      {"--dry-run", "--noise", "0.02", "--seed", "7", "--quick", "-o", "h.json", "--fusesim", FUSESIM_BINARY}, dir);
  INFO("stderr: " << mb.err);
  REQUIRE(mb.exit_code == 0);
  const json out = read_json(dir.file("h.json"));
  REQUIRE(out.contains("fitted"));
  // 2% multiplicative noise on each repeat, medians of 20 repeats (about 0.6% off each): the fitted
  // values stay within 3%. The slowdown per SM is fitted from slowdown - 1 (0.064 at 8 SMs), a small
  // difference of two noisy medians, so its error is about ten times larger: 15%.
  check_synthetic_fit(out["fitted"], 0.03, 0.15);
  // The dry run passes its own peak (989 TFLOP/s) to the fit.
  CHECK(out["fitted"].contains("gemm_peak_fraction"));
}

TEST_CASE("microbench --plan measures the shapes of `fusesim calibrate plan`", "[cli][calibrate]") {
  ScratchDir dir;
  const ProcessResult plan = run_fusesim(
      {"calibrate", "plan", "--workload", "commfuse-tpsp-block", "--topology", "dgx-h100", "-o", "plan.json"}, dir);
  INFO("plan stderr: " << plan.err);
  REQUIRE(plan.exit_code == 0);
  const ProcessResult mb =
      run_microbench({"--dry-run", "--plan", "plan.json", "--dtypes", "bf16", "-o", "raw.json"}, dir);
  INFO("microbench stderr: " << mb.err);
  REQUIRE(mb.exit_code == 0);
  const json p = read_json(dir.file("plan.json"));
  const json raw = read_json(dir.file("raw.json"));
  // Every planned GEMM is measured once per dtype asked for.
  CHECK(raw["gemm"].size() == p["gemm"].size());
  for (const json& g : p["gemm"]) {
    bool found = false;
    for (const json& s : raw["gemm"]) {
      found = found || (s["m"] == g["m"] && s["n"] == g["n"] && s["k"] == g["k"] && s["batch"] == g["batch"]);
    }
    CHECK(found);
  }
}

TEST_CASE("calibrate plan lists the GEMM shapes of every schedule", "[cli][calibrate]") {
  ScratchDir dir;
  const ProcessResult r = run_fusesim({"calibrate", "plan", "--workload", "commfuse-tpsp-block", "--topology",
                                       "dgx-h100", "--tp", "4", "--slices", "2,4"},
                                      dir);
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  const json p = json::parse(r.out);
  CHECK(p["schema"] == "fusesim.microbench-plan");
  CHECK(p["tp"] == 4);
  CHECK(p["slices"] == json::array({2, 4}));
  // commfuse-tpsp-block: hidden h = 4096, 32 heads of 128, MLP 4h = 16384, sequence 8192, micro-batch 1,
  // TP 4. Forward GEMMs of the baseline on the gathered 8192 tokens: QKV n = 3h/4 = 3072, k = h;
  // out-projection n = h, k = h/4 = 1024; FC1 n = 4h/4 = 4096, k = h; FC2 n = h, k = 4h/4 = 4096.
  // Slice-overlap with k slices runs them on 8192/k tokens; CommFuse on chunks of 8192/4 = 2048 tokens.
  const auto has = [&](std::int64_t m, std::int64_t n, std::int64_t k, const std::string& schedule) {
    for (const json& g : p["gemm"]) {
      if (g["m"] == m && g["n"] == n && g["k"] == k && g["dtype"] == "bf16") {
        for (const json& s : g["schedules"])
          if (s == schedule) return true;
      }
    }
    return false;
  };
  CHECK(has(8192, 3072, 4096, "baseline"));
  CHECK(has(8192, 4096, 1024, "baseline"));
  CHECK(has(8192, 4096, 4096, "baseline"));
  CHECK(has(4096, 3072, 4096, "slice-2"));
  CHECK(has(2048, 3072, 4096, "slice-4"));
  CHECK(has(2048, 3072, 4096, "commfuse"));
  // Shapes are listed once each.
  for (std::size_t i = 0; i < p["gemm"].size(); ++i)
    for (std::size_t j = i + 1; j < p["gemm"].size(); ++j) CHECK(p["gemm"][i] != p["gemm"][j]);
  // Attention: 32 / 4 = 8 local heads of 128, causal, forward and backward.
  bool fwd = false, bwd = false;
  for (const json& a : p["attention"]) {
    CHECK(a["heads"] == 8);
    CHECK(a["head_dim"] == 128);
    fwd = fwd || a["pass"] == "forward";
    bwd = bwd || a["pass"] == "backward";
  }
  CHECK(fwd);
  CHECK(bwd);
}

TEST_CASE("calibrate import-nccl-tests: samples, fit and provenance from the logs", "[cli][calibrate]") {
  ScratchDir dir;
  const ProcessResult r = run_fusesim({"calibrate", "import-nccl-tests", kLogs + "all_gather_h100x8_v2.17.log",
                                       kLogs + "all_reduce_h100x16_2node_mpi_v2.13.log", "--sm-count", "132",
                                       "--date", "2026-01-02", "-o", "nccl.json"},
                                      dir);
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  const json out = read_json(dir.file("nccl.json"));
  CHECK(out["device"]["name"] == "NVIDIA H100 80GB HBM3");
  CHECK(out["device"]["sm_count"] == 132);
  CHECK(out["provenance"]["kind"] == "measured");
  CHECK(out["provenance"]["date"] == "2026-01-02");
  CHECK(out["provenance"]["machine"] == "dgx-a, dgx-b, dgx-h100-07");
  CHECK(out["provenance"]["libraries"]["nccl"] == "2.18.5, 2.27.3");
  CHECK(out["provenance"]["libraries"]["nccl-tests"] == "2.17.6");
  CHECK(out["collectives"].size() == 22);  // 11 rows in each log
  const json& first = out["collectives"][0];
  CHECK(first["op"] == "all_gather");
  CHECK(first["bytes"] == 1024);
  CHECK(first["time_s"][0].get<double>() == Approx(12.00e-6));
  CHECK(first["time_s"][1].get<double>() == Approx(11.76e-6));
  // Constructed with all_gather 12 us / 360 GB/s (in-place 0.98x: the median of the two is 0.99x) and
  // all_reduce on 16 ranks of 2 nodes 45 us / 180 GB/s (tests/data/calibrate/make_logs.py).
  const json& c = out["fitted"]["collectives"];
  CHECK(c["all_gather"]["ranks"] == 8);
  CHECK(c["all_gather"]["busbw_bytes_per_s"].get<double>() == Approx(360e9 / 0.99).epsilon(1e-3));
  CHECK(c["all_reduce"]["ranks"] == 16);
  CHECK(c["all_reduce"]["nodes"] == 2);
  CHECK(c["all_reduce"]["latency_s"].get<double>() == Approx(45e-6).epsilon(1e-3));
  CHECK(c["all_reduce"]["busbw_bytes_per_s"].get<double>() == Approx(180e9).epsilon(1e-3));
  // The profile loader accepts it.
  CHECK_NOTHROW(fusesim::model::load_profile(dir.file("nccl.json")));

  // --into adds the samples to a microbench document and refits.
  REQUIRE(run_microbench({"--dry-run", "--quick", "--sections", "gemm,copy,elementwise", "-o", "raw.json"}, dir).exit_code == 0);
  // Samples of another device are refused: the dry run's device is not the log's A100.
  const std::string old_log = kLogs + "reduce_scatter_a100x8_old.log";
  check_one_error_line(
      run_fusesim({"calibrate", "import-nccl-tests", old_log, "--op", "reduce_scatter", "--into", "raw.json", "-o", "m.json"}, dir),
      old_log, "A100-SXM4-40GB");
  {
    json raw = read_json(dir.file("raw.json"));
    raw["device"]["name"] = "A100-SXM4-40GB";
    std::ofstream(dir.file("raw.json")) << raw.dump();
  }
  const ProcessResult into = run_fusesim(
      {"calibrate", "import-nccl-tests", old_log, "--op", "reduce_scatter", "--into", "raw.json", "-o", "merged.json"}, dir);
  INFO("stderr: " << into.err);
  REQUIRE(into.exit_code == 0);
  const json merged = read_json(dir.file("merged.json"));
  CHECK(merged["collectives"].size() == 8);
  CHECK(merged["fitted"]["collectives"]["reduce_scatter"]["busbw_bytes_per_s"].get<double>() == Approx(230e9).epsilon(1e-3));
  CHECK(merged["fitted"]["hbm_bytes_per_s"].get<double>() == Approx(3.0e12));
}

TEST_CASE("calibrate refuses bad input with exit 2 and the file", "[cli][calibrate]") {
  ScratchDir dir;
  // A raw file that does not exist.
  check_one_error_line(run_fusesim({"calibrate", "fit", "missing.json", "-o", "out.json"}, dir), "missing.json", "$");
  // A log without its program and no --op: the file and the line.
  const std::string old_log = kLogs + "reduce_scatter_a100x8_old.log";
  check_one_error_line(run_fusesim({"calibrate", "import-nccl-tests", old_log, "--sm-count", "108", "-o", "o.json"}, dir),
                       old_log, "line 2");
  // A log of all_gather imported as all_reduce.
  const std::string ag_log = kLogs + "all_gather_h100x8_v2.17.log";
  check_one_error_line(
      run_fusesim({"calibrate", "import-nccl-tests", ag_log, "--op", "all_reduce", "--sm-count", "132", "-o", "o.json"}, dir),
      ag_log, "line 2");
  // No SM count.
  check_one_error_line(run_fusesim({"calibrate", "import-nccl-tests", ag_log, "-o", "o.json"}, dir), "<command line>",
                       "--sm-count");
  // A raw document with a typo: the profile loader's path.
  ScratchDir d2;
  {
    std::ofstream(d2.file("raw.json")) << R"({"schema": "fusesim.calibration", "schema_version": 1,
      "device": {"name": "x", "sm_count": 132},
      "provenance": {"kind": "measured", "machine": "m", "date": "d", "source": "s"},
      "copy": [{"bytes": 1000000, "time_s": [1e-6], "bandwith": 1}]})";
  }
  check_one_error_line(run_fusesim({"calibrate", "fit", "raw.json", "-o", "out.json"}, d2), "raw.json", "$.copy[0]");
  CHECK_FALSE(std::filesystem::exists(d2.file("out.json")));
  // A GEMM faster than the peak given.
  ScratchDir d3;
  REQUIRE(run_microbench({"--dry-run", "--quick", "--sections", "gemm", "-o", "raw.json"}, d3).exit_code == 0);
  check_one_error_line(run_fusesim({"calibrate", "fit", "raw.json", "-o", "out.json", "--peak-tflops", "100"}, d3),
                       "<command line>", "--peak-tflops");
  // The slice count must divide the sequence: 8192 % 3 != 0.
  const ProcessResult plan = run_fusesim(
      {"calibrate", "plan", "--workload", "commfuse-tpsp-block", "--topology", "dgx-h100", "--slices", "3"}, dir);
  CHECK(plan.exit_code == 2);
}

TEST_CASE("calibrate import-nccl-tests: an all-reduce curve from bytes to GiBs is priced protocol by protocol, NVLS "
          "included", "[cli][calibrate]") {
  ScratchDir dir;
  // A real all_reduce_perf log of one 8x H100 DGX, 8 B to 16 GiB (NVIDIA/dgxc-benchmarking; NVLS from
  // some tens of MiB: 480 GB/s busbw at 16 GiB, above NVLink4's 450 GB/s line rate). One latency and
  // bandwidth through it miss by up to 58% and would read as a ring faster than its links; fitted
  // protocol by protocol (model::apply_profile) it is no warning, and simulate takes the profile.
  const std::string log = kLogs + "all_reduce_h100x8_dgxc_benchmarking.log";
  const ProcessResult r = run_fusesim({"calibrate", "import-nccl-tests", log, "--topology", "dgx-h100", "-o", "ar.json"}, dir);
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("warning") == std::string::npos);
  CHECK(r.err.find("note: ar.json: on dgx-h100, `fusesim simulate --profile` prices all_reduce (8 ranks, 25 sizes): "
                   "NCCL's protocols fitted: ll base") != std::string::npos);
  CHECK(r.err.find("nvls base") != std::string::npos);
  const ProcessResult sim = run_fusesim(
      {"simulate", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--scope", "layer", "--profile", "ar.json"}, dir);
  INFO("simulate stderr: " << sim.err);
  REQUIRE(sim.exit_code == 0);
  CHECK(sim.out.find("NCCL's protocols fitted") != std::string::npos);
}

TEST_CASE("calibrate import-nccl-tests warns when simulate --profile would refuse the fit (NVLS all-reduce)",
          "[cli][calibrate]") {
  ScratchDir dir;
  // all_reduce_perf with NVLS: 480 GB/s busbw on one 8-GPU node (make_logs.py), above NVLink4's 450 GB/s
  // line rate. The import succeeds (the samples are real), but says which fix gives a usable profile.
  const std::string nvls = kLogs + "all_reduce_h100x8_nvls_v2.17.log";
  const ProcessResult r =
      run_fusesim({"calibrate", "import-nccl-tests", nvls, "--topology", "dgx-h100", "-o", "nvls.json"}, dir);
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  const std::string warning = "warning: nvls.json: $.fitted.collectives.all_reduce: fitted busbw 480.0 GB/s exceeds "
                              "the line rate 450.0 GB/s";
  CHECK(r.err.find(warning) != std::string::npos);
  CHECK(r.err.find("all_gather_perf") != std::string::npos);
  CHECK(r.err.find("NCCL_NVLS_ENABLE=0") != std::string::npos);
  // The warning is right: simulate refuses the profile.
  const ProcessResult sim = run_fusesim(
      {"simulate", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--scope", "layer", "--profile", "nvls.json"}, dir);
  CHECK(sim.exit_code == 2);
  CHECK(sim.err.find("exceeds the line rate") != std::string::npos);

  // Without --topology the shipped clusters of the device are tried (--device names the model here).
  const ProcessResult shipped = run_fusesim(
      {"calibrate", "import-nccl-tests", nvls, "--device", "h100-sxm", "--sm-count", "132", "-o", "nvls2.json"}, dir);
  INFO("stderr: " << shipped.err);
  REQUIRE(shipped.exit_code == 0);
  CHECK(shipped.err.find("warning: nvls2.json: $.fitted.collectives.all_reduce") != std::string::npos);
  CHECK(shipped.err.find("NCCL_NVLS_ENABLE=0") != std::string::npos);

  // A ring all-gather at 360 GB/s fits the links: no warning, and simulate takes the profile.
  const ProcessResult ag = run_fusesim({"calibrate", "import-nccl-tests", kLogs + "all_gather_h100x8_v2.17.log",
                                        "--topology", "dgx-h100", "-o", "ag.json"},
                                       dir);
  INFO("stderr: " << ag.err);
  REQUIRE(ag.exit_code == 0);
  CHECK(ag.err.find("warning") == std::string::npos);
  CHECK(run_fusesim({"simulate", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--scope", "layer",
                     "--profile", "ag.json"},
                    dir)
            .exit_code == 0);
}

TEST_CASE("calibrate from-trace: the GEMMs of a real H100 step with their shapes and times", "[cli][calibrate]") {
  ScratchDir dir;
  // tests/data/kineto/h100-train-step-mpt-1b-plain.json.gz, taken with record_shapes=True: 291 aten::mm
  // ops, each launching one nvjet/cuBLAS kernel, in 12 shapes (forward, dgrad and wgrad of QKV,
  // attention output, FC1, FC2 and the tied LM head of MPT-1B at 16,384 tokens).
  const std::string trace = source_path("tests/data/kineto/h100-train-step-mpt-1b-plain.json.gz");
  const auto r = run_fusesim({"calibrate", "from-trace", trace, "-o", "p.json", "--topology", "dgx-h100", "--date",
                              "2026-11-27"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("12 GEMM shapes from 291 ops, 2 attention shapes from 48 ops") != std::string::npos);
  std::ifstream in(dir.file("p.json"));
  const json p = json::parse(in);
  CHECK(p["device"]["model"] == "h100-sxm");
  CHECK(p["device"]["sm_count"] == 132);
  // The gap between consecutive kernels of the step's one stream: 1,362 gaps, of which the two at the
  // step's start (261 and 150 us) are over 20 us; the other 1,360 average 1.624 us (read with Python:
  // tests/tools/test_kernel_gap.py, the value h100-sxm ships rounded to 1.6 us).
  REQUIRE(p["device"].contains("kernel_gap_s"));
  CHECK(p["device"]["kernel_gap_s"]["value"].get<double>() == Approx(1.624e-6).epsilon(1e-3));
  CHECK(p["device"]["kernel_gap_s"]["source"].get<std::string>().find("the mean of the 1360 gaps under 20 us") == 0);
  REQUIRE(p["gemm"].size() == 12u);
  std::size_t kernels = 0;
  bool head = false;
  for (const json& g : p["gemm"]) {
    kernels += g["time_s"].size();
    CHECK(g["dtype"] == "bf16");
    CHECK(g["source"].get<std::string>().find("trace: ") == 0);
    // The LM head's forward, x[16384, 2048] @ W^T[2048, 50368]: its aten::mm (CPU thread 526, ts
    // 4857614182656.2 us) launched one kernel, nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN, of
    // 4,508.048 us (read from the trace with Python, matched by correlation id).
    if (g["m"] == 16384 && g["n"] == 50368 && g["k"] == 2048) {
      head = true;
      REQUIRE(g["time_s"].size() == 1u);
      CHECK(g["time_s"][0].get<double>() == Approx(4508.048e-6).epsilon(1e-9));
    }
  }
  CHECK(head);
  CHECK(kernels == 291u);
  // FlashAttention: 24 forward and 24 backward calls of batch 8, 16 heads, seq 2,048, head dim 128,
  // causal. The first forward launched flash_fwd_kernel, 539.557 us; the first backward
  // flash_bwd_dot_do_o (92.865 us), flash_bwd_dq_dk_dv_loop_seqk_parallel (1,416.431 us) and
  // flash_bwd_convert_dq (78.273 us): 1,587.569 us (read with Python as the GEMM above).
  REQUIRE(p["attention"].size() == 2u);
  for (const json& a : p["attention"]) {
    CHECK(a["batch"] == 8);
    CHECK(a["heads"] == 16);
    CHECK(a["kv_heads"] == 16);
    CHECK(a["seq"] == 2048);
    CHECK(a["head_dim"] == 128);
    CHECK(a["causal"] == true);
    REQUIRE(a["time_s"].size() == 24u);
    // Each kernel's ends are rounded to the nanosecond from epoch times: a sum of three may move by 1 ns.
    CHECK(a["time_s"][0].get<double>() == Approx(a["pass"] == "forward" ? 539.557e-6 : 1587.569e-6).margin(1.5e-9));
  }
  // The profile prices the same step's GEMMs as they were measured: `simulate --profile` with it, then
  // `trace compare`, GEMM class within 2% (in-sample by construction).
  std::ifstream win(source_path("validation/workloads/mpt-1b-seq2048-8xh100-bf16.json"));
  json w = json::parse(win);
  w["training"]["micro_batch"] = 8;
  w["training"]["grad_accumulation"] = 1;
  // The traced step ran FlashAttention-2's CUDA kernels (flash_fwd_kernel above), not llm-foundry's
  // Triton kernel that the published runs of this workload used and its attention_time_factor (2.0)
  // stands for: the profile prices the traced kernels as they are.
  REQUIRE(w["training"].contains("attention_time_factor"));
  w["training"].erase("attention_time_factor");
  w["parallel"] = {{"tp", 1}, {"up", 1}, {"dp", 1}};
  w["schedule"] = {{"kind", "baseline"}};
  std::ofstream(dir.file("w.json")) << w.dump();
  const auto sim = run_fusesim({"simulate", "--workload", "w.json", "--topology", "dgx-h100", "--scope", "step",
                                "--schedule", "baseline", "--profile", "p.json", "--trace", "s.json"},
                               dir);
  INFO(sim.err);
  REQUIRE(sim.exit_code == 0);
  const auto cmp = run_fusesim({"trace", "compare", trace, "s.json", "--format", "json"}, dir);
  REQUIRE(cmp.exit_code == 0);
  // Named: a range over a member of a temporary (json::parse(...)["measures"]) reads freed memory,
  // the temporary ending before the loop (AddressSanitizer).
  const json report = json::parse(cmp.out);
  int checked = 0;
  for (const json& m : report["measures"])
    if (m["measure"] == "class gemm" || m["measure"] == "class attention") {
      INFO(m["measure"]);
      CHECK(std::abs(m["error"].get<double>()) < 0.02);
      ++checked;
    }
  CHECK(checked == 2);
}

TEST_CASE("calibrate from-trace refuses a trace without shaped GEMMs, naming the file", "[cli][calibrate]") {
  ScratchDir dir;
  // The HTA job's trace records shapes, but its aten::mm/addmm/bmm ops are fp32: no bf16 or fp16 GEMM.
  const auto r = run_fusesim(
      {"calibrate", "from-trace", source_path("tests/data/kineto/hta-sampled-rank-0.json.gz"), "-o", "p.json",
       "--topology", "dgx-h100"},
      dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("$.traceEvents: no GEMM with its shape") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("p.json")));
  const auto step = run_fusesim({"calibrate", "from-trace", source_path("tests/data/kineto/h100-train-step-mpt-1b-plain.json.gz"),
                                 "-o", "p.json", "--step", "3"},
                                dir);
  CHECK(step.exit_code == 2);
  CHECK(step.err.find("--step") != std::string::npos);
}

TEST_CASE("calibrate plan takes --seq, as simulate spells it, and --sequence alike", "[cli][calibrate]") {
  ScratchDir dir;
  const auto seq = run_fusesim({"calibrate", "plan", "--workload", "llama-3-8b", "--seq", "4096"}, dir);
  const auto sequence = run_fusesim({"calibrate", "plan", "--workload", "llama-3-8b", "--sequence", "4096"}, dir);
  REQUIRE(seq.exit_code == 0);
  REQUIRE(sequence.exit_code == 0);
  CHECK(seq.out == sequence.out);
  // Llama-3-8B at TP 8: attention over the whole 4096-token sequence on every rank.
  CHECK(json::parse(seq.out)["attention"][0]["seq_q"] == 4096);
}
