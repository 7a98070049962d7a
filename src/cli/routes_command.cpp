// `fusesim routes`: the path the simulator takes between two ranks of a cluster, link by link with its
// bottleneck, or a summary of every pair's route, so that a user can see where traffic goes before
// trusting a prediction (a route over PCIe where NVLink exists halves a layer's speed).
#include <algorithm>
#include <limits>
#include <map>
#include <ostream>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fusesim/analysis/table.hpp"
#include "fusesim/cli/commands.hpp"
#include "fusesim/cli/simulate.hpp"
#include "fusesim/topo/cluster.hpp"
#include "fusesim/util/error.hpp"

namespace fusesim::cli {
namespace {

using nlohmann::json;

// Above this many ranks the summary takes the routes from node 0's ranks only (a cluster's nodes are
// alike, and all pairs of 16,384 ranks are 268 million routes).
constexpr int kAllSourcesUpTo = 1024;

std::string gb_per_s(double bytes_per_s) { return fmt::format("{:.1f}", bytes_per_s / 1e9); }
std::string us(TimePs ps) { return fmt::format("{:.3f}", static_cast<double>(ps) / kPsPerMicrosecond); }

// "nvlink > nvlink", the kinds of the links in order.
std::string kinds_of(const topo::Cluster& c, const topo::Route& r) {
  std::string s;
  for (topo::LinkId l : r.links) s += (s.empty() ? "" : " > ") + topo::to_string(c.links[static_cast<std::size_t>(l)].kind);
  return s;
}

bool node_has_scale_up(const topo::Cluster& c, int rank) {
  const topo::VertexId v = c.rank_vertex.at(static_cast<std::size_t>(rank));
  return std::any_of(c.links.begin(), c.links.end(),
                     [&](const topo::Link& l) { return l.from == v && topo::is_scale_up(l.kind); });
}

class RoutesCommand final : public Command {
 public:
  void configure(CLI::App& sub) override {
    sub.add_option("--topology", topology_, "cluster: a topology file or a shipped name")->capture_default_str();
    sub.add_option("--from", from_, "source rank (with --to: print that one route)")->type_name("RANK");
    sub.add_option("--to", to_, "destination rank")->type_name("RANK");
    sub.add_option("--format", format_, "table or json")->capture_default_str();
  }

  int run(Io& io) override {
    const OutputFormat format = parse_format(format_);
    if (from_.empty() != to_.empty())
      throw InputError(kCommandLine, from_.empty() ? "--from" : "--to", "give both --from and --to, or neither");
    const topo::Cluster cluster = topo::load_cluster_by_name_or_path(topology_);
    const int n = cluster.num_ranks();
    if (!from_.empty()) {
      const int a = parse_rank("--from", from_, n), b = parse_rank("--to", to_, n);
      if (a == b) throw InputError(kCommandLine, "--to", fmt::format("rank {} is the source itself", b));
      io.out << one_route(cluster, a, b, format);
      return 0;
    }
    io.out << summary(cluster, format);
    return 0;
  }

 private:
  static int parse_rank(const char* option, const std::string& text, int ranks) {
    if (ranks < 2) throw InputError(kCommandLine, option, "the cluster has one rank: no route to print");
    long long v = -1;
    std::size_t used = 0;
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || v < 0 || v >= ranks)
      throw InputError(kCommandLine, option,
                       fmt::format("'{}' is not a rank of this cluster (0 to {})", text, ranks - 1));
    return static_cast<int>(v);
  }

  static std::string one_route(const topo::Cluster& c, int a, int b, OutputFormat format) {
    const topo::Route r = c.route(a, b);
    const double neck = c.bottleneck_bytes_per_s(r);
    if (format == OutputFormat::json) {
      json links = json::array();
      for (topo::LinkId l : r.links) {
        const topo::Link& link = c.links[static_cast<std::size_t>(l)];
        links.push_back({{"name", link.name},
                         {"kind", topo::to_string(link.kind)},
                         {"line_rate_bytes_per_s", link.line_rate_bytes_per_s},
                         {"bandwidth_bytes_per_s", link.bandwidth_bytes_per_s},
                         {"latency_s", ps_to_seconds(link.latency_ps)}});
      }
      const json doc = {{"topology", c.name},  {"from", a},
                        {"to", b},             {"links", std::move(links)},
                        {"hops", r.links.size()}, {"latency_s", ps_to_seconds(r.latency_ps)},
                        {"bottleneck_bytes_per_s", neck}};
      return doc.dump(2) + "\n";
    }
    analysis::Table t({{"hop", analysis::Align::right},
                       {"link", analysis::Align::left},
                       {"kind", analysis::Align::left},
                       {"line rate (GB/s)", analysis::Align::right},
                       {"bandwidth (GB/s)", analysis::Align::right},
                       {"latency (us)", analysis::Align::right}});
    int hop = 0;
    for (topo::LinkId l : r.links) {
      const topo::Link& link = c.links[static_cast<std::size_t>(l)];
      t.add_row({fmt::format("{}", ++hop), link.name, topo::to_string(link.kind), gb_per_s(link.line_rate_bytes_per_s),
                 gb_per_s(link.bandwidth_bytes_per_s), us(link.latency_ps)});
    }
    return fmt::format("{}: rank {} -> rank {}\n\n{}\n{} hops, latency {} us, bottleneck {} GB/s\n", c.name, a, b,
                       t.render(), r.links.size(), us(r.latency_ps), gb_per_s(neck));
  }

