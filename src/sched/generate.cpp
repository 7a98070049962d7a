#include "fusesim/sched/generate.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <future>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "fusesim/sched/dataflow.hpp"
#include "fusesim/sched/strategy.hpp"
#include "fusesim/sched/symmetry.hpp"
#include "fusesim/sched/tpsp.hpp"
#include "fusesim/topo/rings.hpp"
#include "fusesim/util/allocator.hpp"
#include "fusesim/util/error.hpp"

namespace fusesim::sched {

// The TPSP builder generates every parallelism (Ulysses inside its layers, the DP gradient sync and the
// step around them); tpsp_request() turns the workload and cluster into its request.
namespace {

// The whole is refused, before it is built, when its estimate (estimated_tasks) exceeds what the
// machine can hold: a workload at its documented limits (1,000,000 micro-batches at step scope) ended
// in bad_alloc after a minute otherwise.
// Returns the estimate (0 where the graph is too small to need one), for TpspRequest::reserve_tasks.
std::size_t refuse_oversized(const TpspRequest& r, const std::string& workload_label) {
  const std::int64_t layers = r.shape.layers;
  const std::int64_t micro_batches = r.options.scope == Scope::step ? std::max<std::int64_t>(1, r.step.micro_batches) : 1;
  const double copies = static_cast<double>(layers) * static_cast<double>(micro_batches);
  // Every rank of many DP replicas: a replica's tasks grow with dp too (a ring of dp - 1 steps per
  // gradient), so even one layer can exceed the machine (4,096 H100 with CommFuse's DP ring: 10^8
  // tasks for two layers), and probes of every rank would be as large. Every replica runs the same
  // tasks, so the graph is dp times one replica's, counted on mirrored probes (a proxy receive in
  // place of each receive from a replica not built: the same count).
  // The first group of g replicas whose rings a mirrored probe can build (its proxies need the rings
  // to repeat every g replicas: DpSync::ring_recv) counts; where none can, every rank's probes as for
  // a mirrored graph.
  const bool every_replica = !r.options.mirror_dp && r.shape.dp > 1 && r.piece == TpspPiece::layers;
  double tasks = -1.0;
  for (int g = 1; every_replica && g < r.shape.dp && tasks < 0.0; ++g) {
    if (r.shape.dp % g != 0) continue;
    TpspRequest group = r;
    group.options.mirror_dp = true;
    group.mirror_replicas = g;
    group.tp_images = 1;
    try {
      tasks = estimated_tasks(group) * (r.shape.dp / g);
    } catch (const std::logic_error&) {  // the rings do not repeat every g replicas: a proxy has no image
    }
  }
  if (tasks < 0.0) {
    if (r.options.scope == Scope::layer || copies <= 4.0) return 0;
    tasks = estimated_tasks(r);
  }
  const double bytes = tasks * kGraphBytesPerTask;
  const double memory = util::physical_memory_bytes();
  const double allowed = 0.75 * memory * std::clamp(r.options.memory_share, 0.0, 1.0);
  if (tasks <= kMaxGeneratedTasks && (memory <= 0.0 || bytes <= allowed)) {
    // With stages the estimate leaves out some of the stage transfers (within 10%: step_test.cpp);
    // room that stays unused costs no memory, a growth at the end would copy the whole graph.
    const double room = r.shape.pp > 1 ? 1.12 * tasks : tasks;
    return room > 0.0 ? static_cast<std::size_t>(std::ceil(room)) : 0;
  }
  const bool by_micro_batches = micro_batches > layers;
  throw InputError(workload_label, by_micro_batches ? "$.training.grad_accumulation" : "$.model.layers",
                   fmt::format("{} layers x {} micro-batches{} would build a task graph of about {:.3g} tasks ({:.1f} GB "
                               "at {:.0f} bytes each), above what one run may build ({:.3g} tasks, and {:.1f} GB: 75% of "
                               "this machine's {:.1f} GB{}); simulate a layer or a stack (--scope), or fewer micro-batches",
                               layers, micro_batches,
                               every_replica ? fmt::format(" on every rank of {} DP replicas", r.shape.dp) : std::string(),
                               tasks, bytes / 1e9, kGraphBytesPerTask, kMaxGeneratedTasks,
                               allowed / 1e9, memory / 1e9,
                               r.options.memory_share < 1.0
                                   ? fmt::format(", shared by {:.0f} runs at once", 1.0 / r.options.memory_share)
                                   : std::string()));
}

// Mirroring a group of g DP replicas (0..g - 1 simulated, the others their images) is exact when the
// cluster repeats along the DP ring with period g: every hop from replica d to d + 1 crosses nodes or
// stays inside one as the hop from d mod g to d mod g + 1 does, the hop out of the group (g - 1 to
// g) included, which the mirrored ring simulates for all. With one replica per node or more nodes
// per replica, g = 1; with fewer ranks per replica than per node (TP 2 on DGX nodes: four replicas
// per node), the hops inside a node stay on NVLink and every fourth crosses the NICs, which g = 4 (a
// node's replicas) repeats. With pipeline stages the same holds in each stage, and every replica's
// hop to the next stage must be like its image's. Returns why not, or empty.
std::string mirror_asymmetry(const TpspShape& sh, const topo::Cluster& cluster, int group) {
  const int stage_ranks = sh.tp * sh.up * sh.dp;
  const auto where = [&](int stage) { return sh.pp > 1 ? fmt::format(" in stage {}", stage) : std::string(); };
  for (int stage = 0; stage < sh.pp; ++stage) {
    const RankLayout layout{sh.tp, sh.up, sh.dp, stage * stage_ranks};
    const auto crosses = [&](int ti, int d) {
      return cluster.node_of(layout.rank(ti, sh.up - 1, d)) != cluster.node_of(layout.rank(ti, 0, (d + 1) % sh.dp));
    };
    for (int ti = 0; ti < sh.tp; ++ti)
      for (int d = group; d < sh.dp; ++d)
        if (crosses(ti, d) != crosses(ti, d % group))
          return fmt::format("the DP ring's hop from replica {} to {}{} {} nodes but the hop from replica {} to {} {} "
                             "(tp x up = {} ranks per replica, {} replica{} simulated)",
                             d % group, d % group + 1, where(stage), crosses(ti, d % group) ? "crosses" : "stays inside",
                             d, (d + 1) % sh.dp, crosses(ti, d) ? "crosses them" : "does not", layout.tp * layout.up,
                             group, group > 1 ? "s" : "");
    // The rings the DP collectives lowered to P2P run (topo/rings.hpp; over the sync's up x dp
    // members, replica by replica): each must map onto itself when shifted by the group, hop for hop,
    // each hop crossing nodes as its image does, and each ring's hop into the group must come from
    // the last images, whose shift is simulated (DpSync::ring_recv's proxy).
    const int members = sh.up * sh.dp, shift = sh.up * group;
    for (int ti = 0; ti < sh.tp && sh.dp > 1; ++ti) {
      std::vector<int> ranks;
      for (int d = 0; d < sh.dp; ++d)
        for (int u = 0; u < sh.up; ++u) ranks.push_back(layout.rank(ti, u, d));
      const auto rings = topo::collective_rings(ranks, cluster);
      for (std::size_t k = 0; k < rings.size(); ++k) {
        std::vector<int> next(static_cast<std::size_t>(members));
        for (int i = 0; i < members; ++i)
          next[static_cast<std::size_t>(rings[k][static_cast<std::size_t>(i)])] =
              rings[k][static_cast<std::size_t>((i + 1) % members)];
        const auto crosses_hop = [&](int q) {
          return cluster.node_of(ranks[static_cast<std::size_t>(q)]) !=
                 cluster.node_of(ranks[static_cast<std::size_t>(next[static_cast<std::size_t>(q)])]);
        };
        for (int q = 0; q < members; ++q) {
          const int image = (q + shift) % members;
          const int to = next[static_cast<std::size_t>(q)];
          const bool enters = q >= shift && to < shift;
          if (next[static_cast<std::size_t>(image)] != (to + shift) % members || crosses_hop(image) != crosses_hop(q) ||
              (enters && q < members - shift))
            return fmt::format("ring {} of the DP collectives{} does not repeat every {} replica{} (its hop from "
                               "member {} to {}; {} rings over {} members)",
                               k, where(stage), group, group > 1 ? "s" : "", q, to, rings.size(), members);
        }
      }
    }
    if (stage + 1 == sh.pp) continue;
    const RankLayout next{sh.tp, sh.up, sh.dp, (stage + 1) * stage_ranks};
    const auto to_next = [&](int ti, int u, int d) {
      return cluster.node_of(layout.rank(ti, u, d)) != cluster.node_of(next.rank(ti, u, d));
    };
    for (int d = group; d < sh.dp; ++d)
      for (int u = 0; u < sh.up; ++u)
        for (int ti = 0; ti < sh.tp; ++ti)
          if (to_next(ti, u, d) != to_next(ti, u, d % group))
            return fmt::format("replica {}'s activations go from stage {} to {} {} nodes but replica {}'s {}", d % group,
                               stage, stage + 1, to_next(ti, u, d % group) ? "across" : "inside", d,
                               to_next(ti, u, d) ? "cross them" : "do not");
  }
  return {};
}

// TP images (TpspRequest::tp_images) stand in for TP ranks that run the same tasks and meet only in
// collectives of their TP group or in its ring P2P steps (sched/ring.hpp), each group inside one node,
// where turning a group's ranks maps the group's collectives onto themselves and each member's Send
// of a ring step onto its successor's (the first rank's receive is then a proxy Recv on the second
// rank, of the first rank's own Send: Builder::ring_ports): every shipped TP strategy (baseline, TE's
// userbuffers, slice, CommFuse), no Ulysses (its all-to-all has no ring to turn), and no TP strategy
// of one's own. The fabric must repeat along the turned ranks too (check_mirror_fabric, over every
// image). Returns why not, or empty.
std::string tp_images_refused(const TpspRequest& r, const topo::Cluster& cluster) {
  const TpspShape& sh = r.shape;
  if (sh.tp <= 1) return "tp 1";
  if (sh.up > 1) return fmt::format("up {}: the Ulysses all-to-all has no ring to turn", sh.up);
  if (r.tp_strategy != nullptr) return "a TP strategy of one's own";
  for (int stage = 0; stage < sh.pp; ++stage) {
    const RankLayout layout{sh.tp, sh.up, sh.dp, stage * sh.tp * sh.up * sh.dp};
    for (int d = 0; d < sh.dp; ++d)
      if (cluster.node_of(layout.rank(0, 0, d)) != cluster.node_of(layout.rank(sh.tp - 1, 0, d)))
        return fmt::format("the TP group of ranks {} to {} spans nodes", layout.rank(0, 0, d), layout.rank(sh.tp - 1, 0, d));
  }
  return {};
}

// The first TP rank's tasks emitted alone (TP images) against the whole graph built and filtered
// (TaskGraph::retain, which refuses a task waiting for another TP rank's): the same tasks, names,
// ranks and streams, with the same dependencies in the same order, except that a ring step's receive
// from an image is a proxy (Builder::ring_ports): a Recv of the same name and bytes on the rank after,
// from the first rank, where the filtered one is on the first rank. A probe's worth of tasks each.
bool same_tasks_as_filtered(const TpspRequest& probe, const Schedule& emitted) {
  TpspRequest whole = probe;
  whole.tp_images_by_filter = true;
  const Schedule filtered = generate_tpsp(whole);
  if (filtered.tp_images != emitted.tp_images || filtered.tp_images == 1) return false;
  const TaskGraph &a = emitted.graph, &b = filtered.graph;
  if (a.size() != b.size() || a.num_edges() != b.num_edges()) return false;
  for (TaskId id = 0; id < a.size(); ++id) {
    const Task &x = a.task(id), &y = b.task(id);
    if (x.name != y.name || x.stream.kind != y.stream.kind || x.stream.index != y.stream.index ||
        x.kind.index() != y.kind.index())
      return false;
    if (x.rank == y.rank) continue;
    const auto* proxy = std::get_if<RecvTask>(&x.kind);
    const auto* own = std::get_if<RecvTask>(&y.kind);
    if (proxy == nullptr || own == nullptr || proxy->peer != y.rank || x.rank != y.rank + 1 ||
        proxy->bytes != own->bytes)
      return false;
  }
  const PredecessorIndex pa = a.predecessor_index(), pb = b.predecessor_index();
  return pa.offsets == pb.offsets && pa.sources == pb.sources;
}

// At tp 1 (up 1) the DP replicas a node holds run the same tasks, each its own rank, and meet only in
// the DP collectives, whose rings turn onto one another when a node's ranks are turned (topo/rings.hpp:
// ring k onto ring k + 1): the first rank of each node stands for the node's replicas (node images,
// TpspRequest::tp_images = the node's ranks). Not where the DP sync sends point to point (CommFuse's
// fused ring, --symmetry p2p): its proxies stand in for whole replica groups only. Returns the ranks
// per node, or 1 where not: the mirror's replica group must hold whole nodes of equal size, and every
// turn within a node must map the DP group's rings onto its rings.
int node_images(const TpspRequest& r, const topo::Cluster& cluster) {
  const TpspShape& sh = r.shape;
  if (sh.tp != 1 || sh.up != 1 || sh.dp < 2 || r.options.dp_as_p2p ||
      schedule_strategy(r.dp_kind, r.schedule).dp_fused())
    return 1;
  const int node_ranks = cluster.devices_per_node;
  if (node_ranks < 2 || r.mirror_replicas % node_ranks != 0 || sh.dp % node_ranks != 0) return 1;
  const int world = sh.dp * sh.pp;
  for (int rank = 0; rank < world; ++rank)
    if (cluster.node_of(rank) != cluster.node_of(rank - rank % node_ranks)) return 1;
  for (int stage = 0; stage < sh.pp; ++stage) {
    std::vector<int> group;
    for (int d = 0; d < sh.dp; ++d) group.push_back(stage * sh.dp + d);
    const std::vector<std::vector<int>> rings = topo::collective_rings(group, cluster);
    const int t = static_cast<int>(group.size());
    // Position m turned by j within its node is position m - m % G + (m % G + j) % G (the group is
    // the stage's ranks in order, whole nodes).
    std::set<std::vector<int>> successors;  // each ring as its successor table
    const auto table = [&](const std::vector<int>& ring, int j) {
      std::vector<int> next(static_cast<std::size_t>(t));
      const auto turn = [&](int m) { return m - m % node_ranks + (m % node_ranks + j) % node_ranks; };
      for (int i = 0; i < t; ++i)
        next[static_cast<std::size_t>(turn(ring[static_cast<std::size_t>(i)]))] = turn(ring[static_cast<std::size_t>((i + 1) % t)]);
      return next;
    };
    for (const auto& ring : rings) successors.insert(table(ring, 0));
    for (int j = 1; j < node_ranks; ++j)
      for (const auto& ring : rings)
        if (successors.count(table(ring, j)) == 0) return 1;
  }
  return node_ranks;
}

}  // namespace

Schedule generate(const model::Workload& workload, const std::string& workload_label, const topo::Cluster& cluster,
                  model::ScheduleKind kind, const GenerateOptions& options) {
  TpspRequest r = tpsp_request(workload, workload_label, cluster, kind, options);
  // The embedding and the LM head are built with Megatron's padded vocabulary (a multiple of
  // $.model.vocab_divisible_by x tp): their FLOPs, bytes and gradient rows, and so MFU, count the
  // padding rows, as Megatron's own num_floating_point_operations does with args.padded_vocab_size
  // (megatron/training/training.py).
  r.step.vocab = workload.arch.padded_vocab(workload.parallel.tp);
  std::string fallback, unchecked;
  const auto finish = [&](Schedule& s) {
    s.symmetry_fallback = fallback;
    s.symmetry_unchecked = unchecked;  // set only where the check found no asymmetry
    s.network_sends_on_sm = network_sends_to_sm_kernels(s.graph, cluster);
  };
  // The whole built as `r` asks while the fabric check runs on another thread: refused first where too
  // large (the probes below are one layer and micro-batch), as it will be built, mirrored groups of the
  // size chosen. The check's error, if any, comes before the build's, which is the caller's to rethrow
  // where the check lets the whole stand (elsewhere another graph is built).
  struct BuiltBeside {
    FabricCheck check;
    std::optional<Schedule> whole;
    std::exception_ptr build_error;
  };
  const auto build_beside = [&](std::future<FabricCheck>& check) {
    BuiltBeside out;
    try {
      r.reserve_tasks = refuse_oversized(r, workload_label);
      out.whole.emplace(generate_tpsp(r));
    } catch (...) {
      out.build_error = std::current_exception();
    }
    out.check = check.get();
    return out;
  };
  // The fabric check's route searches (a tenth of a large mirrored step's generation and run) go on
  // a second thread while the mirrored graph is built; where they find the fabric asymmetric, that
  // graph is dropped and every rank built, as when the check came first. Its error, if any, comes
  // before the build's.
  std::future<FabricCheck> fabric;
  // One DP replica: no replica to mirror, but its TP images may stand for the TP ranks (a pipeline of
  // TP 8 x PP 35 on 280 GPUs: 35 ranks simulated of 280); where they cannot, every rank, silently.
  const bool images_only = r.options.mirror_dp && r.shape.dp == 1;
  // Whether the first rank of each TP group may stand for its group (it still must pass the probe and
  // the fabric check below).
  const bool tp_imageable = r.options.mirror_tp && tp_images_refused(r, cluster).empty();
  if (images_only && !tp_imageable) {
    r.options.mirror_dp = false;  // nothing to mirror
  } else if (r.options.mirror_dp) {
    // The fewest replicas whose images make up the rest: a divisor of dp below dp (dp itself would
    // simulate every replica, as p2p does); the reason given is the one of a single replica.
    for (int g = 1; g < r.shape.dp; ++g) {
      if (r.shape.dp % g != 0) continue;
      const std::string why = mirror_asymmetry(r.shape, cluster, g);
      if (g == 1) fallback = why;
      if (!why.empty()) continue;
      r.mirror_replicas = g;
      fallback.clear();
      break;
    }
    // Where no smaller group repeats (TP 4 x DP 4 on two 8-GPU nodes: NCCL's rings repeat every two
    // nodes, the whole group), every replica is simulated, but images may still stand for the TP ranks
    // or a node's replicas: their DP groups are the simulated one's turned within the groups or nodes,
    // each on its own GPUs and rails, as with fewer replicas (the whole group repeats trivially). Kept
    // only where the images are made below; else every rank, as before, for the first reason.
    std::string whole_group_reason;
    if (!fallback.empty() && (tp_imageable || (r.options.mirror_tp && r.shape.tp == 1 && r.shape.up == 1))) {
      whole_group_reason = std::exchange(fallback, std::string());
      r.mirror_replicas = r.shape.dp;
    }
    if (fallback.empty()) {
      if (tp_imageable) r.tp_images = r.shape.tp;
      if (r.options.mirror_tp && r.shape.tp == 1) r.tp_images = node_images(r, cluster);
      // The rows the sync cuts, and the ranks every transfer goes between, are the same in every
      // layer and micro-batch: one of each (one layer per stage and virtual stage, one group of
      // micro-batches) tells. The fabric must repeat along the replica groups too (sched/symmetry.hpp).
      TpspRequest probe = r;
      probe.shape.layers = std::int64_t{r.shape.pp} * r.shape.virtual_stages;
      probe.step.micro_batches = r.shape.virtual_stages > 1 ? r.shape.pp : 1;
      Schedule probed = generate_tpsp(probe);
      // With TP images the fabric is checked first (the TP ranks' images among them): where it does not
      // repeat along them, the replicas are mirrored alone, every TP rank simulated. So too where the
      // check, which routes tp_images times the images, is over its budget but the replicas' alone
      // would not be (TP 8 x DP 512): a checked mirror rather than an assumed one.
      std::optional<FabricCheck> tp_check;
      // Within its budget (counted first: no route searched) the check's route searches, a tenth of a
      // small run, go on beside the build of the whole with TP images, which a passing check leads to
      // below; a failing one drops it. Beyond it (a check not made leads elsewhere) nothing is built
      // ahead: at 16,384 GPUs a graph built for nothing would cost seconds.
      if (r.tp_images > 1 && probed.mirror_inexact.empty() && same_tasks_as_filtered(probe, probed)) {
        // Over the budget the count is what the check itself says.
        if (FabricCheck counted = check_mirror_fabric(probed, cluster, 0); counted.image_routes > kMaxImageRoutes) {
          tp_check = std::move(counted);
        } else {
          auto checking =
              std::async(std::launch::async, [&probed, &cluster] { return check_mirror_fabric(probed, cluster); });
          BuiltBeside built = build_beside(checking);
          tp_check = built.check;
          if (tp_check->checked && tp_check->asymmetry.empty()) {
            if (built.build_error) std::rethrow_exception(built.build_error);
            Schedule s = std::move(*built.whole);
            finish(s);
            return s;
          }
        }
      }
      if (tp_check && tp_check->asymmetry.empty() && !tp_check->checked) {
        TpspRequest alone = probe;
        alone.tp_images = 1;
        Schedule replicas = generate_tpsp(alone);
        const FabricCheck replicas_check = check_mirror_fabric(replicas, cluster);
        if (replicas_check.checked) {
          r.tp_images = probe.tp_images = 1;
          tp_check = replicas_check;
          probed = std::move(replicas);
        }
      }
      if (r.tp_images > 1 && (!tp_check || !tp_check->asymmetry.empty())) {
        r.tp_images = probe.tp_images = 1;
        tp_check.reset();
        probed = generate_tpsp(probe);
      }
      fallback = probed.mirror_inexact;
      if (!whole_group_reason.empty() && r.tp_images == 1 && fallback.empty()) fallback = whole_group_reason;
      if (images_only && r.tp_images == 1) {
        r.options.mirror_dp = false;  // no image made: every rank, as without the mirror
        fallback.clear();
      } else if (fallback.empty() && tp_check) {
        std::promise<FabricCheck> done;
        done.set_value(*tp_check);
        fabric = done.get_future();
      } else if (fallback.empty()) {
        fabric = std::async(std::launch::async, [probed = std::move(probed), &cluster] {
          return check_mirror_fabric(probed, cluster);
        });
      }
    }
  }
  if (fabric.valid()) {
    BuiltBeside built = build_beside(fabric);
    fallback = built.check.asymmetry;
    if (fallback.empty()) {
      if (built.build_error) std::rethrow_exception(built.build_error);
      Schedule s = std::move(*built.whole);
      if (!built.check.checked)  // the probe's replica groups are the whole graph's
        unchecked = fmt::format("the fabric's symmetry along the {} replica groups is assumed, not checked ({} "
                                "routes to search, over the {} the check searches)",
                                s.replicas, built.check.image_routes, kMaxImageRoutes);
      finish(s);
      return s;
    }
  }
  if (fallback.empty()) {
    r.reserve_tasks = refuse_oversized(r, workload_label);  // as above
  } else {
    // Every rank, the DP sync as the collectives NCCL runs (--symmetry none): replica 0 would not
    // stand for the others, and a wrong step is worse than a slower simulation. Refused before it is
    // built, saying why the mirror could not stand in.
    r.options.mirror_dp = false;
    r.options.dp_as_p2p = false;
    try {
      r.reserve_tasks = refuse_oversized(r, workload_label);
    } catch (const InputError& e) {
      throw InputError(e.file(), e.json_path(),
                       fmt::format("{} (--symmetry mirror cannot stand in: {})", e.message(), fallback));
    }
  }
  Schedule s = generate_tpsp(r);
  finish(s);
  return s;
}

namespace {
bool crosses_nodes(const Task& t, const SendTask& send, const topo::Cluster& cluster) {
  const int ranks = cluster.num_ranks();
  return t.rank < ranks && send.peer < ranks && cluster.node_of(t.rank) != cluster.node_of(send.peer);
}
}  // namespace

std::int64_t network_sends_to_sm_kernels(TaskGraph& graph, const topo::Cluster& cluster) {
  std::int64_t turned = 0;
  for (TaskId id = 0; id < graph.size(); ++id) {
    Task& t = graph.task(id);
    auto* send = std::get_if<SendTask>(&t.kind);
    if (send == nullptr || send->engine != model::CommEngine::copy_engine || !crosses_nodes(t, *send, cluster)) continue;
    send->engine = model::CommEngine::sm_kernel;
    send->sms = -1;
    ++turned;
  }
  return turned;
}

std::optional<TaskId> first_network_copy_send(const TaskGraph& graph, const topo::Cluster& cluster) {
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    const auto* send = std::get_if<SendTask>(&t.kind);
    if (send != nullptr && send->engine == model::CommEngine::copy_engine && crosses_nodes(t, *send, cluster)) return id;
  }
  return std::nullopt;
}

}  // namespace fusesim::sched
