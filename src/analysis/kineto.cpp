// Kineto (PyTorch profiler) traces in (docs/traces.md). What is read: the "X" (complete) events of
// `traceEvents`: GPU activities (categories kernel, gpu_memcpy, gpu_memset), the CUDA runtime and
// driver calls that launched them (matched by args.correlation), and the ProfilerStep#N ranges of the
// CPU timeline that cut the trace into steps. A kernel belongs to the step during which the CPU
// launched it, as Holistic Trace Analysis assigns iterations; without a launch record, to the step its
// own start falls in. Everything else in the trace (CPU ops, flows, metadata) is left alone.
#include "fusesim/analysis/kineto.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "fusesim/analysis/intervals.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"
#include "fusesim/util/json_scan.hpp"
#include "fusesim/util/json_syntax.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::analysis {

std::string to_string(MeasuredClass c) {
  switch (c) {
    case MeasuredClass::gemm: return "gemm";
    case MeasuredClass::attention: return "attention";
    case MeasuredClass::norm: return "norm";
    case MeasuredClass::activation: return "activation";
    case MeasuredClass::elementwise: return "elementwise";
    case MeasuredClass::optimizer: return "optimizer";
    case MeasuredClass::embedding: return "embedding";
    case MeasuredClass::loss: return "loss";
    case MeasuredClass::collective: return "collective";
    case MeasuredClass::memcpy: return "memcpy";
    case MeasuredClass::memset: return "memset";
    case MeasuredClass::other: return "other";
  }
  return "?";
}

bool is_compute(MeasuredClass c) {
  return c != MeasuredClass::collective && c != MeasuredClass::memcpy && c != MeasuredClass::memset;
}

namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

// The names of PyTorch 2.x, cuBLAS (nvjet, sm90_xmma, cutlass), FlashAttention, Apex/PyTorch's
// multi-tensor optimizer kernels and NCCL; the same rules as tools/calibration/train_step_compare.py.
MeasuredClass classify_kernel(const std::string& name) {
  const std::string n = lower(name);
  if (has(n, "nccl")) return MeasuredClass::collective;
  if (has(n, "multi_tensor_apply") || has(n, "lpnorm")) return MeasuredClass::optimizer;
  if (has(n, "flash") || has(n, "fmha")) return MeasuredClass::attention;
  if (n.rfind("nvjet", 0) == 0 || has(n, "gemm") || has(n, "cutlass") || has(n, "xmma")) return MeasuredClass::gemm;
  if (has(n, "layer_norm") || has(n, "gammabeta") || has(n, "rms_norm")) return MeasuredClass::norm;
  if (has(n, "gelu") || has(n, "silu")) return MeasuredClass::activation;
  if (has(n, "softmax") || has(n, "nll_loss") || has(n, "cross_entropy")) return MeasuredClass::loss;
  for (const char* k : {"compute_grad_weight", "sum_and_scatter", "radix_sort", "unique_by_key", "vectorized_gather",
                        "krn_partial", "devicescan", "indexselect", "embedding"})
    if (has(n, k)) return MeasuredClass::embedding;
  if (has(n, "elementwise") || has(n, "reduce_kernel") || has(n, "cudafunctor")) return MeasuredClass::elementwise;
  return MeasuredClass::other;
}

std::string nccl_collective(const std::string& kernel_name) {
  const std::string n = lower(kernel_name);
  // Longest names first: "reducescatter" and "allreduce" both hold "reduce".
  for (const auto& [part, op] : {std::pair{"reducescatter", "reduce_scatter"}, std::pair{"allreduce", "all_reduce"},
                                 std::pair{"allgather", "all_gather"}, std::pair{"sendrecv", "send_recv"},
                                 std::pair{"alltoall", "all_to_all"}, std::pair{"broadcast", "broadcast"},
                                 std::pair{"reduce", "reduce"}})
    if (has(n, part)) return op;
  return "nccl";
}

std::string normalized_collective(const std::string& name) {
  std::string n = lower(name);
  n.erase(std::remove(n.begin(), n.end(), '_'), n.end());
  const std::string op = nccl_collective(n);
  if (op != "nccl") return op;
  if (has(n, "send") || has(n, "recv")) return "send_recv";
  return n.empty() ? std::string("nccl") : n;
}

namespace {

// Bytes per element of the dtype names PyTorch writes in a collective's "dtype" arg; 0 when unknown.
int dtype_bytes(const std::string& d) {
  const std::string t = lower(d);
  if (t == "float" || t == "float32" || t == "int" || t == "int32") return 4;
  if (t == "bfloat16" || t == "half" || t == "float16" || t == "short" || t == "int16") return 2;
  if (t == "double" || t == "float64" || t == "long" || t == "int64") return 8;
  if (t == "byte" || t == "char" || t == "bool" || t == "uint8" || t == "int8" || t.rfind("float8", 0) == 0) return 1;
  return 0;
}

}  // namespace

