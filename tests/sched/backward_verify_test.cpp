// Backward exactness: the reference executor runs the backward of whole TPSP layers (dgrad and wgrad
// GEMMs, the re-gather of the saved LayerNorm shards, attention, LayerNorm and activation backward)
// and compares the input and weight gradients with the unpartitioned chain rule. The unpartitioned
// gradients are themselves checked against finite differences, so that a wrong derivative cannot
// hide behind an executor and a reference that share it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "fusesim/sched/dataflow.hpp"
#include "fusesim/sched/verify.hpp"

using namespace fusesim;
using namespace fusesim::sched;
using model::ScheduleKind;

namespace {

TpspRequest train_layer(int t, ScheduleKind kind, bool gqa, int k = 2) {
  TpspRequest r;
  r.shape.tp = t;
  r.shape.seq = 4 * t;
  r.shape.batch = 2;
  r.shape.hidden = 16;
  r.shape.heads = 2 * t;
  r.shape.kv_heads = gqa ? 1 : t;
  r.shape.head_dim = 4;
  r.shape.ffn = 4 * t;
  r.shape.gated = gqa;
  r.shape.causal = gqa;
  r.shape.layers = 2;
  r.kind = kind;
  r.schedule.kind = kind;
  r.schedule.slices = k;
  r.options.scope = Scope::stack;
  return r;
}

// L = sum(dy * y_last): its gradients are what "tpsp_train" computes from the seeded dy.
double loss(const DataflowProgram& p, const std::map<std::string, Matrix>& in) {
  DataflowProgram fwd = p;
  fwd.computation = "tpsp_forward";
  const auto out = reference(fwd, in);
  const Matrix& y = out.at(fmt::format("L{}/y", p.attributes.at("layers") - 1));
  const Matrix& dy = in.at("dy");
  double s = 0.0;
  for (std::size_t i = 0; i < y.values.size(); ++i) s += y.values[i] * dy.values[i];
  return s;
}

}  // namespace

TEST_CASE("every task of a generated training layer carries a data op", "[sched][verify][backward]") {
  for (auto kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse}) {
    const Schedule s = generate_tpsp(train_layer(4, kind, true));
    REQUIRE(s.dataflow);
    CHECK(s.dataflow->computation == "tpsp_train");
    int backward = 0;
    for (TaskId id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      INFO(t.name);
      CHECK(t.data_op >= 0);
      if (t.labels.phase == Phase::backward) ++backward;
    }
    CHECK(backward > 0);
    // Per layer and rank: dx, dw_qkv, dw_o, dw1, dw2 besides the forward output y: 2 layers x 4
    // ranks x 6 outputs.
    CHECK(s.dataflow->outputs.size() == 2u * 4u * 6u);
  }
  // Without the forward there is nothing to differentiate: the backward is timing only.
  TpspRequest r = train_layer(4, ScheduleKind::commfuse, true);
  r.options.forward = false;
  const Schedule s = generate_tpsp(r);
  for (TaskId id = 0; id < s.graph.size(); ++id) CHECK(s.graph.task(id).data_op == -1);
}

TEST_CASE("the unpartitioned gradients match finite differences", "[sched][verify][backward]") {
  // Central differences of L = sum(dy * y) with step 1e-5: truncation ~ eps^2 x third derivative
  // ~ 1e-10, rounding ~ 1e-16 / 1e-5 = 1e-11; gradients are of order 1e-2 .. 1, so 1e-6 absolute
  // separates a right derivative from a wrong one (a wrong one is off by its own order).
  for (bool gqa : {true, false}) {
    const Schedule s = generate_tpsp(train_layer(2, ScheduleKind::baseline, gqa));
    const DataflowProgram& p = *s.dataflow;
    const auto in = make_inputs(p, 3);
    const auto grads = reference(p, in);
    const std::vector<std::pair<std::string, std::string>> pairs{
        {"x", "L0/dx"},         {"L1/w2", "L1/dw2"}, {"L1/w1", "L1/dw1"}, {"L1/w_o", "L1/dw_o"},
        {"L1/w_qkv", "L1/dw_qkv"}, {"L0/w_qkv", "L0/dw_qkv"}, {"L0/w1", "L0/dw1"}};
    for (const auto& [param, grad] : pairs) {
      const Matrix& g = grads.at(grad);
      REQUIRE(g.rows == in.at(param).rows);
      REQUIRE(g.cols == in.at(param).cols);
      // A spread of entries: every column block of w_qkv (q, k, v) is visited by the stride.
      const std::size_t n = g.values.size(), stride = std::max<std::size_t>(1, n / 23);
      for (std::size_t e = 0; e < n; e += stride) {
        auto plus = in, minus = in;
        const double eps = 1e-5;
        plus[param].values[e] += eps;
        minus[param].values[e] -= eps;
        const double fd = (loss(p, plus) - loss(p, minus)) / (2 * eps);
        INFO((gqa ? "gqa " : "mha ") << grad << "[" << e << "]");
        CHECK(std::abs(fd - g.values[e]) < 1e-6);
      }
    }
  }
}

