#!/usr/bin/env bash
# The shipped profiles' kernel samples are what tools/calibration/build_profiles.py writes from the
# committed raw data (tools/calibration/raw/vidur/): regenerate them in memory and fail when
# profiles/h100-sxm.json or profiles/a100-sxm.json differs. Runs from the repository root whatever
# the caller's directory; PYTHON overrides the interpreter (default python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec "${PYTHON:-python3}" tools/calibration/build_profiles.py --check
