// Malformed topology files: each one must raise an InputError naming exactly the file and the JSON
// path of the offending value.
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/json_reader.hpp"
#include "topo_test_util.hpp"

using namespace fusesim;
using namespace fusesim::topo;
using nlohmann::json;

namespace {

// Parses `text` as file "mem.json" and returns the error, failing the test when there is none.
InputError error_of_text(const std::string& text, const std::string& label = "mem.json") {
  try {
    parse_cluster(JsonDocument::parse(text, label));
  } catch (const InputError& e) {
    return e;
  }
  FAIL("no InputError for: " << text);
  throw std::logic_error("unreachable");
}

struct Case {
  const char* what;
  std::function<void(json&)> mutate;
  const char* path;
};

json sourced(double v) { return {{"value", v}, {"source", "s"}}; }

json kernels_as(const std::string& model, double fraction) {
  return {{"device_model", model},
          {"rate_fraction", {{"gemm", sourced(fraction)}, {"attention", sourced(1.0)}, {"elementwise", sourced(1.0)}}}};
}

}  // namespace

namespace {

// A well-formed communication.network_tuning block (NCCL's constants), for the cases that break one part.
json network_tuning() {
  const auto v = [](double x) { return json{{"value", x}, {"source", "s"}}; };
  return {{"ring_hop_latency_s", {{"simple", v(14e-6)}, {"ll", v(2.7e-6)}, {"ll128", v(4e-6)}}},
          {"tree_hop_latency_s", {{"simple", v(14e-6)}, {"ll", v(5e-6)}, {"ll128", v(8.5e-6)}}},
          {"ll_max_bus_bandwidth_bytes_per_s", {{"two_nodes", v(39e9)}, {"more_nodes", v(20.4e9)}}}};
}

// The same with NCCL's collective model (a DGX H100's constants).
json network_tuning_with_model() {
  json t = network_tuning();
  const json caps = {{"ring_ll128", 36.7e9}, {"tree", 41.4e9}, {"tree_ll128", 36.7e9}, {"nvls_tree", 57.7e9}};
  t["collective_model"] = {
      {"collectives", {"all_reduce", "reduce_scatter"}},
      {"channels", 8},
      {"channel_bandwidth_bytes_per_s", 48e9},
      {"ring",
       {{"base_latency_s", {{"simple", 8.4e-6}, {"ll", 6.6e-6}, {"ll128", 14e-6}}},
        {"node_hop_latency_s", {{"simple", 3.4e-6}, {"ll", 0.6e-6}, {"ll128", 1.9e-6}}}}},
      {"tree",
       {{"base_latency_s", {{"simple", 8.4e-6}, {"ll", 6.8e-6}, {"ll128", 14e-6}}},
        {"node_hop_latency_s", {{"simple", 4e-6}, {"ll", 0.6e-6}, {"ll128", 1.25e-6}}}}},
      {"nvls_tree", {{"node_latency_s", 25e-6}, {"network_hop_latency_s", 20.9e-6}, {"efficiency", 0.85}}},
      {"network_overhead_s", 1e-6},
      {"ring_simple_plateau", 1.4},
      {"bandwidth_factors",
       {{"ring_ll", 0.5}, {"ring_ll128", 0.92}, {"tree", 0.92}, {"tree_ll", 0.263158}, {"tree_ll128", 0.9375}}},
      {"channel_caps_bytes_per_s", {{"two_nodes", caps}, {"more_nodes", caps}}},
      {"source", "s"}};
  return t;
}

// A topology with NVLS (the switch reduces) and NCCL's collective model, NVLS tree included.
void add_model(json& j) {
  j["communication"]["nvls"] = {{"base_latency_s", {{"value", 2e-5}, {"source", "s"}}},
                                {"step_latency_s", {{"value", 0.0}, {"source", "s"}}},
                                {"efficiency", {{"value", 1.6}, {"source", "s"}}}};
  j["communication"]["network_tuning"] = network_tuning_with_model();
}

// A valid measured correction of the collective model (beside add_model's model), for the cases to break.
json& add_correction(json& j) {
  add_model(j);
  json& c = j["communication"]["network_tuning"]["collective_model"]["measured_correction"];
  c = json{{"extra_network_hop_latency_s", 1.7e-6}, {"mid_size_slowdown_peak", 0.8},
           {"mid_size_center_log2_bytes", 23.0}, {"mid_size_width_log2", 2.3}, {"source", "fit"}};
  return c;
}

}  // namespace

TEST_CASE("the base topology used by the error cases is valid") {
  // Guards the table below: every error comes from its mutation, not from the base.
  const Cluster c = parse_cluster(JsonDocument::parse(topo_test::kBaseTopology, "mem.json"));
  CHECK(c.num_ranks() == 8);
}

