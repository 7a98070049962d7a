// Validation case files (`fusesim validate --cases FILE`, docs/calibration.md).
#include "fuzz_common.hpp"
#include "fusesim/cli/input_readers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fusesim::fuzz::read_json(data, size, [](const fusesim::JsonDocument& doc) { fusesim::cli::check_validation_cases(doc); });
}
