#!/usr/bin/env bash
# Everything convops needs on a fresh machine: torch (only if none is installed), the test/bench requirements, and
# convops itself, built against the installed torch (CUDA kernels where CUDA is usable, see setup.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
source scripts/toolchain.sh

if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  # No torch yet: take 2.13.0 (the CPU build on the CI machines). For GPUs, install a CUDA build of torch >= 2.11
  # before running this script; an installed torch is never replaced.
  "$PYTHON" -m pip install -q "torch==2.13.0"
fi
"$PYTHON" -m pip install -q -r requirements-dev.txt
"$PYTHON" -m pip install -q --no-build-isolation --no-deps -e .
"$PYTHON" -c "import convops, torch; print('convops', convops.__version__, '| torch', torch.__version__, '| CUDA kernels:', convops.has_cuda_kernels())"
