#pragma once
// Helpers shared by the topo tests: route invariants and a compact, valid topology to mutate.
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "fusesim/topo/cluster.hpp"

namespace topo_test {

using fusesim::topo::Cluster;
using fusesim::topo::Route;
using fusesim::topo::VertexKind;

// A route is a chain of links from the source's vertex to the destination's, touching no third
// accelerator, whose latency is the sum of its links'.
inline void check_route_invariants(const Cluster& c, int src, int dst, const Route& r) {
  REQUIRE_FALSE(r.links.empty());
  fusesim::TimePs sum = 0;
  fusesim::topo::VertexId at = c.rank_vertex.at(src);
  for (std::size_t i = 0; i < r.links.size(); ++i) {
    const auto& l = c.links.at(static_cast<std::size_t>(r.links[i]));
    REQUIRE(l.from == at);
    at = l.to;
    sum += l.latency_ps;
    if (i + 1 < r.links.size()) REQUIRE(c.vertices.at(static_cast<std::size_t>(at)).kind != VertexKind::accelerator);
  }
  REQUIRE(at == c.rank_vertex.at(dst));
  REQUIRE(sum == r.latency_ps);
}

inline std::vector<std::string> link_names(const Cluster& c, const Route& r) {
  std::vector<std::string> out;
  for (auto id : r.links) out.push_back(c.links.at(static_cast<std::size_t>(id)).name);
  return out;
}

// 2 nodes x 4 devices on a switch; 2 NICs per node (2 devices behind each PCIe switch); one fabric
// switch. Latencies: scale-up link 1 us, PCIe link 0.5 us, NIC link 2 us.
inline const char* kBaseTopology = R"({
  "schema_version": 1,
  "name": "base",
  "description": "test topology",
  "device_models": {
    "g": {
      "vendor": "nvidia",
      "peak_flops_per_s": {"bf16": {"value": 1e15, "source": "s"}, "fp8": {"value": 2e15, "source": "s"}},
      "hbm_bytes": {"value": 8e10, "source": "s"},
      "hbm_bandwidth_bytes_per_s": {"value": 3e12, "source": "s"},
      "sm_count": {"value": 100, "source": "s"},
      "copy_engines": {"value": 2, "source": "s"},
      "gemm_tile": {"m": 64, "n": 128},
      "efficiency": {"gemm": {"value": 0.8, "source": "s"}, "attention": {"value": 0.5, "source": "s"},
                     "hbm": {"value": 0.9, "source": "s"}},
      "contention": {"default_comm_sms": {"value": 16, "source": "s"}, "comm_hbm_traffic_factor": {"value": 1.0, "source": "s"}}
    }
  },
  "node": {
    "device_model": "g",
    "devices_per_node": 4,
    "scale_up": {"kind": "switch", "link": {"line_rate_bytes_per_s": {"value": 4e11, "source": "s"},
                                            "efficiency": {"value": 0.75, "source": "s"},
                                            "latency_s": {"value": 1e-6, "source": "s"}}},
    "nics": {"count": 2,
             "pcie_link": {"line_rate_bytes_per_s": {"value": 6e10, "source": "s"}, "efficiency": {"value": 0.5, "source": "s"},
                           "latency_s": {"value": 0.5e-6, "source": "s"}},
             "nic_link": {"line_rate_bytes_per_s": {"value": 5e10, "source": "s"}, "efficiency": {"value": 1.0, "source": "s"},
                          "latency_s": {"value": 2e-6, "source": "s"}}}
  },
  "nodes": 2,
  "scale_out": {"kind": "single_switch", "fabric": "infiniband"},
  "communication": {
    "collective_base_latency_s": {"value": 8e-6, "source": "s"},
    "sm_step_latency_s": {"value": 3e-6, "source": "s"},
    "copy_engine_step_latency_s": {"value": 2e-6, "source": "s"},
    "sm_kernel_efficiency": {"value": 0.9, "source": "s"},
    "copy_engine_efficiency": {"value": 1.0, "source": "s"}
  }
})";

inline nlohmann::json base_json() { return nlohmann::json::parse(kBaseTopology); }

}  // namespace topo_test
