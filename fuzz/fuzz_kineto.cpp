// Measured Kineto traces (`fusesim trace import`): read as the command reads a trace's text. And the
// scanner it reads them with (json_scan) against nlohmann's parser, the reference it replaced: both
// must accept and refuse the same inputs (tests/util/json_scan_test.cpp compares their events too).
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "fuzz_common.hpp"
#include "fusesim/analysis/kineto.hpp"
#include "fusesim/util/json_scan.hpp"

namespace {

class Accept final : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = fusesim::fuzz::as_text(data, size);
  Accept handler;
  fusesim::JsonScanError error;
  if (fusesim::json_scan(text, handler, error) != nlohmann::json::accept(text)) std::abort();
  // The three ways a trace is read: `trace import`, `calibrate from-trace` (GEMM shapes from the CPU
  // ops) and the simulated side of `trace compare` (fusesim's own traces, one rank).
  fusesim::analysis::TraceReadOptions shapes, simulated;
  shapes.gemm_shapes = true;
  simulated.simulated_rank = 0;
  simulated.keep_activities = true;
  for (const auto* options : {&shapes, &simulated}) {
    try {
      fusesim::analysis::import_kineto_text(text, fusesim::fuzz::kFile, 0, *options);
    } catch (const fusesim::InputError&) {
    }
  }
  try {
    fusesim::analysis::import_kineto_text(text, fusesim::fuzz::kFile, 0);
  } catch (const fusesim::InputError&) {
  }
  return 0;
}
