#!/usr/bin/env bash
# One bench run spread over the GPUs of one host: `python -m bench.run --shard k/N` on GPU k (every row with all its
# columns on one GPU, so each row's ratios compare like with like), each share writing its own JSON under
# OUT/shard-k/, then python -m bench.merge joins them into one report, OUT/bench-merged-*.json and .md. For a run too
# long for one GPU's time, such as max-autotune on every sweep row (5-60 s of compile a row).
#   bash tools/bench_sharded.sh --cases 'L1-82|L1-86|/dws?_' --autotune all --budget-s 540
#   python -m bench.targets "$OUT"/sharded-*/bench-merged-*.json --issue 5
# SHARDS=n runs n shares (default: every GPU nvidia-smi lists). Inductor's compile workers are split between the
# processes, so that N compiles at once do not oversubscribe the host's cores.
set -euo pipefail
n="${SHARDS:-$(nvidia-smi --list-gpus | wc -l)}"
out="${OUT:-bench/results}/sharded-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
threads=$(( $(nproc) / n > 1 ? $(nproc) / n : 1 ))
pids=()
for k in $(seq 0 $(( n - 1 ))); do
  CUDA_VISIBLE_DEVICES=$k TORCHINDUCTOR_COMPILE_THREADS=$threads \
    python3 -m bench.run --shard "$k/$n" --out "$out/shard-$k" "$@" > "$out/shard-$k.log" 2>&1 &
  pids+=($!)
done
status=0
for k in "${!pids[@]}"; do
  if ! wait "${pids[$k]}"; then
    echo "shard $k/$n failed: $out/shard-$k.log"
    status=1
  fi
  grep -E "^(total|wrote)" "$out/shard-$k.log" | sed "s/^/shard $k: /" || true
done
shares=("$out"/shard-*/bench-*.json)
if [ -e "${shares[0]}" ]; then  # a failed share still leaves the others' rows to read
  python3 -m bench.merge --out "$out" "${shares[@]}" || status=1
fi
exit $status
