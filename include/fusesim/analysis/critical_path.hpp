#pragma once
// The critical path of a simulated step (docs/metrics.md, "Pipeline"): the chain of work, and of
// waiting, that ends when the step ends. Walking back from the last task to end, each step goes to
// what held the current task back: the predecessor (explicit edge or stream order) that ended last,
// or, for a transfer that waited after it was ready, the other end (the Send of a Recv, the member of
// a collective) that became ready last. What the path spends is split into compute, communication and
// waiting (the time between one link of the chain ending and the next starting: event waits between
// streams, a transfer's matching, time before the first task), which add up to the step.
#include <vector>

#include "fusesim/sched/dag.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/util/units.hpp"

namespace fusesim::analysis {

struct CriticalPath {
  TimePs compute_ps = 0;  // compute tasks on the path
  TimePs comm_ps = 0;     // Send, Recv and collective tasks on the path
  TimePs wait_ps = 0;     // between them
  std::int64_t tasks = 0;
  // Compute on the path by pipeline stage (stage-major ranks, `stages` equal parts of the graph's
  // ranks); one entry without stages.
  std::vector<TimePs> stage_compute_ps;
};

// `result` must be the simulation of `graph` (std::logic_error otherwise, or when the parts do not
// add up to the makespan).
CriticalPath critical_path(const sched::TaskGraph& graph, const sim::SimResult& result, int stages);

}  // namespace fusesim::analysis
