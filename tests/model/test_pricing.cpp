// Which model prices a run: the shipped profile of the cluster's device by default, the roofline on
// request, a named profile otherwise; and the version mark every report carries.
#include <catch2/catch.hpp>
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/model/pricing.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"

using namespace fusesim;
using namespace fusesim::model;

TEST_CASE("FNV-1a 64 matches the published test vectors", "[model][pricing]") {
  // Offset basis for the empty string; "a" and "foobar" from the FNV reference test suite
  // (Landon Curt Noll's fnv test vectors, FNV-1a 64-bit).
  CHECK(fnv1a64_hex("") == "cbf29ce484222325");
  CHECK(fnv1a64_hex("a") == "af63dc4c8601ec8c");
  CHECK(fnv1a64_hex("foobar") == "85944171f73967e8");
}

TEST_CASE("pricing: the --profile and --roofline options exclude each other and neither is the automatic choice", "[model][pricing]") {
  CHECK(pricing_choice("", false).mode == PricingMode::automatic);
  CHECK(pricing_choice("", true).mode == PricingMode::roofline);
  const PricingChoice p = pricing_choice("h100-sxm", false);
  CHECK(p.mode == PricingMode::profile);
  CHECK(p.profile == "h100-sxm");
  try {
    pricing_choice("h100-sxm", true);
    FAIL("both accepted");
  } catch (const InputError& e) {
    CHECK(e.file() == "<command line>");
    CHECK(e.json_path() == "--roofline");
  }
}

TEST_CASE("a cluster whose device has a shipped profile is priced by it unless --roofline", "[model][pricing]") {
  topo::Cluster cluster = topo::load_cluster_by_name_or_path("dgx-h100");
  const topo::CommParams before = cluster.comm;
  ProfileCache cache;
  const Pricing automatic = pricing_for(PricingChoice{}, cluster, &cache);
  REQUIRE(automatic.profile != nullptr);
  CHECK(automatic.profile->profile.device_model == "h100-sxm");
  CHECK(automatic.profile->label == "<embedded:profiles/h100-sxm.json>");
  CHECK(dynamic_cast<const CalibratedCostModel*>(automatic.costs.get()) != nullptr);
  // The version mark is the digest of the shipped text.
  CHECK(automatic.profile->digest == fnv1a64_hex(*embedded_file("profiles/h100-sxm.json")));
  CHECK(automatic.describe().find("profile h100-sxm (<embedded:profiles/h100-sxm.json>") == 0);
  CHECK(automatic.to_json().at("model").get<std::string>() == "profile");
  // Chosen automatically, a shipped profile prices kernels only: the cluster keeps its links.
  CHECK(cluster.comm.sm_kernel_efficiency.value == before.sm_kernel_efficiency.value);
  CHECK(cluster.comm.sm_step_latency_s.value == before.sm_step_latency_s.value);
  // The cache hands the same loaded profile to the next run.
  CHECK(pricing_for(PricingChoice{}, cluster, &cache).profile == automatic.profile);

  const Pricing roofline = pricing_for(PricingChoice{PricingMode::roofline, ""}, cluster, &cache);
  CHECK(roofline.profile == nullptr);
  CHECK(dynamic_cast<const RooflineCostModel*>(roofline.costs.get()) != nullptr);
  CHECK(roofline.describe() == "roofline (--roofline)");
  CHECK(roofline.to_json().at("profile").is_null());
}

TEST_CASE("a device without a shipped profile falls back to the roofline and says why", "[model][pricing]") {
  topo::Cluster cluster = topo::load_cluster_by_name_or_path("dgx-b200");
  const Pricing p = pricing_for(PricingChoice{}, cluster);
  CHECK(p.profile == nullptr);
  CHECK(p.describe() == "roofline (no shipped profile for device model 'b200-sxm')");
}

TEST_CASE("a named profile of another device is refused naming the profile", "[model][pricing]") {
  topo::Cluster cluster = topo::load_cluster_by_name_or_path("dgx-b200");
  try {
    pricing_for(PricingChoice{PricingMode::profile, "h100-sxm"}, cluster);
    FAIL("accepted");
  } catch (const InputError& e) {
    CHECK(e.file() == "<embedded:profiles/h100-sxm.json>");
    CHECK(e.json_path() == "$.device");
  }
}

