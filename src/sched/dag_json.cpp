#include "fusesim/sched/dag_json.hpp"

#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "fusesim/util/error.hpp"

namespace fusesim::sched {
namespace {

using nlohmann::json;

// Sizes and counts beyond these are typos, not schedules (1 PiB transfers, 1e21 FLOP kernels).
constexpr std::int64_t kMaxDim = std::int64_t{1} << 40;
constexpr std::int64_t kMaxBytes = std::int64_t{1} << 50;
// Tags and collective instances are identifiers, not sizes: the generators compose them from
// disjoint ranges (sched/tags.hpp), so any non-negative 64-bit value is valid.
constexpr std::int64_t kMaxId = std::numeric_limits<std::int64_t>::max();
constexpr double kMaxFlops = 1e21;
constexpr std::int64_t kMaxTasks = 50'000'000;

const std::vector<std::string> kStreamKinds{"compute", "comm", "copy"};
const std::vector<std::string> kEngines{"sm_kernel", "copy_engine"};
const std::vector<std::string> kCollectives{"all_gather", "reduce_scatter", "all_reduce", "all_to_all"};

// "parallelism": one of to_string's names, else `fallback` when absent.
Parallelism parallelism_or(const JsonObject& o, Parallelism fallback) {
  static const std::vector<std::string> names{to_string(Parallelism::tpsp), to_string(Parallelism::up),
                                              to_string(Parallelism::dp), to_string(Parallelism::custom)};
  return *parse_parallelism(o.choice_or("parallelism", names, to_string(fallback)));
}

StreamKind stream_kind(const std::string& s) {
  if (s == "comm") return StreamKind::comm;
  if (s == "copy") return StreamKind::copy;
  return StreamKind::compute;
}
model::CommEngine engine(const std::string& s) {
  return s == "sm_kernel" ? model::CommEngine::sm_kernel : model::CommEngine::copy_engine;
}
CollectiveKind collective_kind(const std::string& s) {
  if (s == "reduce_scatter") return CollectiveKind::reduce_scatter;
  if (s == "all_reduce") return CollectiveKind::all_reduce;
  if (s == "all_to_all") return CollectiveKind::all_to_all;
  return CollectiveKind::all_gather;
}

json kernel_json(const model::Kernel& k) {
  if (const auto* g = std::get_if<model::GemmKernel>(&k)) {
    json gemm{{"m", g->m}, {"n", g->n}, {"k", g->k}, {"batch", g->batch}};
    if (g->accumulate_fp32) gemm["accumulate_fp32"] = true;
    return {{"gemm", gemm}};
  }
  if (const auto* a = std::get_if<model::AttentionKernel>(&k)) {
    json att{{"batch", a->batch},       {"heads", a->heads},   {"kv_heads", a->kv_heads},
             {"seq_q", a->seq_q},       {"seq_kv", a->seq_kv}, {"head_dim", a->head_dim},
             {"causal", a->causal},     {"q_offset", a->q_offset},
             {"pass", a->pass == model::Pass::forward ? "forward" : "backward"}};
    if (a->unfused) att["unfused"] = true;
    if (a->time_factor != 1.0) att["time_factor"] = a->time_factor;
    return {{"attention", att}};
  }
  const auto& e = std::get<model::ElementwiseKernel>(k);
  json out{{"op", e.op}, {"bytes", e.bytes}, {"flops", e.flops}};
  // Rows price a small kernel (its per-row term and per-row overhead): a graph without them would
  // be priced as a plain stream and simulate-dag would not reproduce simulate.
  if (e.rows > 0) out["rows"] = e.rows;
  return {{"elementwise", out}};
}

json labels_json(const TaskLabels& l) {
  json out = json::object();
  auto put = [&](const char* key, int v) {
    if (v >= 0) out[key] = v;
  };
  put("region", l.region);
  put("layer", l.layer);
  put("chunk", l.chunk);
  put("step", l.step);
  put("slice", l.slice);
  put("micro_batch", l.micro_batch);
  if (l.phase != Phase::none) out["phase"] = to_string(l.phase);
  if (!l.op.empty()) out["op"] = l.op;
  return out;
}

model::Kernel read_kernel(const JsonObject& compute) {
  int kinds = compute.has("gemm") + compute.has("attention") + compute.has("elementwise");
  if (kinds != 1) compute.fail("a compute task names exactly one kernel: gemm, attention or elementwise");
  if (auto v = compute.find("gemm")) {
    JsonObject g = v->as_object();
    model::GemmKernel k{g.integer("m", 0, kMaxDim), g.integer("n", 0, kMaxDim), g.integer("k", 0, kMaxDim),
                        g.integer_or("batch", 1, kMaxDim, 1), g.boolean_or("accumulate_fp32", false)};
    g.finish();
    if (auto why = model::kernel_size_error(k)) g.fail(*why);
    return k;
  }
  if (auto v = compute.find("attention")) {
    JsonObject a = v->as_object();
    model::AttentionKernel k;
    k.batch = a.integer_or("batch", 1, kMaxDim, 1);
    k.heads = a.integer("heads", 1, kMaxDim);
    k.kv_heads = a.integer_or("kv_heads", 1, kMaxDim, k.heads);
    k.seq_q = a.integer("seq_q", 1, kMaxDim);
    k.seq_kv = a.integer_or("seq_kv", 1, kMaxDim, k.seq_q);
    k.head_dim = a.integer("head_dim", 1, 65536);
    k.causal = a.boolean_or("causal", true);
    k.q_offset = a.integer_or("q_offset", 0, kMaxDim, 0);
    k.pass = a.choice_or("pass", {"forward", "backward"}, "forward") == "forward" ? model::Pass::forward
                                                                                    : model::Pass::backward;
    k.unfused = a.boolean_or("unfused", false);
    k.time_factor = a.number_or("time_factor", 0.1, 10.0, 1.0);
    // Caught here too (validation refuses it as well) so that the file's error names the key.
    if (k.unfused && k.time_factor != 1.0)
      a.at("time_factor").fail("an unfused attention is priced by its parts: time_factor must be 1");
    a.finish();
    if (auto why = model::kernel_size_error(k)) a.fail(*why);
    return k;
  }
  JsonObject e = compute.object("elementwise");
  model::ElementwiseKernel k{e.string("op"), e.integer("bytes", 0, kMaxBytes), e.number_or("flops", 0, kMaxFlops, 0.0)};
  k.rows = e.integer_or("rows", 0, kMaxDim, 0);
  e.finish();
  return k;
}

// The labels' op views `op`, which must live until the task is added to its graph.
TaskLabels read_labels(const JsonObject& o, int regions, std::string& op) {
  TaskLabels l;
  l.region = static_cast<int>(o.integer_or("region", 0, std::max(0, regions - 1), -1));
  if (l.region >= 0 && regions == 0) o.at("region").fail("no regions are declared in $.regions");
  l.layer = static_cast<int>(o.integer_or("layer", 0, 1'000'000, -1));
  l.chunk = static_cast<int>(o.integer_or("chunk", 0, 1'000'000, -1));
  l.step = static_cast<int>(o.integer_or("step", 0, 1'000'000, -1));
  l.slice = static_cast<int>(o.integer_or("slice", 0, 1'000'000, -1));
  l.micro_batch = static_cast<int>(o.integer_or("micro_batch", 0, 1'000'000, -1));
  if (o.has("phase")) {
    const std::string p = o.choice("phase", {"forward", "backward", "optimizer"});
    l.phase = p == "forward" ? Phase::forward : (p == "backward" ? Phase::backward : Phase::optimizer);
  }
  if (o.has("op")) {
    op = o.string("op");
    l.op = op;
  }
  o.finish();
  return l;
}

}  // namespace

nlohmann::json dag_to_json(const DagFile& dag) {
  const TaskGraph& g = dag.graph;
  json doc = json::object();
  doc["schema_version"] = 1;
  doc["ranks"] = g.num_ranks();
  doc["dtype"] = topo::to_string(dag.dtype);
  doc["tokens"] = dag.tokens;
  if (!dag.schedule.empty()) doc["schedule"] = dag.schedule;
  doc["parallelism"] = to_string(dag.parallelism);
  if (!dag.topology.empty()) doc["topology"] = dag.topology;
  if (dag.gpus > 0) doc["gpus"] = dag.gpus;
  if (dag.simulated_ranks > 0) doc["simulated_ranks"] = dag.simulated_ranks;
  if (dag.replicas != 1) doc["replicas"] = dag.replicas;
  if (dag.pipeline_stages != 1) doc["pipeline_stages"] = dag.pipeline_stages;
  if (!g.load_alias().empty()) doc["load_alias"] = g.load_alias();
  json regions = json::array();
  for (const Region& r : g.regions()) regions.push_back({{"name", r.name}, {"parallelism", to_string(r.parallelism)}});
  doc["regions"] = std::move(regions);
  json tasks = json::array();
  const PredecessorIndex before = g.predecessor_index();
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    json task = {{"name", t.name}, {"rank", t.rank}};
    if (!std::holds_alternative<RecvTask>(t.kind))
      task["stream"] = {{"kind", to_string(t.stream.kind)}, {"index", t.stream.index}};
    json after = json::array();
    for (TaskId p : before.of(id)) after.push_back(g.task(p).name);
    if (!after.empty()) task["after"] = std::move(after);
    if (const auto* c = std::get_if<ComputeTask>(&t.kind)) {
      json compute = kernel_json(c->kernel);
      compute["dtype"] = topo::to_string(c->dtype);
      if (c->recompute) compute["recompute"] = true;
      task["compute"] = std::move(compute);
    } else if (const auto* s = std::get_if<SendTask>(&t.kind)) {
      task["send"] = {{"peer", s->peer}, {"bytes", s->bytes}, {"tag", s->tag}, {"engine", model::to_string(s->engine)}};
      if (s->sms >= 0) task["send"]["sms"] = s->sms;
    } else if (const auto* r = std::get_if<RecvTask>(&t.kind)) {
      task["recv"] = {{"peer", r->peer}, {"bytes", r->bytes}, {"tag", r->tag}};
    } else {
      const auto& k = std::get<CollectiveTask>(t.kind);
      task["collective"] = {{"kind", to_string(k.kind)},
                            {"group", k.group},
                            {"bytes", k.bytes},
                            {"instance", k.instance},
                            {"engine", model::to_string(k.engine)}};
      if (k.sms >= 0) task["collective"]["sms"] = k.sms;
    }
    json labels = labels_json(t.labels);
    if (!labels.empty()) task["labels"] = std::move(labels);
    tasks.push_back(std::move(task));
  }
  doc["tasks"] = std::move(tasks);
  return doc;
}

