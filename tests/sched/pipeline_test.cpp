// Pipeline parallelism: the order each stage runs its micro-batches in (sched/step.hpp
// pipeline_order), the bubble it leaves, exact on a compute-only pipeline, and the generator's
// stages (sched/tpsp.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "../sim/sim_test_util.hpp"
#include "fusesim/analysis/metrics.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/sched/step.hpp"
#include "fusesim/sched/tpsp.hpp"
#include "fusesim/sched/verify.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/util/error.hpp"
#include "sched_test_util.hpp"

using namespace fusesim;
using namespace fusesim::sched;

namespace {

// "F0 F1 B0 ...": the forwards and backwards of a stage's order, by micro-batch, with ".c" and the
// chunk when there are several (a forward is named at its first layer, a backward at its last).
std::string compress(const std::vector<StepWork>& order, const PipelineShape& shape) {
  std::string out;
  const std::int64_t n = shape.chunk_layers();
  for (std::size_t i = 0; i < order.size(); ++i) {
    const StepWork& w = order[i];
    const bool first_fwd = w.phase == StepPhase::forward_layer && w.layer % n == 0;
    const bool first_bwd = w.phase == StepPhase::backward_layer && w.layer % n == n - 1;
    const bool first_w = w.phase == StepPhase::backward_weight && w.layer % n == n - 1;
    if (!first_fwd && !first_bwd && !first_w) continue;
    const std::int64_t chunk = w.layer / (n * shape.stages);
    if (!out.empty()) out += ' ';
    out += fmt::format("{}{}", first_fwd ? 'F' : first_bwd ? 'B' : 'W', w.micro_batch);
    if (shape.virtual_stages > 1) out += fmt::format(".{}", chunk);
  }
  return out;
}

}  // namespace

