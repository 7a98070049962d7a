#!/usr/bin/env bash
# fusesim trace import against an independent Python reading of the same traces.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec "${PYTHON:-python3}" tests/tools/test_trace_import_reference.py "$1"