TEST_CASE("malformed JSON text") {
  const std::vector<std::string> texts = {
      R"({"schema_version": 1,, "name": "x"})",  // syntax error
      R"({"schema_version": 1)",                  // truncated
      "",                                         // empty file
      R"([1, 2, 3])",                             // not an object
      R"("dgx")",                                 // not an object
  };
  for (const auto& t : texts) {
    const InputError e = error_of_text(t);
    CHECK(e.file() == "mem.json");
    CHECK(e.json_path() == "$");
  }
  const InputError syntax = error_of_text("{\n  \"name\": \"x\",\n  oops\n}");
  // The message locates the error (line 3) for the user.
  CHECK_THAT(syntax.message(), Catch::Contains("line 3"));
}

TEST_CASE("each malformed topology names its JSON path") {
  const std::vector<Case> cases = {
      // Missing keys.
      {"missing name", [](json& j) { j.erase("name"); }, "$.name"},
      {"missing schema_version", [](json& j) { j.erase("schema_version"); }, "$.schema_version"},
      {"missing communication", [](json& j) { j.erase("communication"); }, "$.communication"},
      {"missing comm field", [](json& j) { j["communication"].erase("sm_kernel_efficiency"); },
       "$.communication.sm_kernel_efficiency"},
      {"missing link", [](json& j) { j["node"]["scale_up"].erase("link"); }, "$.node.scale_up.link"},
      // Protocols: LL's payload share cannot exceed 1 (only NVLS, whose switch reduces, may, up to 2);
      // an unknown protocol is refused.
      {"ll efficiency above 1",
       [](json& j) {
         j["communication"]["protocols"]["ll"] = {{"base_latency_s", {{"value", 6.6e-6}, {"source", "s"}}},
                                                  {"step_latency_s", {{"value", 0.6e-6}, {"source", "s"}}},
                                                  {"efficiency", {{"value", 1.2}, {"source", "s"}}}};
       },
       "$.communication.protocols.ll.efficiency.value"},
      {"unknown protocol", [](json& j) { j["communication"]["protocols"]["ll64"] = json::object(); },
       "$.communication.protocols.ll64"},
      {"nvls efficiency above 2",
       [](json& j) {
         j["communication"]["nvls"] = {{"base_latency_s", {{"value", 2e-5}, {"source", "s"}}},
                                       {"step_latency_s", {{"value", 0.0}, {"source", "s"}}},
                                       {"efficiency", {{"value", 2.5}, {"source", "s"}}}};
       },
       "$.communication.nvls.efficiency.value"},
      // NCCL's tuning between nodes: every hop latency and both caps required, sourced, in range.
      {"network tuning without its tree hops",
       [](json& j) {
         j["communication"]["network_tuning"] = network_tuning();
         j["communication"]["network_tuning"].erase("tree_hop_latency_s");
       },
       "$.communication.network_tuning.tree_hop_latency_s"},
      {"network tuning: a negative hop latency",
       [](json& j) {
         j["communication"]["network_tuning"] = network_tuning();
         j["communication"]["network_tuning"]["ring_hop_latency_s"]["simple"]["value"] = -14e-6;
       },
       "$.communication.network_tuning.ring_hop_latency_s.simple.value"},
      // NCCL's collective model (valid as given: the test after this one): each part required, in range,
      // no unknown key.
      {"collective model: no caps",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"].erase("channel_caps_bytes_per_s");
       },
       "$.communication.network_tuning.collective_model.channel_caps_bytes_per_s"},
      {"collective model: an NVLS tree without its cap",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["channel_caps_bytes_per_s"]["more_nodes"].erase(
             "nvls_tree");
       },
       "$.communication.network_tuning.collective_model.channel_caps_bytes_per_s.more_nodes.nvls_tree"},
      {"collective model: a bandwidth factor of zero",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["bandwidth_factors"]["tree_ll"] = 0.0;
       },
       "$.communication.network_tuning.collective_model.bandwidth_factors.tree_ll"},
      {"collective model: a negative hop",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["ring"]["node_hop_latency_s"]["ll"] = -1e-6;
       },
       "$.communication.network_tuning.collective_model.ring.node_hop_latency_s.ll"},
      {"collective model: an NVLS tree without the topology's NVLS",
       [](json& j) {
         add_model(j);
         j["communication"].erase("nvls");
       },
       "$.communication.network_tuning.collective_model.nvls_tree"},
      {"collective model: an unknown collective",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["collectives"] = {"all_reduce", "all_to_all"};
       },
       "$.communication.network_tuning.collective_model.collectives[1]"},
      {"collective model: a collective twice",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["collectives"] = {"all_reduce", "all_reduce"};
       },
       "$.communication.network_tuning.collective_model.collectives[1]"},
      {"collective model: none listed",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["collectives"] = json::array();
       },
       "$.communication.network_tuning.collective_model.collectives"},
      {"collective model: an inter-node channel bandwidth without its source",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["channel_bandwidth_inter_bytes_per_s"] = 40e9;
       },
       "$.communication.network_tuning.collective_model.channel_bandwidth_inter_bytes_per_s"},
      {"collective model: a negative inter-node channel bandwidth",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["channel_bandwidth_inter_bytes_per_s"] =
             sourced(-40e9);
       },
       "$.communication.network_tuning.collective_model.channel_bandwidth_inter_bytes_per_s.value"},
      {"collective model: LL128 between nodes not a bool",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["ll128_between_nodes"] = "no";
       },
       "$.communication.network_tuning.collective_model.ll128_between_nodes"},
      {"collective model: LL128 between nodes for an algorithm NCCL's model has no LL128 of",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["ll128_between_nodes_algorithms"] = {"tree",
                                                                                                      "nvls_tree"};
       },
       "$.communication.network_tuning.collective_model.ll128_between_nodes_algorithms[1]"},
      {"collective model: LL128 between nodes for one algorithm named twice",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["ll128_between_nodes_algorithms"] = {"ring", "ring"};
       },
       "$.communication.network_tuning.collective_model.ll128_between_nodes_algorithms[1]"},
      {"collective model: LL128 between nodes by algorithm not a list",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["ll128_between_nodes_algorithms"] = "tree";
       },
       "$.communication.network_tuning.collective_model.ll128_between_nodes_algorithms"},
      {"collective model: LL128 between nodes given both ways",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["ll128_between_nodes"] = true;
         j["communication"]["network_tuning"]["collective_model"]["ll128_between_nodes_algorithms"] = {"tree"};
       },
       "$.communication.network_tuning.collective_model.ll128_between_nodes_algorithms"},
      {"collective model: a measured correction without its source",
       [](json& j) { add_correction(j).erase("source"); },
       "$.communication.network_tuning.collective_model.measured_correction.source"},
      {"collective model: a measured correction of no width",
       [](json& j) { add_correction(j)["mid_size_width_log2"] = 0.0; },
       "$.communication.network_tuning.collective_model.measured_correction.mid_size_width_log2"},
      {"collective model: a negative extra latency of a network hop",
       [](json& j) { add_correction(j)["extra_network_hop_latency_s"] = -1e-6; },
       "$.communication.network_tuning.collective_model.measured_correction.extra_network_hop_latency_s"},
      {"collective model: a negative extra latency of a tree",
       [](json& j) { add_correction(j)["extra_tree_latency_s"] = -1e-6; },
       "$.communication.network_tuning.collective_model.measured_correction.extra_tree_latency_s"},
      {"collective model: a mid-size slowdown's peak without its centre",
       [](json& j) { add_correction(j).erase("mid_size_center_log2_bytes"); },
       "$.communication.network_tuning.collective_model.measured_correction.mid_size_center_log2_bytes"},
      {"collective model: an unknown key",
       [](json& j) {
         add_model(j);
         j["communication"]["network_tuning"]["collective_model"]["collnet"] = 1;
       },
       "$.communication.network_tuning.collective_model.collnet"},
      {"network tuning: an LL cap of zero",
       [](json& j) {
         j["communication"]["network_tuning"] = network_tuning();
         j["communication"]["network_tuning"]["ll_max_bus_bandwidth_bytes_per_s"]["more_nodes"]["value"] = 0.0;
       },
       "$.communication.network_tuning.ll_max_bus_bandwidth_bytes_per_s.more_nodes.value"},
      {"network tuning: an unknown protocol",
       [](json& j) {
         j["communication"]["network_tuning"] = network_tuning();
         j["communication"]["network_tuning"]["tree_hop_latency_s"]["nvls"] = {{"value", 20.9e-6}, {"source", "s"}};
       },
       "$.communication.network_tuning.tree_hop_latency_s.nvls"},
      {"network tuning: a tree size factor list too short",
       [](json& j) {
         j["communication"]["network_tuning"] = network_tuning();
         j["communication"]["network_tuning"]["tree_size_factors"] = {
             {"simple", json::array({0.9, 0.9})}, {"ll", json::array()}, {"ll128", json::array()}, {"source", "s"}};
       },
       "$.communication.network_tuning.tree_size_factors.simple"},
      {"network tuning: a tree size factor of 0",
       [](json& j) {
         j["communication"]["network_tuning"] = network_tuning();
         json ones = json::array();
         for (int i = 0; i < 23; ++i) ones.push_back(1.0);
         json zero = ones;
         zero[5] = 0.0;
         j["communication"]["network_tuning"]["tree_size_factors"] = {
             {"simple", ones}, {"ll", zero}, {"ll128", ones}, {"source", "s"}};
       },
       "$.communication.network_tuning.tree_size_factors.ll[5]"},
      {"missing nic_link", [](json& j) { j["node"]["nics"].erase("nic_link"); }, "$.node.nics.nic_link"},
      {"missing latency", [](json& j) { j["node"]["scale_up"]["link"].erase("latency_s"); },
       "$.node.scale_up.link.latency_s"},
      {"missing hbm bandwidth", [](json& j) { j["device_models"]["g"].erase("hbm_bandwidth_bytes_per_s"); },
       "$.device_models.g.hbm_bandwidth_bytes_per_s"},
      {"missing efficiency.attention", [](json& j) { j["device_models"]["g"]["efficiency"].erase("attention"); },
       "$.device_models.g.efficiency.attention"},
      // Unknown keys.
      {"unknown root key", [](json& j) { j["nodez"] = 2; }, "$.nodez"},
      {"typo in a link key", [](json& j) { j["node"]["scale_up"]["link"]["bandwith_bytes_per_s"] = sourced(1e9); },
       "$.node.scale_up.link.bandwith_bytes_per_s"},
      {"unknown key in a sourced figure", [](json& j) { j["node"]["scale_up"]["link"]["efficiency"]["note"] = "x"; },
       "$.node.scale_up.link.efficiency.note"},
      {"unknown dtype", [](json& j) { j["device_models"]["g"]["peak_flops_per_s"]["int8"] = sourced(1e15); },
       "$.device_models.g.peak_flops_per_s.int8"},
      {"link_kind on a pcie scale-up", [](json& j) {
         j["node"]["scale_up"]["kind"] = "pcie";
         j["node"]["scale_up"]["link_kind"] = "nvlink";
       }, "$.node.scale_up.link_kind"},
      {"link on scale-up none", [](json& j) {
         j["node"]["devices_per_node"] = 1;
         j["node"]["nics"]["count"] = 1;
         j["node"]["scale_up"]["kind"] = "none";
       }, "$.node.scale_up.link"},
      {"spines on single_switch", [](json& j) { j["scale_out"]["spines"] = 2; }, "$.scale_out.spines"},
      // Wrong types.
      {"devices_per_node as a string", [](json& j) { j["node"]["devices_per_node"] = "4"; }, "$.node.devices_per_node"},
      {"devices_per_node fractional", [](json& j) { j["node"]["devices_per_node"] = 4.5; }, "$.node.devices_per_node"},
      {"name as a number", [](json& j) { j["name"] = 5; }, "$.name"},
      {"empty description", [](json& j) { j["description"] = ""; }, "$.description"},
      {"estimate as a string", [](json& j) { j["device_models"]["g"]["estimate"] = "yes"; }, "$.device_models.g.estimate"},
      {"device model not an object", [](json& j) { j["device_models"]["g"] = 5; }, "$.device_models.g"},
      {"node not an object", [](json& j) { j["node"] = json::array(); }, "$.node"},
      {"value as a string", [](json& j) { j["node"]["scale_up"]["link"]["line_rate_bytes_per_s"]["value"] = "4e11"; },
       "$.node.scale_up.link.line_rate_bytes_per_s.value"},
      {"scale_up kind unknown", [](json& j) { j["node"]["scale_up"]["kind"] = "torus"; }, "$.node.scale_up.kind"},
      {"fabric unknown", [](json& j) { j["scale_out"]["fabric"] = "myrinet"; }, "$.scale_out.fabric"},
      // Numbers without a source.
      {"bare line rate", [](json& j) { j["node"]["scale_up"]["link"]["line_rate_bytes_per_s"] = 4e11; },
       "$.node.scale_up.link.line_rate_bytes_per_s"},
      {"bare peak", [](json& j) { j["device_models"]["g"]["peak_flops_per_s"]["bf16"] = 1e15; },
       "$.device_models.g.peak_flops_per_s.bf16"},
      {"bare comm latency", [](json& j) { j["communication"]["sm_step_latency_s"] = 3e-6; },
       "$.communication.sm_step_latency_s"},
      {"source missing", [](json& j) { j["node"]["nics"]["pcie_link"]["efficiency"] = {{"value", 0.5}}; },
       "$.node.nics.pcie_link.efficiency.source"},
      {"source empty", [](json& j) { j["device_models"]["g"]["sm_count"]["source"] = ""; },
       "$.device_models.g.sm_count.source"},
      // Negative, zero and absurd values.
      {"negative bandwidth", [](json& j) { j["node"]["scale_up"]["link"]["line_rate_bytes_per_s"]["value"] = -4e11; },
       "$.node.scale_up.link.line_rate_bytes_per_s.value"},
      {"zero bandwidth", [](json& j) { j["node"]["nics"]["nic_link"]["line_rate_bytes_per_s"]["value"] = 0; },
       "$.node.nics.nic_link.line_rate_bytes_per_s.value"},
      {"absurd bandwidth (bits for bytes x 1e6)", [](json& j) { j["node"]["scale_up"]["link"]["line_rate_bytes_per_s"]["value"] = 3.6e18; },
       "$.node.scale_up.link.line_rate_bytes_per_s.value"},
      {"bandwidth at the bound", [](json& j) { j["device_models"]["g"]["hbm_bandwidth_bytes_per_s"]["value"] = 1e15; },
       "$.device_models.g.hbm_bandwidth_bytes_per_s.value"},
      {"efficiency above 1", [](json& j) { j["node"]["scale_up"]["link"]["efficiency"]["value"] = 1.5; },
       "$.node.scale_up.link.efficiency.value"},
      {"efficiency zero", [](json& j) { j["communication"]["copy_engine_efficiency"]["value"] = 0; },
       "$.communication.copy_engine_efficiency.value"},
      {"P2P network efficiency above 1",
       [](json& j) {
         j["communication"]["p2p_network"] = {{"efficiency", {{"value", 1.2}, {"source", "t"}}},
                                              {"added_latency_s", {{"value", 1e-5}, {"source", "t"}}}};
       },
       "$.communication.p2p_network.efficiency.value"},
      {"P2P network latency missing",
       [](json& j) { j["communication"]["p2p_network"] = {{"efficiency", {{"value", 0.7}, {"source", "t"}}}}; },
       "$.communication.p2p_network.added_latency_s"},
      {"P2P network latency of a second",
       [](json& j) {
         j["communication"]["p2p_network"] = {{"efficiency", {{"value", 0.7}, {"source", "t"}}},
                                              {"added_latency_s", {{"value", 1.0}, {"source", "t"}}}};
       },
       "$.communication.p2p_network.added_latency_s.value"},
      {"tree_all_reduce not a bool", [](json& j) { j["communication"]["tree_all_reduce"] = "yes"; },
       "$.communication.tree_all_reduce"},
      {"negative latency", [](json& j) { j["node"]["scale_up"]["link"]["latency_s"]["value"] = -1e-6; },
       "$.node.scale_up.link.latency_s.value"},
      {"latency of a second (ms for s)", [](json& j) { j["node"]["scale_up"]["link"]["latency_s"]["value"] = 1.0; },
       "$.node.scale_up.link.latency_s.value"},
      {"negative peak", [](json& j) { j["device_models"]["g"]["peak_flops_per_s"]["bf16"]["value"] = -1; },
       "$.device_models.g.peak_flops_per_s.bf16.value"},
      {"absurd HBM", [](json& j) { j["device_models"]["g"]["hbm_bytes"]["value"] = 1e15; },
       "$.device_models.g.hbm_bytes.value"},
      {"fractional SM count", [](json& j) { j["device_models"]["g"]["sm_count"]["value"] = 100.5; },
       "$.device_models.g.sm_count.value"},
      {"zero SMs", [](json& j) { j["device_models"]["g"]["sm_count"]["value"] = 0; },
       "$.device_models.g.sm_count.value"},
      {"comm SMs above the SM count", [](json& j) { j["device_models"]["g"]["contention"]["default_comm_sms"]["value"] = 101; },
       "$.device_models.g.contention.default_comm_sms.value"},
      {"node collective SMs above the SM count",
       [](json& j) { j["device_models"]["g"]["contention"]["node_collective_sms"] = {{"value", 101}, {"source", "s"}}; },
       "$.device_models.g.contention.node_collective_sms.value"},
      {"kernels_as naming the device itself",
       [](json& j) { j["device_models"]["g"]["kernels_as"] = kernels_as("g", 1.0); },
       "$.device_models.g.kernels_as.device_model"},
      {"kernels_as at a hundredth of the rate",
       [](json& j) { j["device_models"]["g"]["kernels_as"] = kernels_as("h100-sxm", 0.01); },
       "$.device_models.g.kernels_as.rate_fraction.gemm.value"},
      {"kernels_as at three times the rate",
       [](json& j) { j["device_models"]["g"]["kernels_as"] = kernels_as("h100-sxm", 3.0); },
       "$.device_models.g.kernels_as.rate_fraction.gemm.value"},
      {"kernels_as without an element-wise rate",
       [](json& j) {
         j["device_models"]["g"]["kernels_as"] = kernels_as("h100-sxm", 1.0);
         j["device_models"]["g"]["kernels_as"]["rate_fraction"].erase("elementwise");
       },
       "$.device_models.g.kernels_as.rate_fraction.elementwise"},
      {"kernels_as with an unknown key",
       [](json& j) {
         j["device_models"]["g"]["kernels_as"] = kernels_as("h100-sxm", 1.0);
         j["device_models"]["g"]["kernels_as"]["power_w"] = 500;
       },
       "$.device_models.g.kernels_as.power_w"},
      {"node collective SMs without a source",
       [](json& j) { j["device_models"]["g"]["contention"]["node_collective_sms"] = {{"value", 24}}; },
       "$.device_models.g.contention.node_collective_sms.source"},
      {"negative kernel launch", [](json& j) { j["device_models"]["g"]["kernel_launch_s"] = {{"value", -1e-6}, {"source", "s"}}; },
       "$.device_models.g.kernel_launch_s.value"},
      {"kernel launch of a second", [](json& j) { j["device_models"]["g"]["kernel_launch_s"] = {{"value", 1.0}, {"source", "s"}}; },
       "$.device_models.g.kernel_launch_s.value"},
      {"kernel launch without a source", [](json& j) { j["device_models"]["g"]["kernel_launch_s"] = {{"value", 2e-6}}; },
       "$.device_models.g.kernel_launch_s.source"},
      {"negative stream wait", [](json& j) { j["device_models"]["g"]["stream_wait_s"] = {{"value", -1e-6}, {"source", "s"}}; },
       "$.device_models.g.stream_wait_s.value"},
      {"stream wait of a second", [](json& j) { j["device_models"]["g"]["stream_wait_s"] = {{"value", 1.0}, {"source", "s"}}; },
       "$.device_models.g.stream_wait_s.value"},
      {"stream wait as a string", [](json& j) { j["device_models"]["g"]["stream_wait_s"] = {{"value", "1us"}, {"source", "s"}}; },
       "$.device_models.g.stream_wait_s.value"},
      {"GEMM tile of 0", [](json& j) { j["device_models"]["g"]["gemm_tile"]["m"] = 0; }, "$.device_models.g.gemm_tile.m"},
      {"schema_version 2", [](json& j) { j["schema_version"] = 2; }, "$.schema_version"},
      {"zero devices", [](json& j) { j["node"]["devices_per_node"] = 0; }, "$.node.devices_per_node"},
      {"too many devices", [](json& j) { j["node"]["devices_per_node"] = 2048; }, "$.node.devices_per_node"},
      {"zero nodes", [](json& j) { j["nodes"] = 0; }, "$.nodes"},
      {"too many nodes", [](json& j) { j["nodes"] = 65537; }, "$.nodes"},
      {"too many ranks", [](json& j) {
         j["nodes"] = 65536;
         j["node"]["devices_per_node"] = 1024;
       }, "$.nodes"},
      {"a million ranks from a 6 KB file (issue 20, item 5)", [](json& j) {
         j["nodes"] = 65536;
         j["node"]["devices_per_node"] = 16;
       }, "$.nodes"},
      {"zero NICs", [](json& j) { j["node"]["nics"]["count"] = 0; }, "$.node.nics.count"},
      {"NICs not dividing the devices", [](json& j) { j["node"]["nics"]["count"] = 3; }, "$.node.nics.count"},
      {"more NICs than devices", [](json& j) { j["node"]["nics"]["count"] = 5; }, "$.node.nics.count"},
      {"zero spines", [](json& j) {
         j["scale_out"] = {{"kind", "rail_optimized"}, {"fabric", "infiniband"}, {"spines", 0},
                           {"spine_link", j["node"]["nics"]["nic_link"]}};
       }, "$.scale_out.spines"},
      {"missing spine_link", [](json& j) {
         j["scale_out"] = {{"kind", "rail_optimized"}, {"fabric", "infiniband"}, {"spines", 2}};
       }, "$.scale_out.spine_link"},
      // References and consistency.
      {"unknown device model", [](json& j) { j["node"]["device_model"] = "h100"; }, "$.node.device_model"},
      {"no device models", [](json& j) { j["device_models"] = json::object(); }, "$.device_models"},
      {"no peak at all", [](json& j) { j["device_models"]["g"]["peak_flops_per_s"] = json::object(); },
       "$.device_models.g.peak_flops_per_s"},
      {"scale-up none with 4 devices", [](json& j) { j["node"]["scale_up"] = {{"kind", "none"}}; }, "$.node.scale_up.kind"},
      {"full mesh of 128", [](json& j) {
         j["node"]["devices_per_node"] = 128;
         j["node"]["scale_up"]["kind"] = "full_mesh";
       }, "$.node.scale_up.kind"},
      {"two nodes, no fabric", [](json& j) { j["scale_out"] = {{"kind", "none"}}; }, "$.scale_out.kind"},
      {"two nodes, scale_out absent", [](json& j) { j.erase("scale_out"); }, "$.scale_out"},
      {"fabric without NICs", [](json& j) { j["node"].erase("nics"); }, "$.node.nics"},
      {"fabric kind missing", [](json& j) { j["scale_out"].erase("fabric"); }, "$.scale_out.fabric"},
  };
  for (const auto& c : cases) {
    SECTION(c.what) {
      json j = topo_test::base_json();
      c.mutate(j);
      const InputError e = error_of_text(j.dump());
      INFO(e.what());
      CHECK(e.file() == "mem.json");
      CHECK(e.json_path() == c.path);
      CHECK_FALSE(e.message().empty());
    }
  }
}

