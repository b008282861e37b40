#!/usr/bin/env bash
# Runs compute-sanitizer's memcheck, racecheck and initcheck over tools/sanitizer_cases.py (every CUDA kernel path of
# convops on small shapes) and fails on any report. Needs a GPU and a CUDA build of convops.
#   bash tools/run_sanitizers.sh [memcheck racecheck initcheck]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
for tool in "${@:-memcheck racecheck initcheck}"; do
  for t in $tool; do
    log="${OUT:-/tmp}/sanitizer_$t.log"
    compute-sanitizer --tool "$t" --error-exitcode 99 --print-limit 20 python3 tools/sanitizer_cases.py >"$log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
    echo "$t: exit $rc; ${summary:-no summary}; $(grep -c '^ok' "$log") cases ok, $(grep -c '^FAIL' "$log") failed"
    [ "$rc" -eq 0 ] || { status=1; grep -E "^=========|FAIL" "$log" | head -n 20; }
  done
done
exit $status
