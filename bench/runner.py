"""One case in one precision mode: build the model, check every column against eager, then time it.

Every column runs and is checked first (the uncompiled ones, eager, kernel and op, then the compiled ones, each
compile followed by its wind-down, bench/quiet.py); the "auto" op decides its path in quiet, on the op column's first
call and again on the convops backend's. Then every checked column is timed under the same conditions: after one
more wait for quiet, one after the other, and in several rounds where the case is launch-bound."""
from __future__ import annotations

import functools
import math
import time
import zlib
from dataclasses import dataclass, field

import torch

import convops
from convops.path_choice import stage_of

from . import quiet, report
from .cases import Case
from .columns import BASELINES, COMPILED, Unavailable, column_policy, make_runner
from .floors import Ceilings, flops, min_bytes
from .timing import HOST_SLACK_US, Mode, bench_ms, check, first_call_ms, make_inputs, rotating, rotation_count


# A max-autotune compile is started only with this much budget left: the slowest seen took about 50 s (the
# depthwise-separable seed: its 1x1 conv is autotuned as a matmul over 21 choices on 4M rows).
AUTOTUNE_RESERVE_S = 50.0


# Launch-bound cases (a column under this many ms in the first round) are timed in LAUNCH_BOUND_ROUNDS rounds, each
# column once a round, and each column keeps the fastest of its rounds. Their times move with the host: where the
# host falls behind, the GPU waits for its launches between a call's events, and that wait is timed. It only ever
# adds time, and it comes in stretches: a batch-1 layer's eager column read 11.5 us in one full run and 40.7 us in
# the next (H200, 2026-11-27), and within one run's rounds 12.5, 14.2 and 33.7 us while the op, the same ATen
# kernels, read 13.9, 42.7 and 40.0 (07:12 UTC): the median of three let two slow rounds decide. So each column
# keeps its least disturbed round, the closest to its GPU time, for every column alike. `--rounds-below-ms` raises the
# threshold for a run: compiled columns of rows over it were seen slowed 2.3-2.7x in one round (UNet layers of
# 0.07-0.08 ms, H200, 2026-11-27 13:33 UTC), where the rounds cost device time that full runs do not have. Since
# 2026-11-28 a spin after each flush hides the host's time (HOST_SLACK_US, bench/timing.py); the rounds stay, for
# stretches longer than the spin.
LAUNCH_BOUND_MS = 0.05
LAUNCH_BOUND_ROUNDS = 5


@dataclass
class Plan:
    """What the run may do, and when it must stop starting expensive work."""
    columns: tuple[str, ...]
    autotune: str                   # which (case, mode) pairs get the max-autotune column; see wants_autotune
    deadline: float                 # time.monotonic() after which nothing new starts
    budget_s: float
    l2_bytes: int
    ceilings: Ceilings | None
    backend: object | None = None
    backend_note: str = ""
    skipped_for_budget: list = field(default_factory=list)
    rounds_below_ms: float = LAUNCH_BOUND_MS  # --rounds-below-ms
    host_slack_us: float = HOST_SLACK_US      # --host-slack-us

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def wants_autotune(self, case: Case, mode: Mode) -> bool:
        """all: everywhere; default: the seeds in every mode and the --quick sweep cases in tf32 mode; seeds: the
        seeds in tf32 mode; none."""
        return {"all": True, "none": False, "seeds": case.is_seed and mode.name == "tf32",
                "default": case.is_seed or (case.quick and mode.name == "tf32")}[self.autotune]

    def skip_reason(self, column: str, case: Case, mode: Mode) -> str | None:
        """Compiled columns give way as the budget runs out, so that the run ends in time with every
        convops-vs-eager number; max-autotune starts only with AUTOTUNE_RESERVE_S left."""
        if column in ("eager", "convops_kernel", "convops_op"):
            return None
        if column == "max_autotune" and not self.wants_autotune(case, mode):
            return f"skipped (--autotune {self.autotune})"
        reserve = AUTOTUNE_RESERVE_S if column == "max_autotune" else 0.05 * self.budget_s
        if self.time_left() < reserve:
            self.skipped_for_budget.append((case.name, mode.name, column))
            return report.BUDGET_SKIP_NOTE
        return None


