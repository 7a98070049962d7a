// Compute kernels, streams and contention, with TestCostModel: a kernel of W flops lasts W ps alone,
// and runs at (1 - held SMs / 100) x (1 - comm HBM bytes/s / 1e12) of that speed under load.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <utility>

#include "fusesim/util/error.hpp"
#include "sim_test_util.hpp"

using namespace sim_test;
using fusesim::sched::TaskGraph;
using fusesim::sim::Simulator;

TEST_CASE("a stream runs its tasks one at a time in the order they were added", "[sim][stream]") {
  // Rank 0, compute stream 0: a (5e6), b (1e6), c (2e6), no explicit edges: a 0-5e6, b 5e6-6e6, c 6e6-8e6.
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto a = g.add(compute("a", 0, 5'000'000));
  const auto b = g.add(compute("b", 0, 1'000'000));
  const auto c = g.add(compute("c", 0, 2'000'000));
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[a].start_ps == 0);
  REQUIRE(res.tasks[a].end_ps == 5'000'000);
  REQUIRE(res.tasks[b].start_ps == 5'000'000);
  REQUIRE(res.tasks[b].end_ps == 6'000'000);
  REQUIRE(res.tasks[c].start_ps == 6'000'000);
  REQUIRE(res.tasks[c].end_ps == 8'000'000);
}

TEST_CASE("a later task on a stream waits behind a blocked earlier one", "[sim][stream]") {
  // Rank 0 stream: x (waits for rank 1's long task, 7e6), then y (no deps, 1e6). FIFO: y cannot
  // overtake x, so x runs 7e6-9e6 and y 9e6-10e6, though y's own dependencies were met at 0.
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto long_task = g.add(compute("long", 1, 7'000'000));
  const auto x = g.add(compute("x", 0, 2'000'000));
  const auto y = g.add(compute("y", 0, 1'000'000));
  g.depend(long_task, x);
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[x].start_ps == 7'000'000);
  REQUIRE(res.tasks[x].end_ps == 9'000'000);
  REQUIRE(res.tasks[y].ready_ps == 9'000'000);
  REQUIRE(res.tasks[y].start_ps == 9'000'000);
  REQUIRE(res.tasks[y].end_ps == 10'000'000);
}

TEST_CASE("two compute streams on one rank split the device evenly when their kernels are bound alike", "[sim][stream]") {
  // The test model gives no compute/memory split, so each kernel needs all of both resources and
  // the max-min shares are even (engine.cpp, share_device()).
  // a (4e6 work) on compute stream 0, d (2e6) on compute stream 1, both from 0 at rate 1/2.
  // d ends after 2e6 / 0.5 = 4e6 ps; a has done 2e6 by then, 2e6 left at rate 1 -> ends at 6e6.
  const auto cluster = star(1);
  TestCostModel costs;
  TaskGraph g(1);
  const auto a = g.add(compute("a", 0, 4'000'000, 0));
  const auto d = g.add(compute("d", 0, 2'000'000, 1));
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[d].end_ps == 4'000'000);
  REQUIRE(res.tasks[a].end_ps == 6'000'000);
}

TEST_CASE("explicit dependencies across ranks", "[sim][stream]") {
  // p (rank 0, 3e6) -> q (rank 1, 2e6) -> r (rank 0 compute stream 1, 1e6): 0-3e6, 3e6-5e6, 5e6-6e6.
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto p = g.add(compute("p", 0, 3'000'000));
  const auto q = g.add(compute("q", 1, 2'000'000));
  const auto r = g.add(compute("r", 0, 1'000'000, 1));
  g.depend(p, q);
  g.depend(q, r);
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[q].start_ps == 3'000'000);
  REQUIRE(res.tasks[r].start_ps == 5'000'000);
  REQUIRE(res.tasks[r].end_ps == 6'000'000);
  REQUIRE(res.makespan_ps == 6'000'000);
}

