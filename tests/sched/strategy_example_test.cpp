// docs/extending.md's example of a fourth TP schedule, written in this one file and nowhere else:
// "Fuse-RS only" keeps the all-gathers as baseline collectives and lowers every reduce-scatter to
// CommFuse's Fuse-RS ring, by delegating to the shipped lowerings. What a user asks of it: does it
// compute what the unpartitioned layer computes (the reference executor), and is it the graph its
// description says.
#include <catch2/catch.hpp>

#include "fusesim/sched/strategy.hpp"
#include "fusesim/sched/tpsp.hpp"
#include "fusesim/sched/verify.hpp"
#include "sched_test_util.hpp"

using namespace fusesim;
using namespace fusesim::sched;

namespace {

class FuseRsOnly final : public tpsp::TpStrategy {
 public:
  int ag_calls(int, int) const override { return 1; }
  bool own_chunk_in_shard() const override { return false; }  // a collective all-gather copies every chunk
  bool ring_steps() const override { return false; }         // its AG regions are not rings
  tpsp::Deps all_gather(tpsp::Builder& b, const tpsp::RegionCall& r, const tpsp::Rows& g,
                        std::vector<std::vector<tpsp::AgCall>>*, StreamRef stream) const override {
    return tpsp::collective_all_gather(b, r, g, 1, stream);
  }
  tpsp::Deps reduce_scatter(tpsp::Builder& b, const tpsp::RegionCall& r, const tpsp::PerRank& pbuf,
                            const tpsp::PerRank& out) const override {
    return schedule_strategy(model::ScheduleKind::commfuse, model::ScheduleOptions{}).reduce_scatter(b, r, pbuf, out);
  }
};

TpspRequest request(int t, TpspPiece piece, const tpsp::TpStrategy& strategy) {
  TpspRequest r;
  r.shape = test::small_tp_shape(t, 2);
  r.options.scope = Scope::stack;
  r.piece = piece;
  r.piece_k = 16 * t;
  r.piece_n = 16 * t;
  r.tp_strategy = &strategy;
  return r;
}

}  // namespace

TEST_CASE("a schedule of one's own in one file: Fuse-RS only", "[sched][strategy]") {
  const FuseRsOnly fuse_rs_only;
  for (int t : {2, 3, 4}) {
    CAPTURE(t);
    // AG+GEMM: one all-gather collective per rank, no P2P. GEMM+RS: the Fuse-RS ring, t - 1 Sends,
    // Recvs and running-sum adds per rank, no collective.
    const Schedule ag = generate_tpsp(request(t, TpspPiece::ag_gemm, fuse_rs_only));
    const Schedule rs = generate_tpsp(request(t, TpspPiece::gemm_rs, fuse_rs_only));
    for (int rank = 0; rank < t; ++rank) {
      const test::TaskCount a = test::count_on_rank(ag.graph, rank), r = test::count_on_rank(rs.graph, rank);
      CHECK((a.collectives == 1 && a.sends == 0 && a.recvs == 0));
      CHECK((r.collectives == 0 && r.sends == t - 1 && r.recvs == t - 1 && r.adds == t - 1));
    }
    // A two-layer stack, forward and backward: per layer and rank, forward AG+QKV, AG+FC1 and the
    // backward's AG+FC2-dgrad, AG+out-proj-dgrad and the two re-gathers are 6 collectives; forward
    // out-proj+RS, FC2+RS and the backward's FC1 and QKV dgrad+RS are 4 Fuse-RS rings of t - 1 Sends.
    const Schedule stack = generate_tpsp(request(t, TpspPiece::layers, fuse_rs_only));
    for (int rank = 0; rank < t; ++rank) {
      const test::TaskCount c = test::count_on_rank(stack.graph, rank);
      CHECK(c.collectives == 2 * 6);
      CHECK(c.sends == 2 * 4 * (t - 1));
      CHECK(c.recvs == 2 * 4 * (t - 1));
    }
    // Each computes exactly what the unpartitioned computation does, in every visiting order.
    for (const Schedule* s : {&ag, &rs, &stack}) {
      const ExecuteResult result = execute(*s, ExecuteOptions{});
      INFO(result.error);
      CHECK(result.passed);
      CHECK(result.orders_run == 3);
    }
  }
}

