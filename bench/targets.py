"""The issues' performance targets, checked against the JSON files that `python -m bench.run` writes.

    python -m bench.targets RUN.json [MORE.json ...] [--issue 5]

A row of a later file replaces the same case and mode of an earlier one, so a max-autotune run of a seed goes last.
Seed targets: the convops kernel's fraction of the floor and the op's speedup over the best baseline that ran (eager,
torch.compile, max-autotune: a speedup target is met only where max-autotune ran). Sweep targets: every non-seed row of
the issue's ops at the asked speedup or more (1.0 = never slower than the best peer), counting those within 3% above,
and met only where max-autotune ran on every row.
Accuracy: no convops column of the issue's rows failed its check against eager, and in the modes the issue names none
is more than 1e-4 from eager: fp32 and tf32 on every row (#5), tf32 on the seeds (#6), fp32 and tf32 on the seed (#7).
A target with no row in the files is "not in these runs", never met.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .report import format_table, load_runs

CONVOPS_COLUMNS = ("convops_kernel", "convops_op", "convops_backend")


@dataclass(frozen=True)
class SeedTarget:
    issue: int
    case: str
    mode: str
    floor: float | None = None    # the kernel's least fraction of the floor
    speedup: float | None = None  # the op's least speedup over the best baseline


@dataclass(frozen=True)
class SweepTarget:
    issue: int
    ops: tuple[str, ...]
    speedup: float  # every non-seed row of these ops at this speedup or more


DEPTHWISE_OPS = ("depthwise_conv2d", "depthwise_separable_conv2d")
TRANSPOSE_OPS = ("conv_transpose2d", "conv_transpose3d")
GN_OPS = ("conv2d_group_norm_scale_max_pool_clamp",)
ISSUE_OPS = {5: DEPTHWISE_OPS, 6: TRANSPOSE_OPS, 7: GN_OPS}

# As the issues ask them (issues #5, #6 and #7).
TARGETS: tuple[SeedTarget | SweepTarget, ...] = (
    SeedTarget(5, "seed/L1-82_depthwise", "fp32", floor=0.85, speedup=3.0),
    SeedTarget(5, "seed/L1-82_depthwise", "bf16", floor=0.85),
    SeedTarget(5, "seed/L1-86_depthwise_separable", "tf32", floor=0.75, speedup=3.0),
    SeedTarget(5, "seed/L1-86_depthwise_separable", "fp32", floor=0.70),
    SeedTarget(5, "seed/L1-86_depthwise_separable", "bf16", floor=0.75),
    SweepTarget(5, DEPTHWISE_OPS, 1.0),
    SeedTarget(6, "seed/L1-70_conv_transpose3d", "tf32", speedup=15.0),
    SeedTarget(6, "seed/L1-70_conv_transpose3d", "fp32", speedup=4.0),
    SeedTarget(6, "seed/L1-70_conv_transpose3d", "bf16", speedup=2.5),
    SeedTarget(6, "seed/L1-65_conv_transpose2d", "tf32", speedup=2.0),
    SeedTarget(6, "seed/L1-65_conv_transpose2d", "fp32", speedup=1.15),
    SeedTarget(6, "seed/L1-65_conv_transpose2d", "bf16", speedup=1.5),
    SweepTarget(6, TRANSPOSE_OPS, 1.0),
    SeedTarget(7, "seed/L2-85_conv_gn_scale_pool_clamp", "tf32", speedup=12.0),
    SeedTarget(7, "seed/L2-85_conv_gn_scale_pool_clamp", "fp32", speedup=5.0),
    SeedTarget(7, "seed/L2-85_conv_gn_scale_pool_clamp", "bf16", speedup=10.0),
    SweepTarget(7, GN_OPS, 3.0),
)


@dataclass(frozen=True)
class Verdict:
    issue: int
    target: str
    asked: str
    measured: str
    met: bool


def load(paths: Iterable[str]) -> list[dict]:
    """The rows of the files, one per (case, mode), a later file's replacing an earlier one's."""
    return load_runs(list(paths))[1]


def _ok_ms(record: dict, column: str) -> float | None:
    col = record["columns"].get(column) or {}
    return col.get("ms") if col.get("status") == "ok" else None


def check_seed(target: SeedTarget, rows: Sequence[dict]) -> Verdict:
    name = f"{target.case.split('/', 1)[1]} {target.mode}"
    asked = ", ".join(part for part in (f"{target.floor:.0%} of floor" if target.floor else "",
                                        f"{target.speedup:g}x" if target.speedup else "") if part)
    record = next((r for r in rows if r["case"] == target.case and r["mode"] == target.mode), None)
    if record is None:
        return Verdict(target.issue, name, asked, "not in these runs", False)
    met, parts = True, []
    if target.floor is not None:
        fraction = record.get("floor_fraction")
        met &= fraction is not None and fraction >= target.floor
        parts.append(f"{fraction:.1%} of floor" if fraction is not None else "no kernel time")
    if target.speedup is not None:
        speedup = record.get("speedup")
        met &= speedup is not None and speedup >= target.speedup
        best = record.get("best_baseline")
        parts.append(f"{speedup:.2f}x over {best}" if speedup is not None else "no op time")
        if _ok_ms(record, "max_autotune") is None:  # the best peer may be the one that did not run
            met = False
            parts.append("max-autotune not in this run")
    return Verdict(target.issue, name, asked, ", ".join(parts), met)


# A row that meets its sweep target by less than this could miss it in the next run: batch-1 rows of 5-25 us move by
# 1-3% from one run to the next (bench/RESULTS.md, the #5 runs of 2026-11-28, whose rows under 1.0x were others each
# time). The verdict counts them, so that a target met by ties reads as such.
NEAR_MARGIN = 0.03


def _speedup(record: dict) -> float:
    """The op's speedup over the best baseline, 0 where the op has no time."""
    return record.get("speedup") or 0.0


