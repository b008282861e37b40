"""convops benchmark: the convops ops against eager PyTorch and Inductor, side by side, with the physical floor.

    python -m bench.run                   # everything: 70 cases x 3 precision modes, within a 720 s budget
    python -m bench.run --quick           # the seeds in every mode and one sweep case per family, within 150 s
    python -m bench.run --cases 'seed|convnext' --modes tf32,bf16 --out /tmp/bench
    python -m bench.run --list            # the case names (works without a GPU)

One process, one GPU. For each case and precision mode it checks every column against eager (a wrong result is
reported as FAIL, not timed), then times the columns with triton.testing.do_bench (median; after each of its L2
flushes the GPU spins --host-slack-us, 200 by default, so that GPU time is timed, not the host's launches) over enough
input sets to exceed the L2 cache, one after the other once every compile's background work (Inductor's compile
workers) has wound down (bench/quiet.py), and in five rounds where a column is launch-bound (under --rounds-below-ms,
0.05 by default: batch-1 layers), each column keeping its fastest round, so that such cases compare like with like.
Pass 1 runs every column but max-autotune (about 530 s on an H200 for the full set, 2026-11-27); pass 2 runs
max-autotune, whose compile takes 5-50 s a case, on its subset (--autotune) until --budget-s is spent. Outputs: a
table on the terminal, and bench-<time>.json (every number, the card and the versions), .md (the same table for
bench/RESULTS.md) and .png (speedups) under --out.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time

import torch

import convops

from . import provenance, quiet, report
from .cases import all_cases, select
from .columns import COLUMNS, convops_backend
from .floors import measure_ceilings
from .runner import LAUNCH_BOUND_MS, Plan, run_case, summarize
from .timing import HOST_SLACK_US, MODES, bench_ms

AUTOTUNE_POLICIES = ("all", "default", "seeds", "none")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--quick", action="store_true", help="seeds in every mode, a few sweep cases in the first mode")
    p.add_argument("--cases", metavar="REGEX", help="only cases whose name matches (re.search; substrings work)")
    p.add_argument("--modes", default="tf32,fp32,bf16",
                   help="precision modes, from: tf32 (fp32 with the default TF32 setting), fp32 (strict), bf16")
    p.add_argument("--sweep-modes", help="modes for the non-seed cases (default: --modes; with --quick: the first)")
    p.add_argument("--columns", default=",".join(COLUMNS), help=f"from: {','.join(COLUMNS)}")
    p.add_argument("--autotune", choices=AUTOTUNE_POLICIES,
                   help="which cases get the max-autotune column, whose compile is the slowest part (it runs last, "
                        "as far as the budget goes): all; default (the seeds in every mode, the --quick sweep cases "
                        "in tf32 mode); seeds (the seeds in tf32 mode; the default with --quick); none")
    p.add_argument("--budget-s", type=float,
                   help="wall-clock budget of the measurements: compiled columns give way as it runs out "
                        "(default 720, --quick 150)")
    p.add_argument("--rounds-below-ms", type=float, default=LAUNCH_BOUND_MS,
                   help="time a case in rounds (each column keeping its fastest) where a column's first round is "
                        f"under this many ms (default {LAUNCH_BOUND_MS:g}: the launch-bound rows; more costs device "
                        "time)")
    p.add_argument("--host-slack-us", type=float, default=HOST_SLACK_US,
                   help=f"GPU spin after each L2 flush, hiding the host's launch time from the timed region "
                        f"(default {HOST_SLACK_US:g}; 0 times with the host in the loop)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"), help="output folder")
    p.add_argument("--shard", metavar="K/N", type=_shard,
                   help="only the K-th of N interleaved shares of the (case, mode) work (K from 0), for one run over "
                        "N GPUs of a host: a process a GPU, each with its own --out (tools/bench_sharded.sh); "
                        "python -m bench.merge joins their JSON files into one report")
    p.add_argument("--list", action="store_true", help="print the selected case names and exit")
    args = p.parse_args(argv)
    args.modes = _names(args.modes, MODES, "mode")
    default_sweep = args.modes[:1] if args.quick else args.modes
    args.sweep_modes = _names(args.sweep_modes, MODES, "mode") if args.sweep_modes else default_sweep
    args.columns = tuple(_names(args.columns, COLUMNS, "column"))
    args.autotune = args.autotune or ("seeds" if args.quick else "default")
    args.budget_s = args.budget_s or (150.0 if args.quick else 720.0)
    return args


def _shard(text):
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard wants K/N, such as 0/4, not {text!r}")
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"--shard {text}: K must be 0 to N - 1")
    return k, n


def _names(text, allowed, what):
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        sys.exit(f"unknown {what}(s) {bad or text!r}; choose from {', '.join(allowed)}")
    return names


def work_items(cases, args):
    """(case, mode) pairs in priority order: the seeds in every mode first, then the sweep one mode at a time, so
    that a run cut short by its budget has lost the least important numbers."""
    seeds = [c for c in cases if c.is_seed]
    sweep = [c for c in cases if not c.is_seed]
    items = [(c, MODES[m]) for m in args.modes for c in seeds]
    items += [(c, MODES[m]) for m in args.sweep_modes for c in sweep]
    if args.shard is not None:
        # Interleaved, so that each share holds its part of the seeds (the longest compiles) and of every mode.
        k, n = args.shard
        items = items[k::n]
    return items


def autotune_items(items, plan: Plan):
    """The (case, mode) pairs that get max-autotune, cheapest-first within each priority: tf32 mode first, seeds
    before the sweep, transposed convs first (Inductor autotunes no Triton template for them, so their
    max-autotune compile takes seconds, where the others take up to a minute)."""
    chosen = [(k, c, m) for k, (c, m) in enumerate(items) if plan.wants_autotune(c, m)]
    chosen.sort(key=lambda t: (t[2].name != "tf32", not t[1].is_seed, "transpose" not in t[1].op, t[0]))
    return [(c, m) for _, c, m in chosen]


def _skipped_record(case, mode, columns):
    return {"case": case.name, "group": case.group, "mode": mode.name, "columns": {
        c: {"status": "skipped", "ms": None, "max_error": None, "note": report.BUDGET_SKIP_NOTE} for c in columns}}


def _run(tag, case, mode, plan, columns, records, start, stem, meta):
    """Run some columns of one case and mode, merge them into its record, print a line, save the JSON."""
    t0 = time.monotonic()
    fresh = run_case(case, mode, plan, columns)
    record = records.setdefault((case.name, mode.name), fresh)
    if record is not fresh:
        record["columns"].update(fresh["columns"])
        summarize(record)
    record["wall_s"] = record.get("wall_s", 0.0) + time.monotonic() - t0
    print(f"[{tag} {time.monotonic() - start:4.0f}s] {case.name} [{mode.name}] {time.monotonic() - t0:.1f}s: "
          f"{report.progress(fresh)}", flush=True)
    meta["elapsed_s"] = time.monotonic() - start
    report.write_json(stem + ".json", meta, list(records.values()))  # a cut-off run still leaves its numbers


def _quiet_autotune_logs() -> None:
    """max-autotune prints a table of its choices for every template it tunes; the bench's table is the output."""
    try:
        import torch._inductor.config as inductor_config
        inductor_config.autotune_num_choices_displayed = 0
    except Exception:
        pass


