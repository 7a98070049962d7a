// `fusesim validate` end to end on a tiny case file with hand-derived errors, its refusal of a bad
// case file, `simulate --profile`, and the application of fitted link parameters to a cluster checked
// against the simulator.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "fusesim/analysis/rank_correlation.hpp"
#include "fusesim/model/profile.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/output.hpp"
#include "process.hpp"

using namespace fusesim::testing;
using nlohmann::json;

namespace {

const std::string kTiny = source_path("tests/data/validation/tiny.json");
const std::string kProfile = source_path("tests/data/validation/h100-attention-profile.json");

// A synthetic H100 SXM5 calibration profile holding fitted collectives alone (no kernel samples).
json links_profile(const json& collectives, const std::string& date) {
  return {{"schema", "fusesim.calibration"},
          {"schema_version", 1},
          {"device", {{"name", "H100 SXM5"}, {"sm_count", 132}}},
          {"provenance", {{"kind", "synthetic"}, {"machine", "test"}, {"date", date}, {"source", "test"}}},
          {"fitted", {{"collectives", collectives}}}};
}

}  // namespace

TEST_CASE("fusesim validate: per-case errors and MAPE of the roofline and a profile, derived by hand",
          "[cli][validate]") {
  ScratchDir dir;
  const auto r = run_fusesim({"validate", "--cases", kTiny, "--profile", kProfile, "--format", "json"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  REQUIRE(doc["cases"].size() == 2u);
  // Roofline on dgx-h100: FlashAttention at 989e12 x 0.3418 = 338.0402 TFLOP/s (compute-bound: the
  // forward pass moves 4 x 4 x 4096 x 16 x 128 x 2 B = 268 MB, 0.09 ms at 3.35 TB/s x 0.85, against
  // 5.69 ms of compute). FLOPs as FlashAttention counts them (3.5 x 4 b h s^2 d = 1.924e12) equal the
  // model's for a non-causal kernel, so the predicted throughput is the effective peak, less the
  // device's 2 us launch on each of the two kernels (forward, backward): 1.924e12 / (5.692 ms + 4 us)
  // = 337.80 TFLOP/s.
  const double flops = 3.5 * 4 * 4 * 16 * 4096.0 * 4096.0 * 128;
  const double roof = flops / (flops / (989e12 * 0.3418) + 4e-6) / 1e12;
  const json& a = doc["cases"][0];
  const json& b = doc["cases"][1];
  CHECK(a["roofline"].get<double>() == Approx(roof).epsilon(1e-6));
  // (337.80 - 300) / 300 = +12.60%; (337.80 - 400) / 400 = -15.55%.
  CHECK(a["roofline_error_pct"].get<double>() == Approx((roof - 300) / 300 * 100).epsilon(1e-6));
  CHECK(b["roofline_error_pct"].get<double>() == Approx((roof - 400) / 400 * 100).epsilon(1e-6));
  // The profile measured 320 TFLOP/s at exactly this shape: +6.667% and -20%.
  CHECK(a["calibrated"].get<double>() == Approx(320).epsilon(1e-6));
  CHECK(a["calibrated_error_pct"].get<double>() == Approx(20.0 / 3).epsilon(1e-6));
  CHECK(b["calibrated_error_pct"].get<double>() == Approx(-20).epsilon(1e-6));
  CHECK(a["fitted_on"].get<bool>());
  CHECK_FALSE(b["fitted_on"].get<bool>());
  // MAPE: roofline (12.60 + 15.55) / 2 = 14.08; profile (6.667 + 20) / 2 = 13.333; held out (b only) 20.
  const json& m = doc["mape_pct"]["attention"];
  CHECK(m["roofline"].get<double>() == Approx(((roof - 300) / 300 + (400 - roof) / 400) * 50).epsilon(1e-6));
  CHECK(m["profile"].get<double>() == Approx((20.0 / 3 + 20) / 2).epsilon(1e-6));
  CHECK(m["profile_held_out"].get<double>() == Approx(20).epsilon(1e-6));
  CHECK(doc["mape_pct"]["overall"]["profile"].get<double>() == Approx((20.0 / 3 + 20) / 2).epsilon(1e-6));

  // The table names each case and the MAPE line.
  const auto t = run_fusesim({"validate", "--cases", kTiny}, dir);
  REQUIRE(t.exit_code == 0);
  CHECK(t.out.find("attention") != std::string::npos);
  CHECK(t.out.find("14.1% (2)") != std::string::npos);
}

TEST_CASE("fusesim validate: a bad case file is exit 2 naming the file and the JSON path", "[cli][validate]") {
  ScratchDir dir;
  const std::string bad = source_path("tests/data/validation/bad-key.json");
  const auto r = run_fusesim({"validate", "--cases", bad}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("error: " + bad + ": $.cases[0]") == 0);
  CHECK(r.err.find("head_dims") != std::string::npos);
  const auto missing = run_fusesim({"validate", "--cases", "no-such-cases"}, dir);
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("no-such-cases") != std::string::npos);
}

TEST_CASE("fusesim validate: a p2p case between nodes, and its peer out of range", "[cli][validate]") {
  ScratchDir dir;
  const auto write_case = [&](const std::string& peer) {
    const std::string c = R"({"schema": "fusesim.validation", "schema_version": 1, "description": "t", "cases": [
      {"id": "p2p", "category": "collective", "topology": "dgx-h100-4node", "op": "p2p", "ranks": 2, "peer": )" +
                          peer + R"(, "bytes": 34404535, "engine": "sm_kernel", "measured_busbw_GBps": 30, "source": "t"}]})";
    fusesim::write_output_file(dir.file("c.json"), c);
    return run_fusesim({"validate", "--cases", dir.file("c.json"), "--format", "json"}, dir);
  };
  // Rank 0 to rank 8 of dgx-h100-4node (`fusesim routes`: 6 hops, 2.7 us, bottleneck the NIC link's
  // 49.61 GB/s): latency 2.7 + 2.8 (SM step) + 11.3 (p2p_network's added latency) = 16.8 us; payload
  // at 0.6935 x 49.61e9 = 34.404535e9 B/s, so 34,404,535 B drain in 1 ms: busbw 34,404,535 B /
  // 1.0168 ms = 33.8361 GB/s.
  const auto r = write_case("8");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  CHECK(doc["cases"][0]["roofline"].get<double>() == Approx(34404535 / 1.0168e-3 / 1e9).epsilon(1e-6));
  // A peer past the cluster's ranks, and rank 0 itself, are refused.
  const auto far = write_case("32");
  CHECK(far.exit_code == 2);
  CHECK(far.err.find("needs 33 ranks; the cluster has 32") != std::string::npos);
  const auto self = write_case("0");
  CHECK(self.exit_code == 2);
  CHECK(self.err.find("$.cases[0].peer") != std::string::npos);
}

TEST_CASE("fusesim validate: collectives summarized by how they were timed, like with like", "[cli][validate]") {
  ScratchDir dir;
  // Three all-reduces of 1 GiB on dgx-h100, one per timing, measured at 200, 100 and 400 GB/s: one
  // prediction p and three different errors, so each timing's line holds its own case's error, and the
  // kernels' decade line (1e09-1e10 B) the kernel-timed case alone.
  const auto write_cases = [&](const std::string& third_timing) {
    const std::string c = R"({"schema": "fusesim.validation", "schema_version": 1, "description": "t", "cases": [
      {"id": "k", "category": "collective", "topology": "dgx-h100", "op": "all_reduce", "ranks": 8, "bytes": 1073741824, "measured_busbw_GBps": 200, "source": "t"},
      {"id": "h", "category": "collective", "topology": "dgx-h100", "op": "all_reduce", "ranks": 8, "bytes": 1073741824, "measured_busbw_GBps": 100, "timing": "host_calls", "source": "t"},
      {"id": "o", "category": "collective", "topology": "dgx-h100", "op": "all_reduce", "ranks": 8, "bytes": 1073741824, "measured_busbw_GBps": 400, "timing": ")" +
                          third_timing + R"(", "source": "t"}]})";
    fusesim::write_output_file(dir.file("c.json"), c);
    return run_fusesim({"validate", "--cases", dir.file("c.json"), "--roofline", "--format", "json"}, dir);
  };
  const auto r = write_cases("one_process");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  const double p = doc["cases"][0]["roofline"].get<double>();
  const auto err = [&](double measured) { return std::abs(p - measured) / measured * 100; };
  CHECK(doc["cases"][0]["timing"] == "kernels");  // the default
  CHECK(doc["cases"][1]["timing"] == "host_calls");
  const json& m = doc["mape_pct"];
  CHECK(m["collective, timed: kernels"]["cases"] == 1);
  CHECK(m["collective, timed: kernels"]["roofline"].get<double>() == Approx(err(200)));
  CHECK(m["collective, timed: host_calls"]["roofline"].get<double>() == Approx(err(100)));
  CHECK(m["collective, timed: one_process"]["roofline"].get<double>() == Approx(err(400)));
  CHECK(m["collective, timed: kernels, 1e09-1e10 B"]["cases"] == 1);
  // The whole and the decade over all three, as before.
  CHECK(m["collective"]["cases"] == 3);
  CHECK(m["collective, 1e09-1e10 B"]["roofline"].get<double>() == Approx((err(200) + err(100) + err(400)) / 3));
  // Kernels launched from a CUDA graph have a line of their own too.
  const auto graph = write_cases("cuda_graph");
  REQUIRE(graph.exit_code == 0);
  CHECK(json::parse(graph.out)["mape_pct"]["collective, timed: cuda_graph"]["roofline"].get<double>() == Approx(err(400)));
  // A timing the reader does not know is exit 2 naming the file and the path.
  const auto bad = write_cases("stopwatch");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("$.cases[2].timing") != std::string::npos);
}

