// DP gradient synchronisation; the schedules are described in include/fusesim/sched/dp.hpp and
// docs/schedules.md ("DP").
#include "fusesim/sched/dp.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "fusesim/sched/ring.hpp"
#include "fusesim/sched/strategy.hpp"
#include "fusesim/sched/tags.hpp"
#include "fusesim/topo/rings.hpp"
#include "fusesim/util/concat.hpp"

namespace fusesim::sched {
namespace {

// DP collective instances live in their own number range, so that the TPSP counter (from 0) never
// collides with them (tags: sched/tags.hpp).
constexpr std::int64_t kDpInstance0 = std::int64_t{1} << 44;

Rect part_rect(const RowPart& p, std::int64_t cols) { return Rect{p.row0, 0, p.rows, cols}; }

// The labels of a ZeRO-3 gather named `name` ("L3/fwd", "mb1/L3/bwd", "root") and of the copies
// around it: its region, layer, and the pass the name says.
TaskLabels gather_labels(int region, const std::string& name, int layer, TaskName op) {
  TaskLabels l;
  l.region = region;
  l.layer = layer;
  l.phase = name.find("/bwd") != std::string::npos ? Phase::backward : Phase::forward;
  l.op = op;
  return l;
}

}  // namespace

RowPart row_part(std::int64_t rows, int parts, int p) {
  const std::int64_t r0 = rows * p / parts, r1 = rows * (p + 1) / parts;
  return RowPart{r0, r1 - r0};
}

std::vector<std::vector<int>> dp_buckets(const std::vector<Bytes>& gradient_bytes, Bytes bucket_bytes) {
  std::vector<std::vector<int>> out;
  BucketFill fill;
  bool open = false;
  for (std::size_t j = 0; j < gradient_bytes.size(); ++j) {
    if (!open) out.emplace_back();
    out.back().push_back(static_cast<int>(j));
    open = !fill.add(gradient_bytes[j], bucket_bytes);
  }
  return out;
}

bool DpSync::fused() const { return strategy_.dp_fused(); }
CollectiveKind DpSync::gradient_kind() const {
  return cfg_.sharding == model::DpSharding::ddp ? CollectiveKind::all_reduce : CollectiveKind::reduce_scatter;
}
bool DpSync::serial() const { return strategy_.dp_serial(cfg_.schedule); }

DpSync::DpSync(TaskGraph& graph, DataflowProgram* program, DpConfig config)
    : g_(graph), prog_(program), cfg_(std::move(config)), strategy_(schedule_strategy(cfg_.kind, cfg_.schedule)),
      comm_(make_communicators(cfg_.schedule).dp) {
  if (cfg_.dp < 1 || cfg_.members < 1) throw std::logic_error("DpSync: dp and members must be >= 1");
  if (cfg_.schedule.dp_bucket_bytes < 1) throw std::logic_error("DpSync: the bucket size must be positive");
  // Mirror mode emits the simulated replicas alone: the other replicas' data never exists. Their
  // collectives keep every replica in the group; the engine times the images' part of the rings by
  // the simulated members (sim/engine.cpp, CollectiveRun).
  if (cfg_.mirror) prog_ = nullptr;
}

TaskId DpSync::ring_recv(int rank, int from, const std::string& name, StreamRef stream, Bytes bytes_,
                         const std::function<Bytes(int sender)>& sent_bytes,
                         const std::function<std::int64_t(int sender)>& tag_of, const TaskLabels& labels,
                         std::int32_t data_op, const std::vector<TaskId>& deps) {
  const int t = cfg_.dp, r = replica(rank), simulated = std::min(cfg_.mirror ? cfg_.simulated : t, t);
  // A predecessor that is simulated sends for real (mirror mode: the replicas of the simulated group,
  // e.g. its Ulysses ranks, which come first in the ring).
  if (from < simulated) return add(rank, name, stream, RecvTask{peer(rank, from), bytes_, tag_of(from)}, labels, data_op, deps);
  // The predecessor is a mirror image. Shifting the ring by `simulated` replicas (the group simulated,
  // along which the cluster and the rings repeat: generate's mirror_asymmetry) maps it onto a
  // simulated replica, which a ring entering the group from its last images enters from, and `r` onto
  // the replica as far beyond: that one receives the shifted sender's Send exactly when `r` receives
  // its predecessor's, so a proxy Recv there, gated by r's own deps, stands in for it.
  const int shifted = (from + simulated) % t;
  if (shifted >= simulated || r + simulated >= t)
    throw std::logic_error(fmt::format("DpSync: replica {}'s ring predecessor {} has no simulated image", r, from));
  return add_proxy_task(g_, peer(rank, r + simulated), rank, name, stream,
                        RecvTask{peer(rank, shifted), sent_bytes(shifted), tag_of(shifted)}, labels, deps);
}

const std::vector<std::vector<int>>& DpSync::rings(int rank) {
  const int m = member(rank);
  auto it = rings_.find(m);
  if (it != rings_.end()) return it->second;
  std::vector<std::vector<int>> out;
  if (cfg_.cluster != nullptr)
    out = topo::collective_rings(group(rank), *cfg_.cluster);
  else if (!cfg_.replica_nodes.empty())
    out = topo::rail_rings(cfg_.replica_nodes);
  else
    out = topo::rail_rings(std::vector<int>(static_cast<std::size_t>(cfg_.dp), 0));  // one node: one ring
  return rings_.emplace(m, std::move(out)).first->second;
}

int DpSync::ring_sms(int rank, int count) const {
  if (count <= 1 || comm_.collective_engine != model::CommEngine::sm_kernel) return comm_.sms;
  int sms = comm_.sms;
  if (sms < 0 && cfg_.cluster == nullptr) return sms;
  if (sms < 0) {
    // As the engine gives the collective this ring stands for (Run::collective_sms_for).
    sms = cfg_.cluster->device(rank).contention.collective_sms(cfg_.cluster->on_one_node(group(rank)));
  }
  return std::max(1, sms / count);
}

std::vector<TaskId> DpSync::p2p_collective(int rank, CollectiveKind kind, Bytes total, const std::string& name,
                                           StreamRef stream, const TaskLabels& labels, const std::vector<TaskId>& deps,
                                           const std::vector<int>& grads) {
  const int t = cfg_.dp, r = replica(rank);
  if (kind == CollectiveKind::all_to_all) throw std::logic_error("DpSync: no all-to-all in DP");
  const int rs_steps = kind == CollectiveKind::all_gather ? 0 : t - 1;
  const std::vector<std::vector<int>>& orders = rings(rank);
  const int R = static_cast<int>(orders.size());
  // Each ring moves an equal share of every step's t-th of the buffer (the engine's collectives
  // split it alike; the first rings take a byte more where it does not divide).
  const Bytes share = total / t;
  const auto ring_bytes = [&](int k) { return share / R + (k < share % R ? 1 : 0); };
  const int sms = ring_sms(rank, R);
  RankState& st = ranks_[rank];
  const std::int64_t k_collective = st.collectives++;
  const Ring ring{t};
  // Two exchanges' tags per ring and collective: a reduce-scatter and an all-gather half (all-reduce).
  const std::int64_t block = 2 * ring.tags_per_exchange();
  const std::int64_t tags0 = tag_block(TagSpace::dp_collective, k_collective, R * block);
  // Dataflow: in ring k, the chunk of ring position c is sub-part k (of R) of row part order_k[c] of
  // every gradient of the collective (the replica at position c owns its own row part at the end of
  // the reduce-scatter, as in the collective form), in the orders of sched/ring.hpp. Reduce-scatter
  // step s sends the chunk it reduces (the rank's own gradient at step 0, else the partial sum
  // received at s - 1) and receives the one it reduces at s + 1, reduced with its own gradient into
  // the partial sums (the last step, its own chunk, into `synced`); the all-gather half sends the
  // chunk of `synced` it holds and receives the next into it, in place. The fault hook swaps the part
  // index of the faulted replica's own gradient (or own reduced part) reads.
  bool data = prog_ != nullptr && !grads.empty();
  for (int j : grads) data = data && st.grads[static_cast<std::size_t>(j)].g.buffer >= 0;
  std::vector<BufferId> partial;
  if (data)
    for (int j : grads) {
      Grad& gr = st.grads[static_cast<std::size_t>(j)];
      if (kind == CollectiveKind::all_gather) {
        if (gr.synced < 0) throw std::logic_error("DpSync: a P2P all-gather of a gradient never reduced");
        gr.gathered = gr.synced;
        continue;
      }
      partial.push_back(alloc(rank, gr.g.name + "/dp_partial", gr.g.rows, gr.g.cols));
      gr.synced = alloc(rank, gr.g.name + "/dp_synced", gr.g.rows, gr.g.cols);
    }
  const auto step_labels = [&](const RingMessage& m) {
    TaskLabels l = labels;
    l.step = m.step;
    return l;
  };
  std::vector<TaskId> ends;  // the collective is done when every ring's last receive is
  for (int k = 0; k < R; ++k) {
    const std::vector<int>& order = orders[static_cast<std::size_t>(k)];
    std::vector<int> position(static_cast<std::size_t>(t));
    for (int i = 0; i < t; ++i) position[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = i;
    const int pos = position[static_cast<std::size_t>(r)];
    const int next = peer(rank, order[static_cast<std::size_t>(ring.next(pos))]);
    const int from = order[static_cast<std::size_t>(ring.prev(pos))];
    const std::int64_t tag0 = tags0 + k * block;
    const Bytes chunk = ring_bytes(k);
    const StreamRef ring_stream_k = ring_stream(stream, k);
    const std::string ring_name = R > 1 ? concat(name, "/ring", k) : name;
    // One rectangle per gradient: ring chunk c of buffer `which` (0: the gradient, 1: partial sums, 2: synced).
    auto parts = [&](int which, int c, bool faulted) {
      std::vector<Ref> out;
      const int own = order[static_cast<std::size_t>(c)];
      const int part = faulted ? fault_part(rank, own) : own;
      for (std::size_t i = 0; i < grads.size(); ++i) {
        const Grad& gr = st.grads[static_cast<std::size_t>(grads[i])];
        const BufferId b = which == 0 ? gr.g.buffer : (which == 1 ? partial[i] : gr.synced);
        const RowPart p = row_part(gr.g.rows, t, part), sub = row_part(p.rows, R, k);
        out.push_back(Ref{b, part_rect(RowPart{p.row0 + sub.row0, sub.rows}, gr.g.cols)});
      }
      return out;
    };
    // Ring step s sends what step s-1 received (reduced, or as gathered): sched/ring.hpp's ring_collective.
    RingPorts ports;
    ports.send = [&](const RingMessage& m, const std::vector<TaskId>& after) {
      std::int32_t send_op = -1;
      if (data && m.step < rs_steps)
        send_op = op(SendPartsOp{m.step == 0 ? parts(0, m.chunk, true) : parts(1, m.chunk, false)});
      else if (data)
        send_op = op(SendPartsOp{parts(2, m.chunk, m.step == rs_steps)});
      return add(rank, concat(ring_name, "/send", m.step), ring_stream_k,
                 SendTask{next, chunk, m.tag(), comm_.collective_engine, sms}, step_labels(m), send_op, after);
    };
    ports.recv = [&](const RingMessage& m, const std::vector<TaskId>& posted) {
      std::int32_t recv_op = -1;
      if (data && m.step < rs_steps)
        recv_op = op(RecvPartsOp{parts(m.step == rs_steps - 1 ? 2 : 1, m.chunk, false), parts(0, m.chunk, true)});
      else if (data)
        recv_op = op(RecvPartsOp{parts(2, m.chunk, false), {}});
      // The sender's tag names its ring position, the same for the sender shifted by a mirror.
      return ring_recv(
          rank, from, concat(ring_name, "/recv", m.step), ring_stream_k, chunk, [&](int) { return chunk; },
          [&, base = m.tag_base](int sender) { return base + position[static_cast<std::size_t>(sender)]; },
          step_labels(m), recv_op, posted);
    };
    ends.push_back(ring_collective(ring, pos, rs_steps > 0, kind != CollectiveKind::reduce_scatter, tag0, deps, ports));
  }
  return ends;
}

const RankGroup& DpSync::group(int rank) const {
  const auto m = static_cast<std::size_t>(member(rank));
  if (groups_.size() <= m) groups_.resize(m + 1);
  if (groups_[m].empty()) {
    std::vector<int> out;
    for (int d = 0; d < cfg_.dp; ++d) out.push_back(peer(rank, d));
    groups_[m] = std::move(out);
  }
  return groups_[m];
}

int DpSync::region(const std::string& name) {
  auto it = regions_.find(name);
  if (it != regions_.end()) return it->second;
  const int id = g_.add_region(Region{name, Parallelism::dp});
  regions_.emplace(name, id);
  return id;
}

BufferId DpSync::alloc(int rank, const std::string& name, std::int64_t rows, std::int64_t cols) {
  BufferDecl b;
  b.name = concat("r", rank, "/", name);
  b.rank = rank;
  b.rows = rows;
  b.cols = cols;
  return prog_->add_buffer(std::move(b));
}

std::int32_t DpSync::op(DataOp d) { return prog_->add_op(std::move(d)); }

int DpSync::fault_part(int rank, int part) const {
  const DpFault& f = cfg_.fault;
  if (f.replica != replica(rank)) return part;
  return Ring{cfg_.dp}.swapped(part, f.step, f.shift);
}

TaskId DpSync::add(int rank, std::string name, StreamRef stream, TaskKind kind, TaskLabels labels,
                   std::int32_t data_op, const std::vector<TaskId>& deps) {
  return add_rank_task(g_, rank, name, stream, std::move(kind), std::move(labels), data_op, deps);
}

void DpSync::note_rows(const DpGradient& g, bool cut_by_rows) {
  if (!cfg_.mirror || !mirror_inexact_.empty() || cfg_.dp < 2 || g.rows % cfg_.dp == 0) return;
  if (!cut_by_rows) return;  // a collective, or its ring, splits the flat buffer evenly (padded: optimizer_elements)
  mirror_inexact_ = fmt::format("gradient {} has {} rows, not a multiple of the {} DP ring members: their row parts "
                                "differ in size",
                                g.name, g.rows, cfg_.dp);
}

void DpSync::gradient(int rank, const DpGradient& g, TaskId done) {
  note_rows(g, false);
  Grad gr;
  gr.g = g;
  gr.done = done;
  RankState& st = ranks_[rank];
  st.grads.push_back(std::move(gr));
  if (fused() || serial() || cfg_.dp == 1) return;
  // A bucket closes once it holds at least the cap (BucketFill) and is issued as soon as its last
  // gradient is done: created here, not after the backward, because the DP group's collectives share
  // one stream in the order issued (communicator.hpp), and in FSDP's backward a layer's reduce-scatter
  // is issued after the next layer's gather and before the one after it.
  st.bucket.push_back(static_cast<int>(st.grads.size()) - 1);
  if (st.fill.add(bytes(g.elements()), cfg_.schedule.dp_bucket_bytes)) issue_bucket(rank);
}

void DpSync::issue_bucket(int rank) {
  RankState& st = ranks_[rank];
  if (st.bucket.empty()) return;
  const CollectiveKind kind = gradient_kind();
  std::vector<TaskId> deps;
  for (int j : st.bucket) deps.push_back(st.grads[static_cast<std::size_t>(j)].done);
  const std::vector<int> idx = std::move(st.bucket);
  st.bucket.clear();
  st.fill = {};
  for (TaskId e : collective(rank, kind, idx, concat("dp/bucket", st.buckets++), deps, false)) st.ends.push_back(e);
}

TaskId DpSync::fused_gradient(int rank, const DpGradient& g, const PieceFn& piece, const std::vector<TaskId>& deps) {
  note_rows(g, true);
  RankState& st = ranks_[rank];
  Grad gr;
  gr.g = g;
  gr.cut_by_rows = true;
  const int t = cfg_.dp, r = replica(rank);
  const bool ddp = cfg_.sharding == model::DpSharding::ddp;
  const int reg = region(g.name + (ddp ? "+dp_ar" : "+dp_rs"));
  if (t == 1) {
    gr.done = piece(0, g.rows, 0, reg, deps);
    st.grads.push_back(std::move(gr));
    return st.grads.back().done;
  }
  const Ring ring{t};
  // Two exchanges' tags per gradient: the Fuse-RS ring and DDP's all-gather half.
  const std::int64_t tag0 = tag_block(TagSpace::dp_fused, st.fused++, 2 * ring.tags_per_exchange());
  const std::int64_t ag_tag0 = tag0 + ring.tags_per_exchange();
  const bool data = prog_ != nullptr && g.buffer >= 0;
  BufferId recv_buf = -1, sum_buf = -1;
  if (data) {
    recv_buf = alloc(rank, g.name + "/dp_recv", g.rows, g.cols);
    sum_buf = alloc(rank, g.name + "/dp_sum", g.rows, g.cols);
    gr.synced = alloc(rank, g.name + "/dp_synced", g.rows, g.cols);
  }
  const int next = peer(rank, ring.next(r));
  auto labels = [&](TaskName op_name, int chunk, int step) {
    TaskLabels l;
    l.region = reg;
    l.layer = g.layer;
    l.chunk = chunk;
    l.step = step;
    l.phase = Phase::backward;
    l.op = op_name;
    return l;
  };
  TaskId last_compute = kNoTask;
  // Fuse-RS over the DP ring (the reduce order of sched/ring.hpp): step i computes the part it reduces
  // of the last accumulation step;
  // from step 1 on the running sum of that part received from r-1 is added and passed to r+1; the
  // own part comes last and its add is the reduced part.
  // Parts of fewer than dp_fuse_min_rows rows (a large dp cuts a gradient into thin slivers: at dp
  // 128 an 8192-row gradient gives 64-row parts, half of every 128-row GEMM tile idle) are not
  // computed part by part: one GEMM computes the whole last step first (`group` = t ring steps),
  // and the ring then runs beside the backward. Not a few steps per GEMM: a group of consecutive
  // parts wraps past row 0 on some replicas and not on others (two GEMMs against one), which would
  // make the replicas differ and the mirrored simulation (docs/schedules.md "Symmetry") inexact.
  // The bytes of the Send a receive takes at reduce-scatter step i (the sender's Send of step i - 1)
  // or at all-gather step i (its Send of step i): the sender's part (sender - i) mod t in both.
  const auto sent_at = [&](int i) {
    return [&, i](int sender) { return bytes(row_part(g.rows, t, ring.gather_chunk(sender, i)).rows * g.cols); };
  };
  const std::int64_t part_rows = g.rows / t;
  const int group = part_rows < cfg_.schedule.dp_fuse_min_rows ? t : 1;
  std::vector<std::pair<RowPart, TaskId>> pieces;  // the current group's GEMMs and the rows they computed
  const auto computed = [&](int step) {
    const int part = ring.reduce_chunk(r, step);
    return (cfg_.fault.replica == r && cfg_.fault.step == step) ? ring.wrap(part + cfg_.fault.shift) : part;
  };
  const auto compute = [&](int i, int) {
    if (i % group == 0) {
      // The group's parts as maximal runs of adjacent rows, each one GEMM, in ascending row order.
      std::vector<RowPart> parts;
      for (int j = i; j < std::min(t, i + group); ++j) parts.push_back(row_part(g.rows, t, computed(j)));
      std::sort(parts.begin(), parts.end(), [](const RowPart& a, const RowPart& b) { return a.row0 < b.row0; });
      std::vector<RowPart> runs;
      for (const RowPart& p : parts) {
        if (!runs.empty() && runs.back().row0 + runs.back().rows == p.row0)
          runs.back().rows += p.rows;
        else if (runs.empty() || runs.back().row0 + runs.back().rows < p.row0)
          runs.push_back(p);
      }
      pieces.clear();
      // Run k is labelled step i + k (< i + group: a run holds at least one part), so names stay unique.
      for (std::size_t k = 0; k < runs.size(); ++k) {
        pieces.emplace_back(runs[k], piece(runs[k].row0, runs[k].rows, i + static_cast<int>(k), reg,
                                           i == 0 ? deps : std::vector<TaskId>{}));
        last_compute = pieces.back().second;
      }
    }
    const RowPart pcc = row_part(g.rows, t, computed(i));
    TaskId value = kNoTask;
    for (const auto& [run, task] : pieces)
      if (run.row0 <= pcc.row0 && pcc.row0 < run.row0 + run.rows) value = task;
    return value;
  };
  auto part_bytes = [&](int c) { return bytes(row_part(g.rows, t, c).rows * g.cols); };
  // In replica order a sender's tag is its replica (Ring::tag).
  const auto tag_at = [](std::int64_t base) { return [base](int sender) { return base + sender; }; };
  auto part_ref = [&](BufferId b, int c) { return Ref{b, part_rect(row_part(g.rows, t, c), g.cols)}; };
  RingPorts rs;
  rs.recv = [&](const RingMessage& m, const std::vector<TaskId>& posted) {
    return ring_recv(rank, m.sender, concat(g.name, "/dp_recv/c", m.chunk), comm_.p2p_stream(),
                     part_bytes(m.chunk), sent_at(m.step), tag_at(m.tag_base), labels("dp_recv", m.chunk, m.step),
                     data ? op(RecvOp{part_ref(recv_buf, m.chunk)}) : -1, posted);
  };
  rs.add = [&](const RingMessage& m, TaskId partial, TaskId received, bool last) {
    const std::int64_t n = row_part(g.rows, t, m.chunk).rows * g.cols;
    return add(rank, concat(g.name, "/dp_add/c", m.chunk), comm_.add_stream,
               ComputeTask{model::ElementwiseKernel{"add", bytes(3 * n), static_cast<Flops>(n)}, cfg_.grad_dtype, false},
               labels("dp_add", m.chunk, m.step),
               data ? op(AddOp{part_ref(g.buffer, m.chunk), part_ref(recv_buf, m.chunk),
                               part_ref(last ? gr.synced : sum_buf, m.chunk)})
                    : -1,
               {partial, received});
  };
  rs.send = [&](const RingMessage& m, const std::vector<TaskId>& after) {
    // Step 0 passes on the own part of the gradient, later steps the running sum.
    return add(rank, concat(g.name, "/dp_send/c", m.chunk), comm_.p2p_stream(),
               SendTask{next, part_bytes(m.chunk), m.tag(), comm_.p2p_engine, comm_.sms},
               labels("dp_send", m.chunk, m.step),
               data ? op(SendOp{part_ref(m.step == 0 ? g.buffer : sum_buf, m.chunk)}) : -1, after);
  };
  TaskId end = ring_reduce_scatter(ring, r, tag0, compute, rs);
  if (ddp) {
    // The all-gather half as ring P2P (the gather order of sched/ring.hpp), copy engines only; the
    // compute stream goes on meanwhile.
    RingPorts ag;
    ag.send = [&](const RingMessage& m, const std::vector<TaskId>& after) {
      return add(rank, concat(g.name, "/dp_ag_send/c", m.chunk), comm_.p2p_stream(),
                 SendTask{next, part_bytes(m.chunk), m.tag(), comm_.p2p_engine, comm_.sms},
                 labels("dp_ag_send", m.chunk, m.step), data ? op(SendOp{part_ref(gr.synced, m.chunk)}) : -1, after);
    };
    ag.recv = [&](const RingMessage& m, const std::vector<TaskId>& posted) {
      return ring_recv(rank, m.sender, concat(g.name, "/dp_ag_recv/c", m.chunk), comm_.p2p_stream(),
                       part_bytes(m.chunk), sent_at(m.step), tag_at(m.tag_base), labels("dp_ag_recv", m.chunk, m.step),
                       data ? op(RecvOp{part_ref(gr.synced, m.chunk)}) : -1, posted);
    };
    end = ring_all_gather(ring, r, ag_tag0, {end}, nullptr, ag).at(0);
  }
  gr.done = end;
  st.ends.push_back(end);
  st.grads.push_back(std::move(gr));
  return last_compute;
}

std::vector<TaskId> DpSync::collective(int rank, CollectiveKind kind, const std::vector<int>& idx,
                                       const std::string& region_name, const std::vector<TaskId>& deps, bool params) {
  RankState& st = ranks_[rank];
  const int t = cfg_.dp, r = replica(rank);
  Bytes total = 0;
  std::int64_t elements = 0;
  bool data = prog_ != nullptr;
  for (int j : idx) {
    const std::int64_t n = st.grads[static_cast<std::size_t>(j)].g.elements();
    elements += n;
    total += params ? param_bytes(n) : bytes(n);
    data = data && st.grads[static_cast<std::size_t>(j)].g.buffer >= 0;
  }
  TaskLabels l;
  l.region = region(region_name);
  l.layer = idx.size() == 1 ? st.grads[static_cast<std::size_t>(idx[0])].g.layer : -1;
  l.phase = params ? Phase::optimizer : Phase::backward;
  const std::string label_op = "dp_" + to_string(kind);  // l views it until the tasks are added
  l.op = label_op;
  const std::vector<TaskId> ready =
      kind == CollectiveKind::reduce_scatter && !params ? pack_gradients(rank, region_name, l, elements, deps) : deps;
  if (cfg_.as_p2p)
    return p2p_collective(rank, kind, total, concat(region_name, "/", to_string(kind)), comm_.collective_stream, l,
                          ready, idx);
  const std::int64_t instance = kDpInstance0 + st.collectives++ * cfg_.members + member(rank);
  std::int32_t data_op = -1;
  if (data) {
    CollectiveOp cop;
    const std::size_t G = idx.size();
    auto grad = [&](std::size_t k) -> Grad& { return st.grads[static_cast<std::size_t>(idx[k])]; };
    switch (kind) {
      case CollectiveKind::all_reduce:
        for (std::size_t k = 0; k < G; ++k) {
          std::size_t src = k;
          if (cfg_.fault.replica == r && static_cast<std::size_t>(ring_mod(cfg_.fault.step, static_cast<int>(G))) == k)
            src = static_cast<std::size_t>(ring_mod(static_cast<int>(k) + cfg_.fault.shift, static_cast<int>(G)));
          const DpGradient& s = grad(src).g;
          cop.in.push_back(Ref{s.buffer, Rect{0, 0, s.rows, s.cols}});
          Grad& d = grad(k);
          d.synced = alloc(rank, d.g.name + "/dp_synced", d.g.rows, d.g.cols);
          cop.out.push_back(Ref{d.synced, Rect{0, 0, d.g.rows, d.g.cols}});
        }
        break;
      case CollectiveKind::reduce_scatter:
        for (int p = 0; p < t; ++p)
          for (std::size_t k = 0; k < G; ++k)
            cop.in.push_back(Ref{grad(k).g.buffer, part_rect(row_part(grad(k).g.rows, t, fault_part(rank, p)), grad(k).g.cols)});
        for (std::size_t k = 0; k < G; ++k) {
          Grad& d = grad(k);
          d.synced = alloc(rank, d.g.name + "/dp_synced", d.g.rows, d.g.cols);
          cop.out.push_back(Ref{d.synced, part_rect(row_part(d.g.rows, t, r), d.g.cols)});
        }
        break;
      case CollectiveKind::all_gather:
        for (std::size_t k = 0; k < G; ++k) {
          Grad& d = grad(k);
          cop.in.push_back(Ref{d.synced, part_rect(row_part(d.g.rows, t, r), d.g.cols)});
          d.gathered = alloc(rank, d.g.name + "/dp_gathered", d.g.rows, d.g.cols);
        }
        for (int p = 0; p < t; ++p)
          for (std::size_t k = 0; k < G; ++k)
            cop.out.push_back(
                Ref{grad(k).gathered, part_rect(row_part(grad(k).g.rows, t, fault_part(rank, p)), grad(k).g.cols)});
        break;
      case CollectiveKind::all_to_all:
        throw std::logic_error("DpSync: no all-to-all in DP");
    }
    data_op = op(std::move(cop));
  }
  return {add(rank, concat(region_name, "/", to_string(kind)), comm_.collective_stream,
              CollectiveTask{kind, group(rank), total, instance, comm_.collective_engine, comm_.sms}, std::move(l),
              data_op, ready)};
}

std::vector<TaskId> DpSync::finish_backward(int rank, const std::vector<TaskId>& after) {
  RankState& st = ranks_[rank];
  if (fused() || st.grads.empty() || cfg_.dp == 1) return st.ends;
  const CollectiveKind kind = gradient_kind();
  if (serial()) {
    std::vector<int> all;
    for (std::size_t j = 0; j < st.grads.size(); ++j) all.push_back(static_cast<int>(j));
    for (TaskId e : collective(rank, kind, all, "dp/sync", after, false)) st.ends.push_back(e);
    return st.ends;
  }
  issue_bucket(rank);  // the last bucket takes the rest (the full ones were issued as they filled)
  return st.ends;
}

std::int64_t DpSync::optimizer_elements(int rank) const {
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return 0;
  const bool ddp = cfg_.sharding == model::DpSharding::ddp;
  std::int64_t rows = 0, flat = 0;
  for (const Grad& g : it->second.grads) {
    if (!ddp && g.cut_by_rows)
      rows += row_part(g.g.rows, cfg_.dp, replica(rank)).rows * g.g.cols;
    else
      flat += g.g.elements();
  }
  return ddp ? flat : rows + (flat + cfg_.dp - 1) / cfg_.dp;
}

std::vector<TaskId> DpSync::gather_updated(int rank, const std::vector<TaskId>& after) {
  if (cfg_.sharding != model::DpSharding::zero1 && cfg_.sharding != model::DpSharding::zero2) return after;
  RankState& st = ranks_[rank];
  if (st.grads.empty() || cfg_.dp == 1) return after;
  std::vector<TaskId> ends;
  if (serial()) {
    std::vector<int> all;
    for (std::size_t j = 0; j < st.grads.size(); ++j) all.push_back(static_cast<int>(j));
    return collective(rank, CollectiveKind::all_gather, all, "dp/param_ag", after, true);
  }
  std::vector<Bytes> sizes;
  for (const Grad& g : st.grads) sizes.push_back(bytes(g.g.elements()));
  const auto buckets = dp_buckets(sizes, cfg_.schedule.dp_bucket_bytes);
  for (std::size_t b = 0; b < buckets.size(); ++b)
    for (TaskId e :
         collective(rank, CollectiveKind::all_gather, buckets[b], concat("dp/param_ag/bucket", b), after, true))
      ends.push_back(e);
  return ends;
}

std::int64_t DpSync::gathered_bytes_per_element(int layer) const {
  return topo::bytes_per_element(layer >= 0 && cfg_.layer_gather_dtype ? *cfg_.layer_gather_dtype : cfg_.dtype);
}

TaskId DpSync::copy_task(int rank, const std::string& name, StreamRef stream, Bytes bytes_, TaskLabels labels,
                         const std::vector<TaskId>& deps) {
  return add(rank, name, stream, ComputeTask{model::ElementwiseKernel{"copy", bytes_, 0.0}, cfg_.dtype, false},
             std::move(labels), -1, deps);
}

std::vector<TaskId> DpSync::gather_layer(int rank, const std::string& name, int layer, std::int64_t elements,
                                         const std::vector<TaskId>& deps) {
  TaskLabels l = gather_labels(region(name + "/dp_param_ag"), name, layer, "dp_param_all_gather");
  const std::int64_t g = gathered_bytes_per_element(layer);
  std::vector<TaskId> ready = deps;
  if (cfg_.fsdp) {
    // The shard (an even share, padded as FSDP pads it) cast from its fp32 sharded parameter, and with
    // FSDP2 copied into the all-gather's input, on a stream beside compute (DpConfig::fsdp).
    const std::int64_t shard = (elements + cfg_.dp - 1) / cfg_.dp;
    const std::int64_t cast = g == 4 ? 0 : 4 + g;
    const Bytes prep = shard * (cast + (*cfg_.fsdp == model::FsdpImpl::fsdp2 ? 2 * g : 0));
    if (prep > 0) {
      TaskLabels c = l;
      c.op = "fsdp_gather_copy_in";
      ready = {copy_task(rank, name + "/fsdp_gather_copy_in", StreamRef{StreamKind::compute, 2}, prep, std::move(c),
                         deps)};
    }
  }
  return timing_collective(rank, CollectiveKind::all_gather, elements * g, name + "/dp_param_ag", comm_.gather_stream,
                           std::move(l), ready);
}

TaskId DpSync::copy_out(int rank, const std::string& name, int layer, std::int64_t elements,
                        const std::vector<TaskId>& deps) {
  if (cfg_.fsdp != model::FsdpImpl::fsdp2) return kNoTask;
  return copy_task(rank, name + "/fsdp_copy_out", StreamRef{StreamKind::compute, 0},
                   elements * 2 * gathered_bytes_per_element(layer),
                   gather_labels(region(name + "/dp_param_ag"), name, layer, "fsdp_copy_out"), deps);
}

std::vector<TaskId> DpSync::pack_gradients(int rank, const std::string& name, const TaskLabels& labels,
                                           std::int64_t elements, const std::vector<TaskId>& deps) {
  if (!cfg_.fsdp) return deps;
  const std::int64_t p = topo::bytes_per_element(cfg_.dtype), r = topo::bytes_per_element(cfg_.grad_dtype);
  TaskLabels l = labels;
  const StreamRef compute{StreamKind::compute, 0};
  if (*cfg_.fsdp == model::FsdpImpl::fsdp2) {
    l.op = "fsdp_grad_copy_in";
    return {copy_task(rank, name + "/fsdp_grad_copy_in", compute, elements * (p + r), std::move(l), deps)};
  }
  l.op = "fsdp_grad_cat";
  const TaskId cat = copy_task(rank, name + "/fsdp_grad_cat", compute, elements * 2 * p, l, deps);
  if (p == r) return {cat};
  l.op = "fsdp_grad_cast";
  return {copy_task(rank, name + "/fsdp_grad_cast", StreamRef{StreamKind::compute, 3}, elements * (p + r), std::move(l),
                    {cat})};
}

std::vector<TaskId> DpSync::reduce_layer(int rank, const std::string& name, int layer, std::int64_t elements,
                                         const std::vector<TaskId>& deps) {
  TaskLabels l;
  l.region = region(name + "/dp_grad_rs");
  l.layer = layer;
  l.phase = Phase::backward;
  l.op = "dp_reduce_scatter";
  const std::vector<TaskId> packed = pack_gradients(rank, name, l, elements, deps);
  return timing_collective(rank, CollectiveKind::reduce_scatter, bytes(elements), name + "/dp_grad_rs",
                           comm_.collective_stream, std::move(l), packed);
}

std::vector<TaskId> DpSync::timing_collective(int rank, CollectiveKind kind, Bytes total, const std::string& name,
                                              StreamRef stream, TaskLabels labels, const std::vector<TaskId>& deps) {
  if (cfg_.as_p2p) return p2p_collective(rank, kind, total, name, stream, labels, deps, {});
  const std::int64_t instance = kDpInstance0 + ranks_[rank].collectives++ * cfg_.members + member(rank);
  return {add(rank, name, stream,
              CollectiveTask{kind, group(rank), total, instance, comm_.collective_engine, comm_.sms},
              std::move(labels), -1, deps)};
}

BufferId DpSync::synced(int rank, int j) const {
  auto it = ranks_.find(rank);
  return it == ranks_.end() ? -1 : it->second.grads.at(static_cast<std::size_t>(j)).synced;
}

BufferId DpSync::gathered(int rank, int j) const {
  auto it = ranks_.find(rank);
  return it == ranks_.end() ? -1 : it->second.grads.at(static_cast<std::size_t>(j)).gathered;
}

}  // namespace fusesim::sched
