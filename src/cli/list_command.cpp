// `fusesim list`: the topologies and workloads compiled into the binary.
#include <filesystem>
#include <ostream>

#include <fmt/format.h>

#include "fusesim/analysis/table.hpp"
#include "fusesim/cli/commands.hpp"
#include "fusesim/model/pricing.hpp"
#include "fusesim/model/profile.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/embedded.hpp"

namespace fusesim::cli {
namespace {

std::string stem_of(const std::string& relative_path) {
  return std::filesystem::path(relative_path).stem().string();
}

// A topology's description is a paragraph: wrapped to this many characters, the table stays about 130
// columns wide instead of one line of up to 600 per topology.
constexpr std::size_t kDescriptionWidth = 72;

class ListCommand final : public Command {
 public:
  void configure(CLI::App& /*sub*/) override {}

  int run(Io& io) override {
    // Each shipped file is read with the same strict loaders as a user's, so `list` also proves that
    // every shipped file loads.
    analysis::Table topologies({{"topology", analysis::Align::left},
                                {"ranks", analysis::Align::right},
                                {"layout", analysis::Align::left},
                                {"description", analysis::Align::left, kDescriptionWidth}});
    for (const std::string& f : embedded_files("topologies")) {
      const std::string name = stem_of(f);
      const topo::Cluster c = topo::load_cluster_by_name_or_path(name);
      std::string models;
      for (const auto& [model_name, model] : c.device_models) models += (models.empty() ? "" : ", ") + model_name;
      topologies.add_row({name, fmt::format("{}", c.num_ranks()),
                          fmt::format("{} x {} {}", c.num_nodes, c.devices_per_node, models), c.description});
    }
    analysis::Table workloads({{"workload", analysis::Align::left},
                               {"model", analysis::Align::left},
                               {"layers", analysis::Align::right},
                               {"sequence", analysis::Align::right},
                               {"dtype", analysis::Align::left},
                               {"tp x up x dp", analysis::Align::left}});
    for (const std::string& f : embedded_files("workloads")) {
      const std::string name = stem_of(f);
      const model::Workload w = model::load_workload(name);
      workloads.add_row({name, w.arch.name, fmt::format("{}", w.arch.layers), fmt::format("{}", w.sequence_length),
                         topo::to_string(w.dtype),
                         fmt::format("{} x {} x {}", w.parallel.tp, w.parallel.up, w.parallel.dp)});
    }
    analysis::Table profiles({{"profile", analysis::Align::left},
                              {"device", analysis::Align::left},
                              {"kind", analysis::Align::left},
                              {"samples", analysis::Align::right}});
    for (const std::string& name : model::shipped_profile_names(true)) {
      const model::Profile p = model::load_profile(name);
      const std::size_t n = p.gemm.size() + p.attention.size() + p.contention.size() + p.collectives.size();
      profiles.add_row({name, p.device_name + " (" + p.device_model + ")",
                        p.kind + (p.estimate ? ", estimate" : ""), fmt::format("{}", n)});
    }
    io.out << "Shipped topologies (--topology NAME, or a path to a file of the same schema):\n"
           << topologies.render() << "\nShipped workloads (--workload NAME, or a path):\n"
           << workloads.render()
           << "\nShipped calibration profiles (simulate/validate --profile NAME, or a path; docs/calibration.md):\n"
           << profiles.render() << std::flush;
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_list_command() { return std::make_unique<ListCommand>(); }

}  // namespace fusesim::cli
