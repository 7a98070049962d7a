// Malformed input: every case must exit 2 with exactly one line on stderr,
// "error: <file>: <json path>: <message>", and must not create the --output or --trace file.
#include <fstream>

#include <catch2/catch.hpp>

#include "process.hpp"

using namespace fusesim::testing;

namespace {

struct BadCase {
  const char* option;    // "--topology" or "--workload"
  const char* file;      // under tests/data/cli/bad/ (made by tests/data/cli/make_bad.py)
  const char* json_path; // where the defect is
  const char* message;   // a part of the message that says what is wrong
  const char* topology = nullptr;  // another cluster to pair a workload with
};

// The defects, each applied to the shipped dgx-h100.json or llama-3-70b.json.
const BadCase kBadCases[] = {
    {"--topology", "topo-syntax-error.json", "$", "JSON syntax error at line 4"},  // comma after "name" removed
    {"--topology", "topo-empty.json", "$", "JSON syntax error at line 1"},
    {"--topology", "topo-not-an-object.json", "$", "expected an object"},
    {"--topology", "topo-missing-devices-per-node.json", "$.node.devices_per_node", "missing"},
    {"--topology", "topo-unknown-key.json", "$.node.scale_up.link.bandwith", "unknown key"},
    {"--topology", "topo-wrong-type.json", "$.node.devices_per_node", "expected an integer"},
    {"--topology", "topo-negative-bandwidth.json", "$.node.scale_up.link.line_rate_bytes_per_s.value", "-450"},
    {"--topology", "topo-number-without-source.json", "$.device_models.h100-sxm.peak_flops_per_s.bf16", "source"},
    {"--topology", "topo-source-missing.json", "$.communication.sm_step_latency_s.source", "missing"},
    {"--topology", "topo-unknown-device-model.json", "$.node.device_model", "h100-pcie"},
    {"--workload", "work-syntax-error.json", "$", "JSON syntax error at line 6"},  // "layers": 80,,
    {"--workload", "work-empty.json", "$", "JSON syntax error"},
    {"--workload", "work-number-overflow.json", "$.model.layers", "beyond the range of a double"},
    {"--topology", "topo-duplicate-key.json", "$.name", "twice"},
    {"--workload", "work-missing-hidden.json", "$.model.hidden", "missing"},
    {"--workload", "work-unknown-key.json", "$.training.seq_len", "unknown key"},
    {"--workload", "work-wrong-type.json", "$.model.layers", "expected an integer"},
    {"--workload", "work-fractional-layers.json", "$.model.layers", "80.5"},
    {"--workload", "work-absurd-sequence.json", "$.training.sequence_length", "1000000000000"},
    {"--workload", "work-negative-micro-batch.json", "$.training.micro_batch", "-1"},
    {"--workload", "work-bad-dtype.json", "$.training.dtype", "bf17"},
    {"--workload", "work-bad-schedule-kind.json", "$.schedule.kind", "fused"},
    // heads 64 % tp 6 != 0.
    {"--workload", "work-tp-not-dividing-heads.json", "$.parallel.tp", "not divisible by tp 6"},
    // tp 16 x dp 1 = 16 ranks > the 8 GPUs of dgx-h100: the world does not fit first.
    {"--workload", "work-tp-larger-than-node.json", "$.parallel", "16 ranks"},
    // On the 32-GPU dgx-h100-4node the world fits, but a TP group of 16 cannot stay inside an 8-GPU node.
    {"--workload", "work-tp-larger-than-node.json", "$.parallel.tp", "tp 16", "dgx-h100-4node"},
    // tp 8 x dp 2 = 16 ranks > 8.
    {"--workload", "work-world-too-large.json", "$.parallel", "16 ranks"},
};

void check_rejected(const ProcessResult& r, const ScratchDir& dir, const std::string& file,
                    const std::string& json_path, const std::string& message_part) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  const auto lines = r.err_lines();
  REQUIRE(lines.size() == 1);
  const std::string prefix = "error: " + file + ": " + json_path + ": ";
  CHECK(lines[0].substr(0, prefix.size()) == prefix);
  CHECK(lines[0].size() > prefix.size());
  CHECK(lines[0].find(message_part, prefix.size()) != std::string::npos);
  CHECK(r.out.empty());
  // Neither the report nor any trace (nor a temporary of either) was created.
  CHECK(dir.entries().empty());
}

}  // namespace

TEST_CASE("malformed topology and workload files exit 2 naming the file and the JSON path", "[cli][errors]") {
  for (const BadCase& c : kBadCases) {
    const std::string file = source_path(std::string("tests/data/cli/bad/") + c.file);
    SECTION(std::string(c.file) + (c.topology ? std::string(" on ") + c.topology : std::string())) {
      ScratchDir dir;
      std::vector<std::string> args = {"simulate", c.option, file, "--output", "report.txt", "--trace", "t.json"};
      // A bad workload is paired with the single DGX H100 it was made for (the default cluster is
      // the 4-node one), unless the case names another.
      if (c.topology || std::string(c.option) == "--workload") {
        args.push_back("--topology");
        args.push_back(c.topology ? c.topology : "dgx-h100");
      }
      check_rejected(run_fusesim(args, dir), dir, file, c.json_path, c.message);
    }
  }
}

