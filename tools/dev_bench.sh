#!/usr/bin/env bash
# Scratch (bench work) for the GPU machine: build convops in place, dropping the op families whose sources do not
# compile (their cases then show "missing"), then run the demo and the bench with the given arguments.
#   bash tools/dev_bench.sh --quick          # outputs under $OUT (or /tmp/out)
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" MAX_JOBS="${MAX_JOBS:-16}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"

# The chart and the table need matplotlib and tabulate; wheels travel in out/wheels where the image lacks them.
if ! python3 -c 'import matplotlib, tabulate' 2>/dev/null && ls out/wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site out/wheels/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader

families=$(ls convops/csrc/*.cpp | xargs -n1 basename | sed 's/\.cpp$//' | grep -v '^convops$' | paste -sd, -)
start=$(date +%s)
for attempt in 1 2 3 4 5; do
  if CONVOPS_OPS="$families" python3 setup.py build_ext --inplace >"$OUT/build.log" 2>&1; then
    echo "build ok (families: $families) in $(( $(date +%s) - start )) s"
    break
  fi
  failed=$(grep -oE '^FAILED: [^ ]+\.o' "$OUT/build.log" | sed 's/^FAILED: //' | xargs -rn1 basename \
           | sed -E 's/\.o$//; s/_kernel$//' | sort -u)
  grep -E 'error' "$OUT/build.log" | head -n 15
  [ -z "$failed" ] && { echo "BUILD FAILED without a failing object (see build.log)"; tail -20 "$OUT/build.log"; exit 1; }
  for f in $failed; do
    families=$(echo "$families" | tr , '\n' | grep -vx "$f" | paste -sd, -)
  done
  echo "build failed in: $failed; retrying with: ${families:-nothing}"
  [ -z "$families" ] && exit 1
done
grep -E "spill|stack frame" "$OUT/build.log" | grep -v " 0 bytes" | sort -u | head -n 10 || true

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
[ "${DEMO:-1}" = 1 ] && python3 -m convops.demo 2>&1 | tee "$OUT/demo.txt"
python3 -m bench.run --out "$OUT/bench" "$@" 2>&1 | tee "$OUT/bench.txt"
