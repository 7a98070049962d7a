#include "fusesim/sim/nccl_collective.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace fusesim::sim {

namespace {

int log2_floor(std::uint64_t x) { return x == 0 ? -1 : static_cast<int>(std::bit_width(x)) - 1; }

// The steps of a ring that cross the network: 2 (nodes - 1) of an all-reduce's, nodes - 1 of the others'.
int ring_network_steps(sched::CollectiveKind kind, int nodes) {
  return (kind == sched::CollectiveKind::all_reduce ? 2 : 1) * (nodes - 1);
}

// Whether the topology lets `algorithm` run LL128 between nodes (an NVLS tree runs Simple alone).
bool ll128_between_nodes(const topo::CollectiveModel& m, NcclAlgorithm algorithm) {
  switch (algorithm) {
    case NcclAlgorithm::ring:
      return m.ll128_ring_between_nodes;
    case NcclAlgorithm::tree:
      return m.ll128_tree_between_nodes;
    case NcclAlgorithm::nvls_tree:
      break;
  }
  return false;
}

}  // namespace

double tree_size_factor(const topo::NetworkTuning& tuning, NcclProtocol protocol, Bytes bytes) {
  const std::vector<double>& factors = tuning.tree_size_factors[static_cast<std::size_t>(protocol)];
  const int index = log2_floor(static_cast<std::uint64_t>(bytes) >> 6);
  return index >= 0 && static_cast<std::size_t>(index) < factors.size() ? factors[static_cast<std::size_t>(index)]
                                                                        : 1.0;
}

NcclCollectiveTime nccl_measured_time(const topo::CollectiveModel& m, sched::CollectiveKind kind,
                                      NcclAlgorithm algorithm, NcclProtocol protocol, int nodes, Bytes bytes,
                                      NcclCollectiveTime model) {
  // The same hops the model's latency counts: a ring's steps across the network, a tree's (and an NVLS
  // tree's) 2 log2 nodes, up and down.
  const int network_hops = algorithm == NcclAlgorithm::ring ? ring_network_steps(kind, nodes)
                                                             : 2 * log2_floor(static_cast<std::uint64_t>(nodes));
  model.latency_s += network_hops * m.extra_network_hop_s;
  if (algorithm == NcclAlgorithm::tree) model.latency_s += m.extra_tree_latency_s;
  // The slowdown is the network's bandwidth falling short at mid sizes, where Simple's and LL128's
  // chunks stream through the NICs; LL's bandwidth in NCCL's model is the hosts' cap (llMaxBw), not the
  // network's, and is not slowed (docs/calibration.md, "Collectives": the fitted curves say so too).
  if (m.mid_size_slowdown_peak > 0.0 && bytes > 0 && protocol != NcclProtocol::ll) {
    const double octaves =
        (std::log2(static_cast<double>(bytes)) - m.mid_size_center_log2_bytes) / m.mid_size_width_log2;
    model.bytes_per_s /= 1.0 + m.mid_size_slowdown_peak * std::exp(-0.5 * octaves * octaves);
  }
  return model;
}

