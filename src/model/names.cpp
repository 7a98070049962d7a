#include <stdexcept>

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

std::string engine_name(const ScheduleOptions& s) {
  using enum CommEngine;
  if (s.collective_engine == sm_kernel && s.p2p_engine == sm_kernel) return "sm";
  if (s.collective_engine == copy_engine && s.p2p_engine == copy_engine) return "copy";
  if (s.collective_engine == sm_kernel && s.p2p_engine == copy_engine) return "auto";
  return "collectives " + to_string(s.collective_engine) + ", p2p " + to_string(s.p2p_engine);
}

void set_engine_mode(ScheduleOptions& s, const std::string& mode) {
  using enum CommEngine;
  if (mode == "sm") {
    s.collective_engine = s.p2p_engine = sm_kernel;
  } else if (mode == "copy") {
    s.collective_engine = s.p2p_engine = copy_engine;
  } else if (mode == "auto") {
    s.collective_engine = sm_kernel;
    s.p2p_engine = copy_engine;
  } else {
    throw std::invalid_argument("set_engine_mode: '" + mode + "' is not sm, copy or auto");
  }
}

std::string to_string(DpSharding s) {
  switch (s) {
    case DpSharding::ddp: return "ddp";
    case DpSharding::zero1: return "zero1";
    case DpSharding::zero2: return "zero2";
    case DpSharding::zero3: return "zero3";
  }
  return "?";
}

std::string to_string(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
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
