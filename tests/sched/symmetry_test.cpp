// Symmetric (mirrored) simulation of identical DP replicas (docs/schedules.md, "Symmetry"): replica
// 0 alone (or a group of replicas), its collectives timed by the engine over the images of the
// other replicas and its rings of P2P steps receiving from them through proxy receives, must give
// exactly the timeline that simulating every rank gives, with the DP sync as collectives (what
// `--symmetry mirror` runs) and with every collective as ring P2P steps (GenerateOptions::dp_as_p2p)
// in both. Exactness reference: the full-rank simulation, compared task by task to the picosecond.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fusesim/analysis/metrics.hpp"
#include "fusesim/model/kernel.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/sched/generate.hpp"
#include "fusesim/sched/symmetry.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/topo/rings.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"

using namespace fusesim;
using namespace fusesim::sched;

namespace {

// Llama-3-70B's layer shapes, 2 layers, sequence 1024, TP 8 x DP 4 on the four DGX H100 nodes (one
// replica per node, DP rings over the rails). Every gradient's rows split evenly into 4 ring parts
// (8192, 1024, 7168, 3584 / 4 and the padded vocabulary 129024 / 8 / 4), so every replica moves the
// same bytes per step.
model::Workload small_llama(model::DpSharding sharding, std::int64_t micro_batches) {
  model::Workload w = model::load_workload("llama-3-70b-4node");
  w.arch.layers = 2;
  w.sequence_length = 1024;
  w.grad_accumulation = micro_batches;
  w.parallel.dp_sharding = sharding;
  return w;
}

// Llama-3-8B's layer shapes, 2 layers, sequence 4096, TP 4 x UP 2 x DP 4 on the four DGX H100 nodes:
// DP replica d is node d, ranks (2d + u) x 4 + ti.
model::Workload small_ulysses() {
  model::Workload w = model::load_workload("llama-3-8b-ulysses");
  w.arch.layers = 2;
  w.sequence_length = 4096;
  w.parallel.tp = 4;
  w.parallel.up = 2;
  w.parallel.dp = 4;
  return w;
}

struct Outcome {
  Schedule schedule;
  sim::SimResult result;
  analysis::StepMetrics metrics;
};

Outcome simulate(const model::Workload& w, const topo::Cluster& c, model::ScheduleKind kind, bool mirror,
                 bool p2p = true, bool tp_images = false, Scope scope = Scope::step,
                 Parallelism parallelism = Parallelism::dp) {
  GenerateOptions o;
  o.scope = scope;
  o.parallelism = parallelism;
  o.dp_as_p2p = p2p;
  o.mirror_dp = mirror;
  o.mirror_tp = mirror && tp_images;
  Outcome out{generate(w, "small-llama", c, kind, o), {}, {}};
  const model::RooflineCostModel costs;
  sim::Simulator sim(c, costs);
  out.result = sim.run(out.schedule.graph);
  out.metrics = analysis::analyze(out.schedule, out.result, c, costs, w.dtype);
  return out;
}

// Every task of the mirrored graph against its namesake in the full graph (a proxy carries the name
// of the receive it stands in for), to the picosecond; then the metrics of the simulated ranks.
// `proxies`: whether the mirrored graph has proxy receives (rings of P2P steps) or none (collectives).
void require_same_timeline(const Outcome& full, const Outcome& mirror, const std::vector<int>& simulated,
                           bool proxies_expected = true) {
  const std::set<int> sim_ranks(simulated.begin(), simulated.end());
  std::map<std::string, TaskId> by_name;
  for (TaskId id = 0; id < full.schedule.graph.size(); ++id) {
    const Task& t = full.schedule.graph.task(id);
    if (sim_ranks.count(t.rank) != 0) REQUIRE(by_name.emplace(t.name, id).second);
  }
  std::size_t compared = 0, proxies = 0;
  for (TaskId id = 0; id < mirror.schedule.graph.size(); ++id) {
    const Task& t = mirror.schedule.graph.task(id);
    if (sim_ranks.count(t.rank) == 0) {
      REQUIRE(std::holds_alternative<RecvTask>(t.kind));
      ++proxies;
    }
    const auto it = by_name.find(std::string(t.name));
    REQUIRE(it != by_name.end());
    const sim::TaskTiming& a = mirror.result.tasks[id];
    const sim::TaskTiming& b = full.result.tasks[it->second];
    INFO(t.name);
    REQUIRE(a.ready_ps == b.ready_ps);
    REQUIRE(a.start_ps == b.start_ps);
    REQUIRE(a.end_ps == b.end_ps);
    ++compared;
  }
  CHECK(compared == by_name.size());
  CHECK((proxies > 0) == proxies_expected);
  CHECK(mirror.result.makespan_ps == full.result.makespan_ps);
  CHECK(mirror.metrics.gpus == full.metrics.gpus);
  CHECK(mirror.metrics.tokens == full.metrics.tokens);
  CHECK(mirror.metrics.model_flops == Approx(full.metrics.model_flops).epsilon(1e-12));
  CHECK(mirror.metrics.mfu == Approx(full.metrics.mfu).epsilon(1e-12));
  REQUIRE(mirror.metrics.ranks.size() == simulated.size());
  for (std::size_t i = 0; i < simulated.size(); ++i) {
    const analysis::RankMetrics& a = mirror.metrics.ranks[i];
    const analysis::RankMetrics& b = full.metrics.ranks[static_cast<std::size_t>(simulated[i])];
    REQUIRE(a.rank == simulated[i]);
    CHECK(a.compute_ps == b.compute_ps);
    CHECK(a.comm_ps == b.comm_ps);
    CHECK(a.exposed_comm_ps == b.exposed_comm_ps);
    CHECK(a.idle_ps == b.idle_ps);
  }
  CHECK(mirror.metrics.critical_rank == full.metrics.critical_rank);
  REQUIRE(mirror.metrics.stages.size() == full.metrics.stages.size());
  for (std::size_t s = 0; s < full.metrics.stages.size(); ++s) {
    CHECK(mirror.metrics.stages[s].rank == full.metrics.stages[s].rank);
    CHECK(mirror.metrics.stages[s].bubble_ps == full.metrics.stages[s].bubble_ps);
  }
}

}  // namespace

TEST_CASE("Mirrored DP replicas reproduce the full-rank simulation exactly", "[symmetry][dp]") {
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  constexpr int kMembers = 8;  // tp 8 x up 1: replica 0 is ranks 0..7
  for (bool p2p : {true, false})
  for (auto sharding : {model::DpSharding::ddp, model::DpSharding::zero1, model::DpSharding::zero3})
    for (auto kind : {model::ScheduleKind::baseline, model::ScheduleKind::slice, model::ScheduleKind::commfuse}) {
      const std::int64_t mbs = sharding == model::DpSharding::zero1 ? 2 : 1;  // accumulation once too
      const model::Workload w = small_llama(sharding, mbs);
      INFO(fmt::format("{} {}{}", model::to_string(sharding), model::to_string(kind), p2p ? " p2p" : ""));
      const Outcome full = simulate(w, c, kind, false, p2p);
      const Outcome mirror = simulate(w, c, kind, true, p2p);
      // Replica 0 only: its own tasks plus one proxy per DP ring receive, fewer than a third of the
      // full graph's 4 replicas.
      CHECK(mirror.schedule.graph.size() * 3 < full.schedule.graph.size());
      CHECK(mirror.schedule.simulated_ranks == kMembers);
      CHECK(full.schedule.simulated_ranks == 0);

      // Every replica-0 task to the picosecond (a proxy on replica 1 carries the name of replica 0's
      // receive it stands in for); the same per-rank metrics, and the whole job's tokens, GPUs, FLOPs.
      // Collectives need no proxy; CommFuse's fused ring does.
      std::vector<int> replica0(kMembers);
      for (int r = 0; r < kMembers; ++r) replica0[static_cast<std::size_t>(r)] = r;
      require_same_timeline(full, mirror, replica0, p2p || kind == model::ScheduleKind::commfuse);
    }
}

