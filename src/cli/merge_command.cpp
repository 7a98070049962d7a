// `fusesim merge`: the parts of a sharded sweep (`fusesim sweep --shard i/n`) joined into the file the
// whole sweep would have written.
#include <ostream>

#include "fusesim/cli/commands.hpp"
#include "fusesim/cli/sweep.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

class MergeCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.add_option("parts", parts_, "the sweep parts (.json), in any order")->type_name("FILE")->required();
    sub.add_option("-o,--output", output_, "the merged result, .csv or .json")->type_name("FILE")->required();
    sub.add_option("--format", format_, "csv or json (default: from the --output extension)")->type_name("FORMAT");
  }

  int run(Io& io) override {
    if (!output_.empty()) check_output_path(output_, "--output");  // before the work, not after
    const std::string format = output_format_for(output_, format_);
    std::vector<SweepResult> parts;
    parts.reserve(parts_.size());
    for (const std::string& p : parts_) parts.push_back(read_sweep_json(p));
    const SweepResult all = merge_sweeps(parts_, parts);
    write_output_file(output_, format == "json" ? sweep_json(all) : sweep_csv(all));
    io.err << sweep_summary(all);
    return 0;
  }

 private:
  std::vector<std::string> parts_;
  std::string output_;
  std::string format_;
};

}  // namespace

std::unique_ptr<Command> make_merge_command() { return std::make_unique<MergeCommand>(); }

}  // namespace fusesim::cli