// fusesim's compute slices by their args, into the classes the measured kernels fall in (the same
// rules as tools/calibration/train_step_compare.py): an unfused softmax is "loss" on both sides, as a
// measured softmax kernel is.
MeasuredClass classify_simulated(const std::string& kernel, const std::string& op, const std::string& phase) {
  if (kernel == "gemm") return MeasuredClass::gemm;
  if (kernel == "attention") return MeasuredClass::attention;
  if (phase == "optimizer") return MeasuredClass::optimizer;
  const auto starts = [&](const char* p) { return op.rfind(p, 0) == 0; };
  if (starts("layernorm") || starts("rmsnorm")) return MeasuredClass::norm;
  if (starts("gelu") || starts("silu") || starts("swiglu")) return MeasuredClass::activation;
  if (starts("softmax") || starts("cross_entropy")) return MeasuredClass::loss;
  if (starts("embedding")) return MeasuredClass::embedding;
  return MeasuredClass::elementwise;
}

namespace {

// A collective kernel's op, group and message sizes (MeasuredCollective).
struct CollectiveArgs {
  std::string op, group;
  std::int64_t in_bytes = -1, out_bytes = -1;  // -1: not recorded
};

struct Activity {
  MeasuredClass cls = MeasuredClass::other;
  double ts_us = 0, dur_us = 0;
  std::optional<std::int64_t> correlation;
  std::int64_t stream = 0;
  std::string name;  // only with TraceReadOptions::keep_activities
  std::shared_ptr<const CollectiveArgs> collective;  // NCCL kernels only
};
struct Range {
  int step = -1;
  double begin_us = 0, end_us = 0;
};

// One "X" event's fields as the parser meets them.
struct Event {
  std::string ph, cat, name;
  std::optional<double> ts, dur;
  std::optional<std::int64_t> correlation;
  std::int64_t pid = -1, tid = 0;
  std::string kernel, elementwise_op, phase;  // fusesim's own traces: a compute slice's args
  std::vector<std::vector<std::int64_t>> dims;  // a CPU op's "Input Dims" (TraceReadOptions::gemm_shapes)
  std::vector<std::string> types;               // its "Input type"
  std::vector<std::string> concrete;            // its "Concrete Inputs"
  std::string coll_name, coll_dtype, coll_group;  // a NCCL kernel's args, when recorded
  std::int64_t coll_in = -1, coll_out = -1, coll_group_size = -1;
  std::array<std::int64_t, 4> sim_gemm{0, 0, 0, 1};  // fusesim's GEMM slices: m, n, k, batch
  bool has_ph = false, has_ts = false, has_dur = false;
};

// Reads the trace as a stream of SAX events (json_scan, nlohmann's SAX interface): no document is built, each
// event's few fields are kept until its object closes. Returns false to stop the parser at the first
// error, which `error` and `error_path` then describe.
class Reader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  Reader(int rank, const TraceReadOptions& options) : options_(options) {
    out_.rank = options.simulated_rank ? *options.simulated_rank : rank;
  }

  std::string error, error_path;

  MeasuredTrace finish(const std::string& file) {
    if (!seen_events_) {
      error_path = "$";
      error = top_ == Top::object ? "no \"traceEvents\": not a Chrome or Kineto trace"
                                  : "expected an object with \"traceEvents\" or an array of events";
      throw InputError(file, error_path, error);
    }
    out_.file = file;
    steps();
    return std::move(out_);
  }

  // Scalars.
  bool null() override { return scalar(Value{}); }
  bool boolean(bool) override { return scalar(Value{}); }
  bool number_integer(number_integer_t v) override { return scalar(Value{Kind::integer, static_cast<double>(v), v}); }
  bool number_unsigned(number_unsigned_t v) override {
    const auto i = v > static_cast<number_unsigned_t>(std::numeric_limits<std::int64_t>::max())
                       ? std::numeric_limits<std::int64_t>::max()
                       : static_cast<std::int64_t>(v);
    return scalar(Value{Kind::integer, static_cast<double>(v), i});
  }
  bool number_float(number_float_t v, const string_t&) override { return scalar(Value{Kind::real, v, 0}); }
  bool string(string_t& v) override {
    Value x{Kind::string, 0, 0};
    x.text = &v;
    return scalar(x);
  }
  bool binary(binary_t&) override { return scalar(Value{}); }

