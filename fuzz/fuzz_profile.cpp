// Calibration profiles (docs/calibration.md): model::parse_profile, as --profile FILE reads them.
#include "fuzz_common.hpp"
#include "fusesim/model/profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fusesim::fuzz::read_json(data, size, [](const fusesim::JsonDocument& doc) { fusesim::model::parse_profile(doc); });
}