TEST_CASE("Two mirrored DP replicas: the ring's receive arrives through the leaf, not through replica 1's node",
          "[symmetry][dp]") {
  // TP 8 x DP 2 on two DGX H100 nodes: replica 0's hop to replica 1 (rank r to r + 8) is real, the
  // hop back into r is the proxy on r + 8. Its mirrored sender is r + 8 itself, so the real route
  // (node 0 up to the rail leaf, down into node 1) and the mirrored one (node 1 up, down into node 0)
  // share every vertex, at other hops; the proxy must turn at the leaf, the one vertex both visit at
  // the same hop, as replica 1's transfer into r does: out by r's NIC, back in by it.
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  for (bool p2p : {true, false})
    for (auto kind : {model::ScheduleKind::baseline, model::ScheduleKind::commfuse}) {
      model::Workload w = small_llama(model::DpSharding::zero1, 2);
      w.parallel.dp = 2;
      INFO(fmt::format("{}{}", model::to_string(kind), p2p ? " p2p" : ""));
      const Outcome full = simulate(w, c, kind, false, p2p);
      const Outcome mirror = simulate(w, c, kind, true, p2p);
      INFO(mirror.schedule.symmetry_fallback);
      REQUIRE(mirror.schedule.symmetry_fallback.empty());
      REQUIRE(mirror.schedule.simulated_ranks == 8);
      std::vector<int> replica0(8);
      for (int r = 0; r < 8; ++r) replica0[static_cast<std::size_t>(r)] = r;
      require_same_timeline(full, mirror, replica0, p2p || kind == model::ScheduleKind::commfuse);
    }
}

TEST_CASE("Mirrored DP replicas with Ulysses ranks reproduce the full-rank simulation exactly", "[symmetry][dp][up]") {
  // Llama-3-8B layer shapes, 2 layers, sequence 4096, tp 4 x up 2 x dp 4 on the four DGX H100 nodes:
  // DP replica d is node d (ranks (2d + u) x 4 + ti). The gradient ring of TP position ti visits
  // (u, d) = (0, 0), (1, 0), (0, 1), (1, 1), ...: the hop (1, d) -> (0, d + 1) leaves the node
  // (local 4 + ti to local ti, across rails through spine (d + 1) mod 4), the hop (0, d) -> (1, d)
  // stays on the NVSwitch. Every gradient splits evenly into 8 parts (4096, 1536, 3584 and 7168
  // rows at tp 4; vocabulary 128256 padded to 128512, 32128 rows). The collectives' P2P form runs
  // NCCL's two rings over the sync's 8 members m = 2d + u (topo/rings.hpp, two members per node):
  // ring 0 = 0 1 3 2 4 5 7 6, ring 1 = 1 0 2 3 5 4 6 7, each the same when shifted by two nodes
  // (4 members) and not by one: mirror simulates DP replicas 0-1, ranks 0-15. Ring 0 enters them at
  // member 0 from 6, whose image 6 + 4 = 2 is simulated: a proxy on member 0 + 4 = (0, 2), ranks
  // 16-19; ring 1 at member 1 from 7: a proxy on member 5 = (1, 2), ranks 20-23. CommFuse's fused
  // ring, in member order, enters at member 0 from 7 (image 3): proxies on ranks 16-19 alone, which
  // is all DDP's CommFuse has; ZeRO-1's CommFuse gathers its parameters with the P2P collective (in
  // the P2P form) or a collective.
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  model::Workload w = small_ulysses();
  constexpr int kMembers = 16;
  for (bool p2p : {true, false})
  for (auto sharding : {model::DpSharding::ddp, model::DpSharding::zero1})
    for (auto kind : {model::ScheduleKind::baseline, model::ScheduleKind::commfuse}) {
      w.parallel.dp_sharding = sharding;
      INFO(fmt::format("{} {}{}", model::to_string(sharding), model::to_string(kind), p2p ? " p2p" : ""));
      const Outcome full = simulate(w, c, kind, false, p2p);
      const Outcome mirror = simulate(w, c, kind, true, p2p);
      CHECK(mirror.schedule.simulated_ranks == kMembers);
      std::map<std::string, TaskId> by_name;
      for (TaskId id = 0; id < full.schedule.graph.size(); ++id) {
        const Task& t = full.schedule.graph.task(id);
        if (t.rank < kMembers) REQUIRE(by_name.emplace(t.name, id).second);
      }
      std::size_t compared = 0;
      std::set<int> proxy_ranks;
      for (TaskId id = 0; id < mirror.schedule.graph.size(); ++id) {
        const Task& t = mirror.schedule.graph.task(id);
        if (t.rank >= kMembers) {
          REQUIRE(std::holds_alternative<RecvTask>(t.kind));
          proxy_ranks.insert(t.rank);
        }
        const auto it = by_name.find(std::string(t.name));
        REQUIRE(it != by_name.end());
        INFO(t.name);
        REQUIRE(mirror.result.tasks[id].ready_ps == full.result.tasks[it->second].ready_ps);
        REQUIRE(mirror.result.tasks[id].start_ps == full.result.tasks[it->second].start_ps);
        REQUIRE(mirror.result.tasks[id].end_ps == full.result.tasks[it->second].end_ps);
        ++compared;
      }
      CHECK(compared == by_name.size());
      // With collectives (`--symmetry mirror`) the engine times the rings' entry itself: proxies only
      // for CommFuse's fused ring.
      std::set<int> expected;
      const bool fused = kind == model::ScheduleKind::commfuse;
      const bool fused_only = fused && (sharding == model::DpSharding::ddp || !p2p);
      if (p2p || fused)
        for (int r = 16; r < (fused_only ? 20 : 24); ++r) expected.insert(r);
      CHECK(proxy_ranks == expected);
      CHECK(mirror.metrics.step_time_ps == full.metrics.step_time_ps);
      CHECK(mirror.metrics.mfu == Approx(full.metrics.mfu).epsilon(1e-12));
    }
}

TEST_CASE("Mirror falls back to every rank where replica groups share a fabric link", "[symmetry][dp][up]") {
  // Llama-3-8B, 2 layers, sequence 4096, TP 4 x UP 2 x DP 4, CommFuse over DP: its fused ring runs in
  // member order (u, d), so the hop from (1, d) to (0, d + 1) leaves GPU 4 + ti of node d by rail 4 + ti
  // and enters GPU ti of node d + 1 by rail ti, across a spine. On dgx-h100-4node (4 spines) each
  // replica's hop takes its own spine link; with the four nodes on ONE spine, the hops of all four
  // replicas share leaf (4 + ti)'s uplink to it, which replica 0 alone, mirrored, would have to itself:
  // the mirrored step would be too fast. generate checks the fabric and builds every rank.
  const model::Workload w = small_ulysses();
  GenerateOptions o;
  o.scope = Scope::step;
  o.parallelism = Parallelism::dp;
  o.mirror_dp = true;
  const topo::Cluster four_spines = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  const Schedule kept = generate(w, "w", four_spines, model::ScheduleKind::commfuse, o);
  CHECK(kept.symmetry_fallback.empty());
  CHECK(kept.symmetry_unchecked.empty());
  CHECK(kept.simulated_ranks > 0);
  // Searched within its budget; beyond it the check says it did not look (the pairs leaving the
  // simulated replica's two nodes, each in the 4 replica groups: a multiple of 4).
  const FabricCheck checked = check_mirror_fabric(kept, four_spines);
  CHECK(checked.checked);
  CHECK(checked.asymmetry.empty());
  REQUIRE(checked.image_routes > 0);
  CHECK(checked.image_routes % 4 == 0);
  const FabricCheck over = check_mirror_fabric(kept, four_spines, checked.image_routes - 1);
  CHECK_FALSE(over.checked);
  CHECK(over.image_routes == checked.image_routes);

  nlohmann::json doc = nlohmann::json::parse(std::string(*embedded_file("topologies/dgx-h100-4node.json")));
  doc["scale_out"]["spines"] = 1;
  const topo::Cluster one_spine = topo::parse_cluster(JsonDocument::from_json(doc, "one-spine.json"));
  const Schedule s = generate(w, "w", one_spine, model::ScheduleKind::commfuse, o);
  INFO(s.symmetry_fallback);
  CHECK(s.simulated_ranks == 0);
  CHECK(s.symmetry_fallback.find("spine") != std::string::npos);
  CHECK(s.symmetry_fallback.find("of the job's transfers") != std::string::npos);
  // What the check prevents: the mirrored step, unchecked (the graph built for four spines: the same
  // ranks, nodes and rings), against every rank's.
  const model::RooflineCostModel costs;
  const auto mirrored = sim::Simulator(one_spine, costs).run(kept.graph);
  const auto full = sim::Simulator(one_spine, costs).run(s.graph);
  CHECK(mirrored.makespan_ps < full.makespan_ps);
}

