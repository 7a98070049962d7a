// The allocator's options of the programs that run the engine as users run it: the fusesim executable
// and the benchmarks (CMakeLists.txt links this file into both, and jemalloc beside it where found).
// jemalloc's options, where the program runs on it (CMake's FUSESIM_JEMALLOC; elsewhere nothing
// reads this): transparent huge pages for its heap and its metadata. A run touches its memory once,
// page by page, and on kernels that grant huge pages only on request (transparent_hugepage "madvise",
// the default of many distributions) each 4 KiB page is a fault: a fifth to a half of a default-mode
// step's time on a virtual machine (BENCHMARKS.md, "Huge pages"). MALLOC_CONF overrides it
// (MALLOC_CONF=thp:default turns it off).
extern "C" {
[[gnu::used]] const char* malloc_conf = "thp:always,metadata_thp:always";
}
