"""Report: the terminal table (tabulate), a JSON file with every number, a markdown copy, and a PNG speedup chart."""
from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence

from .columns import COLUMNS, TITLES

# The note of a column the time budget cut (bench/runner.py's Plan), which bench.merge finds again to re-run.
BUDGET_SKIP_NOTE = "skipped (time budget)"
CELL = {"fail": "FAIL", "missing": "missing", "n/a": "n/a", "error": "error", "skipped": "-"}


def _fmt_ms(ms: float) -> str:
    return f"{ms:.4g}" if ms >= 0.001 else f"{ms:.2e}"


def _cell(col: dict | None) -> str:
    if col is None:
        return ""
    return _fmt_ms(col["ms"]) if col["status"] == "ok" else CELL.get(col["status"], col["status"])


def rows(records: Sequence[dict], columns: Sequence[str] = COLUMNS) -> tuple[list[str], list[list[str]]]:
    headers = ["case", "mode"] + [f"{TITLES[c]} ms" for c in columns] + [
        "op path", "op speedup", "kernel speedup", "floor ms", "kernel % of floor", "max err (op)"]
    body = []
    for r in records:
        cols = r["columns"]
        op = cols.get("convops_op", {})
        floor = f"{_fmt_ms(r['floor_ms'])} ({r['floor_bound'][:3]})" if r.get("floor_ms") else ""
        body.append([r["case"], r["mode"]] + [_cell(cols.get(c)) for c in columns] + [
            op.get("path") or "",
            f"{r['speedup']:.2f}x" if r.get("speedup") else "",
            f"{r['kernel_speedup']:.2f}x" if r.get("kernel_speedup") else "",
            floor,
            f"{100 * r['floor_fraction']:.3g}%" if r.get("floor_fraction") else "",
            f"{op['max_error']:.1e}" if op.get("max_error") is not None else "",
        ])
    return headers, body


def progress(record: dict) -> str:
    """One line per finished case: each column's time (and first-call seconds, i.e. compile time) and the speedup."""
    parts = []
    for name, col in record["columns"].items():
        first = f" ({col['first_call_s']:.1f}s)" if col.get("first_call_s") and col["first_call_s"] > 0.5 else ""
        parts.append(f"{TITLES[name]} {_cell(col)}{first}")
    if record.get("speedup"):
        parts.append(f"speedup {record['speedup']:.2f}x")
    return ", ".join(parts)


def format_table(headers: Sequence[str], body: Sequence[Sequence[str]], fmt: str = "simple") -> str:
    """tabulate's table of the cells as given (no number parsing), or aligned columns where tabulate is missing."""
    try:
        from tabulate import tabulate
    except ImportError:  # keep a usable report where tabulate is missing
        widths = [max(len(str(c)) for c in col) for col in zip(headers, *body)]
        return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)) for line in [headers, *body])
    return tabulate(body, headers=headers, tablefmt=fmt, disable_numparse=True)


def table(records: Sequence[dict], columns: Sequence[str] = COLUMNS, fmt: str = "simple") -> str:
    headers, body = rows(records, columns)
    return format_table(headers, body, fmt)


def problems(records: Sequence[dict]) -> list[str]:
    """One line per column that failed its check or raised (skips and absent backends are not problems)."""
    lines = []
    for r in records:
        for name, col in r["columns"].items():
            if col["status"] in ("fail", "error", "missing"):
                err = f", max err {col['max_error']:.2e}" if col.get("max_error") is not None else ""
                lines.append(f"{r['case']} [{r['mode']}] {TITLES[name]}: {col['status']}{err} {col['note']}".rstrip())
    return lines


def geomean_speedups(records: Sequence[dict], key: str = "speedup") -> dict:
    """Geometric mean of a speedup over the best baseline ("speedup": the op; "kernel_speedup": the convops kernel
    forced), per mode, for the seeds and for the sweep."""
    groups: dict[str, list[float]] = {}
    for r in records:
        if r.get(key):
            kind = "seeds" if r["group"] == "seed" else "sweep"
            groups.setdefault(f"{kind} [{r['mode']}]", []).append(r[key])
    return {k: math.exp(sum(map(math.log, v)) / len(v)) for k, v in sorted(groups.items())}


def timed_while_busy(records: Sequence[dict], idle_cpu_fraction: float) -> list[tuple[str, str, str]]:
    """(case, mode, column) of every column timed while the host's background work still used more than
    `idle_cpu_fraction` of a core (bench/quiet.py)."""
    return [(r["case"], r["mode"], name) for r in records for name, col in r["columns"].items()
            if col and (col.get("background_cores") or 0.0) > idle_cpu_fraction]


