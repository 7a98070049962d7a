// Topology files (schema: docs/topology.md). A file describes one node type and how many of them a
// fabric joins; the loader expands that into vertices and directed links. Vertex ids put the
// accelerators first, in rank order (vertex id == rank), so that the tie-break of routing by vertex
// id prefers lower ranks, then the per-node switches and NICs, then the fabric switches.
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"

namespace fusesim::topo {

namespace {

// Bounds: anything outside is a typo or a unit mistake (bits for bytes, ms for s), not hardware.
constexpr double kMaxBandwidthBytesPerS = 1e15;   // 1 PB/s: above any single link or HBM today
constexpr double kMaxFlopsPerS = 1e18;            // 1 EFLOP/s for one device
constexpr double kMaxHbmBytes = 1e14;             // 100 TB on one device
constexpr double kMaxLatencyS = 1e-2;             // 10 ms for one hop or one software step
constexpr std::size_t kTreeSizeFactors = 23;      // floor(log2(bytes / 64)) = 0 .. 22, as NCCL applies them
constexpr double kMaxHbmTrafficFactor = 16.0;
constexpr double kMaxKernelLaunchS = 1e-3;        // 1 ms: far above any launch overhead
// A device that runs another's kernels at a twentieth of its rate, or more than twice it, is not that
// device with another memory or power limit: give it a profile of its own.
constexpr double kMinKernelsAsFraction = 0.05;
constexpr double kMaxKernelsAsFraction = 2.0;
constexpr std::int64_t kMaxDevicesPerNode = 1024;
constexpr std::int64_t kMaxNodes = 65536;
// Twice today's largest clusters. A cluster model costs 3-5 KB per rank (vertices, links and their
// names, the routing graph: a 65,536 x 16 fat tree took 2.9 GB, a rail-optimized one 5.2 GB, for an
// 8-rank simulate); a 6 KB file must not ask for gigabytes.
constexpr std::int64_t kMaxRanks = std::int64_t{1} << 18;
constexpr double kClusterBytesPerRank = 5000.0;
constexpr std::int64_t kMaxFullMeshDevices = 64;  // n(n-1) links: beyond this no real machine is a full mesh
constexpr std::int64_t kMaxSpines = 4096;

// A sourced figure that must be strictly positive: zero bandwidth or zero efficiency is never meant.
SourcedValue positive_sourced(const JsonObject& obj, std::string_view key, double max) {
  JsonValue v = obj.at(key);
  SourcedValue s = v.as_sourced(0.0, max);
  if (!(s.value > 0.0)) v.as_object().at("value").fail(fmt::format("must be greater than 0 (at most {})", max));
  return s;
}

// Bandwidths are strictly below the bound: 1e15 B/s is already a unit mistake.
SourcedValue bandwidth_sourced(const JsonObject& obj, std::string_view key) {
  JsonValue v = obj.at(key);
  SourcedValue s = positive_sourced(obj, key, kMaxBandwidthBytesPerS);
  if (s.value >= kMaxBandwidthBytesPerS)
    v.as_object().at("value").fail(fmt::format("must be below {} B/s (a unit mistake?)", kMaxBandwidthBytesPerS));
  return s;
}

// A sourced count (SMs, copy engines): a whole number within [min, max].
SourcedValue integral_sourced(const JsonObject& obj, std::string_view key, double min, double max) {
  JsonValue v = obj.at(key);
  SourcedValue s = v.as_sourced(min, max);
  if (s.value != std::floor(s.value)) v.as_object().at("value").fail("expected a whole number");
  return s;
}

struct LinkSpec {
  SourcedValue line_rate_bytes_per_s;
  SourcedValue efficiency;
  SourcedValue latency_s;
};

LinkSpec read_link(const JsonObject& o) {
  LinkSpec spec;
  spec.line_rate_bytes_per_s = bandwidth_sourced(o, "line_rate_bytes_per_s");
  spec.efficiency = positive_sourced(o, "efficiency", 1.0);
  spec.latency_s = o.sourced("latency_s", 0.0, kMaxLatencyS);
  o.finish();
  return spec;
}

DeviceModel read_device_model(const std::string& name, const JsonObject& o) {
  DeviceModel m;
  m.name = name;
  m.vendor = o.string("vendor");
  m.estimate = o.boolean_or("estimate", false);

  JsonObject peaks = o.object("peak_flops_per_s");
  for (Dtype d : {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8})
    if (peaks.has(to_string(d))) m.peak_flops_per_s[d] = positive_sourced(peaks, to_string(d), kMaxFlopsPerS);
  peaks.finish();
  if (m.peak_flops_per_s.empty()) peaks.fail("needs the peak of at least one data type (fp32, tf32, bf16, fp16, fp8)");

  m.hbm_bytes = positive_sourced(o, "hbm_bytes", kMaxHbmBytes);
  m.hbm_bandwidth_bytes_per_s = bandwidth_sourced(o, "hbm_bandwidth_bytes_per_s");
  const SourcedValue sms = integral_sourced(o, "sm_count", 1, 100000);
  m.sm_count = static_cast<int>(sms.value);
  m.sm_count_source = sms.source;
  m.copy_engines = static_cast<int>(integral_sourced(o, "copy_engines", 0, 1024).value);

  if (auto tile = o.find("gemm_tile")) {
    JsonObject t = tile->as_object();
    m.gemm_tile_m = static_cast<int>(t.integer("m", 1, 4096));
    m.gemm_tile_n = static_cast<int>(t.integer("n", 1, 4096));
    if (auto alternatives = t.find("alternatives")) {
      JsonArray list = alternatives->as_array();
      list.require_size(0, 16);
      for (std::size_t i = 0; i < list.size(); ++i) {
        JsonObject a = list.at(i).as_object();
        m.gemm_tile_alternatives.emplace_back(static_cast<int>(a.integer("m", 1, 4096)),
                                              static_cast<int>(a.integer("n", 1, 4096)));
        a.finish();
      }
    }
    m.gemm_max_split_k = static_cast<int>(t.integer_or("max_split_k", 1, 64, 1));
    t.finish();
  }

  JsonObject eff = o.object("efficiency");
  m.efficiency.gemm = positive_sourced(eff, "gemm", 1.0);
  m.efficiency.attention = positive_sourced(eff, "attention", 1.0);
  m.efficiency.hbm = positive_sourced(eff, "hbm", 1.0);
  eff.finish();

  if (o.has("kernel_launch_s")) m.kernel_launch_s = o.sourced("kernel_launch_s", 0.0, kMaxKernelLaunchS);
  if (o.has("stream_wait_s")) m.stream_wait_s = o.sourced("stream_wait_s", 0.0, kMaxStreamWaitS);

  JsonObject cont = o.object("contention");
  m.contention.default_comm_sms = integral_sourced(cont, "default_comm_sms", 0, m.sm_count);
  if (cont.has("node_collective_sms"))
    m.contention.node_collective_sms = integral_sourced(cont, "node_collective_sms", 0, m.sm_count);
  m.contention.comm_hbm_traffic_factor = cont.sourced("comm_hbm_traffic_factor", 0.0, kMaxHbmTrafficFactor);
  cont.finish();

  if (auto as = o.find("kernels_as")) {
    JsonObject k = as->as_object();
    KernelsAs ka;
    ka.device_model = k.string("device_model");
    if (ka.device_model == name) k.at("device_model").fail("names the device model itself");
    JsonObject rates = k.object("rate_fraction");
    ka.gemm = rates.sourced("gemm", kMinKernelsAsFraction, kMaxKernelsAsFraction);
    ka.attention = rates.sourced("attention", kMinKernelsAsFraction, kMaxKernelsAsFraction);
    ka.elementwise = rates.sourced("elementwise", kMinKernelsAsFraction, kMaxKernelsAsFraction);
    rates.finish();
    k.finish();
    m.kernels_as = std::move(ka);
  }

  o.finish();
  return m;
}

// NCCL's collective model (topo::CollectiveModel): the collectives it prices and its constants, one source
// for the table.
CollectiveModel read_collective_model(const JsonObject& o) {
  CollectiveModel m;
  const JsonArray kinds = o.array("collectives");
  kinds.require_size(1, 3);
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    const std::string kind = kinds.at(i).as_string();
    if (kind != "all_reduce" && kind != "all_gather" && kind != "reduce_scatter")
      kinds.at(i).fail("unknown collective '" + kind + "' (all_reduce, all_gather, reduce_scatter)");
    bool& on = kind == "all_reduce" ? m.all_reduce : kind == "all_gather" ? m.all_gather : m.reduce_scatter;
    if (on) kinds.at(i).fail("'" + kind + "' listed twice");
    on = true;
  }
  m.channels = static_cast<int>(o.integer("channels", 1, 64));
  m.channel_bytes_per_s = o.number("channel_bandwidth_bytes_per_s", 1e6, 1e14);
  m.channel_inter_bytes_per_s = o.has("channel_bandwidth_inter_bytes_per_s")
                                    ? o.sourced("channel_bandwidth_inter_bytes_per_s", 1e6, 1e14).value
                                    : m.channel_bytes_per_s;
  const auto per_protocol = [](const JsonObject& p, std::array<double, 3>& out) {
    const char* names[3] = {"simple", "ll", "ll128"};
    for (std::size_t k = 0; k < 3; ++k) out[k] = p.number(names[k], 0.0, kMaxLatencyS);
    p.finish();
  };
  for (const char* algorithm : {"ring", "tree"}) {
    const JsonObject a = o.object(algorithm);
    const bool ring = std::string_view(algorithm) == "ring";
    per_protocol(a.object("base_latency_s"), ring ? m.ring_base_s : m.tree_base_s);
    per_protocol(a.object("node_hop_latency_s"), ring ? m.ring_node_hop_s : m.tree_node_hop_s);
    a.finish();
  }
  const bool nvls_tree = o.has("nvls_tree");
  if (nvls_tree) {
    const JsonObject v = o.object("nvls_tree");
    m.nvls_tree_node_s = v.number("node_latency_s", 0.0, kMaxLatencyS);
    m.nvls_tree_network_hop_s = v.number("network_hop_latency_s", 0.0, kMaxLatencyS);
    m.nvls_efficiency = v.number("efficiency", 0.0, 1.0);
    if (!(m.nvls_efficiency > 0.0)) v.at("efficiency").fail("must be above 0 (the share of NVLS's bandwidth)");
    v.finish();
  }
  m.network_overhead_s = o.number("network_overhead_s", 0.0, kMaxLatencyS);
  m.ring_simple_plateau = o.number("ring_simple_plateau", 1.0, 10.0);
  if (auto algorithms = o.find("ll128_between_nodes_algorithms")) {
    if (o.has("ll128_between_nodes"))
      algorithms->fail("given beside ll128_between_nodes: give one of the two (this one names the algorithms)");
    const JsonArray a = algorithms->as_array();
    a.require_size(0, 2);
    m.ll128_ring_between_nodes = m.ll128_tree_between_nodes = false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const std::string name = a.at(i).as_string();
      if (name != "ring" && name != "tree") a.at(i).fail("unknown algorithm '" + name + "' (ring, tree)");
      bool& on = name == "ring" ? m.ll128_ring_between_nodes : m.ll128_tree_between_nodes;
      if (on) a.at(i).fail("'" + name + "' listed twice");
      on = true;
    }
  } else {
    m.ll128_ring_between_nodes = m.ll128_tree_between_nodes = o.boolean_or("ll128_between_nodes", true);
  }
  if (auto mc = o.find("measured_correction")) {
    const JsonObject c = mc->as_object();
    m.extra_network_hop_s = c.number("extra_network_hop_latency_s", 0.0, kMaxLatencyS);
    m.extra_tree_latency_s = c.number_or("extra_tree_latency_s", 0.0, kMaxLatencyS, 0.0);
    // The slowdown's three numbers come together or not at all (a peak without its place means nothing).
    if (c.has("mid_size_slowdown_peak") || c.has("mid_size_center_log2_bytes") || c.has("mid_size_width_log2")) {
      m.mid_size_slowdown_peak = c.number("mid_size_slowdown_peak", 0.0, 10.0);
      m.mid_size_center_log2_bytes = c.number("mid_size_center_log2_bytes", 0.0, 50.0);
      m.mid_size_width_log2 = c.number("mid_size_width_log2", 0.0, 20.0);
      if (!(m.mid_size_width_log2 > 0.0)) c.at("mid_size_width_log2").fail("must be above 0 (octaves)");
    }
    if (c.string("source").empty()) c.at("source").fail("must name where the correction comes from");
    c.finish();
  }
  const JsonObject f = o.object("bandwidth_factors");
  // Each refines a bus bandwidth downwards: in (0, 1].
  const auto factor = [&f](const char* key) {
    const double x = f.number(key, 0.0, 1.0);
    if (!(x > 0.0)) f.at(key).fail("must be above 0 (a share of the bus bandwidth)");
    return x;
  };
  m.ring_ll_factor = factor("ring_ll");
  m.ring_ll128_factor = factor("ring_ll128");
  m.tree_factor = factor("tree");
  m.tree_ll_factor = factor("tree_ll");
  m.tree_ll128_factor = factor("tree_ll128");
  f.finish();
  const JsonObject caps = o.object("channel_caps_bytes_per_s");
  const char* counts[2] = {"two_nodes", "more_nodes"};
  for (std::size_t i = 0; i < 2; ++i) {
    const JsonObject k = caps.object(counts[i]);
    m.ring_ll128_cap[i] = k.number("ring_ll128", 1e6, 1e14);
    m.tree_cap[i] = k.number("tree", 1e6, 1e14);
    m.tree_ll128_cap[i] = k.number("tree_ll128", 1e6, 1e14);
    // The NVLS tree's cap only beside an NVLS tree.
    if (nvls_tree) m.nvls_tree_cap[i] = k.number("nvls_tree", 1e6, 1e14);
    k.finish();
  }
  caps.finish();
  m.source = o.string("source");
  o.finish();
  return m;
}