TEST_CASE("A proxy receive arrives by its alias's NIC, beside the alias's Ulysses traffic", "[symmetry][dp][up]") {
  // TP 8 x UP 4 x DP 2 on the 128-node fabric: a DP replica is 4 nodes and its Ulysses exchanges
  // cross the NICs of rail ti, the same NIC links as the gradient ring. Replica 0's first UP rank
  // receives its ring predecessor's part through its own NIC while its Ulysses peers send to it; the
  // proxy standing in for that receive must meet the same traffic (arrive by the alias's links, not
  // by replica 1's idle ones) for the mirrored layer to equal the full one.
  topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-128node");
  model::Workload w = model::load_workload("llama-3-8b-ulysses");
  w.sequence_length = 16384;
  w.parallel.dp = 2;
  for (auto kind : {model::ScheduleKind::baseline, model::ScheduleKind::commfuse}) {
    INFO(model::to_string(kind));
    GenerateOptions o;
    o.scope = Scope::layer;
    o.parallelism = Parallelism::up;
    o.dp_as_p2p = true;
    sim::SimResult full_result, mirror_result;
    const model::RooflineCostModel costs;
    const Schedule full = generate(w, "up-dp", c, kind, o);
    full_result = sim::Simulator(c, costs).run(full.graph);
    o.mirror_dp = true;
    const Schedule mirror = generate(w, "up-dp", c, kind, o);
    mirror_result = sim::Simulator(c, costs).run(mirror.graph);
    std::map<std::string, TaskId> by_name;
    for (TaskId id = 0; id < full.graph.size(); ++id)
      if (full.graph.task(id).rank < 32) by_name.emplace(full.graph.task(id).name, id);
    for (TaskId id = 0; id < mirror.graph.size(); ++id) {
      const auto it = by_name.find(std::string(mirror.graph.task(id).name));
      REQUIRE(it != by_name.end());
      INFO(mirror.graph.task(id).name);
      REQUIRE(mirror_result.tasks[id].end_ps == full_result.tasks[it->second].end_ps);
    }
    CHECK(mirror_result.makespan_ps == full_result.makespan_ps);
  }
}

TEST_CASE("The P2P form of the DP sync needs its load alias to match", "[symmetry][dp]") {
  // Without the alias the receive ends of replica 0's incoming transfers would load replica 1's
  // devices, leaving replica 0's HBM and SMs less busy than in the full simulation: the alias table
  // must map every rank to the replica-0 rank in its (tp, up) position.
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  const model::Workload w = small_llama(model::DpSharding::ddp, 1);
  GenerateOptions o;
  o.scope = Scope::step;
  o.parallelism = Parallelism::dp;
  o.mirror_dp = true;
  const Schedule s = generate(w, "small-llama", c, model::ScheduleKind::commfuse, o);
  REQUIRE(s.graph.load_alias().size() == 32);
  for (int r = 0; r < 32; ++r) CHECK(s.graph.load_alias()[static_cast<std::size_t>(r)] == r % 8);
  CHECK(s.replicas == 4);
  CHECK(s.gpus == 32);
  CHECK(s.dataflow == nullptr);  // the P2P sync carries timing only
  // The alias matters: without it the receive ends of replica 0's incoming transfers hold SMs (SM
  // kernel P2P here) on replica 1's idle devices instead of on replica 0's, whose kernels then run
  // at other rates: the timelines differ, and only the aliased one is the full-rank simulation's.
  model::Workload sm = w;
  sm.schedule.p2p_engine = model::CommEngine::sm_kernel;
  const Schedule s_sm = generate(sm, "small-llama", c, model::ScheduleKind::commfuse, o);
  const model::RooflineCostModel costs;
  sim::Simulator sim(c, costs);
  const sim::SimResult aliased = sim.run(s_sm.graph);
  TaskGraph unaliased_graph = s_sm.graph;
  unaliased_graph.set_load_alias({});
  const sim::SimResult unaliased = sim.run(unaliased_graph);
  std::size_t differ = 0;
  for (TaskId id = 0; id < s_sm.graph.size(); ++id)
    if (aliased.tasks[id].end_ps != unaliased.tasks[id].end_ps) ++differ;
  CHECK(differ > 0);
  GenerateOptions full = o;
  full.mirror_dp = false;
  full.dp_as_p2p = true;
  const Schedule s_full = generate(sm, "small-llama", c, model::ScheduleKind::commfuse, full);
  const sim::SimResult reference = sim.run(s_full.graph);
  CHECK(aliased.makespan_ps == reference.makespan_ps);
  std::map<std::string, TimePs> end_by_name;
  for (TaskId id = 0; id < s_full.graph.size(); ++id)
    end_by_name[std::string(s_full.graph.task(id).name)] = reference.tasks[id].end_ps;
  std::size_t aliased_equal = 0, unaliased_equal = 0;
  for (TaskId id = 0; id < s_sm.graph.size(); ++id) {
    const TimePs ref = end_by_name.at(std::string(s_sm.graph.task(id).name));
    aliased_equal += aliased.tasks[id].end_ps == ref ? 1 : 0;
    unaliased_equal += unaliased.tasks[id].end_ps == ref ? 1 : 0;
  }
  CHECK(aliased_equal == s_sm.graph.size());
  CHECK(unaliased_equal < s_sm.graph.size());
  TaskGraph g(4);
  CHECK_THROWS_AS(g.set_load_alias({0, 1, 2}), fusesim::GraphError);
  CHECK_THROWS_AS(g.set_load_alias({0, 1, 2, 4}), fusesim::GraphError);
}

TEST_CASE("With Megatron's padded vocabulary every Llama-3-70B gradient splits into 128 ring parts", "[symmetry][dp]") {
  // Llama-3-70B at TP 8 x DP 128 (the shipped 1024-GPU job; 2 layers suffice, every layer has the same
  // gradients). Megatron pads the vocabulary 128,256 to a multiple of 128 x 8 = 1024: ceil(125.25) =
  // 126 -> 129,024, i.e. 16,128 = 126 x 128 rows per TP rank (unpadded: 16,032 = 125.25 x 128, ring
  // parts of 125 or 126 rows, and mirror mode would be replica 0's timeline only). Gradients and
  // their rows per rank: FC2 ffn/tp = 3584 = 28 x 128, FC1 and QKV h = 8192 = 64 x 128, out-projection
  // q/tp = 1024 = 8 x 128, LM head h = 8192, embedding 16,128 = 126 x 128: every CommFuse ring part
  // of a gradient has the same rows, so every step's Send and the proxy Recv standing in for the
  // receive move the same bytes on every replica.
  model::Workload w = model::load_workload("llama-3-70b-1024gpu");
  w.arch.layers = 2;
  REQUIRE(w.parallel.tp == 8);
  REQUIRE(w.parallel.dp == 128);
  REQUIRE(w.arch.padded_vocab(8) == 129'024);
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-128node");
  GenerateOptions o;
  o.scope = Scope::step;
  o.parallelism = Parallelism::dp;
  o.mirror_dp = true;
  const Schedule s = generate(w, "llama-3-70b-1024gpu", c, model::ScheduleKind::commfuse, o);
  std::map<std::string, std::set<Bytes>> send_bytes;  // per rank and gradient: the bytes of its ring Sends
  std::size_t lm_head_gemms = 0, embedding_sends = 0;
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.labels.op == "lm_head") {
      // The LM head GEMM over the padded vocabulary: [8192 tokens, 16,128 vocab rows of this rank].
      const auto& k = std::get<model::GemmKernel>(std::get<ComputeTask>(t.kind).kernel.get());
      CHECK(k.n == 16'128);
      ++lm_head_gemms;
    }
    if (t.labels.op != "dp_send") continue;
    const auto* send = std::get_if<SendTask>(&t.kind);
    REQUIRE(send != nullptr);
    send_bytes[std::string(t.name.substr(0, t.name.find("/dp_send/")))].insert(send->bytes);
    if (t.name.find("embedding_grad/dp_send/") != std::string::npos) {
      // 16,128 / 128 = 126 rows of h = 8192 gradient values, reduced in fp32 (bf16 training's default).
      CHECK(send->bytes == 126 * 8192 * 4);
      ++embedding_sends;
    }
  }
  CHECK(lm_head_gemms == 8);         // one per TP rank of replica 0
  CHECK(embedding_sends == 8 * 127);  // 127 ring steps send per rank (the own part is kept)
  REQUIRE(!send_bytes.empty());
  for (const auto& [grad, sizes] : send_bytes) {
    INFO(grad);
    CHECK(sizes.size() == 1);  // every ring part of the gradient has the same rows
  }
  // The proxies: every Recv on a replica-1 rank moves as many bytes as a replica-0 Send of its step.
  for (TaskId id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    const auto* recv = std::get_if<RecvTask>(&t.kind);
    if (recv == nullptr || t.labels.op != "dp_recv") continue;
    const std::string grad(t.name.substr(0, t.name.find("/dp_recv/")));
    REQUIRE(send_bytes.count(grad) == 1);
    CHECK(recv->bytes == *send_bytes[grad].begin());
  }
}

