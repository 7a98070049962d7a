#!/usr/bin/env bash
# The H100 clock and layout studies' quoted figures, from the committed raw files (test_gemm_clock_layout.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec "${PYTHON:-python3}" tests/tools/test_gemm_clock_layout.py