CommParams read_communication(const JsonObject& o) {
  CommParams c;
  c.collective_base_latency_s = o.sourced("collective_base_latency_s", 0.0, kMaxLatencyS);
  c.sm_step_latency_s = o.sourced("sm_step_latency_s", 0.0, kMaxLatencyS);
  c.copy_engine_step_latency_s = o.sourced("copy_engine_step_latency_s", 0.0, kMaxLatencyS);
  c.sm_kernel_efficiency = positive_sourced(o, "sm_kernel_efficiency", 1.0);
  c.copy_engine_efficiency = positive_sourced(o, "copy_engine_efficiency", 1.0);
  c.tree_all_reduce = o.boolean_or("tree_all_reduce", true);
  if (auto pn = o.find("p2p_network")) {
    const JsonObject p = pn->as_object();
    c.p2p_network = P2pNetwork{positive_sourced(p, "efficiency", 1.0), p.sourced("added_latency_s", 0.0, kMaxLatencyS)};
    p.finish();
  }
  const auto protocol = [](const JsonObject& p, const std::string& name, double max_efficiency) {
    CommProtocol out;
    out.name = name;
    out.base_latency_s = p.sourced("base_latency_s", 0.0, kMaxLatencyS);
    out.step_latency_s = p.sourced("step_latency_s", 0.0, kMaxLatencyS);
    out.efficiency = positive_sourced(p, "efficiency", max_efficiency);
    p.finish();
    return out;
  };
  if (auto ps = o.find("protocols")) {
    const JsonObject po = ps->as_object();
    for (const char* name : {"ll", "ll128"})
      if (po.has(name)) c.protocols.push_back(protocol(po.object(name), name, 1.0));
    po.finish();
  }
  // NVLS reduces in the switch: its bus bandwidth may exceed a ring's on the same links, never twice.
  if (auto nv = o.find("nvls")) c.nvls = protocol(nv->as_object(), "nvls", 2.0);
  if (auto nt = o.find("network_tuning")) {
    const JsonObject t = nt->as_object();
    NetworkTuning n;
    const JsonObject ring = t.object("ring_hop_latency_s"), tree = t.object("tree_hop_latency_s");
    n.ring_hop_simple_s = ring.sourced("simple", 0.0, kMaxLatencyS);
    n.ring_hop_ll_s = ring.sourced("ll", 0.0, kMaxLatencyS);
    n.ring_hop_ll128_s = ring.sourced("ll128", 0.0, kMaxLatencyS);
    n.tree_hop_simple_s = tree.sourced("simple", 0.0, kMaxLatencyS);
    n.tree_hop_ll_s = tree.sourced("ll", 0.0, kMaxLatencyS);
    n.tree_hop_ll128_s = tree.sourced("ll128", 0.0, kMaxLatencyS);
    ring.finish();
    tree.finish();
    // A bus bandwidth: at least 1 MB/s (a zero would stall every LL collective across nodes), at most 100 TB/s.
    const JsonObject ll = t.object("ll_max_bus_bandwidth_bytes_per_s");
    n.ll_max_bus_bandwidth_two_nodes_bytes_per_s = ll.sourced("two_nodes", 1e6, 1e14);
    n.ll_max_bus_bandwidth_more_nodes_bytes_per_s = ll.sourced("more_nodes", 1e6, 1e14);
    ll.finish();
    if (auto tf = t.find("tree_size_factors")) {
      const JsonObject f = tf->as_object();
      const char* names[3] = {"simple", "ll", "ll128"};
      for (std::size_t k = 0; k < 3; ++k) {
        const JsonArray a = f.array(names[k]);
        a.require_size(kTreeSizeFactors, kTreeSizeFactors);
        for (std::size_t i = 0; i < a.size(); ++i) {
          const double x = a.at(i).as_number(0.0, 1.0);
          if (!(x > 0.0)) a.at(i).fail("must be above 0 (a share of the tree's bandwidth)");
          n.tree_size_factors[k].push_back(x);
        }
      }
      n.tree_size_factors_source = f.string("source");
      f.finish();
    }
    if (auto am = t.find("collective_model")) {
      const JsonObject model = am->as_object();
      // NCCL runs its NVLS tree only where the node's switch reduces (the topology's nvls).
      if (model.has("nvls_tree") && !c.nvls)
        model.at("nvls_tree").fail("an NVLS tree needs communication.nvls (a switch that reduces inside the node)");
      n.collective_model = read_collective_model(model);
    }
    t.finish();
    c.network_tuning = std::move(n);
  }
  o.finish();
  return c;
}