TEST_CASE("fusesim validate runs the shipped published cases with every shipped profile", "[cli][validate]") {
  ScratchDir dir;
  const auto r = run_fusesim(
      {"validate", "--profile", "h100-sxm,h200-sxm,a100-sxm", "--category", "collective", "--format", "json"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  REQUIRE(doc["cases"].size() > 5u);
  // Each case is also summarized by the decade of its message size: 10,240 B (vidur's 8 KiB point) in
  // 1e04-1e05 B, 16 GiB in 1e10-1e11 B; the decades hold every case once.
  for (const json& c : doc["cases"]) {
    INFO(c["id"]);
    CHECK(c["roofline"].get<double>() > 0);
  }
  int in_decades = 0;
  for (const auto& [key, m] : doc["mape_pct"].items())
    if (key.rfind("collective, 1e", 0) == 0) in_decades += m["cases"].get<int>();
  CHECK(in_decades == doc["mape_pct"]["collective"]["cases"].get<int>());
  CHECK(doc["mape_pct"].contains("collective, 1e04-1e05 B"));
  CHECK(doc["mape_pct"].contains("collective, 1e10-1e11 B"));
}

TEST_CASE("fusesim validate --cases measured: the H100 and H200 kernel models on training shapes they were not fitted on",
          "[cli][validate]") {
  // validation/measured.json: 9 GEMM shapes of the MPT-3B fp8 run in bf16 and fp8, measured on a lent
  // H200 and a lent H100, and the 50 bf16 shapes of the one-GPU training steps (4,096-16,384 tokens)
  // on the H100, all timed back to back for a budget: at the clock a power-capped GPU sustains,
  // 1.17-1.22x the burst times the profiles' GEMM samples have been timed at since 2026-11-27. So the
  // models (fitted on bursts) read faster than these: mean +8.8% to +15.7% per group, every group
  // still nearer than the roofline on average except the H200's bf16 (roofline 10.5%, model 12.0%).
  // Like with like, the same 59 bf16 shapes timed as bursts (tools/microbench/gemm_clock.py; in no
  // profile): the H100 model 3.2% off on average, the H200's 1.8% (worst -10.2% and +8.7%). And the
  // steps' 5 causal attention shapes, forward and backward (FlashAttention-2 through SDPA, timed back
  // to back): since the H100 profile times its attention samples forward and backward apart, the
  // forward passes within 12.3% of its model and the backward within 17% (was 15-45% too fast).
  // These were measured with torch 2.11 and CUDA 13: the H100's like for like is the profile of those
  // libraries, alternatives/h100-sxm-cuda13 (docs/calibration.md, "Which software a profile prices").
  ScratchDir dir;
  const auto r = run_fusesim(
      {"validate", "--cases", "measured", "--profile", "alternatives/h100-sxm-cuda13,h200-sxm", "--format", "json"},
      dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  REQUIRE(doc["cases"].size() == 214u);
  const auto profile_of = [](const std::string& device) {
    return std::string(device == "h100" ? "<embedded:profiles/alternatives/h100-sxm-cuda13.json>"
                                        : "<embedded:profiles/h200-sxm.json>");
  };
  double profile_sum = 0.0, roofline_sum = 0.0, train_profile_sum = 0.0, train_roofline_sum = 0.0;
  std::map<std::string, double> burst_sum;
  int mpt3b = 0, train = 0, attention = 0, burst = 0;
  for (const json& c : doc["cases"]) {
    INFO(c["id"]);
    const std::string id = c["id"].get<std::string>();
    if (id.rfind("attention/h100/train-steps-", 0) == 0) {
      ++attention;
      CHECK(c["profile"].get<std::string>() == profile_of("h100"));
      const double err = c["calibrated"].get<double>() / c["measured"].get<double>() - 1.0;
      CHECK(std::abs(err) < (id.find("-forward-") != std::string::npos ? 0.13 : 0.18));
      continue;
    }
    if (id.find("/burst-") != std::string::npos) {
      ++burst;
      const double err = c["calibrated"].get<double>() / c["measured"].get<double>() - 1.0;
      CHECK(std::abs(err) < 0.11);
      burst_sum[id.substr(5, 4)] += std::abs(err);
      continue;
    }
    const std::string device = id.substr(5, 4);  // gemm/h100/... or gemm/h200/...
    CHECK(c["profile"].get<std::string>() == profile_of(device));
    const double measured = c["measured"].get<double>();
    const double profile_err = std::abs(c["calibrated"].get<double>() / measured - 1.0);
    const double roofline_err = std::abs(c["roofline"].get<double>() / measured - 1.0);
    if (id.find("/train-steps-") != std::string::npos) {
      ++train;
      train_profile_sum += profile_err;
      train_roofline_sum += roofline_err;
      continue;
    }
    ++mpt3b;
    CHECK(profile_err < 0.25);
    profile_sum += profile_err;
    roofline_sum += roofline_err;
  }
  REQUIRE(mpt3b == 36);
  REQUIRE(train == 50);
  REQUIRE(attention == 10);
  REQUIRE(burst == 118);
  CHECK(profile_sum / 36.0 < 0.14);
  CHECK(roofline_sum / 36.0 > profile_sum / 36.0);
  CHECK(train_profile_sum / 50.0 < 0.17);
  CHECK(burst_sum["h100"] / 59.0 < 0.04);
  CHECK(burst_sum["h200"] / 59.0 < 0.03);
}

TEST_CASE("validate --cases measured, default profiles: the H100's 2026 GEMM bursts run faster than its default prices",
          "[cli][validate]") {
  // The default h100-sxm prices 16-bit GEMMs from vidur's samples (2024), which took 1.15x the time of
  // the 2026 bursts on the median of the 20 shapes both timed (build_profiles.py, PROFILES): so every
  // one of the 59 burst-timed training shapes (torch 2.11, CUDA 13) reads faster than the default
  // predicts, by 8.0% on average (1.7% to 13.7%); the alternative of those libraries is within 4% on
  // average (the test above). Without the alternative's samples, nothing pulls the default there.
  ScratchDir dir;
  const auto r = run_fusesim({"validate", "--cases", "measured", "--category", "gemm", "--format", "json"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  double sum = 0.0;
  int bursts = 0;
  for (const json& c : doc["cases"]) {
    const std::string id = c["id"].get<std::string>();
    if (id.rfind("gemm/h100/burst-", 0) != 0) continue;
    INFO(id);
    CHECK(c["profile"].get<std::string>() == "<embedded:profiles/h100-sxm.json>");
    const double err = c["calibrated"].get<double>() / c["measured"].get<double>() - 1.0;
    CHECK(err < 0.0);
    sum += err;
    ++bursts;
  }
  REQUIRE(bursts == 59);
  CHECK(sum / bursts < -0.04);
  CHECK(sum / bursts > -0.12);
}

TEST_CASE("fusesim validate --kernel-predictions: every kernel sample, its reading fitted on all and held out",
          "[cli][validate]") {
  ScratchDir dir;
  const std::string csv_path = dir.file("predictions.csv");
  const auto r = run_fusesim({"validate", "--cases", kTiny, "--category", "gemm", "--profile", "h100-sxm", "--format",
                              "json", "--kernel-predictions", csv_path},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  REQUIRE(doc["kernel_models"].size() == 1u);
  const json& km = doc["kernel_models"][0];
  // The CSV: a header, then one line per sample of each kernel model the report covers.
  std::istringstream in(slurp(csv_path));
  std::string line;
  std::getline(in, line);
  CHECK(line == "profile,kernels,op,group,m,n,k,batch,bytes,rows,launches,measured_s,fitted_s,held_out_s,"
                "held_out_error_pct");
  std::map<std::string, int> lines;                               // per kernels kind
  std::map<std::string, std::map<std::string, double>> err_sum;  // kind -> group -> sum of |held out / measured - 1|
  std::map<std::string, std::map<std::string, int>> held;        // kind -> group -> samples held out
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) f.push_back(cell);
    if (!line.empty() && line.back() == ',') f.push_back("");  // a last empty field
    REQUIRE(f.size() == 15u);
    const std::string& kind = f[1];
    ++lines[kind];
    CHECK(std::stod(f[11]) > 0);  // measured
    CHECK(std::stod(f[12]) > 0);  // fitted on all
    if (f[13].empty()) continue;  // never held out (a sample of no model)
    const double measured = std::stod(f[11]), held_out = std::stod(f[13]);
    // The signed error beside it, in percent.
    CHECK(std::stod(f[14]) == Approx(100.0 * (held_out / measured - 1.0)).margin(1e-9));
    err_sum[kind][f[3]] += std::abs(held_out / measured - 1.0);
    ++held[kind][f[3]];
  }
  for (const auto& [kind, part] : km.items()) {
    if (kind == "profile") continue;
    INFO(kind);
    CHECK(lines[kind] == part["samples"].get<int>());
    // Each held-out model's error in the report is the mean of its lines' errors.
    for (const json& e : part["leave_one_model_out"]) {
      const std::string group = e["held_out"].get<std::string>();
      INFO(group);
      CHECK(held[kind][group] == e["samples"].get<int>());
      CHECK(100.0 * err_sum[kind][group] / held[kind][group] == Approx(e["mape_pct"].get<double>()).epsilon(1e-12));
    }
  }
  CHECK(lines["gemm"] > 1000);
  CHECK(lines["small kernels"] > 1000);
}

TEST_CASE("fusesim validate --kernel-predictions is refused where no kernel model is reported", "[cli][validate]") {
  ScratchDir dir;
  for (const auto& extra : {std::vector<std::string>{"--id", "a"}, std::vector<std::string>{"--category", "collective"},
                            std::vector<std::string>{"--roofline"}}) {
    std::vector<std::string> args{"validate", "--cases", kTiny, "--kernel-predictions", dir.file("p.csv")};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_fusesim(args, dir);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--kernel-predictions") != std::string::npos);
    CHECK(r.out.empty());
  }
  CHECK(dir.entries().empty());  // nothing written
}

TEST_CASE("simulate --profile: a profile of another device is refused naming the profile", "[cli][validate]") {
  ScratchDir dir;
  const auto r = run_fusesim(
      {"simulate", "--topology", "dgx-a100", "--workload", "llama-3-8b", "--profile", kProfile, "--scope", "layer"},
      dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("error: " + kProfile + ": $.device:") == 0);
  const auto ok = run_fusesim({"simulate", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--profile",
                               "h100-sxm", "--scope", "layer", "--format", "json"},
                              dir);
  INFO(ok.err);
  REQUIRE(ok.exit_code == 0);
  CHECK(json::parse(ok.out)["profile"].get<std::string>() == "<embedded:profiles/h100-sxm.json>");
}

TEST_CASE("apply_profile: a simulated ring all-gather and a copy-engine P2P take the fitted times", "[cli][validate]") {
  using namespace fusesim;
  topo::Cluster cluster = topo::load_cluster_by_name_or_path("dgx-h100");
  const json doc = links_profile({{"all_gather", {{"ranks", 8}, {"latency_s", 30e-6}, {"busbw_bytes_per_s", 300e9}}},
                                  {"p2p", {{"ranks", 2}, {"latency_s", 3e-6}, {"busbw_bytes_per_s", 350e9}}}},
                                 "2026-11-22");
  const model::Profile p = model::parse_profile(JsonDocument::from_json(doc, "<test>"));
  const auto applied = model::apply_profile(p, cluster);
  CHECK(applied.size() == 2);
  // dgx-h100: NVLink 450e9 x 0.8444 = 379.98e9 B/s per direction, 0.3 us per link, a GPU -> NVSwitch ->
  // GPU route of two links (0.6 us); base latency 8.4 us.
  //   sm_kernel_efficiency = 300e9 / 379.98e9
  //   sm_step_latency_s    = (30 us - 8.4 us) / 7 - 0.6 us = 2.4857 us
  CHECK(cluster.comm.sm_kernel_efficiency.value == Approx(300e9 / (450e9 * 0.8444)).epsilon(1e-12));
  CHECK(cluster.comm.sm_step_latency_s.value == Approx((30e-6 - 8.4e-6) / 7 - 0.6e-6).epsilon(1e-9));
  // The simulator's ring all-gather of n bytes on 8 ranks: base + 7 steps of (route latency + step
  // latency + (n/8) / sm_efficiency / link bandwidth), each link carrying one flow:
  //   8.4 + 7 x (0.6 + 2.4857) us + 7/8 n / 300e9 = 30 us + 7/8 n / 300e9 = the fitted time.
  const Bytes n = Bytes{1} << 30;
  const model::RooflineCostModel costs;
  sim::Simulator simulator(cluster, costs);
  sched::TaskGraph ag(cluster.num_ranks());
  std::vector<int> group{0, 1, 2, 3, 4, 5, 6, 7};
  for (int r = 0; r < 8; ++r) {
    const std::string name = "ag" + std::to_string(r);
    ag.add({name,
            r,
            -1,
            {sched::StreamKind::comm, 0},
            sched::CollectiveTask{sched::CollectiveKind::all_gather, group, n, 0, model::CommEngine::sm_kernel, -1},
            {}});
  }
  const double fitted_ag = 30e-6 + static_cast<double>(n) * 7 / 8 / 300e9;
  CHECK(ps_to_seconds(simulator.run(ag).makespan_ps) == Approx(fitted_ag).epsilon(1e-8));
  // P2P on the copy engine: route 0.6 us + step (3 - 0.6) us + n / (379.98e9 x 350/379.98) = 3 us + n / 350e9.
  sched::TaskGraph p2p(cluster.num_ranks());
  p2p.add(
      {"send", 0, -1, {sched::StreamKind::copy, 0}, sched::SendTask{1, n, 0, model::CommEngine::copy_engine, -1}, {}});
  p2p.add({"recv", 1, -1, {sched::StreamKind::copy, 0}, sched::RecvTask{0, n, 0}, {}});
  CHECK(ps_to_seconds(simulator.run(p2p).makespan_ps) == Approx(3e-6 + static_cast<double>(n) / 350e9).epsilon(1e-8));
}

TEST_CASE("apply_profile: a P2P fitted between two nodes sets how the cluster prices P2P between nodes",
          "[cli][validate]") {
  using namespace fusesim;
  topo::Cluster cluster = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  const json doc = links_profile(
      {{"p2p", {{"ranks", 2}, {"nodes", 2}, {"latency_s", 20e-6}, {"busbw_bytes_per_s", 30e9}}}}, "2026-11-29");
  const model::Profile p = model::parse_profile(JsonDocument::from_json(doc, "<test>"));
  const double sm_efficiency = cluster.comm.sm_kernel_efficiency.value;
  const auto applied = model::apply_profile(p, cluster);
  REQUIRE(applied.size() == 1);
  // Rank 0 -> 8 (`fusesim routes`): 2.7 us over six links, bottleneck the NIC link 50e9 x 0.9922 =
  // 49.61e9 B/s. efficiency 30e9 / 49.61e9; added latency 20 - 2.7 - 2.8 (SM step) = 14.5 us. The ring
  // collectives keep theirs.
  REQUIRE(cluster.comm.p2p_network);
  CHECK(cluster.comm.p2p_network->efficiency.value == Approx(30e9 / 49.61e9).epsilon(1e-12));
  CHECK(cluster.comm.p2p_network->added_latency_s.value == Approx(14.5e-6).epsilon(1e-9));
  CHECK(cluster.comm.sm_kernel_efficiency.value == sm_efficiency);
  // An SM-kernel send from rank 0 to rank 8 then takes the fitted time: 20 us + n / 30e9.
  const Bytes n = Bytes{1} << 30;
  const model::RooflineCostModel costs;
  sched::TaskGraph g(cluster.num_ranks());
  g.add({"send", 0, -1, {sched::StreamKind::comm, 0}, sched::SendTask{8, n, 0, model::CommEngine::sm_kernel, -1}, {}});
  g.add({"recv", 8, -1, {sched::StreamKind::comm, 0}, sched::RecvTask{0, n, 0}, {}});
  CHECK(ps_to_seconds(sim::Simulator(cluster, costs).run(g).makespan_ps) ==
        Approx(20e-6 + static_cast<double>(n) / 30e9).epsilon(1e-8));
  // More than the route can carry is refused, naming the profile's key.
  json fast = doc;
  fast["fitted"]["collectives"]["p2p"]["busbw_bytes_per_s"] = 60e9;
  topo::Cluster again = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  CHECK_THROWS_WITH(model::apply_profile(model::parse_profile(JsonDocument::from_json(fast, "<test>")), again),
                    Catch::Contains("$.fitted.collectives.p2p"));
}

TEST_CASE("every shipped end-to-end case names a workload that fits its cluster, read from any folder",
          "[cli][validate]") {
  // The published cases name their workloads by source-tree path (validation/workloads/...): they
  // resolve to the embedded files from a scratch folder too. Each must pass the workload reader and
  // the fit to its cluster (the memory check included): a case fusesim cannot run must say what it
  // needs ("needs") rather than fail. Checked here on one layer, forward only, to stay fast; a run
  // with pipeline stages has no layer scope, so its whole step runs as validate runs it ("symmetry").
  ScratchDir dir;
  const json cases = json::parse(*fusesim::embedded_file("validation/published.json"))["cases"];
  std::size_t checked = 0, pipelined = 0;
  for (const json& c : cases) {
    if ((c["category"] != "end_to_end" && c["category"] != "layer") || !c.contains("workload")) continue;
    const std::string workload = c["workload"].get<std::string>();
    INFO(c["id"].get<std::string>());
    const json w = json::parse(*fusesim::embedded_file(workload));
    std::vector<std::string> args{"simulate", "--workload", workload, "--topology", c["topology"].get<std::string>(),
                                  "--schedule", "baseline"};
    if (w["parallel"].value("pp", 1) > 1) {
      // One result (the step is the same whichever parallelism's schedule a row varies: all baseline).
      args.insert(args.end(), {"--scope", "step", "--symmetry", c.value("symmetry", std::string("none")),
                               "--parallelism", "tpsp"});
      ++pipelined;
    } else {
      args.insert(args.end(), {"--scope", "layer", "--forward-only"});
    }
    const auto r = run_fusesim(args, dir);
    INFO(r.err);
    // The size guard is this machine's limit, not the case's: the 530B step (280 ranks, 280
    // micro-batches, no DP replica to mirror) needs about 8 GB.
    if (r.exit_code == 2 && r.err.find("would build a task graph") != std::string::npos) {
      WARN("not run on this machine: " << r.err);
    } else {
      CHECK(r.exit_code == 0);
    }
    ++checked;
  }
  CHECK(checked >= 20);
  // SC21's 39.1B-310B, Megatron-Core's 70B-462B, Korthikanti's 175B and 530B.
  CHECK(pipelined >= 13);
}

TEST_CASE("fusesim validate: the step time and MFU of end-to-end cases, measured by fusesim's FLOP count, and "
          "their rank correlation",
          "[cli][validate]") {
  ScratchDir dir;
  const auto r = run_fusesim({"validate", "--cases", source_path("tests/data/validation/e2e-rank.json"), "--format",
                              "json"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  REQUIRE(doc["cases"].size() == 3u);
  std::vector<double> measured, predicted;
  for (const json& c : doc["cases"]) {
    INFO(c["id"].get<std::string>());
    const double value = c["calibrated"].get<double>();
    const double mfu = c["calibrated_mfu"].get<double>();
    // A step's FLOPs do not depend on its time: the measured run's MFU is the predicted one scaled by
    // measured / predicted throughput; a case measured in MFU keeps its own.
    if (c["unit"] == "MFU") {
      CHECK(c["measured_mfu"].get<double>() == 0.2);
      CHECK(value == Approx(mfu));
    } else {
      CHECK(c["measured_mfu"].get<double>() == Approx(mfu * c["measured"].get<double>() / value).epsilon(1e-12));
    }
    // The step: commfuse-tpsp-block is one layer at TP 4 (micro-batch 1), so a GPU's tokens per step
    // are sequence / 4: 512 at 2,048 and 2,048 at 8,192 (throughput x step time, for either model),
    // and the measured step is those tokens over the measured throughput (512 / 30,000 = 17.07 ms).
    const double step = c["calibrated_step_s"].get<double>();
    if (c["id"] == "e2e/block-2k" || c["id"] == "e2e/block-8k") {
      const double tokens = c["id"] == "e2e/block-2k" ? 512.0 : 2048.0;
      CHECK(value * step == Approx(tokens).epsilon(1e-9));
      CHECK(c["roofline"].get<double>() * c["roofline_step_s"].get<double>() == Approx(tokens).epsilon(1e-9));
      CHECK(c["measured_step_s"].get<double>() == Approx(tokens / c["measured"].get<double>()).epsilon(1e-12));
    } else {
      // Measured in MFU: the same FLOPs in the measured step, so it is the predicted step x MFU ratio.
      CHECK(c["measured_step_s"].get<double>() == Approx(step * mfu / 0.2).epsilon(1e-12));
    }
    measured.push_back(c["measured_mfu"].get<double>());
    predicted.push_back(mfu);
  }
  const json& rank = doc["end_to_end_mfu_spearman"];
  CHECK(rank["cases"].get<int>() == 3);
  const auto rho = fusesim::analysis::spearman(measured, predicted);
  REQUIRE(rho.has_value());
  CHECK(rank["profile"].get<double>() == Approx(*rho).epsilon(1e-12));
  // The table prints the same.
  const auto t = run_fusesim({"validate", "--cases", source_path("tests/data/validation/e2e-rank.json")}, dir);
  REQUIRE(t.exit_code == 0);
  CHECK(t.out.find(fmt::format("over 3 cases: roofline {:.2f}, profile {:.2f}",
                               rank["roofline"].get<double>(), *rho)) != std::string::npos);
  // Each case's row: measured and predicted step, the step's error, and the MFU's in points.
  const std::string steps = t.out.substr(t.out.find("step time and MFU of the end-to-end cases"));
  for (const json& c : doc["cases"]) {
    const std::string id = c["id"].get<std::string>();
    INFO(id);
    const std::size_t at = steps.find("\n" + id + " ");
    REQUIRE(at != std::string::npos);
    std::istringstream row(steps.substr(at + 1, steps.find('\n', at + 1) - at - 1));
    std::vector<std::string> cells;
    for (std::string cell; row >> cell;) cells.push_back(cell);
    REQUIRE(cells.size() == 8u);
    const double measured = c["measured_step_s"].get<double>(), predicted = c["calibrated_step_s"].get<double>();
    CHECK(cells[1] == fmt::format("{:.4g}", measured));
    CHECK(cells[2] == fmt::format("{:.4g}", predicted));
    CHECK(cells[3] == fmt::format("{:+.1f}", (predicted - measured) / measured * 100.0));
    const double points = (c["calibrated_mfu"].get<double>() - c["measured_mfu"].get<double>()) * 100.0;
    CHECK(cells[7] == fmt::format("{:+.1f}", points));
  }
}

TEST_CASE("fusesim validate: a layer case is simulate's one layer, forward and backward or forward alone",
          "[cli][validate]") {
  // The reference is simulate itself: one layer of the workload, baseline, the shipped profile (and the
  // roofline), its tokens/s/GPU; --forward-only for the case whose pass is "forward".
  ScratchDir dir;
  const auto r = run_fusesim({"validate", "--cases", source_path("tests/data/validation/layer.json"), "--format",
                              "json"},
                             dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  REQUIRE(doc["cases"].size() == 2u);
  const auto simulated = [&](bool forward_only, bool roofline) {
    std::vector<std::string> args{"simulate", "--workload", "commfuse-tpsp-block", "--topology", "dgx-h100",
                                  "--schedule", "baseline", "--scope", "layer", "--format", "json"};
    if (forward_only) args.push_back("--forward-only");
    if (roofline) args.push_back("--roofline");
    const auto s = run_fusesim(args, dir);
    REQUIRE(s.exit_code == 0);
    return json::parse(s.out)["results"][0]["tokens_per_s_per_gpu"].get<double>();
  };
  const json& both = doc["cases"][0];
  const json& fwd = doc["cases"][1];
  CHECK(both["calibrated"].get<double>() == Approx(simulated(false, false)).epsilon(1e-12));
  CHECK(both["roofline"].get<double>() == Approx(simulated(false, true)).epsilon(1e-12));
  CHECK(fwd["calibrated"].get<double>() == Approx(simulated(true, false)).epsilon(1e-12));
  CHECK(fwd["roofline"].get<double>() == Approx(simulated(true, true)).epsilon(1e-12));
  // The forward alone is faster; its speed-up over the whole pass is measured 250000 / 100000 = 2.5x.
  CHECK(fwd["calibrated"].get<double>() > both["calibrated"].get<double>());
  REQUIRE(doc["speedups"].size() == 1u);
  CHECK(doc["speedups"][0]["measured"].get<double>() == Approx(2.5));
  CHECK(doc["speedups"][0]["profile"].get<double>() ==
        Approx(fwd["calibrated"].get<double>() / both["calibrated"].get<double>()).epsilon(1e-12));
  // Its own MAPE row, outside the end-to-end cases' MFU ranking.
  CHECK(doc["mape_pct"].contains("layer"));
  CHECK((!doc.contains("end_to_end_mfu_spearman") || doc["end_to_end_mfu_spearman"].is_null()));

  // A layer case names a workload, has no scope (it is one layer) and no MFU metric, and its speed-up is
  // over another layer case: each refused with exit 2, the file and the key.
  const json base = json::parse(slurp(source_path("tests/data/validation/layer.json")));
  const auto refused = [&](const std::function<void(json&)>& edit, const std::string& where) {
    json bad = base;
    edit(bad["cases"][0]);
    const std::string path = dir.file("bad-layer.json");
    {
      std::ofstream(path) << bad.dump();
    }
    const auto e = run_fusesim({"validate", "--cases", path}, dir);
    INFO(e.err);
    CHECK(e.exit_code == 2);
    CHECK(e.err.find(path) != std::string::npos);
    CHECK(e.err.find(where) != std::string::npos);
  };
  refused([](json& c) { c["scope"] = "step"; }, "scope");
  refused([](json& c) { c["metric"] = "mfu"; }, "$.cases[0].metric");
  refused([](json& c) { c.erase("workload"); }, "workload");
  refused([](json& c) { c["pass"] = "backward"; }, "$.cases[0].pass");
  refused([](json& c) { c["speedup_over"] = "layer/block"; }, "$.cases[0].speedup_over");
}

TEST_CASE("fusesim validate --id runs the cases whose id contains a pattern, the same as among all", "[cli][validate]") {
  ScratchDir dir;
  const std::string cases = source_path("tests/data/validation/e2e-rank.json");
  const auto all = run_fusesim({"validate", "--cases", cases, "--format", "json"}, dir);
  REQUIRE(all.exit_code == 0);
  // "block-" is in all three ids of the file (e2e/block-2k, e2e/block-8k, e2e/block-mfu), "block-2k" in one.
  const auto every = run_fusesim({"validate", "--cases", cases, "--id", "block-", "--format", "json"}, dir);
  REQUIRE(every.exit_code == 0);
  CHECK(json::parse(every.out)["cases"].size() == 3u);
  const auto some = run_fusesim({"validate", "--cases", cases, "--id", "block-2k", "--format", "json"}, dir);
  INFO(some.err);
  REQUIRE(some.exit_code == 0);
  const json a = json::parse(all.out), s = json::parse(some.out);
  REQUIRE(s["cases"].size() == 1u);
  for (const json& c : s["cases"]) {
    CHECK(c["id"] == "e2e/block-2k");
    for (const json& d : a["cases"])
      if (d["id"] == c["id"]) CHECK(d["calibrated"].get<double>() == c["calibrated"].get<double>());
  }
  // Two patterns select the union; one that matches nothing is bad input naming the option.
  const auto two = run_fusesim({"validate", "--cases", cases, "--id", "block-2k,block-8k", "--format", "json"}, dir);
  REQUIRE(two.exit_code == 0);
  CHECK(json::parse(two.out)["cases"].size() == 2u);
  const auto none = run_fusesim({"validate", "--cases", cases, "--id", "no-such-case"}, dir);
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("<command line>: --id") != std::string::npos);
}