namespace {

// The schedule generate() builds for `o`, and the one it builds for every rank with the DP sync as
// collectives (--symmetry none).
std::pair<Schedule, Schedule> mirror_and_none(const model::Workload& w, const topo::Cluster& c, model::ScheduleKind kind) {
  GenerateOptions o;
  o.scope = Scope::step;
  o.parallelism = Parallelism::dp;
  o.mirror_dp = true;
  Schedule mirrored = generate(w, "w", c, kind, o);
  o.mirror_dp = false;
  return {std::move(mirrored), generate(w, "w", c, kind, o)};
}

sim::SimResult run(const Schedule& s, const topo::Cluster& c) {
  const model::RooflineCostModel costs;
  sim::Simulator sim(c, costs);
  return sim.run(s.graph);
}

}  // namespace

TEST_CASE("Mirror falls back to every rank where replica 0 does not stand for the others", "[symmetry][dp]") {
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  // TP 2 x DP `dp`, baseline, mirrored and with every rank: the mirror must have fallen back to the
  // same graph; returns its reason.
  const auto fallback = [&](int dp) {
    model::Workload w = small_llama(model::DpSharding::ddp, 1);
    w.parallel.tp = 2;
    w.parallel.dp = dp;
    const auto [mirrored, none] = mirror_and_none(w, c, model::ScheduleKind::baseline);
    CHECK(mirrored.simulated_ranks == 0);
    CHECK(none.symmetry_fallback.empty());
    REQUIRE(mirrored.graph.size() == none.graph.size());
    CHECK(run(mirrored, c).makespan_ps == run(none, c).makespan_ps);
    return mirrored.symmetry_fallback;
  };
  SECTION("replicas whose hops do not repeat: TP 2 x DP 3 on 8-GPU nodes") {
    // Replica d is ranks 2d, 2d + 1: hops 0 -> 1 and 1 -> 2 stay in node 0, 2 -> 0 too (ranks 0-5):
    // all alike, g = 1 would do. At TP 2 x DP 6 (ranks 0-11) the hops 3 -> 4 (7 -> 9) and 5 -> 0
    // (11 -> 1) cross nodes and the others do not: no group of 1, 2 or 3 replicas repeats along the
    // ring (crosses at d = 3 and 5, not at d mod 2 = 1 nor d mod 3 = 0, 2), so every rank is built.
    const std::string why = fallback(6);
    INFO(why);
    CHECK(why.find("hop from replica 0 to 1 stays inside nodes") != std::string::npos);
    CHECK(why.find("replica 3 to 4 crosses them") != std::string::npos);
  }
  SECTION("rings that repeat only over the whole group: TP 2 x DP 8 on two 8-GPU nodes") {
    // Four replicas per node, two nodes: NCCL's four rings run ascending through node 0 and
    // descending through node 1 (topo/rings.hpp), so they repeat every two nodes, which is the whole
    // group; one node's replicas (g = 4) shifted by a node would map ring 0 = 0 1 2 3 | 7 6 5 4
    // (replicas; node 1 entered at local 3) onto a ring ascending through node 1, which no ring is.
    // The replica-order ring repeats every 4 replicas; its reason (g = 1) is the one given.
    const std::string why = fallback(8);
    INFO(why);
    CHECK(why.find("replica 3 to 4 crosses them") != std::string::npos);
  }
  SECTION("rows that do not split evenly: an unpadded vocabulary of 16,033 rows per TP rank at DP 4") {
    model::Workload w = small_llama(model::DpSharding::ddp, 1);
    w.arch.vocab_divisible_by = 1;
    w.arch.vocab = 8 * 16'033;
    REQUIRE(w.arch.padded_vocab(8) == 8 * 16'033);
    // CommFuse cuts each weight gradient's rows into 4 ring parts: 16,033 = 4 x 4008 + 1, so
    // replica 0's parts are not every replica's.
    const auto [fused, fused_none] = mirror_and_none(w, c, model::ScheduleKind::commfuse);
    INFO(fused.symmetry_fallback);
    CHECK(fused.symmetry_fallback.find("16033 rows, not a multiple of the 4 DP ring members") != std::string::npos);
    CHECK(fused.graph.size() == fused_none.graph.size());
    // DDP's bucketed collectives split the flat buffer evenly whatever the rows: mirror stays exact.
    const auto [bucketed, bucketed_none] = mirror_and_none(w, c, model::ScheduleKind::baseline);
    CHECK(bucketed.symmetry_fallback.empty());
    CHECK(bucketed.simulated_ranks == 8);
  }
}


TEST_CASE("Mirrored groups of DP replicas that share a node reproduce the full-rank simulation exactly",
          "[symmetry][dp]") {
  // With fewer ranks per replica than per node the DP ring's hops inside a node stay on NVLink and
  // the hops out of it cross the NICs: replica 0 alone would stand in for NVLink hops everywhere. The
  // collectives' P2P form runs one ring per replica a node holds, each leaving and entering nodes on
  // one rail and alternating its direction from node to node (topo/rings.hpp), so the rings repeat
  // every two nodes: two nodes' replicas are simulated together, and each ring's receive from the
  // last nodes is a proxy (docs/schedules.md "Symmetry"). On the four DGX H100 nodes:
  //   tp 2 dp 16: four replicas per node, replicas 0-7 (ranks 0-15) of 16;
  //   tp 4 dp 8: two per node, replicas 0-3, ranks 0-15;
  //   tp 1 dp 32: eight per node, replicas 0-15, ranks 0-15;
  //   tp 2 up 2 dp 8: two (tp x up = 4 ranks) per node, replicas 0-3, ranks 0-15.
  // On the eight HGX H200 nodes, tp 2 dp 16 pp 2 (1F1B, 4 micro-batches): stage 0 on nodes 0-3, stage
  // 1 on nodes 4-7, every stage hop across the NICs: ranks 0-15 and 32-47.
  const topo::Cluster c4 = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  const topo::Cluster c8 = topo::load_cluster_by_name_or_path("hgx-h200-8node");
  struct Case {
    int tp, up, dp, group, pp = 1;
  };
  for (bool p2p : {true, false})
  for (const Case k : {Case{2, 1, 16, 8}, Case{4, 1, 8, 4}, Case{1, 1, 32, 16}, Case{2, 2, 8, 4}, Case{2, 1, 16, 8, 2}})
    for (auto kind : {model::ScheduleKind::baseline, model::ScheduleKind::commfuse}) {
      model::Workload w = small_llama(model::DpSharding::zero1, k.pp > 1 ? 4 : 2);
      w.parallel.tp = k.tp;
      w.parallel.up = k.up;
      w.parallel.dp = k.dp;
      w.parallel.pp = k.pp;
      INFO(fmt::format("tp {} up {} dp {} pp {} {}{}", k.tp, k.up, k.dp, k.pp, model::to_string(kind), p2p ? " p2p" : ""));
      const topo::Cluster& c = k.pp > 1 ? c8 : c4;
      const Outcome full = simulate(w, c, kind, false, p2p);
      const Outcome mirror = simulate(w, c, kind, true, p2p);
      INFO(mirror.schedule.symmetry_fallback);
      REQUIRE(mirror.schedule.symmetry_fallback.empty());
      const int per_stage = k.tp * k.up * k.group;
      CHECK(mirror.schedule.simulated_ranks == per_stage * k.pp);
      CHECK(mirror.schedule.replicas == k.dp / k.group);
      std::vector<int> ranks;
      for (int st = 0; st < k.pp; ++st)
        for (int r = 0; r < per_stage; ++r) ranks.push_back(st * k.tp * k.up * k.dp + r);
      require_same_timeline(full, mirror, ranks, p2p || kind == model::ScheduleKind::commfuse);
    }
}

TEST_CASE("Mirrored DP replicas on the 128-node fabric, sampled, reproduce the full-rank simulation exactly",
          "[symmetry][dp]") {
  // dgx-h100-128node (rail-optimized, 16 spines): sixteen nodes of it, the DP collectives as NCCL's
  // collectives (what --symmetry mirror runs) and as ring P2P steps.
  //   tp 8 dp 16: a replica per node, one ring over rail ti: replica 0, ranks 0-7;
  //   tp 2 dp 64: four replicas per node, four rings, two nodes' replicas: ranks 0-15;
  //   tp 4 up 2 dp 16: a replica per node, whose two UP ranks of a TP position are two members of
  //   its sync (u, d) in the node: two rings over the 32 members, repeating every two nodes:
  //   replicas 0-1, ranks 0-15.
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-128node");
  struct Case {
    int tp, up, dp, group;
  };
  for (bool p2p : {false, true})
    for (const Case k : {Case{8, 1, 16, 1}, Case{2, 1, 64, 8}, Case{4, 2, 16, 2}})
      for (auto kind : {model::ScheduleKind::baseline, model::ScheduleKind::commfuse}) {
        model::Workload w = small_llama(model::DpSharding::zero1, 2);
        w.parallel.tp = k.tp;
        w.parallel.up = k.up;
        w.parallel.dp = k.dp;
        INFO(fmt::format("tp {} up {} dp {} {}{}", k.tp, k.up, k.dp, model::to_string(kind), p2p ? " p2p" : ""));
        const Outcome full = simulate(w, c, kind, false, p2p);
        const Outcome mirror = simulate(w, c, kind, true, p2p);
        INFO(mirror.schedule.symmetry_fallback);
        REQUIRE(mirror.schedule.symmetry_fallback.empty());
        const int ranks = k.tp * k.up * k.group;
        CHECK(mirror.schedule.simulated_ranks == ranks);
        std::vector<int> simulated(static_cast<std::size_t>(ranks));
        for (int r = 0; r < ranks; ++r) simulated[static_cast<std::size_t>(r)] = r;
        require_same_timeline(full, mirror, simulated, p2p || kind == model::ScheduleKind::commfuse);
      }
}

TEST_CASE("ZeRO updates an even share of the flat buffer: mirrored exactly where rows do not split (dp 3)",
          "[symmetry][dp]") {
  // TP 8 x DP 3 on three of the four DGX H100 nodes: Llama-3-70B's FC2 gradient has 28672 / 8 = 3584
  // rows, 3584 = 3 x 1194 + 2, and h = 8192 = 3 x 2730 + 2. As Megatron's distributed optimizer and
  // FSDP pad the flat buffer to a multiple of dp, every replica updates the same number of
  // parameters, and the ring steps split the flat buffer evenly: replica 0 stands for the others,
  // with the parameter gather after the optimizer and with it in the next forward.
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  for (bool p2p : {true, false})
  for (bool overlap : {false, true}) {
    model::Workload w = small_llama(model::DpSharding::zero1, 2);
    w.parallel.dp = 3;
    w.parallel.overlap_param_gather = overlap;
    INFO("overlap_param_gather " << overlap << (p2p ? " p2p" : ""));
    const Outcome full = simulate(w, c, model::ScheduleKind::baseline, false, p2p);
    const Outcome mirror = simulate(w, c, model::ScheduleKind::baseline, true, p2p);
    INFO(mirror.schedule.symmetry_fallback);
    REQUIRE(mirror.schedule.symmetry_fallback.empty());
    std::vector<int> replica0(8);
    for (int r = 0; r < 8; ++r) replica0[static_cast<std::size_t>(r)] = r;
    require_same_timeline(full, mirror, replica0, p2p);
  }
}

TEST_CASE("Mirrored DP replicas of every pipeline stage reproduce the full-rank simulation exactly",
          "[symmetry][dp][pipeline]") {
  // Llama-3-70B's layer shapes, 4 layers, sequence 1024, 4 micro-batches on the four DGX H100 nodes.
  // Stage s holds ranks s x (tp x dp) ...; mirror simulates replica 0 of each stage, i.e. ranks
  // s x tp x dp + [0, tp), and the activations between replica 0's stages for real.
  //   tp 8 dp 2 pp 2: a replica per node, both DP rings and the stage hops over the NICs;
  //   tp 4 dp 2 pp 2: a stage per node, two replicas in it (DP ring on NVLink), stage hops across;
  //   tp 2 dp 2 pp 2: all 8 ranks in one node, the stage hops on NVLink; interleaved (v 2) too.
  // Every gradient's rows split evenly over dp 2 (the padded vocabulary 129024 / tp / 2). The
  // baseline also with Megatron's overlapped parameter gather (stage 0 layer by layer, stage 1 as one).
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  struct Case {
    int tp, dp, v;
    bool overlap_gather = false;
  };
  for (bool p2p : {true, false})
  for (const Case k : {Case{8, 2, 1}, Case{4, 2, 1}, Case{2, 2, 1}, Case{2, 2, 2}, Case{8, 2, 1, true},
                       Case{2, 2, 2, true}})
    for (auto kind : {model::ScheduleKind::baseline, model::ScheduleKind::commfuse}) {
      if (k.overlap_gather && kind != model::ScheduleKind::baseline) continue;
      model::Workload w = small_llama(model::DpSharding::zero1, 4);
      w.arch.layers = 4;
      w.parallel.tp = k.tp;
      w.parallel.dp = k.dp;
      w.parallel.pp = 2;
      w.parallel.virtual_stages = k.v;
      w.parallel.overlap_param_gather = k.overlap_gather;
      if (k.v > 1) w.parallel.pp_schedule = model::PipelineSchedule::interleaved;
      INFO(fmt::format("tp {} dp {} pp 2 v {} {}{}{}", k.tp, k.dp, k.v, model::to_string(kind),
                       k.overlap_gather ? " overlap_param_gather" : "", p2p ? " p2p" : ""));
      const Outcome full = simulate(w, c, kind, false, p2p);
      const Outcome mirror = simulate(w, c, kind, true, p2p);
      INFO(mirror.schedule.symmetry_fallback);
      REQUIRE(mirror.schedule.symmetry_fallback.empty());
      CHECK(mirror.schedule.simulated_ranks == 2 * k.tp);
      CHECK(mirror.schedule.replicas == k.dp);
      std::vector<int> simulated;
      for (int s = 0; s < 2; ++s)
        for (int i = 0; i < k.tp; ++i) simulated.push_back(s * k.tp * k.dp + i);
      CHECK(counted_ranks(mirror.schedule.graph.num_ranks(), mirror.schedule.simulated_ranks, 2) ==
            simulated);
      require_same_timeline(full, mirror, simulated, p2p || kind == model::ScheduleKind::commfuse);
    }
}

TEST_CASE("Mirrored pipeline stages fall back to every rank where a replica's hops differ from replica 0's",
          "[symmetry][dp][pipeline]") {
  // tp 2 x dp 3 x pp 2 on 8-GPU nodes: stage 0 is ranks 0-5 (node 0), stage 1 ranks 6-11: its
  // replica 0 (6, 7) sits in node 0 and replicas 1 and 2 in node 1. Replica 0's activations stay in
  // node 0 (0, 1 -> 6, 7), replica 1's cross (2, 3 -> 8, 9): the first difference found (stage 1's DP
  // ring, whose hop 0 -> 1 crosses nodes and 1 -> 2 does not, would be the next).
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  model::Workload w = small_llama(model::DpSharding::ddp, 2);
  w.arch.layers = 2;
  w.parallel.tp = 2;
  w.parallel.dp = 3;
  w.parallel.pp = 2;
  const Outcome mirror = simulate(w, c, model::ScheduleKind::baseline, true);
  INFO(mirror.schedule.symmetry_fallback);
  CHECK(mirror.schedule.symmetry_fallback ==
        "replica 0's activations go from stage 0 to 1 inside nodes but replica 1's cross them");
  CHECK(mirror.schedule.simulated_ranks == 0);
}

TEST_CASE("TP images: the first rank of each TP group stands for its group, exactly", "[symmetry][dp][tp_images]") {
  // Where every TP transfer is a collective of the TP group inside one node (baseline, slice) or a
  // step of its ring (CommFuse, TE's userbuffers ring exchange), the TP ranks of a replica run the
  // same tasks and each one's transfers are the others' turned within the group: the first of each
  // TP group is simulated, the others' ring steps land on it by its links, and its receive of a P2P
  // ring step is a proxy Recv on the second rank of its own Send (docs/schedules.md "Symmetry").
  // Against every rank, task by task to the picosecond, the DP sync as collectives and as P2P rings
  // (with their proxies), for the DP schedules and shardings:
  //   dgx-h100-4node: tp 8 dp 4 (a replica per node: ranks 0), tp 4 dp 8 (two per node, two nodes'
  //   replicas: ranks 0, 4, 8, 12), tp 2 dp 16 (ranks 0, 2, .., 14);
  //   hgx-h200-8node: tp 2 dp 16 pp 2 (ranks 0, 2, .., 14 and 32, 34, .., 46);
  //   dgx-h100-128node, sixteen nodes of it: tp 8 dp 16 (rank 0), tp 4 dp 32 (ranks 0, 4, 8, 12).
  const topo::Cluster c4 = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  const topo::Cluster c8 = topo::load_cluster_by_name_or_path("hgx-h200-8node");
  const topo::Cluster c128 = topo::load_cluster_by_name_or_path("dgx-h100-128node");
  struct Case {
    const topo::Cluster* cluster;
    int tp, dp, group, pp = 1;
  };
  for (const Case k : {Case{&c4, 8, 4, 1}, Case{&c4, 4, 8, 4}, Case{&c4, 2, 16, 8}, Case{&c8, 2, 16, 8, 2},
                       Case{&c128, 8, 16, 1}, Case{&c128, 4, 32, 4}})
    // TP schedules: baseline, slice, CommFuse, and the baseline as TE's userbuffers run it (te).
    for (const auto& [tp_kind, te] :
         {std::pair{model::ScheduleKind::baseline, false}, std::pair{model::ScheduleKind::slice, false},
          std::pair{model::ScheduleKind::commfuse, false}, std::pair{model::ScheduleKind::baseline, true}})
      for (auto dp_kind : {model::ScheduleKind::baseline, model::ScheduleKind::commfuse})
        for (auto sharding : {model::DpSharding::ddp, model::DpSharding::zero1, model::DpSharding::zero3})
          for (bool p2p : {false, true}) {
            if (k.pp > 1 && sharding == model::DpSharding::zero3) continue;  // not with stages
            // The 128-node samples and the stages: one DP schedule and sharding each, and the TP
            // schedules whose transfers differ in kind (collectives, ring P2P); TE's userbuffers on
            // the four nodes, ZeRO-1.
            const bool ring = tp_kind == model::ScheduleKind::commfuse;
            if ((k.cluster == &c128 || k.pp > 1) &&
                (sharding != model::DpSharding::zero1 || te || (tp_kind != model::ScheduleKind::baseline && !ring)))
              continue;
            if (te && (k.cluster != &c4 || sharding != model::DpSharding::zero1)) continue;
            model::Workload w = small_llama(sharding, k.pp > 1 ? 4 : 2);
            w.parallel.tp = k.tp;
            w.parallel.dp = k.dp;
            w.parallel.pp = k.pp;
            w.schedule.kind = tp_kind;
            w.schedule.tp_baseline_te_userbuffers = te;
            w.schedule.slices = 2;
            INFO(fmt::format("{} tp {} dp {} pp {}, TP {}{}, DP {} {}{}", k.cluster->name, k.tp, k.dp, k.pp,
                             model::to_string(tp_kind), te ? " (TE userbuffers)" : "", model::to_string(dp_kind),
                             model::to_string(sharding), p2p ? " p2p" : ""));
            const Outcome full = simulate(w, *k.cluster, dp_kind, false, p2p);
            const Outcome mirror = simulate(w, *k.cluster, dp_kind, true, p2p, true);
            INFO(mirror.schedule.symmetry_fallback);
            INFO(mirror.schedule.tp_images_refused);
            REQUIRE(mirror.schedule.symmetry_fallback.empty());
            REQUIRE(mirror.schedule.tp_images == k.tp);
            const int per_stage = k.group;  // one rank per TP group of the simulated replicas
            CHECK(mirror.schedule.simulated_ranks == per_stage * k.pp);
            CHECK(mirror.schedule.replicas == k.dp / k.group);
            std::vector<int> simulated;
            for (int st = 0; st < k.pp; ++st)
              for (int r = 0; r < per_stage; ++r) simulated.push_back(st * k.tp * k.dp + r * k.tp);
            CHECK(counted_ranks(mirror.schedule.graph.num_ranks(), mirror.schedule.simulated_ranks, k.pp, k.tp) ==
                  simulated);
            require_same_timeline(full, mirror, simulated,
                                  p2p || dp_kind == model::ScheduleKind::commfuse || ring || te);
          }
}

TEST_CASE("Without sequence parallelism TP's all-reduces keep mirror and TP images exact", "[symmetry][dp][tp_images]") {
  // Megatron's TP without sequence parallelism (strategy/tp_allreduce.cpp): an all-reduce of the TP
  // group after each row-parallel GEMM and column-parallel dgrad, beside the wgrad or before it. The TP
  // ranks still run the same tasks, each all-reduce the others' turned within the group: against every
  // rank, task by task, on dgx-h100-4node tp 8 dp 4 (rank 0), tp 4 dp 8 (ranks 0, 4, 8, 12), tp 2 dp 16
  // (ranks 0, 2, .., 14), DDP, the DP sync as collectives and as P2P rings.
  const topo::Cluster c4 = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  struct Case {
    int tp, dp, group;
  };
  for (const Case k : {Case{8, 4, 1}, Case{4, 8, 4}, Case{2, 16, 8}})
    for (bool async : {true, false})
      for (bool p2p : {false, true}) {
        model::Workload w = small_llama(model::DpSharding::ddp, 2);
        w.parallel.tp = k.tp;
        w.parallel.dp = k.dp;
        w.parallel.sequence_parallel = false;
        w.parallel.async_tp_allreduce = async;
        w.schedule.kind = model::ScheduleKind::baseline;
        INFO(fmt::format("tp {} dp {}{}{}", k.tp, k.dp, async ? " async" : " sync", p2p ? " p2p" : ""));
        const Outcome full = simulate(w, c4, model::ScheduleKind::baseline, false, p2p);
        const Outcome mirror = simulate(w, c4, model::ScheduleKind::baseline, true, p2p, true);
        INFO(mirror.schedule.symmetry_fallback);
        INFO(mirror.schedule.tp_images_refused);
        REQUIRE(mirror.schedule.symmetry_fallback.empty());
        REQUIRE(mirror.schedule.tp_images == k.tp);
        std::vector<int> simulated;
        for (int r = 0; r < k.group; ++r) simulated.push_back(r * k.tp);
        require_same_timeline(full, mirror, simulated, p2p);
      }
}

TEST_CASE("TP images are not made where a TP group spans nodes", "[symmetry][dp][tp_images]") {
  // tp 16 on 8-GPU nodes: a turn of the group would move a rank's transfers onto other links (some
  // of its ring steps cross nodes, the turned ones inside one). The DP replicas are mirrored, every
  // TP rank of them simulated.
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  model::Workload w = small_llama(model::DpSharding::zero1, 2);
  w.schedule.kind = model::ScheduleKind::baseline;
  w.parallel.tp = 16;
  w.parallel.dp = 2;
  w.arch.kv_heads = 16;
  const Outcome wide = simulate(w, c, model::ScheduleKind::baseline, true, false, true);
  CHECK(wide.schedule.symmetry_fallback.empty());
  CHECK(wide.schedule.tp_images == 1);
  CHECK(wide.schedule.simulated_ranks == 16);
}

TEST_CASE("TP images at layer and stack scope, as the default job runs them, exactly", "[symmetry][tp_images]") {
  // The default job's TPSP rows (Llama-3-70B shapes, TP 8 x DP 4 on the four DGX H100 nodes): each TP
  // schedule (baseline and slice: collectives; CommFuse: ring P2P steps, with proxies) on one layer
  // and on a stack of two, forward and backward, the DP sync running the workload's CommFuse ring
  // (proxies) or the collectives. Rank 0 alone stands for the 32 ranks.
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  for (Scope scope : {Scope::layer, Scope::stack})
    for (auto tp_kind : {model::ScheduleKind::baseline, model::ScheduleKind::slice, model::ScheduleKind::commfuse})
      for (auto dp_kind : {model::ScheduleKind::commfuse, model::ScheduleKind::baseline}) {
        model::Workload w = small_llama(model::DpSharding::zero2, 1);
        w.schedule.kind = dp_kind;  // the workload's: what the DP sync runs in a TPSP row
        INFO(fmt::format("{} TP {} DP {}", to_string(scope), model::to_string(tp_kind), model::to_string(dp_kind)));
        const Outcome full = simulate(w, c, tp_kind, false, false, false, scope, Parallelism::tpsp);
        const Outcome mirror = simulate(w, c, tp_kind, true, false, true, scope, Parallelism::tpsp);
        INFO(mirror.schedule.symmetry_fallback);
        REQUIRE(mirror.schedule.symmetry_fallback.empty());
        REQUIRE(mirror.schedule.tp_images == 8);
        CHECK(mirror.schedule.simulated_ranks == 1);
        require_same_timeline(full, mirror, {0},
                              dp_kind == model::ScheduleKind::commfuse || tp_kind == model::ScheduleKind::commfuse);
      }
}

TEST_CASE("Every rank of thousands of DP replicas is refused before it is built, even for two layers",
          "[symmetry][dp]") {
  // TP 1 x DP 4096 on dgx-h100-768node, two Llama-3-70B layers, CommFuse's DP ring: each replica's
  // gradients are reduced in 4095 ring steps each (send, receive, add: ~12,000 tasks per gradient,
  // about ten gradients), ~5e8 tasks for every rank, ten times what one run may build. The rows of
  // the FC2 gradient (28672) do not split into 4096 ring parts, so the mirror cannot stand in. Before,
  // a graph of two layers was built without an estimate and the process was killed for memory.
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-768node");
  model::Workload w = small_llama(model::DpSharding::zero1, 1);
  w.parallel.tp = 1;
  w.parallel.dp = 4096;
  for (bool mirror : {true, false}) {
    GenerateOptions o;
    o.scope = Scope::step;
    o.parallelism = Parallelism::dp;
    o.mirror_dp = mirror;
    o.mirror_tp = mirror;
    INFO("mirror " << mirror);
    try {
      (void)generate(w, "wide.json", c, model::ScheduleKind::commfuse, o);
      FAIL("not refused");
    } catch (const InputError& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("on every rank of 4096 DP replicas") != std::string::npos);
      CHECK((what.find("--symmetry mirror cannot stand in") != std::string::npos) == mirror);
    }
  }
}