  bool start_object(std::size_t) override {
    const std::size_t element = element_index();
    if (top_ == Top::object && depth() == 1 && key_ == "traceEvents") return fail("$.traceEvents", "expected an array of events");
    enter(Frame::object);
    if (depth() == 1) {
      top_ = Top::object;
    } else if (in_events_ && !in_event_ && depth() == event_depth_) {
      event_ = Event{};
      in_event_ = true;
    } else if (in_event_ && depth() == event_depth_ + 1 && key_ == "args") {
      in_args_ = true;
    } else if (top_ == Top::object && depth() == 2 && key_ == "distributedInfo") {
      in_distributed_ = true;
    } else if (in_devices_ && depth() == 3 && element == 0) {
      in_device0_ = true;
    }
    return true;
  }
  bool key(string_t& k) override {
    key_ = k;
    return true;
  }
  bool end_object() override {
    bool ok = true;
    if (in_event_ && depth() == event_depth_) {
      ok = close_event();
      in_event_ = false;
      ++event_index_;
    } else if (in_args_ && depth() == event_depth_ + 1) {
      in_args_ = false;
    } else if (in_distributed_ && depth() == 2) {
      in_distributed_ = false;
    } else if (in_device0_ && depth() == 3) {
      in_device0_ = false;
    }
    leave();
    return ok;
  }
  bool start_array(std::size_t) override {
    if (in_events_ && !in_event_ && depth() == event_depth_ - 1) return fail(event_path(), "expected an event object");
    enter(Frame::array);
    if (options_.gemm_shapes && in_args_) {
      if (depth() == event_depth_ + 2 && (key_ == "Input Dims" || key_ == "Input type" || key_ == "Concrete Inputs")) {
        capture_ = key_ == "Input Dims" ? Capture::dims : key_ == "Input type" ? Capture::types : Capture::concrete;
      } else if (capture_ == Capture::dims && depth() == event_depth_ + 3) {
        event_.dims.emplace_back();
      }
      return true;
    }
    if (depth() == 1) {
      top_ = Top::array;
      open_events(2, "$");
    } else if (top_ == Top::object && depth() == 2 && key_ == "traceEvents") {
      open_events(3, "$.traceEvents");
    } else if (top_ == Top::object && depth() == 2 && key_ == "deviceProperties") {
      in_devices_ = true;
    }
    return true;
  }
  bool end_array() override {
    if (capture_ != Capture::none && depth() == event_depth_ + 2) capture_ = Capture::none;
    if (in_devices_ && depth() == 2) in_devices_ = false;
    if (in_events_ && depth() == event_depth_ - 1) in_events_ = false;
    leave();
    return true;
  }
  // json_scan reports syntax errors itself; nlohmann's parser is not used.
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  enum class Capture { none, dims, types, concrete };
  // A CPU op that launches the kernels of one GEMM or one attention call, with its shape.
  struct CpuOp {
    double begin_us = 0, end_us = 0;
    bool attention = false;
    MeasuredGemm gemm;
    MeasuredAttention attn;
  };
  enum class Frame { object, array };
  enum class Top { none, object, array };
  enum class Kind { other, integer, real, string };
  struct Value {
    Kind kind = Kind::other;
    double number = 0;
    std::int64_t integer = 0;
    const std::string* text = nullptr;
  };
  struct Level {
    Frame frame;
    std::size_t index = 0;  // arrays: the element being read
  };

  int depth() const { return static_cast<int>(stack_.size()); }
  // The index of the element about to start in the innermost array (0 outside arrays).
  std::size_t element_index() const { return !stack_.empty() && stack_.back().frame == Frame::array ? stack_.back().index : 0; }
  void enter(Frame f) { stack_.push_back(Level{f, 0}); }
  void leave() {
    stack_.pop_back();
    if (!stack_.empty() && stack_.back().frame == Frame::array) ++stack_.back().index;
  }
  // The events are the elements of the array at depth `depth` - 1: their objects open at `depth`.
  void open_events(int depth, std::string path) {
    seen_events_ = in_events_ = true;
    event_depth_ = depth;
    events_path_ = std::move(path);
  }
  std::string event_path() const { return fmt::format("{}[{}]", events_path_, event_index_); }

  bool fail(std::string path, std::string msg) {
    error_path = std::move(path);
    error = std::move(msg);
    return false;
  }