TEST_CASE("a file that does not exist and is no shipped name exits 2", "[cli][errors]") {
  ScratchDir dir;
  const std::string missing = "/nonexistent-fusesim-dir/cluster.json";
  check_rejected(run_fusesim({"simulate", "--topology", missing, "--output", "r.json"}, dir), dir, missing, "$",
                 "no such file");
  check_rejected(run_fusesim({"simulate", "--workload", "llama-4-9000", "--trace", "t.json"}, dir), dir,
                 "llama-4-9000", "$", "llama-3-70b");  // the message lists the shipped names
  // The profiles' list names the alternatives as --profile takes them.
  check_rejected(run_fusesim({"simulate", "--profile", "h100-sxm-cuda12", "--output", "r.json"}, dir), dir,
                 "h100-sxm-cuda12", "$", "h200-sxm, alternatives/h100-sxm-cuda13");
}

TEST_CASE("an alternative profile is found by its bare name too", "[cli][errors]") {
  // profiles/alternatives/h100-sxm-cuda13.json: `--profile h100-sxm-cuda13` reads the same file as
  // `--profile alternatives/h100-sxm-cuda13` (no profile of the folder itself has that name).
  ScratchDir dir;
  for (const char* name : {"h100-sxm-cuda13", "alternatives/h100-sxm-cuda13"}) {
    INFO(name);
    const auto r = run_fusesim({"simulate", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--scope", "layer",
                                "--schedule", "baseline", "--profile", name, "--format", "json"},
                               dir);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("\"profile\": \"<embedded:profiles/alternatives/h100-sxm-cuda13.json>\"") != std::string::npos);
  }
}

TEST_CASE("bad command-line values exit 2 with file <command line>", "[cli][errors]") {
  struct ArgCase {
    std::vector<std::string> args;
    const char* path;
    const char* message;
  };
  const ArgCase cases[] = {
      {{"--slices", "0"}, "--slices", "outside the allowed range"},
      {{"--slices", "four"}, "--slices", "not an integer"},
      {{"--slices", "4x"}, "--slices", "not an integer"},
      // 8192 tokens over tp 8 x 3 slices: 8192 % 24 = 8, not an even cut.
      {{"--slices", "3"}, "--slices", "divisible"},
      {{"--scope", "block"}, "--scope", "'block'"},
      {{"--schedule", "fused"}, "--schedule", "'fused'"},
      {{"--schedule", "baseline,baseline"}, "--schedule", "twice"},
      {{"--format", "xml"}, "--format", "'xml'"},
      {{"--no-such-option"}, "--no-such-option", "not expected"},
      {{"--slices"}, "--slices", "missing"},
      // One run, so the trace goes to the name as given: the --output file.
      {{"--trace", "out.txt", "--schedule", "commfuse", "--scope", "layer"}, "--trace", "also the --output"},
  };
  for (const ArgCase& c : cases) {
    ScratchDir dir;
    std::vector<std::string> args = {"simulate", "--output", "out.txt"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    INFO("option " << c.path << ", expecting '" << c.message << "'");
    check_rejected(run_fusesim(args, dir), dir, "<command line>", c.path, c.message);
  }
}

TEST_CASE("an output into a folder that does not exist exits 2 before simulating", "[cli][errors]") {
  ScratchDir dir;
  const std::string out = "/nonexistent-fusesim-dir/report.json";
  check_rejected(run_fusesim({"simulate", "--output", out}, dir), dir, out, "--output", "does not exist");
  const std::string trace = dir.file("missing-sub/trace.json");
  const auto r = run_fusesim({"simulate", "--schedule", "baseline", "--scope", "layer", "--trace", trace}, dir);
  // Its file is reported as given, with one trace per run (here one run, so the name as given).
  check_rejected(r, dir, trace, "--trace", "does not exist");
}

// Issue 20, item 6: `--topology ""` printed "error: : $: ..."; a validation case naming a topology
// that does not exist named neither the case file nor the key.
TEST_CASE("an empty name and a case's unknown topology are reported where they were written", "[cli][errors]") {
  ScratchDir dir;
  const auto empty = run_fusesim({"simulate", "--topology", ""}, dir);
  CHECK(empty.exit_code == 2);
  CHECK(empty.err.find("error: <command line>: $: an empty name") == 0);
  const std::string cases = dir.file("cases.json");
  {
    std::ofstream(cases) << R"({"schema": "fusesim.validation", "schema_version": 1, "cases": [
      {"id": "a", "category": "attention", "topology": "no-such-cluster", "dtype": "bf16", "pass": "forward",
       "causal": false, "batch": 1, "heads": 16, "seq": 4096, "head_dim": 128, "measured_tflops": 300,
       "source": "tests"}]})";
  }
  const auto unknown = run_fusesim({"validate", "--cases", cases}, dir);
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find("error: " + cases + ": $.cases[0].topology: 'no-such-cluster': no such file") == 0);
}

// Issue 20, item 5: a workload at its documented limits (1,000,000 micro-batches at step scope) ended in
// bad_alloc after a minute. The graph is estimated from a probe of one layer and one micro-batch and
// refused before it is built.
TEST_CASE("a step of a million micro-batches is refused with its estimate before it is built", "[cli][errors]") {
  ScratchDir dir;
  const std::string w = dir.file("ga.json");
  {
    std::ifstream in(source_path("workloads/llama-3-8b.json"));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string key = "\"grad_accumulation\": 1";
    REQUIRE(text.find(key) != std::string::npos);
    text.replace(text.find(key), key.size(), "\"grad_accumulation\": 1000000");
    std::ofstream(w) << text;
  }
  const auto r = run_fusesim({"simulate", "--topology", "dgx-h100", "--workload", w, "--scope", "step", "--force-memory"}, dir);
  CHECK(r.exit_code == 2);
  REQUIRE(r.err_lines().size() == 1);
  CHECK(r.err.find("error: " + w + ": $.training.grad_accumulation: 32 layers x 1000000 micro-batches would build a "
                   "task graph of about ") == 0);
}