TEST_CASE("Node images: at tp 1 a node's first replica stands for the node's, exactly", "[symmetry][dp][tp_images]") {
  // TP 1: the eight replicas of a DGX node run the same tasks, each its own rank, and meet only in the
  // DP collectives, whose eight rings turn onto one another when the node's GPUs are turned (ring k
  // onto ring k + 1, topo/rings.hpp): rank 0 of each node stands for its node, its step flows into
  // the others landing on it as the receive of the ring they turn back onto (sim/engine.cpp,
  // land_rings). The mirror's two nodes' replicas (ranks 0-15) come down to ranks 0 and 8. Against
  // every rank, to the picosecond:
  //   dgx-h100-4node: tp 1 dp 32, DDP, ZeRO-1 (with the parameter gather overlapped) and ZeRO-3;
  //   hgx-h200-8node: tp 1 dp 32 pp 2 (stage 0 nodes 0-3): ranks 0, 8 and 32, 40;
  //   dgx-h100-128node, eight nodes of it: tp 1 dp 64, ZeRO-1.
  // Where the DP sync sends point to point (CommFuse's fused ring, the P2P form) every replica of the
  // two nodes is simulated.
  const topo::Cluster c4 = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  const topo::Cluster c8 = topo::load_cluster_by_name_or_path("hgx-h200-8node");
  const topo::Cluster c128 = topo::load_cluster_by_name_or_path("dgx-h100-128node");
  struct Case {
    const topo::Cluster* cluster;
    int dp, pp;
    model::DpSharding sharding;
    bool overlap_gather = false;
  };
  for (const Case k : {Case{&c4, 32, 1, model::DpSharding::ddp}, Case{&c4, 32, 1, model::DpSharding::zero1},
                       Case{&c4, 32, 1, model::DpSharding::zero1, true}, Case{&c4, 32, 1, model::DpSharding::zero3},
                       Case{&c8, 32, 2, model::DpSharding::zero1}, Case{&c128, 64, 1, model::DpSharding::zero1}})
    for (auto dp_kind : {model::ScheduleKind::baseline, model::ScheduleKind::slice}) {
      model::Workload w = small_llama(k.sharding, k.pp > 1 ? 4 : 2);
      w.parallel.tp = 1;
      w.parallel.dp = k.dp;
      w.parallel.pp = k.pp;
      w.parallel.overlap_param_gather = k.overlap_gather;
      w.arch.layers = 2 * k.pp;
      INFO(fmt::format("{} dp {} pp {} {}{} DP {}", k.cluster->name, k.dp, k.pp, model::to_string(k.sharding),
                       k.overlap_gather ? " overlap_param_gather" : "", model::to_string(dp_kind)));
      const Outcome full = simulate(w, *k.cluster, dp_kind, false, false);
      const Outcome mirror = simulate(w, *k.cluster, dp_kind, true, false, true);
      INFO(mirror.schedule.symmetry_fallback);
      REQUIRE(mirror.schedule.symmetry_fallback.empty());
      REQUIRE(mirror.schedule.tp_images == 8);
      CHECK(mirror.schedule.simulated_ranks == 2 * k.pp);
      std::vector<int> simulated;
      for (int st = 0; st < k.pp; ++st)
        for (int r : {0, 8}) simulated.push_back(st * k.dp + r);
      CHECK(counted_ranks(mirror.schedule.graph.num_ranks(), mirror.schedule.simulated_ranks, k.pp, 8) == simulated);
      require_same_timeline(full, mirror, simulated, false);
    }
  // The protocol of each DP collective and the pricing of an all-reduce as NCCL's tree
  // (SimResult::best_tree_all_reduce) read every hop of the ring, not the hops of the members present:
  // ranks 0 and 8 alone hold no NIC hop. A DDP step of narrow layers (hidden 1024: all-reduces of up to
  // 28 MiB, where the ring's 62 or 126 hops cost more than the tree's bandwidth) on 4 and 8 nodes.
  for (const auto& [cluster, dp] : {std::pair{&c4, 32}, std::pair{&c128, 64}}) {
    model::Workload w = small_llama(model::DpSharding::ddp, 2);
    w.arch.hidden = 1024;
    w.arch.heads = 8;
    w.arch.kv_heads = 8;
    w.arch.ffn_hidden = 3584;
    w.parallel.tp = 1;
    w.parallel.dp = dp;
    INFO(fmt::format("{} dp {} DDP, hidden 1024", cluster->name, dp));
    const Outcome full = simulate(w, *cluster, model::ScheduleKind::baseline, false, false);
    const Outcome mirror = simulate(w, *cluster, model::ScheduleKind::baseline, true, false, true);
    REQUIRE(mirror.schedule.tp_images == 8);
    REQUIRE(full.result.best_tree_all_reduce.has_value());
    REQUIRE(mirror.result.best_tree_all_reduce.has_value());
    CHECK(mirror.result.best_tree_all_reduce->bytes == full.result.best_tree_all_reduce->bytes);
    CHECK(mirror.result.best_tree_all_reduce->ring_s == full.result.best_tree_all_reduce->ring_s);
    CHECK(mirror.result.best_tree_all_reduce->tree_s == full.result.best_tree_all_reduce->tree_s);
    require_same_timeline(full, mirror, {0, 8}, false);
  }
  model::Workload w = small_llama(model::DpSharding::zero1, 2);
  w.parallel.tp = 1;
  w.parallel.dp = 32;
  for (bool p2p : {false, true}) {
    const auto kind = p2p ? model::ScheduleKind::baseline : model::ScheduleKind::commfuse;
    const Outcome ring = simulate(w, c4, kind, true, p2p, true);
    INFO(model::to_string(kind) << (p2p ? " p2p" : ""));
    CHECK(ring.schedule.symmetry_fallback.empty());
    CHECK(ring.schedule.tp_images == 1);
    CHECK(ring.schedule.simulated_ranks == 16);
  }
}

