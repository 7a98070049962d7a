// Ulysses (UP) inside the TPSP generator: rank layout and groups of TP x UP, matched transfers,
// region labels, the Fuse-A2A order, the weight layout, refusals, exactness of small layers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "fusesim/analysis/metrics.hpp"
#include "fusesim/model/kernel.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/sched/tpsp.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/sched/verify.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/error.hpp"

using namespace fusesim;
using namespace fusesim::sched;
using model::ScheduleKind;

namespace {

TpspRequest up_request(int tp, int up, int dp, ScheduleKind kind, bool gqa = false) {
  TpspRequest r;
  TpspShape& s = r.shape;
  s.tp = tp;
  s.up = up;
  s.dp = dp;
  s.seq = 4 * tp * up;
  s.batch = 2;
  s.hidden = 16;
  s.heads = 2 * tp * up;
  s.kv_heads = gqa ? 1 : 2 * tp * up;
  s.head_dim = 4;
  s.ffn = 4 * tp;
  s.gated = gqa;
  s.causal = gqa;
  r.kind = kind;
  r.up_kind = kind;
  r.schedule.kind = kind;
  r.schedule.slices = 2;
  return r;
}

const Region& region_of(const Schedule& s, const Task& t) {
  REQUIRE(t.labels.region >= 0);
  return s.graph.regions()[static_cast<std::size_t>(t.labels.region)];
}

}  // namespace

TEST_CASE("TP x UP: rank layout and the groups of every collective", "[sched][ulysses]") {
  // rank = (d up + u) tp + ti. TP collectives run over {(ti', u, d) : ti'} (tp consecutive ranks),
  // UP all-to-alls over {(ti, u', d) : u'} (stride tp): tp 2, up 2, dp 2 gives TP groups {0,1},
  // {2,3}, {4,5}, {6,7} and UP groups {0,2}, {1,3}, {4,6}, {5,7}.
  // Forward only: the DP gradient sync (groups {(ti, u, d') : d'}) belongs to the DP generator.
  TpspRequest r = up_request(2, 2, 2, ScheduleKind::baseline);
  r.options.backward = false;
  const Schedule s = generate_tpsp(r);
  validate(s.graph);
  REQUIRE(s.graph.num_ranks() == 8);
  CHECK(s.gpus == 8);
  std::set<std::vector<int>> tp_groups, up_groups;
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const auto* c = std::get_if<CollectiveTask>(&s.graph.task(id).kind);
    if (c == nullptr) continue;
    std::vector<int> g = c->group;
    std::sort(g.begin(), g.end());
    (c->kind == CollectiveKind::all_to_all ? up_groups : tp_groups).insert(g);
    CHECK(std::find(g.begin(), g.end(), s.graph.task(id).rank) != g.end());
  }
  CHECK(tp_groups == std::set<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(up_groups == std::set<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
}

TEST_CASE("UP: every transfer matched, every UP task in a region of parallelism up", "[sched][ulysses]") {
  for (auto kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse})
    for (int up : {2, 4, 8}) {
      INFO(model::to_string(kind) << " up=" << up);
      const Schedule s = generate_tpsp(up_request(1, up, 1, kind));
      validate(s.graph);  // every Send has its Recv (rank, peer, tag, bytes), every collective its members
      std::map<int, int> a2a_per_rank, sends_per_rank, recvs_per_rank;
      std::set<std::string> up_regions;
      for (TaskId id = 0; id < s.graph.size(); ++id) {
        const Task& t = s.graph.task(id);
        const auto* c = std::get_if<CollectiveTask>(&t.kind);
        const bool a2a = c != nullptr && c->kind == CollectiveKind::all_to_all;
        const bool p2p = std::holds_alternative<SendTask>(t.kind) || std::holds_alternative<RecvTask>(t.kind);
        if (!a2a && !p2p) continue;  // tp = 1: no TP communication at all
        CHECK(region_of(s, t).parallelism == Parallelism::up);
        up_regions.insert(region_of(s, t).name);
        if (a2a) ++a2a_per_rank[t.rank];
        if (std::holds_alternative<SendTask>(t.kind)) ++sends_per_rank[t.rank];
        if (std::holds_alternative<RecvTask>(t.kind)) ++recvs_per_rank[t.rank];
      }
      CHECK(up_regions == std::set<std::string>{"L0/fwd/qkv+a2a", "L0/fwd/attn+a2a", "L0/bwd/out_proj_dgrad+a2a",
                                                "L0/bwd/attn_bwd+a2a"});
      for (int r = 0; r < up; ++r) {
        if (kind == ScheduleKind::baseline) {
          CHECK(a2a_per_rank[r] == 4);  // one per exchange: before/after attention, forward and backward
          CHECK(sends_per_rank[r] == 0);
        } else if (kind == ScheduleKind::slice) {
          CHECK(a2a_per_rank[r] == 4 * 2);  // k = 2 slices each (4 positions per rank)
        } else {
          // Fuse-A2A: up - 1 Sends and Recvs per exchange (tp = 1: one call of the projection).
          CHECK(a2a_per_rank[r] == 0);
          CHECK(sends_per_rank[r] == 4 * (up - 1));
          CHECK(recvs_per_rank[r] == 4 * (up - 1));
        }
      }
    }
}

