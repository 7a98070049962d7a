// The registration of the schedule strategies: a schedule's one line outside its own file.
#include <stdexcept>

#include "fusesim/sched/strategy.hpp"
#include "fusesim/sched/tpsp.hpp"

namespace fusesim::sched {

namespace tpsp {
const Strategy& baseline_strategy();        // strategy/baseline.cpp
const Strategy& slice_strategy();           // strategy/slice.cpp
const Strategy& commfuse_strategy();        // strategy/commfuse.cpp
const Strategy& te_userbuffers_strategy();  // strategy/te_userbuffers.cpp

const TpStrategy& tp_allreduce_strategy();   // strategy/tp_allreduce.cpp

const TpStrategy& tp_strategy(const TpspRequest& r) {
  if (r.tp_strategy != nullptr) return *r.tp_strategy;
  if (r.kind == model::ScheduleKind::baseline && !r.shape.sequence_parallel) return tp_allreduce_strategy();
  return schedule_strategy(r.kind, r.schedule);
}
}  // namespace tpsp

const Strategy& schedule_strategy(model::ScheduleKind kind, const model::ScheduleOptions& options) {
  switch (kind) {
    case model::ScheduleKind::baseline:
      return options.tp_baseline_te_userbuffers ? tpsp::te_userbuffers_strategy() : tpsp::baseline_strategy();
    case model::ScheduleKind::slice: return tpsp::slice_strategy();
    case model::ScheduleKind::commfuse: return tpsp::commfuse_strategy();
  }
  throw std::logic_error("no strategy for this schedule");
}

const Strategy& up_strategy(const TpspRequest& r) {
  return r.up_strategy != nullptr ? *r.up_strategy : schedule_strategy(r.up_kind, r.schedule);
}

}  // namespace fusesim::sched
