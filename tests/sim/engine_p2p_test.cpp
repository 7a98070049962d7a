// P2P transfers and bandwidth sharing on hand-built clusters. Unless a test says otherwise: links of
// 1e11 B/s with 0.5 us latency, so a rank-to-rank route through the switch has latency 1,000,000 ps;
// copy-engine step latency 2,000,000 ps, SM-kernel step latency 1,000,000 ps (sim_test_util.hpp).
#include <catch2/catch.hpp>

#include "sim_test_util.hpp"

using namespace sim_test;
using fusesim::sched::TaskGraph;
using fusesim::sim::Simulator;

TEST_CASE("one transfer takes latency + bytes / bandwidth", "[sim][p2p]") {
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto s = g.add(send("s", 0, 1, 4'000'000, 7));
  const auto r = g.add(recv("r", 1, 0, 4'000'000, 7));
  const auto res = Simulator(cluster, costs).run(g);
  // Copy engine: latency = 2,000,000 (step) + 1,000,000 (route) = 3,000,000 ps;
  // drain = 4e6 B / 1e11 B/s = 4e-5 s = 40,000,000 ps. End = 43,000,000 ps.
  REQUIRE(res.tasks[s].start_ps == 0);
  REQUIRE(res.tasks[r].start_ps == 0);
  REQUIRE(res.tasks[s].end_ps == 43'000'000);
  REQUIRE(res.tasks[r].end_ps == 43'000'000);
  REQUIRE(res.makespan_ps == 43'000'000);
  REQUIRE(res.transfers.size() == 1);
  const auto& t = res.transfers[0];
  REQUIRE(t.task == s);
  REQUIRE(t.peer_task == r);
  REQUIRE(t.src_rank == 0);
  REQUIRE(t.dst_rank == 1);
  REQUIRE(t.bytes == 4'000'000);
  REQUIRE(t.step == -1);
  REQUIRE(t.engine == model::CommEngine::copy_engine);
  REQUIRE(t.start_ps == 0);
  REQUIRE(t.end_ps == 43'000'000);
}

TEST_CASE("an SM-kernel transfer uses its own step latency and protocol efficiency", "[sim][p2p]") {
  // sm_kernel_efficiency 0.5: wire bytes = 4e6 / 0.5 = 8e6 -> drain 8e6 / 1e11 = 80,000,000 ps.
  // Latency = 1,000,000 (SM step) + 1,000,000 (route). End = 82,000,000 ps.
  const auto cluster = star(2, 1e11, 500'000, 0.0, /*sm_eff=*/0.5, /*ce_eff=*/1.0);
  TestCostModel costs;
  TaskGraph g(2);
  g.add(send("s", 0, 1, 4'000'000, 1, model::CommEngine::sm_kernel));
  const auto r = g.add(recv("r", 1, 0, 4'000'000, 1));
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[r].end_ps == 82'000'000);
  REQUIRE(res.transfers.at(0).bytes == 4'000'000);  // the record keeps the payload
  REQUIRE(res.transfers.at(0).engine == model::CommEngine::sm_kernel);
}

TEST_CASE("two transfers on one link each get half", "[sim][p2p]") {
  // Ranks 0 and 1 both send 4e6 B to rank 2: both routes end on link switch->gpu2 (1e11 B/s), shared
  // 5e10 each. Both start draining at 3,000,000 ps; drain = 4e6 / 5e10 = 8e-5 s = 80,000,000 ps.
  // Both end at latency + 2 x bytes / B = 3,000,000 + 80,000,000 = 83,000,000 ps.
  const auto cluster = star(3);
  TestCostModel costs;
  TaskGraph g(3);
  g.add(send("s0", 0, 2, 4'000'000, 1));
  g.add(send("s1", 1, 2, 4'000'000, 2));
  const auto r0 = g.add(recv("r0", 2, 0, 4'000'000, 1));
  const auto r1 = g.add(recv("r1", 2, 1, 4'000'000, 2));
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[r0].end_ps == 83'000'000);
  REQUIRE(res.tasks[r1].end_ps == 83'000'000);
}