def check_sweep(target: SweepTarget, rows: Sequence[dict], worst: int = 3) -> Verdict:
    """Met where every row reaches the asked speedup and every row's peers include max-autotune: as for a seed, the
    best peer may be the one that did not run (on the depthwise seed, max-autotune runs 1.712 ms to compile's 1.907)."""
    asked = f"{target.speedup:g}x each" if target.speedup != 1.0 else "never slower than the best peer"
    sweep = [r for r in rows if r["group"] != "seed" and r["op"] in target.ops]
    name = f"sweep, {len(sweep)} rows"
    if not sweep:
        return Verdict(target.issue, "sweep", asked, "not in these runs", False)
    below = sorted((r for r in sweep if _speedup(r) < target.speedup), key=_speedup)
    near = sum(target.speedup <= _speedup(r) < target.speedup * (1 + NEAR_MARGIN) for r in sweep)
    without_autotune = sum(_ok_ms(r, "max_autotune") is None for r in sweep)
    notes = (f"; {near} within {NEAR_MARGIN:.0%} above" if near else "") + (
        f"; max-autotune not run on {without_autotune} of {len(sweep)} rows" if without_autotune else "")
    if not below:
        lowest = min(sweep, key=_speedup)
        return Verdict(target.issue, name, asked, f"all; lowest {lowest['speedup']:.3f}x ({lowest['case']} "
                       f"{lowest['mode']}){notes}", not without_autotune)
    shown = "; ".join(f"{r['case']} {r['mode']} " + (f"{_speedup(r):.3f}x" if _speedup(r) else "no op time")
                      for r in below[:worst])
    more = f"; {len(below) - worst} more" if len(below) > worst else ""
    return Verdict(target.issue, name, asked, f"{len(below)} below: {shown}{more}{notes}", False)


