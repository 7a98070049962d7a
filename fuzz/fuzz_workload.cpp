// Workload files (docs/workload.md): parse_workload and the consistency checks simulate runs next.
#include "fuzz_common.hpp"
#include "fusesim/model/workload.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fusesim::fuzz::read_json(data, size, [](const fusesim::JsonDocument& doc) {
    const fusesim::model::Workload w = fusesim::model::parse_workload(doc);
    fusesim::model::validate_workload(w, doc.file());
  });
}