TEST_CASE("a flow speeds up when the flow sharing its link leaves", "[sim][p2p]") {
  // As above, but rank 1 sends only 2e6 B. Both drain at 5e10 from 3,000,000: the short one has
  // moved 2e6 B after 2e6 / 5e10 = 40,000,000 ps -> ends at 43,000,000. The long one has 2e6 B left,
  // now at 1e11: 20,000,000 ps more -> ends at 63,000,000 (vs 43e6 alone and 83e6 if halved throughout).
  const auto cluster = star(3);
  TestCostModel costs;
  TaskGraph g(3);
  g.add(send("s0", 0, 2, 4'000'000, 1));
  g.add(send("s1", 1, 2, 2'000'000, 2));
  const auto r0 = g.add(recv("r0", 2, 0, 4'000'000, 1));
  const auto r1 = g.add(recv("r1", 2, 1, 2'000'000, 2));
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[r1].end_ps == 43'000'000);
  REQUIRE(res.tasks[r0].end_ps == 63'000'000);
  // Transfers are recorded in order of completion.
  REQUIRE(res.transfers.at(0).src_rank == 1);
  REQUIRE(res.transfers.at(1).src_rank == 0);
}

TEST_CASE("max-min fairness: three flows over two links of different capacity", "[sim][p2p]") {
  // gpu0, gpu1, gpu3 on switch s1; gpu2 on switch s2; s1 -> s2 is link B (4e10 B/s); gpu0 -> s1 is
  // link A (1e11 B/s); every other link 1e13 B/s (never a bottleneck). All latencies 0, so every
  // flow drains from the copy-engine step latency, 2,000,000 ps.
  //   f1: gpu0 -> gpu1 (crosses A), 1.6e6 B    f2: gpu0 -> gpu2 (A and B), 4e5 B    f3: gpu3 -> gpu2 (B), 2e5 B
  // Progressive filling: B offers 4e10/2 = 2e10 < A's 1e11/2, so f2 = f3 = 2e10; f1 gets A's rest,
  // 8e10 (equal split: 5e10).
  //   f3 ends after 2e5 / 2e10 = 10,000,000 ps -> at 12,000,000.
  //   Then f2 = 4e10 (alone on B), f1 = 1e11 - 4e10 = 6e10. f2 has 4e5 - 2e5 = 2e5 left: 5,000,000 ps
  //   -> ends at 17,000,000. f1 had 1.6e6 - 8e10 x 1e-5 = 8e5 left, drains 6e10 x 5e-6 = 3e5 by then.
  //   Then f1 alone at 1e11: 5e5 / 1e11 = 5,000,000 ps -> ends at 22,000,000.
  ClusterBuilder b;
  const auto g0 = b.gpu(), g1 = b.gpu(), g2 = b.gpu(), g3 = b.gpu();
  const auto s1 = b.sw("s1"), s2 = b.sw("s2");
  b.link(g0, s1, 1e11, 0);  // A
  b.link(s1, g0, 1e13, 0);
  b.cable(g1, s1, 1e13, 0);
  b.cable(g3, s1, 1e13, 0);
  b.cable(g2, s2, 1e13, 0);
  b.link(s1, s2, 4e10, 0);  // B
  b.link(s2, s1, 1e13, 0);
  const auto cluster = b.done();
  TestCostModel costs;
  TaskGraph g(4);
  // gpu0 sends both f1 and f2: on two copy engines, so that they run at once.
  g.add(send("f1", 0, 1, 1'600'000, 1, model::CommEngine::copy_engine, -1, /*stream=*/0));
  g.add(send("f2", 0, 2, 400'000, 2, model::CommEngine::copy_engine, -1, /*stream=*/1));
  g.add(send("f3", 3, 2, 200'000, 3));
  const auto r1 = g.add(recv("r1", 1, 0, 1'600'000, 1));
  const auto r2 = g.add(recv("r2", 2, 0, 400'000, 2));
  const auto r3 = g.add(recv("r3", 2, 3, 200'000, 3));
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[r3].end_ps == 12'000'000);
  REQUIRE(res.tasks[r2].end_ps == 17'000'000);
  REQUIRE(res.tasks[r1].end_ps == 22'000'000);
}

TEST_CASE("a route through a switch: capacity is the min, latency the sum", "[sim][p2p]") {
  // gpu0 -> switch: 1e11 B/s, 300,000 ps; switch -> gpu1: 5e10 B/s, 700,000 ps.
  // Latency = 2,000,000 (copy step) + 300,000 + 700,000 = 3,000,000; drain at min(1e11, 5e10):
  // 1e6 / 5e10 = 2e-5 s = 20,000,000 ps. End = 23,000,000 ps.
  ClusterBuilder b;
  const auto g0 = b.gpu(), g1 = b.gpu();
  const auto s = b.sw("switch");
  b.link(g0, s, 1e11, 300'000);
  b.link(s, g1, 5e10, 700'000);
  b.link(g1, s, 1e11, 300'000);
  b.link(s, g0, 1e11, 300'000);
  const auto cluster = b.done();
  TestCostModel costs;
  TaskGraph g(2);
  g.add(send("s", 0, 1, 1'000'000, 1));
  const auto r = g.add(recv("r", 1, 0, 1'000'000, 1));
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[r].end_ps == 23'000'000);
}

TEST_CASE("a transfer starts when both ends are ready - the recv holds no stream", "[sim][p2p]") {
  // Rank 1 computes 5,000,000 ps before its recv is ready: the send waits (ready at 0, started at
  // 5e6) and lands at 5e6 + 3e6 latency + 1e6 / 1e11 (10,000,000) = 18,000,000.
  // The recv sits on rank 1's comm stream 0; an SM-kernel send "o" (holding 0 SMs, so the kernel is
  // not slowed) added after it on the same stream starts at 0: a recv holds no stream. It lands at
  // 1e6 SM step + 1e6 route + 10e6 = 12,000,000, on links disjoint from the first transfer's.
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto s = g.add(send("s", 0, 1, 1'000'000, 1));
  const auto c = g.add(compute("c", 1, 5'000'000));
  const auto r = g.add(recv("r", 1, 0, 1'000'000, 1));
  g.depend(c, r);
  const auto o = g.add(send("o", 1, 0, 1'000'000, 2, model::CommEngine::sm_kernel, 0));
  g.add(recv("o_r", 0, 1, 1'000'000, 2));
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[s].ready_ps == 0);
  REQUIRE(res.tasks[r].ready_ps == 5'000'000);
  REQUIRE(res.tasks[s].start_ps == 5'000'000);
  REQUIRE(res.tasks[s].end_ps == 18'000'000);
  REQUIRE(res.tasks[o].start_ps == 0);
  REQUIRE(res.tasks[o].end_ps == 12'000'000);
}

TEST_CASE("a send waits for the head of its stream", "[sim][p2p]") {
  // Two sends on rank 0's copy stream 0: the second (added later) starts when the first ends, even
  // though its recv is ready at 0. Each: 3e6 latency + 1e6 / 1e11 = 13,000,000 ps.
  const auto cluster = star(3);
  TestCostModel costs;
  TaskGraph g(3);
  const auto s1 = g.add(send("s1", 0, 1, 1'000'000, 1));
  const auto s2 = g.add(send("s2", 0, 2, 1'000'000, 2));
  g.add(recv("r1", 1, 0, 1'000'000, 1));
  const auto r2 = g.add(recv("r2", 2, 0, 1'000'000, 2));
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[s1].end_ps == 13'000'000);
  REQUIRE(res.tasks[s2].ready_ps == 13'000'000);
  REQUIRE(res.tasks[r2].ready_ps == 0);
  REQUIRE(res.tasks[s2].start_ps == 13'000'000);
  REQUIRE(res.tasks[r2].end_ps == 26'000'000);
}

TEST_CASE("a link of zero bandwidth is reported as a deadlock, not a hang", "[sim][p2p]") {
  const auto cluster = star(2, 0.0);
  TestCostModel costs;
  TaskGraph g(2);
  g.add(send("s", 0, 1, 1'000, 1));
  g.add(recv("r", 1, 0, 1'000, 1));
  REQUIRE_THROWS_WITH(Simulator(cluster, costs).run(g), Catch::Contains("deadlock") && Catch::Contains("'s'"));
}

// Copy engines: a copy-engine transfer holds one engine of its sending device from launch to landing;
// with none free it waits, first come first served.
TEST_CASE("copy-engine sends of one device share its copy engines", "[sim][p2p][copy-engine]") {
  // Rank 0 sends 4e6 B to rank 1 (copy stream 0) and to rank 2 (copy stream 1), both ready at 0.
  // Two engines: both run at once, sharing link gpu0->switch (5e10 B/s each): 3e6 latency +
  // 4e6 / 5e10 (80e6) -> both end at 83,000,000.
  // One engine: the first (in ready order) runs alone, 3e6 + 4e6 / 1e11 (40e6) = 43,000,000; the
  // second waits for the engine and runs 43e6 .. 43e6 + 43e6 = 86,000,000.
  auto cluster = star(3);
  const int engines = GENERATE(2, 1);
  cluster.device_models.at("test-gpu").copy_engines = engines;
  TestCostModel costs;
  TaskGraph g(3);
  const auto a = g.add(send("a", 0, 1, 4'000'000, 1, model::CommEngine::copy_engine, -1, 0));
  const auto b = g.add(send("b", 0, 2, 4'000'000, 2, model::CommEngine::copy_engine, -1, 1));
  g.add(recv("ra", 1, 0, 4'000'000, 1));
  g.add(recv("rb", 2, 0, 4'000'000, 2));
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[b].ready_ps == 0);
  if (engines == 2) {
    REQUIRE(res.tasks[a].end_ps == 83'000'000);
    REQUIRE(res.tasks[b].start_ps == 0);
    REQUIRE(res.tasks[b].end_ps == 83'000'000);
  } else {
    REQUIRE(res.tasks[a].end_ps == 43'000'000);
    REQUIRE(res.tasks[b].start_ps == 43'000'000);
    REQUIRE(res.tasks[b].end_ps == 86'000'000);
  }
}

TEST_CASE("a third copy stream waits for one of two copy engines", "[sim][p2p][copy-engine]") {
  // Rank 0 sends 4e6 B to ranks 1, 2, 3 on copy streams 0, 1, 2 (TP, Ulysses and DP in the
  // generators), all ready at 0, on a device of 2 engines. The first two share gpu0->switch:
  // 3e6 + 80e6 = 83,000,000. The third starts then, alone: 83e6 + 3e6 + 40e6 = 126,000,000.
  // (Three at once would each get a third of the link and all end at 3e6 + 120e6 = 123e6.)
  const auto cluster = star(4);
  TestCostModel costs;
  TaskGraph g(4);
  std::vector<sched::TaskId> s;
  for (int i = 0; i < 3; ++i) {
    // Appended, not "s" + std::to_string(i): GCC 12 warns (-Wrestrict, a false positive, its bug
    // 105329) on that operator+ where it is inlined.
    std::string send_name = "s", recv_name = "r";
    send_name += std::to_string(i);
    recv_name += std::to_string(i);
    s.push_back(g.add(send(send_name, 0, i + 1, 4'000'000, i, model::CommEngine::copy_engine, -1, i)));
    g.add(recv(recv_name, i + 1, 0, 4'000'000, i));
  }
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[s[0]].end_ps == 83'000'000);
  REQUIRE(res.tasks[s[1]].end_ps == 83'000'000);
  REQUIRE(res.tasks[s[2]].ready_ps == 0);
  REQUIRE(res.tasks[s[2]].start_ps == 83'000'000);
  REQUIRE(res.tasks[s[2]].end_ps == 126'000'000);
}

TEST_CASE("a copy-engine collective takes an engine on every member, all or none", "[sim][p2p][copy-engine]") {
  // One engine per device. Rank 1 sends 4e6 B to rank 2 (copy engine): 0 .. 3e6 + 40e6 = 43e6, holding
  // rank 1's engine. A copy-engine all-gather over ranks 0 and 1 of 8e6 B is ready at 0 but needs
  // rank 1's engine too: it starts at 43e6. Alone it takes base 5e6 + one step of (2e6 CE step + 1e6
  // route) + 4e6 / 1e11 (40e6) = 48e6, so it ends at 91,000,000. Rank 0's engine stays free while the
  // collective waits (all or none): a send from rank 0 to rank 3 of 4e6 B, ready at 0, takes it at once
  // and runs alone on its links: 0 .. 43,000,000.
  auto cluster = star(4);
  cluster.device_models.at("test-gpu").copy_engines = 1;
  TestCostModel costs;
  TaskGraph g(4);
  const auto x = g.add(send("x", 1, 2, 4'000'000, 1, model::CommEngine::copy_engine, -1, 1));
  g.add(recv("rx", 2, 1, 4'000'000, 1));
  const auto y = g.add(send("y", 0, 3, 4'000'000, 2, model::CommEngine::copy_engine, -1, 1));
  g.add(recv("ry", 3, 0, 4'000'000, 2));
  const auto ids = collective(g, "ag", sched::CollectiveKind::all_gather, {0, 1}, 8'000'000, 1,
                              model::CommEngine::copy_engine);
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[x].end_ps == 43'000'000);
  REQUIRE(res.tasks[y].start_ps == 0);
  REQUIRE(res.tasks[y].end_ps == 43'000'000);
  REQUIRE(res.tasks[ids[0]].ready_ps == 0);
  REQUIRE(res.tasks[ids[0]].start_ps == 43'000'000);
  REQUIRE(res.tasks[ids[0]].end_ps == 91'000'000);
  REQUIRE(res.tasks[ids[1]].end_ps == 91'000'000);
}

TEST_CASE("a copy-engine send on a device without copy engines is refused", "[sim][p2p][copy-engine]") {
  auto cluster = star(2);
  cluster.device_models.at("test-gpu").copy_engines = 0;
  TestCostModel costs;
  TaskGraph g(2);
  g.add(send("s", 0, 1, 1000, 1));
  g.add(recv("r", 1, 0, 1000, 1));
  REQUIRE_THROWS_WITH(Simulator(cluster, costs).run(g),
                      Catch::Contains("task 's' sends on a copy engine, but rank 0 (device model 'test-gpu') has no copy engines"));
}

namespace {
// Four ranks on one switch, ranks 2 and 3 on node 1 (the switch stands for the fabric between them):
// routes 1,000,000 ps, links 1e11 B/s; P2P between the nodes at efficiency 0.5 after 3,000,000 ps
// more latency where `net` is set.
fusesim::topo::Cluster two_nodes(bool net) {
  ClusterBuilder b;
  std::vector<fusesim::topo::VertexId> gpus;
  for (int i = 0; i < 4; ++i) gpus.push_back(b.gpu());
  const auto s = b.sw("fabric");
  for (auto g : gpus) b.cable(g, s, 1e11, 500'000);
  b.c.vertices[gpus[2]].node = 1;
  b.c.vertices[gpus[3]].node = 1;
  if (net) b.c.comm.p2p_network = fusesim::topo::P2pNetwork{{0.5, "test"}, {3e-6, "test"}};
  b.c.num_nodes = 2;
  b.c.devices_per_node = 2;
  b.c.finalize();
  return b.c;
}
}  // namespace

TEST_CASE("a point-to-point transfer between nodes takes the P2P network's efficiency and latency", "[sim][p2p]") {
  // SM kernel, 4e6 B: latency 1,000,000 (step) + 1,000,000 (route) = 2,000,000 ps. Inside a node
  // (0 -> 1) at the protocol's efficiency 1: 4e6 / 1e11 = 40,000,000 ps, end 42,000,000; to the
  // other node (0 -> 2): 3,000,000 more latency, then at 0.5: wire bytes 8e6, 80,000,000 ps, end
  // 85,000,000; without p2p_network, as inside the node. A copy-engine transfer between nodes takes
  // it too: 2,000,000 (its step) + 1,000,000 + 3,000,000 + 80,000,000 = 86,000,000.
  TestCostModel costs;
  struct Case {
    int to;
    model::CommEngine engine;
    bool net;
    TimePs end;
  };
  for (const Case& k : {Case{1, model::CommEngine::sm_kernel, true, 42'000'000},
                        Case{2, model::CommEngine::sm_kernel, true, 85'000'000},
                        Case{2, model::CommEngine::sm_kernel, false, 42'000'000},
                        Case{2, model::CommEngine::copy_engine, true, 86'000'000}}) {
    INFO("to " << k.to << (k.net ? " with" : " without") << " the key");
    const auto cluster = two_nodes(k.net);
    TaskGraph g(4);
    g.add(send("s", 0, k.to, 4'000'000, 1, k.engine));
    const auto r = g.add(recv("r", k.to, 0, 4'000'000, 1));
    const auto res = Simulator(cluster, costs).run(g);
    REQUIRE(res.tasks[r].end_ps == k.end);
    REQUIRE(res.transfers.at(0).bytes == 4'000'000);
  }
}

TEST_CASE("an all-to-all's pairs between nodes are P2P transfers on the network, a ring's steps are not", "[sim][p2p]") {
  // All-to-all of n = 8e6 over ranks {0, 2} (one per node): each sends 4e6 to the other at once:
  // 5,000,000 (base) + 2,000,000 (step + route) + 3,000,000 (added) + 8e6 wire bytes / 1e11 =
  // 90,000,000 ps. The same group's all-gather is a ring collective: at the protocol's efficiency 1
  // and without the added latency, 47,000,000.
  TestCostModel costs;
  const auto cluster = two_nodes(true);
  for (auto [kind, end] : {std::pair{fusesim::sched::CollectiveKind::all_to_all, TimePs{90'000'000}},
                           std::pair{fusesim::sched::CollectiveKind::all_gather, TimePs{47'000'000}}}) {
    TaskGraph g(4);
    const auto ids = collective(g, "c", kind, {0, 2}, 8'000'000, 1);
    const auto res = Simulator(cluster, costs).run(g);
    for (auto id : ids) REQUIRE(res.tasks[id].end_ps == end);
  }
}
