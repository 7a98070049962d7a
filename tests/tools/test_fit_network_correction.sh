#!/usr/bin/env bash
# The shipped Hopper topologies across nodes carry the measured correction of NCCL's collective model
# that tools/calibration/fit_network_correction.py fits on the validation cases marked fitted across
# nodes (the rail files made by make_rail_topology.py from dgx-h100-4node carry it as it does), and the
# script's Python mirror of the model predicts what `fusesim validate` does (argument 1: the fusesim
# binary). Runs from the repository root; PYTHON overrides the interpreter.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py="${PYTHON:-python3}"
fusesim="$1"
fit=tools/calibration/fit_network_correction.py
for f in dgx-h100-4node dgx-h100-128node dgx-h100-768node grand-teton-h100-64node hgx-h200-8node; do
  "$py" "$fit" --topology "topologies/$f.json" --check >/dev/null 2>&1 ||
    { echo "topologies/$f.json: collective_model.measured_correction is not what the fit gives" >&2; exit 1; }
done
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$fusesim" validate --category collective >"$out"
for f in dgx-h100-4node dgx-h100-128node; do
  "$py" "$fit" --topology "topologies/$f.json" --compare-validate "$out" >/dev/null
done
