#pragma once
// A cluster: accelerators, switches and NICs joined by directed links, read from a topology file
// (schema: docs/topology.md). Ranks are the accelerators numbered node-major: rank = node *
// devices_per_node + local index. Routes between ranks come from the link graph (shortest path by
// PCIe links, latency, hop count, then bottleneck; ties broken by vertex id, so they are
// deterministic; src/topo/route.cpp).
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fusesim/util/json_reader.hpp"
#include "fusesim/util/units.hpp"

namespace fusesim::topo {

enum class Dtype { fp32, tf32, bf16, fp16, fp8 };
std::string to_string(Dtype d);
Dtype parse_dtype(const JsonValue& v);     // "bf16", ...; InputError otherwise
int bytes_per_element(Dtype d);            // fp32/tf32 4, bf16/fp16 2, fp8 1

// What a kernel achieves of the roofline when it runs alone (fractions in (0, 1]).
struct KernelEfficiency {
  SourcedValue gemm;          // of peak FLOP/s for large, well-shaped GEMMs
  SourcedValue attention;     // of peak FLOP/s for FlashAttention forward+backward at long sequence
  SourcedValue hbm;           // of HBM bandwidth for streaming (element-wise, norm, copies)
};

// How SM-based communication kernels and copy engines compete with compute (the default model; a
// calibration profile replaces it, see model/kernel_cost.hpp).
struct ContentionParams {
  SourcedValue default_comm_sms;        // SMs an SM-based collective / P2P kernel holds (NCCL: one per channel)
  SourcedValue comm_hbm_traffic_factor; // HBM bytes a transfer moves per payload byte on each end (read or write)
  // SMs of a collective whose ranks are all on one node ("node_collective_sms"; default_comm_sms when
  // absent): NCCL gives rings inside an NVSwitch node more channels than rings that leave it.
  std::optional<SourcedValue> node_collective_sms = std::nullopt;
  int collective_sms(bool one_node) const {
    const SourcedValue& v = one_node && node_collective_sms ? *node_collective_sms : default_comm_sms;
    return static_cast<int>(std::lround(v.value));
  }
};

// A device that runs the kernels of another, profiled device model: the same die and SMs, with another
// memory, power limit or interconnect (an H800 as an H100 SXM5, an A100 40 GB as the 80 GB one, Meta's
// 500 W HBM2e H100). A calibration profile measured on `device_model` then prices this device's
// kernels, each kind at its rate fraction: this device's rate over the profiled one's, in [0.05, 2]
// ("kernels_as"; docs/topology.md). A profile measured on this device itself takes precedence.
struct KernelsAs {
  std::string device_model;
  SourcedValue gemm;         // GEMMs (tensor-core math: the SM clock the power limit allows)
  SourcedValue attention;    // attention kernels
  SourcedValue elementwise;  // element-wise and other memory-bound kernels (HBM bandwidth)
};

// The most a cross-stream hand-off may take, from a topology or a measured profile: 1 ms is far above
// any event wait a GPU runtime has (about 1 us), so more is a unit error, not a measurement.
inline constexpr double kMaxStreamWaitS = 1e-3;

struct DeviceModel {
  std::string name;                       // "h100-sxm"
  std::string vendor;                     // "nvidia", "huawei"
  std::map<Dtype, SourcedValue> peak_flops_per_s;  // dense, no sparsity
  SourcedValue hbm_bytes;
  SourcedValue hbm_bandwidth_bytes_per_s;
  int sm_count = 0;                       // streaming multiprocessors (or AI cores)
  std::string sm_count_source;
  int copy_engines = 0;                   // copy engines usable for peer transfers
  int gemm_tile_m = 128;                  // output tile of a typical GEMM kernel, for wave quantization
  int gemm_tile_n = 256;
  // Other tiles a GEMM library may pick for shapes that fill the SMs badly with the main tile, tried
  // after it; and the largest split of K across CTAs (1: no split-K). cuBLAS and CUTLASS choose among
  // such kernels per shape; model/roofline.cpp takes the fastest (docs/kernel-model.md).
  std::vector<std::pair<int, int>> gemm_tile_alternatives;
  int gemm_max_split_k = 1;
  KernelEfficiency efficiency;
  // Fixed time every kernel of the roofline model takes on top of its roofline time (launch,
  // prologue, epilogue): what makes t chunk GEMMs and t - 1 adds cost more than one GEMM. Optional
  // ("kernel_launch_s"; 0 when absent). Calibration profiles carry their own fitted floors instead.
  SourcedValue kernel_launch_s;
  // GPU-side delay between a task's end and the start of a task on another stream of the same device
  // that waits for it (cudaEventRecord + cudaStreamWaitEvent, docs/engine.md section 3). Optional
  // ("stream_wait_s"; 0 when absent). Charged per cross-stream edge, so that a schedule that splits
  // one exchange into t steps pays the t hand-offs between its compute and communication streams.
  SourcedValue stream_wait_s;  // at most kMaxStreamWaitS
  ContentionParams contention;
  std::optional<KernelsAs> kernels_as;    // absent: profiles of this device model alone price it
  bool estimate = false;                  // true when the figures are estimates (no official datasheet)

