#!/usr/bin/env bash
# On the GPU machine: build convops in place (incrementally, reusing build/ while the machine stays warm) and run
# pytest with the given arguments. CONVOPS_OPS=a,b limits the build to some op families (see setup.py).
#   bash tools/gpu_check.sh tests/test_depthwise_conv2d.py -q -x
set -euo pipefail
source "$(dirname "$0")/../scripts/toolchain.sh"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" MAX_JOBS="${MAX_JOBS:-16}"
log="${OUT:-/tmp}/build.log"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
start=$(date +%s)
if ! python3 setup.py build_ext --inplace >"$log" 2>&1; then
  grep -E "error|Error" "$log" | head -n 40
  echo "BUILD FAILED (full log: $log)"
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
grep -E "spill|stack frame" "$log" | grep -v " 0 bytes" | sort -u | head -n 20 || true
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -m pytest "$@"
