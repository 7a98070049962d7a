#pragma once
// What a mirrored schedule (--symmetry mirror, docs/schedules.md "Symmetry") needs of the fabric: the
// simulated group's transfers stand for every replica group's, so every image of a transfer must
// cross links that carry as many of the job's transfers as the links the simulated one crosses, and
// each link the simulated group uses must carry in the whole job as many transfers as it does in the
// mirrored run (a proxy's route, below, included). A rail-optimized fabric keeps every image on links
// of its own; a fabric whose spines or shared uplinks gather the images of several groups does not,
// and the mirrored step would be too fast there.
#include <cstddef>
#include <string>
#include <vector>

#include "fusesim/sched/dag.hpp"
#include "fusesim/topo/cluster.hpp"

namespace fusesim::sched {

struct Schedule;  // sched/generate.hpp

// The route a transfer from `src` into the proxy rank `dst` of a mirrored graph takes: out as the
// real route, in by the links of dst's alias (TaskGraph::load_alias), as the mirrored transfer into
// the alias arrives (the engine's rule: the real route up to the last vertex before its destination
// that the mirrored sender's route to the alias visits at the same hop, then that route). The mirrored
// sender is `src` shifted within its pipeline stage (TaskGraph::alias_stage_ranks) as dst is onto its
// alias, and with TP or node images (TaskGraph::alias_tp_images) turned within its group as dst is. Empty when dst is no proxy, or the two routes differ in length or meet at no hop (the real
// route is then kept).
topo::Route proxy_route(const topo::Cluster& cluster, const TaskGraph& graph, int src, int dst,
                        const topo::Route& real);

// Whether the fabric repeats along the replica groups of a mirrored schedule (and, with TP or node
// images, along the turns of each group: Schedule::tp_images). Counts the distinct
// (sender, receiver) pairs of the simulated ranks' Sends and collective ring steps (topo/rings.hpp)
// and of their images in every replica group, on the cluster's routes; pairs inside a node are left
// out when the simulated group holds whole nodes. Beyond `max_routes` routes to search the fabric is
// not checked, and says so. A schedule that is not mirrored (Schedule::simulated_ranks 0) passes.
inline constexpr std::size_t kMaxImageRoutes = 65536;
struct FabricCheck {
  std::string asymmetry;         // why not (one line naming the transfer and the links); empty: repeats
  std::size_t image_routes = 0;  // the routes the check searched, or would have
  bool checked = true;           // false: more than max_routes, the fabric taken to repeat
};
FabricCheck check_mirror_fabric(const Schedule& schedule, const topo::Cluster& cluster,
                                std::size_t max_routes = kMaxImageRoutes);

}  // namespace fusesim::sched
