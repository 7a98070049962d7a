#pragma once
// The reference executor behind `fusesim verify`: runs a generated schedule's dataflow program
// (sched/dataflow.hpp) on small seeded float64 matrices and compares its outputs with the
// unpartitioned computation. The DAG is executed in several valid orders (each honours the task
// edges, the stream order of every (rank, stream), Send before its Recv, and runs all members of a
// collective together), so that a missing dependency shows up as a read of data that has not
// arrived or as a different result in one of the orders.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fusesim/model/workload.hpp"
#include "fusesim/sched/dataflow.hpp"
#include "fusesim/sched/dp.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/sched/step.hpp"
#include "fusesim/sched/tpsp.hpp"

namespace fusesim::sched {

struct Matrix {
  std::int64_t rows = 0, cols = 0;
  std::vector<double> values;  // row-major
  double& at(std::int64_t r, std::int64_t c) { return values[static_cast<std::size_t>(r * cols + c)]; }
  double at(std::int64_t r, std::int64_t c) const { return values[static_cast<std::size_t>(r * cols + c)]; }
};

// How the executor picks among the tasks ready at once.
enum class VisitOrder { lowest_id, highest_id, seeded_random };
std::string to_string(VisitOrder o);

struct ExecuteOptions {
  std::uint64_t seed = 1;  // inputs and the random order
  std::vector<VisitOrder> orders{VisitOrder::lowest_id, VisitOrder::highest_id,
                                     VisitOrder::seeded_random};
  double tolerance = 1e-9;                   // max abs error allowed
  std::int64_t max_elements = 20'000'000;    // refuse larger programs (buffers + inputs)
};

struct ExecuteResult {
  bool passed = false;
  double max_abs_error = 0.0;  // over all orders and outputs
  int orders_run = 0;
  std::string error;           // first failure: the order, the task and what went wrong
};

// Seeded inputs of a program (deterministic: same seed, same values on every platform).
std::map<std::string, Matrix> make_inputs(const DataflowProgram& program, std::uint64_t seed);
// The unpartitioned computation named by program.computation: "gemm" (y = x w), "tpsp_forward"
// (L{l}/y for each layer) or "tpsp_train" (also, backward from "dy", L{l}/dx and the weight
// gradients L{l}/dw_qkv, dw_o, dw1, dw2). Returns inputs and results together.
std::map<std::string, Matrix> reference(const DataflowProgram& program, std::map<std::string, Matrix> inputs);

// Runs the schedule in every order of `options` and compares with the reference. Never throws for a
// wrong schedule: a failure is reported in the result.
ExecuteResult execute(const Schedule& schedule, const ExecuteOptions& options);

// Test hooks of verify_pipeline_order: `loss_first`, the last stage starts with its first loss
// gradient (before any forward reached it); `swap_receives`, stage 1 expects its first two
// activations in the other order (needs two stages and two micro-batches); `weight_first`, the last
// stage starts with its first W (ZB-H1), before the B it belongs to.
enum class PipelineFault { none, loss_first, swap_receives, weight_first };

struct VerifyOptions {
  std::vector<int> tps{2, 3, 4, 8};
  std::vector<int> slices{1, 2, 4};
  std::vector<model::ScheduleKind> kinds = model::all_schedule_kinds();
  bool pieces = true;   // AG+GEMM and GEMM+RS alone
  bool layers = true;   // whole TPSP layers, forward and backward (activation and weight gradients)
  // Ulysses: whole layers (QKV projection + all-to-all, attention + all-to-all, forward and backward)
  // with tp 1 x up u for every u, and tp 2 x up u for u in {2, 4}, against the unpartitioned layer.
  std::vector<int> ups{2, 4, 8};
  bool up_layers = true;
  ExecuteOptions execute;
  TpspFault fault;      // test hook applied to every generated schedule
  // DP: the gradient sync of every sharding and schedule for each dp (sched/dp.hpp, verify_dp).
  std::vector<int> dps{2, 4, 8};
  DpFault dp_fault;     // test hook applied to every DP case
  // Pipeline parallelism: the micro-batch orders of 1F1B and interleaved 1F1B for each stage count
  // (verify_pipeline).
  std::vector<int> pps{2, 3, 4};
  PipelineFault pp_fault = PipelineFault::none;
};

struct VerifyCase {
  std::string name;     // "ag_gemm/commfuse/t4", "layer-gqa/slice-k2/t8", ...
  std::string piece;
  std::string schedule;
  int tp = 0;
  int up = 1;           // Ulysses degree (1: TPSP only)
  int dp = 1;           // DP degree of a DP sync case
  int slices = 0;       // 0 unless slice
  std::size_t tasks = 0;
  ExecuteResult result;
};

// One case of a verify run: generates the schedule with `make`, validates it and executes it into
// `c.tasks` and `c.result`. A generator or validation error is the case's failure, not an exception.
void run_verify_case(VerifyCase& c, const std::function<Schedule()>& make, const ExecuteOptions& options);

struct VerifyReport {
  std::vector<VerifyCase> cases;
  bool passed() const;
  int failures() const;
};

// Every schedule for every t and k of the options: AG+GEMM, GEMM+RS, a two-layer stack with GQA
// (kv heads replicated), gated MLP and causal attention, and a layer with kv heads split over the
// ranks, a plain MLP and full attention; CommFuse with and without query-split attention.
VerifyReport verify_tpsp(const VerifyOptions& options);

// DP: a piece where each of `dp` replicas (one rank each) computes three weight gradients of its own
// seeded inputs by wgrad GEMMs accumulated over two steps, then synchronises them (`kind`: baseline
// after the backward, slice = bucketed, commfuse = fused with the last wgrad step); the outputs are
// the sum over the replicas (reference computation "dp_grad_sum").
// `as_p2p`: the sync's collectives as ring P2P steps (DpConfig::as_p2p, the form `--symmetry p2p`
// and `mirror` simulate).
struct DpPieceRequest {
  int dp = 2;
  model::DpSharding sharding = model::DpSharding::ddp;
  model::ScheduleKind kind = model::ScheduleKind::baseline;
  DpFault fault;
  bool as_p2p = false;
  // The ring P2P form's replicas per node: the rings it runs (topo/rings.hpp, DpConfig::replica_nodes),
  // one per replica a node holds when dp spans two or more nodes; 0: one node, one ring.
  int replicas_per_node = 0;
};
Schedule generate_dp_piece(const DpPieceRequest& request);
// Appends the DP cases (dp in options.dps; ddp, zero1, zero3; options.kinds; collectives and their
// ring P2P form) to `report`.
void verify_dp(const VerifyOptions& options, VerifyReport& report);

// Pipeline parallelism (docs/schedules.md, "Pipeline"): every stage runs sched::pipeline_order for
// `shape` on small seeded matrices (layer l: y = tanh(x W_l), 3 x 4 micro-batches, 4 x 4 weights),
// the stages passing each micro-batch's activation forward and its gradient back through first-in
// first-out channels, one per (sender, receiver, direction), as NCCL matches send/recv between two
// ranks in the order they are posted. Passes when no stage waits forever, every transfer is
// received in the order it was sent, every forward is differentiated once, and each micro-batch's
// output and input gradient and each layer's weight gradient summed over the micro-batches equal
// those of the micro-batches run one after the other through the whole model (max abs error < 1e-9).
ExecuteResult verify_pipeline_order(const PipelineShape& shape, std::uint64_t seed,
                                    PipelineFault fault = PipelineFault::none);
// Appends the pipeline cases: for each p in options.pps, 1F1B at m = 1, p - 1 (p > 2), p and 2p + 1
// micro-batches, interleaved with 2 chunks at m = p and 2p, with 3 chunks at m = 2p; two layers a
// chunk.
void verify_pipeline(const VerifyOptions& options, VerifyReport& report);

}  // namespace fusesim::sched
