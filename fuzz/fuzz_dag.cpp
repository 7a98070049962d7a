// Task-graph files (docs/dag.md), as `fusesim simulate-dag --dag FILE` reads them: parse_dag, which
// also validates the graph (cycles, unmatched send/recv, collectives).
#include "fuzz_common.hpp"
#include "fusesim/sched/dag_json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // 64 ranks: more than the shipped graphs use, so that the rank bound is reached from both sides.
  return fusesim::fuzz::read_json(data, size, [](const fusesim::JsonDocument& doc) { fusesim::sched::parse_dag(doc, 64); });
}