  bool scalar(const Value& v) {
    const bool in_array = !stack_.empty() && stack_.back().frame == Frame::array;
    // Only an integer directly inside an inner array of "Input Dims" (an object there, or a deeper
    // list, is not a shape).
    if (capture_ == Capture::dims && depth() == event_depth_ + 3 && in_array && !event_.dims.empty() &&
        v.kind == Kind::integer) {
      event_.dims.back().push_back(v.integer);
    } else if ((capture_ == Capture::types || capture_ == Capture::concrete) && depth() == event_depth_ + 2 && in_array) {
      (capture_ == Capture::types ? event_.types : event_.concrete)
          .push_back(v.kind == Kind::string ? *v.text : std::string());
    }
    if (top_ == Top::object && depth() == 1 && key_ == "traceEvents") return fail("$.traceEvents", "expected an array of events");
    // An element of the events array that is not an object.
    if (in_events_ && !in_event_ && in_array && depth() == event_depth_ - 1) return fail(event_path(), "expected an event object");
    if (in_event_ && !in_array) {
      if (depth() == event_depth_) return event_field(v);
      if (in_args_ && depth() == event_depth_ + 1) {
        if (key_ == "correlation") {
          if (v.kind != Kind::integer) return fail(event_path() + ".args.correlation", "expected an integer");
          event_.correlation = v.integer;
        } else if (options_.simulated_rank && v.kind == Kind::string) {
          if (key_ == "kernel") event_.kernel = *v.text;
          else if (key_ == "elementwise_op") event_.elementwise_op = *v.text;
          else if (key_ == "phase") event_.phase = *v.text;
          else if (key_ == "dtype") event_.coll_dtype = *v.text;
          else if (key_ == "collective") event_.coll_name = *v.text;
        } else if (options_.simulated_rank && v.kind == Kind::integer) {
          if (key_ == "bytes") event_.coll_in = v.integer;
          else if (key_ == "m") event_.sim_gemm[0] = v.integer;
          else if (key_ == "n") event_.sim_gemm[1] = v.integer;
          else if (key_ == "k") event_.sim_gemm[2] = v.integer;
          else if (key_ == "batch") event_.sim_gemm[3] = v.integer;
        } else if (v.kind == Kind::string && (key_ == "Collective name" || key_ == "dtype" || key_ == "Process Group Name")) {
          (key_ == "dtype" ? event_.coll_dtype : key_ == "Collective name" ? event_.coll_name : event_.coll_group) = *v.text;
        } else if (v.kind == Kind::integer && v.integer >= 0 &&
                   (key_ == "In msg nelems" || key_ == "Out msg nelems" || key_ == "Group size")) {
          (key_ == "Group size" ? event_.coll_group_size : key_ == "In msg nelems" ? event_.coll_in : event_.coll_out) =
              v.integer;
        }
      }
    } else if (in_distributed_ && depth() == 2 && key_ == "rank") {
      if (v.kind != Kind::integer || v.integer < 0 || v.integer > (1 << 24))
        return fail("$.distributedInfo.rank", "expected a rank, an integer from 0");
      out_.rank = static_cast<int>(v.integer);
    } else if (in_device0_ && depth() == 3 && key_ == "name" && v.kind == Kind::string) {
      out_.device = *v.text;
    } else if (in_device0_ && depth() == 3 && key_ == "numSms" && v.kind == Kind::integer && v.integer > 0 &&
               v.integer < (1 << 20)) {
      out_.sm_count = static_cast<int>(v.integer);
    }
    if (in_array) ++stack_.back().index;
    return true;
  }

  bool event_field(const Value& v) {
    if (key_ == "ph") {
      if (v.kind != Kind::string) return fail(event_path() + ".ph", "expected the event's phase, a string");
      event_.ph = *v.text;
      event_.has_ph = true;
    } else if (key_ == "cat") {
      if (v.kind != Kind::string) return fail(event_path() + ".cat", "expected a string");
      event_.cat = lower(*v.text);
    } else if (key_ == "name") {
      if (v.kind != Kind::string) return fail(event_path() + ".name", "expected a string");
      event_.name = *v.text;
    } else if (key_ == "pid" || key_ == "tid") {
      // Kineto writes a GPU's pid and a stream's tid as integers, CPU threads' sometimes as strings:
      // only integers name a process or stream here.
      if (v.kind == Kind::integer) (key_ == "pid" ? event_.pid : event_.tid) = v.integer;
    } else if (key_ == "ts" || key_ == "dur") {
      const bool ts = key_ == "ts";
      event_.has_ts = event_.has_ts || ts;
      event_.has_dur = event_.has_dur || !ts;
      if (v.kind != Kind::integer && v.kind != Kind::real)
        return fail(event_path() + "." + key_, "expected a number (microseconds)");
      const double min = ts ? -1e17 : 0.0;
      if (!std::isfinite(v.number) || v.number < min || v.number > 1e17)
        return fail(event_path() + "." + key_, fmt::format("{} is not a time in microseconds", v.number));
      (ts ? event_.ts : event_.dur) = v.number;
    }
    return true;
  }