TEST_CASE("Images where only the whole DP group repeats: every replica simulated, one rank per TP group or node",
          "[symmetry][dp][tp_images]") {
  // With two or four replicas per node and the DP group on two nodes, NCCL's rings repeat only every
  // two nodes (topo/rings.hpp), the whole group: no smaller group of replicas stands for the others.
  // Every replica is simulated, and the TP images (the first rank of each TP group) or at tp 1 the
  // node images (the first rank of each node) stand for the rest, as with fewer replicas. Against
  // every rank, task by task to the picosecond, the DP sync as collectives and as P2P rings:
  //   dgx-h100-4node: tp 4 dp 4 (ranks 0, 4, 8, 12 of 16), tp 2 dp 8 (ranks 0, 2, .., 14);
  //   hgx-h200-8node: tp 4 dp 4 pp 2, a stage on two nodes (ranks 0, 4, 8, 12 and 16, 20, 24, 28);
  //   dgx-h100-4node: tp 1 dp 16 (node images: ranks 0 and 8).
  // Before, each fell back to every rank (16 or 32 of them).
  const topo::Cluster c4 = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  const topo::Cluster c8 = topo::load_cluster_by_name_or_path("hgx-h200-8node");
  struct Case {
    const topo::Cluster* cluster;
    int tp, dp, pp;
  };
  for (const Case k : {Case{&c4, 4, 4, 1}, Case{&c4, 2, 8, 1}, Case{&c8, 4, 4, 2}, Case{&c4, 1, 16, 1}})
    for (auto tp_kind : {model::ScheduleKind::baseline, model::ScheduleKind::commfuse})
      for (auto dp_kind : {model::ScheduleKind::baseline, model::ScheduleKind::commfuse})
        for (auto sharding : {model::DpSharding::zero1, model::DpSharding::zero3})
          for (bool p2p : {false, true}) {
            if (k.pp > 1 && sharding == model::DpSharding::zero3) continue;  // not with stages
            if (k.tp == 1 && tp_kind == model::ScheduleKind::commfuse) continue;  // no TP
            model::Workload w = small_llama(sharding, k.pp > 1 ? 4 : 2);
            w.parallel.tp = k.tp;
            w.parallel.dp = k.dp;
            w.parallel.pp = k.pp;
            w.arch.layers = 2 * k.pp;
            w.schedule.kind = tp_kind;
            INFO(fmt::format("{} tp {} dp {} pp {}, TP {}, DP {} {}{}", k.cluster->name, k.tp, k.dp, k.pp,
                             model::to_string(tp_kind), model::to_string(dp_kind), model::to_string(sharding),
                             p2p ? " p2p" : ""));
            const Outcome full = simulate(w, *k.cluster, dp_kind, false, p2p);
            const Outcome mirror = simulate(w, *k.cluster, dp_kind, true, p2p, true);
            INFO(mirror.schedule.symmetry_fallback);
            INFO(mirror.schedule.tp_images_refused);
            // Node images stand for replicas whose DP sync runs as collectives only (their rings turn
            // onto one another); a P2P sync there keeps every rank, with the DP sync as collectives
            // (--symmetry none), for the reason of a single replica.
            if (k.tp == 1 && (p2p || dp_kind == model::ScheduleKind::commfuse)) {
              CHECK(mirror.schedule.symmetry_fallback.find("replica 7 to 8 crosses them") != std::string::npos);
              CHECK(mirror.schedule.simulated_ranks == 0);
              if (!p2p) CHECK(mirror.result.makespan_ps == full.result.makespan_ps);
              continue;
            }
            REQUIRE(mirror.schedule.symmetry_fallback.empty());
            const int images = k.tp > 1 ? k.tp : 8;
            REQUIRE(mirror.schedule.tp_images == images);
            const int per_stage = k.tp * k.dp / images;
            CHECK(mirror.schedule.simulated_ranks == per_stage * k.pp);
            CHECK(mirror.schedule.replicas == 1);
            std::vector<int> simulated;
            for (int st = 0; st < k.pp; ++st)
              for (int r = 0; r < per_stage; ++r) simulated.push_back(st * k.tp * k.dp + r * images);
            CHECK(counted_ranks(mirror.schedule.graph.num_ranks(), mirror.schedule.simulated_ranks, k.pp, images) ==
                  simulated);
            // Every replica present: the DP rings need no proxy, CommFuse's TP ring its own.
            require_same_timeline(full, mirror, simulated, tp_kind == model::ScheduleKind::commfuse);
          }
}

