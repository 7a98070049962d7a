// The command-line layer in process: value parsing, trace names, error formatting, help.
#include <sstream>

#include <catch2/catch.hpp>

#include "fusesim/cli/app.hpp"
#include "fusesim/cli/simulate.hpp"
#include "fusesim/util/error.hpp"

using namespace fusesim;
using namespace fusesim::cli;
using model::ScheduleKind;

TEST_CASE("schedule and scope and format values", "[cli]") {
  CHECK(parse_schedules("all") ==
        std::vector<ScheduleKind>{ScheduleKind::baseline, ScheduleKind::slice, ScheduleKind::commfuse});
  CHECK(parse_schedules("commfuse,baseline") == std::vector<ScheduleKind>{ScheduleKind::commfuse, ScheduleKind::baseline});
  CHECK_THROWS_AS(parse_schedules(""), InputError);
  CHECK_THROWS_AS(parse_schedules("baseline,"), InputError);
  CHECK_THROWS_AS(parse_schedules("slice,slice"), InputError);
  CHECK(parse_scopes("both") == std::vector<sched::Scope>{sched::Scope::layer, sched::Scope::stack});
  CHECK(parse_scopes("stack") == std::vector<sched::Scope>{sched::Scope::stack});
  CHECK_THROWS_AS(parse_scopes("Layer"), InputError);
  CHECK(parse_format("json") == OutputFormat::json);
  CHECK_THROWS_AS(parse_format("csv"), InputError);
  CHECK(parse_positive_int("--slices", "16", 100) == 16);
  CHECK_THROWS_AS(parse_positive_int("--slices", "-2", 100), InputError);
  CHECK_THROWS_AS(parse_positive_int("--slices", "101", 100), InputError);
  CHECK_THROWS_AS(parse_positive_int("--slices", " 3", 100), InputError);
  try {
    parse_positive_int("--slices", "x", 100);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.file() == "<command line>");
    CHECK(e.json_path() == "--slices");
  }
}

TEST_CASE("trace file names: one per run when there are several", "[cli]") {
  SimulateRequest one;
  one.schedules = {ScheduleKind::commfuse};
  one.scopes = {sched::Scope::layer};
  CHECK(trace_path("out.json", one, ScheduleKind::commfuse, sched::Scope::layer) == "out.json");

  SimulateRequest schedules;  // all three schedules, one scope
  schedules.scopes = {sched::Scope::layer};
  CHECK(trace_path("out.json", schedules, ScheduleKind::baseline, sched::Scope::layer) == "out.baseline.json");
  CHECK(trace_path("dir.v2/out", schedules, ScheduleKind::slice, sched::Scope::layer) == "dir.v2/out.slice");

  SimulateRequest all;  // defaults: three schedules, both scopes
  CHECK(trace_path("t/out.json", all, ScheduleKind::commfuse, sched::Scope::stack) == "t/out.commfuse.stack.json");
}

TEST_CASE("errors are formatted on one line", "[cli]") {
  CHECK(format_input_error("a.json", "$.x", "bad") == "error: a.json: $.x: bad");
  CHECK(format_input_error("a.json", "$", "line one\nline two\n") == "error: a.json: $: line one; line two");
}

TEST_CASE("help and no subcommand print usage and succeed while bad options throw InputError", "[cli]") {
  std::ostringstream out, err;
  Io io{out, err};
  const char* help[] = {"fusesim", "--help"};
  CHECK(run(2, help, io) == 0);
  CHECK(out.str().find("simulate") != std::string::npos);
  CHECK(out.str().find("list") != std::string::npos);

  out.str("");
  const char* sim_help[] = {"fusesim", "simulate", "--help"};
  CHECK(run(3, sim_help, io) == 0);
  CHECK(out.str().find("--forward-only") != std::string::npos);
  CHECK(out.str().find("--trace") != std::string::npos);

  out.str("");
  const char* none[] = {"fusesim"};
  CHECK(run(1, none, io) == 0);
  CHECK(out.str().find("Subcommands") != std::string::npos);

  const char* bad[] = {"fusesim", "simulate", "--frobnicate"};
  try {
    run(3, bad, io);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.file() == "<command line>");
    CHECK(e.json_path() == "--frobnicate");
  }
  const char* unknown_command[] = {"fusesim", "simulat"};
  CHECK_THROWS_AS(run(2, unknown_command, io), InputError);
}

TEST_CASE("simulate: max_parallelisms runs the first parallelisms only, the same runs", "[cli]") {
  // llama-3-70b-4node runs TP 8 x DP 4: its rows vary TP's schedule, then DP's. Asked for one
  // parallelism (what validate reads), simulate runs TP's alone; that run is the first of the full set.
  SimulateRequest all;
  all.schedules = {ScheduleKind::commfuse};
  all.scopes = {sched::Scope::layer};
  SimulateRequest one = all;
  one.max_parallelisms = 1;
  const SimulateReport a = simulate(all), b = simulate(one);
  REQUIRE(a.runs.size() == 2);
  REQUIRE(b.runs.size() == 1);
  CHECK(b.runs[0].metrics.parallelism == "tpsp");
  CHECK(b.runs[0].metrics.step_time_ps == a.runs[0].metrics.step_time_ps);
  CHECK(b.runs[0].metrics.model_flops == a.runs[0].metrics.model_flops);
}
