#pragma once
// What the fusesim executable's allocator is told by a long run that builds and drops many task
// graphs (fusesim search). jemalloc, when the process runs on it (the executable links it: CMake's
// FUSESIM_JEMALLOC, BENCHMARKS.md "Allocator"); elsewhere (the C library's malloc, the tests, the
// sanitizer builds) it does nothing and reports nothing.
#include <cstddef>
#include <optional>

namespace fusesim::util {

// The machine's physical memory in bytes; 0 where the system does not say.
double physical_memory_bytes();

// While one lives, freed pages stay with the allocator for the next allocations instead of going back
// to the kernel after its decay time (jemalloc's dirty_decay_ms -1 in every arena): a graph built
// where the last one was dropped costs no page faults. trim() hands them back once the allocator
// holds more than `memory_share` of the machine's memory. At its end the pages are handed back and
// the decay time is what it was.
class KeepFreedPages {
 public:
  explicit KeepFreedPages(double memory_share);
  ~KeepFreedPages();
  KeepFreedPages(const KeepFreedPages&) = delete;
  KeepFreedPages& operator=(const KeepFreedPages&) = delete;
  // Hands the freed pages back to the kernel now (every arena purged); they are kept again after.
  void release() const;
  // release() where the allocator holds more than its share of the machine's memory.
  void trim() const;

 private:
  // Bytes of physically resident pages the allocator holds (jemalloc's stats.resident), freed ones
  // included; nullopt where not active.
  std::optional<std::size_t> resident_bytes() const;
  bool set_decay(long decay_ms) const;
  bool active_ = false;
  long previous_decay_ms_ = 0;
  double limit_bytes_ = 0.0;
};

}  // namespace fusesim::util
