// The allocator's options of the programs that run the engine as users run it, the fusesim executable
// and the benchmarks: CMakeLists.txt links this file into both, and jemalloc beside it where found
// (FUSESIM_JEMALLOC; elsewhere nothing reads it). Transparent huge pages for jemalloc's heap and its
// metadata: a run touches its memory once, page by page, and on kernels that grant huge pages only on
// request (transparent_hugepage "madvise", the default of many distributions) each 4 KiB page is a
// fault, a fifth to a half of a default-mode step's time on a virtual machine (BENCHMARKS.md, "Huge
// pages"). MALLOC_CONF overrides it (MALLOC_CONF=thp:default turns it off).
extern "C" {
[[gnu::used]] const char* malloc_conf = "thp:always,metadata_thp:always";
}
