#pragma once
// A Chrome trace (the JSON "Trace Event Format" read by Perfetto and chrome://tracing) of one
// simulated run, recorded by an Observer so the simulator core knows nothing about it.
//
// Layout: one process per rank (pid = rank, named "rank r (node n, <device model>)"), one thread per
// stream (compute, "comm (SM kernel)", "copy engine i"), and "recv" lanes for the receiving side of
// P2P transfers (Recv tasks hold no stream; concurrent receives get separate lanes so that slices on
// one thread never partially overlap, which the viewers cannot draw). Every task is an 'X' complete
// event, ts/dur in microseconds from 0 at whole nanoseconds; every transfer (P2P or collective ring step) is a flow arrow
// from the sending task to the receiving task.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/model/kernel.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/topo/cluster.hpp"

namespace fusesim::analysis {

class ChromeTraceRecorder final : public sim::Observer {
 public:
  // `costs` gives the FLOPs and HBM bytes shown on compute slices; nullptr leaves them out. Region
  // names come from `regions` (TaskGraph::regions()) when given.
  ChromeTraceRecorder(const topo::Cluster& cluster, const model::KernelCostModel* costs = nullptr,
                      std::vector<sched::Region> regions = {});

  void on_task_start(const sched::Task& task, sched::TaskId id, TimePs now) override;
  void on_task_end(const sched::Task& task, sched::TaskId id, TimePs now) override;
  void on_transfer_end(const sim::TransferRecord& transfer) override;

  // The whole trace document. Deterministic: the same run gives the same bytes.
  nlohmann::json to_json() const;
  // Writes to_json() whole or not at all (util/output.hpp).
  void write(const std::string& path) const;

  std::size_t tasks_recorded() const { return tasks_.size(); }
  std::size_t transfers_recorded() const { return transfers_.size(); }

 private:
  struct Entry {
    std::string name;
    int rank = 0;
    sched::StreamRef stream;
    bool is_recv = false;
    std::string category;          // "compute", "send", "recv", "collective"
    nlohmann::json args;
    TimePs start_ps = -1;
    TimePs end_ps = -1;
  };

  const topo::Cluster& cluster_;
  const model::KernelCostModel* costs_;
  std::vector<sched::Region> regions_;
  std::map<sched::TaskId, Entry> tasks_;
  std::vector<sim::TransferRecord> transfers_;
};

// Thread ids used in the trace, stable so that tools can rely on them.
int trace_thread_id(const sched::StreamRef& stream);
int trace_recv_thread_id(int lane);
std::string trace_thread_name(const sched::StreamRef& stream);

}  // namespace fusesim::analysis
