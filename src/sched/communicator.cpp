#include "fusesim/sched/communicator.hpp"

namespace fusesim::sched {

Communicators make_communicators(const model::ScheduleOptions& schedule) {
  auto group = [&](Parallelism p, int comm, int copy, int sm_p2p) {
    Communicator c;
    c.parallelism = p;
    c.collective_stream = StreamRef{StreamKind::comm, comm};
    c.p2p_copy_stream = StreamRef{StreamKind::copy, copy};
    c.p2p_sm_stream = StreamRef{StreamKind::comm, sm_p2p};
    c.collective_engine = schedule.collective_engine;
    c.p2p_engine = schedule.p2p_engine;
    c.sms = schedule.comm_sms.value_or(-1);
    return c;
  };
  Communicators out;
  static_cast<Communicator&>(out.tp) = group(Parallelism::tpsp, 0, 0, 0);
  out.tp.regather_stream = StreamRef{StreamKind::comm, 1};
  out.up = group(Parallelism::up, 1, 1, 1);
  static_cast<Communicator&>(out.dp) = group(Parallelism::dp, 3, 2, 4);
  // ZeRO's parameter gathers go through the DP group's one NCCL communicator, as its gradient
  // collectives do: "for NCCL backend, any collectives, even if issued in different streams, contend for
  // the same per-device NCCL stream" (PyTorch, torch/distributed/fsdp/api.py, BackwardPrefetch; so
  // too Megatron-LM's distributed optimizer, whose gather and reduce-scatter use the DP group), so
  // they run one after the other in the order issued, never beside each other.
  out.dp.gather_stream = out.dp.collective_stream;
  // The running-sum adds of CommFuse over DP run on a second compute stream. On the backward's own
  // stream each add, which must wait for its DP hop, would hold back every later kernel of the
  // backward: a NIC hop of a dp-th of a gradient takes longer than a dp-th of its last wgrad step, so
  // the whole backward would slow to the DP ring's pace (docs/schedules.md "DP"). There the backward
  // goes on while the ring advances, and the adds share the device with it when they run.
  out.dp.add_stream = StreamRef{StreamKind::compute, 1};
  // Megatron-LM sends activations and gradients between stages with NCCL's send/recv
  // (megatron/core/pipeline_parallel/p2p_communication.py): SM kernels, whatever the overlap
  // schedule compared inside the stages uses.
  out.pp = group(Parallelism::pp, 5, 3, 5);
  out.pp.p2p_engine = schedule.collective_engine;
  return out;
}

}  // namespace fusesim::sched
