#include "fusesim/sched/generate.hpp"

#include "fusesim/sched/dataflow.hpp"
#include "fusesim/sched/tpsp.hpp"

namespace fusesim::sched {

// Only TPSP is generated so far: tpsp_request() refuses Ulysses (up > 1) at $.parallel.up, and DP
// replicas (dp > 1) are generated as independent TP groups with no gradient synchronisation.
Schedule generate(const model::Workload& workload, const std::string& workload_label, const topo::Cluster& cluster,
                  model::ScheduleKind kind, const GenerateOptions& options) {
  return generate_tpsp(tpsp_request(workload, workload_label, cluster, kind, options));
}

}  // namespace fusesim::sched
