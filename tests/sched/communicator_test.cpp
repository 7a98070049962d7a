// The communicators' streams: every group's transfers on streams of its own, so that no group's
// transfer queues behind another's in stream order; engines and SMs from the schedule options.
#include <catch2/catch.hpp>

#include <set>
#include <utility>
#include <vector>

#include "fusesim/sched/communicator.hpp"
#include "fusesim/sched/generate.hpp"

using namespace fusesim;
using namespace fusesim::sched;

TEST_CASE("each group's streams are its own", "[sched][communicator]") {
  model::ScheduleOptions o;
  o.comm_sms = 16;
  o.collective_engine = model::CommEngine::copy_engine;
  o.p2p_engine = model::CommEngine::sm_kernel;
  const Communicators c = make_communicators(o);
  // Hand-assigned: TP comm 0 / copy 0, UP comm 1 / copy 1, DP comm 3 (collectives and ZeRO's
  // parameter gathers: one NCCL communicator, whose collectives run in the order issued), copy 2,
  // comm 4 (SM-kernel P2P), its adds on compute 1.
  CHECK(c.tp.collective_stream == StreamRef{StreamKind::comm, 0});
  CHECK(c.up.collective_stream == StreamRef{StreamKind::comm, 1});
  CHECK(c.dp.collective_stream == StreamRef{StreamKind::comm, 3});
  CHECK(c.dp.gather_stream == StreamRef{StreamKind::comm, 3});
  CHECK(c.dp.add_stream == StreamRef{StreamKind::compute, 1});
  // SM-kernel P2P: on the group's comm stream for TP and UP, a stream of DP's own.
  CHECK(c.tp.p2p_stream() == StreamRef{StreamKind::comm, 0});
  CHECK(c.up.p2p_stream() == StreamRef{StreamKind::comm, 1});
  CHECK(c.dp.p2p_stream() == StreamRef{StreamKind::comm, 4});
  for (const Communicator* g : {static_cast<const Communicator*>(&c.tp), &c.up, static_cast<const Communicator*>(&c.dp)}) {
    CHECK(g->sms == 16);
    CHECK(g->collective_engine == model::CommEngine::copy_engine);
    CHECK(g->p2p_engine == model::CommEngine::sm_kernel);
  }
  // No stream of one group is another group's, but for the baseline TP re-gather, which shares UP's
  // comm stream: a job with both runs them in that stream's order (recorded here, so that changing it
  // is a decision: it changes baselines/ci.json).
  auto streams = [](const Communicator& g) {
    return std::set<std::pair<int, int>>{{static_cast<int>(g.collective_stream.kind), g.collective_stream.index},
                                         {static_cast<int>(g.p2p_copy_stream.kind), g.p2p_copy_stream.index},
                                         {static_cast<int>(g.p2p_sm_stream.kind), g.p2p_sm_stream.index}};
  };
  std::set<std::pair<int, int>> dp = streams(c.dp);
  dp.insert({static_cast<int>(c.dp.gather_stream.kind), c.dp.gather_stream.index});
  for (const auto& s : streams(c.tp)) CHECK((!streams(c.up).count(s) && !dp.count(s)));
  for (const auto& s : streams(c.up)) CHECK(!dp.count(s));
  CHECK(c.tp.regather_stream == c.up.collective_stream);
  // Copy-engine P2P by default.
  CHECK(make_communicators(model::ScheduleOptions{}).dp.p2p_stream() == StreamRef{StreamKind::copy, 2});
  CHECK(make_communicators(model::ScheduleOptions{}).tp.sms == -1);
}

TEST_CASE("group members from the rank layout, by hand", "[sched][communicator]") {
  // tp 2 x up 2 x dp 2: rank = (d x 2 + u) x 2 + t. The TP group of (u 1, d 1) is (1 x 2 + 1) x 2 + {0, 1}
  // = {6, 7}; the UP group of (t 1, d 0) is (0 + u) x 2 + 1 = {1, 3}; of (t 0, d 1): {4, 6}.
  const RankLayout layout{2, 2, 2};
  CHECK(layout.tp_group(1, 1) == std::vector<int>{6, 7});
  CHECK(layout.up_group(1, 0) == std::vector<int>{1, 3});
  CHECK(layout.up_group(0, 1) == std::vector<int>{4, 6});
  // Every rank is in exactly one TP group and one UP group.
  std::vector<int> in_tp(8, 0), in_up(8, 0);
  for (int a = 0; a < 2; ++a)
    for (int d = 0; d < 2; ++d) {
      for (int r : layout.tp_group(a, d)) ++in_tp[static_cast<std::size_t>(r)];
      for (int r : layout.up_group(a, d)) ++in_up[static_cast<std::size_t>(r)];
    }
  CHECK(in_tp == std::vector<int>(8, 1));
  CHECK(in_up == std::vector<int>(8, 1));
}