TEST_CASE("errors in files on disk name the file path") {
  const std::string dir = std::string(FUSESIM_SOURCE_DIR) + "/tests/data/topo/";
  struct FileCase {
    const char* file;
    const char* path;
  };
  const std::vector<FileCase> cases = {
      {"bad-syntax.json", "$"},
      {"bad-unsourced-bandwidth.json", "$.node.scale_up.link.line_rate_bytes_per_s"},
      {"bad-negative-latency.json", "$.node.nics.nic_link.latency_s.value"},
      {"bad-unknown-key.json", "$.scale_out.spine_count"},
      {"bad-device-model.json", "$.node.device_model"},
  };
  for (const auto& fc : cases) {
    SECTION(fc.file) {
      const std::string path = dir + fc.file;
      try {
        load_cluster(path);
        FAIL("expected an InputError");
      } catch (const InputError& e) {
        CHECK(e.file() == path);
        CHECK(e.json_path() == fc.path);
      }
      // By path through the name-or-path entry point: same file label.
      try {
        load_cluster_by_name_or_path(path);
        FAIL("expected an InputError");
      } catch (const InputError& e) {
        CHECK(e.file() == path);
        CHECK(e.json_path() == fc.path);
      }
    }
  }
  SECTION("a file that does not exist") {
    try {
      load_cluster(dir + "does-not-exist.json");
      FAIL("expected an InputError");
    } catch (const InputError& e) {
      CHECK(e.file() == dir + "does-not-exist.json");
      CHECK(e.json_path() == "$");
    }
  }
  SECTION("the good file loads") {
    const Cluster c = load_cluster(dir + "good-2node-rail.json");
    // 2 nodes x 2 devices; NIC k of each node on leaf k; 1 spine.
    CHECK(c.num_ranks() == 4);
    CHECK(c.num_nodes == 2);
    // rank 0 (node0/gpu0) -> rank 3 (node1/gpu1): cross rail, 8 links.
    CHECK(c.route(0, 3).links.size() == 8);
    CHECK(c.route(0, 2).links.size() == 6);
  }
}

