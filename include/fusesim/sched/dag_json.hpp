#pragma once
// Task graphs as JSON files, so that a user can simulate a schedule of their own (or a generated one
// after editing it): `fusesim generate` writes one, `fusesim simulate-dag` reads one. Schema:
// docs/dag.md. Reading is strict: a bad file — syntax, missing or unknown keys, wrong types, absurd
// sizes, a dependency on an unknown task, a send without its recv, a cycle — is an InputError naming
// the file and the JSON path.
#include <string>

#include <nlohmann/json.hpp>

#include "fusesim/sched/dag.hpp"
#include "fusesim/util/json_reader.hpp"

namespace fusesim::sched {

struct DagFile {
  TaskGraph graph;
  topo::Dtype dtype = topo::Dtype::bf16;  // the data type MFU divides by
  std::int64_t tokens = 0;                // tokens the graph processes (for tokens/s), 0 if unknown
  std::string schedule;                   // free text, reported as "schedule"
  Parallelism parallelism = Parallelism::custom;  // reported as "parallelism"
  // The cluster the graph was generated for (a shipped name or a path, as given to generate), which
  // simulate-dag uses when no --topology is given; empty for a graph written by hand.
  std::string topology;
  // What a generated schedule knows beyond its tasks (sched::Schedule): the GPUs its MFU divides by
  // (0: the graph's ranks), and for a mirrored graph the ranks that carry the work and the replicas
  // they stand for (the graph's load alias table travels with it).
  int gpus = 0;
  int simulated_ranks = 0;
  int replicas = 1;
  // Pipeline stages: equal stage-major parts of the ranks (metrics per stage; a mirrored graph's
  // simulated ranks are the first simulated_ranks / pipeline_stages of each stage).
  int pipeline_stages = 1;
};

nlohmann::json dag_to_json(const DagFile& dag);
// Parses and validates (sched::validate, with graph errors turned into InputErrors at "$.tasks" or
// "$.tasks[i]"). `max_ranks` bounds the rank numbers (the cluster's rank count).
DagFile parse_dag(const JsonDocument& doc, int max_ranks);

}  // namespace fusesim::sched
