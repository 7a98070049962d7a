#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, AddressSanitizer + UndefinedBehaviorSanitizer) in
# build-fuzz/ and runs each for SECONDS (default 60), seeded with the shipped input files. Prints the
# executions of each target; exits 1 on any crash, leak, timeout or sanitizer report (the input that
# caused it is kept under build-fuzz/findings/). docs/fuzzing.md.
#   tools/fuzz.sh [SECONDS] [TARGET...]      e.g. tools/fuzz.sh 60   tools/fuzz.sh 300 fuzz_dag
# FUSESIM_FUZZ_RUNS=N stops each target after N executions instead (SECONDS still bounds it): the
# issue 13 campaign was FUSESIM_FUZZ_RUNS=10000000 tools/fuzz.sh 36000 (BENCHMARKS.md, "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
build=build-fuzz
jobs=${FUSESIM_FUZZ_JOBS:-2}

# -O1 and line tables: a fast enough build, fast enough runs, and readable stack traces. Assertions
# stay on (no NDEBUG): a failed assert is a finding too.
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER="${CXX_FUZZ:-clang++}" -DCMAKE_BUILD_TYPE=Fuzz \
  -DCMAKE_CXX_FLAGS_FUZZ="-O1 -gline-tables-only" -DFUSESIM_FUZZ=ON -DFUSESIM_BUILD_TESTS=OFF \
  -DFUSESIM_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target fusesim "${targets[@]}" >/dev/null

# Seeds: every shipped input of each kind. Big files (the profiles' kernel tables, a generated graph)
# are cut to the first few elements of every array: libFuzzer mutates small inputs far faster, and the
# cut files keep every key the reader knows.
seeds=$build/seeds
rm -rf "$seeds"
mkdir -p "$seeds"
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
# A task graph and a sweep part as the program writes them (nothing of either kind is shipped). The
# default sanitizer options fail on a leak at exit, as the fuzzers do.
# The example of docs/dag.md is the small graph; a generated one is cut (below) and no longer valid,
# but carries every kind of task and key.
sed -n '/^```json$/,/^```$/p' docs/dag.md | sed '1d;$d' >"$gen/dag-doc-example.json"
for s in commfuse slice; do
  "$build/fusesim" generate --topology dgx-h100 --workload llama-3-8b --schedule "$s" --output "$gen/dag-$s.json" >/dev/null 2>&1
done
sweep=("$build/fusesim" sweep --topology dgx-h100 --workload llama-3-8b --seq 1024,2048 --slices 2 --quiet)
"${sweep[@]}" --output "$gen/sweep.json" 2>/dev/null
"${sweep[@]}" --shard 1/2 --output "$gen/sweep-part.json" 2>/dev/null
# A search's part reads through the same target (`fusesim merge` tells the kinds apart).
"$build/fusesim" search --topology dgx-h100 --workload llama-3-8b --global-batch 8 --seq 1024 --tp 4,8 \
  --micro-batch 1 --recompute none --zero ddp,zero1 --schedule baseline,commfuse --top 2 --quiet --shard 0/2 \
  --output "$gen/sweep-search-part.json" >/dev/null 2>&1
seed() {  # seed TARGET FILE...
  mkdir -p "$seeds/$1"
  local target=$1
  shift
  python3 - "$seeds/$target" "$@" <<'PY'
import hashlib, json, os, sys
out, files = sys.argv[1], sys.argv[2:]
def cut(v):
    if isinstance(v, list): return [cut(x) for x in v[:3]]
    if isinstance(v, dict): return {k: cut(x) for k, x in v.items()}
    return v
for f in files:
    data = open(f, 'rb').read()
    if len(data) > 16384:
        try: data = json.dumps(cut(json.loads(data)), indent=1).encode()
        except ValueError: data = data[:16384]
    open(os.path.join(out, hashlib.sha1(data).hexdigest()), 'wb').write(data)
PY
}
seed fuzz_topology topologies/*.json tests/data/topo/*.json tests/data/cli/bad/topo-*.json
seed fuzz_workload workloads/*.json tests/data/workload/*.json tests/data/model/*.json tests/data/cli/bad/work-*.json tests/data/cli/*.json
seed fuzz_dag "$gen"/dag-*.json
seed fuzz_profile profiles/*.json tests/data/profile/*.json
seed fuzz_nccl_tests tests/data/calibrate/*.log
seed fuzz_validation validation/*.json tests/data/validation/*.json
seed fuzz_baseline baselines/*.json
seed fuzz_sweep_part "$gen"/sweep*.json
for f in tests/data/kineto/*.json.gz; do zcat "$f" >"$gen/kineto-$(basename "$f" .gz)"; done
seed fuzz_kineto "$gen"/kineto-*.json

status=0
printf '%-18s %12s %10s  %s\n' target executions exec/s result
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  findings=$build/findings/$t
  mkdir -p "$corpus" "$findings"
  log=$build/logs/$t.log
  mkdir -p "$(dirname "$log")"
  # The corpus grown by earlier runs is kept (build-fuzz/corpus) and the seeds added to it. A run of
  # more than 10 s per input is a hang; an input above 64 KiB is no more interesting than a small one.
  rc=0
  runs=()
  if [ -n "${FUSESIM_FUZZ_RUNS:-}" ]; then runs=(-runs="$FUSESIM_FUZZ_RUNS"); fi
  "$build/$t" "$corpus" "$seeds/$t" -max_total_time="$seconds" "${runs[@]}" -timeout=10 -max_len=65536 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$findings/" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  result=ok
  if [ "$rc" -ne 0 ]; then
    result="FAILED (exit $rc): $(grep -m1 -E 'ERROR|SUMMARY|runtime error|terminate' "$log" || true) [$log]"
    status=1
  fi
  printf '%-18s %12s %10s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$result"
done
exit $status
