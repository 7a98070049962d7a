// Sweep and search result files (`fusesim merge PARTS`, `fusesim plot FILE`): read, merged as a
// one-part sweep or search, and written back, which must read again (the writer's promise that a file
// round-trips). A search file says so in its "format".
#include "fuzz_common.hpp"
#include "fusesim/cli/search.hpp"
#include "fusesim/cli/sweep.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fusesim::fuzz::read_json(data, size, [](const fusesim::JsonDocument& doc) {
    if (fusesim::cli::is_search_json(doc)) {
      const fusesim::cli::SearchResult part = fusesim::cli::parse_search_json(doc);
      fusesim::cli::search_csv(part);
      fusesim::cli::search_table(part);
      fusesim::cli::parse_search_json(
          fusesim::JsonDocument::parse(fusesim::cli::search_json(part).dump(2), "<fuzz: written>"));
      fusesim::cli::merge_searches({doc.file()}, {part});
      return;
    }
    const fusesim::cli::SweepResult part = fusesim::cli::parse_sweep_json(doc);
    fusesim::cli::sweep_csv(part);
    fusesim::cli::parse_sweep_json(fusesim::JsonDocument::parse(fusesim::cli::sweep_json(part), "<fuzz: written>"));
    fusesim::cli::merge_sweeps({doc.file()}, {part});
  });
}
