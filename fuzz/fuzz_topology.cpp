// Cluster topology files (docs/topology.md): topo::parse_cluster, as --topology FILE reads them.
#include "fuzz_common.hpp"
#include "fusesim/topo/cluster.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fusesim::fuzz::read_json(data, size, [](const fusesim::JsonDocument& doc) { fusesim::topo::parse_cluster(doc); });
}