  bool close_event() {
    if (!event_.has_ph) return fail(event_path() + ".ph", "expected the event's phase, a string");
    if (event_.ph != "X") return true;
    for (const char* k : {"ts", "dur"})
      if ((k[0] == 't' ? !event_.ts : !event_.dur))
        return fail(event_path(), fmt::format("a complete (\"X\") event needs \"{}\"", k));
    const std::string& cat = event_.cat;
    if (options_.simulated_rank) {
      if (event_.pid != *options_.simulated_rank) return true;
      const bool compute = cat == "compute";
      if (!compute && cat != "collective" && cat != "send" && cat != "recv") return true;
      Activity a;
      a.cls = compute ? classify_simulated(event_.kernel, event_.elementwise_op, event_.phase)
                      : MeasuredClass::collective;
      if (!compute) {
        // fusesim's collectives carry the full buffer (nccl-tests' convention) as "bytes"; P2P sends and
        // receives their message.
        CollectiveArgs c;
        c.op = cat == "collective" ? event_.coll_name : "send_recv";
        c.in_bytes = c.out_bytes = event_.coll_in;
        a.collective = intern(std::move(c));
      }
      const auto& g = event_.sim_gemm;
      if (options_.gemm_shapes && a.cls == MeasuredClass::gemm && g[0] > 0 && g[1] > 0 && g[2] > 0 && g[3] > 0)
        sim_gemms_.push_back({MeasuredGemm{event_.coll_dtype, g[0], g[1], g[2], g[3], 0, 1}, *event_.ts, *event_.dur});
      keep(a);
      return true;
    }
    if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "memcpy" || cat == "memset") {
      Activity a;
      a.cls = cat == "kernel" ? classify_kernel(event_.name)
              : has(cat, "memcpy") ? MeasuredClass::memcpy
                                   : MeasuredClass::memset;
      a.correlation = event_.correlation;
      if (a.cls == MeasuredClass::collective) a.collective = collective_args();
      keep(a);
    } else if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "runtime") {
      if (event_.correlation) {
        launches_[*event_.correlation] = Launch{*event_.ts, {event_.pid, event_.tid}};
      }
    } else if (options_.gemm_shapes && cat == "cpu_op" && event_.name.rfind("aten::", 0) == 0) {
      cpu_op();
    } else if (event_.name.rfind("ProfilerStep#", 0) == 0) {
      const std::string n = event_.name.substr(13);
      int step = 0;
      const auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), step);
      if (ec != std::errc() || p != n.data() + n.size() || step < 0)
        return fail(event_path() + ".name", "expected ProfilerStep#N");
      if (cat != "gpu_user_annotation") ranges_.push_back(Range{step, *event_.ts, *event_.ts + *event_.dur});
    }
    return true;
  }

  static const char* dtype_of(const std::string& t) {
    return t == "c10::BFloat16" ? "bf16" : t == "c10::Half" ? "fp16" : nullptr;
  }

  // An aten::mm / addmm / bmm / baddbmm op, or a FlashAttention forward or backward op, with its
  // operands' shapes: kept per CPU thread. Another op, or one whose shapes do not make a GEMM or an
  // attention call (a view, an fp32 or fp8 operand), is left alone.
  void cpu_op() {
    const std::string& n = event_.name;
    CpuOp op{*event_.ts, *event_.ts + *event_.dur, false, {}, {}};
    if (n == "aten::_flash_attention_forward" || n == "aten::_flash_attention_backward") {
      // forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...),
      // backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
      // dropout_p, is_causal, ...); query [batch, seq, heads, head_dim], key [batch, seq_kv, kv_heads, head_dim].
      const bool bwd = n == "aten::_flash_attention_backward";
      const std::size_t q = bwd ? 1 : 0, causal = bwd ? 11 : 8;
      if (event_.dims.size() <= q + 1 || event_.types.size() <= q || event_.concrete.size() <= causal) return;
      const auto& x = event_.dims[q];
      const auto& y = event_.dims[q + 1];
      if (x.size() != 4 || y.size() != 4 || x[0] != y[0] || x[3] != y[3] || x[1] != y[1]) return;
      for (std::int64_t d : x)
        if (d < 1) return;
      if (y[2] < 1) return;
      const char* dtype = dtype_of(event_.types[q]);
      const std::string& c = event_.concrete[causal];
      if (!dtype || (c != "True" && c != "False")) return;
      op.attention = true;
      op.attn = MeasuredAttention{dtype, bwd, c == "True", x[0], x[2], y[2], x[1], x[3], 0, 0};
    } else {
      const bool add = n == "aten::addmm" || n == "aten::baddbmm";
      const bool batched = n == "aten::bmm" || n == "aten::baddbmm";
      if (!add && !batched && n != "aten::mm") return;
      const std::size_t a = add ? 1 : 0;
      if (event_.dims.size() < a + 2 || event_.types.size() < a + 1) return;
      const auto& x = event_.dims[a];
      const auto& y = event_.dims[a + 1];
      const std::size_t rank = batched ? 3 : 2;
      if (x.size() != rank || y.size() != rank) return;
      for (std::size_t i = 0; i < rank; ++i)
        if (x[i] < 1 || y[i] < 1) return;
      const std::int64_t batch = batched ? x[0] : 1, m = x[rank - 2], k = x[rank - 1], n2 = y[rank - 1];
      if (y[rank - 2] != k || (batched && y[0] != batch)) return;
      const char* dtype = dtype_of(event_.types[a]);
      if (!dtype) return;
      op.gemm = MeasuredGemm{dtype, m, n2, k, batch, 0, 0};
    }
    cpu_ops_[{event_.pid, event_.tid}].push_back(std::move(op));
  }

  // Interned: a trace repeats the same few (op, group, sizes) thousands of times.
  std::shared_ptr<const CollectiveArgs> collective_args() {
    CollectiveArgs c;
    c.op = event_.coll_name.empty() ? nccl_collective(event_.name) : lower(event_.coll_name);
    if (!event_.coll_group.empty())
      c.group = event_.coll_group_size >= 0 ? fmt::format("{} ({} ranks)", event_.coll_group, event_.coll_group_size)
                                            : event_.coll_group;
    else if (event_.coll_group_size >= 0)
      c.group = fmt::format("{} ranks", event_.coll_group_size);
    const int b = dtype_bytes(event_.coll_dtype);
    const std::int64_t limit = std::numeric_limits<std::int64_t>::max() / 8;
    if (b > 0 && event_.coll_in >= 0 && event_.coll_in < limit) c.in_bytes = event_.coll_in * b;
    if (b > 0 && event_.coll_out >= 0 && event_.coll_out < limit) c.out_bytes = event_.coll_out * b;
    return intern(std::move(c));
  }

  std::shared_ptr<const CollectiveArgs> intern(CollectiveArgs c) {
    const auto key = std::make_tuple(c.op, c.group, c.in_bytes, c.out_bytes);
    auto& slot = collective_args_[key];
    if (!slot) slot = std::make_shared<const CollectiveArgs>(std::move(c));
    return slot;
  }

  void keep(Activity& a) {
    a.ts_us = *event_.ts;
    a.dur_us = *event_.dur;
    a.stream = event_.tid;
    if (options_.keep_activities) a.name = event_.name;
    activities_.push_back(std::move(a));
  }

  // Integer picoseconds from the earliest activity (Kineto's microseconds count from an epoch that
  // would overflow picoseconds), rounded to Kineto's resolution, the nanosecond: the double holding
  // an epoch-based time has no finer digits.
  TimePs ps(double us) const { return static_cast<TimePs>(std::llround((us - origin_us_) * 1e3)) * 1000; }
  // An activity's span, both ends rounded so (a duration alone would round differently).
  Interval interval(double ts_us, double dur_us) const { return Interval{ps(ts_us), ps(ts_us + dur_us)}; }
  TimePs length_ps(double ts_us, double dur_us) const { return interval(ts_us, dur_us).length_ps(); }

  int step_of(const Activity& a) const {
    if (ranges_.empty()) return -1;
    double at = a.ts_us;
    if (a.correlation)
      if (const auto it = launches_.find(*a.correlation); it != launches_.end()) at = it->second.ts_us;
    for (const Range& r : ranges_)
      if (at >= r.begin_us && at < r.end_us) return r.step;
    return std::numeric_limits<int>::min();  // launched outside every profiled step: not counted
  }

  // The shaped op on the launching thread whose span holds the launch, if any (ops sorted by start:
  // the latest one that starts before the launch, the few before it when ops nest).
  const CpuOp* op_of(const Activity& a) const {
    if (!a.correlation) return nullptr;
    const auto launch = launches_.find(*a.correlation);
    if (launch == launches_.end()) return nullptr;
    const double at = launch->second.ts_us;
    const auto ops = cpu_ops_.find(launch->second.thread);
    if (ops == cpu_ops_.end()) return nullptr;
    const std::vector<CpuOp>& v = ops->second;
    auto it = std::upper_bound(v.begin(), v.end(), at, [](double ts, const CpuOp& op) { return ts < op.begin_us; });
    for (int back = 0; back < 4 && it != v.begin(); ++back) {
      --it;
      if (it->end_us >= at) return &*it;
    }
    return nullptr;
  }

  void shape_ops(MeasuredStep& m, const std::vector<const Activity*>& acts) const {
    std::map<const CpuOp*, std::size_t> index;  // op -> its entry in m.gemms or m.attention
    for (const Activity* a : acts) {
      if (a->cls != MeasuredClass::gemm && a->cls != MeasuredClass::attention) continue;
      const CpuOp* op = op_of(*a);
      if (!op || op->attention != (a->cls == MeasuredClass::attention)) {
        ++(a->cls == MeasuredClass::gemm ? m.gemm_kernels_without_shape : m.attention_kernels_without_shape);
        continue;
      }
      const TimePs t = length_ps(a->ts_us, a->dur_us);
      auto [it, fresh] = index.try_emplace(op, op->attention ? m.attention.size() : m.gemms.size());
      if (op->attention) {
        if (fresh) m.attention.push_back(op->attn);
        m.attention[it->second].time_ps += t;
        ++m.attention[it->second].kernels;
      } else {
        if (fresh) m.gemms.push_back(op->gemm);
        m.gemms[it->second].time_ps += t;
        ++m.gemms[it->second].kernels;
      }
    }
  }

  void steps() {
    if (activities_.empty()) return;
    for (auto& [thread, ops] : cpu_ops_)
      std::stable_sort(ops.begin(), ops.end(), [](const CpuOp& x, const CpuOp& y) { return x.begin_us < y.begin_us; });
    origin_us_ = activities_.front().ts_us;
    for (const Activity& a : activities_) origin_us_ = std::min(origin_us_, a.ts_us);
    std::sort(ranges_.begin(), ranges_.end(), [](const Range& x, const Range& y) { return x.step < y.step; });
    std::map<int, std::vector<const Activity*>> by_step;
    for (const Activity& a : activities_) {
      const int s = step_of(a);
      if (s != std::numeric_limits<int>::min()) by_step[s].push_back(&a);
    }
    for (const auto& [step, acts] : by_step) {
      MeasuredStep m;
      m.rank = out_.rank;
      m.step = step;
      m.kernels = static_cast<std::int64_t>(acts.size());
      std::map<MeasuredClass, std::vector<Interval>> per_class;
      std::vector<Interval> compute, comm, memory, all;
      TimePs begin = std::numeric_limits<TimePs>::max(), end = std::numeric_limits<TimePs>::min();
      for (const Activity* a : acts) {
        const Interval iv = interval(a->ts_us, a->dur_us);
        if (options_.keep_activities) m.activities.push_back({a->cls, iv.begin_ps, iv.end_ps, a->stream, a->name});
        begin = std::min(begin, iv.begin_ps);
        end = std::max(end, iv.end_ps);
        per_class[a->cls].push_back(iv);
        all.push_back(iv);
        if (a->cls == MeasuredClass::collective)
          comm.push_back(iv);
        else if (is_compute(a->cls))
          compute.push_back(iv);
        else
          memory.push_back(iv);
      }
      const IntervalSet C(std::move(compute)), M(std::move(comm)), busy(std::move(all));
      m.span_ps = end - begin;
      m.compute_ps = C.measure_ps();
      m.comm_ps = M.measure_ps();
      m.overlapped_comm_ps = C.intersect(M).measure_ps();
      m.exposed_comm_ps = m.comm_ps - m.overlapped_comm_ps;
      m.memory_ps = IntervalSet(std::move(memory)).measure_ps();
      m.idle_ps = m.span_ps - busy.measure_ps();
      for (auto& [cls, ivs] : per_class) m.by_class_ps[cls] = IntervalSet(std::move(ivs)).measure_ps();
      if (options_.gemm_shapes) shape_ops(m, acts);
      for (const auto& [g, ts, dur] : sim_gemms_) {  // fusesim's own trace: one step, every GEMM slice
        m.gemms.push_back(g);
        m.gemms.back().time_ps = length_ps(ts, dur);
      }
      std::map<std::pair<std::string, std::string>, MeasuredCollective> colls;
      for (const Activity* a : acts) {
        if (!a->collective) continue;
        MeasuredCollective& c = colls[{a->collective->op, a->collective->group}];
        c.op = a->collective->op;
        c.group = a->collective->group;
        ++c.calls;
        c.time_ps += length_ps(a->ts_us, a->dur_us);
        if (a->collective->in_bytes >= 0 && a->collective->out_bytes >= 0) {
          ++c.calls_with_size;
          c.in_bytes += a->collective->in_bytes;
          c.out_bytes += a->collective->out_bytes;
        }
      }
      for (auto& [key, c] : colls) m.collectives.push_back(std::move(c));
      out_.steps.push_back(std::move(m));
    }
  }

  MeasuredTrace out_;
  std::vector<Level> stack_;
  Top top_ = Top::none;
  std::string key_;
  bool seen_events_ = false, in_events_ = false;
  int event_depth_ = 0;
  std::string events_path_ = "$";
  std::int64_t event_index_ = 0;
  bool in_event_ = false, in_args_ = false, in_distributed_ = false, in_devices_ = false, in_device0_ = false;
  Event event_;
  std::vector<Activity> activities_;
  // The CUDA runtime calls by correlation id: when, and on which CPU thread (pid, tid).
  struct Launch {
    double ts_us = 0;
    std::pair<std::int64_t, std::int64_t> thread;
  };
  std::unordered_map<std::int64_t, Launch> launches_;
  std::vector<Range> ranges_;
  double origin_us_ = 0;
  TraceReadOptions options_;
  Capture capture_ = Capture::none;
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<CpuOp>> cpu_ops_;  // by (pid, tid)
  std::vector<std::tuple<MeasuredGemm, double, double>> sim_gemms_;              // shape, ts, dur
  std::map<std::tuple<std::string, std::string, std::int64_t, std::int64_t>, std::shared_ptr<const CollectiveArgs>>
      collective_args_;
};

}  // namespace