def _column_result(status: str, ms=None, max_error=None, first_call_s=None, note="", path=None, decisions=None):
    """One column's record. `decisions`: for the op column, every "auto" decision of its first call as
    convops.path_choices() prints it (the problem, the path taken, each path's median), so that a row whose op took
    a path do_bench then timed slower can be read from the JSON."""
    return {"status": status, "ms": ms, "max_error": max_error, "first_call_s": first_call_s, "note": note,
            "path": path, "decisions": decisions}


# Decisions made inside a path (convops.path_choice.stage_of), by stage: a title and what each path means.
_LAYOUTS = {"convops": "channels-last", "aten": "input layout"}
_STAGES = {"mixed_layout": ("", _LAYOUTS), "aten_layout": ("ATen ", _LAYOUTS),
           "pointwise": ("1x1 ", {"convops": "gemm", "aten": "cudnn"})}


def _chosen_path() -> str:
    """What the "auto" policy chose in the call just made: "convops", "aten", "mixed", or e.g. "aten+convops"
    where one model call made several decisions; the decisions made inside a path, where made, follow in
    parentheses, e.g. " (channels-last, 1x1 cudnn)" for the separable mixed path's layout and 1x1, " (ATen
    channels-last)" for conv_transpose's ATen path (made in the decision's warm-up, they are there whichever path
    won)."""
    choices = convops.path_choices()
    ops = sorted({c.path for c in choices if stage_of(c.problem) is None})
    label = "+".join(ops) if ops else "convops"
    details = []
    for stage, (title, names) in _STAGES.items():
        taken = sorted({names[c.path] for c in choices if stage_of(c.problem) == stage})
        if taken:
            details.append(title + "+".join(taken))
    return f"{label} ({', '.join(details)})" if details else label


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def run_case(case: Case, mode: Mode, plan: Plan, columns: tuple[str, ...] | None = None, device: str = "cuda",
             timer=None) -> dict:
    """The given columns (default: the plan's) of one case in one mode. `timer(fn) -> ms` defaults to the CUDA
    do_bench timer."""
    timer = timer or functools.partial(_cuda_timer, host_slack_us=plan.host_slack_us)
    torch.manual_seed(zlib.crc32(case.name.encode()))  # the same parameters and inputs in every run
    model = case.make().to(device=device, dtype=mode.dtype).eval()
    element = torch.empty((), dtype=mode.dtype).element_size()
    set_bytes = math.prod(case.input_shape) * element
    inputs = make_inputs(case.input_shape, mode.dtype, device, case.input_dist,
                         rotation_count(set_bytes, plan.l2_bytes) if device == "cuda" else 1)
    record = {"case": case.name, "group": case.group, "op": model.op, "mode": mode.name, "dtype": str(mode.dtype),
              "input_shape": list(case.input_shape), "input_sets": len(inputs), "columns": {}}
    results = record["columns"]
    with torch.no_grad(), mode.active():
        try:
            expected = model(inputs[0])
        except Exception as exc:
            results["eager"] = _column_result("error", note=_first_line(exc))
            return record
        record["output_shape"] = list(expected.shape)
        record["flops"] = flops(model, case.input_shape)
        record["min_bytes"] = min_bytes(model, case.input_shape, expected.shape, element)
        if plan.ceilings is not None:
            record["floor_ms"], record["floor_bound"] = plan.ceilings.floor_ms(record["min_bytes"], record["flops"],
                                                                               mode.rate_key)
        wanted = columns or plan.columns
        ready = {}  # column -> its callable, for the columns that ran and agreed with eager
        waited_for_quiet = False
        for column in timing_order(wanted):
            skip = plan.skip_reason(column, case, mode)
            if skip:
                results[column] = _column_result("skipped", note=skip)
                continue
            if column not in COMPILED and not waited_for_quiet:
                quiet.settle()  # the previous case's compiles wind down before the "auto" op decides its path
                waited_for_quiet = True
            results[column], fn = _prepare_column(column, model, inputs, expected, mode, plan)
            if fn is not None:
                ready[column] = fn
        del expected
        _time_columns(ready, results, inputs, timer, plan.rounds_below_ms)
    record["columns"] = {column: results[column] for column in wanted if column in results}
    summarize(record)
    return record


def timing_order(columns) -> list[str]:
    """The uncompiled columns before the compiled ones, each group in the given order."""
    return [c for c in columns if c not in COMPILED] + [c for c in columns if c in COMPILED]


