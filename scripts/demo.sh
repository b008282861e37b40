#!/usr/bin/env bash
# Set everything up, then run the five seed problems through torch.ops.convops and compare with PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${PYTHON:-python3}" -m convops.demo "$@"
