#include <string>

#include "fusesim/topo/cluster.hpp"

namespace fusesim::topo {

std::string to_string(VertexKind k) {
  switch (k) {
    case VertexKind::accelerator: return "accelerator";
    case VertexKind::switch_: return "switch";
    case VertexKind::nic: return "nic";
  }
  return "?";
}

std::string to_string(SwitchKind k) {
  switch (k) {
    case SwitchKind::nvswitch: return "nvswitch";
    case SwitchKind::pcie: return "pcie";
    case SwitchKind::infiniband: return "infiniband";
    case SwitchKind::ethernet: return "ethernet";
    case SwitchKind::hccs: return "hccs";
  }
  return "?";
}

std::string to_string(LinkKind k) {
  switch (k) {
    case LinkKind::nvlink: return "nvlink";
    case LinkKind::hccs: return "hccs";
    case LinkKind::xgmi: return "xgmi";
    case LinkKind::pcie: return "pcie";
    case LinkKind::network: return "network";
  }
  return "?";
}

double DeviceModel::peak(Dtype d) const { return peak_flops_per_s.at(d).value; }

}  // namespace fusesim::topo