  double peak(Dtype d) const;             // InputError-free: throws std::out_of_range if absent
};

enum class VertexKind { accelerator, switch_, nic };
enum class SwitchKind { nvswitch, pcie, infiniband, ethernet, hccs };
enum class LinkKind { nvlink, hccs, xgmi, pcie, network };
// The links of a node's scale-up domain (NVLink, Huawei HCCS, AMD xGMI / Infinity Fabric).
inline bool is_scale_up(LinkKind k) { return k == LinkKind::nvlink || k == LinkKind::hccs || k == LinkKind::xgmi; }
std::string to_string(VertexKind k);
std::string to_string(SwitchKind k);
std::string to_string(LinkKind k);

using VertexId = std::int32_t;
using LinkId = std::int32_t;

struct Vertex {
  std::string name;         // "node0/gpu3", "node0/nvswitch", "node1/nic5", "leaf2", "spine0"
  VertexKind kind = VertexKind::accelerator;
  SwitchKind switch_kind = SwitchKind::nvswitch;  // meaningful for switches
  int node = -1;            // node index, -1 for fabric switches outside any node
  int rank = -1;            // accelerators only
};

// One direction of a physical connection. Two Link entries (a->b, b->a) make a full-duplex cable.
struct Link {
  std::string name;                     // "node0/gpu3->node0/nvswitch"
  VertexId from = 0;
  VertexId to = 0;
  LinkKind kind = LinkKind::nvlink;
  BytesPerSecond line_rate_bytes_per_s = 0.0;  // this direction, datasheet
  double efficiency = 1.0;                      // fraction of line rate bulk transfers reach on this link type
  BytesPerSecond bandwidth_bytes_per_s = 0.0;  // line rate x efficiency: the capacity transfers share
  TimePs latency_ps = 0;                        // propagation + switching for this hop
};

struct Route {
  std::vector<LinkId> links;  // in order from source to destination
  TimePs latency_ps = 0;      // sum of the links' latencies
};

// Fixed costs of communication, NCCL-tuning style: computed once per cluster, then each transfer
// takes latency + wire_bytes / rate, where latency = route latency + the step latency of its engine
// (+ the base latency once per collective) and wire_bytes = payload / engine efficiency.
// Another protocol (NCCL's LL, LL128) or algorithm (NVLS) of SM-kernel collectives, beside the Simple
// ring protocol that the keys of CommParams describe. A collective takes the one whose time alone,
//   base_latency + steps x (route latency + step_latency) + bytes x bus factor / (link bandwidth x efficiency),
// is least for its size, as NCCL's tuning model picks (src/graph/tuning.cc).
struct CommProtocol {
  std::string name;              // "ll", "ll128", "nvls"
  SourcedValue base_latency_s;
  SourcedValue step_latency_s;
  SourcedValue efficiency;       // payload / wire bytes; NVLS may exceed 1 (the switch reduces)
};

// NCCL's P2P reaches less of a NIC than its ring collectives, and pays the Simple protocol's network
// hop where a ring step's route carries the LL one.
struct P2pNetwork {
  SourcedValue efficiency;       // payload / wire bytes, in place of the engine's
  SourcedValue added_latency_s;  // on top of the route's latency and the engine's step latency
};

// NCCL's cost model of a collective across nodes of g >= 2 members each (src/graph/tuning.cc,
// ncclTopoTuneModel and ncclTopoGetAlgoTime), with NCCL's constants: one latency and one algorithm
// bandwidth per algorithm (ring, tree, NVLS tree) and protocol, the least time taken (docs/engine.md,
// "NCCL's collective model"). Arrays by protocol in the order simple, ll, ll128.
struct CollectiveModel {
  // The collectives it prices ("collectives": a subset of all_reduce, all_gather, reduce_scatter);
  // the others take the simulated ring and tree.
  bool all_reduce = false, all_gather = false, reduce_scatter = false;
  int channels = 0;                   // NCCL's ring and tree graphs: one channel per NIC of a node
  double channel_bytes_per_s = 0.0;   // each channel's bandwidth inside a node (the graphs' bwIntra)
  // Each channel's bandwidth between nodes (the graphs' bwInter): NCCL prices rings and trees of more
  // than two nodes, and every NVLS tree's network side, by it ("channel_bandwidth_inter_bytes_per_s", a
  // sourced value, its source required in the file; absent: channel_bytes_per_s, as NCCL's graphs have
  // where the search keeps one speed).
  double channel_inter_bytes_per_s = 0.0;
  std::array<double, 3> ring_base_s{}, tree_base_s{};  // baseLat
  std::array<double, 3> ring_node_hop_s{}, tree_node_hop_s{};  // hwLat[NVLINK]: a hop inside a node
  double nvls_tree_node_s = 0.0;      // hwLat[NVLINK][NVLS_TREE]: the switch's reduction, once
  double nvls_tree_network_hop_s = 0.0;  // hwLat[NET][NVLS_TREE]
  double nvls_efficiency = 0.0;       // nvlsEfficiency of the device's generation; 0: no NVLS tree
  double network_overhead_s = 0.0;    // getNetOverhead: the least a ring step inside a node costs (x3 Simple)
  double ring_simple_plateau = 1.0;   // a Simple ring's latency factor across nodes once chunks are full
  // Whether LL128 is among the protocols chosen from for a ring and for a tree ("ll128_between_nodes":
  // both, default true: NCCL enables it on Hopper NICs within PXN of their GPU; or
  // "ll128_between_nodes_algorithms": the algorithms that may). Measured curves across nodes can say
  // otherwise: the Hopper files let trees alone run it (docs/calibration.md, "Collectives").
  bool ll128_ring_between_nodes = true;
  bool ll128_tree_between_nodes = true;
  // Optional ("measured_correction"): how long the algorithm and protocol NCCL's model chose take on
  // measured curves across nodes, where its model says less (docs/calibration.md, "Collectives"). The
  // choice stays NCCL's: only the time charged changes. Each network hop of the chosen algorithm (a
  // ring's 2 (nodes - 1) or nodes - 1, a tree's 2 log2 nodes) costs extra_network_hop_s more, and the
  // bytes / bandwidth term of Simple and LL128 (not LL's, the hosts' cap) is slower by a factor
  // 1 + peak x exp(-(log2 bytes - center)^2 / (2 width^2)): mid-size collectives fall short of the
  // network bandwidth NCCL's model gives, as its treeCorrectionFactor says of trees alone. A tree (not
  // an NVLS tree) also costs extra_tree_latency_s more, once: on A100 curves of 2 to 16 nodes a tree's
  // small all-reduce takes 11-18 us more than NCCL's model, a gap that barely grows with the nodes,
  // where rings across nodes (their steps inside a node priced at NCCL's network overhead) come out
  // right. The mid-size keys are optional together (no slowdown), as is the tree's. Its source is
  // required in the file (and not kept). Absent: zeros, NCCL's model as it is.
  double extra_network_hop_s = 0.0;
  double extra_tree_latency_s = 0.0;
  double mid_size_slowdown_peak = 0.0;
  double mid_size_center_log2_bytes = 0.0;
  double mid_size_width_log2 = 1.0;
  // Bus bandwidth refinements: ring LL, ring LL128, tree, tree LL, tree LL128 (busBw x factor).
  double ring_ll_factor = 1.0, ring_ll128_factor = 1.0, tree_factor = 1.0, tree_ll_factor = 1.0,
         tree_ll128_factor = 1.0;
  // Per-channel bandwidth caps on two nodes ([0]) and more ([1]).
  std::array<double, 2> ring_ll128_cap{}, tree_cap{}, tree_ll128_cap{}, nvls_tree_cap{};
  std::string source;
};

// NCCL's tuning model between nodes (src/graph/tuning.cc), where the simulated route alone would say
// less (docs/engine.md, "Protocols"): per protocol, the least a hop between nodes costs (hwLat[NET],
// route and the protocol's step latency together) on a ring and on a tree, and LL's bus bandwidth
// across nodes, which the hosts' CPU bounds (llMaxBws, by CPU vendor and node count).
struct NetworkTuning {
  SourcedValue ring_hop_simple_s, ring_hop_ll_s, ring_hop_ll128_s;
  SourcedValue tree_hop_simple_s, tree_hop_ll_s, tree_hop_ll128_s;
  SourcedValue ll_max_bus_bandwidth_two_nodes_bytes_per_s, ll_max_bus_bandwidth_more_nodes_bytes_per_s;
  // Optional ("tree_size_factors": {"simple", "ll", "ll128": 23 numbers in (0, 1], "source"}): the
  // share of its bandwidth a tree all-reduce reaches, by floor(log2(bytes / 64)) from 0 to 22 (NCCL's
  // treeCorrectionFactor: "trees are not perfectly sticking to the model for medium sizes"); 1
  // outside that range. Empty: none.
  std::array<std::vector<double>, 3> tree_size_factors;  // simple, ll, ll128
  std::string tree_size_factors_source;
  // Optional ("collective_model"): the collectives it lists, across nodes, priced as NCCL prices them.
  // Absent (or a collective it does not list): the simulated ring and tree with the hops and caps above.
  std::optional<CollectiveModel> collective_model;
};

struct CommParams {
  SourcedValue collective_base_latency_s;   // once per collective (kernel launch, setup)
  SourcedValue sm_step_latency_s;           // per step of an SM-kernel collective or P2P
  SourcedValue copy_engine_step_latency_s;  // per copy-engine transfer (launch and completion signal)
  SourcedValue sm_kernel_efficiency;        // payload / wire bytes of SM-kernel protocols, on top of link efficiency
  SourcedValue copy_engine_efficiency;      // same for copy-engine transfers
  // Optional ("p2p_network"): how a point-to-point transfer (send/recv, an all-to-all's pairs) between
  // two nodes differs from a ring step, whatever its engine. Absent: it is priced as a ring step.
  std::optional<P2pNetwork> p2p_network;
  // Optional ("tree_all_reduce", default true): an all-reduce across nodes runs as NCCL's tree where
  // NCCL's model prices the tree below the ring (docs/engine.md, section 6); false runs every
  // all-reduce as rings, as NCCL_ALGO=Ring does.
  bool tree_all_reduce = true;
  // Optional ("protocols": {"ll": ..., "ll128": ...}, "nvls": ...): ring collectives of SM kernels
  // choose among Simple and these by size; NVLS serves all-reduces inside one NVSwitch node.
  std::vector<CommProtocol> protocols;
  std::optional<CommProtocol> nvls;
  // Optional ("network_tuning"): collectives across nodes as NCCL's tuning model prices them. Absent:
  // a hop between nodes costs its route's latency and the protocol's step, and LL moves its share of
  // every rail's NIC.
  std::optional<NetworkTuning> network_tuning;
};

class Cluster {
 public:
  std::string name;
  std::string description;
  std::map<std::string, DeviceModel> device_models;
  std::vector<Vertex> vertices;
  std::vector<Link> links;
  std::vector<VertexId> rank_vertex;   // rank -> vertex
  std::vector<std::string> rank_model; // rank -> device model name
  int num_nodes = 0;
  int devices_per_node = 0;
  // The devices of a node are joined pairwise (scale_up kind "full_mesh": HCCS, xGMI), not through a
  // switch: a ring inside a node then uses one of each device's links, and collectives run several.
  bool full_mesh_scale_up = false;
  CommParams comm;

