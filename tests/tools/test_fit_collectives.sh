#!/usr/bin/env bash
# The shipped topologies' communication.protocols are what tools/calibration/fit_collectives.py writes
# from the committed vidur all-reduce curves, LL at NCCL's own constants (the files made from them by
# make_rail_topology.py are checked by test_topo; dgx-h800 carries dgx-h100's block as it is). Runs
# from the repository root; PYTHON overrides the interpreter.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py="${PYTHON:-python3}"
fit=tools/calibration/fit_collectives.py
"$py" "$fit" --machine h100_dgx --topology topologies/dgx-h100.json --ll-from-nccl hopper --check >/dev/null
"$py" "$fit" --machine h100_dgx --topology topologies/dgx-h100-4node.json --ll-from-nccl hopper --check >/dev/null
for f in hgx-h200 hgx-h200-8node; do
  "$py" "$fit" --machine h100_dgx --topology "topologies/$f.json" --ll-from-nccl hopper --assumed-for "HGX H200" \
    --check >/dev/null
done
for f in dgx-a100 dgx-a100-40gb; do
  "$py" "$fit" --machine a100_dgx --topology "topologies/$f.json" --ll-from-nccl ampere --check >/dev/null
done
"$py" - <<'PY'
import json
h100 = json.load(open("topologies/dgx-h100.json"))["communication"]["protocols"]
h800 = json.load(open("topologies/dgx-h800.json"))["communication"]["protocols"]
assert h800 == h100, "dgx-h800's protocols differ from dgx-h100's"
PY
