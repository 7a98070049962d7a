// `fusesim merge`: the parts of a sharded sweep (`fusesim sweep --shard i/n`) joined into the file the
// whole sweep would have written; or the parts of a sharded search (`fusesim search --shard i/n`)
// joined into one search result, its best configurations those of the whole search.
#include <ostream>

#include <fmt/format.h>

#include "fusesim/cli/app.hpp"
#include "fusesim/cli/commands.hpp"
#include "fusesim/cli/plot.hpp"
#include "fusesim/cli/search.hpp"
#include "fusesim/cli/sweep.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/output.hpp"

namespace fusesim::cli {
namespace {

class MergeCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.add_option("parts", parts_, "the sweep (or search) parts (.json), in any order")->type_name("FILE")->required();
    sub.add_option("-o,--output", output_, "the merged result, .csv or .json")->type_name("FILE")->required();
    sub.add_option("--format", format_, "csv or json (default: from the --output extension)")->type_name("FORMAT");
    sub.add_option("--write-workloads", workloads_dir_,
                   "search parts: write the workload of each of the --top rows into this folder as <rank>.json, as "
                   "search --write-workloads does")
        ->type_name("DIR");
  }

  int run(Io& io) override {
    if (!output_.empty()) check_output_path(output_, "--output");  // before the work, not after
    if (!workloads_dir_.empty()) check_plot_folder(workloads_dir_, "--write-workloads");
    const std::string format = output_format_for(output_, format_);
    // Each part read once; the first tells which kind (a search file says so in its "format").
    std::vector<JsonDocument> docs;
    docs.reserve(parts_.size());
    for (const std::string& p : parts_) docs.push_back(JsonDocument::load(p));
    if (is_search_json(docs.front())) {
      std::vector<SearchResult> parts;
      parts.reserve(docs.size());
      for (const JsonDocument& d : docs) parts.push_back(parse_search_json(d));
      const SearchResult all = merge_searches(parts_, parts);
      write_output_file(output_, format == "json" ? search_json(all).dump(2) + "\n" : search_csv(all));
      io.out << search_table(all);
      io.err << fmt::format("merge: {} search parts, {} candidates, {} simulated, best step {:.1f} ms\n", parts.size(),
                            all.candidates, all.simulated,
                            all.rows.empty() ? 0.0 : ps_to_seconds(all.rows.front().step_ps) * 1e3);
      if (!workloads_dir_.empty()) io.err << write_merged_search_workloads(all, workloads_dir_);
      return 0;
    }
    if (!workloads_dir_.empty())
      throw InputError(kCommandLine, "--write-workloads", "only the parts of a search have best rows to write");
    std::vector<SweepResult> parts;
    parts.reserve(docs.size());
    for (const JsonDocument& d : docs) parts.push_back(parse_sweep_json(d));
    const SweepResult all = merge_sweeps(parts_, parts);
    write_output_file(output_, format == "json" ? sweep_json(all) : sweep_csv(all));
    io.err << sweep_summary(all);
    return 0;
  }

 private:
  std::vector<std::string> parts_;
  std::string output_;
  std::string format_;
  std::string workloads_dir_;
};

}  // namespace

std::unique_ptr<Command> make_merge_command() { return std::make_unique<MergeCommand>(); }

}  // namespace fusesim::cli
