#!/usr/bin/env bash
# The shipped profiles' kernel samples are what tools/calibration/build_profiles.py writes from the
# committed raw data (tools/calibration/raw/): regenerate them in memory and fail when one of
# profiles/{h100,a100,h200}-sxm.json or profiles/alternatives/h100-sxm-cuda13.json differs. Runs from the repository root whatever
# the caller's directory; PYTHON overrides the interpreter (default python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec "${PYTHON:-python3}" tools/calibration/build_profiles.py --check
