#!/usr/bin/env bash
# tools/microbench/sustained.py's layer shapes against hand-derived values (test_sustained_layer.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec "${PYTHON:-python3}" tests/tools/test_sustained_layer.py