def _versions() -> dict:
    props = torch.cuda.get_device_properties(0)
    meta = {
        "card": props.name, "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", 0), "memory_bytes": props.total_memory,
        "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(), "convops": convops.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    try:
        import torch._inductor.config as inductor_config
        meta["inductor_compile_threads"] = inductor_config.compile_threads  # parallel compile workers
    except Exception:
        meta["inductor_compile_threads"] = None
    try:
        import triton
        meta["triton"] = triton.__version__
    except ImportError:
        meta["triton"] = None
    try:
        meta["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
    except Exception:
        meta["driver"] = None
    meta["git"] = provenance.git_revision()
    meta["sources"] = provenance.source_digest()
    return meta


def main(argv=None) -> int:
    args = parse_args(argv)
    cases = select(all_cases(), args.cases, args.quick)
    if args.list:
        print("\n".join(c.name for c in cases))
        return 0
    if not cases:
        sys.exit(f"no case matches {args.cases!r} (see --list)")
    if not torch.cuda.is_available():
        sys.exit("bench.run needs a CUDA GPU (the demo, python -m convops.demo, runs on the CPU)")

    start = time.monotonic()
    _quiet_autotune_logs()
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "bench-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    meta = _versions()
    meta.update(argv=sys.argv[1:] if argv is None else list(argv), quick=args.quick, modes=args.modes,
                shard=args.shard, sweep_modes=args.sweep_modes, autotune=args.autotune, budget_s=args.budget_s,
                tolerances={m.name: {"atol": m.atol, "rtol": m.rtol} for m in MODES.values()},
                convops_cuda_kernels={op: convops.has_cuda_kernels(op) for op in (
                    "depthwise_conv2d", "depthwise_separable_conv2d", "conv_transpose2d", "conv_transpose3d",
                    "conv2d_group_norm_scale_max_pool_clamp")})
    print(f"{meta['card']} ({meta['sm_count']} SMs, L2 {meta['l2_bytes'] / 2**20:.0f} MiB), torch {meta['torch']}, "
          f"CUDA {meta['cuda']}, cuDNN {meta['cudnn']}, triton {meta['triton']}", flush=True)

    ceilings = measure_ceilings(bench_ms)
    meta["ceilings"] = {"copy_TBps": ceilings.copy_bytes_per_s / 1e12,
                        **{f"{k}_TFLOPs": v / 1e12 for k, v in ceilings.matmul_flops_per_s.items()}}
    print("ceilings: copy {copy_TBps:.2f} TB/s, fp32 {fp32_TFLOPs:.1f} / TF32 {tf32_TFLOPs:.0f} / bf16 "
          "{bf16_TFLOPs:.0f} TFLOP/s".format(**meta["ceilings"]), flush=True)

    backend, backend_note = convops_backend()
    meta["backend"] = backend_note or "convops.backend"
    plan = Plan(columns=args.columns, autotune=args.autotune, deadline=start + args.budget_s, budget_s=args.budget_s,
                l2_bytes=meta["l2_bytes"] or 50 * 2**20, ceilings=ceilings, backend=backend,
                backend_note=backend_note, rounds_below_ms=args.rounds_below_ms,
                host_slack_us=args.host_slack_us)
    meta["rounds_below_ms"] = args.rounds_below_ms
    meta["host_slack_us"] = args.host_slack_us

    # Pass 1: every case and mode, all columns but max-autotune. Pass 2: max-autotune (the slowest part: each
    # compile autotunes Triton templates for 5-50 s) on its subset, as far as the budget goes.
    items = work_items(cases, args)
    first_pass = tuple(c for c in args.columns if c != "max_autotune")
    records = {}
    for i, (case, mode) in enumerate(items):
        if plan.time_left() <= 0:
            records[case.name, mode.name] = _skipped_record(case, mode, args.columns)
            continue
        _run(f"{i + 1}/{len(items)}", case, mode, plan, first_pass, records, start, stem, meta)
    if "max_autotune" in args.columns:
        tuned = autotune_items(items, plan)
        for i, (case, mode) in enumerate(tuned):
            skip = plan.skip_reason("max_autotune", case, mode)
            if skip:
                records[case.name, mode.name]["columns"]["max_autotune"] = {
                    "status": "skipped", "ms": None, "max_error": None, "note": skip}
                continue
            _run(f"max-autotune {i + 1}/{len(tuned)}", case, mode, plan, ("max_autotune",), records, start, stem,
                 meta)
        for record in records.values():
            record["columns"].setdefault("max_autotune", {
                "status": "skipped", "ms": None, "max_error": None, "note": f"skipped (--autotune {args.autotune})"})

    records = report.in_bench_order(list(records.values()), [c.name for c in cases], list(MODES))
    meta["elapsed_s"] = time.monotonic() - start
    meta["skipped_for_budget"] = len(plan.skipped_for_budget)
    busy = report.timed_while_busy(records, quiet.IDLE_CPU_FRACTION)
    meta["timed_while_busy"] = len(busy)
    report.write_json(stem + ".json", meta, records)
    report.write_markdown(stem + ".md", meta, records, args.columns)
    chart_note = report.write_chart(stem + ".png", records, f"{meta['card']}, torch {meta['torch']}, {meta['date']}")

    print()
    print(report.table(records, args.columns))
    print()
    print(report.summary(records))
    for line in report.problems(records):
        print("  " + line)
    if busy:
        print(f"{len(busy)} columns were timed while this process's background (compile workers, threads) still "
              f"used the CPU after {quiet.TIMEOUT_S:g} s of waiting: see background_cores in the JSON")
    if plan.skipped_for_budget:
        print(f"{len(plan.skipped_for_budget)} compiled columns skipped to stay within --budget-s {args.budget_s:g}")
    print(f"wrote {stem}.json, {stem}.md" + (f", {stem}.png" if chart_note is None else f" (no chart: {chart_note})"))
    print(f"total {meta['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
