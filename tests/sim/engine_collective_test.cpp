// Collectives as ring / pairwise steps on a star: t ranks on one switch, links 1e11 B/s with
// 0.5 us latency. Every step of these algorithms has each member send one chunk and receive one,
// so no two flows of a step share a link and each drains at the full 1e11 B/s.
//   alpha (per step) = SM step latency 1,000,000 + route latency 2 x 500,000 = 2,000,000 ps
//   base (once)      = 5,000,000 ps
//   n = 8e6 B: chunk n/t = 4e6 / 2e6 / 1e6 B for t = 2 / 4 / 8 -> n/(tB) = 40e6 / 20e6 / 10e6 ps
#include <map>

#include <catch2/catch.hpp>

#include "sim_test_util.hpp"

using namespace sim_test;
using fusesim::sched::CollectiveKind;
using fusesim::sched::TaskGraph;
using fusesim::sim::SimResult;
using fusesim::sim::Simulator;

namespace {

constexpr Bytes kN = 8'000'000;
constexpr TimePs kAlpha = 2'000'000;

TimePs chunk_ps(int t) { return 80'000'000 / t; }  // (8e6 / t) B / 1e11 B/s in ps

SimResult run_collective(CollectiveKind kind, int t, std::vector<sched::TaskId>& ids) {
  const auto cluster = star(t);
  TestCostModel costs;
  TaskGraph g(t);
  ids = collective(g, "c", kind, iota_ranks(t), kN, 1);
  return Simulator(cluster, costs).run(g);
}

void check_all_end_at(const SimResult& res, const std::vector<sched::TaskId>& ids, TimePs expected) {
  for (auto id : ids) {
    REQUIRE(res.tasks[id].start_ps == 0);
    REQUIRE(res.tasks[id].end_ps == expected);
  }
}

}  // namespace

TEST_CASE("ring all-gather takes base + (t-1)(alpha + n/(tB))", "[sim][collective]") {
  // t=2: 5e6 + 1 x (2e6 + 40e6) = 47,000,000
  // t=4: 5e6 + 3 x (2e6 + 20e6) = 71,000,000
  // t=8: 5e6 + 7 x (2e6 + 10e6) = 89,000,000
  const std::map<int, TimePs> expected{{2, 47'000'000}, {4, 71'000'000}, {8, 89'000'000}};
  for (auto [t, end] : expected) {
    INFO("t = " << t);
    REQUIRE(kBasePs + (t - 1) * (kAlpha + chunk_ps(t)) == end);
    std::vector<sched::TaskId> ids;
    const auto res = run_collective(CollectiveKind::all_gather, t, ids);
    check_all_end_at(res, ids, end);
    // t members x (t-1) steps, each n/t bytes to the ring successor.
    REQUIRE(res.transfers.size() == static_cast<std::size_t>(t * (t - 1)));
    for (const auto& tr : res.transfers) {
      REQUIRE(tr.dst_rank == (tr.src_rank + 1) % t);
      REQUIRE(tr.bytes == kN / t);
      REQUIRE(tr.step >= 0);
      REQUIRE(tr.step < t - 1);
      // Step s starts at base + s (alpha + n/(tB)) and lasts alpha + n/(tB).
      REQUIRE(tr.start_ps == kBasePs + tr.step * (kAlpha + chunk_ps(t)));
      REQUIRE(tr.end_ps == tr.start_ps + kAlpha + chunk_ps(t));
      REQUIRE(tr.task == ids[tr.src_rank]);
      REQUIRE(tr.peer_task == ids[tr.dst_rank]);
    }
  }
}

TEST_CASE("ring reduce-scatter takes base + (t-1)(alpha + n/(tB))", "[sim][collective]") {
  // Same steps as the all-gather (n is the input buffer): same times.
  const std::map<int, TimePs> expected{{2, 47'000'000}, {4, 71'000'000}, {8, 89'000'000}};
  for (auto [t, end] : expected) {
    INFO("t = " << t);
    std::vector<sched::TaskId> ids;
    const auto res = run_collective(CollectiveKind::reduce_scatter, t, ids);
    check_all_end_at(res, ids, end);
    REQUIRE(res.transfers.size() == static_cast<std::size_t>(t * (t - 1)));
  }
}

