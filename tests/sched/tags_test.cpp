// The message-tag ranges of sched/tags.hpp: disjoint, and refusing to run into one another.
#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>

#include "fusesim/sched/ring.hpp"
#include "fusesim/sched/tags.hpp"

using namespace fusesim::sched;

TEST_CASE("the tag ranges follow one another without a gap or an overlap", "[sched][tags]") {
  // TPSP from 0, the DP fused exchanges from 2^50, the DP collectives 2^48 further on.
  CHECK(tag_range(TagSpace::tpsp).first == 0);
  CHECK(tag_range(TagSpace::tpsp).end == tag_range(TagSpace::dp_fused).first);
  CHECK(tag_range(TagSpace::dp_fused).first == std::int64_t{1} << 50);
  CHECK(tag_range(TagSpace::dp_fused).end == tag_range(TagSpace::dp_collective).first);
  CHECK(tag_range(TagSpace::dp_collective).first == (std::int64_t{1} << 50) + (std::int64_t{1} << 48));
  CHECK(tag_range(TagSpace::dp_collective).end > tag_range(TagSpace::dp_collective).first);
}

TEST_CASE("an exchange's tag block is its index times its size into the range, and stays in it",
          "[sched][tags]") {
  // A DP ring of 4: two exchanges of 16 tags per gradient, 32 a block. Gradient 3 starts at
  // 2^50 + 96, and its last tag, Ring{4}.tag(base + 16, 3, 3) = base + 16 + 3 x 4 + 3 = base + 31, is
  // the one before gradient 4's block.
  const Ring ring{4};
  const std::int64_t size = 2 * ring.tags_per_exchange();
  const std::int64_t base = tag_block(TagSpace::dp_fused, 3, size);
  CHECK(base == (std::int64_t{1} << 50) + 96);
  CHECK(ring.tag(base + ring.tags_per_exchange(), 3, 3) == base + 31);
  CHECK(tag_block(TagSpace::dp_fused, 4, size) == base + 32);
  // The last block that fits in the 2^48 tags of the range, and the first that does not.
  const std::int64_t blocks = (std::int64_t{1} << 48) / size;
  CHECK(tag_block(TagSpace::dp_fused, blocks - 1, size) + size == tag_range(TagSpace::dp_fused).end);
  CHECK_THROWS_AS(tag_block(TagSpace::dp_fused, blocks, size), std::length_error);
  CHECK_THROWS_AS(tag_block(TagSpace::dp_fused, -1, size), std::length_error);
}

TEST_CASE("a tag counter hands out consecutive blocks, rewinds, and refuses to leave its range",
          "[sched][tags]") {
  TagCounter tags(TagSpace::tpsp);
  CHECK(tags.reserve(16) == 0);
  CHECK(tags.reserve(9) == 16);
  const std::int64_t mark = tags.position();
  CHECK(mark == 25);
  CHECK(tags.reserve(4) == 25);
  tags.set_position(mark);  // a second UP index draws the same tags
  CHECK(tags.reserve(4) == 25);
  CHECK_THROWS_AS(tags.reserve(tag_range(TagSpace::tpsp).end), std::length_error);
  tags.set_position(tag_range(TagSpace::tpsp).end - 1);
  CHECK(tags.reserve(1) == tag_range(TagSpace::tpsp).end - 1);
  CHECK_THROWS_AS(tags.reserve(1), std::length_error);
}