  static std::string summary(const topo::Cluster& c, OutputFormat format) {
    const int n = c.num_ranks();
    const bool all_sources = n <= kAllSourcesUpTo;
    struct Group {
      std::int64_t pairs = 0;
      std::string example;
    };
    // (same node, link kinds, bottleneck, latency) -> pairs.
    std::map<std::tuple<bool, std::string, double, TimePs>, Group> groups;
    std::int64_t skipped_scale_up = 0;
    std::string skipped_example;
    for (int a = 0; a < n; ++a) {
      if (!all_sources && c.node_of(a) != c.node_of(0)) continue;
      const bool scale_up = node_has_scale_up(c, a);
      const std::vector<topo::Route> routes = c.routes_from(a);
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        const topo::Route& r = routes[static_cast<std::size_t>(b)];
        const bool same_node = c.node_of(a) == c.node_of(b);
        Group& g = groups[{same_node, kinds_of(c, r), c.bottleneck_bytes_per_s(r), r.latency_ps}];
        if (g.pairs++ == 0) g.example = fmt::format("{} -> {}", a, b);
        const bool over_scale_up = std::all_of(r.links.begin(), r.links.end(), [&](topo::LinkId l) {
          return topo::is_scale_up(c.links[static_cast<std::size_t>(l)].kind);
        });
        if (same_node && scale_up && !over_scale_up && skipped_scale_up++ == 0)
          skipped_example = fmt::format("{} -> {}", a, b);
      }
    }
    const std::string scope =
        all_sources ? fmt::format("all {} ordered pairs of {} ranks", static_cast<std::int64_t>(n) * (n - 1), n)
                    : fmt::format("routes from the {} ranks of node 0 (of {} ranks)", c.devices_per_node, n);
    if (format == OutputFormat::json) {
      json rows = json::array();
      for (const auto& [key, g] : groups)
        rows.push_back({{"same_node", std::get<0>(key)},
                        {"links", std::get<1>(key)},
                        {"bottleneck_bytes_per_s", std::get<2>(key)},
                        {"latency_s", ps_to_seconds(std::get<3>(key))},
                        {"pairs", g.pairs},
                        {"example", g.example}});
      const json doc = {{"topology", c.name},
                        {"scope", scope},
                        {"routes", std::move(rows)},
                        {"same_node_pairs_off_scale_up", skipped_scale_up}};
      return doc.dump(2) + "\n";
    }
    analysis::Table t({{"pairs", analysis::Align::right},
                       {"where", analysis::Align::left},
                       {"links", analysis::Align::left},
                       {"bottleneck (GB/s)", analysis::Align::right},
                       {"latency (us)", analysis::Align::right},
                       {"e.g.", analysis::Align::left}});
    for (const auto& [key, g] : groups)
      t.add_row({fmt::format("{}", g.pairs), std::get<0>(key) ? "same node" : "other node", std::get<1>(key),
                 gb_per_s(std::get<2>(key)), us(std::get<3>(key)), g.example});
    std::string out = fmt::format("{}: {}\n\n{}", c.name, scope, t.render());
    if (skipped_scale_up > 0)
      out += fmt::format("\nwarning: {} pairs of one node do not route over the node's scale-up links (e.g. {})\n",
                         skipped_scale_up, skipped_example);
    return out;
  }

  std::string topology_ = "dgx-h100";
  std::string from_, to_;
  std::string format_ = "table";
};

}  // namespace

std::unique_ptr<Command> make_routes_command() { return std::make_unique<RoutesCommand>(); }

}  // namespace fusesim::cli
