#include "fusesim/sched/ring.hpp"

#include <stdexcept>

namespace fusesim::sched {

TaskId ring_reduce_scatter(const Ring& ring, int member, std::int64_t tag0,
                           const std::function<TaskId(int step, int chunk)>& compute, const RingPorts& ports) {
  for (int i = 0; i < ring.size; ++i) {
    const int c = ring.reduce_chunk(member, i);
    TaskId value = compute(i, c);  // after this task the running sum of chunk c is complete here
    if (i > 0) {
      // The sum of chunk c the previous member passed on at its step i - 1.
      const TaskId received = ports.recv(RingMessage{i, c, ring.tag(tag0, i - 1, 0), ring.prev(member)}, {});
      const bool last = i == ring.size - 1;
      value = ports.add(RingMessage{i, c, 0, member}, value, received, last);
      if (last) return value;
    }
    if (ring.size == 1) return value;
    ports.send(RingMessage{i, c, ring.tag(tag0, i, 0), member}, {value});
  }
  throw std::logic_error("ring reduce-scatter over an empty ring");
}

TaskId ring_gather_step(const Ring& ring, int member, int step, std::int64_t tag0, const std::vector<TaskId>& have,
                        const RingPorts& ports) {
  const std::int64_t base = ring.tag(tag0, step, 0);
  ports.send(RingMessage{step, ring.gather_chunk(member, step), base, member}, have);
  return ports.recv(RingMessage{step, ring.gather_recv_chunk(member, step), base, ring.prev(member)}, {});
}

std::vector<TaskId> ring_all_gather(
    const Ring& ring, int member, std::int64_t tag0, std::vector<TaskId> ready,
    const std::function<void(int step, int chunk, const std::vector<TaskId>& have)>& compute, const RingPorts& ports) {
  std::vector<TaskId> have = std::move(ready);
  for (int i = 0; i < ring.size; ++i) {
    if (compute) compute(i, ring.gather_chunk(member, i), have);
    if (i == ring.size - 1) break;
    have = {ring_gather_step(ring, member, i, tag0, have, ports)};
  }
  return have;
}

TaskId ring_collective(const Ring& ring, int member, bool reduce, bool gather, std::int64_t tag0,
                       const std::vector<TaskId>& deps, const RingPorts& ports) {
  const int rs_steps = reduce ? ring.size - 1 : 0;
  const int steps = rs_steps + (gather ? ring.size - 1 : 0);
  TaskId prev_recv = kNoTask;
  for (int s = 0; s < steps; ++s) {
    const std::int64_t base = ring.tag(tag0, s, 0);
    int sent = 0, received = 0;
    if (s < rs_steps) {
      sent = ring.reduce_chunk(member, s);
      received = ring.reduce_chunk(member, s + 1);
    } else {
      sent = ring.gather_chunk(member, s - rs_steps);
      received = ring.gather_recv_chunk(member, s - rs_steps);
    }
    ports.send(RingMessage{s, sent, base, member}, s == 0 ? deps : std::vector<TaskId>{prev_recv});
    prev_recv = ports.recv(RingMessage{s, received, base, ring.prev(member)}, deps);
  }
  return prev_recv;
}

}  // namespace fusesim::sched
