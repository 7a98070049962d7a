#!/usr/bin/env bash
# Builds fusesim and bench_engine with GCC's profile-guided optimisation (PGO) in BUILD_DIR (default
# build-pgo): an instrumented build first, trained on the shipped workloads and clusters as users run
# them (the default job, every rank of a TP step and of a four-node step, Ulysses, the regression
# check's configurations; never bench_engine's own graphs, whose figures it is judged by), then the
# same sources rebuilt with that profile. bench_engine's event loops run 2-17% faster, a whole
# every-rank step 5-10% (BENCHMARKS.md, "A build guided by a profile"); every result is the same
# (GCC's PGO reorders, lays out and inlines code; without -ffast-math it keeps every floating-point
# operation as written), which the last step checks against baselines/ci.json. It takes about twice
# the time of a plain build.
#
#   tools/build-pgo.sh [BUILD_DIR]      # then BUILD_DIR/fusesim, BUILD_DIR/bench_engine
#
# GCC only (Debian 12's g++ 12); the plain Release build of the README is unchanged.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-pgo}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
jobs=${JOBS:-2}
data="$build/pgo-data"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFUSESIM_BUILD_TESTS=OFF >/dev/null
compiler=$(sed -n 's/^set(CMAKE_CXX_COMPILER_ID "\(.*\)")$/\1/p' "$build"/CMakeFiles/*/CMakeCXXCompiler.cmake | head -1)
if [ "$compiler" != "GNU" ]; then
  echo "error: tools/build-pgo.sh needs GCC (-fprofile-generate, -fprofile-use); CMake found '$compiler'" >&2
  exit 2
fi

# Stage 1: instrumented. Counters are updated atomically where the target allows it (a sweep runs
# configurations on several threads); the profile is written under $data on each program's exit.
rm -rf "$data"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFUSESIM_BUILD_TESTS=OFF \
  -DCMAKE_CXX_FLAGS="-fprofile-generate -fprofile-update=prefer-atomic -fprofile-dir=$data" >/dev/null
cmake --build "$build" -j"$jobs" --target fusesim

# Training: what users run, from the repository root (baselines/ci.json names files relative to it).
(
  cd "$root"
  f="$build/fusesim"
  "$f" simulate >/dev/null
  "$f" simulate --workload llama-3-8b --topology dgx-h100 --schedule all --symmetry none >/dev/null
  "$f" simulate --topology dgx-h100-4node --workload llama-3-70b-4node --scope step --symmetry none >/dev/null
  "$f" simulate --topology dgx-h100-4node --workload llama-3-8b-ulysses --parallelism up --scope layer >/dev/null
  "$f" simulate --topology dgx-h100-4node --workload llama-3-70b-4node --scope step --schedule commfuse \
    --parallelism dp --symmetry none >/dev/null
  "$f" check --baseline baselines/ci.json >/dev/null
)

# Stage 2: the same build directory (the profile's files are named after the objects' paths), built
# with the profile. -fprofile-correction: counters of code that ran on several threads may disagree
# slightly; -fprofile-partial-training: code the training never ran is optimised as without a profile.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFUSESIM_BUILD_TESTS=OFF \
  -DCMAKE_CXX_FLAGS="-fprofile-use -fprofile-correction -fprofile-partial-training -Wno-missing-profile -fprofile-dir=$data" \
  >/dev/null
targets=(fusesim)
# bench_engine exists where Google Benchmark was found (libbenchmark-dev, tools/install-deps.sh).
# (The list is read whole before it is searched: grep -q could close the pipe on cmake mid-write.)
target_list=$(cmake --build "$build" --target help)
if grep -q "bench_engine" <<<"$target_list"; then targets+=(bench_engine); fi
cmake --build "$build" -j"$jobs" --target "${targets[@]}"

# The same results as the plain build: every configuration of the regression check unchanged, none
# even better (an improvement would be a change too).
summary=$(cd "$root" && "$build/fusesim" check --baseline baselines/ci.json --tolerance 0 | tail -1)
echo "$summary"
if ! grep -q "^ok: 0 regressed .* 0 improved beyond it, 0 changed within it, [0-9]* unchanged$" <<<"$summary"; then
  echo "error: the profile-guided build gives other results than baselines/ci.json records" >&2
  exit 1
fi
echo "built with a profile: ${targets[*]} in $build"