  int num_ranks() const { return static_cast<int>(rank_vertex.size()); }
  int node_of(int rank) const { return vertices.at(rank_vertex.at(rank)).node; }
  // Whether every rank of `ranks` is on one node (true for none or one).
  bool on_one_node(const std::vector<int>& ranks) const {
    for (int r : ranks)
      if (node_of(r) != node_of(ranks.front())) return false;
    return true;
  }
  const DeviceModel& device(int rank) const { return device_models.at(rank_model.at(rank)); }
  // Shortest route from one rank to another (src != dst). Deterministic. Not cached: the simulator
  // keeps its own table.
  Route route(int src_rank, int dst_rank) const;
  // The route of each (source, destination) pair, as route() gives it; for many pairs between nodes
  // faster than one route() each (A* with the fabric's bounds: src/topo/route.cpp).
  std::vector<Route> routes(const std::vector<std::pair<int, int>>& pairs) const;
  // Every route from one source, in one graph search (index = destination rank; empty for src).
  std::vector<Route> routes_from(int src_rank) const;
  // The narrowest bandwidth (line rate x efficiency) of the route's links; infinity for no link.
  double bottleneck_bytes_per_s(const Route& route) const;
  // Called by the loader after vertices and links are filled: builds the graph used by route().
  void finalize();

 private:
  struct Graph;
  std::shared_ptr<const Graph> graph_;
};

// Reads a topology file; InputError naming the file and JSON path on any problem.
Cluster load_cluster(const std::string& path);
Cluster parse_cluster(const JsonDocument& doc);

// A topology argument is a path, or the name of a shipped cluster ("dgx-h100" reads the copy of
// topologies/dgx-h100.json compiled into the binary, see util/embedded.hpp).
Cluster load_cluster_by_name_or_path(const std::string& name_or_path);

}  // namespace fusesim::topo
