// sched::validate and the refusals of Simulator::run.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "fusesim/util/error.hpp"
#include "sim_test_util.hpp"

using namespace sim_test;
using Catch::Contains;
using fusesim::GraphError;
using fusesim::sched::CollectiveKind;
using fusesim::sched::TaskGraph;
using fusesim::sched::validate;

TEST_CASE("validate: a dependency cycle is refused with its tasks named", "[sim][validate]") {
  TaskGraph g(3);
  const auto a = g.add(compute("a", 0, 1));
  const auto b = g.add(compute("b", 1, 1));
  const auto c = g.add(compute("c", 2, 1));
  g.depend(a, b);
  g.depend(b, c);
  g.depend(c, a);
  REQUIRE_THROWS_MATCHES(validate(g), GraphError, Catch::Message("dependency cycle: a -> b -> c -> a"));
}

TEST_CASE("validate: a cycle of 200,000 tasks is named by its first and last steps, not printed whole", "[sim][validate]") {
  // Issue 20, item 6: the message was a line of megabytes. t0 -> t1 -> ... -> t199999 -> t0, each task
  // on its own rank's stream: the first 8 and the last 8 steps and the count of those between.
  constexpr int kTasks = 200'000;
  TaskGraph g(kTasks);
  // (std::string("t").append(...), not "t" + ...: GCC 12 warns wrongly of overlapping copies on the latter.)
  for (int i = 0; i < kTasks; ++i) g.add(compute(std::string("t").append(std::to_string(i)), i, 1));
  for (int i = 0; i < kTasks; ++i) g.depend(static_cast<fusesim::sched::TaskId>(i), static_cast<fusesim::sched::TaskId>((i + 1) % kTasks));
  try {
    validate(g);
    FAIL("the cycle was not refused");
  } catch (const GraphError& e) {
    const std::string m = e.what();
    CHECK(m.size() < 400);
    CHECK(m.find("dependency cycle: t0 -> t1 -> t2 -> t3 -> t4 -> t5 -> t6 -> t7 -> t8 -> ... (199984 more steps) ... -> "
                 "t199993 -> ") == 0);
    CHECK(m.find("-> t199999 -> t0") != std::string::npos);
  }
}

TEST_CASE("validate: a cycle through stream order is refused", "[sim][validate]") {
  // first and second share rank 0's compute stream (first added first); an explicit edge
  // second -> first closes the loop first -> (stream) second -> first.
  TaskGraph g(1);
  const auto first = g.add(compute("first", 0, 1));
  const auto second = g.add(compute("second", 0, 1));
  g.depend(second, first);
  REQUIRE_THROWS_MATCHES(validate(g), GraphError, Catch::Message("dependency cycle: first -> second -> first"));
}

TEST_CASE("validate: a cycle through a rendezvous is refused", "[sim][validate]") {
  // The recv waits for a kernel that waits for the send: the transfer can never start.
  TaskGraph g(2);
  const auto s = g.add(send("s", 0, 1, 100, 1));
  const auto r = g.add(recv("r", 1, 0, 100, 1));
  const auto k = g.add(compute("k", 1, 1));
  g.depend(s, k);
  g.depend(k, r);
  REQUIRE_THROWS_WITH(validate(g), Contains("dependency cycle: s -> k -> r ~ s"));
}

TEST_CASE("validate: a self-dependency is a cycle", "[sim][validate]") {
  TaskGraph g(1);
  const auto a = g.add(compute("a", 0, 1));
  g.depend(a, a);
  REQUIRE_THROWS_MATCHES(validate(g), GraphError, Catch::Message("dependency cycle: a -> a"));
}

TEST_CASE("validate: an unmatched send is refused", "[sim][validate]") {
  TaskGraph g(2);
  g.add(send("x", 0, 1, 100, 7));
  REQUIRE_THROWS_MATCHES(validate(g), GraphError,
                         Catch::Message("send 'x' (rank 0 -> 1, tag 7) has no matching recv"));
  // A recv with another tag does not match it.
  g.add(recv("y", 1, 0, 100, 8));
  REQUIRE_THROWS_WITH(validate(g), Contains("send 'x' (rank 0 -> 1, tag 7) has no matching recv"));
}

TEST_CASE("validate: a recv without its send is refused", "[sim][validate]") {
  TaskGraph g(2);
  g.add(recv("y", 1, 0, 100, 3));
  REQUIRE_THROWS_MATCHES(validate(g), GraphError,
                         Catch::Message("recv 'y' (rank 1 <- 0, tag 3) has no matching send"));
}

TEST_CASE("validate: send and recv must agree on the size", "[sim][validate]") {
  TaskGraph g(2);
  g.add(send("x", 0, 1, 100, 3));
  g.add(recv("y", 1, 0, 200, 3));
  REQUIRE_THROWS_WITH(validate(g), Contains("disagree on the size"));
}

