#!/usr/bin/env bash
# tools/calibration/train_step_compare.py on the committed one-GPU steps (test_train_step_compare.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec "${PYTHON:-python3}" tests/tools/test_train_step_compare.py "$1"