TEST_CASE("a device that runs another's kernels (kernels_as) is priced by that device's profile at its own rates",
          "[model][pricing]") {
  // Each kind's time is the profiled device's time over the rate fraction, and nothing else changes:
  // the same profile prices the same kernel on both clusters (the profile's model ignores the
  // device's own peak and bandwidth, which the two share where a fraction is 1).
  struct Case {
    const char* topology;
    const char* profiled_topology;
    const char* profile;
    double gemm, attention, elementwise;  // the topology files' rate fractions
  };
  for (const Case& c : {Case{"dgx-h800", "dgx-h100", "h100-sxm", 1.0, 1.0, 1.0},
                        Case{"dgx-a100-40gb", "dgx-a100", "a100-sxm", 1.0, 1.0, 0.7775},
                        Case{"grand-teton-h100", "dgx-h100", "h100-sxm", 0.877, 0.877, 0.7164}}) {
    INFO(c.topology);
    topo::Cluster cluster = topo::load_cluster_by_name_or_path(c.topology);
    topo::Cluster profiled = topo::load_cluster_by_name_or_path(c.profiled_topology);
    const topo::CommParams before = cluster.comm;
    const topo::DeviceModel& device = cluster.device(0);
    REQUIRE(device.kernels_as);
    CHECK(device.kernels_as->gemm.value == c.gemm);
    CHECK(device.kernels_as->attention.value == c.attention);
    CHECK(device.kernels_as->elementwise.value == c.elementwise);
    const Pricing here = pricing_for(PricingChoice{}, cluster);
    const Pricing there = pricing_for(PricingChoice{}, profiled);
    REQUIRE(here.profile != nullptr);
    CHECK(here.profile->label == std::string("<embedded:profiles/") + c.profile + ".json>");
    CHECK(here.describe().find("; " + device.name + " runs " + device.kernels_as->device_model + "'s kernels at ") !=
          std::string::npos);
    CHECK(here.to_json().contains("kernels_as"));
    CHECK(!there.to_json().contains("kernels_as"));  // other reports keep their keys
    AttentionKernel a;
    a.batch = 2, a.heads = 32, a.kv_heads = 8, a.seq_q = 8192, a.seq_kv = 8192, a.head_dim = 128, a.causal = true;
    const std::vector<std::pair<Kernel, double>> kernels{{GemmKernel{8192, 14336, 4096, 1}, c.gemm},
                                                         {a, c.attention},
                                                         {ElementwiseKernel{"add", 1 << 28, 0.0, 8192}, c.elementwise}};
    for (const auto& [k, fraction] : kernels) {
      INFO(kernel_kind(k));
      const KernelCost h = here.costs->cost(k, topo::Dtype::bf16, device);
      const KernelCost t = there.costs->cost(k, topo::Dtype::bf16, profiled.device(0));
      CHECK(std::max(h.compute_s, h.memory_s) == Approx(std::max(t.compute_s, t.memory_s) / fraction).epsilon(1e-12));
      CHECK(h.flops == t.flops);
    }
    // Named, the profiled device's profile is accepted and sets none of this cluster's links: it was
    // measured on another machine.
    const Pricing named = pricing_for(PricingChoice{PricingMode::profile, c.profile}, cluster);
    CHECK(named.links_applied.empty());
    CHECK(named.kernels_as == here.kernels_as);
    CHECK(cluster.comm.sm_kernel_efficiency.value == before.sm_kernel_efficiency.value);
    // The roofline prices from the device's own figures, without the fractions.
    const Pricing roofline = pricing_for(PricingChoice{PricingMode::roofline, ""}, cluster);
    CHECK(roofline.kernels_as.empty());
  }
}

TEST_CASE("a device that runs another's kernels without a shipped profile of either says so", "[model][pricing]") {
  topo::Cluster cluster = topo::load_cluster_by_name_or_path("dgx-b200");
  topo::DeviceModel& device = cluster.device_models.at("b200-sxm");
  device.kernels_as = topo::KernelsAs{"b100-sxm", {1.0, "test"}, {1.0, "test"}, {1.0, "test"}};
  const Pricing p = pricing_for(PricingChoice{}, cluster);
  CHECK(p.profile == nullptr);
  CHECK(p.describe() ==
        "roofline (no shipped profile for device model 'b200-sxm' nor for 'b100-sxm', whose kernels it runs)");
}

TEST_CASE("kernels_as naming a device of other SMs is refused where its profile is loaded", "[model][pricing]") {
  // The profile's GEMM model quantizes waves on its own SM count: an H100 PCIe (114 SMs) cannot run
  // the SXM5's (132) kernels at a rate fraction.
  topo::Cluster cluster = topo::load_cluster_by_name_or_path("h100-pcie");
  cluster.device_models.at("h100-pcie").kernels_as =
      topo::KernelsAs{"h100-sxm", {0.8, "test"}, {0.8, "test"}, {0.8, "test"}};
  try {
    pricing_for(PricingChoice{}, cluster);
    FAIL("accepted");
  } catch (const InputError& e) {
    CHECK(e.file() == "<embedded:profiles/h100-sxm.json>");
    CHECK(e.json_path() == "$.device.sm_count");
    CHECK(std::string(e.what()).find("kernels_as") != std::string::npos);
  }
}

TEST_CASE("no two shipped profiles claim one device model (the automatic choice is unambiguous)",
          "[model][pricing]") {
  std::set<std::string> models;
  for (const std::string& name : shipped_profile_names()) {
    const nlohmann::json doc = nlohmann::json::parse(*embedded_file("profiles/" + name + ".json"));
    const std::string model = doc.at("device").at("model").get<std::string>();
    CHECK(models.insert(model).second);
  }
  CHECK(!models.empty());
  // Every embedded profile is a default or an alternative: none is lost to both lists.
  CHECK(shipped_profile_names(true).size() == embedded_files("profiles").size());
}

