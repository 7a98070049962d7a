#!/usr/bin/env bash
# The shipped topologies' communication.protocols are what tools/calibration/fit_collectives.py writes:
# Hopper's from the committed nccl-tests curve of an 8x H100 DGX, the A100's (with Simple's base latency)
# from that of an 8x A100 80GB board (the H100 files made by make_rail_topology.py are checked by
# test_topo; dgx-h800 carries dgx-h100's block as it is). Runs from the repository root; PYTHON
# overrides the interpreter.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py="${PYTHON:-python3}"
fit=tools/calibration/fit_collectives.py
h100=tools/calibration/raw/nccl-tests/dgx-h100-all_reduce-dgxc-benchmarking.json
for f in dgx-h100 dgx-h100-4node grand-teton-h100 grand-teton-h100-64node; do
  "$py" "$fit" --nccl-tests "$h100" --topology "topologies/$f.json" --check >/dev/null
done
for f in hgx-h200 hgx-h200-8node; do
  "$py" "$fit" --nccl-tests "$h100" --topology "topologies/$f.json" --assumed-for "HGX H200" --check >/dev/null
done
a100=tools/calibration/raw/nccl-tests/hgx-a100-80gb-all_reduce-thanos.json
for f in dgx-a100 dgx-a100-32node dgx-a100-192node dgx-a100-320node; do
  "$py" "$fit" --nccl-tests "$a100" --topology "topologies/$f.json" --fit-simple-base --check >/dev/null
done
"$py" "$fit" --nccl-tests "$a100" --topology topologies/dgx-a100-40gb.json --fit-simple-base \
  --assumed-for "DGX A100 40GB" --check >/dev/null
"$py" - <<'PY'
import json
h100 = json.load(open("topologies/dgx-h100.json"))["communication"]["protocols"]
h800 = json.load(open("topologies/dgx-h800.json"))["communication"]["protocols"]
assert h800 == h100, "dgx-h800's protocols differ from dgx-h100's"
PY
