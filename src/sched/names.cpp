#include "fusesim/sched/dag.hpp"
#include "fusesim/sched/generate.hpp"

namespace fusesim::sched {

std::string to_string(StreamKind k) {
  switch (k) {
    case StreamKind::compute: return "compute";
    case StreamKind::comm: return "comm";
    case StreamKind::copy: return "copy";
  }
  return "?";
}

std::string to_string(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::all_to_all: return "all_to_all";
  }
  return "?";
}

std::string to_string(Phase p) {
  switch (p) {
    case Phase::none: return "";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

std::string to_string(Parallelism p) {
  switch (p) {
    case Parallelism::tpsp: return "tpsp";
    case Parallelism::up: return "up";
    case Parallelism::dp: return "dp";
    case Parallelism::custom: return "custom";
    case Parallelism::pp: return "pp";
  }
  return "?";
}

std::optional<Parallelism> parse_parallelism(std::string_view name) {
  for (Parallelism p : {Parallelism::tpsp, Parallelism::up, Parallelism::dp, Parallelism::custom, Parallelism::pp})
    if (name == to_string(p)) return p;
  return std::nullopt;
}

std::string to_string(Scope s) {
  switch (s) {
    case Scope::layer: return "layer";
    case Scope::stack: return "stack";
    case Scope::step: return "step";
  }
  return "?";
}

}  // namespace fusesim::sched
