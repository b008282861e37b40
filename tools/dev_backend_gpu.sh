#!/usr/bin/env bash
# Scratch (backend work) for the GPU machine: build convops in place with its CUDA kernels (dropping op families whose
# sources do not compile), then the seed models through backend="convops" (tools/dev_backend_gpu.py), then the backend
# tests with their CUDA variants. Logs go under $OUT. The tests need expecttest and tabulate, which the GPU image
# lacks: carry them as wheels in .wheels/ (pip download expecttest tabulate -d .wheels --no-deps; run with
# carry [".wheels"]).
#   bash tools/dev_backend_gpu.sh [SEED_TIMEOUT_S] [TEST_TIMEOUT_S]
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" MAX_JOBS="${MAX_JOBS:-16}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

families=$(ls convops/csrc/*.cpp | xargs -n1 basename | sed 's/\.cpp$//' | grep -v '^convops$' | paste -sd, -)
start=$(date +%s)
for attempt in 1 2 3 4 5; do
  if CONVOPS_OPS="$families" python3 setup.py build_ext --inplace >"$OUT/build.log" 2>&1; then
    echo "build ok (families: $families) in $(( $(date +%s) - start )) s"
    break
  fi
  failed=$(grep -oE '^FAILED: [^ ]+\.o' "$OUT/build.log" | sed 's/^FAILED: //' | xargs -rn1 basename \
           | sed -E 's/\.o$//; s/_kernel$//' | sort -u)
  grep -E 'error' "$OUT/build.log" | head -n 10
  [ -z "$failed" ] && { echo "BUILD FAILED (see build.log)"; tail -20 "$OUT/build.log"; exit 1; }
  for f in $failed; do families=$(echo "$families" | tr , '\n' | grep -vx "$f" | paste -sd, -); done
  echo "dropping $failed; retrying with $families"
done
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ls .wheels/*.whl >/dev/null 2>&1; then  # into the python3 that holds torch (a bare `pip` may be another one)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .wheels/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi

timeout "${1:-200}" python3 tools/dev_backend_gpu.py --json "$OUT/seed_models.json" 2>&1 | tee "$OUT/seed_models.log"
timeout "${2:-150}" python3 -m pytest tests/test_backend_compile.py tests/test_backend_conv_group_norm_pool.py \
  tests/test_backend_depthwise.py tests/test_backend_conv_transpose.py -q -rfs -x -p no:cacheprovider 2>&1 \
  | tee "$OUT/tests.log" | tail -n 40
