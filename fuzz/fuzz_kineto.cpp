// Measured Kineto traces (`fusesim trace import`): read as the command reads a trace's text.
#include "fuzz_common.hpp"
#include "fusesim/analysis/kineto.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    fusesim::analysis::import_kineto_text(fusesim::fuzz::as_text(data, size), fusesim::fuzz::kFile, 0);
  } catch (const fusesim::InputError&) {
  }
  return 0;
}