TEST_CASE("validate: a collective with a missing member is refused", "[sim][validate]") {
  TaskGraph g(4);
  // Members for ranks 0, 1, 3 of group {0, 1, 2, 3}: rank 2 never adds its task.
  for (int r : {0, 1, 3}) {
    const std::string name = "ag/r" + std::to_string(r);
    sched::Task t;
    t.name = name;
    t.rank = r;
    t.stream = {sched::StreamKind::comm, 0};
    t.kind = sched::CollectiveTask{CollectiveKind::all_gather, {0, 1, 2, 3}, 800, 9, model::CommEngine::sm_kernel, -1};
    g.add(t);
  }
  REQUIRE_THROWS_WITH(validate(g), Contains("collective instance 9 over ranks [0, 1, 2, 3]") &&
                                       Contains("rank 2 has no task") && Contains("'ag/r0'"));
}

TEST_CASE("validate: collective members must agree", "[sim][validate]") {
  TaskGraph g(2);
  auto ids = collective(g, "ag", CollectiveKind::all_gather, {0, 1}, 800, 1);
  std::get<sched::CollectiveTask>(g.task(ids[1]).kind).bytes = 400;
  REQUIRE_THROWS_WITH(validate(g), Contains("disagree on the size") && Contains("'ag/r0'") && Contains("'ag/r1'"));
  std::get<sched::CollectiveTask>(g.task(ids[1]).kind).bytes = 800;
  std::get<sched::CollectiveTask>(g.task(ids[1]).kind).kind = CollectiveKind::all_reduce;
  REQUIRE_THROWS_WITH(validate(g), Contains("disagree on the kind"));
  std::get<sched::CollectiveTask>(g.task(ids[1]).kind).kind = CollectiveKind::all_gather;
  REQUIRE_NOTHROW(validate(g));
}

TEST_CASE("validate: ranks, sizes and names are checked", "[sim][validate]") {
  {
    TaskGraph g(2);
    g.add(compute("a", 2, 1));
    REQUIRE_THROWS_WITH(validate(g), Contains("'a'") && Contains("rank 2 is outside [0, 2)"));
  }
  {
    TaskGraph g(2);
    g.add(send("x", 0, 5, 100, 1));
    REQUIRE_THROWS_WITH(validate(g), Contains("peer 5 is outside [0, 2)"));
  }
  {
    TaskGraph g(2);
    g.add(send("x", 0, 1, 0, 1));
    g.add(recv("y", 1, 0, 0, 1));
    REQUIRE_THROWS_WITH(validate(g), Contains("non-positive size"));
  }
  {
    TaskGraph g(2);
    g.add(compute("a", 0, 0));
    REQUIRE_THROWS_WITH(validate(g), Contains("needs bytes >= 0, flops >= 0 and some work"));
  }
  {
    TaskGraph g(2);
    g.add(compute("same", 0, 1));
    g.add(compute("same", 1, 1));
    REQUIRE_THROWS_WITH(validate(g), Contains("share the name 'same'"));
  }
  {
    TaskGraph g(2);
    sched::Task t;
    t.name = "c";
    t.stream = {sched::StreamKind::comm, 0};
    t.kind = sched::CollectiveTask{CollectiveKind::all_gather, {0, 0}, 100, 1, model::CommEngine::sm_kernel, -1};
    g.add(t);
    REQUIRE_THROWS_WITH(validate(g), Contains("appears twice"));
  }
  {
    TaskGraph g(1);
    REQUIRE_THROWS_AS(g.depend(0, 1), GraphError);
  }
}

TEST_CASE("validate: names of every length are told apart by their last character, and a duplicate is found",
          "[sim][validate]") {
  // The name hash reads a name's last 1-7 bytes in whole loads (a longer name reloads its last 8):
  // for each length 1..40 and each position of the differing character (first, middle, last), names
  // that differ in that one character pass, and repeating one of them is refused, naming it. 2,000
  // names per graph put them in more than one bucket of the check (about 1,024 names each).
  for (std::size_t length = 1; length <= 40; ++length) {
    for (const std::size_t at : {std::size_t{0}, length / 2, length - 1}) {
      TaskGraph g(1);
      std::vector<std::string> names;
      for (int i = 0; i < 2000; ++i) {
        std::string name(length, 'n');
        name[at] = static_cast<char>(' ' + i % 95);  // 95 printable characters,
        if (length > 1) name[at == 0 ? length - 1 : 0] = static_cast<char>('A' + i / 95);  // then another place
        names.push_back(name);
      }
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
      for (const std::string& name : names) g.add(compute(name, 0, 1));
      INFO("length " << length << ", differing at " << at << ", " << names.size() << " names");
      REQUIRE_NOTHROW(validate(g));
      g.add(compute(names[names.size() / 3], 0, 1));
      REQUIRE_THROWS_WITH(validate(g), Contains("share the name '" + names[names.size() / 3] + "'"));
    }
  }
}

TEST_CASE("the simulator refuses a graph with more ranks than the cluster", "[sim][validate]") {
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(4);
  g.add(compute("a", 3, 1));
  REQUIRE_THROWS_WITH(sim::Simulator(cluster, costs).run(g), Contains("4 ranks") && Contains("has 2"));
}

TEST_CASE("the simulator validates before running", "[sim][validate]") {
  const auto cluster = star(2);
  TestCostModel costs;
  TaskGraph g(2);
  g.add(send("x", 0, 1, 100, 7));
  REQUIRE_THROWS_AS(sim::Simulator(cluster, costs).run(g), GraphError);
}
