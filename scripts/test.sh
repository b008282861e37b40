#!/usr/bin/env bash
# Set everything up, then run the test suite (CUDA tests run where a GPU and a CUDA build are present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${PYTHON:-python3}" -m pytest tests -q "$@"
