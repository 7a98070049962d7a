// NCCL's cost model of an all-reduce across nodes (NVIDIA/nccl src/graph/tuning.cc: ncclTopoTuneModel
// computes one latency and one bandwidth per algorithm and protocol, ncclTopoGetAlgoTime answers a
// size with latency + bytes / bandwidth, and NCCL runs the least), at the constants the topology
// gives (topo::AllReduceModel). The engine chooses and paces such an all-reduce by it
// (docs/engine.md, "NCCL's all-reduce model").
#pragma once

#include <optional>

#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/units.hpp"

namespace fusesim::sim {

enum class NcclAlgorithm : std::uint8_t { ring, tree, nvls_tree };
// Protocols by the index of topo::AllReduceModel's arrays.
enum class NcclProtocol : std::uint8_t { simple = 0, ll = 1, ll128 = 2 };

struct NcclAllReduceTime {
  double latency_s = 0.0;      // the size's latency (a Simple ring's plateau included)
  double bytes_per_s = 0.0;    // algorithm bandwidth, bytes / (time - latency) (a tree's size correction included)
  double seconds(Bytes bytes) const { return latency_s + static_cast<double>(bytes) / bytes_per_s; }
};

// The time NCCL's model gives an all-reduce of `bytes` over `ranks` members, ranks / nodes on each of
// `nodes` >= 2 nodes (at least 2 on each), by `algorithm` and `protocol`; nullopt where NCCL would not
// run that pair (an NVLS tree without NVLS, or of fewer than 2 channels). Needs
// tuning.all_reduce_model.
std::optional<NcclAllReduceTime> nccl_all_reduce_time(const topo::NetworkTuning& tuning, NcclAlgorithm algorithm,
                                                      NcclProtocol protocol, int ranks, int nodes, Bytes bytes);

}  // namespace fusesim::sim