DagFile parse_dag(const JsonDocument& doc, int max_ranks) {
  JsonObject root = doc.root();
  if (root.integer("schema_version", 1, 1) != 1) root.fail("unsupported schema_version");
  const int ranks = static_cast<int>(root.integer("ranks", 1, std::max(1, max_ranks)));
  DagFile out;
  out.graph = TaskGraph(ranks);
  out.dtype = root.has("dtype") ? topo::parse_dtype(root.at("dtype")) : topo::Dtype::bf16;
  out.tokens = root.integer_or("tokens", 0, kMaxBytes, 0);
  out.schedule = root.string_or("schedule", "custom");
  out.parallelism = parallelism_or(root, Parallelism::custom);
  out.topology = root.string_or("topology", "");
  out.gpus = static_cast<int>(root.integer_or("gpus", 1, ranks, 0));
  out.simulated_ranks = static_cast<int>(root.integer_or("simulated_ranks", 1, ranks, 0));
  out.replicas = static_cast<int>(root.integer_or("replicas", 1, 1 << 20, 1));
  out.pipeline_stages = static_cast<int>(root.integer_or("pipeline_stages", 1, ranks, 1));
  if (ranks % out.pipeline_stages != 0)
    root.at("pipeline_stages")
        .fail(fmt::format("{} ranks do not split into {} equal pipeline stages", ranks, out.pipeline_stages));
  if (out.simulated_ranks % out.pipeline_stages != 0)
    root.at("simulated_ranks")
        .fail(fmt::format("{} simulated ranks do not split evenly over {} pipeline stages", out.simulated_ranks,
                          out.pipeline_stages));
  if (auto alias = root.find("load_alias")) {
    JsonArray list = alias->as_array();
    list.require_size(static_cast<std::size_t>(ranks), static_cast<std::size_t>(ranks));
    std::vector<int> table;
    table.reserve(list.size());
    const int stage_ranks = ranks / out.pipeline_stages;
    for (std::size_t r = 0; r < list.size(); ++r) {
      table.push_back(static_cast<int>(list.at(r).as_integer(0, ranks - 1)));
      if (table.back() / stage_ranks != static_cast<int>(r) / stage_ranks)
        list.at(r).fail(fmt::format("rank {} stands in for rank {}, in another of the {} pipeline stages", r,
                                    table.back(), out.pipeline_stages));
    }
    out.graph.set_load_alias(std::move(table), stage_ranks);
  }
  if (auto regions = root.find("regions")) {
    JsonArray list = regions->as_array();
    for (std::size_t i = 0; i < list.size(); ++i) {
      JsonObject r = list.at(i).as_object();
      out.graph.add_region(Region{r.string("name"), parallelism_or(r, out.parallelism)});
      r.finish();
    }
  }
  const int regions = static_cast<int>(out.graph.regions().size());

  std::vector<bool> counted(static_cast<std::size_t>(ranks), false);  // the ranks the metrics count
  for (int r : counted_ranks(ranks, out.simulated_ranks, out.pipeline_stages)) counted[static_cast<std::size_t>(r)] = true;
  JsonArray tasks = root.array("tasks");
  tasks.require_size(1, static_cast<std::size_t>(kMaxTasks));
  std::unordered_map<std::string, TaskId> by_name;
  std::vector<std::vector<JsonValue>> after(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    JsonObject o = tasks.at(i).as_object();
    Task t;
    const std::string name = o.string("name");  // lives until the task is added below
    t.name = name;
    t.rank = static_cast<int>(o.integer("rank", 0, ranks - 1));
    if (out.simulated_ranks > 0) {
      // The metrics count the simulated ranks alone; a task elsewhere must stand in for one of them.
      const auto& alias = out.graph.load_alias();
      const int owner = alias.empty() ? t.rank : alias[static_cast<std::size_t>(t.rank)];
      if (!counted[static_cast<std::size_t>(owner)])
        o.at("rank").fail(fmt::format("rank {}{} is not simulated: simulated_ranks are the first {} of each of the {} "
                                      "stage(s) of {} ranks",
                                      t.rank, owner != t.rank ? fmt::format(" (standing in for rank {})", owner) : "",
                                      out.simulated_ranks / out.pipeline_stages, out.pipeline_stages,
                                      ranks / out.pipeline_stages));
    }
    const int kinds = o.has("compute") + o.has("send") + o.has("recv") + o.has("collective");
    if (kinds != 1) o.fail("a task has exactly one of compute, send, recv, collective");
    if (!o.has("recv")) {
      JsonObject s = o.object("stream");
      t.stream.kind = stream_kind(s.choice("kind", kStreamKinds));
      t.stream.index = static_cast<int>(s.integer_or("index", 0, 1023, 0));
      s.finish();
    }
    if (auto v = o.find("compute")) {
      JsonObject c = v->as_object();
      ComputeTask task{read_kernel(c), c.has("dtype") ? topo::parse_dtype(c.at("dtype")) : out.dtype,
                       c.boolean_or("recompute", false)};
      c.finish();
      if (t.stream.kind != StreamKind::compute) o.at("stream").fail("a compute task runs on a compute stream");
      t.kind = std::move(task);
    } else if (auto sv = o.find("send")) {
      JsonObject s = sv->as_object();
      SendTask task{static_cast<int>(s.integer("peer", 0, ranks - 1)), s.integer("bytes", 1, kMaxBytes),
                    s.integer_or("tag", 0, kMaxId, 0), engine(s.choice_or("engine", kEngines, "copy_engine")),
                    static_cast<int>(s.integer_or("sms", 0, 100000, -1))};
      if (task.peer == t.rank) s.at("peer").fail("a send to its own rank");
      s.finish();
      t.kind = task;
    } else if (auto rv = o.find("recv")) {
      JsonObject r = rv->as_object();
      RecvTask task{static_cast<int>(r.integer("peer", 0, ranks - 1)), r.integer("bytes", 1, kMaxBytes),
                    r.integer_or("tag", 0, kMaxId, 0)};
      if (task.peer == t.rank) r.at("peer").fail("a recv from its own rank");
      r.finish();
      t.kind = task;
    } else {
      JsonObject c = o.object("collective");
      CollectiveTask task;
      task.kind = collective_kind(c.choice("kind", kCollectives));
      JsonArray group = c.array("group");
      group.require_size(1, static_cast<std::size_t>(ranks));
      std::vector<int> members;
      for (std::size_t m = 0; m < group.size(); ++m)
        members.push_back(static_cast<int>(group.at(m).as_integer(0, ranks - 1)));
      task.group = std::move(members);
      task.bytes = c.integer("bytes", 1, kMaxBytes);
      task.instance = c.integer_or("instance", 0, kMaxId, 0);
      task.engine = engine(c.choice_or("engine", kEngines, "sm_kernel"));
      task.sms = static_cast<int>(c.integer_or("sms", 0, 100000, -1));
      c.finish();
      t.kind = std::move(task);
    }
    std::string op;
    if (auto l = o.find("labels")) t.labels = read_labels(l->as_object(), regions, op);
    if (auto a = o.find("after")) {
      JsonArray list = a->as_array();
      for (std::size_t k = 0; k < list.size(); ++k) after[i].push_back(list.at(k));
    }
    o.finish();
    if (!by_name.emplace(t.name, static_cast<TaskId>(i)).second)
      o.at("name").fail(fmt::format("task name '{}' is used twice", t.name));
    out.graph.add(std::move(t));
  }
  for (std::size_t i = 0; i < after.size(); ++i) {
    for (const JsonValue& v : after[i]) {
      const std::string name = v.as_string();
      auto it = by_name.find(name);
      if (it == by_name.end()) v.fail(fmt::format("no task is named '{}'", name));
      if (it->second == i) v.fail("a task cannot wait for itself");
      out.graph.depend(it->second, static_cast<TaskId>(i));
    }
  }

  // Point-to-point pairs, with the path of the task at fault (validate() names tasks, not paths).
  std::map<std::tuple<int, int, std::int64_t>, std::vector<std::size_t>> sends, recvs;
  for (TaskId id = 0; id < out.graph.size(); ++id) {
    const Task& t = out.graph.task(id);
    if (const auto* s = std::get_if<SendTask>(&t.kind)) sends[{t.rank, s->peer, s->tag}].push_back(id);
    if (const auto* r = std::get_if<RecvTask>(&t.kind)) recvs[{r->peer, t.rank, r->tag}].push_back(id);
  }
  auto path_of = [&](std::size_t i) { return fmt::format("$.tasks[{}]", i); };
  for (const auto& [key, ids] : sends) {
    auto it = recvs.find(key);
    const std::size_t matched = it == recvs.end() ? 0 : it->second.size();
    if (ids.size() != 1 || matched != 1) {
      const std::size_t at = ids.size() > 1 ? ids[1] : ids[0];
      throw InputError(doc.file(), path_of(at),
                       fmt::format("send '{}' (rank {} -> {}, tag {}) has {} matching recv(s) and {} send(s) share its "
                                   "key; each send needs exactly one recv",
                                   out.graph.task(static_cast<TaskId>(at)).name, std::get<0>(key), std::get<1>(key),
                                   std::get<2>(key), matched, ids.size()));
    }
    const auto& send = std::get<SendTask>(out.graph.task(static_cast<TaskId>(ids[0])).kind);
    const auto& recv = std::get<RecvTask>(out.graph.task(static_cast<TaskId>(it->second[0])).kind);
    if (send.bytes != recv.bytes)
      throw InputError(doc.file(), path_of(it->second[0]) + ".recv.bytes",
                       fmt::format("{} bytes, but its send '{}' sends {}", recv.bytes,
                                   out.graph.task(static_cast<TaskId>(ids[0])).name, send.bytes));
  }
  for (const auto& [key, ids] : recvs)
    if (!sends.count(key))
      throw InputError(doc.file(), path_of(ids[0]),
                       fmt::format("recv '{}' (rank {} <- {}, tag {}) has no matching send",
                                   out.graph.task(static_cast<TaskId>(ids[0])).name, std::get<1>(key), std::get<0>(key),
                                   std::get<2>(key)));
  root.finish();
  // Cycles (stream order included) and collective membership: the graph's own checks.
  try {
    validate(out.graph);
  } catch (const GraphError& e) {
    throw InputError(doc.file(), "$.tasks", e.what());
  }
  return out;
}

}  // namespace fusesim::sched
