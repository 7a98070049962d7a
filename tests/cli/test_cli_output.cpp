// Every subcommand that writes a file (--output, -o, --trace, check --update's baseline) writes it
// (the folder writers, plot --out-dir and sweep --plot, are tested in test_cli_plot.cpp)
// through the same helper (util/output.hpp): a symbolic link survives with its target holding the
// file, /dev/null stays a device, `-` is standard output, a folder is refused with the option and exit
// 2 before any work. Issue 19.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "fusesim/util/output.hpp"
#include "process.hpp"

using namespace fusesim::testing;
namespace fs = std::filesystem;

namespace {

struct Writer {
  std::string name;
  std::vector<std::string> args;  // with "{OUT}" where the file goes
  std::string option;             // the option that names it
};

std::vector<std::string> with_out(const std::vector<std::string>& args, const std::string& out) {
  std::vector<std::string> a;
  for (const std::string& s : args) a.push_back(s == "{OUT}" ? out : s);
  return a;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* kBaseline = R"({"format": "fusesim-baseline", "version": 1, "description": "output test", "entries": [
  {"topology": "dgx-h100", "workload": "llama-3-8b", "sequence_length": 2048, "tp": 2, "scope": "layer", "schedule": "baseline"}]})";

}  // namespace

TEST_CASE("every subcommand's output goes through the one helper: links, devices, '-', folders", "[cli][output]") {
  ScratchDir dir;
  // Inputs some writers read: a sweep result (for merge and plot), an nccl-tests log, a task graph.
  const auto sweep = run_fusesim({"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "1024",
                                  "--slices", "2", "--quiet", "--shard", "0/1", "--output", dir.file("part.json")},
                                 dir);
  INFO(sweep.err);
  REQUIRE(sweep.exit_code == 0);
  const std::string log = source_path("tests/data/calibrate/all_gather_h100x8_v2.17.log");
  const std::string layer = "--scope=layer";
  const std::vector<Writer> writers{
      {"simulate --output", {"simulate", "--schedule", "baseline", layer, "--output", "{OUT}"}, "--output"},
      {"simulate --trace", {"simulate", "--schedule", "baseline", "--parallelism", "tpsp", layer, "--trace", "{OUT}"}, "--trace"},
      {"sweep --output", {"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "1024", "--slices", "2",
                          "--quiet", "--format", "csv", "--output", "{OUT}"}, "--output"},
      {"merge -o", {"merge", dir.file("part.json"), "--format", "csv", "-o", "{OUT}"}, "--output"},
      {"generate --output", {"generate", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--schedule", "baseline",
                             "--output", "{OUT}"}, "--output"},
      {"validate --output", {"validate", "--category", "attention", "--output", "{OUT}"}, "--output"},
      {"calibrate import-nccl-tests -o", {"calibrate", "import-nccl-tests", log, "--topology", "dgx-h100", "-o", "{OUT}"},
       "--output"},
      {"check --update", {"check", "--baseline", "{OUT}", "--update"}, "--baseline"},
      {"simulate-dag --output", {"simulate-dag", "--dag", dir.file("g.json"), "--output", "{OUT}"}, "--output"},
      {"simulate-dag --trace", {"simulate-dag", "--dag", dir.file("g.json"), "--trace", "{OUT}"}, "--trace"},
      {"verify --output", {"verify", "--output", "{OUT}"}, "--output"},
      {"calibrate plan -o", {"calibrate", "plan", "--workload", "llama-3-8b", "-o", "{OUT}"}, "--output"},
  };
  const auto graph = run_fusesim({"generate", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--schedule",
                                  "baseline", "--scope", "layer", "--output", dir.file("g.json")},
                                 dir);
  REQUIRE(graph.exit_code == 0);
  for (const Writer& w : writers) {
    INFO(w.name);
    // Through a symbolic link: the link survives and its target holds the file.
    const std::string target = dir.file("target-" + std::to_string(&w - writers.data()));
    const std::string link = dir.file("link-" + std::to_string(&w - writers.data()));
    {
      std::ofstream(target) << (w.name == "check --update" ? kBaseline : "old");
    }
    fs::create_symlink(target, link);
    const auto r = run_fusesim(with_out(w.args, link), dir);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(fs::is_symlink(link));
    const std::string written = slurp(target);
    CHECK(written.size() > 10);
    CHECK(written != "old");
    // Into a folder: exit 2, the option named, nothing run (check reads its baseline first, so
    // the reader says it).
    const auto bad = run_fusesim(with_out(w.args, dir.path().string()), dir);
    CHECK(bad.exit_code == 2);
    if (w.name == "check --update")
      CHECK_THAT(bad.err, Catch::Contains(": $: is a directory, not a file"));
    else
      CHECK_THAT(bad.err, Catch::Contains(": " + w.option + ": is a directory"));
  }
  // Nothing but what the writers made: no temporary file anywhere.
  for (const auto& e : fs::directory_iterator(dir.path()))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("a report to /dev/null or to '-' is written in place", "[cli][output]") {
  ScratchDir dir;
  struct stat before {};
  if (::stat("/dev/null", &before) == 0 && S_ISCHR(before.st_mode)) {
    const auto r = run_fusesim({"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "1024",
                                "--slices", "2", "--quiet", "--format", "csv", "--output", "/dev/null"},
                               dir);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    struct stat after {};
    REQUIRE(::lstat("/dev/null", &after) == 0);
    CHECK(S_ISCHR(after.st_mode));
  } else {
    WARN("skipped /dev/null: no such character device here");
  }
  const auto r = run_fusesim({"simulate", "--schedule", "baseline", "--scope", "layer", "--format", "json", "--output", "-"}, dir);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("\"results\"") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.file("-")));
}

TEST_CASE("a sweep refuses a --plot folder it cannot create before it simulates anything", "[cli][output]") {
  // Issue 20, item 6: the folder used to be checked only after the whole sweep ran. A folder under a
  // regular file can never be created (whoever runs it); --quiet off, so a sweep that ran would print
  // its progress and summary on stderr.
  ScratchDir dir;
  { std::ofstream(dir.file("a-file")) << "x"; }
  const auto r = run_fusesim({"sweep", "--topology", "dgx-h100", "--workload", "llama-3-8b", "--seq", "1024",
                              "--slices", "2", "--format", "csv", "--output", dir.file("out.csv"), "--plot",
                              dir.file("a-file/figures")},
                             dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(": --plot: cannot create this folder"));
  CHECK(r.err.find("configurations") == std::string::npos);  // nothing ran, not even the grid's size
  CHECK_FALSE(fs::exists(dir.file("out.csv")));
}
