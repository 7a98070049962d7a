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
//
// Counter tracks ('C' events), one per link that carried a transfer, under one process per node
// ("node n links") and one for the links outside any node ("fabric links"): the link's load in
// percent of its line rate, each transfer counting its payload over its whole span (bytes / (end -
// start)) on every link of its route. That is the mean over the transfer, not the instantaneous
// max-min share the engine solves: a transfer slowed part of the way by another shows its average.
//
// A TraceFilter keeps the trace to some ranks and layers: a 70B stack on 32 ranks is ~300 MB whole.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusesim/model/kernel.hpp"
#include "fusesim/sched/dag.hpp"
#include "fusesim/sim/engine.hpp"
#include "fusesim/topo/cluster.hpp"

namespace fusesim::analysis {

struct TraceFilter {
  // Only the tasks of these ranks, and the flow arrows between two kept tasks. Link counters are
  // drawn for the links that carry a transfer from or to one of them, and count every transfer on
  // those links (a link's load does not depend on which ranks one looks at).
  std::optional<std::set<int>> ranks;
  // Only the tasks labelled with one of these layers. Tasks of no single layer (embedding, LM head,
  // a DP bucket of several layers, the optimizer) stay: they are few and frame the layers.
  std::optional<std::set<int>> layers;
  bool counters = true;

  bool keeps_rank(int rank) const { return !ranks || ranks->count(rank) > 0; }
  bool keeps(const sched::Task& task) const {
    return keeps_rank(task.rank) && (!layers || task.labels.layer < 0 || layers->count(task.labels.layer) > 0);
  }
};

class ChromeTraceRecorder final : public sim::Observer {
 public:
  // `costs` gives the FLOPs and HBM bytes shown on compute slices; nullptr leaves them out. Region
  // names come from `regions` (TaskGraph::regions()) when given.
  ChromeTraceRecorder(const topo::Cluster& cluster, const model::KernelCostModel* costs = nullptr,
                      std::vector<sched::Region> regions = {}, TraceFilter filter = {});

  void on_task_start(const sched::Task& task, sched::TaskId id, TimePs now) override;
  void on_task_end(const sched::Task& task, sched::TaskId id, TimePs now) override;
  void on_transfer_end(const sim::TransferRecord& transfer) override;

  // The whole trace document. Deterministic: the same run gives the same bytes.
  nlohmann::json to_json() const;
  // Writes to_json() whole or not at all, gzip-compressed when the path ends in ".gz"
  // (util/output.hpp).
  void write(const std::string& path) const;

  // Pipeline parallelism: each process is labelled with its stage ("stage 1, rank 8 (...)"), the
  // stages being consecutive blocks of `ranks_per_stage` ranks (sched::RankLayout).
  void label_stages(int ranks_per_stage) { ranks_per_stage_ = ranks_per_stage; }

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

  void add_link_counters(nlohmann::json& events) const;

  const topo::Cluster& cluster_;
  int ranks_per_stage_ = 0;
  const model::KernelCostModel* costs_;
  std::vector<sched::Region> regions_;
  TraceFilter filter_;
  std::map<sched::TaskId, Entry> tasks_;
  std::vector<sim::TransferRecord> transfers_;
};

// Thread ids used in the trace, stable so that tools can rely on them.
int trace_thread_id(const sched::StreamRef& stream);
int trace_recv_thread_id(int lane);
std::string trace_thread_name(const sched::StreamRef& stream);

}  // namespace fusesim::analysis
