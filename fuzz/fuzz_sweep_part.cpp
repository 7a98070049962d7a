// Sweep result files (`fusesim merge PARTS`, `fusesim plot FILE`): read, merged as a one-part sweep,
// and written back, which must read again (the writer's promise that a file round-trips).
#include "fuzz_common.hpp"
#include "fusesim/cli/sweep.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fusesim::fuzz::read_json(data, size, [](const fusesim::JsonDocument& doc) {
    const fusesim::cli::SweepResult part = fusesim::cli::parse_sweep_json(doc);
    fusesim::cli::sweep_csv(part);
    fusesim::cli::parse_sweep_json(fusesim::JsonDocument::parse(fusesim::cli::sweep_json(part), "<fuzz: written>"));
    fusesim::cli::merge_sweeps({doc.file()}, {part});
  });
}
