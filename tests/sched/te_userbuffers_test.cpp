// The TP baseline as Megatron-LM runs it with --tp-comm-overlap (schedule.tp_baseline
// "te_userbuffers", src/sched/strategy/te_userbuffers.cpp): TransformerEngine's method per GEMM.
#include <catch2/catch.hpp>

#include <algorithm>
#include <utility>
#include <variant>
#include <vector>

#include "fusesim/model/workload.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/sched/tpsp.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/sched/verify.hpp"
#include "sched_test_util.hpp"

using namespace fusesim;
using namespace fusesim::sched;

namespace {

TpspRequest request(int t) {
  TpspRequest r;
  r.shape = test::small_tp_shape(t, 2);  // 8 positions per TP chunk: TE's 4 pipeline splits of 2 positions
  r.kind = r.up_kind = r.dp_kind = model::ScheduleKind::baseline;
  r.schedule.kind = model::ScheduleKind::baseline;
  r.schedule.tp_baseline_te_userbuffers = true;
  r.options.scope = Scope::stack;
  return r;
}

}  // namespace

TEST_CASE("te_userbuffers: ring exchange, pipelined and bulk overlaps per GEMM", "[sched][strategy]") {
  for (int t : {2, 4}) {
    CAPTURE(t);
    // Per layer and rank (transformer_engine/pytorch/module/base.py's default methods):
    // ring exchange for the all-gathers before qkv_fprop, fc1_fprop, proj_dgrad and fc2_dgrad, each a
    // ring of t - 1 Sends and Recvs: 4 (t - 1); pipeline for the reduce-scatters after proj_fprop and
    // fc2_fprop, 4 splits each: 8 reduce-scatters; bulk for qkv and fc1 dgrad (2 reduce-scatters)
    // and wgrad (the 2 re-gathers of the saved LayerNorm outputs). Two layers: twice that.
    const Schedule s = generate_tpsp(request(t));
    for (int rank = 0; rank < t; ++rank) {
      const test::TaskCount c = test::count_on_rank(s.graph, rank);
      CHECK(c.sends == 2 * 4 * (t - 1));
      CHECK(c.recvs == 2 * 4 * (t - 1));
      CHECK(c.reduce_scatters == 2 * (8 + 2));
      CHECK(c.all_gathers == 2 * 2);
    }
    // It computes what the unpartitioned layers compute, in every visiting order.
    const ExecuteResult result = execute(s, ExecuteOptions{});
    INFO(result.error);
    CHECK(result.passed);
  }
}

TEST_CASE("te_userbuffers' kernels hold TE's 16 SMs, not the device's NCCL channels", "[sched][strategy]") {
  // TE's initialize_ub gives the pipeline and bulk methods num_sm 16 whatever NCCL would use on the
  // device (24 inside an H100 node); the plain baseline's collectives keep -1 (the device's default),
  // and an explicit schedule.comm_sms wins over both.
  const auto collective_sms = [](const TpspRequest& r) {
    std::vector<int> out;
    const Schedule s = generate_tpsp(r);
    for (TaskId id = 0; id < s.graph.size(); ++id)
      if (const auto* c = std::get_if<CollectiveTask>(&s.graph.task(id).kind)) out.push_back(c->sms);
    return out;
  };
  TpspRequest te = request(2), plain = request(2), fixed = request(2);
  plain.schedule.tp_baseline_te_userbuffers = false;
  fixed.schedule.comm_sms = 8;
  for (const auto& [r, sms] : {std::pair{&te, 16}, std::pair{&plain, -1}, std::pair{&fixed, 8}}) {
    const std::vector<int> got = collective_sms(*r);
    REQUIRE_FALSE(got.empty());
    CHECK(std::all_of(got.begin(), got.end(), [&](int v) { return v == sms; }));
  }
}

TEST_CASE("te_userbuffers is the baseline's only: slice and commfuse keep their lowering", "[sched][strategy]") {
  // The option names what the TP baseline is; the other schedules are what they are.
  for (const model::ScheduleKind kind : {model::ScheduleKind::slice, model::ScheduleKind::commfuse}) {
    TpspRequest with = request(2), without = request(2);
    with.kind = without.kind = kind;
    without.schedule.tp_baseline_te_userbuffers = false;
    CHECK(generate_tpsp(with).graph.size() == generate_tpsp(without).graph.size());
  }
}

TEST_CASE("te_userbuffers refuses a sequence its pipeline cannot split, naming the key", "[sched][strategy]") {
  // Llama-3-8B at TP 8: each TP chunk cut in TE's 4 pipeline splits needs the sequence divisible by
  // 8 x 4 = 32; 8,200 is not (8,192 is).
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100");
  model::Workload w = model::load_workload("llama-3-8b");
  w.arch.layers = 1;
  w.schedule.tp_baseline_te_userbuffers = true;
  w.sequence_length = 8200;
  GenerateOptions o;
  try {
    generate(w, "llama-3-8b", c, model::ScheduleKind::baseline, o);
    FAIL("a sequence of 8,200 was accepted");
  } catch (const fusesim::InputError& e) {
    CHECK(e.json_path() == "$.schedule.tp_baseline");
  }
  w.sequence_length = 8192;
  CHECK_NOTHROW(generate(w, "llama-3-8b", c, model::ScheduleKind::baseline, o));
}