# The issues' accuracy asks: within atol = rtol = 1e-4 of eager in the same mode, on every row (#5) or on the seed
# shapes (#6 with TF32 allowed, #7), and every convops column passing its check against eager on every row. The JSON
# holds each column's largest absolute difference from eager, so the check here is the stricter |difference| <= 1e-4;
# a bf16 ulp is 2^-8 relative (3.9e-3 at 1.0), so bf16 results are reported, held to the runner's bf16 tolerance only.
ACCURACY_ATOL = 1e-4


@dataclass(frozen=True)
class AccuracyTarget:
    issue: int
    modes: tuple[str, ...]  # the modes held to ACCURACY_ATOL
    seeds_only: bool        # held on the seed rows only; the other rows must still pass the runner's check


ACCURACY = {5: AccuracyTarget(5, ("fp32", "tf32"), seeds_only=False),
            6: AccuracyTarget(6, ("tf32",), seeds_only=True),
            7: AccuracyTarget(7, ("fp32", "tf32"), seeds_only=True)}


def _largest_errors(rows: Iterable[dict]) -> dict[str, float]:
    largest: dict[str, float] = {}
    for r in rows:
        for column in CONVOPS_COLUMNS:
            error = (r["columns"].get(column) or {}).get("max_error")
            if error is not None and not math.isnan(error):
                largest[r["mode"]] = max(largest.get(r["mode"], 0.0), error)
    return largest


def check_accuracy(issue: int, rows: Sequence[dict]) -> Verdict:
    target = ACCURACY[issue]
    mine = [r for r in rows if r["op"] in ISSUE_OPS[issue]]
    held = [r for r in mine if r["group"] == "seed" or not target.seeds_only]
    failed = [f"{r['case']} {r['mode']} {column}" for r in mine for column in CONVOPS_COLUMNS
              if (r["columns"].get(column) or {}).get("status") in ("fail", "error")]
    largest, everywhere = _largest_errors(held), _largest_errors(mine)
    too_far = [mode for mode in target.modes if largest.get(mode, 0.0) > ACCURACY_ATOL]
    where = "seed rows" if target.seeds_only else "rows"
    errors = ", ".join(f"{mode} {largest[mode]:.1e}" for mode in sorted(largest))
    if failed:
        measured = f"{len(failed)} failed: " + "; ".join(failed[:3])
    else:
        measured = f"every column of {len(mine)} rows; largest difference from eager on the {where}: {errors}"
        if target.seeds_only and everywhere != largest:
            measured += "; on all rows: " + ", ".join(f"{mode} {everywhere[mode]:.1e}" for mode in sorted(everywhere))
    asked = (f"every convops column passes; {' / '.join(target.modes)} within {ACCURACY_ATOL:.0e} of eager"
             + (" on the seeds" if target.seeds_only else ""))
    return Verdict(issue, "accuracy", asked, measured, bool(held) and not failed and not too_far)


def verdicts(rows: Sequence[dict], issues: Iterable[int] | None = None) -> list[Verdict]:
    wanted = set(issues) if issues is not None else set(ISSUE_OPS)
    out = []
    for issue in sorted(wanted):
        for target in (t for t in TARGETS if t.issue == issue):
            out.append(check_seed(target, rows) if isinstance(target, SeedTarget) else check_sweep(target, rows))
        out.append(check_accuracy(issue, rows))
    return out


def table(found: Sequence[Verdict]) -> str:
    body = [[f"#{v.issue}", v.target, v.asked, v.measured, "met" if v.met else "NOT MET"] for v in found]
    return format_table(["issue", "target", "asked", "measured", ""], body, fmt="github")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="JSON files of python -m bench.run, oldest first")
    parser.add_argument("--issue", type=int, action="append", choices=sorted(ISSUE_OPS),
                        help="only this issue's targets (repeatable; default all)")
    args = parser.parse_args(argv)
    found = verdicts(load(args.runs), args.issue)
    print(table(found))
    return 0 if all(v.met for v in found) else 1


if __name__ == "__main__":
    raise SystemExit(main())