TEST_CASE("Fuse-A2A: head groups in ring order, the own one last and never sent", "[sched][ulysses]") {
  const int up = 4;
  const Schedule s = generate_tpsp(up_request(1, up, 1, ScheduleKind::commfuse));
  for (int u = 0; u < up; ++u) {
    std::vector<std::string> order;
    std::vector<int> peers;
    for (TaskId id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      if (t.rank != u || t.labels.phase != Phase::forward) continue;
      if (std::holds_alternative<ComputeTask>(t.kind) && t.labels.op.rfind("qkv/g", 0) == 0) order.emplace_back(t.labels.op);
      if (const auto* send = std::get_if<SendTask>(&t.kind); send && region_of(s, t).name == "L0/fwd/qkv+a2a")
        peers.push_back(send->peer);
    }
    INFO("u=" << u);
    // Rank u computes the groups of u+1, u+2, u+3 (mod 4), then its own, and sends the first three
    // to their owners in that order.
    std::vector<std::string> want;
    for (int i = 1; i <= up; ++i) want.push_back(fmt::format("qkv/g{}/r0", (u + i) % up));
    CHECK(order == want);
    CHECK(peers == std::vector<int>{(u + 1) % up, (u + 2) % up, (u + 3) % up});
  }
}

TEST_CASE("Fuse-A2A backward: per TP chunk, the own dQKV block first, then each as it is received",
          "[sched][ulysses]") {
  // TP and UP in commfuse. Rank (ti, u) runs the QKV dgrad's Fuse-RS step i on chunk
  // c = (ti - 1 - i) mod tp as up GEMMs, one per head group in ring order u, u-1, ..., each followed
  // on the compute stream by the wgrad GEMM of the same (chunk, group) (the Fuse-AG step that holds
  // chunk c), so that the wgrad of a block already received fills the wait for the next one. The
  // dgrad and wgrad of group p != u wait for the Recv of chunk c's rows from p (and no other UP
  // Recv), the own group's for no UP Recv at all; the wgrad also for chunk c of X (the AG ring's
  // Recv of c, none for the own chunk). The Sends go out chunk by chunk in that order, destinations
  // u+1, u+2, ... On the copy engine the AG ring's Send of step i + 1 goes before the RS ring's Send
  // of step i: AG 0, AG 1, RS 0, AG 2, RS 1, ..., AG tp-2, RS tp-3, RS tp-2.
  for (auto [tp, up] : {std::pair{2, 4}, std::pair{4, 2}}) {
    INFO("tp " << tp << " up " << up);
    TpspRequest r = up_request(tp, up, 1, ScheduleKind::commfuse);
    const Schedule s = generate_tpsp(r);
    validate(s.graph);
    const std::int64_t n = r.shape.rows() / up / tp;  // rows of a TP chunk
    std::map<std::string, TaskId> by_name;
    for (TaskId id = 0; id < s.graph.size(); ++id) by_name[std::string(s.graph.task(id).name)] = id;
    auto recvs_of = [&](const std::string& name, const std::string& region) {
      std::vector<std::string> recvs;
      for (TaskId pre : s.graph.predecessors(by_name.at(name))) {
        const Task& t = s.graph.task(pre);
        if (std::holds_alternative<RecvTask>(t.kind) && t.name.find(region) != std::string::npos)
          recvs.emplace_back(t.name);
      }
      return recvs;
    };
    for (int u = 0; u < up; ++u)
      for (int ti = 0; ti < tp; ++ti) {
        const int rank = u * tp + ti;
        INFO("rank " << rank);
        std::vector<std::string> order, sends, ring_sends;
        for (TaskId id = 0; id < s.graph.size(); ++id) {
          const Task& t = s.graph.task(id);
          if (t.rank != rank) continue;
          if (std::holds_alternative<ComputeTask>(t.kind) &&
              (t.labels.op.rfind("qkv_dgrad/g", 0) == 0 || t.labels.op.rfind("qkv_wgrad/g", 0) == 0))
            order.emplace_back(t.name);
          if (std::holds_alternative<SendTask>(t.kind) && t.name.find("/attn_bwd+a2a/send/") != std::string::npos)
            sends.emplace_back(t.name);
          const bool ring = t.name.find("L0/bwd/ag+qkv_wgrad/send/") != std::string::npos ||
                            t.name.find("L0/bwd/qkv_dgrad+rs/send/") != std::string::npos;
          if (std::holds_alternative<SendTask>(t.kind) && ring) ring_sends.emplace_back(t.name);
        }
        std::vector<std::string> want_order, want_sends, want_ring;
        for (int i = 0; i < tp; ++i) {
          const int c = ((ti - 1 - i) % tp + tp) % tp;
          for (int d = 0; d < up; ++d) {
            const int p = ((u - d) % up + up) % up;
            const std::string dgrad = fmt::format("r{}/L0/bwd/qkv_dgrad/g{}/c{}", rank, p, c);
            const std::string wgrad = fmt::format("r{}/L0/bwd/qkv_wgrad/g{}/c{}", rank, p, c);
            want_order.push_back(dgrad);
            want_order.push_back(wgrad);
            const std::vector<std::string> up_recv =
                d == 0 ? std::vector<std::string>{}
                       : std::vector<std::string>{fmt::format("r{}/L0/bwd/attn_bwd+a2a/recv/u{}/r{}", rank, p, c * n)};
            CHECK(recvs_of(dgrad, "/attn_bwd+a2a/") == up_recv);
            CHECK(recvs_of(wgrad, "/attn_bwd+a2a/") == up_recv);
            CHECK(recvs_of(wgrad, "/ag+qkv_wgrad/") ==
                  (c == ti ? std::vector<std::string>{}
                           : std::vector<std::string>{fmt::format("r{}/L0/bwd/ag+qkv_wgrad/recv/c{}", rank, c)}));
          }
          for (int d = 1; d < up; ++d)
            want_sends.push_back(fmt::format("r{}/L0/bwd/attn_bwd+a2a/send/q{}/r{}", rank, (u + d) % up, c * n));
        }
        // AG step j sends chunk (ti - j) mod tp, RS step i the running sum of (ti - 1 - i) mod tp.
        auto ag = [&](int j) { return fmt::format("r{}/L0/bwd/ag+qkv_wgrad/send/c{}", rank, ((ti - j) % tp + tp) % tp); };
        auto rs = [&](int i) {
          return fmt::format("r{}/L0/bwd/qkv_dgrad+rs/send/c{}", rank, ((ti - 1 - i) % tp + tp) % tp);
        };
        want_ring.push_back(ag(0));
        for (int i = 0; i < tp - 1; ++i) {
          if (i + 1 <= tp - 2) want_ring.push_back(ag(i + 1));
          want_ring.push_back(rs(i));
        }
        CHECK(order == want_order);
        CHECK(sends == want_sends);
        CHECK(ring_sends == want_ring);
      }
  }
}