TEST_CASE("errors in an embedded file name the embedded label") {
  // The label resolve_input gives an embedded file; checked through a mutated copy of a shipped file.
  auto in = resolve_input("dgx-h100", "topologies");
  CHECK(in.label == "<embedded:topologies/dgx-h100.json>");
  json j = json::parse(in.text);
  j["node"]["devices_per_node"] = 0;
  const InputError e = error_of_text(j.dump(), in.label);
  CHECK(e.file() == "<embedded:topologies/dgx-h100.json>");
  CHECK(e.json_path() == "$.node.devices_per_node");
}

TEST_CASE("a path that exists but is not a regular file is refused as such, not as a missing file") {
  for (const char* path : {".", "/dev/null"}) {
    INFO(path);
    try {
      resolve_input(path, "topologies");
      FAIL("a directory or a device must be refused");
    } catch (const InputError& e) {
      CHECK(e.file() == path);
      CHECK(e.json_path() == "$");
      CHECK(std::string(e.what()).find("not a regular file") != std::string::npos);
      CHECK(std::string(e.what()).find("dgx-h100") != std::string::npos);  // the shipped names
    }
  }
}

TEST_CASE("an unknown shipped name lists the folder's own files, not those of its subfolders") {
  // validation/ ships published.json and measured.json, and beside them the cases' workloads in
  // validation/workloads/: `validate --cases NAME` reads only the first two, so only they are names.
  try {
    resolve_input("no-such-cases", "validation");
    FAIL("an unknown name must be refused");
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK(what.find("(measured, published)") != std::string::npos);
    CHECK(what.find("sc21-gpt") == std::string::npos);
  }
}

