// `fusesim trace compare`: a measured Kineto step beside a simulated rank, by hand on two small
// traces, on a real H100 step against its simulation, and the refusals (exit 2, file and path named,
// nothing written).
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "process.hpp"

using namespace fusesim::testing;
using nlohmann::json;

namespace {

json x(const std::string& cat, const std::string& name, int pid, int tid, double ts, double dur, json args = nullptr) {
  json e = {{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", pid}, {"tid", tid}, {"ts", ts}, {"dur", dur}};
  if (!args.is_null()) e["args"] = std::move(args);
  return e;
}

void write(const ScratchDir& dir, const std::string& name, const json& doc) {
  std::ofstream(dir.file(name)) << doc.dump();
}

double measure(const json& doc, const std::string& name, const char* side) {
  for (const json& m : doc["measures"])
    if (m["measure"] == name) return m[side].get<double>();
  FAIL("no measure " << name);
  return 0;
}

}  // namespace

TEST_CASE("trace compare: the measures of both sides and their errors, by hand", "[cli][trace-compare]") {
  ScratchDir dir;
  // Measured (Kineto, one step): GEMM [100, 110) us, NCCL all-gather [105, 115) on another stream,
  // an element-wise kernel [120, 122). Span 22, compute 10 + 2 = 12, communication 10, overlapped 5,
  // exposed 5, idle 22 - 17 = 5.
  write(dir, "m.json",
        {{"traceEvents",
          {x("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32", 0, 7, 100, 10),
           x("kernel", "ncclDevKernel_AllGather_RING_LL", 0, 20, 105, 10,
             {{"Collective name", "_allgather_base"}, {"In msg nelems", 1048576}, {"Out msg nelems", 8388608},
              {"dtype", "BFloat16"}, {"Group size", 8}}),
           x("kernel", "void at::native::vectorized_elementwise_kernel<4>", 0, 7, 120, 2)}}});
  // Simulated rank 0: GEMM [0, 8), collective [8, 12) on the comm thread. Span 12, compute 8,
  // communication 4, overlapped 0, exposed 4, idle 0. Errors: span 12/22 - 1, gemm 8/10 - 1.
  write(dir, "s.json",
        {{"traceEvents",
          {x("compute", "r0/L0/fwd/qkv", 0, 1, 0, 8, {{"kernel", "gemm"}, {"phase", "forward"}}),
           x("collective", "r0/L0/fwd/ag", 0, 100, 8, 4, {{"collective", "all_gather"}, {"bytes", 16777216}}),
           x("compute", "r1/L0/fwd/qkv", 1, 1, 0, 30, {{"kernel", "gemm"}})}}});
  const auto r = run_fusesim({"trace", "compare", "m.json", "s.json", "--format", "json", "--side-by-side", "sbs.json"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  CHECK(measure(doc, "step span", "measured_s") == Approx(22e-6));
  CHECK(measure(doc, "step span", "simulated_s") == Approx(12e-6));
  CHECK(measure(doc, "compute", "measured_s") == Approx(12e-6));
  CHECK(measure(doc, "compute", "simulated_s") == Approx(8e-6));
  CHECK(measure(doc, "overlapped communication", "measured_s") == Approx(5e-6));
  CHECK(measure(doc, "exposed communication", "measured_s") == Approx(5e-6));
  CHECK(measure(doc, "exposed communication", "simulated_s") == Approx(4e-6));
  CHECK(measure(doc, "idle", "measured_s") == Approx(5e-6));
  CHECK(measure(doc, "class gemm", "simulated_s") == Approx(8e-6));
  for (const json& m : doc["measures"])
    if (m["measure"] == "class gemm") CHECK(m["error"].get<double>() == Approx(8.0 / 10.0 - 1.0));
  CHECK(doc["simulated"]["slices"] == 2);  // rank 1's slice is not rank 0's
  CHECK(doc["gemms_by_shape"].empty());    // no CPU op with shapes, no slice with m, n, k
  // The all-gather on both sides under one name: PyTorch's "_allgather_base" and fusesim's
  // "all_gather"; its full buffer 8,388,608 bf16 elements out = 16,777,216 B, fusesim's bytes the same.
  REQUIRE(doc["collectives"].size() == 1u);
  const json& ag = doc["collectives"][0];
  CHECK(ag["collective"] == "all_gather");
  CHECK(ag["measured_calls"] == 1);
  CHECK(ag["measured_s"].get<double>() == Approx(10e-6));
  CHECK(ag["measured_bytes"] == 16777216);
  CHECK(ag["simulated_calls"] == 1);
  CHECK(ag["simulated_s"].get<double>() == Approx(4e-6));
  CHECK(ag["simulated_bytes"] == 16777216);
  // The side-by-side trace: two processes from 0, each slice once, the class as category.
  std::ifstream in(dir.file("sbs.json"));
  const json sbs = json::parse(in);
  int names = 0, measured = 0, simulated = 0;
  for (const json& e : sbs["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") ++names;
    if (e["ph"] != "X") continue;
    (e["pid"] == 0 ? measured : simulated) += 1;
    if (e["name"] == "sm90_xmma_gemm_bf16bf16_bf16f32") {
      CHECK(e["ts"].get<double>() == 0.0);
      CHECK(e["cat"] == "gemm");
    }
    if (e["name"] == "void at::native::vectorized_elementwise_kernel<4>") CHECK(e["ts"].get<double>() == 20.0);
    if (e["name"] == "r0/L0/fwd/ag") {
      CHECK(e["ts"].get<double>() == 8.0);
      CHECK(e["cat"] == "collective");
      CHECK(e["tid"] == 100);
    }
  }
  CHECK(names == 2);
  CHECK(measured == 3);
  CHECK(simulated == 2);
  // The table says the same.
  const auto t = run_fusesim({"trace", "compare", "m.json", "s.json"}, dir);
  REQUIRE(t.exit_code == 0);
  CHECK(t.out.find("class gemm                      0.010         0.008    -20.0") != std::string::npos);
}

TEST_CASE("trace compare: a real H100 step against fusesim's simulation of it", "[cli][trace-compare]") {
  ScratchDir dir;
  // MPT-1B on one H100 (tests/data/kineto/README.md) as tools/calibration/train_step_compare.py
  // simulates it: the validation workload cut to TP = DP = 1, micro-batch 8, no accumulation, priced by
  // the profile of the libraries the step ran (torch 2.11, CUDA 13: docs/calibration.md, "Which
  // software a profile prices").
  std::ifstream win(source_path("validation/workloads/mpt-1b-seq2048-8xh100-bf16.json"));
  json w = json::parse(win);
  w["name"] = "train-step-mpt-1b";
  w["training"]["micro_batch"] = 8;
  w["training"]["grad_accumulation"] = 1;
  w["parallel"] = {{"tp", 1}, {"up", 1}, {"dp", 1}};
  w["schedule"] = {{"kind", "baseline"}};
  write(dir, "w.json", w);
  const auto sim = run_fusesim({"simulate", "--workload", "w.json", "--topology", "dgx-h100", "--scope", "step",
                                "--schedule", "baseline", "--profile", "alternatives/h100-sxm-cuda13", "--trace", "sim.json",
                                "--format", "json"},
                               dir);
  INFO(sim.err);
  REQUIRE(sim.exit_code == 0);
  const std::string measured = source_path("tests/data/kineto/h100-train-step-mpt-1b-plain.json.gz");
  const auto imp = run_fusesim({"trace", "import", measured, "--format", "json"}, dir);
  REQUIRE(imp.exit_code == 0);
  const json step = json::parse(imp.out)[0]["steps"][0];
  const auto r = run_fusesim({"trace", "compare", measured, "sim.json", "--format", "json"}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  // The measured side is what `trace import` reads; the simulated step is simulate's step time (one
  // GPU, no communication: the rank's slices span the step).
  CHECK(measure(doc, "step span", "measured_s") == step["span_s"].get<double>());
  CHECK(measure(doc, "class gemm", "measured_s") == step["by_class_s"]["gemm"].get<double>());
  CHECK(doc["measured"]["activities"] == step["kernels"]);
  const double step_s = json::parse(sim.out)["results"][0]["step_time_s"].get<double>();
  CHECK(measure(doc, "step span", "simulated_s") == Approx(step_s).margin(1e-9));  // the trace holds whole ns
  CHECK(measure(doc, "communication", "simulated_s") == 0.0);
  // The GEMMs of this step are within 5% (docs/validation.md, "Steps measured on one GPU").
  CHECK(measure(doc, "class gemm", "simulated_s") == Approx(measure(doc, "class gemm", "measured_s")).epsilon(0.05));
  // By shape: the trace's 291 aten::mm ops in 11 shapes up to transposition (forward, dgrad and wgrad
  // of QKV, output, FC1, FC2; the tied LM head's three), each as often in the simulated step, and each
  // within 10%.
  std::int64_t calls = 0;
  REQUIRE(doc["gemms_by_shape"].size() == 11u);
  for (const json& g : doc["gemms_by_shape"]) {
    INFO(g["shape"]);
    CHECK(g["measured_calls"] == g["simulated_calls"]);
    calls += g["measured_calls"].get<std::int64_t>();
    CHECK(g["simulated_s"].get<double>() == Approx(g["measured_s"].get<double>()).epsilon(0.10));
  }
  CHECK(calls == 291);
}

TEST_CASE("trace compare refuses what it cannot compare, naming the file or the option, writing nothing",
          "[cli][trace-compare]") {
  ScratchDir dir;
  write(dir, "m.json", {{"traceEvents", {x("kernel", "gemm", 0, 7, 100, 10)}}});
  write(dir, "s.json", {{"traceEvents", {x("compute", "qkv", 0, 1, 0, 8, {{"kernel", "gemm"}})}}});
  const auto rank = run_fusesim({"trace", "compare", "m.json", "s.json", "--rank", "3", "--side-by-side", "o.json"}, dir);
  CHECK(rank.exit_code == 2);
  CHECK(rank.err.find("s.json: $.traceEvents: no compute or communication slice of rank 3") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("o.json")));
  const auto step = run_fusesim({"trace", "compare", "m.json", "s.json", "--step", "4"}, dir);
  CHECK(step.exit_code == 2);
  CHECK(step.err.find("--step") != std::string::npos);
  write(dir, "empty.json", {{"traceEvents", json::array()}});
  const auto none = run_fusesim({"trace", "compare", "empty.json", "s.json"}, dir);
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("empty.json: $.traceEvents: no GPU activity") != std::string::npos);
  const auto folder = run_fusesim({"trace", "compare", "m.json", "s.json", "--side-by-side", "no/such/dir/o.json"}, dir);
  CHECK(folder.exit_code == 2);
  CHECK(folder.err.find("--side-by-side") != std::string::npos);
  const auto bad = run_fusesim({"trace", "compare", "m.json", "m.json"}, dir);  // a Kineto trace has no pid-0 slices
  CHECK(bad.exit_code == 2);
}