TEST_CASE("TP images with one DP replica: the first rank of each TP group of every stage, exactly",
          "[symmetry][tp_images][pp]") {
  // DP 1: no replica to mirror, but the TP ranks of each stage still run the same tasks and meet only
  // in their collectives or ring steps, so the first of each TP group stands for its group (Korthikanti
  // et al.'s 530B, TP 8 x PP 35 on 280 A100s: 35 ranks simulated of 280). Against every rank, task by
  // task to the picosecond, on dgx-h100-4node: tp 8 pp 4 (a stage per node: ranks 0, 8, 16, 24), 1F1B
  // and interleaved (v 2), tp 4 pp 2 (ranks 0 and 4), tp 8 alone (rank 0); every TP schedule. Where no
  // image can be made (tp 16 across two nodes) every rank is simulated, saying nothing: nothing was
  // mirrored.
  const topo::Cluster c4 = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  struct Case {
    int tp, pp, virtual_stages;
  };
  for (const Case k : {Case{8, 4, 1}, Case{8, 4, 2}, Case{4, 2, 1}, Case{8, 1, 1}})
    for (const auto& [tp_kind, te] :
         {std::pair{model::ScheduleKind::baseline, false}, std::pair{model::ScheduleKind::slice, false},
          std::pair{model::ScheduleKind::commfuse, false}, std::pair{model::ScheduleKind::baseline, true}}) {
      model::Workload w = small_llama(model::DpSharding::ddp, k.pp > 1 ? 2 * k.pp : 2);
      w.parallel.tp = k.tp;
      w.parallel.dp = 1;
      w.parallel.pp = k.pp;
      w.parallel.virtual_stages = k.virtual_stages;
      if (k.virtual_stages > 1) w.parallel.pp_schedule = model::PipelineSchedule::interleaved;
      w.arch.layers = 2 * k.pp * k.virtual_stages;
      w.schedule.tp_baseline_te_userbuffers = te;
      w.schedule.slices = 2;
      INFO(fmt::format("tp {} pp {} v {}, TP {}{}", k.tp, k.pp, k.virtual_stages, model::to_string(tp_kind),
                       te ? " (TE userbuffers)" : ""));
      const Outcome full = simulate(w, c4, tp_kind, false, false, false, Scope::step, Parallelism::tpsp);
      const Outcome mirror = simulate(w, c4, tp_kind, true, false, true, Scope::step, Parallelism::tpsp);
      INFO(mirror.schedule.tp_images_refused);
      REQUIRE(mirror.schedule.symmetry_fallback.empty());
      REQUIRE(mirror.schedule.tp_images == k.tp);
      CHECK(mirror.schedule.simulated_ranks == k.pp);
      CHECK(mirror.schedule.replicas == 1);
      CHECK(mirror.schedule.dataflow == nullptr);
      std::vector<int> simulated;
      for (int st = 0; st < k.pp; ++st) simulated.push_back(st * k.tp);
      CHECK(counted_ranks(mirror.schedule.graph.num_ranks(), mirror.schedule.simulated_ranks, k.pp, k.tp) == simulated);
      require_same_timeline(full, mirror, simulated, tp_kind == model::ScheduleKind::commfuse || te);
    }
  model::Workload w = small_llama(model::DpSharding::ddp, 2);
  w.parallel.tp = 16;
  w.parallel.dp = 1;
  w.arch.kv_heads = 16;
  const Outcome wide = simulate(w, c4, model::ScheduleKind::baseline, true, false, true, Scope::step, Parallelism::tpsp);
  CHECK(wide.schedule.symmetry_fallback.empty());
  CHECK(wide.schedule.tp_images == 1);
  CHECK(wide.schedule.simulated_ranks == 0);
}