def in_bench_order(records: Sequence[dict], case_names: Sequence[str], modes: Sequence[str]) -> list[dict]:
    """The rows sorted by case, in `case_names` order, then by mode, in `modes` order; others last."""
    order = {(case, mode): k for k, (case, mode) in enumerate((c, m) for c in case_names for m in modes)}
    return sorted(records, key=lambda r: order.get((r["case"], r["mode"]), len(order)))


def load_runs(paths: Sequence[str]) -> tuple[list[tuple[str, dict]], list[dict]]:
    """The (path, meta) of each file, and their rows, one per (case, mode): a later file's replaces an earlier one's."""
    runs, rows = [], {}
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        runs.append((path, run.get("meta", {})))
        for record in run["results"]:
            rows[(record["case"], record["mode"])] = record
    return runs, list(rows.values())


def summary(records: Sequence[dict]) -> str:
    lines = []
    for key, what in (("speedup", "the convops op"), ("kernel_speedup", "the convops kernel (forced)")):
        parts = [f"{k}: {v:.2f}x" for k, v in geomean_speedups(records, key).items()]
        lines.append(f"geomean speedup of {what} over the best baseline: " + (", ".join(parts) if parts else "none"))
    return "\n".join(lines)


def write_json(path: str, meta: dict, records: Sequence[dict]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "results": list(records)}, f, indent=1, default=str)
    os.replace(tmp, path)  # a run stopped mid-write still leaves the previous complete file


def write_markdown(path: str, meta: dict, records: Sequence[dict], columns: Sequence[str] = COLUMNS) -> None:
    lines = [f"Card: {meta.get('card')}; torch {meta.get('torch')}, CUDA {meta.get('cuda')}, "
             f"cuDNN {meta.get('cudnn')}, triton {meta.get('triton')}; {meta.get('date')}; git {meta.get('git')}, "
             f"sources {meta.get('sources')} (python -m bench.provenance); GPU spin after each L2 flush "
             f"{meta.get('host_slack_us', 0):g} us", ""]
    if meta.get("merged"):
        groups: dict[str, int] = {}  # the shares of one sharded run on one line
        for run in meta["merged"]:
            label = f"{run.get('date')} {','.join(run.get('modes') or [])}"
            if run.get("shard"):
                label += " in {1} shares".format(*run["shard"])
            groups[label] = groups.get(label, 0) + 1
        runs = "; ".join(f"{label} ({count} files)" if count > 1 else label for label, count in groups.items())
        lines += [f"Merged from {len(meta['merged'])} runs (python -m bench.merge; a later run's row replaces an "
                  f"earlier one's): {runs}", ""]
    ceil = meta.get("ceilings")
    if ceil:
        lines += [f"Measured ceilings: copy {ceil['copy_TBps']:.2f} TB/s (read + write); matrix "
                  f"fp32 {ceil['fp32_TFLOPs']:.1f}, TF32 {ceil['tf32_TFLOPs']:.0f}, bf16 {ceil['bf16_TFLOPs']:.0f} "
                  "TFLOP/s", ""]
    lines += [table(records, columns, fmt="github"), "", summary(records), ""]
    issues = problems(records)
    if issues:
        lines += ["Failures and errors:", ""] + [f"- {p}" for p in issues] + [""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def write_chart(path: str, records: Sequence[dict], title: str = "") -> str | None:
    """Horizontal bars: speedup of the convops op over the best baseline, one bar per case and mode (log scale).
    Returns why no chart was written, or None."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed"
    shown = [r for r in records if r.get("speedup")]
    if not shown:
        return "no case has a convops speedup to draw"
    colors = {"tf32": "tab:blue", "fp32": "tab:orange", "bf16": "tab:green"}
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.22 * len(shown)))
    labels = [f"{r['case']} [{r['mode']}]" for r in shown]
    values = [r["speedup"] for r in shown]
    ax.barh(range(len(shown)), values, color=[colors.get(r["mode"], "tab:gray") for r in shown])
    ax.set_yticks(range(len(shown)), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("speedup of the convops op over the best of eager / torch.compile / max-autotune (log scale)")
    ax.set_title(title, fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for m, c in colors.items() if any(r["mode"] == m for r in shown)]
    ax.legend(handles, [m for m in colors if any(r["mode"] == m for r in shown)], loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
