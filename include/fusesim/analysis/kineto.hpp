#pragma once
// Measured traces in: PyTorch profiler (Kineto) traces of training steps, one file per rank, read into
// the same measures the simulated steps report (docs/metrics.md, Holistic Trace Analysis's definitions):
// per rank and profiler step, compute |C|, communication |M|, overlapped |C ∩ M|, exposed |M \ C|, idle
// (the step's span with no GPU activity) and the time by kernel class. docs/traces.md describes the
// format read and the classes.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/util/units.hpp"

namespace fusesim::analysis {

// What a GPU activity is, by its kernel name (NCCL, cuBLAS/CUTLASS, FlashAttention, PyTorch's
// kernels) or its Kineto category (memcpy, memset).
enum class MeasuredClass { gemm, attention, norm, activation, elementwise, optimizer, embedding, loss, collective,
                           memcpy, memset, other };
std::string to_string(MeasuredClass c);
MeasuredClass classify_kernel(const std::string& name);
// Compute: everything but communication and memory movement (HTA counts memcpy/memset apart).
bool is_compute(MeasuredClass c);

// One GPU activity of a step, kept when a reader is asked for them (trace compare's side-by-side
// view): its class, its span from the trace's earliest activity, its stream and its name.
struct TraceActivity {
  MeasuredClass cls = MeasuredClass::other;
  TimePs begin_ps = 0, end_ps = 0;
  std::int64_t stream = 0;  // Kineto: the CUDA stream (the event's tid); fusesim: the thread
  std::string name;
};

// A GEMM of a measured step with its shape: the GEMM-class kernels launched inside one aten::mm,
// addmm, bmm or baddbmm CPU op (shapes from the op's "Input Dims", recorded by a profiler run with
// record_shapes=True), summed.
struct MeasuredGemm {
  std::string dtype;  // "bf16" or "fp16" (the op's first matrix operand's "Input type")
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  TimePs time_ps = 0;
  int kernels = 0;
};

// A FlashAttention call of a measured step: the attention-class kernels launched inside one
// aten::_flash_attention_forward or _backward op (shapes from its "Input Dims", causality from its
// "Concrete Inputs"), summed.
struct MeasuredAttention {
  std::string dtype;
  bool backward = false, causal = false;
  std::int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
  TimePs time_ps = 0;
  int kernels = 0;
};

// The NCCL kernels of a step by collective and process group: the collective from the kernel's
// "Collective name" arg when the trace records it (PyTorch >= 2.4), else from the kernel name
// (ncclKernel_AllReduce_... -> all_reduce); the group and message sizes from the args when recorded.
struct MeasuredCollective {
  std::string op;     // all_reduce, all_gather, reduce_scatter, send_recv, broadcast, reduce, ... or the arg
  std::string group;  // "Process Group Name" (size "Group size"), "" when not recorded
  std::int64_t calls = 0;
  TimePs time_ps = 0;       // the kernels' durations summed (not a union: two groups may overlap)
  std::int64_t in_bytes = 0, out_bytes = 0;  // "In/Out msg nelems" x the dtype's size, when recorded
  std::int64_t calls_with_size = 0;
};

// The collective a NCCL kernel runs, from its name; "nccl" when the name does not say.
std::string nccl_collective(const std::string& kernel_name);
// One name per collective whatever wrote it: PyTorch's call names ("_allgather_base",
// "reduce_scatter_tensor_coalesced", "send"), NCCL's kernel names and fusesim's ("all_gather") all
// map to all_gather, reduce_scatter, all_reduce, all_to_all, send_recv, broadcast or reduce.
std::string normalized_collective(const std::string& name);

struct MeasuredStep {
  int rank = 0;
  int step = -1;  // ProfilerStep#N; -1: the trace has no ProfilerStep, the step is the whole trace
  TimePs span_ps = 0;  // first GPU activity's start to the last one's end
  TimePs compute_ps = 0, comm_ps = 0, overlapped_comm_ps = 0, exposed_comm_ps = 0, memory_ps = 0, idle_ps = 0;
  std::int64_t kernels = 0;                     // GPU activities (kernels, memcpy, memset)
  std::map<MeasuredClass, TimePs> by_class_ps;  // busy time (union) per class
  std::vector<TraceActivity> activities;        // only when asked for (TraceReadOptions::keep_activities)
  std::vector<MeasuredCollective> collectives;  // by (op, group), in that order
  std::vector<MeasuredGemm> gemms;              // only when asked for (TraceReadOptions::gemm_shapes)
  std::vector<MeasuredAttention> attention;     // the same
  std::int64_t gemm_kernels_without_shape = 0;  // GEMM-class kernels of no shaped aten::*mm op
  std::int64_t attention_kernels_without_shape = 0;
};

struct MeasuredTrace {
  std::string file;
  int rank = 0;
  std::string device;  // deviceProperties[0].name when the trace has it
  int sm_count = 0;    // deviceProperties[0].numSms when the trace has it
  std::vector<MeasuredStep> steps;
};

// The largest trace file read whole (bytes on disk, or uncompressed for .gz): larger ones are refused
// with this limit in the message.
inline constexpr std::uint64_t kMaxTraceBytes = std::uint64_t{2} << 30;

struct TraceReadOptions {
  bool keep_activities = false;
  // Read a Chrome trace written by fusesim (`simulate --trace`) instead of a Kineto trace: the complete
  // events of process `simulated_rank` (pid = rank), compute slices classed by their args (kernel,
  // elementwise_op, phase: the same classes as the measured kernels), collectives and P2P sends and
  // receives as communication. The whole trace is one step.
  std::optional<int> simulated_rank;
  // Match each GEMM and attention kernel to the aten op that launched it (its CPU thread and the runtime
  // call of the same correlation id) and keep them with their shapes (MeasuredStep::gemms, attention).
  bool gemm_shapes = false;
};

// Reads a Kineto / Chrome trace (`.json` or `.json.gz`). `rank`: the rank when the trace does not say
// (distributedInfo.rank). InputError (file, JSON path) on a malformed trace.
MeasuredTrace import_kineto(const std::string& path, int rank, const TraceReadOptions& options = {});
// The same from the trace's text, or from a document (`file` names it in errors).
MeasuredTrace import_kineto_text(std::string_view text, const std::string& file, int rank,
                                 const TraceReadOptions& options = {});
MeasuredTrace import_kineto(const nlohmann::json& doc, const std::string& file, int rank);
// The class of a compute slice of fusesim's own Chrome trace, from its args.
MeasuredClass classify_simulated(const std::string& kernel, const std::string& elementwise_op, const std::string& phase);

nlohmann::json to_json(const MeasuredTrace& trace);

}  // namespace fusesim::analysis
