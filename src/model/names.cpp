#include "fusesim/model/kernel.hpp"
#include "fusesim/model/workload.hpp"

namespace fusesim::model {

std::string to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::baseline: return "baseline";
    case ScheduleKind::slice: return "slice";
    case ScheduleKind::commfuse: return "commfuse";
  }
  return "?";
}

std::string to_string(CommEngine e) {
  switch (e) {
    case CommEngine::sm_kernel: return "sm_kernel";
    case CommEngine::copy_engine: return "copy_engine";
  }
  return "?";
}

std::string kernel_kind(const Kernel& k) {
  switch (k.index()) {
    case 0: return "gemm";
    case 1: return "attention";
    default: return "elementwise";
  }
}

}  // namespace fusesim::model
