#!/usr/bin/env bash
# The H100 profiles' kernel gap, recomputed from the committed Kineto traces (test_kernel_gap.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec "${PYTHON:-python3}" tests/tools/test_kernel_gap.py
