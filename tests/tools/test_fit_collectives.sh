#!/usr/bin/env bash
# The shipped topologies' communication.protocols are what tools/calibration/fit_collectives.py writes:
# Hopper's from the committed nccl-tests curve of an 8x H100 DGX, the A100's (with Simple's base latency)
# from that of an 8x A100 80GB board (the rail files make_rail_topology.py makes from dgx-h100-4node and
# dgx-a100 are checked by test_topo; dgx-h800 carries dgx-h100's block as it is). Runs from the repository root; PYTHON
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
"$py" "$fit" --nccl-tests "$a100" --topology topologies/dgx-a100.json --fit-simple-base --check >/dev/null
"$py" "$fit" --nccl-tests "$a100" --topology topologies/dgx-a100-40gb.json --fit-simple-base \
  --assumed-for "DGX A100 40GB" --check >/dev/null
"$py" - <<'PY'
import json
h100 = json.load(open("topologies/dgx-h100.json"))["communication"]["protocols"]
h800 = json.load(open("topologies/dgx-h800.json"))["communication"]["protocols"]
assert h800 == h100, "dgx-h800's protocols differ from dgx-h100's"
PY
# --fit-simple-base recovers Simple's base latency (and LL, LL128) from a curve made with known values on
# dgx-a100's ring: 8 ranks, 1 KiB-4 GiB, the fastest protocol's time at each size.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" - "$tmp" <<'PY'
import json, os, subprocess, sys
sys.path.insert(0, "tools/calibration")
import fit_collectives as fc
tmp = sys.argv[1]
topo = json.load(open("topologies/dgx-a100.json"))
bw, route = fc.scale_up(topo)
c = topo["communication"]
simple = {"base": 120e-6, "step": c["sm_step_latency_s"]["value"], "eff": c["sm_kernel_efficiency"]["value"]}
ll = {"base": 12e-6, "step": 0.6e-6 - route, "eff": 0.45}
ll128 = {"base": 15e-6, "step": 1.9e-6 - route, "eff": 0.8}
rows = []
for i in range(10, 33):
    t = min(fc.protocol_times([simple, ll, ll128], bw, route, 8, 2 ** i)) * 1e6
    rows.append([2 ** i, t, t])
curve = {"schema": "fusesim.nccl-tests-curve", "source": "synthetic", "licence": "-", "machine": "-",
         "test": "all_reduce_perf", "command": "-", "ranks": 8, "nodes": 1,
         "columns": ["bytes", "out_of_place_us", "in_place_us"], "rows": rows}
json.dump(curve, open(os.path.join(tmp, "curve.json"), "w"))
out = subprocess.run([sys.executable, "tools/calibration/fit_collectives.py", "--nccl-tests", os.path.join(tmp, "curve.json"),
                      "--topology", "topologies/dgx-a100.json", "--fit-simple-base"], capture_output=True, text=True, check=True)
block = json.loads(out.stdout)
base = float(out.stderr.split("collective_base_latency_s")[1].split()[0])
assert abs(base / 120e-6 - 1) < 0.02, base
assert abs(block["ll"]["base_latency_s"]["value"] / 12e-6 - 1) < 0.05, block["ll"]
assert abs(block["ll"]["efficiency"]["value"] / 0.45 - 1) < 0.02, block["ll"]
assert abs(block["ll128"]["efficiency"]["value"] / 0.8 - 1) < 0.02, block["ll128"]
PY
