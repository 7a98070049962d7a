#pragma once
// Ring orders for the ring collectives (all-gather, reduce-scatter, all-reduce) of one group: the
// engine's collectives (sim/engine.cpp) and the DP collectives lowered to ring P2P steps
// (sched/dp.cpp) run the same rings, so that the two forms agree.
//
// A group inside one node runs one ring in group order: every hop is on the node's scale-up fabric.
// A group spanning several nodes runs one ring per member a node holds, each carrying an equal share
// of the buffer, and each ring enters and leaves every node through the same local index on both
// sides of a node boundary. On a rail-optimized fabric that keeps every inter-node hop on one rail
// (NIC k of one node to NIC k of the next, through leaf k alone) and puts each NIC under exactly one
// ring per direction, which is how NCCL builds rings across DGX nodes: several channels, one or two
// per NIC, with NCCL_CROSS_NIC=0/2 keeping a ring on the same NIC index across nodes (NCCL
// environment-variable documentation, NCCL_CROSS_NIC; NCCL src/graph/search.cc). One flat ring in
// group order instead pushes the whole buffer through the one NIC per node it crosses on.
//
// A group inside one node of a full mesh (HCCS, xGMI: a link between every pair of devices) runs one
// ring per stride s coprime to the group size t: ring s visits positions 0, s, 2s, ... (mod t). Rings
// of different strides use different links (each directed link joins positions a stride apart), so
// the collective spreads over phi(t) of each device's t-1 links (4 of 7 for 8 devices, all of them
// for a prime t), as RCCL and HCCL spread a collective over the mesh with several rings or channels
// at once. One ring would push the whole buffer through one link per device and leave the others idle.
#include <vector>

#include "fusesim/topo/cluster.hpp"

namespace fusesim::topo {

// Each ring as the order of member positions (indices into `group`); every ring is a permutation of
// 0 .. group.size()-1 and visits its successor in that order, the last member sending to the first.
// Inside one node of a full mesh, the rings of the strides coprime to t (the first is the group
// order). Otherwise one ring (the group order) unless the group spans two or more nodes with the same number g >= 2 of
// members on each node, listed node by node; then g rings. Ring r visits, in the j-th node of the
// group, the node's members at local positions r, r+1, ..., r+g-1 (mod g) when j is even and
// r-1, r-2, ..., r (mod g) when j is odd: it leaves an even node by local position r-1 and enters the
// next (odd) one there, leaves an odd node by r and enters the next (even) one there. With an odd
// number of nodes the hop from the last node back to the first changes local position (one hop per
// ring leaves its rail).
std::vector<std::vector<int>> collective_rings(const std::vector<int>& group, const Cluster& cluster);

// The rings across nodes alone, from the node of each member in group order (no full mesh): what
// collective_rings gives for a group whose members sit on those nodes.
std::vector<std::vector<int>> rail_rings(const std::vector<int>& member_nodes);

}  // namespace fusesim::topo
