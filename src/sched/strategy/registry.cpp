// The registration of the TP schedule strategies: a schedule's one line outside its own file.
#include <stdexcept>

#include "fusesim/sched/strategy.hpp"

namespace fusesim::sched::tpsp {

const TpStrategy& baseline_strategy();  // strategy/baseline.cpp
const TpStrategy& slice_strategy();     // strategy/slice.cpp
const TpStrategy& commfuse_strategy();  // strategy/commfuse.cpp
const TpStrategy& te_userbuffers_strategy();  // strategy/te_userbuffers.cpp

const TpStrategy& tp_strategy(model::ScheduleKind kind, const model::ScheduleOptions& options) {
  switch (kind) {
    case model::ScheduleKind::baseline:
      return options.tp_baseline_te_userbuffers ? te_userbuffers_strategy() : baseline_strategy();
    case model::ScheduleKind::slice: return slice_strategy();
    case model::ScheduleKind::commfuse: return commfuse_strategy();
  }
  throw std::logic_error("no TP strategy for this schedule");
}

}  // namespace fusesim::sched::tpsp