TEST_CASE("NCCL's collective model as the topology gives it") {
  json j = topo_test::base_json();
  add_model(j);
  const Cluster c = parse_cluster(JsonDocument::parse(j.dump(), "mem.json"));
  REQUIRE(c.comm.network_tuning->collective_model.has_value());
  const CollectiveModel& m = *c.comm.network_tuning->collective_model;
  CHECK(m.all_reduce);
  CHECK_FALSE(m.all_gather);
  CHECK(m.reduce_scatter);
  CHECK(m.channels == 8);
  CHECK(m.ring_base_s[2] == 14e-6);     // LL128, the third of simple, ll, ll128
  CHECK(m.tree_node_hop_s[1] == 0.6e-6);
  CHECK(m.nvls_tree_cap[1] == 57.7e9);  // more than two nodes
  CHECK(m.nvls_efficiency == 0.85);
  CHECK(m.ll128_ring_between_nodes);  // NCCL's default where the file does not say
  CHECK(m.ll128_tree_between_nodes);
  {
    // By algorithm: trees alone (the Hopper files'), or none; or off for both by the bool.
    for (const auto& [algorithms, ring, tree] :
         {std::tuple{json::array({"tree"}), false, true}, std::tuple{json::array({"tree", "ring"}), true, true},
          std::tuple{json::array(), false, false}}) {
      json k = j;
      k["communication"]["network_tuning"]["collective_model"]["ll128_between_nodes_algorithms"] = algorithms;
      const Cluster kc = parse_cluster(JsonDocument::parse(k.dump(), "mem.json"));
      CHECK(kc.comm.network_tuning->collective_model->ll128_ring_between_nodes == ring);
      CHECK(kc.comm.network_tuning->collective_model->ll128_tree_between_nodes == tree);
    }
    json k = j;
    k["communication"]["network_tuning"]["collective_model"]["ll128_between_nodes"] = false;
    const Cluster kc = parse_cluster(JsonDocument::parse(k.dump(), "mem.json"));
    CHECK_FALSE(kc.comm.network_tuning->collective_model->ll128_ring_between_nodes);
    CHECK_FALSE(kc.comm.network_tuning->collective_model->ll128_tree_between_nodes);
  }
  CHECK(m.extra_network_hop_s == 0.0);  // no measured correction: NCCL's model as it is
  CHECK(m.mid_size_slowdown_peak == 0.0);
  CHECK(m.extra_tree_latency_s == 0.0);
  {
    // A correction of latencies alone (the A100 files'): the tree's read, no mid-size slowdown.
    json k = j;
    k["communication"]["network_tuning"]["collective_model"]["measured_correction"] =
        json{{"extra_network_hop_latency_s", 1.37e-6}, {"extra_tree_latency_s", 13e-6}, {"source", "fit"}};
    const Cluster kc = parse_cluster(JsonDocument::parse(k.dump(), "mem.json"));
    const CollectiveModel& km = *kc.comm.network_tuning->collective_model;
    CHECK(km.extra_network_hop_s == 1.37e-6);
    CHECK(km.extra_tree_latency_s == 13e-6);
    CHECK(km.mid_size_slowdown_peak == 0.0);
  }
  // Without channel_bandwidth_inter_bytes_per_s the channels run at one speed between nodes as inside.
  CHECK(m.channel_inter_bytes_per_s == m.channel_bytes_per_s);
  {
    json inter = j;
    inter["communication"]["network_tuning"]["collective_model"]["channel_bandwidth_inter_bytes_per_s"] =
        json{{"value", 40e9}, {"source", "fit"}};
    const Cluster ci = parse_cluster(JsonDocument::parse(inter.dump(), "mem.json"));
    CHECK(ci.comm.network_tuning->collective_model->channel_inter_bytes_per_s == 40e9);
    CHECK(ci.comm.network_tuning->collective_model->channel_bytes_per_s == 48e9);
  }
  // Without an NVLS tree its caps are refused as unknown keys.
  j["communication"]["network_tuning"]["collective_model"].erase("nvls_tree");
  const InputError e = error_of_text(j.dump());
  CHECK(e.json_path() == "$.communication.network_tuning.collective_model.channel_caps_bytes_per_s.two_nodes.nvls_tree");
}
