#pragma once
// A communication group's resources, as its own NCCL communicator would hold them: the streams its
// collectives and point-to-point transfers go on, the engine each runs on and the SMs an SM-kernel
// transfer holds. Each group has stream indices of its own, so that its transfers never queue
// behind another group's in stream order (a stream runs its tasks in the order they were added).
// Built in one place (make_communicators) from the workload's schedule options.
#include "fusesim/model/workload.hpp"
#include "fusesim/sched/dag.hpp"

namespace fusesim::sched {

struct Communicator {
  Parallelism parallelism = Parallelism::tpsp;
  StreamRef collective_stream;  // collectives (baseline and slice)
  // P2P transfers: on a copy-engine stream or, with SM-kernel sends, an SM stream of their own.
  StreamRef p2p_copy_stream;
  StreamRef p2p_sm_stream;
  model::CommEngine collective_engine = model::CommEngine::sm_kernel;
  model::CommEngine p2p_engine = model::CommEngine::copy_engine;
  int sms = -1;  // SMs an SM-kernel transfer holds; -1: the device model's default

  StreamRef p2p_stream() const {
    return p2p_engine == model::CommEngine::copy_engine ? p2p_copy_stream : p2p_sm_stream;
  }
};

// TP: its collectives on comm stream 0, its ring P2P on copy stream 0 (or comm 0); the baseline
// backward's re-gather beside the dgrad on comm stream 1, which it shares with Ulysses' all-to-alls
// (a job with both runs them in that stream's order). Ulysses: comm 1, copy 1. DP: gradient
// collectives and ZeRO parameter gathers on comm 3 (one NCCL communicator: in the order issued), ring
// P2P on copy 2 (or comm 4), and the running-sum adds of its fused gradient on compute stream 1. DP's
// streams are apart from Ulysses' because with tp x up x dp both exchange in the same backward.
struct TpCommunicator : Communicator {
  StreamRef regather_stream;
};
struct DpCommunicator : Communicator {
  StreamRef gather_stream;
  StreamRef add_stream;
};
// Pipeline stages: their activation and gradient sends on comm stream 5 (NCCL send/recv kernels, the
// run's collective engine), apart from every other group's.
struct Communicators {
  TpCommunicator tp;
  Communicator up;
  DpCommunicator dp;
  Communicator pp;
};

Communicators make_communicators(const model::ScheduleOptions& schedule);

// Ring `ring` of a collective lowered to ring P2P steps over several rings (topo/rings.hpp): ring 0
// on `base`, ring k on comm stream base.index + 8 k of the same kind, so that each ring's steps wait
// for their own ring's alone, as NCCL's channels progress each on its own inside one kernel.
constexpr int kRingStreamStride = 8;
inline StreamRef ring_stream(StreamRef base, int ring) { return StreamRef{base.kind, base.index + kRingStreamStride * ring}; }

}  // namespace fusesim::sched
