#pragma once
// The readers of `fusesim validate` and `fusesim check`, callable without running the command, so
// that the fuzz targets (fuzz/) and the tests reach them. Each reads exactly as its command does and
// throws InputError naming the file and the JSON path on what the command refuses.
#include "fusesim/util/json_reader.hpp"

namespace fusesim::cli {

// A validation case file (docs/calibration.md, "Validation cases"), as `fusesim validate` reads it.
void check_validation_cases(const JsonDocument& doc);
// A CI baseline file (docs/cli.md, `fusesim check`); need_metrics false is `check --update`.
void check_baseline(const JsonDocument& doc, bool need_metrics);

}  // namespace fusesim::cli
