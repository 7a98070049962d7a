#!/usr/bin/env bash
# A dry run for --topology T writes a profile that `fusesim simulate --topology T --profile` accepts:
# the synthetic device stands for T's device model (issue 13, item 9; before, the profile named
# "Synthetic GPU" and every cluster refused it with "$.device: the profile was measured on ...").
# Arguments: the fusesim binary. PYTHON overrides the interpreter (default python3).
set -euo pipefail
fusesim="$1"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
"${PYTHON:-python3}" tools/microbench/microbench.py --dry-run --quick --topology dgx-h100 -o "$dir/p.json" 2>/dev/null
# The same document through the fit the script runs with --fusesim, which checks the device too.
"${PYTHON:-python3}" tools/microbench/microbench.py --dry-run --quick --topology dgx-h100 -o "$dir/fitted.json" \
    --fusesim "$fusesim" 2>/dev/null
for f in p fitted; do
  "$fusesim" simulate --topology dgx-h100 --workload llama-3-8b --scope layer --profile "$dir/$f.json" >"$dir/out" 2>&1 ||
    { echo "simulate refused the dry run's profile $f.json:"; cat "$dir/out"; exit 1; }
  # Kernels priced by the dry run's synthetic profile, not the shipped h100-sxm one.
  grep -q "kernels priced by profile h100-sxm ($dir/$f.json, synthetic" "$dir/out" || { echo "the report does not name $f.json:"; cat "$dir/out"; exit 1; }
done
# Other devices: the synthetic figures are scaled to the topology's device (its peak, HBM and scale-up
# line rate), so that the fit accepts the GEMMs (below the peak) and simulate the bus bandwidths (below
# the links' line rate): unscaled, dgx-a100 failed both (742 TFLOP/s GEMMs on a 312 TFLOP/s device,
# 380 GB/s P2P over 300 GB/s NVLink3).
for t in dgx-a100 dgx-b200 ascend-910b-8; do
  "${PYTHON:-python3}" tools/microbench/microbench.py --dry-run --quick --topology "$t" -o "$dir/$t.json" \
      --fusesim "$fusesim" >"$dir/out" 2>&1 || { echo "dry run for $t failed:"; cat "$dir/out"; exit 1; }
  "$fusesim" simulate --topology "$t" --workload llama-3-8b --scope layer --dp 1 --force-memory \
      --profile "$dir/$t.json" >"$dir/out" 2>&1 ||
    { echo "simulate --topology $t refused the dry run's profile:"; cat "$dir/out"; exit 1; }
done