TEST_CASE("UP weight layout: member-major blocks, replicated kv heads repeated", "[sched][ulysses]") {
  // 8 query heads, 2 kv heads, tp 1, up 4: each UP rank gets 2 query heads and, since 2 kv heads <
  // 4 ranks, a copy of the kv head its queries use (query heads 0-3 use kv head 0, 4-7 kv head 1).
  // W = (2 + 2 x 1) x 4 = 16 columns per block; the QKV GEMM has 4 x 16 = 64 columns.
  TpspShape s;
  s.tp = 1;
  s.up = 4;
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = 4;
  CHECK(s.kv_heads_up() == 1);
  CHECK(s.up_group_cols() == 16);
  CHECK(s.qkv_local() == 64);
  s.kv_heads = 8;  // two kv heads per UP rank: W = (2 + 2 x 2) x 4 = 24
  CHECK(s.kv_heads_up() == 2);
  CHECK(s.qkv_local() == 96);
  s.up = 1;  // without UP the usual q | k | v shard: 32 + 2 x 32
  CHECK(s.qkv_local() == 96);
}

TEST_CASE("UP refusals name the JSON path", "[sched][ulysses]") {
  auto path_of = [](const TpspRequest& r) {
    try {
      generate_tpsp(r);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  TpspRequest r = up_request(1, 2, 1, ScheduleKind::baseline);
  r.shape.kv_heads = 3;  // 3 kv heads over up 2: neither split nor replicated evenly
  r.shape.heads = 6;
  CHECK_THAT(path_of(r), Catch::Contains("$.parallel.up"));
  r = up_request(1, 4, 1, ScheduleKind::baseline);
  r.shape.seq = 6;  // not a multiple of tp x up = 4
  CHECK_THAT(path_of(r), Catch::Contains("$.training.sequence_length"));
  r = up_request(2, 2, 1, ScheduleKind::baseline);
  r.shape.heads = 6;  // 3 heads per TP rank over up 2
  r.shape.kv_heads = 6;
  CHECK_THAT(path_of(r), Catch::Contains("$.parallel.up"));
}

TEST_CASE("UP layers equal the unpartitioned layer (reference executor)", "[sched][ulysses][verify]") {
  VerifyOptions o;
  o.tps = {};
  o.dps = {};  // the DP cases: dp's tests
  o.pps = {};  // the pipeline cases: pipeline_test.cpp
  o.ups = {2, 4};
  o.slices = {1, 2};
  const VerifyReport report = verify_tpsp(o);
  // Per u: 3 shapes (up-gqa, up-mha, tp 2 x up) x (baseline, slice k1, slice k2, commfuse).
  CHECK(report.cases.size() == 2 * 3 * 4);
  for (const VerifyCase& c : report.cases) {
    INFO(c.name << ": " << c.result.error);
    CHECK(c.result.passed);
    CHECK(c.result.orders_run == 3);
  }
  // The fault hook reaches the UP exchanges: with tp 1 there is no TP region to corrupt, yet every
  // case fails.
  o.fault = TpspFault{1, 0, 1, 1};
  const VerifyReport bad = verify_tpsp(o);
  for (const VerifyCase& c : bad.cases) {
    INFO(c.name);
    CHECK_FALSE(c.result.passed);
  }
}

TEST_CASE("the shipped Ulysses workload: tp 8 x up 4 on 32 ranks", "[sched][ulysses]") {
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  const model::Workload w = model::load_workload("llama-3-8b-ulysses");
  GenerateOptions opt;
  opt.backward = false;
  const TpspRequest r = tpsp_request(w, "llama-3-8b-ulysses", c, ScheduleKind::commfuse, opt);
  CHECK(r.shape.tp == 8);
  CHECK(r.shape.up == 4);
  CHECK(r.up_kind == ScheduleKind::commfuse);
  // Llama-3-8B: 32 heads / 32 ranks = 1 query head each; 8 kv heads / tp 8 = 1 per TP rank, copied
  // to each of the 4 UP ranks: W = (1 + 2) x 128 = 384 columns, the QKV shard 4 x 384 = 1536.
  CHECK(r.shape.up_group_cols() == 384);
  CHECK(r.shape.qkv_local() == 1536);
  const Schedule s = generate_tpsp(r);
  validate(s.graph);
  CHECK(s.graph.num_ranks() == 32);
  CHECK(s.tokens == 131072);
}

TEST_CASE("TP x UP with different TP and UP schedules is exact", "[sched][ulysses][verify]") {
  // The UP exchange follows the calls the TP region makes to the projection (one over all rows,
  // one per TP slice, one per Fuse-AG step): every pairing must still compute the layer.
  for (auto tp_kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse})
    for (auto up_kind : {ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse}) {
      TpspRequest r = up_request(2, 2, 1, up_kind, true);
      r.kind = tp_kind;
      const Schedule s = generate_tpsp(r);
      validate(s.graph);
      const ExecuteResult e = execute(s, ExecuteOptions{});
      INFO("tp " << model::to_string(tp_kind) << " up " << model::to_string(up_kind) << ": " << e.error);
      CHECK(e.passed);
    }
}

TEST_CASE("UP ranks of one TP position sum their weight gradients together with the DP replicas", "[sched][ulysses][dp]") {
  // rank = (d * up + u) * tp + ti. Each UP rank computes its weight gradients over its own s/up
  // tokens, so the gradients of a TP position must be summed over all up x dp ranks holding it.
  // tp 2 x up 2 x dp 2, baseline: each rank's gradient sync is one all-reduce (ddp) whose group is
  // the 4 ranks of its TP position, in (d, u) order: {ti, 2 + ti, 4 + ti, 6 + ti}.
  TpspRequest r = up_request(2, 2, 2, ScheduleKind::baseline);
  r.dp_kind = ScheduleKind::baseline;
  const Schedule s = generate_tpsp(r);
  std::map<int, std::set<std::vector<int>>> groups;  // rank -> groups of its DP-region collectives
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    const auto* c = std::get_if<CollectiveTask>(&t.kind);
    if (c == nullptr || t.labels.region < 0 || region_of(s, t).parallelism != Parallelism::dp) continue;
    CHECK(c->kind == CollectiveKind::all_reduce);
    groups[t.rank].insert(c->group);
  }
  REQUIRE(groups.size() == 8);
  for (const auto& [rank, gs] : groups) {
    const int ti = rank % 2;
    CHECK(gs == std::set<std::vector<int>>{{ti, 2 + ti, 4 + ti, 6 + ti}});
  }
  // With dp = 1 the two UP ranks still sync: tp 2 x up 2 x dp 1 has groups {ti, 2 + ti}.
  TpspRequest r1 = up_request(2, 2, 1, ScheduleKind::baseline);
  const Schedule s1 = generate_tpsp(r1);
  int synced = 0;
  for (TaskId id = 0; id < s1.graph.size(); ++id) {
    const Task& t = s1.graph.task(id);
    const auto* c = std::get_if<CollectiveTask>(&t.kind);
    if (c == nullptr || t.labels.region < 0 || region_of(s1, t).parallelism != Parallelism::dp) continue;
    CHECK(c->group == std::vector<int>{t.rank % 2, 2 + t.rank % 2});
    ++synced;
  }
  CHECK(synced == 4);  // one all-reduce per rank
  // Mirrored: DP replica 0 (ranks 0..3). With collectives, its all-reduces keep the whole group and
  // nothing runs on replica 1. In the ring P2P form, its ring hop (u 0 -> u 1) is real and one proxy
  // receive per TP position sits on DP replica 1's first UP rank (4 + ti), of the Send of replica 0's
  // last UP rank (2 + ti) (tests/sched/symmetry_test.cpp checks the timing against every rank).
  r.options.mirror_dp = true;
  const Schedule mc = generate_tpsp(r);
  CHECK(mc.simulated_ranks == 4);
  for (TaskId id = 0; id < mc.graph.size(); ++id) {
    const Task& t = mc.graph.task(id);
    CHECK(t.rank < 4);
    if (const auto* c = std::get_if<CollectiveTask>(&t.kind); c != nullptr && region_of(mc, t).parallelism == Parallelism::dp)
      CHECK(c->group == std::vector<int>{t.rank % 2, 2 + t.rank % 2, 4 + t.rank % 2, 6 + t.rank % 2});
  }
  r.options.dp_as_p2p = true;
  const Schedule m = generate_tpsp(r);
  CHECK(m.simulated_ranks == 4);
  std::set<int> proxy_ranks, proxy_peers;
  for (TaskId id = 0; id < m.graph.size(); ++id) {
    const Task& t = m.graph.task(id);
    if (t.rank < 4) continue;
    const auto* recv = std::get_if<RecvTask>(&t.kind);
    REQUIRE(recv != nullptr);
    proxy_ranks.insert(t.rank);
    proxy_peers.insert(recv->peer);
  }
  CHECK(proxy_ranks == std::set<int>{4, 5});
  CHECK(proxy_peers == std::set<int>{2, 3});
}