TEST_CASE("the example schedule's ring is checked like the shipped ones", "[sched][strategy]") {
  // A wrong chunk at ring step 1 of rank 1's reduce-scatter (the fault hook) gives a wrong result.
  const FuseRsOnly fuse_rs_only;
  TpspRequest r = request(4, TpspPiece::gemm_rs, fuse_rs_only);
  r.fault = TpspFault{1, 0, 1, 1};
  const ExecuteResult result = execute(generate_tpsp(r), ExecuteOptions{});
  CHECK_FALSE(result.passed);
  CHECK_FALSE(result.error.empty());
}

namespace {

// docs/extending.md's example of a Ulysses schedule of one's own: Fuse-A2A in the forward (the QKV
// projection and attention computed per destination in ring order, each piece sent while the next is
// computed), DeepSpeed-Ulysses' collective all-to-alls in the backward. Each exchange's producer and
// receiver are lowered alike (a ring's Sends need the ring's Recvs); TP runs its own kind's strategy,
// so the TP part only delegates.
class FuseA2aForwardOnly final : public Strategy {
 public:
  int ag_calls(int t, int slices) const override { return tp().ag_calls(t, slices); }
  bool own_chunk_in_shard() const override { return tp().own_chunk_in_shard(); }
  bool ring_steps() const override { return tp().ring_steps(); }
  tpsp::Deps all_gather(tpsp::Builder& b, const tpsp::RegionCall& r, const tpsp::Rows& g,
                        std::vector<std::vector<tpsp::AgCall>>* plan, StreamRef stream) const override {
    return tp().all_gather(b, r, g, plan, stream);
  }
  tpsp::Deps reduce_scatter(tpsp::Builder& b, const tpsp::RegionCall& r, const tpsp::PerRank& pbuf,
                            const tpsp::PerRank& out) const override {
    return tp().reduce_scatter(b, r, pbuf, out);
  }

  UpWorkFn up_producer(UlyssesEmitter& e, const UpProducer& p) const override {
    return p.forward ? e.ring_producer(p) : UpWorkFn{};
  }
  std::vector<TaskId> up_exchange(UlyssesEmitter& e, const UpExchange& x, int ti) const override {
    return x.forward ? e.ring_exchange(x, ti) : e.collective_exchange(x, ti);
  }
  std::vector<TaskId> up_attention_forward(UlyssesEmitter& e, const UpAttention& a, int ti) const override {
    return e.ring_attention(a, ti);
  }
  std::vector<TaskId> up_attention_backward(UlyssesEmitter& e, const UpAttentionBwd& a, int ti,
                                            TaskId attention_bwd) const override {
    return e.collective_attention_bwd(a, ti, attention_bwd);
  }

 private:
  static const Strategy& tp() { return schedule_strategy(model::ScheduleKind::baseline, model::ScheduleOptions{}); }
};

int all_to_alls_on_rank(const TaskGraph& g, int rank) {
  int n = 0;
  for (TaskId id = 0; id < g.size(); ++id) {
    const auto* c = std::get_if<CollectiveTask>(&g.task(id).kind);
    if (g.task(id).rank == rank && c != nullptr && c->kind == CollectiveKind::all_to_all) ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("a Ulysses schedule of one's own in one file: Fuse-A2A forward, collectives backward", "[sched][strategy]") {
  const FuseA2aForwardOnly strategy;
  for (int up : {2, 3, 4}) {
    CAPTURE(up);
    TpspRequest r;
    r.shape = test::small_tp_shape(1);
    r.shape.up = up;
    r.shape.seq = 8 * up;
    r.shape.heads = 2 * up;
    r.shape.kv_heads = up;
    r.options.scope = Scope::stack;
    r.up_strategy = &strategy;
    const Schedule s = generate_tpsp(r);
    // Per layer and rank (tp 1: each producer runs once over the rank's seq/up rows): the forward's
    // QKV projection sends its block to each of the up - 1 other members and receives theirs, and
    // attention does the same with its output: 2 (up - 1) Sends and Recvs. The backward: one
    // all-to-all after the out-projection dgrad and one after the attention backward. Two layers.
    // (The DP sync over the up ranks is collectives of other kinds: all-reduces.)
    for (int rank = 0; rank < up; ++rank) {
      const test::TaskCount c = test::count_on_rank(s.graph, rank);
      CHECK(c.sends == 2 * 2 * (up - 1));
      CHECK(c.recvs == 2 * 2 * (up - 1));
      CHECK(all_to_alls_on_rank(s.graph, rank) == 2 * 2);
    }
    const ExecuteResult result = execute(s, ExecuteOptions{});
    INFO(result.error);
    CHECK(result.passed);
    CHECK(result.orders_run == 3);
  }
}