MeasuredTrace import_kineto_text(std::string_view text, const std::string& file, int rank,
                                 const TraceReadOptions& options) {
  Reader reader(rank, options);
  JsonScanError syntax;
  if (!json_scan(text, reader, syntax)) {
    if (!reader.error.empty()) throw InputError(file, reader.error_path, reader.error);
    throw json_syntax_error(file, text, syntax.byte, syntax.what);
  }
  return reader.finish(file);
}

MeasuredTrace import_kineto(const nlohmann::json& doc, const std::string& file, int rank) {
  return import_kineto_text(doc.dump(), file, rank);
}

MeasuredTrace import_kineto(const std::string& path, int rank, const TraceReadOptions& options) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxTraceBytes)
    throw InputError(path, "$",
                     fmt::format("{:.1f} GB: traces above {:.1f} GB are not read (profile fewer steps, or one "
                                 "rank per file)",
                                 static_cast<double>(size) / 1e9, static_cast<double>(kMaxTraceBytes) / 1e9));
  std::string text = read_text_file(path);
  const bool gz = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gz) {
    try {
      text = gzip_decompress(text, kMaxTraceBytes);
    } catch (const std::length_error&) {
      throw InputError(path, "$",
                       fmt::format("uncompressed above {:.1f} GB: not read (profile fewer steps, or one rank per "
                                   "file)",
                                   static_cast<double>(kMaxTraceBytes) / 1e9));
    } catch (const std::runtime_error& e) {
      throw InputError(path, "$", fmt::format("a .gz file that does not decompress: {}", e.what()));
    }
  }
  return import_kineto_text(text, path, rank, options);
}

