// The same graph run twice gives the same SimResult, field by field, including graphs where many
// events fall on the same picosecond (equal-time order decides the order of transfers and ends).
#include <map>

#include <catch2/catch.hpp>

#include "sim_test_util.hpp"

using namespace sim_test;
using fusesim::sched::CollectiveKind;
using fusesim::sched::TaskGraph;
using fusesim::sim::SimResult;
using fusesim::sim::Simulator;

namespace {

void require_identical(const SimResult& a, const SimResult& b) {
  REQUIRE(a.makespan_ps == b.makespan_ps);
  REQUIRE(a.events_processed == b.events_processed);
  REQUIRE(a.tasks.size() == b.tasks.size());
  for (std::size_t i = 0; i < a.tasks.size(); ++i) {
    REQUIRE(a.tasks[i].ready_ps == b.tasks[i].ready_ps);
    REQUIRE(a.tasks[i].start_ps == b.tasks[i].start_ps);
    REQUIRE(a.tasks[i].end_ps == b.tasks[i].end_ps);
  }
  REQUIRE(a.transfers.size() == b.transfers.size());
  for (std::size_t i = 0; i < a.transfers.size(); ++i) {
    const auto& x = a.transfers[i];
    const auto& y = b.transfers[i];
    REQUIRE(x.task == y.task);
    REQUIRE(x.peer_task == y.peer_task);
    REQUIRE(x.src_rank == y.src_rank);
    REQUIRE(x.dst_rank == y.dst_rank);
    REQUIRE(x.bytes == y.bytes);
    REQUIRE(x.step == y.step);
    REQUIRE(x.engine == y.engine);
    REQUIRE(x.start_ps == y.start_ps);
    REQUIRE(x.end_ps == y.end_ps);
  }
}

// 8 ranks x `layers`: identical kernels everywhere (so every rank's events coincide), a ring of P2P
// sends per layer on the copy engine, an all-gather and an all-to-all on the comm stream, all
// contending for SMs and links at the same instants.
TaskGraph simultaneous_graph(int layers) {
  const int t = 8;
  TaskGraph g(t);
  std::vector<sched::TaskId> prev(t, 0);
  bool first = true;
  for (int l = 0; l < layers; ++l) {
    const std::string L = "L" + std::to_string(l);
    std::vector<sched::TaskId> k(t);
    for (int r = 0; r < t; ++r) {
      const std::string name = L + "/k/r" + std::to_string(r);
      k[r] = g.add(compute(name, r, 3'000'000));
      if (!first) g.depend(prev[r], k[r]);
    }
    const auto ag = collective(g, L + "/ag", CollectiveKind::all_gather, iota_ranks(t), 8'000'000, 2 * l);
    const auto a2a = collective(g, L + "/a2a", CollectiveKind::all_to_all, iota_ranks(t), 8'000'000, 2 * l + 1,
                                model::CommEngine::sm_kernel, 10);
    std::vector<sched::TaskId> recv_on(t);  // the recv that lands on rank r (from rank r-1)
    for (int r = 0; r < t; ++r) {
      const std::string send_name = L + "/s/r" + std::to_string(r);
      const std::string recv_name = L + "/v/r" + std::to_string((r + 1) % t);
      const auto s = g.add(send(send_name, r, (r + 1) % t, 1'000'000, l));
      recv_on[(r + 1) % t] = g.add(recv(recv_name, (r + 1) % t, r, 1'000'000, l));
      g.depend(k[r], s);
      g.depend(k[r], ag[r]);
      const std::string k2_name = L + "/k2/r" + std::to_string(r);
      const auto k2 = g.add(compute(k2_name, r, 2'000'000, 1));
      g.depend(k[r], k2);
      g.depend(k2, a2a[r]);
    }
    // The next layer on rank r waits for the data rank r received and for its collectives.
    for (int r = 0; r < t; ++r) {
      const std::string join_name = L + "/join/r" + std::to_string(r);
      const auto join = g.add(compute(join_name, r, 500'000));
      g.depend(recv_on[r], join);
      g.depend(ag[r], join);
      g.depend(a2a[r], join);
      prev[r] = join;
    }
    first = false;
  }
  return g;
}

}  // namespace

TEST_CASE("determinism: the same graph twice gives an identical result", "[sim][determinism]") {
  const auto cluster = star(8);
  TestCostModel costs;
  const TaskGraph g = simultaneous_graph(6);
  const SimResult a = Simulator(cluster, costs).run(g);
  const SimResult b = Simulator(cluster, costs).run(g);
  require_identical(a, b);
  // Sanity: every task ran, in order of its own timing.
  for (const auto& t : a.tasks) {
    REQUIRE(t.ready_ps >= 0);
    REQUIRE(t.ready_ps <= t.start_ps);
    REQUIRE(t.start_ps <= t.end_ps);
    REQUIRE(t.end_ps <= a.makespan_ps);
  }
  // 6 layers x (8 P2P + 8 x 7 all-gather steps + 8 x 7 all-to-all steps).
  REQUIRE(a.transfers.size() == 6u * (8 + 56 + 56));
  for (std::size_t i = 1; i < a.transfers.size(); ++i) REQUIRE(a.transfers[i - 1].end_ps <= a.transfers[i].end_ps);
}

TEST_CASE("determinism: symmetric ranks see symmetric times", "[sim][determinism]") {
  // Every rank does the same work on a symmetric star, so each rank's copy of a task must start and
  // end at exactly the same picosecond, whatever order the simultaneous events were processed in.
  const auto cluster = star(8);
  TestCostModel costs;
  const TaskGraph g = simultaneous_graph(3);
  const SimResult res = Simulator(cluster, costs).run(g);
  std::map<std::string, std::pair<TimePs, TimePs>> by_role;  // name without "/rN" -> (start, end)
  for (sched::TaskId id = 0; id < g.size(); ++id) {
    const std::string_view name = g.task(id).name;
    const std::string role(name.substr(0, name.rfind("/r")));
    const auto times = std::make_pair(res.tasks[id].start_ps, res.tasks[id].end_ps);
    auto [it, inserted] = by_role.emplace(role, times);
    if (!inserted) {
      INFO(name);
      REQUIRE(it->second == times);
    }
  }
}