std::optional<NcclCollectiveTime> nccl_collective_time(const topo::NetworkTuning& tuning, sched::CollectiveKind kind,
                                                       NcclAlgorithm algorithm, NcclProtocol protocol, int ranks,
                                                       int nodes, Bytes bytes) {
  if (!tuning.collective_model || nodes < 2 || ranks % nodes != 0 || ranks / nodes < 2) return std::nullopt;
  if (kind == sched::CollectiveKind::all_to_all) return std::nullopt;  // NCCL prices no all-to-all
  const bool all_reduce = kind == sched::CollectiveKind::all_reduce;
  if (protocol == NcclProtocol::ll128 && !ll128_between_nodes(*tuning.collective_model, algorithm)) return std::nullopt;
  // Trees and NVLS trees reduce a whole buffer: all-reduce only (NVLS all-gather and reduce-scatter
  // across nodes need CollNet, which these topologies do not have).
  if (!all_reduce && algorithm != NcclAlgorithm::ring) return std::nullopt;
  const topo::CollectiveModel& m = *tuning.collective_model;
  const auto p = static_cast<std::size_t>(protocol);
  const int per_node = ranks / nodes;
  // One channel per NIC a member owns: with rails, each GPU its own NIC.
  const int channels = std::min(m.channels, per_node);
  const std::size_t count = nodes <= 2 ? 0 : 1;  // tuning.cc's node-count column: two nodes, more
  const int steps = all_reduce ? 2 * (ranks - 1) : ranks - 1;
  const double ll_cap = nodes <= 2 ? tuning.ll_max_bus_bandwidth_two_nodes_bytes_per_s.value
                                   : tuning.ll_max_bus_bandwidth_more_nodes_bytes_per_s.value;
  // tuning.cc's bw: the graph's bwIntra on two nodes, its bwInter on more.
  double channel_bw = nodes <= 2 ? m.channel_bytes_per_s : m.channel_inter_bytes_per_s;
  if (algorithm == NcclAlgorithm::nvls_tree) {
    if (protocol != NcclProtocol::simple || m.nvls_efficiency <= 0.0 || channels < 2) return std::nullopt;
    // The switch reduces inside each node (two operations pipelined, one channel kept back), the
    // channels' NICs between nodes (on two nodes each node's half once: twice the rate).
    const double intra = m.channel_bytes_per_s * m.nvls_efficiency * (channels - 1) / channels * 2.0;
    const double inter = m.channel_inter_bytes_per_s * (nodes <= 2 ? 2.0 : 1.0);
    channel_bw = std::min({intra, inter, m.nvls_tree_cap[count]});
  }
  double bus = channels * channel_bw;
  if (algorithm == NcclAlgorithm::ring && protocol == NcclProtocol::ll) bus = std::min(ll_cap, bus * m.ring_ll_factor);
  if (algorithm == NcclAlgorithm::ring && protocol == NcclProtocol::ll128)
    bus = std::min(bus * m.ring_ll128_factor, channels * m.ring_ll128_cap[count]);
  if (algorithm == NcclAlgorithm::tree) {
    bus = std::min(bus * m.tree_factor, channels * m.tree_cap[count]);
    if (protocol == NcclProtocol::ll) bus = std::min(bus * m.tree_ll_factor, ll_cap);
    if (protocol == NcclProtocol::ll128) bus = std::min(bus * m.tree_ll128_factor, channels * m.tree_ll128_cap[count]);
  }
  // Bus to algorithm bandwidth: a ring's (and the NVLS tree's) ranks / steps, a tree's half.
  double algorithm_bw = algorithm == NcclAlgorithm::tree ? bus * 0.5 : bus * ranks / steps;
  double latency = 0.0;
  const int log_nodes = log2_floor(static_cast<std::uint64_t>(nodes));
  // The topology's network hop (hwLat[NET]) of this protocol among a ring's or a tree's three.
  const auto network_hop = [protocol](const SourcedValue& simple, const SourcedValue& ll, const SourcedValue& ll128) {
    return (protocol == NcclProtocol::simple ? simple : protocol == NcclProtocol::ll ? ll : ll128).value;
  };
  switch (algorithm) {
    case NcclAlgorithm::ring: {
      // Every step inside a node costs at least the host's network overhead (three posts with
      // Simple); 2 (nodes - 1) of an all-reduce's steps cross the network, nodes - 1 of the others'.
      const double overhead = m.network_overhead_s * (protocol == NcclProtocol::simple ? 3.0 : 1.0);
      const double intra = std::max(m.ring_node_hop_s[p], overhead);
      const double hop = network_hop(tuning.ring_hop_simple_s, tuning.ring_hop_ll_s, tuning.ring_hop_ll128_s);
      const int network_steps = ring_network_steps(kind, nodes);
      latency = m.ring_base_s[p] + (steps - network_steps) * intra + network_steps * hop;
      // Once each rank's share of a channel (the communicator's rings twice the graph's) is 64 B or more.
      if (all_reduce && protocol == NcclProtocol::simple &&
          static_cast<double>(bytes) / (2.0 * channels * ranks) >= 64.0)
        latency *= m.ring_simple_plateau;
      break;
    }
    case NcclAlgorithm::tree: {
      const double hop = network_hop(tuning.tree_hop_simple_s, tuning.tree_hop_ll_s, tuning.tree_hop_ll128_s);
      latency = m.tree_base_s[p] + 2.0 * ((per_node - 1) * m.tree_node_hop_s[p] + log_nodes * hop);
      algorithm_bw *= tree_size_factor(tuning, protocol, bytes);
      break;
    }
    case NcclAlgorithm::nvls_tree:
      latency = m.nvls_tree_node_s + 2.0 * log_nodes * m.nvls_tree_network_hop_s;
      break;
  }
  return NcclCollectiveTime{latency, algorithm_bw};
}

}  // namespace fusesim::sim
