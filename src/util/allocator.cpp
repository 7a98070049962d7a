#include "fusesim/util/allocator.hpp"

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

// jemalloc's control interface, bound where the process runs on jemalloc and null elsewhere: a weak
// reference, so that the libraries link into the tests and the sanitizer builds, which do not.
extern "C" int mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp, std::size_t newlen)
    __attribute__((weak));

namespace fusesim::util {

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

KeepFreedPages::KeepFreedPages(double memory_share) {
  if (mallctl == nullptr) return;
  const double memory = physical_memory_bytes();
  if (memory <= 0.0) return;
  limit_bytes_ = memory_share * memory;
  ssize_t previous = 0;
  std::size_t size = sizeof(previous);
  if (mallctl("arenas.dirty_decay_ms", &previous, &size, nullptr, 0) != 0) return;
  previous_decay_ms_ = static_cast<long>(previous);
  active_ = set_decay(-1);
}

KeepFreedPages::~KeepFreedPages() {
  if (!active_) return;
  set_decay(previous_decay_ms_);
  release();
}

// The default for arenas made from now on, then each arena there is (arena.<i> for i below
// arenas.narenas; one not initialised yet refuses, and takes the default when it is).
bool KeepFreedPages::set_decay(long decay_ms) const {
  ssize_t value = decay_ms;
  if (mallctl("arenas.dirty_decay_ms", nullptr, nullptr, &value, sizeof(value)) != 0) return false;
  unsigned arenas = 0;
  std::size_t size = sizeof(arenas);
  if (mallctl("arenas.narenas", &arenas, &size, nullptr, 0) != 0) return false;
  for (unsigned i = 0; i < arenas; ++i) {
    char name[48];
    std::snprintf(name, sizeof(name), "arena.%u.dirty_decay_ms", i);
    (void)mallctl(name, nullptr, nullptr, &value, sizeof(value));
  }
  return true;
}

std::optional<std::size_t> KeepFreedPages::resident_bytes() const {
  if (!active_) return std::nullopt;
  std::uint64_t epoch = 1;  // the statistics are a snapshot taken when the epoch advances
  std::size_t size = sizeof(epoch);
  if (mallctl("epoch", &epoch, &size, &epoch, size) != 0) return std::nullopt;
  std::size_t resident = 0;
  size = sizeof(resident);
  if (mallctl("stats.resident", &resident, &size, nullptr, 0) != 0) return std::nullopt;
  return resident;
}

void KeepFreedPages::release() const {
  if (active_) (void)mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);  // 4096: MALLCTL_ARENAS_ALL
}

void KeepFreedPages::trim() const {
  const std::optional<std::size_t> held = resident_bytes();
  if (held && static_cast<double>(*held) > limit_bytes_) release();
}

}  // namespace fusesim::util