namespace {

nlohmann::json collectives_json(const MeasuredStep& m) {
  nlohmann::json out = nlohmann::json::array();
  for (const MeasuredCollective& c : m.collectives) {
    nlohmann::json j = {{"op", c.op}, {"group", c.group}, {"calls", c.calls}, {"time_s", ps_to_seconds(c.time_ps)}};
    if (c.calls_with_size > 0) {
      j["calls_with_size"] = c.calls_with_size;
      j["in_bytes"] = c.in_bytes;
      j["out_bytes"] = c.out_bytes;
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

nlohmann::json to_json(const MeasuredTrace& t) {
  nlohmann::json steps = nlohmann::json::array();
  for (const MeasuredStep& m : t.steps) {
    nlohmann::json by_class = nlohmann::json::object();
    for (const auto& [cls, v] : m.by_class_ps) by_class[to_string(cls)] = ps_to_seconds(v);
    steps.push_back({{"step", m.step},
                     {"span_s", ps_to_seconds(m.span_ps)},
                     {"compute_s", ps_to_seconds(m.compute_ps)},
                     {"comm_s", ps_to_seconds(m.comm_ps)},
                     {"overlapped_comm_s", ps_to_seconds(m.overlapped_comm_ps)},
                     {"exposed_comm_s", ps_to_seconds(m.exposed_comm_ps)},
                     {"overlap_ratio", m.comm_ps > 0 ? static_cast<double>(m.overlapped_comm_ps) /
                                                           static_cast<double>(m.comm_ps)
                                                     : 0.0},
                     {"memory_s", ps_to_seconds(m.memory_ps)},
                     {"idle_s", ps_to_seconds(m.idle_ps)},
                     {"kernels", m.kernels},
                     {"by_class_s", std::move(by_class)},
                     {"collectives", collectives_json(m)}});
  }
  return {{"file", t.file}, {"rank", t.rank}, {"device", t.device}, {"steps", std::move(steps)}};
}

}  // namespace fusesim::analysis