def _prepare_column(column, model, inputs, expected, mode, plan):
    """The column's first call (a compile, the "auto" op's decision) and its check against eager: (result, fn),
    fn None where it is not to be timed."""
    try:
        fn = make_runner(column, model, plan.backend, plan.backend_note)
    except Unavailable as why:
        status = "missing" if str(why).startswith("missing") else "n/a"
        return _column_result(status, note=str(why)), None
    try:
        with column_policy(column):
            if column == "convops_op":
                convops.clear_path_choices()  # so that the first call decides, and says what it decided
            start = time.perf_counter()
            actual = _synchronized(fn(inputs[0]))
            first_call_s = time.perf_counter() - start
            if column in COMPILED:
                quiet.settle()  # the compile's worker processes and threads wind down
                if column == "convops_backend" and actual.is_cuda:
                    # The compile's passes kept or left nodes by the op column's decision (made in quiet; the
                    # conv_transpose pass asks "auto" at compile time), but the ops of the compiled graph may have
                    # decided right after the compile, while it wound down: decide again in quiet.
                    convops.clear_path_choices()
                    actual = _synchronized(fn(inputs[0]))
            decided = column == "convops_op" and actual.is_cuda
            path = _chosen_path() if decided else None
            decisions = [str(c) for c in convops.path_choices()] if decided else None
            verdict = check(actual, expected, mode)
            del actual
        if not verdict.ok:
            return _column_result("fail", max_error=verdict.max_error, first_call_s=first_call_s,
                                  note=verdict.note), None
        return _column_result("ok", max_error=verdict.max_error, first_call_s=first_call_s, path=path,
                              decisions=decisions), fn
    except torch.cuda.OutOfMemoryError as exc:
        torch.cuda.empty_cache()
        return _column_result("error", note=_first_line(exc)), None
    except Exception as exc:
        return _column_result("error", note=_first_line(exc)), None


def _time_columns(ready: dict, results: dict, inputs, timer, rounds_below_ms: float = LAUNCH_BOUND_MS) -> None:
    """Times the checked columns, every one under the same conditions: after every compile of the case has wound
    down (one settle), in timing order, in rounds where a column's first round is under `rounds_below_ms` (each
    column keeps its fastest)."""
    if not ready:
        return
    settled = quiet.settle()
    rounds: dict[str, list[float]] = {column: [] for column in ready}
    for round_index in range(LAUNCH_BOUND_ROUNDS):
        for column, fn in list(ready.items()):
            try:
                with column_policy(column), quiet.gc_paused():
                    rounds[column].append(timer(rotating(fn, inputs)))
            except torch.cuda.OutOfMemoryError as exc:
                torch.cuda.empty_cache()
                results[column] = _column_result("error", note=_first_line(exc))
                del ready[column], rounds[column]
            except Exception as exc:
                results[column] = _column_result("error", note=_first_line(exc))
                del ready[column], rounds[column]
        if round_index == 0 and not any(times[0] < rounds_below_ms for times in rounds.values()):
            break
    for column, times in rounds.items():
        # settle_s and background_cores: how long the timing waited for quiet, and how busy the background still was
        results[column].update(ms=min(times), round_ms=times, settle_s=settled.waited_s,
                               background_cores=settled.background_cores)


def _synchronized(output: torch.Tensor) -> torch.Tensor:
    if output.is_cuda:
        torch.cuda.synchronize()
    return output


def _cuda_timer(fn, host_slack_us: float = HOST_SLACK_US) -> float:
    return bench_ms(fn, first_call_ms(fn), host_slack_us)


def _ms(columns: dict, name: str) -> float | None:
    col = columns.get(name)
    return col["ms"] if col and col["status"] == "ok" else None


def summarize(record: dict) -> None:
    """Speedup of the convops op (and of the backend) over the best baseline that ran, and fraction of the floor."""
    columns = record["columns"]
    baselines = {name: _ms(columns, name) for name in BASELINES if _ms(columns, name) is not None}
    best = min(baselines, key=baselines.get) if baselines else None
    record["best_baseline"] = best
    for key, column in (("speedup", "convops_op"), ("backend_speedup", "convops_backend")):
        ms = _ms(columns, column)
        record[key] = baselines[best] / ms if best and ms else None
    kernel_ms = _ms(columns, "convops_kernel")
    record["kernel_speedup"] = baselines[best] / kernel_ms if best and kernel_ms else None
    record["floor_fraction"] = record["floor_ms"] / kernel_ms if kernel_ms and record.get("floor_ms") else None
