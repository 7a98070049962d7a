#pragma once
// Memory per rank of a training workload: parameters, gradients, optimizer state, activations and
// communication buffers, against the device's HBM capacity. The model and its sources: docs/memory.md.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/model/workload.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/units.hpp"

namespace fusesim::model {

// One line of the explanation: what a term holds and how it was counted.
struct MemoryItem {
  std::string what;      // "parameters", "activations", ...
  Bytes bytes = 0;
  std::string formula;   // "8,820,367,360 params x 2 B (bf16), no ZeRO-3 sharding"
};

struct MemoryReport {
  std::int64_t params_per_rank = 0;  // weights the rank owns before ZeRO-3 sharding (TP shards only)
  int stage = 0;                     // pipeline parallelism: the stage reported, the one needing most
  int stages = 1;                    // pp
  Bytes parameters_bytes = 0;
  Bytes gradients_bytes = 0;
  Bytes optimizer_bytes = 0;
  Bytes activations_bytes = 0;
  Bytes comm_buffers_bytes = 0;      // the largest over the schedules asked for
  Bytes total_bytes = 0;
  Bytes capacity_bytes = 0;          // HBM of the device model (the smallest among the ranks used)
  std::string device_model;          // whose capacity it is
  std::string comm_buffers_schedule; // the schedule whose buffers are counted (the largest)
  std::vector<MemoryItem> breakdown; // parameters, gradients, optimizer, activations, comm buffers
  bool fits() const { return total_bytes <= capacity_bytes; }
};

// Parameters one rank holds with tensor parallelism `tp` (GEMM weights column/row sharded, norms
// replicated, embedding and LM head vocab-parallel). Ulysses and DP replicate them.
std::int64_t params_per_tp_rank(const Architecture& a, int tp);

// Activation bytes one rank keeps for the backward pass of one micro-batch (no pipeline parallelism:
// one micro-batch in flight), with the workload's recomputation.
Bytes activation_bytes_per_rank(const Workload& w);

// Pipeline parallelism (docs/memory.md "Pipeline"): the parameters the ranks of `stage` hold (its
// layers, the embedding on the first stage, the final norm and LM head on the last) and the layers'
// worth of activations it keeps at its peak, in layer x micro-batch units: 1F1B keeps min(pp - stage,
// m) micro-batches in flight (PipeDream-flush), the interleaved schedule its warm-up chunks plus one,
// each of layers / (pp v) layers (sched/step.hpp pipeline_order).
std::int64_t stage_params_per_tp_rank(const Architecture& a, const Parallelism& p, int stage);
std::int64_t stage_layers_in_flight(const Workload& w, int stage);

// ZB-H1 (pp_schedule "zb-h1"; docs/memory.md "Pipeline"): what one layer's W of one micro-batch reads,
// kept from its B until it runs (the paper's M_W, 32 bsh at tp 1): the inputs of the four weight GEMMs
// (the two LayerNorm output shards, the attention output, the activation's output) and the gradients of
// their outputs (QKV's and FC1's [s, cols/tp], the out-projection's and FC2's gathered [s, h], the
// buffer the B's dgrad all-gather filled and the W's GEMM reads).
Bytes weight_pass_bytes(const Workload& w);
// The state of stage `stage` at its activation peak under ZB-H1, in chunk x micro-batch units: the
// micro-batches whose forward has run and B has not (each keeps its whole activations, as 1F1B's in
// flight), and those whose B has run and W has not (each keeps weight_pass_bytes per layer). The peak is
// the largest of the states between passes of model::zb_h1_passes, given the bytes of each unit.
struct WeightPassPeak {
  std::int64_t forwards = 0;  // F done, B not
  std::int64_t weights = 0;   // B done, W not
};
WeightPassPeak zb_h1_peak(std::int64_t stages, std::int64_t micro_batches, std::int64_t stage, Bytes forward_unit,
                          Bytes weight_unit);

// The buffers the collective library allocates for one communicator on one rank: NCCL, channels x
// NCCL_BUFFSIZE (4 MiB), channels = the SMs a collective kernel holds; HCCL (vendor "huawei"),
// HCCL_BUFFSIZE (200 MiB).
Bytes communicator_buffer_bytes(const Workload& w, const topo::DeviceModel& device);

// Communication buffers one rank holds for the schedule `kind`: a communicator's buffers per parallel
// group of degree > 1, the gathered and partial-sum buffers of TPSP, the all-to-all receive buffer of
// Ulysses, DP buckets or ring chunks, ZeRO-3 parameter gathers.
Bytes comm_buffer_bytes_per_rank(const Workload& w, ScheduleKind kind, Bytes communicator_bytes);

// The memory per rank of `w` on `device` when running each of `kinds` (communication buffers: the
// largest of them).
MemoryReport memory_per_rank(const Workload& w, const topo::DeviceModel& device,
                             const std::vector<ScheduleKind>& kinds);
// The ranks of pipeline stage `stage` (memory_per_rank reports the stage that needs most).
MemoryReport stage_memory(const Workload& w, const topo::DeviceModel& device, const std::vector<ScheduleKind>& kinds,
                          int stage);
// The same on the ranks the workload uses (0 .. world-1) of `c`: the device model with the smallest
// HBM among them. The workload must already fit the cluster (check_fits).
MemoryReport memory_per_rank(const Workload& w, const topo::Cluster& c, const std::vector<ScheduleKind>& kinds);

// InputError (file `workload_file`, path "$.parallel") when the report does not fit, with the
// breakdown and what to change.
void check_memory(const MemoryReport& r, const Workload& w, const std::string& workload_file);

// "142.3 GB": decimal gigabytes, as device datasheets give HBM.
std::string format_gb(Bytes b);

// {"parameters_bytes", ..., "total_bytes", "capacity_bytes", "fits", "device_model",
//  "comm_buffers_schedule", "params_per_rank", "breakdown": [{"what", "bytes", "formula"}]}
nlohmann::json to_json(const MemoryReport& r);
// One line for the table output: "memory per rank: 164.3 GB of 80.0 GB (h100-sxm): parameters ...".
std::string format_memory_line(const MemoryReport& r);

}  // namespace fusesim::model