// Builds vertices and links of the cluster.
class Builder {
 public:
  explicit Builder(Cluster& c) : c_(c) {}

  VertexId add_vertex(std::string name, VertexKind kind, SwitchKind sk, int node, int rank) {
    Vertex v;
    v.name = std::move(name);
    v.kind = kind;
    v.switch_kind = sk;
    v.node = node;
    v.rank = rank;
    c_.vertices.push_back(std::move(v));
    return static_cast<VertexId>(c_.vertices.size() - 1);
  }

  // One full-duplex connection: two directed links of the same figures, a->b first.
  void add_duplex(VertexId a, VertexId b, LinkKind kind, const LinkSpec& spec) {
    add_link(a, b, kind, spec);
    add_link(b, a, kind, spec);
  }

 private:
  void add_link(VertexId from, VertexId to, LinkKind kind, const LinkSpec& spec) {
    Link l;
    l.name = c_.vertices[static_cast<std::size_t>(from)].name + "->" + c_.vertices[static_cast<std::size_t>(to)].name;
    l.from = from;
    l.to = to;
    l.kind = kind;
    l.line_rate_bytes_per_s = spec.line_rate_bytes_per_s.value;
    l.efficiency = spec.efficiency.value;
    l.bandwidth_bytes_per_s = spec.line_rate_bytes_per_s.value * spec.efficiency.value;
    l.latency_ps = seconds_to_ps(spec.latency_s.value);
    c_.links.push_back(std::move(l));
  }