TEST_CASE("an alternative profile is chosen by its name only, never by default", "[model][pricing]") {
  // profiles/alternatives/h100-sxm-cuda13.json describes the same device as profiles/h100-sxm.json
  // (its GEMMs timed with the libraries of 2026): a dgx-h100 run without --profile takes h100-sxm,
  // one that names the alternative takes it, and validate's default list holds the defaults alone.
  const std::vector<std::string> defaults = shipped_profile_names();
  const std::vector<std::string> all = shipped_profile_names(true);
  CHECK(std::find(defaults.begin(), defaults.end(), "h100-sxm") != defaults.end());
  CHECK(std::find(defaults.begin(), defaults.end(), "alternatives/h100-sxm-cuda13") == defaults.end());
  REQUIRE(std::find(all.begin(), all.end(), "alternatives/h100-sxm-cuda13") != all.end());
  // The defaults come first, in name order, then the alternatives.
  CHECK(std::vector<std::string>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(defaults.size())) == defaults);

  topo::Cluster automatic = topo::load_cluster_by_name_or_path("dgx-h100");
  const Pricing by_default = pricing_for(PricingChoice{}, automatic);
  REQUIRE(by_default.profile);
  CHECK(by_default.profile->label == "<embedded:profiles/h100-sxm.json>");

  topo::Cluster named = topo::load_cluster_by_name_or_path("dgx-h100");
  const Pricing alternative = pricing_for(PricingChoice{PricingMode::profile, "alternatives/h100-sxm-cuda13"}, named);
  REQUIRE(alternative.profile);
  CHECK(alternative.profile->label == "<embedded:profiles/alternatives/h100-sxm-cuda13.json>");
  CHECK(alternative.profile->profile.device_model == by_default.profile->profile.device_model);
  // The one difference: the bf16 GEMMs of 2026 (102 burst samples), which the default leaves out.
  CHECK(alternative.profile->profile.gemm.size() == by_default.profile->profile.gemm.size() + 102);
  // They are faster than vidur's on the same shapes (1/1.15 of the time on the median of the 20
  // both timed), so the alternative prices a large training GEMM faster.
  const GemmKernel fc1{8192, 14336, 4096, 1};
  const auto& device = automatic.device(0);
  CHECK(alternative.costs->cost(fc1, topo::Dtype::bf16, device).duration_ps <
        by_default.costs->cost(fc1, topo::Dtype::bf16, device).duration_ps);
}

TEST_CASE("flops() is cost().flops, bit for bit, for the roofline and every shipped profile", "[model][pricing]") {
  // The analysis counts a step's FLOPs with flops(), which skips the pricing; MFU must not move by a
  // bit. GEMMs of every kind the generators emit, fused and unfused attention both ways, element-wise.
  std::vector<Kernel> kernels;
  for (std::int64_t m : {1, 4096, 8191})
    for (std::int64_t batch : {1, 3})
      for (bool acc : {false, true}) kernels.push_back(GemmKernel{m, 28672, 8192, batch, acc});
  for (bool unfused : {false, true})
    for (Pass pass : {Pass::forward, Pass::backward})
      for (bool causal : {false, true}) {
        AttentionKernel a;
        a.batch = 2, a.heads = 8, a.kv_heads = 2, a.seq_q = 1024, a.seq_kv = 4096, a.head_dim = 128;
        a.causal = causal, a.q_offset = 3072, a.pass = pass, a.unfused = unfused;
        kernels.push_back(a);
      }
  kernels.push_back(ElementwiseKernel{"rmsnorm", 1 << 26, 3.0e7, 8192});
  kernels.push_back(ElementwiseKernel{"adam", 123456789, 1.2e9, 0});
  for (const char* topology : {"dgx-h100", "dgx-a100", "hgx-h200"}) {
    topo::Cluster cluster = topo::load_cluster_by_name_or_path(topology);
    const topo::DeviceModel& device = cluster.device(0);
    for (PricingMode mode : {PricingMode::automatic, PricingMode::roofline}) {
      const Pricing pricing = pricing_for(PricingChoice{mode, ""}, cluster);
      for (topo::Dtype dtype : {topo::Dtype::bf16, topo::Dtype::fp8}) {
        if (!device.peak_flops_per_s.count(dtype)) continue;
        for (const Kernel& k : kernels) {
          INFO(topology << " " << pricing.describe() << " " << kernel_kind(k));
          CHECK(pricing.costs->flops(k, dtype, device) == pricing.costs->cost(k, dtype, device).flops);
          CHECK(kernel_flops(k) == pricing.costs->cost(k, dtype, device).flops);
        }
      }
    }
  }
}
