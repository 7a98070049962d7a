// Reference executor: every schedule computes exactly what the unpartitioned computation does, and a
// wrong chunk index or a missing dependency is caught.
#include <catch2/catch.hpp>

#include "fusesim/sched/dataflow.hpp"
#include "fusesim/sched/verify.hpp"

using namespace fusesim;
using namespace fusesim::sched;
using model::ScheduleKind;

TEST_CASE("verify_tpsp: every schedule equals the unpartitioned computation", "[sched][verify]") {
  VerifyOptions options;
  options.up_layers = false;  // TPSP cases only (the Ulysses cases: ulysses_test.cpp)
  options.dps.clear();  // no DP sync cases (dp_test.cpp)
  options.pps.clear();  // no pipeline cases (pipeline_test.cpp)
  const VerifyReport report = verify_tpsp(options);
  // Per t: AG+GEMM and GEMM+RS in baseline, slice k = 1, 2, 4 and commfuse (5 each); the two layer
  // cases (forward and backward: outputs, input and weight gradients) in those 5 and commfuse with
  // query-split (6 each): 10 + 12 = 22; four values of t: 88.
  CHECK(report.cases.size() == 88);
  for (const VerifyCase& c : report.cases) {
    INFO(c.name << ": " << c.result.error);
    CHECK(c.result.passed);
    CHECK(c.result.orders_run == 3);
    CHECK(c.result.max_abs_error < 1e-9);
  }
  CHECK(report.passed());
}

TEST_CASE("verify_tpsp fails on a shifted chunk index in every schedule", "[sched][verify]") {
  // Regions of a layer: 0 = AG+QKV, 1 = out-proj (+attention) + RS, 2 = AG+FC1, 3 = FC2+RS. The
  // AG+GEMM and GEMM+RS pieces have region 0 only.
  for (int region : {0, 1, 2, 3})
    for (int step : {0, 1}) {
      VerifyOptions o;
      o.up_layers = false;
      o.dps.clear();  // no DP sync cases (dp_test.cpp)
      o.pps.clear();  // no pipeline cases (pipeline_test.cpp)
      o.pieces = region == 0;
      o.fault = TpspFault{1, region, step, 1};
      const VerifyReport report = verify_tpsp(o);
      // 88 cases with the pieces, 48 (the layer cases) without.
      REQUIRE(report.cases.size() == (region == 0 ? 88u : 48u));
      for (const VerifyCase& c : report.cases) {
        INFO(c.name << " region " << region << " step " << step);
        CHECK_FALSE(c.result.passed);
        CHECK_FALSE(c.result.error.empty());
      }
      CHECK(report.failures() == static_cast<int>(report.cases.size()));
    }
  // The fault on another rank and a later ring step (t = 8 only has step 5).
  VerifyOptions o;
  o.up_layers = false;
  o.dps.clear();  // no DP sync cases (dp_test.cpp)
  o.pps.clear();  // no pipeline cases (pipeline_test.cpp)
  o.tps = {8};
  o.fault = TpspFault{6, 0, 5, 3};
  CHECK(verify_tpsp(o).failures() == 22);
}

namespace {

// A copy of a schedule's graph without the edge before -> after.
Schedule without_edge(const Schedule& s, TaskId before, TaskId after) {
  Schedule out = s;
  out.graph = TaskGraph(s.graph.num_ranks());
  for (const Region& r : s.graph.regions()) out.graph.add_region(r);
  for (TaskId id = 0; id < s.graph.size(); ++id) out.graph.add(s.graph.task(id));
  for (TaskId id = 0; id < s.graph.size(); ++id)
    for (TaskId succ : s.graph.successors(id))
      if (!(id == before && succ == after)) out.graph.depend(id, succ);
  return out;
}

TpspRequest ag_piece(int t) {
  TpspRequest r;
  r.shape.tp = t;
  r.shape.seq = 4 * t;
  r.shape.batch = 2;
  r.kind = ScheduleKind::commfuse;
  r.piece = TpspPiece::ag_gemm;
  r.piece_k = 8;
  r.piece_n = 4 * t;
  return r;
}

}  // namespace

TEST_CASE("a missing dependency is caught by one of the execution orders", "[sched][verify]") {
  const Schedule s = generate_tpsp(ag_piece(4));
  REQUIRE(execute(s, ExecuteOptions{}).passed);
  // Drop the edge from rank 0's first receive to its step-1 GEMM: the GEMM can then run before the
  // chunk has arrived (a Recv holds no stream, so nothing else orders them).
  TaskId recv = 0, gemm = 0;
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.rank != 0) continue;
    if (t.labels.op == "recv" && t.labels.step == 0) recv = id;
    if (t.labels.op == "gemm" && t.labels.step == 1) gemm = id;
  }
  const auto succ = s.graph.successors(recv);
  REQUIRE(std::find(succ.begin(), succ.end(), gemm) != succ.end());
  const ExecuteResult r = execute(without_edge(s, recv, gemm), ExecuteOptions{});
  CHECK_FALSE(r.passed);
  CHECK(r.error.find("holds no data") != std::string::npos);
}

TEST_CASE("the executor checks outputs against the reference, not against itself", "[sched][verify]") {
  // A 2-rank AG+GEMM whose output is compared with a different reference tensor must fail: swap the
  // expected column block of rank 0 and rank 1 (y[:, 0:4] <-> y[:, 4:8]).
  Schedule s = generate_tpsp(ag_piece(2));
  auto program = std::make_shared<DataflowProgram>(*s.dataflow);
  REQUIRE(program->outputs.size() == 2);
  std::swap(program->outputs[0].expect, program->outputs[1].expect);
  s.dataflow = program;
  const ExecuteResult r = execute(s, ExecuteOptions{});
  CHECK_FALSE(r.passed);
  CHECK(r.error.find("exceeds") != std::string::npos);
}

TEST_CASE("reference GEMM on a hand-checked 2x2 case", "[sched][verify]") {
  // x = [[1, 2], [3, 4]], w = [[5, 6], [7, 8]]: y = [[1x5 + 2x7, 1x6 + 2x8], [3x5 + 4x7, 3x6 + 4x8]]
  //   = [[19, 22], [43, 50]].
  DataflowProgram p;
  p.computation = "gemm";
  std::map<std::string, Matrix> in;
  in["x"] = Matrix{2, 2, {1, 2, 3, 4}};
  in["w"] = Matrix{2, 2, {5, 6, 7, 8}};
  const auto out = reference(p, in);
  CHECK(out.at("y").values == std::vector<double>{19, 22, 43, 50});
}

TEST_CASE("inputs are seeded and deterministic", "[sched][verify]") {
  DataflowProgram p;
  p.inputs = {TensorDecl{"x", 3, 5}, TensorDecl{"w", 5, 2}};
  const auto a = make_inputs(p, 7), b = make_inputs(p, 7), c = make_inputs(p, 8);
  CHECK(a.at("x").values == b.at("x").values);
  CHECK(a.at("x").values != c.at("x").values);
  for (double v : a.at("x").values) CHECK((v >= -1.0 && v < 1.0));
}
