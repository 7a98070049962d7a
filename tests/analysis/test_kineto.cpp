// Measured traces in (analysis/kineto.hpp): a hand-built trace whose measures are derived by hand, the
// real H100 traces of tests/data/kineto (invariants, counts), and malformed traces named by path.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "fusesim/analysis/kineto.hpp"
#include "fusesim/util/error.hpp"

using namespace fusesim;
using namespace fusesim::analysis;
using nlohmann::json;

namespace {

constexpr TimePs kUs = 1'000'000;  // picoseconds per microsecond

json x(const std::string& cat, const std::string& name, double ts, double dur, int correlation = -1) {
  json e = {{"ph", "X"}, {"cat", cat}, {"name", name}, {"ts", ts}, {"dur", dur}, {"pid", 0}, {"tid", 7}};
  if (correlation >= 0) e["args"] = {{"correlation", correlation}};
  return e;
}

// Two profiler steps on the CPU, [1000, 1100) and [1100, 1200) us; the GPU runs behind the CPU:
//   step 1 launches (CPU ts 1010..1040) a GEMM [1100, 1150), an NCCL all-reduce [1120, 1200) on another
//   stream, a memset [1200, 1205) and an element-wise kernel [1210, 1220);
//   step 2 launches (CPU ts 1110, 1120) an all-reduce [1300, 1340) and a GEMM [1330, 1360);
//   a kernel without a launch record at [1500, 1510) starts in no step and is not counted.
json two_steps() {
  json ev = json::array();
  ev.push_back(x("user_annotation", "ProfilerStep#1", 1000, 100));
  ev.push_back(x("user_annotation", "ProfilerStep#2", 1100, 100));
  ev.push_back(x("gpu_user_annotation", "ProfilerStep#1", 1100, 120));  // the GPU-side copy: ignored
  for (int c = 1; c <= 4; ++c) ev.push_back(x("cuda_runtime", "cudaLaunchKernel", 1000 + 10 * c, 2, c));
  for (int c = 5; c <= 6; ++c) ev.push_back(x("cuda_runtime", "cudaLaunchKernel", 1060 + 10 * c, 2, c));
  ev.push_back(x("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32", 1100, 50, 1));
  ev.push_back(x("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 1120, 80, 2));
  ev.push_back(x("gpu_memset", "Memset (Device)", 1200, 5, 3));
  ev.push_back(x("kernel", "void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add>", 1210, 10, 4));
  ev.push_back(x("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 1300, 40, 5));
  ev.push_back(x("kernel", "nvjet_tst_192x192_64x3_2x1_v_bz_coopB_TNT", 1330, 30, 6));
  ev.push_back(x("kernel", "void at::native::vectorized_elementwise_kernel<4, FillFunctor>", 1500, 10));
  ev.push_back({{"ph", "s"}, {"cat", "ac2g"}, {"id", 1}, {"ts", 1010}});  // flows are not activities
  return json{{"traceEvents", ev}, {"distributedInfo", {{"rank", 3}}}};
}

}  // namespace

TEST_CASE("a hand-built trace: compute, communication, overlap, exposure and idle by hand", "[analysis][kineto]") {
  const MeasuredTrace t = import_kineto(two_steps(), "two-steps.json", 0);
  CHECK(t.rank == 3);  // distributedInfo wins over the position
  REQUIRE(t.steps.size() == 2);
  const MeasuredStep& s1 = t.steps[0];
  CHECK(s1.step == 1);
  CHECK(s1.kernels == 4);
  // C = [1100, 1150) u [1210, 1220) = 60 us; M = [1120, 1200) = 80; C n M = [1120, 1150) = 30;
  // exposed 80 - 30 = 50; span [1100, 1220) = 120; busy = [1100, 1205) u [1210, 1220) = 115: idle 5.
  CHECK(s1.compute_ps == 60 * kUs);
  CHECK(s1.comm_ps == 80 * kUs);
  CHECK(s1.overlapped_comm_ps == 30 * kUs);
  CHECK(s1.exposed_comm_ps == 50 * kUs);
  CHECK(s1.memory_ps == 5 * kUs);
  CHECK(s1.span_ps == 120 * kUs);
  CHECK(s1.idle_ps == 5 * kUs);
  CHECK(s1.by_class_ps.at(MeasuredClass::gemm) == 50 * kUs);
  CHECK(s1.by_class_ps.at(MeasuredClass::collective) == 80 * kUs);
  CHECK(s1.by_class_ps.at(MeasuredClass::elementwise) == 10 * kUs);
  CHECK(s1.by_class_ps.at(MeasuredClass::memset) == 5 * kUs);
  // Step 2 (the kernel at 1500 belongs to neither): C = [1330, 1360) = 30, M = [1300, 1340) = 40,
  // overlapped [1330, 1340) = 10, exposed 30, span [1300, 1360) = 60, no idle.
  const MeasuredStep& s2 = t.steps[1];
  CHECK(s2.step == 2);
  CHECK(s2.kernels == 2);
  CHECK(s2.compute_ps == 30 * kUs);
  CHECK(s2.comm_ps == 40 * kUs);
  CHECK(s2.overlapped_comm_ps == 10 * kUs);
  CHECK(s2.exposed_comm_ps == 30 * kUs);
  CHECK(s2.span_ps == 60 * kUs);
  CHECK(s2.idle_ps == 0);
}

TEST_CASE("a trace without profiler steps is one step over every GPU activity", "[analysis][kineto]") {
  json doc = two_steps();
  json kept = json::array();
  for (const json& e : doc["traceEvents"])
    if (e.value("name", "").rfind("ProfilerStep#", 0) != 0) kept.push_back(e);
  const MeasuredTrace t = import_kineto(json{{"traceEvents", kept}}, "no-steps.json", 5);
  CHECK(t.rank == 5);
  REQUIRE(t.steps.size() == 1);
  CHECK(t.steps[0].step == -1);
  CHECK(t.steps[0].kernels == 7);
  // Span [1100, 1510) = 410; busy 115 + [1300, 1360) 60 + [1500, 1510) 10 = 185: idle 225.
  CHECK(t.steps[0].span_ps == 410 * kUs);
  CHECK(t.steps[0].idle_ps == 225 * kUs);
  CHECK(t.steps[0].overlapped_comm_ps == 40 * kUs);
}

TEST_CASE("kernel names classify as the calibration tools class them", "[analysis][kineto]") {
  CHECK(classify_kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t") == MeasuredClass::collective);
  CHECK(classify_kernel("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == MeasuredClass::gemm);
  CHECK(classify_kernel("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n") == MeasuredClass::gemm);
  CHECK(classify_kernel("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>") == MeasuredClass::attention);
  CHECK(classify_kernel("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16>") ==
        MeasuredClass::norm);
  CHECK(classify_kernel("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>") == MeasuredClass::optimizer);
  CHECK(classify_kernel("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>") ==
        MeasuredClass::activation);
  CHECK(classify_kernel("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4>") == MeasuredClass::loss);
  CHECK(classify_kernel("some_custom_kernel") == MeasuredClass::other);
}

TEST_CASE("the real H100 training-step traces: every activity counted once, the measures add up", "[analysis][kineto]") {
  // tests/data/kineto/README.md: MPT-1B, 1,086 kernels and 277 memsets (1,363 GPU activities), one
  // profiled step without ProfilerStep ranges; one GPU, no NCCL.
  const MeasuredTrace t = import_kineto(FUSESIM_SOURCE_DIR "/tests/data/kineto/h100-train-step-mpt-1b-plain.json.gz", 0);
  CHECK(t.device == "NVIDIA H100 80GB HBM3");
  REQUIRE(t.steps.size() == 1);
  const MeasuredStep& s = t.steps[0];
  CHECK(s.kernels == 1363);
  CHECK(s.comm_ps == 0);
  CHECK(s.exposed_comm_ps == 0);
  // One stream: no two activities overlap, so the classes' busy times add up to compute + memory,
  // and span = compute + memory + idle.
  TimePs classes = 0;
  for (const auto& [cls, v] : s.by_class_ps) classes += v;
  CHECK(classes == s.compute_ps + s.memory_ps);
  CHECK(s.span_ps == s.compute_ps + s.memory_ps + s.idle_ps);
  CHECK(s.by_class_ps.at(MeasuredClass::memset) == s.memory_ps);
  // GEMMs are the largest class of a training step at this size, then attention.
  CHECK(s.by_class_ps.at(MeasuredClass::gemm) > s.by_class_ps.at(MeasuredClass::attention));
  CHECK(s.by_class_ps.at(MeasuredClass::attention) > s.by_class_ps.at(MeasuredClass::optimizer));
  CHECK(s.idle_ps > 0);
  CHECK(s.idle_ps < s.span_ps / 50);  // an eager step on one GPU keeps it busy (under 2% idle)
}

TEST_CASE("malformed traces are refused with the file and the JSON path", "[analysis][kineto]") {
  auto path_of = [](const json& doc) {
    try {
      import_kineto(doc, "t.json", 0);
    } catch (const InputError& e) {
      return e.file() + " " + e.json_path();
    }
    return std::string("no error");
  };
  CHECK(path_of(json(3)) == "t.json $");
  CHECK(path_of(json::object()) == "t.json $");
  CHECK(path_of(json{{"traceEvents", 1}}) == "t.json $.traceEvents");
  CHECK(path_of(json{{"traceEvents", {1}}}) == "t.json $.traceEvents[0]");
  CHECK(path_of(json{{"traceEvents", {{{"ts", 1}}}}}) == "t.json $.traceEvents[0].ph");
  CHECK(path_of(json{{"traceEvents", {x("kernel", "k", 1, 1), {{"ph", "X"}, {"cat", "kernel"}, {"ts", 1}}}}}) ==
        "t.json $.traceEvents[1]");
  json neg = x("kernel", "k", 1, -2);
  CHECK(path_of(json{{"traceEvents", {neg}}}) == "t.json $.traceEvents[0].dur");
  json bad_ts = x("kernel", "k", 1, 2);
  bad_ts["ts"] = "1";
  CHECK(path_of(json{{"traceEvents", {bad_ts}}}) == "t.json $.traceEvents[0].ts");
  CHECK(path_of(json{{"traceEvents", {x("cpu_op", "ProfilerStep#x", 1, 2)}}}) == "t.json $.traceEvents[0].name");
  json corr = x("kernel", "k", 1, 2);
  corr["args"] = {{"correlation", "7"}};
  CHECK(path_of(json{{"traceEvents", {corr}}}) == "t.json $.traceEvents[0].args.correlation");
  CHECK(path_of(json{{"traceEvents", json::array()}, {"distributedInfo", {{"rank", -1}}}}) ==
        "t.json $.distributedInfo.rank");
}

TEST_CASE("fusesim's own Chrome trace read as a simulated rank: one step, classes from the args",
          "[analysis][kineto]") {
  // Rank 1 (pid 1) of a simulated trace: a GEMM [0, 8) us, a layernorm [8, 9), a collective [9, 13) on
  // the comm thread and a P2P send [20, 21); rank 0's slice, flow arrows, counters and metadata are
  // not rank 1's activities. By hand: span 21, compute 8 + 1 = 9, communication 4 + 1 = 5 (the send
  // counts as communication), overlapped 0, exposed 5, idle 21 - 9 - 5 = 7; classes gemm 8, norm 1,
  // collective 5.
  const auto slice = [](const std::string& cat, int pid, double ts, double dur, json args) {
    return json{{"ph", "X"}, {"cat", cat}, {"name", cat}, {"pid", pid}, {"tid", cat == "compute" ? 1 : 100},
                {"ts", ts}, {"dur", dur}, {"args", std::move(args)}};
  };
  json ev = json::array();
  ev.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "rank 1"}}}});
  ev.push_back(slice("compute", 1, 0, 8, {{"kernel", "gemm"}, {"phase", "forward"}}));
  ev.push_back(slice("compute", 1, 8, 1, {{"kernel", "elementwise"}, {"elementwise_op", "layernorm"}, {"phase", "forward"}}));
  ev.push_back(slice("collective", 1, 9, 4, {{"collective", "all_gather"}}));
  ev.push_back(slice("send", 1, 20, 1, {{"bytes", 8}}));
  ev.push_back(slice("compute", 0, 0, 50, {{"kernel", "gemm"}}));
  ev.push_back({{"ph", "s"}, {"cat", "transfer"}, {"id", 1}, {"pid", 1}, {"tid", 100}, {"ts", 9}});
  ev.push_back({{"ph", "C"}, {"name", "nvlink"}, {"pid", 8}, {"tid", 0}, {"ts", 9}, {"args", {{"% of line rate", 50}}}});
  TraceReadOptions options;
  options.simulated_rank = 1;
  options.keep_activities = true;
  const MeasuredTrace t = import_kineto_text(json{{"traceEvents", ev}}.dump(), "sim.json", 0, options);
  CHECK(t.rank == 1);
  REQUIRE(t.steps.size() == 1);
  const MeasuredStep& s = t.steps[0];
  CHECK(s.step == -1);
  CHECK(s.kernels == 4);
  CHECK(s.span_ps == 21 * kUs);
  CHECK(s.compute_ps == 9 * kUs);
  CHECK(s.comm_ps == 5 * kUs);
  CHECK(s.overlapped_comm_ps == 0);
  CHECK(s.exposed_comm_ps == 5 * kUs);
  CHECK(s.idle_ps == 7 * kUs);
  CHECK(s.by_class_ps.at(MeasuredClass::gemm) == 8 * kUs);
  CHECK(s.by_class_ps.at(MeasuredClass::norm) == 1 * kUs);
  CHECK(s.by_class_ps.at(MeasuredClass::collective) == 5 * kUs);
  REQUIRE(s.activities.size() == 4);
  CHECK(s.activities[0].name == "compute");
  CHECK(s.activities[0].stream == 1);
  // Rank 2 has nothing: no step.
  options.simulated_rank = 2;
  CHECK(import_kineto_text(json{{"traceEvents", ev}}.dump(), "sim.json", 0, options).steps.empty());
}

TEST_CASE("simulated slices class as the measured kernels do", "[analysis][kineto]") {
  CHECK(classify_simulated("gemm", "", "backward") == MeasuredClass::gemm);
  CHECK(classify_simulated("attention", "", "forward") == MeasuredClass::attention);
  CHECK(classify_simulated("elementwise", "copy", "optimizer") == MeasuredClass::optimizer);
  CHECK(classify_simulated("elementwise", "layernorm_bwd", "backward") == MeasuredClass::norm);
  CHECK(classify_simulated("elementwise", "swiglu", "forward") == MeasuredClass::activation);
  CHECK(classify_simulated("elementwise", "gelu_bwd", "backward") == MeasuredClass::activation);
  CHECK(classify_simulated("elementwise", "softmax", "forward") == MeasuredClass::loss);  // as a measured softmax
  CHECK(classify_simulated("elementwise", "cross_entropy", "forward") == MeasuredClass::loss);
  CHECK(classify_simulated("elementwise", "embedding_bwd", "backward") == MeasuredClass::embedding);
  CHECK(classify_simulated("elementwise", "add", "forward") == MeasuredClass::elementwise);
  CHECK(classify_simulated("elementwise", "rope", "forward") == MeasuredClass::elementwise);
}

TEST_CASE("NCCL kernels by collective and process group, sizes where the trace records them", "[analysis][kineto]") {
  // One step: two all-gathers of PyTorch >= 2.4 with their args (group "0", 8 ranks, 1,048,576 bf16
  // elements in and 8,388,608 out: 2 MiB in, 16 MiB out each), [0, 10) and [20, 30) us; a
  // reduce-scatter named only by its kernel [40, 45); a kernel NCCL names generically [50, 51).
  // By hand: all_gather "0 (8 ranks)": 2 calls, 20 us, 4,194,304 B in, 33,554,432 B out;
  // reduce_scatter, no group: 1 call, 5 us, no sizes; nccl: 1 call, 1 us.
  json ag = x("kernel", "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 0, 10);
  ag["args"] = {{"Collective name", "_allgather_base"}, {"In msg nelems", 1048576}, {"Out msg nelems", 8388608},
                {"Group size", 8}, {"dtype", "BFloat16"}, {"Process Group Name", "0"}};
  json ag2 = ag;
  ag2["ts"] = 20;
  json ev = json::array({ag, ag2, x("kernel", "ncclKernel_ReduceScatter_RING_LL_Sum_bf16", 40, 5),
                         x("kernel", "ncclDevKernel_Generic_4", 50, 1)});
  const MeasuredTrace t = import_kineto(json{{"traceEvents", ev}}, "t.json", 0);
  REQUIRE(t.steps.size() == 1);
  const auto& c = t.steps[0].collectives;
  REQUIRE(c.size() == 3);
  CHECK(c[0].op == "_allgather_base");  // the arg, as PyTorch names the call
  CHECK(c[0].group == "0 (8 ranks)");
  CHECK(c[0].calls == 2);
  CHECK(c[0].time_ps == 20 * kUs);
  CHECK(c[0].calls_with_size == 2);
  CHECK(c[0].in_bytes == 4194304);
  CHECK(c[0].out_bytes == 33554432);
  CHECK(c[1].op == "nccl");
  CHECK(c[1].time_ps == 1 * kUs);
  CHECK(c[2].op == "reduce_scatter");
  CHECK(c[2].group.empty());
  CHECK(c[2].calls_with_size == 0);
  CHECK(t.steps[0].comm_ps == 26 * kUs);
  CHECK(nccl_collective("ncclKernel_AllReduce_RING_LL_Sum_float") == "all_reduce");
  CHECK(nccl_collective("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t") == "send_recv");
  CHECK(nccl_collective("ncclDevKernel_Reduce_RING_LL_Sum_f32") == "reduce");
  CHECK(nccl_collective("ncclDevKernel_Broadcast_RING_LL") == "broadcast");
  CHECK(normalized_collective("_allgather_base") == "all_gather");
  CHECK(normalized_collective("all_gather") == "all_gather");
  CHECK(normalized_collective("reduce_scatter_tensor_coalesced") == "reduce_scatter");
  CHECK(normalized_collective("_reduce_scatter_base") == "reduce_scatter");
  CHECK(normalized_collective("allreduce") == "all_reduce");
  CHECK(normalized_collective("all_to_allv") == "all_to_all");
  CHECK(normalized_collective("send") == "send_recv");
  CHECK(normalized_collective("recv") == "send_recv");
}

TEST_CASE("CPU op args that are not shapes are no GEMM, whatever they nest", "[analysis][kineto]") {
  // "Input Dims" holding an object, a list inside a list and a scalar; "Input type" and "Concrete
  // Inputs" holding arrays and objects: the op is no shaped GEMM and its kernel counts as unshaped.
  const std::string text = R"({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 1, "dur": 5,
     "args": {"Input Dims": [{"a": 1}, [2, [3, 4]], 7], "Input type": [["x"], "c10::BFloat16", {"b": "c"}],
              "Concrete Inputs": [1, {"d": [1]}]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 2, "dur": 1,
     "args": {"correlation": 1}},
    {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "pid": 0, "tid": 7, "ts": 3, "dur": 2, "args": {"correlation": 1}}]})";
  TraceReadOptions options;
  options.gemm_shapes = true;
  const MeasuredTrace t = import_kineto_text(text, "t.json", 0, options);
  REQUIRE(t.steps.size() == 1);
  CHECK(t.steps[0].gemms.empty());
  CHECK(t.steps[0].gemm_kernels_without_shape == 1);
}