TEST_CASE("1F1B: warm-up forwards, one forward one backward, cool-down backwards", "[pipeline]") {
  // p = 4, m = 8 (Megatron's forward_backward_pipelining_without_interleaving): stage s runs
  // min(p - s - 1, m) forwards first; then F(w + i), B(i) for i < m - w; then the last w backwards.
  const PipelineShape shape{4, 1, 8, 8};
  CHECK(compress(pipeline_order(shape, 0), shape) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  CHECK(compress(pipeline_order(shape, 2), shape) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  CHECK(compress(pipeline_order(shape, 3), shape) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  // Fewer micro-batches than stages: every forward is warm-up on stage 0.
  const PipelineShape few{4, 1, 2, 4};
  CHECK(compress(pipeline_order(few, 0), few) == "F0 F1 B0 B1");
  // The pieces around the layers of stage 1 of 4 (2 layers each): receive, layers, send; backward the
  // same mirrored. Stage 0 has the embedding (forward_begin, backward_end), stage 3 the loss.
  const std::vector<StepWork> s1 = pipeline_order(PipelineShape{4, 1, 1, 8}, 1);
  const std::vector<StepWork> expect{
      {StepPhase::forward_recv, 0, 2},   {StepPhase::forward_layer, 0, 2},  {StepPhase::forward_layer, 0, 3},
      {StepPhase::forward_send, 0, 4},   {StepPhase::backward_recv, 0, 3}, {StepPhase::backward_layer, 0, 3},
      {StepPhase::backward_layer, 0, 2}, {StepPhase::backward_send, 0, 1}};
  CHECK(s1 == expect);
  const std::vector<StepWork> s0 = pipeline_order(PipelineShape{4, 1, 1, 8}, 0);
  CHECK(s0.front() == StepWork{StepPhase::forward_begin, 0, -1});
  CHECK(s0.back() == StepWork{StepPhase::backward_end, 0, -1});
  const std::vector<StepWork> s3 = pipeline_order(PipelineShape{4, 1, 1, 8}, 3);
  CHECK(s3[3] == StepWork{StepPhase::backward_begin, 0, -1});
}

TEST_CASE("ZB-H1: 1F1B's warm-up, s backwards whose W waits, then F B W", "[pipeline]") {
  // p = 4, m = 8 (model::zb_h1_passes, the order of the authors' ZeroBubbleH1Pipeline with exact
  // semantics): stage s runs min(p - s - 1, m) forwards, then s x (F, B), then F, B, W while forwards
  // remain, then B, W, then the s Ws held back; each W is the oldest pending one.
  const PipelineShape shape{4, 1, 8, 8, true};
  CHECK(compress(pipeline_order(shape, 0), shape) ==
        "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
  CHECK(compress(pipeline_order(shape, 1), shape) ==
        "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7");
  CHECK(compress(pipeline_order(shape, 3), shape) ==
        "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
  // Fewer micro-batches than stages: stage 3 runs F B F B and then both Ws; stage 0 only warm-up
  // forwards, then B, W.
  const PipelineShape few{4, 1, 2, 4, true};
  CHECK(compress(pipeline_order(few, 3), few) == "F0 B0 F1 B1 W0 W1");
  CHECK(compress(pipeline_order(few, 0), few) == "F0 F1 B0 W0 B1 W1");
  // A W of stage 1 of 4 (2 layers each) is the weight gradients of its layers, last first, after the
  // B's send: the B is what the stage before waits for.
  const std::vector<StepWork> s1 = pipeline_order(PipelineShape{4, 1, 1, 8, true}, 1);
  const std::vector<StepWork> expect{
      {StepPhase::forward_recv, 0, 2},    {StepPhase::forward_layer, 0, 2},  {StepPhase::forward_layer, 0, 3},
      {StepPhase::forward_send, 0, 4},    {StepPhase::backward_recv, 0, 3}, {StepPhase::backward_layer, 0, 3},
      {StepPhase::backward_layer, 0, 2},  {StepPhase::backward_send, 0, 1}, {StepPhase::backward_weight, 0, 3},
      {StepPhase::backward_weight, 0, 2}};
  CHECK(s1 == expect);
}

TEST_CASE("Interleaved 1F1B follows Megatron-LM's chunk order", "[pipeline]") {
  // p = 2, v = 2, m = 4, 8 layers: chunk c of stage s holds layers [(2c + s) 2, (2c + s) 2 + 2).
  // Forward k: chunk (k / p) % v, micro-batch (k / (p v)) p + k % p; backward k: chunk v - 1 - that.
  // Stage 0: warm-up (p - 0 - 1) 2 + (v - 1) p = 4 forwards: F0.0 F1.0 F0.1 F1.1; then forward 4..7
  // with backward 0..3: F2.0 B0.1, F3.0 B1.1, F2.1 B0.0, F3.1 B1.0; then backward 4..7: B2.1 B3.1 B2.0 B3.0.
  const PipelineShape shape{2, 2, 4, 8};
  CHECK(compress(pipeline_order(shape, 0), shape) ==
        "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  // Stage 1: warm-up (v - 1) p = 2 forwards.
  CHECK(compress(pipeline_order(shape, 1), shape) ==
        "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // m == p: every forward first (Megatron's all-warm-up case).
  const PipelineShape one_group{2, 2, 2, 8};
  CHECK(compress(pipeline_order(one_group, 1), one_group) == "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
}

TEST_CASE("Every stage runs each of its layers once per micro-batch each way, and every send meets a receive",
          "[pipeline]") {
  for (const PipelineShape& shape :
       {PipelineShape{4, 1, 8, 8}, PipelineShape{3, 1, 2, 6}, PipelineShape{2, 2, 4, 8}, PipelineShape{4, 3, 8, 24},
        PipelineShape{2, 4, 2, 8}, PipelineShape{4, 1, 8, 8, true}, PipelineShape{3, 1, 2, 6, true},
        PipelineShape{4, 1, 3, 12, true}}) {
    std::multiset<std::tuple<std::int64_t, std::int64_t, bool, std::int64_t>> sent, received;  // (mb, layer, fwd, to)
    for (std::int64_t s = 0; s < shape.stages; ++s) {
      std::map<std::pair<std::int64_t, std::int64_t>, int> fwd, bwd, wgt;
      for (const StepWork& w : pipeline_order(shape, s)) {
        if (w.phase == StepPhase::forward_layer) ++fwd[{w.micro_batch, w.layer}];
        if (w.phase == StepPhase::backward_layer) {
          CHECK(fwd[{w.micro_batch, w.layer}] == 1);  // a layer's backward after its forward
          ++bwd[{w.micro_batch, w.layer}];
        }
        if (w.phase == StepPhase::backward_weight) {
          CHECK(bwd[{w.micro_batch, w.layer}] == 1);  // a W after its B
          ++wgt[{w.micro_batch, w.layer}];
        }
        const std::int64_t next = (s + 1) % shape.stages, prev = (s + shape.stages - 1) % shape.stages;
        if (w.phase == StepPhase::forward_send) sent.insert({w.micro_batch, w.layer, true, next});
        if (w.phase == StepPhase::backward_send) sent.insert({w.micro_batch, w.layer, false, prev});
        if (w.phase == StepPhase::forward_recv || w.phase == StepPhase::backward_recv)
          received.insert({w.micro_batch, w.layer, w.phase == StepPhase::forward_recv, s});
      }
      const auto per_stage = static_cast<std::size_t>(shape.micro_batches * shape.virtual_stages * shape.chunk_layers());
      CHECK(fwd.size() == per_stage);
      CHECK(bwd.size() == per_stage);
      for (const auto& [key, count] : bwd) CHECK(count == 1);
      CHECK(wgt.size() == (shape.zero_bubble ? per_stage : 0));  // ZB-H1: each layer's W once
      for (const auto& [key, count] : wgt) CHECK(count == 1);
    }
    CHECK(sent == received);
    // (p v - 1) boundaries, each crossed by every micro-batch both ways.
    CHECK(sent.size() == static_cast<std::size_t>(2 * (shape.stages * shape.virtual_stages - 1) * shape.micro_batches));
  }
}

namespace {

// A compute-only pipeline: one rank per stage, each layer's forward tf ps and backward tb ps, the
// stage transfers as dependencies across ranks (no time). Returns the analysis with its stages.
analysis::StepMetrics compute_only(const PipelineShape& shape, TimePs tf, TimePs tb, TimePs tw = 0) {
  const auto stages = static_cast<int>(shape.stages);
  const topo::Cluster cluster = sim_test::star(stages);
  const sim_test::TestCostModel costs;
  TaskGraph g(stages);
  using Key = std::tuple<std::int64_t, std::int64_t, bool>;  // (micro-batch, layer, forward)
  std::map<Key, TaskId> sender, receiver;
  for (int s = 0; s < stages; ++s) {
    TaskId last = kNoTask;
    std::optional<Key> waiting;
    for (const StepWork& w : pipeline_order(shape, s)) {
      const bool fwd = w.phase == StepPhase::forward_layer;
      if (fwd || w.phase == StepPhase::backward_layer) {
        const std::string name = fmt::format("r{}/mb{}/L{}/{}", s, w.micro_batch, w.layer, fwd ? "fwd" : "bwd");
        last = g.add(sim_test::compute(name, s, static_cast<double>(fwd ? tf : tb)));
        if (waiting) receiver[*waiting] = last;
        waiting.reset();
      } else if (w.phase == StepPhase::backward_weight) {
        // ZB-H1's W: on the stage's stream after what came before it, which includes its B; nothing waits for it.
        const std::string name = fmt::format("r{}/mb{}/L{}/w", s, w.micro_batch, w.layer);
        g.add(sim_test::compute(name, s, static_cast<double>(tw)));
      } else if (w.phase == StepPhase::forward_send || w.phase == StepPhase::backward_send) {
        sender[{w.micro_batch, w.layer, w.phase == StepPhase::forward_send}] = last;
      } else if (w.phase == StepPhase::forward_recv || w.phase == StepPhase::backward_recv) {
        waiting = Key{w.micro_batch, w.layer, w.phase == StepPhase::forward_recv};
      }
    }
  }
  REQUIRE(sender.size() == receiver.size());
  for (const auto& [key, to] : receiver) g.depend(sender.at(key), to);
  const sim::SimResult result = sim::Simulator(cluster, costs).run(g);
  analysis::AnalysisInput in{g, result, cluster, costs, topo::Dtype::bf16, 1, stages, "x", "pp", "step"};
  in.pipeline_stages = stages;
  return analysis::analyze(in);
}

}  // namespace

TEST_CASE("A compute-only 1F1B pipeline idles (p - 1) / (m + p - 1) of the step on every stage, exactly", "[pipeline]") {
  // Every stage does m (tF + tB) of work, tF = n tf and tB = n tb for its n layers. The last stage
  // cannot start micro-batch 0 before the p - 1 stages ahead of it have each run their forward, and
  // stage 0 cannot end before micro-batch m - 1's gradient has come back through them:
  // T = (m + p - 1)(tF + tB), every stage idle (p - 1)(tF + tB), a fraction (p - 1) / (m + p - 1).
  for (const auto& [p, m, layers] : {std::tuple{4, 8, 8}, std::tuple{2, 3, 4}, std::tuple{4, 4, 4}, std::tuple{8, 16, 16}}) {
    const PipelineShape shape{p, 1, m, layers};
    const TimePs tf = 1'000'000, tb = 2'000'000;
    const TimePs stage = shape.chunk_layers() * (tf + tb);
    const analysis::StepMetrics r = compute_only(shape, tf, tb);
    INFO("p " << p << " m " << m);
    CHECK(r.step_time_ps == (m + p - 1) * stage);
    REQUIRE(r.stages.size() == static_cast<std::size_t>(p));
    for (const analysis::StageMetrics& st : r.stages) {
      CHECK(st.bubble_ps == (p - 1) * stage);
      CHECK(st.bubble_ps * (m + p - 1) == r.step_time_ps * (p - 1));
      CHECK(st.bubble_fraction == Approx(static_cast<double>(p - 1) / (m + p - 1)).epsilon(1e-12));
      CHECK(st.compute_ps == m * stage);
    }
    // The critical path is compute alone (transfers take no time here): it ends with the last
    // backward on stage 0 and, walking back, never waits.
    REQUIRE(r.critical_path.has_value());
    CHECK(r.critical_path->compute_ps == r.step_time_ps);
    CHECK(r.critical_path->comm_ps == 0);
    CHECK(r.critical_path->wait_ps == 0);
    TimePs by_stage = 0;
    for (TimePs ps : r.critical_path->stage_compute_ps) by_stage += ps;
    CHECK(by_stage == r.step_time_ps);
  }
}

TEST_CASE("A compute-only ZB-H1 pipeline with T_F = T_B = T_W idles (p - 1) T on every stage, a third of 1F1B's",
          "[pipeline]") {
  // n layers a stage, each tf = tb = tw = t: a stage's F, B and W take T = n t each. Micro-batch 0's F
  // runs on stage s in [s T, (s + 1) T); stage s runs its p - s forwards before its first B back to
  // back in [s T, p T), each arriving as stage s - 1 ends it; the loss's B runs on stage p - 1 in
  // [p T, (p + 1) T) and on stage s in [(2p - 1 - s) T, (2p - s) T): stage s idles s T first and
  // (p - 1 - s) T before that B, (p - 1) T = (p - 1)(T_F + T_B - T_W) in all. From that B on no stage
  // waits; for p = 4, m = 8, T = 1, its passes start at (a hand-run of the orders above; each F on
  // stage s after stage s - 1 ended it, each B after stage s + 1 ended its B):
  //   stage 0: F0..F3 at 0-3, B0 7, W0 8, F4 9, B1 10, W1 11, ... B7 25, W7 26
  //   stage 1: F0..F2 at 1-3, B0 6, F3 7, B1 8, W0 9, F4 10, B2 11, W1 12, ... B7 24, W6 25, W7 26
  //   stage 3: F0 3, B0 4, F1 5, B1 6, F2 7, B2 8, F3 9, B3 10, W0 11, F4 12, ..., B7 22, W4..W7 23-26
  // so every stage ends at (2p - 1 - s) T + (3m - (p - s)) T = (3m + p - 1) T: the step; each stage
  // computes 3 m T and idles (p - 1) T. 1F1B with the same work (its backward B and W together, 2T) takes
  // (m + p - 1) 3T and idles (p - 1) 3T: ZB-H1's bubble is a third of it, 2 (p - 1) T shorter.
  for (const auto& [p, m, layers] :
       {std::tuple{4, 8, 8}, std::tuple{2, 3, 4}, std::tuple{4, 4, 4}, std::tuple{8, 16, 16}}) {
    const PipelineShape shape{p, 1, m, layers, true};
    const TimePs t = 1'000'000;
    const TimePs T = shape.chunk_layers() * t;
    const analysis::StepMetrics r = compute_only(shape, t, t, t);
    const analysis::StepMetrics flat = compute_only(PipelineShape{p, 1, m, layers}, t, 2 * t);
    INFO("p " << p << " m " << m);
    CHECK(r.step_time_ps == (3 * m + p - 1) * T);
    CHECK(flat.step_time_ps == (m + p - 1) * 3 * T);
    CHECK(flat.step_time_ps - r.step_time_ps == 2 * (p - 1) * T);
    REQUIRE(r.stages.size() == static_cast<std::size_t>(p));
    for (std::size_t s = 0; s < r.stages.size(); ++s) {
      CHECK(r.stages[s].bubble_ps == (p - 1) * T);
      CHECK(3 * r.stages[s].bubble_ps == flat.stages[s].bubble_ps);
      CHECK(r.stages[s].compute_ps == 3 * m * T);
    }
  }
}

TEST_CASE("ZB-H1's step is never longer than 1F1B's on the same compute-only pipeline", "[pipeline]") {
  // ZB-H1 runs 1F1B's passes with some Ws later, and its Bs wait for no W: for any pass times, stages
  // and micro-batches (fewer than the stages too) its step is at most 1F1B's (whose backward is B + W).
  for (std::int64_t p : {2, 3, 4})
    for (std::int64_t m : {std::int64_t{1}, std::int64_t{2}, p, 2 * p + 1})
      for (const auto& [tf, tb, tw] : {std::tuple{1, 1, 1}, std::tuple{1, 2, 1}, std::tuple{2, 1, 3},
                                       std::tuple{3, 2, 2}, std::tuple{1, 3, 1}, std::tuple{4, 1, 1}}) {
        const TimePs unit = 1'000'000;
        const analysis::StepMetrics zb =
            compute_only(PipelineShape{p, 1, m, 2 * p, true}, tf * unit, tb * unit, tw * unit);
        const analysis::StepMetrics base = compute_only(PipelineShape{p, 1, m, 2 * p}, tf * unit, (tb + tw) * unit);
        INFO("p " << p << " m " << m << " tF " << tf << " tB " << tb << " tW " << tw);
        CHECK(zb.step_time_ps <= base.step_time_ps);
      }
}

TEST_CASE("The interleaved schedule divides the compute-only bubble by v", "[pipeline]") {
  // v chunks of n / v layers each: the bubble is (p - 1) chunk times, (p - 1)(tF + tB) / v, with the
  // same per-stage work m (tF + tB): T = m (tF + tB) + (p - 1)(tF + tB) / v.
  for (const auto& [p, v, m] : {std::tuple{4, 2, 8}, std::tuple{2, 2, 4}, std::tuple{4, 4, 8}, std::tuple{2, 3, 2}}) {
    const std::int64_t layers = 4 * p * v;
    const PipelineShape shape{p, v, m, layers};
    const TimePs tf = 1'000'000, tb = 2'000'000;
    const TimePs stage = layers / p * (tf + tb), chunk = shape.chunk_layers() * (tf + tb);
    const analysis::StepMetrics r = compute_only(shape, tf, tb);
    const analysis::StepMetrics flat = compute_only(PipelineShape{p, 1, m, layers}, tf, tb);
    INFO("p " << p << " v " << v << " m " << m);
    CHECK(r.step_time_ps == m * stage + (p - 1) * chunk);
    for (std::size_t s = 0; s < r.stages.size(); ++s) {
      CHECK(r.stages[s].bubble_ps == (p - 1) * chunk);
      CHECK(r.stages[s].bubble_ps * v == flat.stages[s].bubble_ps);
    }
  }
}

namespace {

TpspRequest pipeline_request(int tp, int dp, int pp, int v, std::int64_t micro_batches) {
  TpspRequest r;
  r.shape = test::small_tp_shape(tp);
  r.shape.dp = dp;
  r.shape.layers = 8;
  r.shape.pp = pp;
  r.shape.virtual_stages = v;
  r.kind = r.dp_kind = r.up_kind = model::ScheduleKind::baseline;
  r.schedule.kind = model::ScheduleKind::baseline;
  r.options.scope = Scope::step;
  r.step = StepOptions{micro_batches, model::Recompute::none, model::DpSharding::ddp, 64 * tp, std::nullopt, false, 1};
  return r;
}

}  // namespace

TEST_CASE("Generated stages: each rank runs its own layers, the embedding on the first, the loss on the last",
          "[pipeline][step]") {
  // tp 2 x dp 2 x pp 4 (16 ranks, stage-major: ranks 4s .. 4s + 3 are stage s), 8 layers, 4
  // micro-batches, 1F1B: stage s holds layers 2s, 2s + 1.
  const TpspRequest req = pipeline_request(2, 2, 4, 1, 4);
  const Schedule s = generate_tpsp(req);
  validate(s.graph);
  CHECK(s.graph.num_ranks() == 16);
  CHECK(s.gpus == 16);
  CHECK(s.pipeline_stages == 4);
  CHECK(s.tokens == 8 * 2 * 2 * 4);  // rows x dp x micro-batches: the stages share the tokens
  std::map<int, std::set<int>> layers;
  std::map<int, int> sends, recvs, embedding, head;
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.labels.layer >= 0 && std::holds_alternative<ComputeTask>(t.kind)) layers[t.rank].insert(t.labels.layer);
    if (t.labels.op == "pp_send" || t.labels.op == "pp_grad_send") ++sends[t.rank];
    if (t.labels.op == "pp_recv" || t.labels.op == "pp_grad_recv") ++recvs[t.rank];
    if (t.name.find("embedding/fwd/lookup") != std::string::npos) ++embedding[t.rank];
    if (t.name.find("lm_head") != std::string::npos) ++head[t.rank];
  }
  for (int rank = 0; rank < 16; ++rank) {
    const int stage = rank / 4;
    INFO("rank " << rank);
    CHECK(layers[rank] == std::set<int>{2 * stage, 2 * stage + 1});
    // Activations forward from stages 0..2, gradients back from stages 1..3: one per micro-batch.
    CHECK(sends[rank] == 4 * ((stage < 3) + (stage > 0)));
    CHECK(recvs[rank] == sends[rank]);
    CHECK(embedding[rank] == (stage == 0 ? 4 : 0));
    CHECK((head[rank] > 0) == (stage == 3));
  }
  // The activation a TP rank sends is its sequence shard, [n, h] bf16: 8 rows x 32 x 2 B.
  for (TaskId id = 0; id < s.graph.size(); ++id)
    if (const auto* send = std::get_if<SendTask>(&s.graph.task(id).kind))
      if (s.graph.task(id).labels.op == "pp_send") CHECK(send->bytes == 8 * 32 * 2);
}

TEST_CASE("Stages split the work without changing it", "[pipeline][step]") {
  // The same model and micro-batches with pp 1, 2 and 4 (1F1B) and interleaved (pp 2, v 2): the
  // FLOPs of the whole job agree, and each stage's ranks do a pp-th of the layers' work.
  const topo::Cluster cluster = sim_test::star(16);
  const sim_test::TestCostModel base;
  struct Costs final : model::KernelCostModel {
    const sim_test::TestCostModel& base;
    explicit Costs(const sim_test::TestCostModel& b) : base(b) {}
    model::KernelCost cost(const model::Kernel& k, topo::Dtype d, const topo::DeviceModel& dev) const override {
      if (const auto* a = std::get_if<model::AttentionKernel>(&k)) {
        model::KernelCost c;
        c.flops = 4.0 * static_cast<double>(a->batch * a->heads * a->seq_q * a->seq_kv * a->head_dim);
        c.duration_ps = static_cast<TimePs>(c.flops);
        return c;
      }
      return base.cost(k, d, dev);
    }
    double rate(const model::KernelCost& c, const topo::DeviceModel& d, const model::DeviceLoad& l) const override {
      return base.rate(c, d, l);
    }
  } costs(base);
  sim::Simulator sim(cluster, costs);
  double reference = 0.0;
  for (const auto& [pp, v] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{4, 1}, std::pair{2, 2}}) {
    const Schedule s = generate_tpsp(pipeline_request(2, 1, pp, v, 4));
    const sim::SimResult res = sim.run(s.graph);
    const analysis::StepMetrics m = analysis::analyze(s, res, cluster, costs, topo::Dtype::bf16);
    INFO("pp " << pp << " v " << v);
    if (pp == 1) reference = m.model_flops;
    CHECK(m.model_flops == Approx(reference).epsilon(1e-12));
    CHECK(m.stages.size() == static_cast<std::size_t>(pp > 1 ? pp : 0));
    for (const analysis::StageMetrics& st : m.stages) {
      CHECK(st.bubble_ps > 0);
      CHECK(st.bubble_ps < m.step_time_ps);
    }
  }
}

TEST_CASE("overlap_param_gather with stages: each stage gathers its own layers in its first forward",
          "[pipeline][step][dp]") {
  // tp 2 x dp 2 x pp 2 (ranks 0-3 stage 0, 4-7 stage 1), 8 layers, 4 micro-batches, ZeRO-1. Megatron's
  // --overlap-param-gather per stage: stage 0 gathers the embedding rows, then one gather per layer it
  // holds in micro-batch 0's forward, in the order it runs them (interleaved, v 2: chunk 0's layers,
  // then chunk 1's); stage 1, whose gradients Megatron does not bucket, gathers all of its parameters
  // (its layers and the LM head rows) as one when the step begins; nothing is gathered after the
  // optimizer. A TP rank's layer holds 3,072 parameters (QKV 32 x 32 + O 16 x 32 + FC1 32 x 32 + FC2
  // 16 x 32, the shape of step_test), a table (vocab 128 / tp 2) x h 32 = 2,048, 2 bytes each.
  const topo::Cluster cluster = topo::load_cluster_by_name_or_path("dgx-h100");
  const model::RooflineCostModel costs;
  sim::Simulator sim(cluster, costs);
  for (int v : {1, 2}) {
    INFO("v " << v);
    auto gathers = [&](bool overlap) {
      TpspRequest r = pipeline_request(2, 2, 2, v, 4);
      r.step.dp_sharding = model::DpSharding::zero1;
      r.step.overlap_param_gather = overlap;
      r.schedule.dp_bucket_bytes = 128;
      Schedule s = generate_tpsp(r);
      validate(s.graph);
      CHECK(sim.run(s.graph).makespan_ps > 0);  // runs to the end: every gather is matched
      return s;
    };
    const Schedule during = gathers(true), after = gathers(false);
    auto per_rank = [](const Schedule& s, std::map<int, std::vector<std::string>>* names) {
      std::map<int, Bytes> bytes;
      for (TaskId id = 0; id < s.graph.size(); ++id) {
        const Task& t = s.graph.task(id);
        const auto* c = std::get_if<CollectiveTask>(&t.kind);
        if (c == nullptr || c->kind != CollectiveKind::all_gather) continue;
        if (t.labels.op != "dp_param_all_gather" && t.name.find("dp/param_ag") == std::string::npos) continue;
        bytes[t.rank] += c->bytes;
        if (names != nullptr) (*names)[t.rank].emplace_back(t.name);
      }
      return bytes;
    };
    std::map<int, std::vector<std::string>> order;
    const auto moved = per_rank(during, &order);
    CHECK(moved == per_rank(after, nullptr));  // the same parameters, moved earlier
    const std::vector<int> stage0 = v == 1 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 1, 4, 5};
    const std::vector<int> stage1 = v == 1 ? std::vector<int>{4, 5, 6, 7} : std::vector<int>{2, 3, 6, 7};
    for (int rank = 0; rank < 8; ++rank) {
      INFO("rank " << rank);
      std::vector<std::string> expect;
      if (rank < 4) {
        expect.push_back(fmt::format("r{}/embedding/dp_param_ag", rank));
        for (int l : stage0) expect.push_back(fmt::format("r{}/L{}/fwd/dp_param_ag", rank, l));
      } else {
        expect.push_back(fmt::format("r{}/params/dp_param_ag", rank));
      }
      CHECK(order[rank] == expect);
      CHECK(moved.at(rank) == (4 * 3'072 + 2'048) * 2);
    }
    auto named = [&](const Schedule& s, const std::string& name) {
      for (TaskId id = 0; id < s.graph.size(); ++id)
        if (s.graph.task(id).name == name) return id;
      FAIL("no task " << name);
      return TaskId{0};
    };
    // Stage 1's gather is dispatched when the step begins, and every layer of its first forward waits
    // for it; stage 0's first layer is gathered once the embedding (gathered first) has run.
    const TaskId all = named(during, "r4/params/dp_param_ag");
    CHECK(during.graph.predecessors(all).empty());
    std::set<std::string> waiting;
    for (TaskId id : during.graph.successors(all)) waiting.emplace(during.graph.task(id).name);
    for (int l : stage1) CHECK(waiting.count(fmt::format("r4/L{}/fwd/ln1", l)) == 1);
    CHECK(!during.graph.predecessors(named(during, "r0/L0/fwd/dp_param_ag")).empty());
    // Without the overlap, the gradients' reduce-scatter: buckets of 128 bytes on stage 0 (one per
    // gradient: each is larger), one on stage 1.
    std::map<int, int> buckets;
    for (TaskId id = 0; id < after.graph.size(); ++id) {
      const Task& t = after.graph.task(id);
      if (t.labels.op == "dp_reduce_scatter") ++buckets[t.rank];
    }
    CHECK(buckets.at(0) > 4);
    CHECK(buckets.at(4) == 1);
  }
}

TEST_CASE("Generated ZB-H1 stages: the same tasks as 1F1B, each layer's weight gradients where the order puts W",
          "[pipeline][step]") {
  // tp 2 x dp 2 x pp 2 (ranks 0-3 stage 0, 4-7 stage 1), 8 layers, 4 micro-batches, DDP. ZB-H1 moves
  // tasks, it adds and drops none. Stage 1 (the last) runs F0 B0 F1 B1 W0 ...: micro-batch 0's wgrads
  // (its layers 4-7) come after micro-batch 1's backward on the compute stream; stage 0 runs each W
  // right after its B.
  TpspRequest one = pipeline_request(2, 2, 2, 1, 4);
  TpspRequest zb = one;
  zb.shape.zero_bubble = true;
  const Schedule a = generate_tpsp(one), b = generate_tpsp(zb);
  validate(b.graph);
  auto names = [](const Schedule& s) {
    std::multiset<std::string> out;
    for (TaskId id = 0; id < s.graph.size(); ++id) out.emplace(s.graph.task(id).name);
    return out;
  };
  CHECK(names(a) == names(b));
  auto id_of = [&](const std::string& name) {
    for (TaskId id = 0; id < b.graph.size(); ++id)
      if (b.graph.task(id).name == name) return id;
    FAIL("no task " << name);
    return TaskId{0};
  };
  CHECK(id_of("r4/L7/bwd/fc2_wgrad") > id_of("r4/mb1/L4/bwd/residual1_bwd"));
  CHECK(id_of("r4/L4/bwd/qkv_wgrad") < id_of("r4/mb2/L4/fwd/ln1"));
  CHECK(id_of("r0/L0/bwd/qkv_wgrad") < id_of("r0/mb2/L0/fwd/ln1"));
  CHECK(id_of("r0/L0/bwd/qkv_wgrad") > id_of("r0/L0/bwd/residual1_bwd"));
  // The DP sync of a stage waits for the last micro-batch's Ws: stage 1 reduces its gradients as one
  // bucket, after micro-batch 3's QKV wgrad of layer 4, its last W.
  const std::vector<TaskId> before = b.graph.predecessors(id_of("r4/dp/bucket0/all_reduce"));
  CHECK(std::find(before.begin(), before.end(), id_of("r4/mb3/L4/bwd/qkv_wgrad")) != before.end());
  const topo::Cluster cluster = topo::load_cluster_by_name_or_path("dgx-h100");
  const model::RooflineCostModel costs;
  sim::Simulator sim(cluster, costs);
  CHECK(sim.run(b.graph).makespan_ps > 0);  // runs to the end: every transfer and collective is matched
}

TEST_CASE("Pipeline requests that cannot be built are refused with the key at fault", "[pipeline]") {
  auto path_of = [](TpspRequest r) {
    try {
      generate_tpsp(r);
    } catch (const InputError& e) {
      return e.json_path();
    }
    return std::string("accepted");
  };
  TpspRequest r = pipeline_request(2, 1, 3, 1, 4);  // 8 layers over 3 stages
  CHECK(path_of(r) == "$.parallel.pp");
  r = pipeline_request(2, 1, 2, 2, 3);  // interleaved with 3 micro-batches over 2 stages
  CHECK(path_of(r) == "$.training.grad_accumulation");
  r = pipeline_request(2, 1, 2, 1, 4);
  r.options.scope = Scope::stack;
  CHECK(path_of(r) == "$.parallel.pp");
  r = pipeline_request(2, 2, 2, 1, 4);
  r.step.dp_sharding = model::DpSharding::zero3;
  CHECK(path_of(r) == "$.parallel.dp_sharding");
  r = pipeline_request(2, 1, 2, 2, 4);  // ZB-H1 interleaved
  r.shape.zero_bubble = true;
  CHECK(path_of(r) == "$.parallel.virtual_stages");
  r = pipeline_request(2, 1, 1, 1, 4);  // ZB-H1 without stages
  r.shape.zero_bubble = true;
  CHECK(path_of(r) == "$.parallel.pp_schedule");
  CHECK(path_of(pipeline_request(2, 2, 2, 1, 4)) == "accepted");
}

TEST_CASE("every stage's pipeline order computes what the unpipelined model computes", "[pipeline][verify]") {
  // 1F1B and interleaved 1F1B for 2-4 stages, fewer micro-batches than stages to several times as
  // many: the stages' orders pass activations and gradients first in first out, and the outputs,
  // input gradients and weight gradients summed over the micro-batches are those of the micro-batches
  // run one after the other (the same floating-point operations in the same order: exactly equal).
  for (std::int64_t p : {2, 3, 4})
    for (std::int64_t v : {1, 2, 3})
      for (std::int64_t m : {p, 2 * p, 3 * p}) {
        const PipelineShape shape{p, v, m, p * v * 2};
        INFO(fmt::format("p {} v {} m {}", p, v, m));
        const ExecuteResult r = verify_pipeline_order(shape, 7);
        INFO(r.error);
        CHECK(r.passed);
        CHECK(r.max_abs_error == 0.0);
      }
  for (std::int64_t m : {1, 2, 3, 5}) {  // 1F1B with any count, fewer than the stages too
    const ExecuteResult r = verify_pipeline_order(PipelineShape{4, 1, m, 8}, 3);
    INFO(r.error);
    CHECK(r.passed);
  }
  // ZB-H1: each B keeps its layer's input and gradient until the W, which adds the weight gradient;
  // the Ws of a layer run in micro-batch order, so the sums are again exactly the reference's.
  for (std::int64_t p : {2, 3, 4})
    for (std::int64_t m : {std::int64_t{1}, p - 1, p, 2 * p + 1}) {
      if (m < 1) continue;
      INFO(fmt::format("zb-h1 p {} m {}", p, m));
      const ExecuteResult r = verify_pipeline_order(PipelineShape{p, 1, m, 2 * p, true}, 5);
      INFO(r.error);
      CHECK(r.passed);
      CHECK(r.max_abs_error == 0.0);
    }
}

TEST_CASE("a pipeline order that disagrees between stages or differentiates too early fails",
          "[pipeline][verify]") {
  // Stage 1 posts its receive of micro-batch 1's activation first; stage 0 sends micro-batch 0's
  // first, and NCCL matches send/recv between two ranks in posting order.
  const ExecuteResult swapped = verify_pipeline_order(PipelineShape{2, 1, 4, 4}, 1, PipelineFault::swap_receives);
  CHECK_FALSE(swapped.passed);
  CHECK(swapped.error ==
        "stage 1, forward_recv of micro-batch 1 at layer 2: the next transfer from stage 0 is micro-batch 0's at "
        "layer 2: the two stages' orders disagree");
  const ExecuteResult early = verify_pipeline_order(PipelineShape{3, 2, 3, 12}, 1, PipelineFault::loss_first);
  CHECK_FALSE(early.passed);
  CHECK(early.error == "stage 2, backward_begin of micro-batch 0: the loss gradient before the forward reached the loss");
  // A W before its B (the last stage of 3, layers 4 and 5, starts with its first W: layer 5's).
  const ExecuteResult w_first = verify_pipeline_order(PipelineShape{3, 1, 4, 6, true}, 1, PipelineFault::weight_first);
  CHECK_FALSE(w_first.passed);
  CHECK(w_first.error == "stage 2, backward_weight of micro-batch 0 at layer 5: no B whose weight gradient is pending");
  // verify_tpsp's report carries the pipeline cases: for 2 stages 1F1B at m 1, 2, 5, interleaved v 2
  // at m 2, 4 and v 3 at m 4, ZB-H1 at m 1, 2, 5 (9); for 3 and 4 stages also 1F1B and ZB-H1 at
  // m = p - 1 (11 each): 31.
  VerifyOptions o;
  o.pieces = o.layers = o.up_layers = false;
  o.dps.clear();
  const VerifyReport report = verify_tpsp(o);
  CHECK(report.cases.size() == 31);
  CHECK(report.passed());
}