TEST_CASE("The fabric check turns a TP image's pairs inside a node only within the simulated nodes",
          "[symmetry][dp][tp_images]") {
  // TP 8 x DP 4 on the four DGX H100 nodes, TP baseline (collectives of the TP group, inside node 0),
  // DP CommFuse (its ring of P2P steps from rank 0 to rank 8, across the NICs), ZeRO-1: rank 0 alone is
  // simulated, 4 replicas x 8 TP images. A pair inside node 0 has its images in the other replica
  // groups inside the other nodes, on their links alone (as the check assumes at tp 1): only its 8
  // turns are routed. The pair across nodes is routed in all 32 images. Before, 32 each.
  const topo::Cluster c = topo::load_cluster_by_name_or_path("dgx-h100-4node");
  model::Workload w = small_llama(model::DpSharding::zero1, 1);
  w.schedule.kind = model::ScheduleKind::baseline;
  GenerateOptions o;
  o.scope = Scope::step;
  o.parallelism = Parallelism::dp;
  o.mirror_dp = o.mirror_tp = true;
  const Schedule s = generate(w, "w", c, model::ScheduleKind::commfuse, o);
  REQUIRE(s.tp_images == 8);
  REQUIRE(s.replicas == 4);
  // Rank 0's pairs: its successor on each ring NCCL runs over the TP group (topo/rings.hpp), and 8.
  std::set<int> inner;
  for (const auto& ring : topo::collective_rings({0, 1, 2, 3, 4, 5, 6, 7}, c))
    for (std::size_t i = 0; i < ring.size(); ++i)
      if (ring[i] == 0) inner.insert(ring[(i + 1) % ring.size()]);
  REQUIRE(!inner.empty());
  const FabricCheck f = check_mirror_fabric(s, c);
  CHECK(f.checked);
  CHECK(f.asymmetry.empty());
  CHECK(f.image_routes == inner.size() * 8 + 32);
}