TEST_CASE("ring all-reduce takes base + 2(t-1)(alpha + n/(tB))", "[sim][collective]") {
  // t=2: 5e6 + 2 x (2e6 + 40e6) = 89,000,000
  // t=4: 5e6 + 6 x (2e6 + 20e6) = 137,000,000
  // t=8: 5e6 + 14 x (2e6 + 10e6) = 173,000,000
  const std::map<int, TimePs> expected{{2, 89'000'000}, {4, 137'000'000}, {8, 173'000'000}};
  for (auto [t, end] : expected) {
    INFO("t = " << t);
    REQUIRE(kBasePs + 2 * (t - 1) * (kAlpha + chunk_ps(t)) == end);
    std::vector<sched::TaskId> ids;
    const auto res = run_collective(CollectiveKind::all_reduce, t, ids);
    check_all_end_at(res, ids, end);
    REQUIRE(res.transfers.size() == static_cast<std::size_t>(2 * t * (t - 1)));
  }
}

TEST_CASE("all-to-all: every member sends to every other at once", "[sim][collective]") {
  // NCCL runs an all-to-all as grouped send/recv pairs in one kernel: member i sends n/t to each
  // (i+s) mod t, s = 1..t-1 (recorded as step s-1), all at once. Each pays alpha once; then i's
  // uplink carries t-1 chunks and each downlink receives t-1, every link shared alike, so all land
  // (t-1) n/(tB) after: t=4: 5e6 + 2e6 + 3 x 20e6 = 67,000,000; t=8: 5e6 + 2e6 + 7 x 10e6 = 77,000,000
  // (one peer after another: 71e6 and 89e6).
  const std::map<int, TimePs> expected{{4, 67'000'000}, {8, 77'000'000}};
  for (auto [t, end] : expected) {
    INFO("t = " << t);
    REQUIRE(kBasePs + kAlpha + (t - 1) * chunk_ps(t) == end);
    std::vector<sched::TaskId> ids;
    const auto res = run_collective(CollectiveKind::all_to_all, t, ids);
    check_all_end_at(res, ids, end);
    REQUIRE(res.transfers.size() == static_cast<std::size_t>(t * (t - 1)));
    // Every ordered pair exactly once, each starting at the rendezvous's base latency.
    std::map<std::pair<int, int>, int> seen;
    for (const auto& tr : res.transfers) {
      REQUIRE(tr.dst_rank == (tr.src_rank + tr.step + 1) % t);
      REQUIRE(tr.bytes == kN / t);
      REQUIRE(tr.start_ps == kBasePs);
      REQUIRE(tr.end_ps == end);
      ++seen[{tr.src_rank, tr.dst_rank}];
    }
    REQUIRE(seen.size() == static_cast<std::size_t>(t * (t - 1)));
  }
}