TEST_CASE("compute slows while an SM-kernel transfer holds SMs, the sender's from its launch", "[sim][contention]") {
  // Rank 0: kernel k, 10,000,000 ps of work, from 0. Rank 0 comm stream: sm_kernel send of 4e5 B to
  // rank 1 holding 25 SMs; its recv waits for a 2,000,000 ps kernel on rank 1, so the transfer runs
  // 2e6 .. 2e6 + (1e6 SM step + 1e6 route) + 4e5 / 1e11 (4e6) = 8,000,000, holding 25 of 100 SMs on both
  // ranks throughout (latency phase included). The send is ready at 0: its kernel is launched then and
  // spins on its 25 SMs until the receiver arrives at 2e6 (NCCL's send waits for the peer's recv).
  //   k: 0-8e6 at 0.75 -> 6e6 done; 4e6 left at rate 1 -> ends 12,000,000.
  // (Before the spinning rule, SMs were held from the rendezvous only: 2e6 at rate 1, then 6e6 at
  // 0.75, ending at 11,500,000.)
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto k = g.add(compute("k", 0, 10'000'000));
  const auto s = g.add(send("s", 0, 1, 400'000, 1, model::CommEngine::sm_kernel, 25));
  const auto pre = g.add(compute("pre", 1, 2'000'000));
  const auto r = g.add(recv("r", 1, 0, 400'000, 1));
  g.depend(pre, r);
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[s].start_ps == 2'000'000);
  REQUIRE(res.tasks[s].end_ps == 8'000'000);
  REQUIRE(res.tasks[k].end_ps == 12'000'000);
  // rank 1's kernel ended before the transfer began: unaffected.
  REQUIRE(res.tasks[pre].end_ps == 2'000'000);
}

TEST_CASE("sms = -1 takes the device default on both ends", "[sim][contention]") {
  // Default 20 SMs: rate 0.8 while the transfer holds them. Rank 1 kernel q (10e6 work) from 0;
  // transfer 0 -> 1 (sm_kernel) from 0: 1e6 + 1e6 latency + 8e5 / 1e11 (8e6) -> ends 10e6, so q runs
  // at 0.8 for 10e6 ps (8e6 done), then 2e6 left at rate 1 -> ends 12,000,000.
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto q = g.add(compute("q", 1, 10'000'000));
  g.add(send("s", 0, 1, 800'000, 1, model::CommEngine::sm_kernel));
  const auto r = g.add(recv("r", 1, 0, 800'000, 1));
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[r].end_ps == 10'000'000);
  REQUIRE(res.tasks[q].end_ps == 12'000'000);
}

TEST_CASE("a copy-engine transfer holds no SMs but its HBM traffic slows compute", "[sim][contention]") {
  // HBM traffic factor 1: a transfer draining at 1e11 B/s moves 1e11 B/s of HBM on each end, so the
  // test model's rate is 1 - 1e11 / 1e12 = 0.9 while it drains (not during its latency phase).
  // Copy-engine transfer 0 -> 1 of 4e5 B from 0: latency 2e6 + 1e6 = 3e6, drains 3e6 .. 7e6.
  // Kernel k on rank 0 (10e6 work): 0-3e6 rate 1 (3e6 done), 3e6-7e6 at 0.9 (3.6e6 done), 3.4e6
  // left at rate 1 -> ends 10,400,000.
  const auto cluster = star(2, 1e11, 500'000, /*hbm_traffic_factor=*/1.0);
  TestCostModel costs;
  TaskGraph g(2);
  const auto k = g.add(compute("k", 0, 10'000'000));
  g.add(send("s", 0, 1, 400'000, 1));
  const auto r = g.add(recv("r", 1, 0, 400'000, 1));
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[r].end_ps == 7'000'000);
  REQUIRE(res.tasks[k].end_ps == 10'400'000);
}

namespace {
// TestCostModel's kernels, memory-bound: a kernel of W flops streams HBM at the test device's full
// 1e12 B/s for its W ps (hbm_bytes = 1e12 B/s x W ps), so it alone would take all of HBM.
class MemoryBoundCostModel final : public fusesim::model::KernelCostModel {
 public:
  fusesim::model::KernelCost cost(const fusesim::model::Kernel& k, fusesim::topo::Dtype d,
                                  const fusesim::topo::DeviceModel& device) const override {
    fusesim::model::KernelCost c = base_.cost(k, d, device);
    c.memory_s = fusesim::ps_to_seconds(c.duration_ps);
    c.hbm_bytes = kHbmBytesPerS * c.memory_s;
    return c;
  }
  double rate(const fusesim::model::KernelCost& c, const fusesim::topo::DeviceModel& device,
              const fusesim::model::DeviceLoad& load) const override {
    return base_.rate(c, device, load);
  }

 private:
  TestCostModel base_;
};
}  // namespace

TEST_CASE("a memory-bound kernel and a transfer share the rank's HBM max-min: each gets half", "[sim][contention]") {
  // HBM traffic factor 1, links of 1e12 B/s: a copy-engine transfer 0 -> 1 of 4e6 B from 0 (latency
  // 2 x 5e5 + 2e6 = 3e6 ps) could drain at the link's 1e12 B/s, and kernel k on rank 0 (20e6 ps of
  // work) wants all of rank 0's 1e12 B/s of HBM. As two users of that HBM they get half each: the
  // transfer's HBM port on rank 0 is max(1e12 - 1e12, 1e12 / 2) = 5e11 B/s, so it drains 4e6 B at
  // 0.5 B/ps in 8e6 ps (3e6 .. 11e6); the kernel sees 5e11 B/s of transfer traffic, rate
  // 1 - 5e11 / 1e12 = 0.5: 0-3e6 at 1 (3e6 done), 3e6-11e6 at 0.5 (4e6), the last 13e6 at 1 -> ends 24e6.
  // (Before the port, the transfer took the whole HBM for 3e6 .. 7e6 and the kernel stood still.)
  const auto cluster = star(2, 1e12, 500'000, /*hbm_traffic_factor=*/1.0);
  MemoryBoundCostModel costs;
  TaskGraph g(2);
  const auto k = g.add(compute("k", 0, 20'000'000));
  g.add(send("s", 0, 1, 4'000'000, 1));
  const auto r = g.add(recv("r", 1, 0, 4'000'000, 1));
  const auto res = Simulator(cluster, costs).run(g);
  CHECK(res.tasks[r].end_ps == 11'000'000);
  CHECK(res.tasks[k].end_ps == 24'000'000);

  // With the kernel on the receiver instead, the receiving end's port binds the same way.
  TaskGraph h(2);
  const auto k1 = h.add(compute("k", 1, 20'000'000));
  h.add(send("s", 0, 1, 4'000'000, 1));
  const auto r1 = h.add(recv("r", 1, 0, 4'000'000, 1));
  const auto res1 = Simulator(cluster, costs).run(h);
  CHECK(res1.tasks[r1].end_ps == 11'000'000);
  CHECK(res1.tasks[k1].end_ps == 24'000'000);

  // A compute-bound kernel (TestCostModel: no HBM bytes) leaves the transfer the link's full rate:
  // 4e6 B at 1 B/ps, 3e6 .. 7e6.
  TestCostModel compute_bound;
  TaskGraph u(2);
  u.add(compute("k", 0, 20'000'000));
  u.add(send("s", 0, 1, 4'000'000, 1));
  const auto r2 = u.add(recv("r", 1, 0, 4'000'000, 1));
  CHECK(Simulator(cluster, compute_bound).run(u).tasks[r2].end_ps == 7'000'000);
}

TEST_CASE("collective members hold SMs from the collective's start to their own end", "[sim][contention]") {
  // t=2 all-gather of 8e6 B with sms 50: runs 0 .. 47,000,000 (see engine_collective_test.cpp), holding
  // 50 SMs on both ranks. Kernel k on rank 1 (30e6 work) from 0 at rate 0.5: after 47e6 it has done
  // 23.5e6; 6.5e6 left at rate 1 -> ends 53,500,000.
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto k = g.add(compute("k", 1, 30'000'000));
  const auto ids = collective(g, "ag", sched::CollectiveKind::all_gather, {0, 1}, 8'000'000, 1,
                              model::CommEngine::sm_kernel, 50);
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[ids[1]].end_ps == 47'000'000);
  REQUIRE(res.tasks[k].end_ps == 53'500'000);
}

TEST_CASE("a collective member holds its SMs from its own launch while it waits for the others", "[sim][contention]") {
  // t=2 all-gather of 8e6 B with sms 50 (alone it takes 47,000,000 ps, engine_collective_test.cpp).
  // Rank 1's member waits for a 10,000,000 ps kernel `pre` on its compute stream; rank 0's member is
  // launched at 0 and spins on 50 of rank 0's SMs until the collective starts at 10e6, then holds them
  // to its end at 10e6 + 47e6 = 57,000,000.
  // Kernel k on rank 0 (40e6 work) from 0 at rate 0.5 throughout 0 .. 57e6 would do 28.5e6; it has
  // 40e6, so: 0-57e6 at 0.5 -> 28.5e6 done; 11.5e6 left at rate 1 -> ends 68,500,000.
  // Rank 1's `pre` runs before rank 1's member is launched: unslowed, ends at 10e6.
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(2);
  const auto k = g.add(compute("k", 0, 40'000'000));
  const auto pre = g.add(compute("pre", 1, 10'000'000));
  const auto ids = collective(g, "ag", sched::CollectiveKind::all_gather, {0, 1}, 8'000'000, 1,
                              model::CommEngine::sm_kernel, 50);
  g.depend(pre, ids[1]);
  const auto res = Simulator(cluster, costs).run(g);
  REQUIRE(res.tasks[ids[0]].ready_ps == 0);
  REQUIRE(res.tasks[ids[0]].start_ps == 10'000'000);
  REQUIRE(res.tasks[ids[0]].end_ps == 57'000'000);
  REQUIRE(res.tasks[pre].end_ps == 10'000'000);
  REQUIRE(res.tasks[k].end_ps == 68'500'000);
}

namespace {
// Ranks 0-1 on node 0 and 2-3 on node 1, all cabled to one fabric switch (1e11 B/s, 0.5 us a link, as
// star()); the device holds 40 SMs for a collective inside one node and its default 20 otherwise.
topo::Cluster two_nodes_of_two() {
  ClusterBuilder b;
  std::vector<topo::VertexId> gpus;
  for (int i = 0; i < 4; ++i) gpus.push_back(b.gpu());
  b.c.vertices[gpus[2]].node = 1;
  b.c.vertices[gpus[3]].node = 1;
  const auto s = b.sw("fabric");
  b.c.vertices[s].node = -1;
  for (auto g : gpus) b.cable(g, s, 1e11, 500'000);
  b.c.device_models["test-gpu"].contention.node_collective_sms = SourcedValue{40, "test"};
  b.c.num_nodes = 2;
  b.c.devices_per_node = 2;
  b.c.finalize();
  return b.c;
}
}  // namespace

TEST_CASE("a collective inside one node holds node_collective_sms, one across nodes default_comm_sms",
          "[sim][contention]") {
  // A t=2 all-gather of 8e6 B with sms -1 takes 47,000,000 ps on these links whichever pair it joins
  // (the test above: same routes, Simple protocol alone). Kernel k on rank 0 (30e6 work) from 0 beside it:
  // - ranks {0, 1}, one node: 40 SMs held, rate 1 - 40/100 = 0.6 for 47e6 ps -> 28.2e6 done, 1.8e6 left
  //   at rate 1 -> ends 48,800,000;
  // - ranks {0, 2}, two nodes: the default 20, rate 0.8 -> 30e6 / 0.8 = 37,500,000, before the end.
  const auto cluster = two_nodes_of_two();
  TestCostModel costs;
  for (const auto& [peer, k_end] : {std::pair{1, TimePs{48'800'000}}, std::pair{2, TimePs{37'500'000}}}) {
    TaskGraph g(4);
    const auto k = g.add(compute("k", 0, 30'000'000));
    const auto ids = collective(g, "ag", sched::CollectiveKind::all_gather, {0, peer}, 8'000'000, 1);
    const auto res = Simulator(cluster, costs).run(g);
    CAPTURE(peer);
    REQUIRE(res.tasks[ids[0]].end_ps == 47'000'000);
    REQUIRE(res.tasks[k].end_ps == k_end);
  }
}

namespace {
// Kernels that say what they are bound by: op "gemm" needs all of the SMs' math and 0.3 of HBM at full
// speed, op "norm" 0.05 of the math and all of HBM, op "copy" only HBM, op "math" only the SMs.
// Duration = flops picoseconds.
class BoundCostModel final : public model::KernelCostModel {
 public:
  model::KernelCost cost(const model::Kernel& kernel, topo::Dtype, const topo::DeviceModel&) const override {
    const auto& e = std::get<model::ElementwiseKernel>(kernel);
    model::KernelCost c;
    c.flops = e.flops;
    c.duration_ps = static_cast<TimePs>(std::llround(e.flops));
    const double d = ps_to_seconds(c.duration_ps);
    c.compute_s = e.op == "gemm" || e.op == "math" ? d : e.op == "norm" ? 0.05 * d : 0.0;
    c.memory_s = e.op == "gemm" ? 0.3 * d : e.op == "math" ? 0.0 : d;
    return c;
  }
  double rate(const model::KernelCost&, const topo::DeviceModel&, const model::DeviceLoad&) const override { return 1.0; }
};

sched::Task bound_kernel(sched::TaskName name, const std::string& op, double work_ps, int stream) {
  sched::Task t = compute(name, 0, work_ps, stream);
  std::get<sched::ComputeTask>(t.kind).kernel = model::ElementwiseKernel{op, 1, work_ps, 0};
  return t;
}
}  // namespace

TEST_CASE("kernels sharing a device split it by what each is bound by", "[sim][contention]") {
  const auto cluster = star(1);
  BoundCostModel costs;
  SECTION("a compute-bound and a memory-bound kernel each get more than half") {
    // gemm (10e6 ps alone; needs SMs 1, HBM 0.3) on stream 0 beside norm (4e6 ps; SMs 0.05, HBM 1) on
    // stream 1, both from 0. Shares rise together: the SMs would fill at 1 / 1.05 = 0.952, HBM at
    // 1 / 1.3 = 0.769, first; both use HBM, so both run at 1 / 1.3.
    //   norm ends at 4e6 x 1.3 = 5,200,000; gemm has then done 5.2e6 / 1.3 = 4e6, 6e6 left alone at
    //   rate 1 -> ends 11,200,000. (An even split: norm at 8e6, gemm at 14e6.)
    TaskGraph g(1);
    const auto a = g.add(bound_kernel("gemm", "gemm", 10'000'000, 0));
    const auto b = g.add(bound_kernel("norm", "norm", 4'000'000, 1));
    const auto res = Simulator(cluster, costs).run(g);
    CHECK(res.tasks[b].end_ps == 5'200'000);
    CHECK(res.tasks[a].end_ps == 11'200'000);
  }
  SECTION("kernels bound by the same resource split it evenly") {
    // Two gemm kernels of 10e6 ps: the SMs fill at 1 / 2: both end at 20,000,000.
    TaskGraph g(1);
    const auto a = g.add(bound_kernel("a", "gemm", 10'000'000, 0));
    const auto b = g.add(bound_kernel("b", "gemm", 10'000'000, 1));
    const auto res = Simulator(cluster, costs).run(g);
    CHECK(res.tasks[a].end_ps == 20'000'000);
    CHECK(res.tasks[b].end_ps == 20'000'000);
  }
  SECTION("once a resource is full, the kernels that do not use it rise on") {
    // math (SMs 1, no HBM) beside two copies (HBM 1 each, no SMs), all 6e6 ps. HBM fills at 1 / 2 and
    // holds both copies there; the SMs then serve math alone, up to its cap of 1. math ends at
    // 6,000,000, the copies at 12,000,000. (An even split of three: all at 18e6.)
    TaskGraph g(1);
    const auto a = g.add(bound_kernel("m", "math", 6'000'000, 0));
    const auto b = g.add(bound_kernel("c1", "copy", 6'000'000, 1));
    const auto c = g.add(bound_kernel("c2", "copy", 6'000'000, 2));
    const auto res = Simulator(cluster, costs).run(g);
    CHECK(res.tasks[a].end_ps == 6'000'000);
    CHECK(res.tasks[b].end_ps == 12'000'000);
    CHECK(res.tasks[c].end_ps == 12'000'000);
  }
}

TEST_CASE("a kernel longer than 1e6 s is refused as bad input, not run into the end of time", "[sim][hostile]") {
  // Issue 20, item 3: a kernel whose time passed the picosecond range ran as 0 s. The test model's
  // kernel of 2e18 flops takes 2e18 ps = 2e6 s.
  const auto cluster = star(1);
  TestCostModel costs;
  TaskGraph g(1);
  g.add(compute("huge", 0, 2e18));
  REQUIRE_THROWS_AS(Simulator(cluster, costs).run(g), fusesim::InputError);
  REQUIRE_THROWS_WITH(Simulator(cluster, costs).run(g), Catch::Contains("task 'huge': its kernel would take 2e+06 s"));
}

TEST_CASE("a cost model's error comes after the graph's own errors, and the first one is the one raised", "[sim][hostile]") {
  // Costs are computed during validation's pass over the tasks (once per distinct kernel), but an error
  // of the cost model is held until validation has passed. TestCostModel refuses attention kernels
  // (std::logic_error); a kernel of 2e18 flops takes 2e6 s, refused as bad input (InputError).
  const auto cluster = star(2);
  TestCostModel costs;
  model::AttentionKernel kernel;
  kernel.heads = kernel.kv_heads = 1;
  kernel.seq_q = kernel.seq_kv = 128;
  kernel.head_dim = 64;
  sched::Task attention = compute("attn", 0, 1);
  attention.kind = sched::ComputeTask{kernel, topo::Dtype::bf16, false};
  {
    TaskGraph g(2);
    g.add(attention);
    g.add(compute("same", 0, 1));
    g.add(compute("same", 1, 1));
    REQUIRE_THROWS_WITH(Simulator(cluster, costs).run(g), Catch::Contains("share the name 'same'"));
  }
  {
    TaskGraph g(2);
    g.add(compute("fine", 1, 5));
    g.add(attention);
    g.add(compute("huge", 1, 2e18));
    g.add(compute("fine again", 0, 5));  // an already priced kernel after the failure
    REQUIRE_THROWS_AS(Simulator(cluster, costs).run(g), std::logic_error);
    REQUIRE_THROWS_WITH(Simulator(cluster, costs).run(g), Catch::Contains("attention not supported"));
  }
  {
    TaskGraph g(2);
    g.add(compute("huge", 1, 2e18));
    g.add(attention);
    REQUIRE_THROWS_WITH(Simulator(cluster, costs).run(g), Catch::Contains("task 'huge': its kernel would take 2e+06 s"));
  }
  {
    // Two tasks of one kernel: the second finds its cost priced once.
    TaskGraph g(2);
    const auto a = g.add(compute("a", 0, 7));
    const auto b = g.add(compute("b", 1, 7));
    const auto res = Simulator(cluster, costs).run(g);
    CHECK(res.tasks[a].end_ps == 7);
    CHECK(res.tasks[b].end_ps == 7);
  }
}

TEST_CASE("observer callbacks arrive in time order", "[sim][observer]") {
  struct Recorder : sim::Observer {
    std::vector<TimePs> times;
    int starts = 0, ends = 0, transfers = 0;
    void on_task_start(const sched::Task&, sched::TaskId, TimePs now) override {
      times.push_back(now);
      ++starts;
    }
    void on_task_end(const sched::Task&, sched::TaskId, TimePs now) override {
      times.push_back(now);
      ++ends;
    }
    void on_transfer_end(const sim::TransferRecord& t) override {
      times.push_back(t.end_ps);
      ++transfers;
    }
  };
  const auto cluster = star(4);
  TestCostModel costs;
  TaskGraph g(4);
  for (int r = 0; r < 4; ++r) {
    const std::string name = "pre" + std::to_string(r);
    g.add(compute(name, r, 1'000'000.0 * (r + 1)));
  }
  collective(g, "ag", sched::CollectiveKind::all_gather, iota_ranks(4), 8'000'000, 1);
  g.add(send("s", 0, 3, 1'000'000, 5));
  g.add(recv("r", 3, 0, 1'000'000, 5));
  Recorder rec;
  const auto res = Simulator(cluster, costs).run(g, &rec);
  REQUIRE(std::is_sorted(rec.times.begin(), rec.times.end()));
  REQUIRE(rec.starts == static_cast<int>(g.size()));
  REQUIRE(rec.ends == static_cast<int>(g.size()));
  REQUIRE(rec.transfers == static_cast<int>(res.transfers.size()));
  REQUIRE(rec.times.back() == res.makespan_ps);
}

namespace {
// Prices an element-wise kernel by its rows alone: 1,000 ps a row (a row-wise kernel's cost model).
class RowsCostModel final : public fusesim::model::KernelCostModel {
 public:
  fusesim::model::KernelCost cost(const fusesim::model::Kernel& kernel, fusesim::topo::Dtype,
                                  const fusesim::topo::DeviceModel&) const override {
    fusesim::model::KernelCost c;
    c.duration_ps = 1'000 * std::get<fusesim::model::ElementwiseKernel>(kernel).rows;
    c.memory_s = fusesim::ps_to_seconds(c.duration_ps);
    return c;
  }
  double rate(const fusesim::model::KernelCost&, const fusesim::topo::DeviceModel&,
              const fusesim::model::DeviceLoad&) const override {
    return 1.0;
  }
};
}  // namespace

TEST_CASE("element-wise kernels that differ only in rows are priced apart", "[sim][compute]") {
  // Same op, bytes and FLOPs: the graph's table of distinct kernels (TaskGraph::add) must still tell 16
  // rows from 4096, or both tasks would hold one kernel and the engine price them alike.
  const auto cluster = star(1);
  TaskGraph g(1);
  const auto with_rows = [](fusesim::sched::Task t, std::int64_t rows) {
    auto& c = std::get<fusesim::sched::ComputeTask>(t.kind);
    auto kernel = std::get<fusesim::model::ElementwiseKernel>(*c.kernel);
    kernel.rows = rows;
    c.kernel = kernel;
    return t;
  };
  const auto a = with_rows(compute("a", 0, 1.0), 16);
  const auto b = with_rows(compute("b", 0, 1.0), 4096);
  const auto ia = g.add(a);
  const auto ib = g.add(b);
  const RowsCostModel costs;
  const auto res = Simulator(cluster, costs).run(g);
  // One stream: a runs 16 x 1,000 ps, then b 4,096 x 1,000 ps.
  CHECK(res.tasks[ia].end_ps == 16'000);
  CHECK(res.tasks[ib].end_ps == 16'000 + 4'096'000);
}

TEST_CASE("attention kernels that differ only in time factor or fusion are priced apart", "[sim][stream]") {
  // The graph holds each distinct kernel once (TaskGraph::add) and the engine prices each once
  // (KernelCostCache): two attention tasks of one shape,
  // one at FlashAttention-2's time and one at twice it, must not share a cost. Roofline on the star's
  // device; on one stream, back to back: the second takes its own, longer, time.
  const auto cluster = star(1);
  const fusesim::model::RooflineCostModel costs;
  TaskGraph g(1);
  fusesim::model::AttentionKernel k;
  k.batch = 1, k.heads = 8, k.kv_heads = 8, k.seq_q = 2048, k.seq_kv = 2048, k.head_dim = 128;
  fusesim::sched::Task fast;
  fast.name = "fa2";
  fast.rank = 0;
  fast.kind = fusesim::sched::ComputeTask{k, fusesim::topo::Dtype::bf16, false};
  fusesim::sched::Task slow = fast;
  slow.name = "triton";
  k.time_factor = 2.0;
  slow.kind = fusesim::sched::ComputeTask{k, fusesim::topo::Dtype::bf16, false};
  const auto a = g.add(fast);
  const auto b = g.add(slow);
  const auto res = Simulator(cluster, costs).run(g);
  const auto one = res.tasks[a].end_ps - res.tasks[a].start_ps;
  REQUIRE(one > 0);
  CHECK(res.tasks[b].end_ps - res.tasks[b].start_ps == costs.cost(k, fusesim::topo::Dtype::bf16, cluster.device(0)).duration_ps);
  CHECK(res.tasks[b].end_ps - res.tasks[b].start_ps > one);
}
