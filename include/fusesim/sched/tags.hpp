#pragma once
// Message tags: what pairs a Send with its Recv (same sender, receiver and tag, sched/dag.hpp). Every
// exchange a generator emits draws its tags from one of the ranges below, so that exchanges of
// different generators cannot collide, and a range that would run into the next one is an error
// rather than a silent mismatch. Within an exchange a Ring lays its tags out by step and sender
// (Ring::tag), Ulysses by row, sender and receiver (UlyssesEmitter::tag).
#include <cstdint>
#include <stdexcept>

namespace fusesim::sched {

// The tag ranges. TPSP and Ulysses share one counter in the order they emit; the DP sync runs per
// rank, so each of its exchanges computes its block from its own index instead (tag_block), the same
// on every rank of the ring.
enum class TagSpace : std::uint8_t {
  tpsp,           // Fuse-AG, Fuse-RS and the Ulysses all-to-all steps, in emission order
  dp_fused,       // the DP fused gradient and DDP's all-gather half, two exchanges per gradient
  dp_collective,  // DP collectives lowered to ring P2P, two exchanges per collective
  pipeline,       // activations and gradients between pipeline stages, one tag per (micro-batch, layer, direction)
};

struct TagRange {
  std::int64_t first = 0, end = 0;  // [first, end)
};

constexpr TagRange tag_range(TagSpace space) {
  constexpr std::int64_t kDp = std::int64_t{1} << 50, kDpCollective = kDp + (std::int64_t{1} << 48);
  switch (space) {
    case TagSpace::tpsp: return {0, kDp};
    case TagSpace::dp_fused: return {kDp, kDpCollective};
    case TagSpace::dp_collective: return {kDpCollective, std::int64_t{1} << 62};
    case TagSpace::pipeline: return {std::int64_t{1} << 62, (std::int64_t{1} << 62) + (std::int64_t{1} << 61)};
  }
  return {};
}

// Block `index` of `size` tags in `space`: the first tag of the index-th exchange of that kind.
inline std::int64_t tag_block(TagSpace space, std::int64_t index, std::int64_t size) {
  const TagRange r = tag_range(space);
  if (index < 0 || size < 0 || (size > 0 && index > (r.end - r.first) / size - 1))
    throw std::length_error("message tags: more exchanges than the tag range holds");
  return r.first + index * size;
}

// A counter over one range: each exchange reserves its block in the order the generator emits it.
// position() and set_position() let several emitters (the UP indices of a DP replica) draw the same
// tags, then go on past the furthest of them.
class TagCounter {
 public:
  explicit TagCounter(TagSpace space) : next_(tag_range(space).first), end_(tag_range(space).end) {}

  std::int64_t reserve(std::int64_t count) {
    if (count < 0 || count > end_ - next_) throw std::length_error("message tags: the tag range is exhausted");
    const std::int64_t first = next_;
    next_ += count;
    return first;
  }
  std::int64_t position() const { return next_; }
  void set_position(std::int64_t position) {
    if (position > end_) throw std::length_error("message tags: the tag range is exhausted");
    next_ = position;
  }

 private:
  std::int64_t next_, end_;
};

}  // namespace fusesim::sched