  Cluster& c_;
};

std::string known_names(const std::map<std::string, DeviceModel>& models) {
  std::string out;
  for (const auto& [name, m] : models) out += (out.empty() ? "'" : ", '") + name + "'";
  return out;
}

}  // namespace

Cluster parse_cluster(const JsonDocument& doc) {
  const JsonObject root = doc.root();
  Cluster c;
  const JsonValue version = root.at("schema_version");
  if (version.as_integer(1, 1'000'000) != 1)
    version.fail(fmt::format("schema_version {} is not supported: this fusesim reads version 1", version.as_integer(1, 1'000'000)));
  c.name = root.string("name");
  c.description = root.string_or("description", "");

  // Device models.
  const JsonObject models = root.object("device_models");
  for (const std::string& key : models.keys()) {
    JsonValue v = models.at(key);
    c.device_models.emplace(key, read_device_model(key, v.as_object()));
  }
  if (c.device_models.empty()) models.fail("needs at least one device model");
  models.finish();

  // The node.
  const JsonObject node = root.object("node");
  const JsonValue model_ref = node.at("device_model");
  const std::string model_name = model_ref.as_string();
  auto model_it = c.device_models.find(model_name);
  if (model_it == c.device_models.end())
    model_ref.fail(fmt::format("unknown device model '{}' (defined: {})", model_name, known_names(c.device_models)));
  const DeviceModel& model = model_it->second;
  const int dpn = static_cast<int>(node.integer("devices_per_node", 1, kMaxDevicesPerNode));

  const JsonObject scale_up = node.object("scale_up");
  const JsonValue up_kind_value = scale_up.at("kind");
  const std::string up_kind = scale_up.choice("kind", {"switch", "full_mesh", "pcie", "none"});
  LinkKind up_link_kind = LinkKind::pcie;
  LinkSpec up_link;
  if (up_kind == "none") {
    if (dpn > 1) up_kind_value.fail(fmt::format("'none' is only for nodes of one device; this node has {}", dpn));
  } else {
    if (up_kind != "pcie") {
      const std::string lk =
          scale_up.choice_or("link_kind", {"nvlink", "hccs", "xgmi"}, up_kind == "switch" ? "nvlink" : "hccs");
      if (lk == "xgmi" && up_kind == "switch")
        scale_up.at("link_kind").fail("xGMI joins the devices of a node directly (AMD MI300X: each GPU to the 7 "
                                      "others), not through a switch: use kind \"full_mesh\"");
      up_link_kind = lk == "nvlink" ? LinkKind::nvlink : lk == "xgmi" ? LinkKind::xgmi : LinkKind::hccs;
    }
    if (up_kind == "full_mesh" && dpn > kMaxFullMeshDevices)
      up_kind_value.fail(fmt::format("a full mesh of {} devices is not a real machine (at most {})", dpn, kMaxFullMeshDevices));
    up_link = read_link(scale_up.object("link"));
  }
  scale_up.finish();

  struct NicSpec {
    int count = 0;
    LinkSpec pcie_link;
    LinkSpec nic_link;
  };
  std::optional<NicSpec> nics;
  if (auto nv = node.find("nics")) {
    const JsonObject n = nv->as_object();
    NicSpec spec;
    const JsonValue count_value = n.at("count");
    spec.count = static_cast<int>(count_value.as_integer(1, dpn));
    if (dpn % spec.count != 0)
      count_value.fail(fmt::format("{} devices per node cannot be shared evenly by {} NICs", dpn, spec.count));
    spec.pcie_link = read_link(n.object("pcie_link"));
    spec.nic_link = read_link(n.object("nic_link"));
    n.finish();
    nics = spec;
  }
  node.finish();

  // Nodes and the fabric between them.
  int num_nodes = 1;
  if (root.has("nodes")) {
    const JsonValue nv = root.at("nodes");
    num_nodes = static_cast<int>(nv.as_integer(1, kMaxNodes));
    if (static_cast<std::int64_t>(num_nodes) * dpn > kMaxRanks)
      nv.fail(fmt::format("{} nodes x {} devices = {} ranks, more than the {} a cluster may have (its model would "
                          "take about {:.1f} GB, at {:.0f} KB per rank)",
                          num_nodes, dpn, static_cast<std::int64_t>(num_nodes) * dpn, kMaxRanks,
                          static_cast<double>(num_nodes) * static_cast<double>(dpn) * kClusterBytesPerRank / 1e9,
                          kClusterBytesPerRank / 1e3));
  }

  std::string out_kind = "none";
  SwitchKind fabric_kind = SwitchKind::infiniband;
  int spines = 0;
  LinkSpec spine_link;
  if (auto so = root.find("scale_out")) {
    const JsonObject s = so->as_object();
    const JsonValue kind_value = s.at("kind");
    out_kind = s.choice("kind", {"none", "single_switch", "rail_optimized"});
    if (out_kind != "none") {
      if (!nics)
        throw InputError(doc.file(), "$.node.nics",
                         fmt::format("missing required key: scale_out kind '{}' connects the nodes through their NICs", out_kind));
      fabric_kind = s.choice("fabric", {"infiniband", "ethernet"}) == "infiniband" ? SwitchKind::infiniband
                                                                                   : SwitchKind::ethernet;
    }
    if (out_kind == "rail_optimized") {
      spines = static_cast<int>(s.integer("spines", 1, kMaxSpines));
      spine_link = read_link(s.object("spine_link"));
    }
    s.finish();
    if (out_kind == "none" && num_nodes > 1)
      kind_value.fail(fmt::format("{} nodes need a scale-out fabric ('single_switch' or 'rail_optimized')", num_nodes));
  } else if (num_nodes > 1) {
    throw InputError(doc.file(), "$.scale_out",
                     fmt::format("missing required key: {} nodes need a scale-out fabric", num_nodes));
  }

  c.comm = read_communication(root.object("communication"));
  root.finish();

  // Expansion into vertices and links.
  c.num_nodes = num_nodes;
  c.devices_per_node = dpn;
  c.full_mesh_scale_up = up_kind == "full_mesh";
  const std::string dev_label = model.vendor == "huawei" ? "npu" : "gpu";
  Builder b(c);
  const int ranks = num_nodes * dpn;
  c.rank_vertex.reserve(static_cast<std::size_t>(ranks));
  c.rank_model.assign(static_cast<std::size_t>(ranks), model_name);
  for (int n = 0; n < num_nodes; ++n)
    for (int i = 0; i < dpn; ++i)
      c.rank_vertex.push_back(b.add_vertex(fmt::format("node{}/{}{}", n, dev_label, i), VertexKind::accelerator,
                                           SwitchKind::nvswitch, n, n * dpn + i));

  std::vector<VertexId> nic_vertex;  // [node * count + k]
  for (int n = 0; n < num_nodes; ++n) {
    const auto dev = [&](int i) { return static_cast<VertexId>(n * dpn + i); };
    if (up_kind == "switch" || up_kind == "pcie") {
      SwitchKind sk = SwitchKind::pcie;
      std::string label = "pcie-switch";
      if (up_kind == "switch") {
        sk = up_link_kind == LinkKind::nvlink ? SwitchKind::nvswitch : SwitchKind::hccs;
        label = up_link_kind == LinkKind::nvlink ? "nvswitch" : "hccs-switch";
      }
      const VertexId sw = b.add_vertex(fmt::format("node{}/{}", n, label), VertexKind::switch_, sk, n, -1);
      for (int i = 0; i < dpn; ++i) b.add_duplex(dev(i), sw, up_link_kind, up_link);
    } else if (up_kind == "full_mesh") {
      for (int i = 0; i < dpn; ++i)
        for (int j = i + 1; j < dpn; ++j) b.add_duplex(dev(i), dev(j), up_link_kind, up_link);
    }
    if (nics) {
      const int per_nic = dpn / nics->count;
      for (int k = 0; k < nics->count; ++k) {
        const VertexId psw =
            b.add_vertex(fmt::format("node{}/pcie{}", n, k), VertexKind::switch_, SwitchKind::pcie, n, -1);
        const VertexId nic = b.add_vertex(fmt::format("node{}/nic{}", n, k), VertexKind::nic, SwitchKind::pcie, n, -1);
        for (int i = k * per_nic; i < (k + 1) * per_nic; ++i) b.add_duplex(dev(i), psw, LinkKind::pcie, nics->pcie_link);
        b.add_duplex(psw, nic, LinkKind::pcie, nics->pcie_link);
        nic_vertex.push_back(nic);
      }
    }
  }

  if (out_kind == "single_switch") {
    const VertexId sw = b.add_vertex("fabric-switch", VertexKind::switch_, fabric_kind, -1, -1);
    for (VertexId nic : nic_vertex) b.add_duplex(nic, sw, LinkKind::network, nics->nic_link);
  } else if (out_kind == "rail_optimized") {
    // Rail k: NIC k of every node on leaf k. Cross-rail traffic goes up to a spine.
    std::vector<VertexId> leaves;
    for (int k = 0; k < nics->count; ++k)
      leaves.push_back(b.add_vertex(fmt::format("leaf{}", k), VertexKind::switch_, fabric_kind, -1, -1));
    std::vector<VertexId> spine_vertex;
    for (int s = 0; s < spines; ++s)
      spine_vertex.push_back(b.add_vertex(fmt::format("spine{}", s), VertexKind::switch_, fabric_kind, -1, -1));
    for (int n = 0; n < num_nodes; ++n)
      for (int k = 0; k < nics->count; ++k)
        b.add_duplex(nic_vertex[static_cast<std::size_t>(n * nics->count + k)], leaves[static_cast<std::size_t>(k)],
                     LinkKind::network, nics->nic_link);
    for (VertexId leaf : leaves)
      for (VertexId sp : spine_vertex) b.add_duplex(leaf, sp, LinkKind::network, spine_link);
  }

  c.finalize();
  return c;
}

Cluster load_cluster(const std::string& path) { return parse_cluster(JsonDocument::load(path)); }

Cluster load_cluster_by_name_or_path(const std::string& name_or_path) {
  ResolvedInput in = resolve_input(name_or_path, "topologies");
  return parse_cluster(JsonDocument::parse(in.text, in.label));
}

}  // namespace fusesim::topo