TEST_CASE("backward of every schedule equals the unpartitioned gradients", "[sched][verify][backward]") {
  // verify_tpsp's layer cases run forward and backward; here the output list is checked to include
  // the gradients, and t = 1 (every region degenerates to its GEMM on the local shard) is added.
  for (int t : {1, 2, 3, 4, 8})
    for (auto kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse})
      for (bool gqa : {true, false}) {
        TpspRequest r = train_layer(t, kind, gqa, t == 3 ? 4 : 2);
        const Schedule s = generate_tpsp(r);
        std::set<std::string> checked;
        for (const OutputCheck& o : s.dataflow->outputs)
          for (const Piece& piece : o.expect) checked.insert(piece.tensor);
        for (const char* name : {"L0/dx", "L1/dx", "L0/dw_qkv", "L0/dw_o", "L0/dw1", "L0/dw2", "L1/dw2"})
          CHECK(checked.count(name) == 1);
        const ExecuteResult e = execute(s, ExecuteOptions{});
        INFO("t=" << t << " " << model::to_string(kind) << (gqa ? " gqa" : " mha") << ": " << e.error);
        CHECK(e.passed);
        CHECK(e.orders_run == 3);
      }
}

TEST_CASE("separate projections compute what the fused GEMMs do, in every schedule", "[sched][verify][backward]") {
  // q, k, v (and gate, up) as GEMMs of their own column blocks, their dgrads accumulated into one
  // input gradient: forward and backward must equal the unpartitioned computation exactly as before.
  for (int t : {1, 2, 4})
    for (auto kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse})
      for (bool gqa : {true, false}) {
        TpspRequest r = train_layer(t, kind, gqa);
        r.shape.separate_projections = true;
        const Schedule s = generate_tpsp(r);
        const ExecuteResult e = execute(s, ExecuteOptions{});
        INFO("t=" << t << " " << model::to_string(kind) << (gqa ? " gqa" : " mha") << ": " << e.error);
        CHECK(e.passed);
      }
}

TEST_CASE("a shifted chunk in any backward region is caught in every schedule", "[sched][verify][backward]") {
  // One layer (layer-mha-gelu-full): regions 0-3 forward, then backward 4 = AG+fc2 dgrad, 5 = fc1
  // dgrad+RS, 6 = re-gather+fc1 wgrad, 7 = AG+out-proj dgrad, 8 = qkv dgrad+RS, 9 = re-gather+qkv
  // wgrad. Two layers (stack2): 8..13 backward of L1, 14..19 backward of L0.
  for (int region = 4; region < 20; ++region)
    for (int step : {0, 1}) {
      VerifyOptions o;
      o.pieces = false;
      o.up_layers = false;  // TPSP cases only (the Ulysses cases: ulysses_test.cpp)
      o.dps.clear();  // no DP sync cases (dp_test.cpp)
      o.pps.clear();  // no pipeline cases (pipeline_test.cpp)
      o.fault = TpspFault{1, region, step, 1};
      const VerifyReport report = verify_tpsp(o);
      REQUIRE(report.cases.size() == 48u);
      int checked = 0;
      for (const VerifyCase& c : report.cases) {
        // Regions 4..7 of the stack are its L1 forward, and 10.. do not exist in the single layer.
        const bool backward = c.piece == "layer-mha-gelu-full" ? region <= 9 : region >= 8;
        if (!backward) continue;
        ++checked;
        INFO(c.name << " region " << region << " step " << step);
        CHECK_FALSE(c.result.passed);
        CHECK_FALSE(c.result.error.empty());
      }
      CHECK(checked == (region <= 7 ? 24 : region <= 9 ? 48 : 24));
    }
}

TEST_CASE("a missing edge into a backward fused wgrad step is caught", "[sched][verify][backward]") {
  // CommFuse re-gather of the LayerNorm-2 shard fused with the FC1 wgrad: drop the edge from rank 0's
  // step-0 receive to its step-1 wgrad GEMM. The GEMM may then run before the chunk arrives.
  const Schedule s = generate_tpsp(train_layer(4, ScheduleKind::commfuse, false));
  REQUIRE(execute(s, ExecuteOptions{}).passed);
  TaskId recv = kNoTask, gemm = kNoTask;
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.rank != 0 || t.labels.layer != 0 || t.labels.region < 0) continue;
    if (s.graph.regions().at(t.labels.region).name != "L0/bwd/ag+fc1_wgrad") continue;
    if (t.labels.op == "recv" && t.labels.step == 0) recv = id;
    if (t.labels.op == "fc1_wgrad" && t.labels.step == 1) gemm = id;
  }
  REQUIRE(recv != kNoTask);
  REQUIRE(gemm != kNoTask);
  Schedule cut = s;
  cut.graph = TaskGraph(s.graph.num_ranks());
  for (const Region& r : s.graph.regions()) cut.graph.add_region(r);
  for (TaskId id = 0; id < s.graph.size(); ++id) cut.graph.add(s.graph.task(id));
  int dropped = 0;
  for (TaskId id = 0; id < s.graph.size(); ++id)
    for (TaskId succ : s.graph.successors(id)) {
      if (id == recv && succ == gemm) {
        ++dropped;
        continue;
      }
      cut.graph.depend(id, succ);
    }
  REQUIRE(dropped == 1);
  const ExecuteResult r = execute(cut, ExecuteOptions{});
  CHECK_FALSE(r.passed);
  CHECK(r.error.find("holds no data") != std::string::npos);
}
