// Workload files: the shipped ones, defaults, parameter counts, and the exact file and JSON path of
// every rejection (docs/workload.md).
#include <catch2/catch.hpp>

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "fusesim/model/workload.hpp"
#include "fusesim/util/embedded.hpp"
#include "fusesim/util/error.hpp"

using namespace fusesim;
using namespace fusesim::model;
using nlohmann::json;

namespace {

const std::string kData = std::string(FUSESIM_SOURCE_DIR) + "/tests/data/model/";
const std::string kShipped = std::string(FUSESIM_SOURCE_DIR) + "/workloads/";

// A valid workload (Llama-3-8B shape, TP 8) that each error test breaks in one place.
json valid() {
  return json::parse(R"({
    "schema_version": 1,
    "name": "test",
    "model": {"name": "m", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
              "gated_mlp": true, "vocab": 128256, "source": "test"},
    "training": {"sequence_length": 8192, "micro_batch": 1, "dtype": "bf16"},
    "parallel": {"tp": 8, "up": 1, "dp": 1},
    "schedule": {"kind": "commfuse"}
  })");
}

Workload parse(const json& j, const std::string& label = "w.json") {
  return parse_workload(JsonDocument::from_json(j, label));
}

// Parses `j`, expecting an InputError at `path` naming `label`.
void expect_error(const json& j, const std::string& path, const std::string& label = "w.json") {
  try {
    parse(j, label);
    FAIL("accepted a workload that should fail at " << path);
  } catch (const InputError& e) {
    INFO(e.what());
    CHECK(e.file() == label);
    CHECK(e.json_path() == path);
  }
}

json with(std::function<void(json&)> edit) {
  json j = valid();
  edit(j);
  return j;
}

topo::DeviceModel device(const std::string& name, int sms) {
  topo::DeviceModel d;
  d.name = name;
  d.peak_flops_per_s[topo::Dtype::bf16] = {989e12, "test"};
  d.sm_count = sms;
  return d;
}

// Two nodes of 8 devices: 16 ranks, node-major.
topo::Cluster cluster_2x8() {
  topo::Cluster c;
  c.name = "two-nodes";
  c.num_nodes = 2;
  c.devices_per_node = 8;
  c.device_models["h100"] = device("h100", 132);
  for (int r = 0; r < 16; ++r) {
    c.rank_vertex.push_back(r);
    c.rank_model.push_back("h100");
  }
  return c;
}

void expect_fit_error(const Workload& w, const topo::Cluster& c, const std::string& path) {
  try {
    check_fits(w, "workloads/x.json", c);
    FAIL("fits, but should fail at " << path);
  } catch (const InputError& e) {
    INFO(e.what());
    CHECK(e.file() == "workloads/x.json");
    CHECK(e.json_path() == path);
  }
}

}  // namespace

