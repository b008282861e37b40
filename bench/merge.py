"""One report from several runs of `python -m bench.run`: the shares of a sharded run (tools/bench_sharded.sh), or a
run and the re-runs of some of its rows.

    python -m bench.merge --out DIR RUN.json [MORE.json ...]

A row of a later file replaces the same case and mode of an earlier one (as in `python -m bench.targets`), and the
rows come out in the benchmark's own order (bench/cases.py, then the modes of bench/timing.py). The files must come
from one card, one torch and one source tree (their meta's `card`, `torch`, `sources`): rows of different trees or
cards side by side would compare what was never measured together. Writes DIR/bench-merged-<time>.json and .md:
the first file's meta, with each file's date, arguments and elapsed time under `merged`; and prints, for rows whose
columns the time budget cut, the bench.run command that times them again.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
from collections.abc import Sequence

from . import report
from .cases import all_cases
from .quiet import IDLE_CPU_FRACTION
from .timing import MODES

# What every merged file must share; the per-run fields (when, how, how long) are kept under "merged".
SAME = ("card", "torch", "sources")
PER_RUN = ("date", "argv", "modes", "shard", "elapsed_s", "ceilings", "skipped_for_budget", "timed_while_busy")


class MismatchedRuns(ValueError):
    """The files were not measured on one card with one tree."""


def skipped_for_budget(records: Sequence[dict]) -> list[dict]:
    """The rows with a column the budget cut."""
    return [r for r in records
            if any((col or {}).get("note") == report.BUDGET_SKIP_NOTE for col in r["columns"].values())]


def rerun_commands(records: Sequence[dict], autotune: str = "all") -> list[str]:
    """bench.run commands that time the rows the budget cut again, whole, one a mode (their rows then replace the
    cut ones when merged last)."""
    by_mode: dict[str, list[str]] = {}
    for r in skipped_for_budget(records):
        by_mode.setdefault(r["mode"], []).append(r["case"])
    in_order = sorted(by_mode.items(), key=lambda kv: list(MODES).index(kv[0]))
    return [f"python -m bench.run --cases '^({'|'.join(re.escape(c) for c in cases)})$' --modes {mode} "
            f"--autotune {autotune}" for mode, cases in in_order]


def merge(runs: Sequence[tuple[str, dict]], records: Sequence[dict]) -> tuple[dict, list[dict]]:
    """The merged meta and the rows in benchmark order, from (path, meta) pairs in file order and load_runs' rows."""
    first_path, first = runs[0]
    for path, meta in runs[1:]:
        for key in SAME:
            if meta.get(key) != first.get(key):
                raise MismatchedRuns(f"bench.merge: {path} has {key} {meta.get(key)!r}, {first_path} has "
                                     f"{first.get(key)!r}; merge only runs of one card and one tree")
    merged = {key: value for key, value in first.items() if key not in PER_RUN}
    merged["merged"] = [{"file": path, **{key: meta.get(key) for key in PER_RUN if key in meta}}
                        for path, meta in runs]
    dates = sorted({str(meta.get("date")) for _, meta in runs})
    merged["date"] = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    merged["modes"] = [m for m in MODES if any(m in meta.get("modes", ()) for _, meta in runs)]
    merged["ceilings"] = first.get("ceilings")  # the first GPU's; each row's floor used its own run's ceilings
    merged["timed_while_busy"] = len(report.timed_while_busy(records, IDLE_CPU_FRACTION))
    merged["skipped_for_budget"] = len(skipped_for_budget(records))
    return merged, report.in_bench_order(records, [case.name for case in all_cases()], list(MODES))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="JSON files of python -m bench.run, oldest first")
    parser.add_argument("--out", required=True, help="folder for the merged JSON and markdown")
    args = parser.parse_args(argv)
    runs, records = report.load_runs(args.runs)
    try:
        meta, records = merge(runs, records)
    except MismatchedRuns as exc:
        parser.error(str(exc))
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "bench-merged-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    report.write_json(stem + ".json", meta, records)
    report.write_markdown(stem + ".md", meta, records)
    print(f"merged {len(records)} rows of {len(runs)} runs: {stem}.json, {stem}.md")
    print(report.summary(records))
    for command in rerun_commands(records, meta.get("autotune") or "all"):
        print(f"columns cut by the budget; time their rows again, then merge that run last: {command}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
