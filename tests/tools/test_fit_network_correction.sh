#!/usr/bin/env bash
# The shipped Hopper and A100 topologies across nodes carry the measured correction of NCCL's collective
# model that tools/calibration/fit_network_correction.py fits on the validation cases marked fitted
# across nodes on topologies of their collective model (the Hopper files on H100 curves, the A100 files
# on ABCI's; the rail files made by make_rail_topology.py carry it as the file they come from does), and
# the script's Python mirror of the model predicts what `fusesim validate` does (argument 1: the fusesim
# binary). Runs from the repository root; PYTHON overrides the interpreter.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py="${PYTHON:-python3}"
fusesim="$1"
fit=tools/calibration/fit_network_correction.py
for f in dgx-h100-4node dgx-h100-128node dgx-h100-768node grand-teton-h100-64node hgx-h200-8node \
  dgx-a100 dgx-a100-32node dgx-a100-192node dgx-a100-320node; do
  "$py" "$fit" --topology "topologies/$f.json" --check >/dev/null 2>&1 ||
    { echo "topologies/$f.json: collective_model.measured_correction is not what the fit gives" >&2; exit 1; }
done
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$fusesim" validate --category collective >"$out"
for f in dgx-h100-4node dgx-h100-128node dgx-a100-32node; do
  "$py" "$fit" --topology "topologies/$f.json" --compare-validate "$out" >/dev/null
done
# A cluster's own nccl-tests logs across nodes, the way a user fits them (the docstring's recipe): logs of
# 2- and 4-node all-reduces and a 4-node all-gather whose times are the model with a known correction
# (a tree's own latency among its five numbers),
# imported by `fusesim calibrate import-nccl-tests` and fitted with --samples into a copy of the topology
# that has no correction yet, give that correction back, and the written topology loads.
dir="$(mktemp -d)"
trap 'rm -f "$out"; rm -rf "$dir"' EXIT
truth="$("$py" tests/tools/fit_network_correction_synthetic.py "$dir")"
"$fusesim" calibrate import-nccl-tests "$dir/ar2.log" "$dir/ar4.log" --op all_reduce --topology dgx-h100-4node \
  -o "$dir/ar.json" >/dev/null
"$fusesim" calibrate import-nccl-tests "$dir/ag4.log" --op all_gather --topology dgx-h100-4node -o "$dir/ag.json" >/dev/null
"$py" - "$dir/mine.json" <<'PY'  # a cluster's file without a correction yet: the fit adds it
import json, sys
t = json.load(open("topologies/dgx-h100-4node.json"))
del t["communication"]["network_tuning"]["collective_model"]["measured_correction"]
json.dump(t, open(sys.argv[1], "w"), indent=2)
PY
"$py" "$fit" --topology "$dir/mine.json" --samples "$dir/ar.json" "$dir/ag.json" --write >/dev/null 2>&1
"$py" - "$dir/mine.json" "$truth" <<'PY'
import json, sys
got = json.load(open(sys.argv[1]))["communication"]["network_tuning"]["collective_model"]["measured_correction"]
for key, want in json.loads(sys.argv[2]).items():
    assert abs(got[key] - want) <= 0.01 * abs(want), f"{key}: fitted {got[key]}, the logs' {want}"
PY
"$fusesim" routes --topology "$dir/mine.json" >/dev/null