TEST_CASE("ring dependency: a member's next step waits for its receive", "[sim][collective]") {
  // t=3 all-gather, n = 3e6 (chunk 1e6 B: 10,000,000 ps at 1e11), but switch -> gpu1 runs at 5e10
  // (chunk into rank 1: 20,000,000 ps). Steps start after base 5e6; each has alpha 2e6 then drains.
  // A member sends step 1 once its step-0 receive has landed, its own step-0 send possibly still in
  // flight (NCCL's sender does not wait for its chunk to land); a connection's chunks drain one after
  // the other (the later one, its latency paid, waits for the link).
  // Step 0 (all start at 5e6): 0->1 ends 5+2+20 = 27e6; 1->2 and 2->0 end 5+2+10 = 17e6.
  // Step 1: rank 0 received (from 2) at 17e6 -> sends 0->1 at 17e6; its latency ends at 19e6, behind
  //         its step-0 chunk still draining: it drains from 27e6, alone, to 27+20 = 47e6.
  //         rank 1 received (from 0) at 27e6 -> sends 1->2 at 27e6: 27+2+10 = 39e6.
  //         rank 2 received (from 1) at 17e6 -> sends 2->0 at 17e6: 17+2+10 = 29e6.
  // Ends (own last send and last receive): rank 0 max(47, 29) = 47e6; rank 1 max(39, 47) = 47e6;
  // rank 2 max(29, 39) = 39e6. (Had rank 0 waited for its step-0 send to land before sending step 1,
  // it would have sent at 27e6 and ended at 27+2+20 = 49e6, and rank 1 with it.)
  ClusterBuilder b;
  const auto g0 = b.gpu(), g1 = b.gpu(), g2 = b.gpu();
  const auto s = b.sw("switch");
  b.cable(g0, s, 1e11, 500'000);
  b.link(g1, s, 1e11, 500'000);
  b.link(s, g1, 5e10, 500'000);
  b.cable(g2, s, 1e11, 500'000);
  const auto cluster = b.done();
  TestCostModel costs;
  TaskGraph g(3);
  const auto ids = collective(g, "ag", CollectiveKind::all_gather, {0, 1, 2}, 3'000'000, 1);
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[ids[0]].end_ps == 47'000'000);
  REQUIRE(res.tasks[ids[1]].end_ps == 47'000'000);
  REQUIRE(res.tasks[ids[2]].end_ps == 39'000'000);
  std::map<std::pair<int, int>, TimePs> start, end;  // (src, step) -> start, end
  for (const auto& tr : res.transfers) {
    start[{tr.src_rank, tr.step}] = tr.start_ps;
    end[{tr.src_rank, tr.step}] = tr.end_ps;
  }
  REQUIRE(start.at({0, 1}) == 17'000'000);
  REQUIRE(start.at({1, 1}) == 27'000'000);
  REQUIRE(start.at({2, 1}) == 17'000'000);
  REQUIRE(end.at({0, 0}) == 27'000'000);
  REQUIRE(end.at({0, 1}) == 47'000'000);
  REQUIRE(end.at({1, 1}) == 39'000'000);
  REQUIRE(end.at({2, 1}) == 29'000'000);
}

TEST_CASE("a collective follows its group's ring order, not rank order", "[sim][collective]") {
  // Group {2, 0, 3, 1}: successor of 2 is 0, of 0 is 3, of 3 is 1, of 1 is 2.
  const auto cluster = star(4);
  TestCostModel costs;
  TaskGraph g(4);
  collective(g, "ag", CollectiveKind::all_gather, {2, 0, 3, 1}, kN, 1);
  const auto res = Simulator(cluster, costs).run(g);
  const std::map<int, int> successor{{2, 0}, {0, 3}, {3, 1}, {1, 2}};
  for (const auto& tr : res.transfers) REQUIRE(tr.dst_rank == successor.at(tr.src_rank));
  REQUIRE(res.makespan_ps == 71'000'000);
}

TEST_CASE("a collective starts when every member is ready", "[sim][collective]") {
  // Rank 1 computes 10,000,000 ps first; the all-gather (t=2) starts then: 10e6 + 47e6 = 57,000,000.
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto c = g.add(compute("c", 1, 10'000'000));
  const auto ids = collective(g, "ag", CollectiveKind::all_gather, {0, 1}, kN, 1);
  g.depend(c, ids[1]);
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[ids[0]].ready_ps == 0);
  REQUIRE(res.tasks[ids[0]].start_ps == 10'000'000);
  REQUIRE(res.tasks[ids[1]].start_ps == 10'000'000);
  REQUIRE(res.tasks[ids[0]].end_ps == 57'000'000);
}

TEST_CASE("a collective of one rank takes no time", "[sim][collective]") {
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto c = g.add(compute("c", 0, 3'000'000));
  const auto ids = collective(g, "solo", CollectiveKind::all_reduce, {0}, kN, 1);
  g.depend(c, ids[0]);
  const auto after = g.add(compute("after", 0, 1'000'000));
  g.depend(ids[0], after);
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[ids[0]].start_ps == 3'000'000);
  REQUIRE(res.tasks[ids[0]].end_ps == 3'000'000);
  REQUIRE(res.tasks[after].end_ps == 4'000'000);
  REQUIRE(res.transfers.empty());
}

TEST_CASE("a copy-engine collective uses the copy-engine step latency", "[sim][collective]") {
  // alpha = 2,000,000 (copy step) + 1,000,000 (route) = 3e6; t=4 all-gather: 5e6 + 3 x (3e6 + 20e6) = 74e6.
  const auto cluster = star(4);
  TestCostModel costs;
  TaskGraph g(4);
  const auto ids = collective(g, "ag", CollectiveKind::all_gather, iota_ranks(4), kN, 1, model::CommEngine::copy_engine);
  const auto res = Simulator(cluster, costs).run(g);
  check_all_end_at(res, ids, 74'000'000);
}

TEST_CASE("a ring collective takes the protocol whose time alone is least for its size", "[sim][collective]") {
  // The star of 8 ranks: Simple is base 5 us, per step route 1 us + SM step 1 us, chunks at 1e11 B/s.
  // Add an LL-like protocol: base 1 us, no step latency, half the payload per wire byte, and NVLS:
  // base 2 us, no step latency, twice the payload per wire byte (the switch reduces).
  auto cluster = star(8);
  cluster.comm.protocols.push_back({"ll", {1e-6, "test"}, {0.0, "test"}, {0.5, "test"}});
  TestCostModel costs;
  const auto run = [&](const topo::Cluster& c, CollectiveKind kind, Bytes n) {
    TaskGraph g(8);
    const auto ids = collective(g, "c", kind, iota_ranks(8), n, 1);
    const SimResult res = Simulator(c, costs).run(g);
    return res.tasks[ids.front()].end_ps;
  };
  // All-reduce of 8,000 B: 14 steps of 1,000 B chunks (10,000 ps at 1e11 B/s, 20,000 ps at half).
  //   Simple: 5e6 + 14 x (2e6 + 10,000) = 33,140,000;  LL: 1e6 + 14 x (1e6 + 20,000) = 15,280,000.
  CHECK(run(cluster, CollectiveKind::all_reduce, 8'000) == 15'280'000);
  // All-reduce of 8e6 B: 1e6 B chunks (10e6 ps, 20e6 ps at half).
  //   Simple: 5e6 + 14 x (2e6 + 10e6) = 173e6;  LL: 1e6 + 14 x (1e6 + 20e6) = 295e6.
  CHECK(run(cluster, CollectiveKind::all_reduce, kN) == 173'000'000);
  cluster.comm.nvls = topo::CommProtocol{"nvls", {2e-6, "test"}, {0.0, "test"}, {2.0, "test"}};
  // NVLS: 2e6 + 14 x (1e6 + 5e6) = 86e6, the least; every rank of the star is on node 0.
  CHECK(run(cluster, CollectiveKind::all_reduce, kN) == 86'000'000);
  // Not for an all-gather: Simple, 5e6 + 7 x (2e6 + 10e6) = 89e6.
  CHECK(run(cluster, CollectiveKind::all_gather, kN) == 89'000'000);
}

TEST_CASE("a mirrored collective times its images' ring steps by the members present", "[sim][collective][symmetry]") {
  // An all-gather over ranks 0-3 on the star with tasks on ranks 0 and 1 alone, ranks 2 and 3 their
  // images (load alias 0, 1, 0, 1: a mirrored graph of two replicas of one rank each). Ring 0 -> 1
  // -> 2 -> 3 -> 0: rank 1's step flow to its image 2 lands on rank 0, as rank 3's flow into rank 0
  // would, and arrives by rank 0's link (the route turns at the switch). Every member sends and
  // receives one chunk per step on links no other flow uses, so the steps are the full ring's:
  //   5e6 + 3 x (2e6 + 2e6 B / 1e11 B/s = 20e6) = 71,000,000 ps,
  // with 2 members x 3 steps = 6 transfers instead of 12.
  const auto cluster = star(4);
  TestCostModel costs;
  TaskGraph g(4);
  const auto ids = collective(g, "ag", CollectiveKind::all_gather, {0, 1}, kN, 1);
  for (auto id : ids) std::get<sched::CollectiveTask>(g.task(id).kind).group = iota_ranks(4);
  g.set_load_alias({0, 1, 0, 1});
  const auto res = Simulator(cluster, costs).run(g);
  check_all_end_at(res, ids, 71'000'000);
  REQUIRE(res.transfers.size() == 6);
  for (const auto& tr : res.transfers) {
    CHECK(tr.dst_rank == tr.src_rank + 1);  // rank 1 sends to rank 2, the image of rank 0
    CHECK(tr.peer_task == ids[static_cast<std::size_t>((tr.src_rank + 1) % 2)]);
    CHECK(tr.end_ps - tr.start_ps == kAlpha + chunk_ps(4));
  }

  // Images whose ring does not repeat: alias 0, 1, 1, 1 would credit rank 1 with two chunks a step
  // (from rank 0 and from its image 2) and rank 0 with none.
  TaskGraph bad(4);
  const auto bad_ids = collective(bad, "ag", CollectiveKind::all_gather, {0, 1}, kN, 1);
  for (auto id : bad_ids) std::get<sched::CollectiveTask>(bad.task(id).kind).group = iota_ranks(4);
  bad.set_load_alias({0, 1, 1, 1});
  CHECK_THROWS_WITH(Simulator(cluster, costs).run(bad),
                    Catch::Contains("in ring 0 rank 0 would receive 0 chunks per step"));
  // A missing rank with no alias is a missing member.
  TaskGraph missing(4);
  const auto missing_ids = collective(missing, "ag", CollectiveKind::all_gather, {0, 1}, kN, 1);
  for (auto id : missing_ids) std::get<sched::CollectiveTask>(missing.task(id).kind).group = iota_ranks(4);
  CHECK_THROWS_WITH(Simulator(cluster, costs).run(missing), Catch::Contains("rank 2 has no task"));
}

TEST_CASE("TransferRecords::p2p_only keeps the P2P records alone and changes no timing", "[sim][collective]") {
  // A 4-rank all-reduce (2 x 3 steps per member: 24 step records) beside a P2P transfer from rank 0
  // to rank 1 (one record). p2p_only drops the 24 step records from the result; the task timings,
  // the makespan and the events are the same, and an observer still sees all 25 transfers.
  struct Count : fusesim::sim::Observer {
    int transfers = 0;
    void on_transfer_end(const fusesim::sim::TransferRecord&) override { ++transfers; }
  };
  const auto cluster = star(4);
  TestCostModel costs;
  TaskGraph g(4);
  collective(g, "ar", CollectiveKind::all_reduce, iota_ranks(4), kN, 1);
  g.add(send("s", 0, 1, 1'000'000, 7));
  g.add(recv("r", 1, 0, 1'000'000, 7));
  Simulator all(cluster, costs), p2p(cluster, costs);
  p2p.set_transfer_records(fusesim::sim::TransferRecords::p2p_only);
  Count seen_all, seen_p2p;
  const SimResult a = all.run(g, &seen_all), b = p2p.run(g, &seen_p2p);
  CHECK(a.transfers.size() == 25);
  REQUIRE(b.transfers.size() == 1);
  CHECK(b.transfers[0].step == -1);
  CHECK(b.transfers[0].src_rank == 0);
  CHECK(seen_all.transfers == 25);
  CHECK(seen_p2p.transfers == 25);
  CHECK(a.makespan_ps == b.makespan_ps);
  CHECK(a.events_processed == b.events_processed);
  REQUIRE(a.tasks.size() == b.tasks.size());
  for (std::size_t i = 0; i < a.tasks.size(); ++i) {
    CHECK(a.tasks[i].start_ps == b.tasks[i].start_ps);
    CHECK(a.tasks[i].end_ps == b.tasks[i].end_ps);
  }
}

TEST_CASE("an all-reduce across nodes runs as NCCL's tree where its model prices it below the ring",
          "[sim][collective]") {
  // Eight ranks on one switch, two per node on four nodes (every route 2 x 500,000 ps, inside a node
  // or not); Simple only: base 5e6 ps, SM step 1e6 ps. An all-reduce over all eight (g = 2 per node,
  // N = 4 nodes: two rings) of n = 8,000 B: 14 steps of n / t / rings = 500 B.
  //   ring: 5e6 + 14 x (1e6 + 1e6) = 33e6 ps of latency + 14 x 500 / 1e11 s = 70,000 ps of data
  //   tree: 5e6 + 2 x ((g - 1) x (1e6 + 1e6) + ceil(log2 4) x (1e6 + 1e6)) = 17e6 ps
  //         + 70,000 / 0.92 = 76,086.96 ps (beyond two nodes, 0.92 of the ring's bandwidth)
  // With n = 80e6 B the data is 700e6 ps, 60.9e6 more as a tree: the ring is what NCCL would run.
  ClusterBuilder b;
  std::vector<fusesim::topo::VertexId> gpus;
  for (int i = 0; i < 8; ++i) gpus.push_back(b.gpu());
  const auto s = b.sw("fabric");
  for (int i = 0; i < 8; ++i) {
    b.cable(gpus[static_cast<std::size_t>(i)], s, 1e11, 500'000);
    b.c.vertices[gpus[static_cast<std::size_t>(i)]].node = i / 2;
  }
  b.c.num_nodes = 4;
  b.c.devices_per_node = 2;
  b.c.finalize();
  TestCostModel costs;
  const auto run = [&](const std::vector<int>& ranks, Bytes n) {
    TaskGraph g(8);
    collective(g, "ar", CollectiveKind::all_reduce, ranks, n, 1);
    return Simulator(b.c, costs).run(g).best_tree_all_reduce;
  };
  const auto small = run(iota_ranks(8), 8'000);
  REQUIRE(small.has_value());
  CHECK(small->ranks == 8);
  CHECK(small->nodes == 4);
  CHECK(small->bytes == 8'000);
  CHECK(small->ring_s == Approx(33.07e-6).epsilon(1e-12));
  CHECK(small->tree_s == Approx(17e-6 + 0.07e-6 / 0.92).epsilon(1e-12));
  CHECK_FALSE(run(iota_ranks(8), 80'000'000).has_value());
  CHECK_FALSE(run({0, 1}, 8'000).has_value());  // one node: no tree to compare
  // One rank per node (ranks 0, 2, 4, 6: one ring, every flow alone on its links), n = 8,000 B:
  // 6 steps of 2,000 B. Ring: 5e6 + 6 x 2e6 = 17e6 ps + 6 x 20,000 ps; tree: 5e6 + 2 x ceil(log2 4) x
  // 2e6 = 13e6 + 120,000 / 0.92 ps: a tree. Run on the ring's flows: each step's latency
  // 8e6 / 6 = 1,333,333.3 -> 1,333,333 ps, then 2,000 B at 1e11 B/s x 0.92 = 21,739.13 ps, step after
  // step: 5e6 + 6 x 1,355,072.13 = 13,130,432.8 ps, each drain rounded up to the picosecond.
  TaskGraph g(8);
  const auto ids = collective(g, "ar", CollectiveKind::all_reduce, {0, 2, 4, 6}, 8'000, 1);
  const SimResult res = Simulator(b.c, costs).run(g);
  REQUIRE(res.best_tree_all_reduce.has_value());
  CHECK(res.best_tree_all_reduce->nodes == 4);
  for (auto id : ids) {
    CHECK(res.tasks[id].end_ps >= 13'130'432);
    CHECK(res.tasks[id].end_ps <= 13'130'432 + 6);
  }
  // NCCL_ALGO=Ring: 17e6 + 120,000 = 17,120,000 ps.
  b.c.comm.tree_all_reduce = false;
  const SimResult ring = Simulator(b.c, costs).run(g);
  CHECK_FALSE(ring.best_tree_all_reduce.has_value());
  for (auto id : ids) CHECK(ring.tasks[id].end_ps == 17'120'000);
}
