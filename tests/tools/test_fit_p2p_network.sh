#!/usr/bin/env bash
# The shipped topologies' communication.p2p_network is what tools/calibration/fit_p2p_network.py
# writes from the committed vidur send/recv curve (the files made from them by make_rail_topology.py
# are checked by test_topo). Runs from the repository root; PYTHON overrides the interpreter.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py="${PYTHON:-python3}"
"$py" tools/calibration/fit_p2p_network.py --machine h100_dgx --topology topologies/dgx-h100-4node.json --check >/dev/null
"$py" tools/calibration/fit_p2p_network.py --machine h100_dgx --topology topologies/hgx-h200-8node.json --check >/dev/null
"$py" tools/calibration/fit_p2p_network.py --machine h100_dgx --topology topologies/dgx-b200.json \
  --assumed-for "DGX B200" --check >/dev/null
