// NCCL's cost model of a collective across nodes (NVIDIA/nccl src/graph/tuning.cc: ncclTopoTuneModel
// computes one latency and one bandwidth per collective, algorithm and protocol, ncclTopoGetAlgoTime
// answers a size with latency + bytes / bandwidth, and NCCL runs the least), at the constants the
// topology gives (topo::CollectiveModel). The engine chooses and paces by it the all-reduces,
// all-gathers and reduce-scatters across nodes that the topology lists (docs/engine.md, "NCCL's
// collective model").
#pragma once

#include <optional>

#include "fusesim/sched/dag.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/units.hpp"

namespace fusesim::sim {

enum class NcclAlgorithm : std::uint8_t { ring, tree, nvls_tree };
// Protocols by the index of topo::CollectiveModel's arrays.
enum class NcclProtocol : std::uint8_t { simple = 0, ll = 1, ll128 = 2 };

struct NcclCollectiveTime {
  double latency_s = 0.0;      // the size's latency (a Simple ring's plateau included)
  double bytes_per_s = 0.0;    // algorithm bandwidth, bytes / (time - latency) (a tree's size correction included)
  double seconds(Bytes bytes) const { return latency_s + static_cast<double>(bytes) / bytes_per_s; }
};

// The time NCCL's model gives a collective of `kind` (all-reduce, all-gather, reduce-scatter) of
// `bytes` (the whole buffer: an all-gather's output, a reduce-scatter's input) over `ranks` members,
// ranks / nodes on each of `nodes` >= 2 nodes (at least 2 on each), by `algorithm` and `protocol`;
// nullopt where NCCL would not run that (a tree or NVLS tree but for an all-reduce, an NVLS tree
// without NVLS or of fewer than 2 channels, an all-to-all; LL128 where the model has it off between
// nodes). Needs tuning.collective_model.
std::optional<NcclCollectiveTime> nccl_collective_time(const topo::NetworkTuning& tuning, sched::CollectiveKind kind,
                                                       NcclAlgorithm algorithm, NcclProtocol protocol, int ranks,
                                                       int nodes, Bytes bytes);

// What the algorithm and protocol NCCL's model chose take, by the topology's measured correction of
// the model (topo::CollectiveModel::extra_network_hop_s, extra_tree_latency_s and the mid-size
// slowdown): `model` with its network hops' extra latency (and a tree's) added and, but for LL, its
// bandwidth divided by the slowdown at `bytes`; `model` as it is where the topology has no correction.
NcclCollectiveTime nccl_measured_time(const topo::CollectiveModel& m, sched::CollectiveKind kind,
                                      NcclAlgorithm algorithm, NcclProtocol protocol, int nodes, Bytes bytes,
                                      NcclCollectiveTime model);

// The share of its bandwidth NCCL's tree all-reduce reaches at this size with `protocol`
// (treeCorrectionFactor, tuning.tree_size_factors: indexed by floor(log2(bytes / 64)) as tuning.cc's
// log2i(nBytes >> 6)); 1 outside the table or without it.
double tree_size_factor(const topo::NetworkTuning& tuning, NcclProtocol protocol, Bytes bytes);

}  // namespace fusesim::sim