TEST_CASE("UP selective recompute: each rank recomputes attention on its heads/(tp up) heads only",
          "[sched][ulysses][step][metrics]") {
  // After the Ulysses all-to-all a rank runs attention on heads/(tp up) query heads over the whole
  // sequence, so that is what selective recomputation repeats, once per layer and rank. Shape
  // (up_request): tp 2, up 2 (4 ranks), seq 16, batch 2, 8 heads of 4, full (non-causal) mask:
  //   per rank 8/(2 x 2) = 2 heads: 4 b heads s^2 d = 4 x 2 x 2 x 16^2 x 4 = 16384 FLOPs, so the
  //   hardware FLOPs exceed the model FLOPs by 4 ranks x 16384 = 65536 (one layer), and
  //   HFU / MFU = (F + 65536) / F. Counting heads/tp (the TP rank's heads before the exchange) would
  //   give 2x that. The same holds at tp 1, up 4 (2 heads per rank, seq 16, 8 heads): 65536.
  // Invariant: the recomputed FLOPs equal those of the forward's attention tasks.
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100");
  const model::RooflineCostModel costs;
  for (auto [tp, up] : {std::pair{2, 2}, std::pair{1, 4}})
    for (auto kind : {ScheduleKind::baseline, ScheduleKind::commfuse}) {
      INFO("tp=" << tp << " up=" << up << " " << model::to_string(kind));
      TpspRequest r = up_request(tp, up, 1, kind);
      r.options.scope = Scope::layer;
      r.step.recompute = model::Recompute::selective;
      const Schedule s = generate_tpsp(r);
      validate(s.graph);
      REQUIRE(r.shape.seq == 16);
      REQUIRE(r.shape.heads == 8);
      sim::Simulator sim(c, costs);
      const analysis::StepMetrics m = analysis::analyze(s, sim.run(s.graph), c, costs, topo::Dtype::bf16);
      CHECK(m.hardware_flops - m.model_flops == Approx(65536.0).epsilon(1e-12));
      CHECK(m.hfu / m.mfu == Approx((m.model_flops + 65536.0) / m.model_flops).epsilon(1e-12));
      double forward_attention = 0.0, recomputed = 0.0;
      for (TaskId id = 0; id < s.graph.size(); ++id) {
        const Task& t = s.graph.task(id);
        const auto* ct = std::get_if<ComputeTask>(&t.kind);
        const auto* a = ct != nullptr ? std::get_if<model::AttentionKernel>(&ct->kernel.get()) : nullptr;
        if (a == nullptr || a->pass != model::Pass::forward) continue;
        (ct->recompute ? recomputed : forward_attention) += costs.cost(ct->kernel, ct->dtype, c.device(t.rank)).flops;
      }
      CHECK(recomputed == Approx(forward_attention).epsilon(1e-12));
    }
}
