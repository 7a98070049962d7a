// nccl-tests logs (`fusesim calibrate import-nccl-tests`): plain text, parsed and turned into the
// calibration samples the import writes.
#include "fuzz_common.hpp"
#include "fusesim/model/nccl_tests.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    for (const auto& run : fusesim::model::parse_nccl_tests(fusesim::fuzz::as_text(data, size), fusesim::fuzz::kFile))
      fusesim::model::collective_samples(run);
  } catch (const fusesim::InputError&) {
  }
  return 0;
}
