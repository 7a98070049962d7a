// CI baseline files (`fusesim check --baseline FILE`): read as check reads them, then as
// check --update does (metrics optional), which an input refused the first way may still pass.
#include "fuzz_common.hpp"
#include "fusesim/cli/input_readers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fusesim::fuzz::read_json(data, size, [](const fusesim::JsonDocument& doc) {
    try {
      fusesim::cli::check_baseline(doc, true);
    } catch (const fusesim::InputError&) {
      fusesim::cli::check_baseline(doc, false);
    }
  });
}