TEST_CASE("Llama-3-8B parameter count derived from the architecture", "[model][workload]") {
  const Workload w = load_workload("llama-3-8b");
  // Per layer, h = 4096, head_dim 128, 32 query heads, 8 key/value heads, ffn 14336, gated:
  //   Q 4096x4096 = 16,777,216; K, V 4096x1024 = 4,194,304 each; O 4096x4096 = 16,777,216 -> 41,943,040
  //   MLP 3 x 4096 x 14336 = 176,160,768; two norms 2 x 4096 = 8,192
  //   layer = 41,943,040 + 176,160,768 + 8,192 = 218,112,000
  // Total = 32 x 218,112,000 = 6,979,584,000
  //       + embedding and untied LM head 2 x 128256 x 4096 = 1,050,673,152 + final norm 4,096
  //       = 8,030,261,248 (Meta's published 8.03B)
  CHECK(w.arch.head_dim == 128);
  CHECK(w.arch.q_width() == 4096);
  CHECK(w.arch.kv_width() == 1024);
  CHECK(w.arch.params_per_layer() == 218'112'000);
  CHECK(w.arch.params_total() == 8'030'261'248);
}

TEST_CASE("Llama-3-70B parameter count derived from the architecture", "[model][workload]") {
  const Workload w = load_workload("llama-3-70b");
  // h = 8192, head_dim 128, 64 query heads, 8 key/value heads (1024 wide), ffn 28672, gated:
  //   Q 67,108,864; K, V 8192x1024 = 8,388,608 each; O 67,108,864 -> 150,994,944
  //   MLP 3 x 8192 x 28672 = 704,643,072; norms 16,384 -> layer = 855,654,400
  // Total = 80 x 855,654,400 = 68,452,352,000 + 2 x 128256 x 8192 = 2,101,346,304 + 8,192
  //       = 70,553,706,496 (~70.6e9)
  CHECK(w.arch.params_per_layer() == 855'654'400);
  CHECK(w.arch.params_total() == 70'553'706'496);
}

TEST_CASE("GPT-3 175B and a non-gated MLP", "[model][workload]") {
  const Workload w = load_workload("gpt-3-175b");
  // h = 12288: attention 4h^2 = 603,979,776; MLP 2 x 12288 x 49152 = 1,207,959,552; norms 24,576
  //   layer = 1,811,963,904; x 96 = 173,948,534,784
  //   + 2 x 50257 x 12288 = 1,235,116,032 + 12,288 = 175,183,663,104 (biases and position embeddings not counted)
  CHECK(w.arch.head_dim == 128);
  CHECK(w.arch.params_per_layer() == 1'811'963'904);
  CHECK(w.arch.params_total() == 175'183'663'104);
}

TEST_CASE("The CommFuse TPSP block has no embedding", "[model][workload]") {
  const Workload w = load_workload("commfuse-tpsp-block");
  CHECK(w.arch.layers == 1);
  CHECK(w.arch.vocab == 0);
  CHECK(w.parallel.tp == 4);
  CHECK(w.sequence_length == 8192);
  // 4 x 4096^2 + 2 x 4096 x 16384 + 2 x 4096 = 67,108,864 + 134,217,728 + 8,192 = 201,334,784; + final norm 4,096.
  CHECK(w.arch.params_per_layer() == 201'334'784);
  CHECK(w.arch.params_total() == 201'338'880);
}

TEST_CASE("Every shipped workload loads by name and by path, identically", "[model][workload]") {
  const auto files = embedded_files("workloads");
  // The four named in the project brief at least.
  for (const char* stem : {"llama-3-8b", "llama-3-70b", "gpt-3-175b", "commfuse-tpsp-block"}) {
    INFO(stem);
    const Workload by_name = load_workload(stem);
    const Workload by_path = load_workload(kShipped + stem + ".json");
    CHECK(by_name.name == by_path.name);
    CHECK(by_name.arch.params_total() == by_path.arch.params_total());
    CHECK(by_name.schedule.kind == ScheduleKind::commfuse);
    CHECK(by_name.dtype == topo::Dtype::bf16);
    CHECK(by_name.backward);
    CHECK(by_name.arch.causal);
    CHECK(!by_name.arch.source.empty());
  }
  CHECK(files.size() >= 4);
  for (const auto& f : files) {
    INFO(f);
    CHECK_NOTHROW(load_workload(f.substr(std::string("workloads/").size())));
    CHECK_NOTHROW(load_workload(std::string(FUSESIM_SOURCE_DIR) + "/" + f));
  }
}

TEST_CASE("Shipped workloads carry the published shapes", "[model][workload]") {
  const Workload l8 = load_workload("llama-3-8b");
  CHECK(l8.arch.layers == 32);
  CHECK(l8.arch.hidden == 4096);
  CHECK(l8.arch.heads == 32);
  CHECK(l8.arch.kv_heads == 8);
  CHECK(l8.arch.ffn_hidden == 14336);
  CHECK(l8.arch.gated_mlp);
  CHECK(l8.arch.vocab == 128256);
  CHECK(l8.parallel.tp == 8);
  CHECK(l8.sequence_length == 8192);
  const Workload l70 = load_workload("llama-3-70b");
  CHECK(l70.arch.layers == 80);
  CHECK(l70.arch.ffn_hidden == 28672);
  CHECK(l70.micro_batch == 1);
  const Workload g3 = load_workload("gpt-3-175b");
  CHECK(g3.arch.kv_heads == 96);
  CHECK(!g3.arch.gated_mlp);
  CHECK(g3.arch.vocab == 50257);
  CHECK(g3.sequence_length == 2048);
}

TEST_CASE("Optional keys take their documented defaults", "[model][workload]") {
  const Workload w = load_workload(kData + "minimal-defaults.json");
  CHECK(w.name == "minimal");
  CHECK(w.arch.head_dim == 64);  // 256 / 4
  CHECK(w.arch.causal);
  CHECK(w.arch.vocab_divisible_by == 128);  // Megatron-LM's --make-vocab-size-divisible-by default
  CHECK(w.grad_accumulation == 1);
  CHECK(w.micro_batch == 2);
  CHECK(w.tokens_per_microbatch() == 1024);
  CHECK(w.dtype == topo::Dtype::fp16);
  CHECK(w.parallel.world() == 2);
  CHECK(w.schedule.kind == ScheduleKind::baseline);
  CHECK(w.schedule.slices == 4);
  CHECK(w.schedule.collective_engine == CommEngine::sm_kernel);
  CHECK(w.schedule.p2p_engine == CommEngine::sm_kernel);  // like for like with the collectives
  CHECK(!w.schedule.comm_sms.has_value());
  CHECK(!w.schedule.query_split_attention);
  CHECK(w.backward);
}

TEST_CASE("Every optional key can be set", "[model][workload]") {
  json j = valid();
  j["model"]["head_dim"] = 96;  // q_width 32 x 96 = 3072 != hidden: allowed when given explicitly
  j["model"]["causal"] = false;
  j["model"]["vocab_divisible_by"] = 64;
  j["training"]["grad_accumulation"] = 16;
  j["training"]["dtype"] = "fp8";
  j["schedule"] = {{"kind", "slice"},           {"slices", 8},     {"collective_engine", "copy_engine"},
                   {"p2p_engine", "sm_kernel"}, {"comm_sms", 16},  {"query_split_attention", true}};
  j["backward"] = false;
  const Workload w = parse(j);
  CHECK(w.arch.head_dim == 96);
  CHECK(w.arch.q_width() == 3072);
  CHECK(!w.arch.causal);
  CHECK(w.arch.vocab_divisible_by == 64);
  // 128256 to a multiple of 64 x tp 2 = 128: 1002 x 128, no padding; of 64 x 5 = 320:
  // ceil(400.8) = 401 -> 128,320.
  CHECK(w.arch.padded_vocab(2) == 128'256);
  CHECK(w.arch.padded_vocab(5) == 128'320);
  CHECK(w.grad_accumulation == 16);
  CHECK(w.dtype == topo::Dtype::fp8);
  CHECK(w.schedule.kind == ScheduleKind::slice);
  CHECK(w.schedule.slices == 8);
  CHECK(w.schedule.collective_engine == CommEngine::copy_engine);
  CHECK(w.schedule.p2p_engine == CommEngine::sm_kernel);
  CHECK(w.schedule.comm_sms == 16);
  CHECK(w.schedule.query_split_attention);
  CHECK(!w.backward);
  // Explicit head_dim: Q 4096 x 3072 + K, V 4096 x 768 each + O 3072 x 4096 = 31,457,280
  //   + MLP 176,160,768 + norms 8,192 = 207,626,240.
  CHECK(w.arch.params_per_layer() == 207'626'240);
}

TEST_CASE("Key/value heads replicated when fewer than tensor-parallel ranks", "[model][workload]") {
  // 8 key/value heads over tp 16: each KV head is held by 2 ranks.
  json j = valid();
  j["parallel"]["tp"] = 16;
  CHECK(parse(j).parallel.tp == 16);
  // Ulysses on top: 32 heads over tp 8 x up 4 = 32 ranks; 8 KV heads replicated 4 ways.
  j["parallel"]["tp"] = 8;
  j["parallel"]["up"] = 4;
  CHECK(parse(j).parallel.world() == 32);
}

TEST_CASE("Loader errors name the file and the JSON path", "[model][workload][errors]") {
  SECTION("syntax error, from a file") {
    const std::string path = kData + "bad-syntax.json";
    try {
      load_workload(path);
      FAIL("accepted broken JSON");
    } catch (const InputError& e) {
      CHECK(e.file() == path);
      CHECK(e.json_path() == "$");
      CHECK(e.message().find("line 6") != std::string::npos);
    }
  }
  SECTION("unknown key, from a file") {
    const std::string path = kData + "unknown-key.json";
    try {
      load_workload(path);
      FAIL("accepted an unknown key");
    } catch (const InputError& e) {
      CHECK(e.file() == path);
      CHECK(e.json_path() == "$.model.rope_theta");
    }
  }
  SECTION("heads not divisible by tp, from a file") {
    const std::string path = kData + "heads-not-divisible.json";
    try {
      load_workload(path);
      FAIL("accepted 4 heads over tp 3");
    } catch (const InputError& e) {
      CHECK(e.file() == path);
      CHECK(e.json_path() == "$.parallel.tp");
    }
  }
  SECTION("no such file and no such shipped name") {
    try {
      load_workload("llama-9");
      FAIL("found llama-9");
    } catch (const InputError& e) {
      CHECK(e.file() == "llama-9");
      CHECK(e.json_path() == "$");
      CHECK(e.message().find("llama-3-8b") != std::string::npos);  // lists the shipped names
    }
  }
  SECTION("syntax error, from text") {
    try {
      parse_workload(JsonDocument::parse("{\"schema_version\": 1,", "text.json"));
      FAIL("accepted truncated JSON");
    } catch (const InputError& e) {
      CHECK(e.file() == "text.json");
      CHECK(e.json_path() == "$");
    }
  }
  SECTION("root not an object") { expect_error(json::array({1, 2}), "$"); }

  SECTION("missing keys") {
    expect_error(with([](json& j) { j.erase("schema_version"); }), "$.schema_version");
    expect_error(with([](json& j) { j.erase("name"); }), "$.name");
    expect_error(with([](json& j) { j.erase("model"); }), "$.model");
    expect_error(with([](json& j) { j["model"].erase("ffn_hidden"); }), "$.model.ffn_hidden");
    expect_error(with([](json& j) { j["model"].erase("source"); }), "$.model.source");
    expect_error(with([](json& j) { j["model"].erase("gated_mlp"); }), "$.model.gated_mlp");
    expect_error(with([](json& j) { j["training"].erase("dtype"); }), "$.training.dtype");
    expect_error(with([](json& j) { j["training"].erase("micro_batch"); }), "$.training.micro_batch");
    expect_error(with([](json& j) { j["parallel"].erase("dp"); }), "$.parallel.dp");
    expect_error(with([](json& j) { j.erase("schedule"); }), "$.schedule");
    expect_error(with([](json& j) { j["schedule"].erase("kind"); }), "$.schedule.kind");
  }
  SECTION("unknown keys") {
    expect_error(with([](json& j) { j["optimizer"] = "adam"; }), "$.optimizer");
    expect_error(with([](json& j) { j["training"]["seq_len"] = 4096; }), "$.training.seq_len");
    expect_error(with([](json& j) { j["parallel"]["pipeline"] = 2; }), "$.parallel.pipeline");
    expect_error(with([](json& j) { j["schedule"]["slice"] = 2; }), "$.schedule.slice");
  }
  SECTION("pipeline stages") {
    // 32 layers: pp 3 does not divide them, pp 4 x virtual_stages 3 neither.
    expect_error(with([](json& j) { j["parallel"]["pp"] = 3; }), "$.parallel.pp");
    expect_error(with([](json& j) { j["parallel"]["pp"] = 0; }), "$.parallel.pp");
    expect_error(with([](json& j) { j["parallel"]["pp"] = "4"; }), "$.parallel.pp");
    expect_error(with([](json& j) { j["parallel"]["pp_schedule"] = "gpipe"; }), "$.parallel.pp_schedule");
    expect_error(with([](json& j) {
                   j["parallel"]["pp"] = 4;
                   j["parallel"]["pp_schedule"] = "interleaved";
                   j["parallel"]["virtual_stages"] = 3;
                   j["training"]["grad_accumulation"] = 8;
                 }),
                 "$.parallel.pp");
    expect_error(with([](json& j) {
                   j["parallel"]["pp"] = 4;
                   j["parallel"]["pp_schedule"] = "interleaved";
                   j["parallel"]["virtual_stages"] = 2;
                   j["training"]["grad_accumulation"] = 6;
                 }),
                 "$.training.grad_accumulation");
    expect_error(with([](json& j) {
                   j["parallel"]["pp"] = 4;
                   j["parallel"]["pp_schedule"] = "interleaved";
                   j["training"]["grad_accumulation"] = 8;
                 }),
                 "$.parallel.virtual_stages");
    expect_error(with([](json& j) { j["parallel"]["pp_schedule"] = "interleaved"; }), "$.parallel.pp_schedule");
    expect_error(with([](json& j) {
                   j["parallel"]["pp"] = 4;
                   j["parallel"]["virtual_stages"] = 2;
                 }),
                 "$.parallel.virtual_stages");
    expect_error(with([](json& j) {
                   j["parallel"]["pp"] = 2;
                   j["parallel"]["dp"] = 2;
                   j["parallel"]["dp_sharding"] = "zero3";
                 }),
                 "$.parallel.dp_sharding");
    const Workload w = parse(with([](json& j) {
      j["parallel"]["pp"] = 4;
      j["parallel"]["pp_schedule"] = "interleaved";
      j["parallel"]["virtual_stages"] = 2;
      j["training"]["grad_accumulation"] = 8;
    }));
    CHECK(w.parallel.pp == 4);
    CHECK(w.parallel.pp_schedule == PipelineSchedule::interleaved);
    CHECK(w.parallel.virtual_stages == 2);
    CHECK(w.parallel.world() == 32);
    CHECK(w.parallel.stage_ranks() == 8);
  }
  SECTION("zb-h1") {
    // One chunk per stage, stages to split B and W over, and no Ulysses (its QKV backward does not split).
    expect_error(with([](json& j) {
                   j["parallel"]["pp"] = 4;
                   j["parallel"]["pp_schedule"] = "zb-h1";
                   j["parallel"]["virtual_stages"] = 2;
                 }),
                 "$.parallel.virtual_stages");
    expect_error(with([](json& j) { j["parallel"]["pp_schedule"] = "zb-h1"; }), "$.parallel.pp_schedule");
    expect_error(with([](json& j) {
                   j["parallel"]["pp"] = 4;
                   j["parallel"]["pp_schedule"] = "zb-h1";
                   j["parallel"]["up"] = 2;
                 }),
                 "$.parallel.pp_schedule");
    const Workload w = parse(with([](json& j) {
      j["parallel"]["pp"] = 4;
      j["parallel"]["pp_schedule"] = "zb-h1";
      j["training"]["grad_accumulation"] = 5;  // any count: ZB-H1 has no groups of pp
    }));
    CHECK(w.parallel.pp_schedule == PipelineSchedule::zb_h1);
    CHECK(to_string(w.parallel.pp_schedule) == "zb-h1");
    CHECK(w.parallel.virtual_stages == 1);
  }
  SECTION("wrong types") {
    expect_error(with([](json& j) { j["model"]["layers"] = "32"; }), "$.model.layers");
    expect_error(with([](json& j) { j["model"]["hidden"] = 4096.5; }), "$.model.hidden");
    expect_error(with([](json& j) { j["model"]["gated_mlp"] = "yes"; }), "$.model.gated_mlp");
    expect_error(with([](json& j) { j["model"]["name"] = 7; }), "$.model.name");
    expect_error(with([](json& j) { j["training"] = 8192; }), "$.training");
    expect_error(with([](json& j) { j["parallel"]["tp"] = nullptr; }), "$.parallel.tp");
    expect_error(with([](json& j) { j["schedule"]["query_split_attention"] = 1; }),
                 "$.schedule.query_split_attention");
    expect_error(with([](json& j) { j["backward"] = "true"; }), "$.backward");
    expect_error(with([](json& j) { j["schema_version"] = "1"; }), "$.schema_version");
  }
  SECTION("bad choices") {
    expect_error(with([](json& j) { j["schema_version"] = 2; }), "$.schema_version");
    expect_error(with([](json& j) { j["training"]["dtype"] = "bf17"; }), "$.training.dtype");
    expect_error(with([](json& j) { j["schedule"]["kind"] = "fused"; }), "$.schedule.kind");
    expect_error(with([](json& j) { j["schedule"]["p2p_engine"] = "nvlink"; }), "$.schedule.p2p_engine");
    expect_error(with([](json& j) { j["schedule"]["collective_engine"] = ""; }), "$.schedule.collective_engine");
    expect_error(with([](json& j) { j["name"] = ""; }), "$.name");
  }
  SECTION("negative and zero") {
    expect_error(with([](json& j) { j["training"]["micro_batch"] = -1; }), "$.training.micro_batch");
    expect_error(with([](json& j) { j["model"]["heads"] = -32; }), "$.model.heads");
    expect_error(with([](json& j) { j["model"]["layers"] = 0; }), "$.model.layers");
    expect_error(with([](json& j) { j["model"]["vocab"] = -1; }), "$.model.vocab");
    expect_error(with([](json& j) { j["parallel"]["dp"] = 0; }), "$.parallel.dp");
    expect_error(with([](json& j) { j["schedule"]["slices"] = 0; }), "$.schedule.slices");
    expect_error(with([](json& j) { j["schedule"]["comm_sms"] = 0; }), "$.schedule.comm_sms");
    expect_error(with([](json& j) { j["training"]["grad_accumulation"] = 0; }), "$.training.grad_accumulation");
    expect_error(with([](json& j) { j["model"]["head_dim"] = 0; }), "$.model.head_dim");
    expect_error(with([](json& j) { j["model"]["vocab_divisible_by"] = 0; }), "$.model.vocab_divisible_by");
    expect_error(with([](json& j) { j["model"]["vocab_divisible_by"] = -128; }), "$.model.vocab_divisible_by");
    expect_error(with([](json& j) { j["model"]["vocab_divisible_by"] = 1'000'001; }), "$.model.vocab_divisible_by");
    expect_error(with([](json& j) { j["model"]["vocab_divisible_by"] = "128"; }), "$.model.vocab_divisible_by");
  }
  SECTION("absurd values") {
    expect_error(with([](json& j) { j["model"]["layers"] = 1001; }), "$.model.layers");
    expect_error(with([](json& j) { j["model"]["hidden"] = 2'000'000; }), "$.model.hidden");
    expect_error(with([](json& j) { j["training"]["sequence_length"] = 16 * 1024 * 1024 + 8; }),
                 "$.training.sequence_length");
    expect_error(with([](json& j) { j["parallel"]["tp"] = 65537; }), "$.parallel.tp");
    expect_error(with([](json& j) { j["schedule"]["slices"] = 1025; }), "$.schedule.slices");
    expect_error(with([](json& j) { j["model"]["layers"] = 1e300; }), "$.model.layers");
    expect_error(with([](json& j) { j["model"]["ffn_hidden"] = 18446744073709551615ULL; }), "$.model.ffn_hidden");
    // tp 8 x dp 65536 = 524,288 ranks is allowed; x up 4 = 2,097,152 exceeds the 2^20 limit.
    CHECK(parse(with([](json& j) { j["parallel"]["dp"] = 65536; })).parallel.world() == 524'288);
    expect_error(with([](json& j) {
                   j["parallel"]["dp"] = 65536;
                   j["parallel"]["up"] = 4;
                 }),
                 "$.parallel");
    // The widest row is the logits, 128,256 wide (FC1 is 2 x 14336 = 28,672): 16,777,216 tokens x 4096
    // samples x 128,256 = 8.8e15 elements > 2^48 = 2.8e14.
    expect_error(with([](json& j) {
                   j["training"]["sequence_length"] = 16 * 1024 * 1024;
                   j["training"]["micro_batch"] = 4096;
                 }),
                 "$.training.micro_batch");
  }
}

TEST_CASE("Consistency errors point at the key to change", "[model][workload][errors]") {
  // hidden 4001 over 32 heads without head_dim: 4001 / 32 is not an integer.
  expect_error(with([](json& j) { j["model"]["hidden"] = 4001; }), "$.model.heads");
  // ... and with an explicit head_dim the same width is fine.
  CHECK_NOTHROW(parse(with([](json& j) {
    j["model"]["hidden"] = 4001;
    j["model"]["head_dim"] = 128;
  })));
  // 6 key/value heads do not divide 32 query heads.
  expect_error(with([](json& j) { j["model"]["kv_heads"] = 6; }), "$.model.kv_heads");
  // More key/value heads than query heads.
  expect_error(with([](json& j) { j["model"]["kv_heads"] = 64; }), "$.model.kv_heads");
  // 32 heads over tp 6 (sequence 8190 would divide; the heads are checked first).
  expect_error(with([](json& j) { j["parallel"]["tp"] = 6; }), "$.parallel.tp");
  // 32 heads over tp 8 x up 8 = 64.
  expect_error(with([](json& j) { j["parallel"]["up"] = 8; }), "$.parallel.up");
  // 48 heads, 12 KV heads, tp 8: 48 % 8 == 0, but neither 12 | 8 nor 8 | 12.
  expect_error(with([](json& j) {
                 j["model"]["hidden"] = 6144;
                 j["model"]["heads"] = 48;
                 j["model"]["kv_heads"] = 12;
               }),
               "$.parallel.tp");
  // 48 heads, 12 KV heads, tp 4 (12 % 4 == 0), up 3 (48 % 12 == 0): 12 | 12 -> fine; up 2 x tp 4 = 8 -> not.
  CHECK_NOTHROW(parse(with([](json& j) {
    j["model"]["hidden"] = 6144;
    j["model"]["heads"] = 48;
    j["model"]["kv_heads"] = 12;
    j["parallel"]["tp"] = 4;
    j["parallel"]["up"] = 3;
    j["training"]["sequence_length"] = 8184;  // 12 x 682
  })));
  expect_error(with([](json& j) {
                 j["model"]["hidden"] = 6144;
                 j["model"]["heads"] = 48;
                 j["model"]["kv_heads"] = 12;
                 j["parallel"]["tp"] = 4;
                 j["parallel"]["up"] = 2;
               }),
               "$.parallel.up");
  // 8190 tokens over tp 8.
  expect_error(with([](json& j) { j["training"]["sequence_length"] = 8190; }), "$.training.sequence_length");
  // tp 4 x up 2 = 8 must divide the sequence: 8188 = 4 x 2047 is not a multiple of 8.
  expect_error(with([](json& j) {
                 j["parallel"]["tp"] = 4;
                 j["parallel"]["up"] = 2;
                 j["training"]["sequence_length"] = 8188;
               }),
               "$.training.sequence_length");
}

TEST_CASE("Slice-overlap needs the sequence divisible by tp x up x slices", "[model][workload][errors]") {
  // 8192 = 2^13 over tp 8 x 3 slices = 24: not divisible.
  expect_error(with([](json& j) {
                 j["schedule"]["kind"] = "slice";
                 j["schedule"]["slices"] = 3;
               }),
               "$.schedule.slices");
  // 8160 = 24 x 340: divisible.
  CHECK(parse(with([](json& j) {
          j["schedule"]["kind"] = "slice";
          j["schedule"]["slices"] = 3;
          j["training"]["sequence_length"] = 8160;
        })).schedule.slices == 3);
  // 8192 over tp 8 x 1024 slices = 8192: one token per slice shard, allowed.
  CHECK_NOTHROW(parse(with([](json& j) {
    j["schedule"]["kind"] = "slice";
    j["schedule"]["slices"] = 1024;
  })));
  // The slice count is not checked against the sequence by the other schedules.
  CHECK_NOTHROW(parse(with([](json& j) { j["schedule"]["slices"] = 3; })));
  // A command-line switch to slice-overlap after loading is checked by validate_workload.
  Workload w = parse(with([](json& j) { j["schedule"]["slices"] = 3; }));
  w.schedule.kind = ScheduleKind::slice;
  try {
    validate_workload(w, "<command line>");
    FAIL("accepted 3 slices of 8192 tokens over tp 8");
  } catch (const InputError& e) {
    CHECK(e.file() == "<command line>");
    CHECK(e.json_path() == "$.schedule.slices");
  }
}

TEST_CASE("check_fits against a hand-built cluster", "[model][workload][errors]") {
  const topo::Cluster c = cluster_2x8();
  Workload w = parse(valid());  // tp 8, world 8

  SECTION("fits") {
    CHECK_NOTHROW(check_fits(w, "workloads/x.json", c));
    w.parallel.dp = 2;  // 16 ranks of 16
    CHECK_NOTHROW(check_fits(w, "workloads/x.json", c));
    w.parallel.tp = 4;  // 4 divides 8
    w.parallel.dp = 3;  // 12 of 16 ranks: a subset is allowed
    CHECK_NOTHROW(check_fits(w, "workloads/x.json", c));
  }
  SECTION("world larger than the cluster") {
    w.parallel.dp = 4;  // 8 x 4 = 32 > 16
    expect_fit_error(w, c, "$.parallel");
    w.parallel.dp = 1;
    w.parallel.up = 3;  // 24 > 16
    expect_fit_error(w, c, "$.parallel");
  }
  SECTION("tp larger than a node") {
    w.parallel.tp = 16;  // 16 ranks in all, but a node holds 8
    expect_fit_error(w, c, "$.parallel.tp");
  }
  SECTION("tp not dividing the node") {
    w.parallel.tp = 3;
    expect_fit_error(w, c, "$.parallel.tp");
  }
  SECTION("no peak for the data type") {
    w.dtype = topo::Dtype::fp8;
    expect_fit_error(w, c, "$.training.dtype");
  }
  SECTION("communication holding every SM") {
    w.schedule.comm_sms = 132;
    expect_fit_error(w, c, "$.schedule.comm_sms");
    w.schedule.comm_sms = 131;
    CHECK_NOTHROW(check_fits(w, "workloads/x.json", c));
  }
  SECTION("only the ranks used are checked") {
    topo::Cluster mixed = cluster_2x8();
    mixed.device_models["old"] = device("old", 108);
    mixed.device_models["old"].peak_flops_per_s.clear();
    for (int r = 8; r < 16; ++r) mixed.rank_model[r] = "old";
    CHECK_NOTHROW(check_fits(w, "workloads/x.json", mixed));  // ranks 0..7 only
    w.parallel.dp = 2;
    expect_fit_error(w, mixed, "$.training.dtype");
  }
}

TEST_CASE("Any single mutated value is accepted or refused with an InputError", "[model][workload][errors]") {
  // Every leaf of the valid document replaced by each of a few hostile values: the reader must either
  // accept the result or throw InputError naming the file; never another exception, never a crash.
  const json base = valid();
  const std::vector<json> hostile = {nullptr, -1, 0, 1, 3, 1e300, -1e300, 0.5, "x", "", json::array(),
                                     json::object(), true, 18446744073709551615ULL, 9223372036854775807LL};
  std::vector<json::json_pointer> leaves;
  const json flat = base.flatten();
  for (auto it = flat.begin(); it != flat.end(); ++it) leaves.emplace_back(it.key());
  REQUIRE(leaves.size() == 18);  // 1 + 1 + 9 model keys + 3 training + 3 parallel + 1 schedule
  int accepted = 0, refused = 0;
  for (const auto& leaf : leaves)
    for (const auto& h : hostile) {
      json j = base;
      j[leaf] = h;
      INFO(leaf.to_string() << " = " << h.dump());
      try {
        parse(j);
        ++accepted;
      } catch (const InputError& e) {
        CHECK(e.file() == "w.json");
        CHECK(e.json_path().rfind("$", 0) == 0);
        ++refused;
      }
    }
  // Some values are legal somewhere (1 for a degree, true for gated_mlp, "x" for a name).
  CHECK(accepted > 0);
  CHECK(refused > accepted);
}

TEST_CASE("Sharding, recomputation, optimizer and DP bucket keys: defaults and values", "[model][workload]") {
  // Defaults (docs/workload.md): plain DDP, nothing recomputed, Adam, PyTorch DDP's 25 MB buckets.
  const Workload d = parse(valid());
  CHECK(d.parallel.dp_sharding == DpSharding::ddp);
  CHECK(d.recompute == Recompute::none);
  CHECK(d.optimizer == Optimizer::adam);
  CHECK(d.schedule.dp_bucket_bytes == 25'000'000);
  CHECK(d.schedule.dp_fuse_min_rows == 128);  // one 128-row GEMM tile

  json j = valid();
  j["parallel"]["dp_sharding"] = "zero3";
  j["training"]["recompute"] = "full";
  j["training"]["optimizer"] = "sgd";
  j["schedule"]["dp_bucket_bytes"] = 50e6;  // an integral JSON float is an integer
  j["schedule"]["dp_fuse_min_rows"] = 1;
  const Workload w = parse(j);
  CHECK(w.schedule.dp_fuse_min_rows == 1);
  CHECK(w.parallel.dp_sharding == DpSharding::zero3);
  CHECK(w.recompute == Recompute::full);
  CHECK(w.optimizer == Optimizer::sgd);
  CHECK(w.schedule.dp_bucket_bytes == 50'000'000);
  CHECK(dp_bucket_bytes(w) == 50'000'000);  // given: the file's, whatever the sharding
  // Not given: the framework's bucket. DDP and ZeRO-3 (PyTorch DDP, FSDP): 25 MB. ZeRO-1/2 (Megatron-
  // Core's distributed optimizer): max(40M, 1M x dp) fp32 gradient elements: 40M x 4 B = 160 MB at
  // dp 8 or 40; 48M x 4 B = 192 MB at dp 48; in bf16 gradients (grad_reduce_dtype) half of it.
  CHECK(dp_bucket_bytes(d) == 25'000'000);
  Workload z = d;
  z.parallel.dp_sharding = DpSharding::zero1;
  z.parallel.dp = 8;
  CHECK(dp_bucket_bytes(z) == 160'000'000);
  z.parallel.dp = 48;
  CHECK(dp_bucket_bytes(z) == 192'000'000);
  z.parallel.dp_sharding = DpSharding::zero2;
  z.grad_reduce_dtype = topo::Dtype::bf16;
  CHECK(dp_bucket_bytes(z) == 96'000'000);
  z.parallel.dp_sharding = DpSharding::zero3;
  CHECK(dp_bucket_bytes(z) == 25'000'000);
  for (const char* s : {"ddp", "zero1", "zero2", "zero3"})
    CHECK(to_string(parse(with([&](json& x) { x["parallel"]["dp_sharding"] = s; })).parallel.dp_sharding) == s);
  for (const char* s : {"none", "selective", "full", "op"})
    CHECK(to_string(parse(with([&](json& x) { x["training"]["recompute"] = s; })).recompute) == s);
  for (const char* s : {"adam", "sgd"})
    CHECK(to_string(parse(with([&](json& x) { x["training"]["optimizer"] = s; })).optimizer) == s);
  // Gradient reduction type: unset means the training type's default (fp32 for bf16, fp16 for fp16).
  CHECK(!d.grad_reduce_dtype.has_value());
  CHECK(d.gradient_dtype() == (d.dtype == topo::Dtype::fp16 ? topo::Dtype::fp16 : topo::Dtype::fp32));
  for (const char* s : {"fp32", "bf16", "fp16"}) {
    const Workload g = parse(with([&](json& x) { x["training"]["grad_reduce_dtype"] = s; }));
    CHECK(topo::to_string(g.gradient_dtype()) == s);
  }
  CHECK(parse(with([](json& x) { x["training"]["dtype"] = "fp16"; })).gradient_dtype() == topo::Dtype::fp16);
  // Attention: FlashAttention unless the run predates it.
  CHECK(!d.unfused_attention);
  CHECK(parse(with([](json& x) { x["training"]["attention"] = "unfused"; })).unfused_attention);
  CHECK(!parse(with([](json& x) { x["training"]["attention"] = "flash"; })).unfused_attention);
  // Another fused kernel than FlashAttention-2: its time over FlashAttention-2's, with a source.
  CHECK(d.attention_time_factor.value == 1.0);
  const Workload triton = parse(with([](json& x) {
    x["training"]["attention_time_factor"] = {{"value", 2.0}, {"source", "FlashAttention-2 paper"}};
  }));
  CHECK(triton.attention_time_factor.value == 2.0);
  CHECK(triton.attention_time_factor.source == "FlashAttention-2 paper");
  expect_error(with([](json& x) { x["training"]["attention_time_factor"] = 2.0; }), "$.training.attention_time_factor");
  expect_error(with([](json& x) { x["training"]["attention_time_factor"] = {{"value", 20.0}, {"source", "s"}}; }),
               "$.training.attention_time_factor.value");
  expect_error(with([](json& x) { x["training"]["attention_time_factor"] = {{"value", 0.0}, {"source", "s"}}; }),
               "$.training.attention_time_factor.value");
  expect_error(with([](json& x) {
                 x["training"]["attention"] = "unfused";
                 x["training"]["attention_time_factor"] = {{"value", 2.0}, {"source", "s"}};
               }),
               "$.training.attention_time_factor");
  CHECK(!d.parallel.overlap_param_gather);
  CHECK(d.recompute_every == 1);
  const Workload alt = parse(with([](json& x) {
    x["training"]["recompute"] = "full";
    x["training"]["recompute_every"] = 2;
  }));
  CHECK(alt.recompute_every == 2);
  CHECK(!alt.recomputes_layer(0));
  CHECK(alt.recomputes_layer(1));
  CHECK(!alt.recomputes_layer(2));
  CHECK(parse(with([](json& x) {
          x["parallel"]["dp_sharding"] = "zero2";
          x["parallel"]["overlap_param_gather"] = true;
        })).parallel.overlap_param_gather);
  // FSDP: fully_shard (FSDP2, PyTorch's FSDP today) unless the file names FSDP1; only with ZeRO-3.
  CHECK(d.parallel.fsdp == model::FsdpImpl::fsdp2);
  CHECK(parse(with([](json& x) {
          x["parallel"]["dp_sharding"] = "zero3";
          x["parallel"]["fsdp"] = "fsdp1";
        })).parallel.fsdp == model::FsdpImpl::fsdp1);
  CHECK(parse(with([](json& x) {
          x["parallel"]["dp_sharding"] = "zero3";
          x["parallel"]["fsdp"] = "fsdp2";
        })).parallel.fsdp == model::FsdpImpl::fsdp2);
  expect_error(with([](json& x) { x["parallel"]["fsdp"] = "fsdp1"; }), "$.parallel.fsdp");  // ddp
  expect_error(with([](json& x) {
                 x["parallel"]["dp_sharding"] = "zero3";
                 x["parallel"]["fsdp"] = "fsdp3";
               }),
               "$.parallel.fsdp");
  expect_error(with([](json& x) {
                 x["parallel"]["dp_sharding"] = "zero3";
                 x["parallel"]["fsdp"] = 2;
               }),
               "$.parallel.fsdp");
  // torch.split's gradient cat: off unless the file says; a fused QKV projection's alone.
  CHECK(!d.qkv_grad_cat);
  CHECK(parse(with([](json& x) { x["training"]["qkv_grad_cat"] = true; })).qkv_grad_cat);
  expect_error(with([](json& x) {
                 x["training"]["projections"] = "separate";
                 x["training"]["qkv_grad_cat"] = true;
               }),
               "$.training.qkv_grad_cat");
  expect_error(with([](json& x) { x["training"]["qkv_grad_cat"] = "yes"; }), "$.training.qkv_grad_cat");
  // The loss's kernels: PyTorch's F.cross_entropy unless the file names Megatron's.
  CHECK(d.cross_entropy == model::CrossEntropy::torch);
  CHECK(parse(with([](json& x) { x["training"]["cross_entropy"] = "megatron"; })).cross_entropy ==
        model::CrossEntropy::megatron);
  expect_error(with([](json& x) { x["training"]["cross_entropy"] = "fused"; }), "$.training.cross_entropy");
  expect_error(with([](json& x) { x["training"]["cross_entropy"] = 1; }), "$.training.cross_entropy");
  // Which layers FSDP frees after forward: torchtitan keeps the last one (fsdp2's default), FSDP1's
  // FULL_SHARD frees every one (fsdp1's default); a file may say; only with ZeRO-3.
  using model::ReshardAfterForward;
  const auto reshard = [&](const char* fsdp, const char* value) {
    return parse(with([&](json& x) {
             x["parallel"]["dp_sharding"] = "zero3";
             x["parallel"]["fsdp"] = fsdp;
             if (value != nullptr) x["parallel"]["reshard_after_forward"] = value;
           }))
        .parallel.reshard_after_forward;
  };
  CHECK(reshard("fsdp2", nullptr) == ReshardAfterForward::all_but_last);
  CHECK(reshard("fsdp1", nullptr) == ReshardAfterForward::always);
  CHECK(reshard("fsdp2", "always") == ReshardAfterForward::always);
  CHECK(reshard("fsdp2", "never") == ReshardAfterForward::never);
  CHECK(reshard("fsdp1", "all_but_last") == ReshardAfterForward::all_but_last);
  expect_error(with([](json& x) {
                 x["parallel"]["dp_sharding"] = "zero1";
                 x["parallel"]["reshard_after_forward"] = "never";
               }),
               "$.parallel.reshard_after_forward");
  expect_error(with([](json& x) {
                 x["parallel"]["dp_sharding"] = "zero3";
                 x["parallel"]["reshard_after_forward"] = "default";
               }),
               "$.parallel.reshard_after_forward");
  expect_error(with([](json& x) {
                 x["parallel"]["dp_sharding"] = "zero3";
                 x["parallel"]["reshard_after_forward"] = true;
               }),
               "$.parallel.reshard_after_forward");
  // Sequence parallelism: on unless the run predates it (Megatron-LM's --sequence-parallel, 2022).
  CHECK(d.parallel.sequence_parallel);
  CHECK(!parse(with([](json& x) { x["parallel"]["sequence_parallel"] = false; })).parallel.sequence_parallel);
  // Without it, TP's backward all-reduce beside the wgrad unless the run predates Megatron-LM's
  // --async-tensor-model-parallel-allreduce (2021).
  CHECK(d.parallel.async_tp_allreduce);
  CHECK(!parse(with([](json& x) {
           x["parallel"]["sequence_parallel"] = false;
           x["parallel"]["async_tp_allreduce"] = false;
         })).parallel.async_tp_allreduce);
  // Rotary embedding and eager element-wise kernels: off unless the file says so.
  CHECK(!d.arch.rotary);
  CHECK(parse(with([](json& x) { x["model"]["rotary_embedding"] = true; })).arch.rotary);
  CHECK(!d.eager_elementwise);
  CHECK(parse(with([](json& x) { x["training"]["elementwise"] = "eager"; })).eager_elementwise);
  CHECK(!parse(with([](json& x) { x["training"]["elementwise"] = "fused"; })).eager_elementwise);
  // Projections: fused (Megatron's linear_qkv) unless the file says separate; eager element-wise is
  // torchtitan's eager Llama code, whose q, k, v are separate linears, unless the file says fused.
  CHECK(!d.separate_projections);
  CHECK(parse(with([](json& x) { x["training"]["projections"] = "separate"; })).separate_projections);
  CHECK(parse(with([](json& x) { x["training"]["elementwise"] = "eager"; })).separate_projections);
  CHECK(!parse(with([](json& x) {
           x["training"]["elementwise"] = "eager";
           x["training"]["projections"] = "fused";
         })).separate_projections);
  expect_error(with([](json& x) { x["training"]["projections"] = "split"; }), "$.training.projections");
  // The norms' kernel: the fused training kernel unless the file names another.
  CHECK(d.norm_kernel == model::NormKernel::fused);
  CHECK(parse(with([](json& x) { x["training"]["norm_kernel"] = "eager"; })).norm_kernel == model::NormKernel::eager);
  CHECK(parse(with([](json& x) { x["training"]["norm_kernel"] = "apex_legacy"; })).norm_kernel ==
        model::NormKernel::apex_legacy);
  expect_error(with([](json& x) { x["training"]["norm_kernel"] = "triton"; }), "$.training.norm_kernel");
  expect_error(with([](json& x) { x["training"]["norm_kernel"] = 1; }), "$.training.norm_kernel");
  // Hidden dropout: none unless given, a probability below 1.
  CHECK(d.hidden_dropout == 0.0);
  CHECK(parse(with([](json& x) { x["training"]["hidden_dropout"] = 0.1; })).hidden_dropout == 0.1);
  // Biases: none unless the model says so; their gradients a kernel each unless fused.
  CHECK(!d.arch.bias);
  const Workload biased = parse(with([](json& x) { x["model"]["bias"] = true; }));
  CHECK(biased.arch.bias);
  CHECK(!biased.bias_grad_fused);
  CHECK(parse(with([](json& x) {
          x["model"]["bias"] = true;
          x["training"]["bias_grad"] = "fused";
        })).bias_grad_fused);
  // Clipping: on unless the run turns it off (Megatron-LM, torchtitan and llm-foundry clip by default).
  CHECK(d.clip_grad);
  CHECK(!parse(with([](json& x) { x["training"]["clip_grad"] = false; })).clip_grad);
  expect_error(with([](json& x) { x["training"]["clip_grad"] = 1.0; }), "$.training.clip_grad");
}

TEST_CASE("Sharding, recomputation, optimizer and DP bucket errors name the key", "[model][workload][errors]") {
  expect_error(with([](json& j) { j["parallel"]["dp_sharding"] = "zero4"; }), "$.parallel.dp_sharding");
  expect_error(with([](json& j) { j["parallel"]["dp_sharding"] = 3; }), "$.parallel.dp_sharding");
  expect_error(with([](json& j) { j["parallel"]["dp_sharding"] = "ZeRO3"; }), "$.parallel.dp_sharding");
  expect_error(with([](json& j) { j["training"]["recompute"] = "partial"; }), "$.training.recompute");
  expect_error(with([](json& j) { j["training"]["recompute"] = true; }), "$.training.recompute");
  expect_error(with([](json& j) { j["training"]["optimizer"] = "adamw"; }), "$.training.optimizer");
  expect_error(with([](json& j) { j["training"]["optimizer"] = ""; }), "$.training.optimizer");
  expect_error(with([](json& j) { j["training"]["grad_reduce_dtype"] = "fp8"; }), "$.training.grad_reduce_dtype");
  expect_error(with([](json& j) { j["training"]["grad_reduce_dtype"] = 4; }), "$.training.grad_reduce_dtype");
  expect_error(with([](json& j) { j["training"]["attention"] = "sdpa"; }), "$.training.attention");
  expect_error(with([](json& j) { j["training"]["elementwise"] = "compiled"; }), "$.training.elementwise");
  expect_error(with([](json& j) { j["training"]["elementwise"] = true; }), "$.training.elementwise");
  expect_error(with([](json& j) { j["model"]["rotary_embedding"] = "rope"; }), "$.model.rotary_embedding");
  expect_error(with([](json& j) { j["model"]["bias"] = 1; }), "$.model.bias");
  expect_error(with([](json& j) { j["training"]["hidden_dropout"] = 1.0; }), "$.training.hidden_dropout");
  expect_error(with([](json& j) { j["training"]["hidden_dropout"] = -0.1; }), "$.training.hidden_dropout");
  expect_error(with([](json& j) { j["training"]["hidden_dropout"] = true; }), "$.training.hidden_dropout");
  // A bias gradient without biases, or of an unknown kind.
  expect_error(with([](json& j) { j["training"]["bias_grad"] = "fused"; }), "$.training.bias_grad");
  expect_error(with([](json& j) {
                 j["model"]["bias"] = true;
                 j["training"]["bias_grad"] = "epilogue";
               }),
               "$.training.bias_grad");
  // Without sequence parallelism: a boolean; not with Ulysses (its sequence split is the norms' too)
  // nor with TransformerEngine's TP overlap (which needs it).
  expect_error(with([](json& j) { j["parallel"]["sequence_parallel"] = "no"; }), "$.parallel.sequence_parallel");
  expect_error(with([](json& j) {
                 j["parallel"]["sequence_parallel"] = false;
                 j["parallel"]["up"] = 2;
               }),
               "$.parallel.sequence_parallel");
  expect_error(with([](json& j) {
                 j["parallel"]["sequence_parallel"] = false;
                 j["schedule"]["tp_baseline"] = "te_userbuffers";
               }),
               "$.schedule.tp_baseline");
  // async_tp_allreduce: a boolean, about the all-reduces of TP without sequence parallelism only.
  expect_error(with([](json& j) { j["parallel"]["async_tp_allreduce"] = false; }), "$.parallel.async_tp_allreduce");
  expect_error(with([](json& j) {
                 j["parallel"]["sequence_parallel"] = false;
                 j["parallel"]["async_tp_allreduce"] = "sync";
               }),
               "$.parallel.async_tp_allreduce");
  // Megatron's --overlap-param-gather: only the distributed optimizer (ZeRO-1/2) gathers parameters
  // after the optimizer.
  expect_error(with([](json& j) { j["parallel"]["overlap_param_gather"] = true; }), "$.parallel.overlap_param_gather");
  expect_error(with([](json& j) { j["training"]["recompute_every"] = 2; }), "$.training.recompute_every");
  expect_error(with([](json& j) {
                 j["training"]["recompute"] = "full";
                 j["training"]["recompute_every"] = 0;
               }),
               "$.training.recompute_every");
  expect_error(with([](json& j) {
                 j["parallel"]["dp_sharding"] = "zero3";
                 j["parallel"]["overlap_param_gather"] = true;
               }),
               "$.parallel.overlap_param_gather");
  expect_error(with([](json& j) {
                 j["parallel"]["dp_sharding"] = "zero1";
                 j["parallel"]["overlap_param_gather"] = "yes";
               }),
               "$.parallel.overlap_param_gather");
  expect_error(with([](json& j) { j["training"]["attention"] = false; }), "$.training.attention");
  // torchtitan's per-op policy saves a fused attention kernel's output.
  expect_error(with([](json& j) {
                 j["training"]["recompute"] = "op";
                 j["training"]["attention"] = "unfused";
               }),
               "$.training.recompute");
  // fp8 parameter gathers: fp8 GEMMs and FSDP (ZeRO-3) only.
  expect_error(with([](json& j) {
                 j["parallel"]["dp_sharding"] = "zero3";
                 j["training"]["fp8_param_gather"] = true;
               }),
               "$.training.fp8_param_gather");
  expect_error(with([](json& j) {
                 j["training"]["dtype"] = "fp8";
                 j["training"]["fp8_param_gather"] = true;
               }),
               "$.training.fp8_param_gather");
  expect_error(with([](json& j) { j["training"]["fp8_param_gather"] = 1; }), "$.training.fp8_param_gather");
  // fp8 scaling: fp8 only, and one of two recipes.
  expect_error(with([](json& j) { j["training"]["fp8_scaling"] = "dynamic"; }), "$.training.fp8_scaling");
  expect_error(with([](json& j) {
                 j["training"]["dtype"] = "fp8";
                 j["training"]["fp8_scaling"] = "rowwise";
               }),
               "$.training.fp8_scaling");
  expect_error(with([](json& j) {
                 j["training"]["dtype"] = "fp8";
                 j["training"]["fp8_scaling"] = true;
               }),
               "$.training.fp8_scaling");
  expect_error(with([](json& j) { j["schedule"]["tp_baseline"] = "userbuffers"; }), "$.schedule.tp_baseline");
  expect_error(with([](json& j) { j["schedule"]["tp_baseline"] = true; }), "$.schedule.tp_baseline");
  expect_error(with([](json& j) { j["schedule"]["dp_bucket_bytes"] = 0; }), "$.schedule.dp_bucket_bytes");
  expect_error(with([](json& j) { j["schedule"]["dp_bucket_bytes"] = -25000000; }), "$.schedule.dp_bucket_bytes");
  expect_error(with([](json& j) { j["schedule"]["dp_bucket_bytes"] = 1.5; }), "$.schedule.dp_bucket_bytes");
  expect_error(with([](json& j) { j["schedule"]["dp_bucket_bytes"] = "25MB"; }), "$.schedule.dp_bucket_bytes");
  expect_error(with([](json& j) { j["schedule"]["dp_bucket_bytes"] = 2e12; }), "$.schedule.dp_bucket_bytes");
  expect_error(with([](json& j) { j["schedule"]["dp_fuse_min_rows"] = 0; }), "$.schedule.dp_fuse_min_rows");
  expect_error(with([](json& j) { j["schedule"]["dp_fuse_min_rows"] = -128; }), "$.schedule.dp_fuse_min_rows");
  expect_error(with([](json& j) { j["schedule"]["dp_fuse_min_rows"] = "128"; }), "$.schedule.dp_fuse_min_rows");
}

TEST_CASE("schedule.engine: like for like by default, one name for both engines", "[model][workload][engine]") {
  // No engine key: collectives and P2P both on SM kernels, so that CommFuse's P2P pays for the SMs it
  // holds as the collectives of baseline and slice do.
  const Workload plain = parse(valid());
  CHECK(plain.schedule.collective_engine == CommEngine::sm_kernel);
  CHECK(plain.schedule.p2p_engine == CommEngine::sm_kernel);
  CHECK(engine_name(plain.schedule) == "sm");

  const Workload copy = parse(with([](json& j) { j["schedule"]["engine"] = "copy"; }));
  CHECK(copy.schedule.collective_engine == CommEngine::copy_engine);
  CHECK(copy.schedule.p2p_engine == CommEngine::copy_engine);
  CHECK(engine_name(copy.schedule) == "copy");

  const Workload mixed = parse(with([](json& j) { j["schedule"]["engine"] = "auto"; }));
  CHECK(mixed.schedule.collective_engine == CommEngine::sm_kernel);
  CHECK(mixed.schedule.p2p_engine == CommEngine::copy_engine);
  CHECK(engine_name(mixed.schedule) == "auto");

  // The two fine-grained keys still work; a mix no mode names is named by its parts.
  const Workload custom = parse(with([](json& j) {
    j["schedule"]["collective_engine"] = "copy_engine";
    j["schedule"]["p2p_engine"] = "sm_kernel";
  }));
  CHECK(engine_name(custom.schedule) == "collectives copy_engine, p2p sm_kernel");

  expect_error(with([](json& j) { j["schedule"]["engine"] = "gpu"; }), "$.schedule.engine");
  expect_error(with([](json& j) {
                 j["schedule"]["engine"] = "sm";
                 j["schedule"]["p2p_engine"] = "copy_engine";
               }),
               "$.schedule.engine");
}

TEST_CASE("every shipped workload compares schedules like for like", "[model][workload][engine]") {
  for (const std::string& file : embedded_files("workloads")) {
    INFO(file);
    const Workload w = load_workload(file.substr(file.find('/') + 1, file.rfind('.') - file.find('/') - 1));
    CHECK(engine_name(w.schedule) == "sm");
  }
}
