"""One case in one precision mode: build the model, check every column against eager, then time it.

Every column is timed under the same conditions: the uncompiled columns (eager, kernel, op) first, after the
previous case's compiles have wound down, then the compiled ones, each after its own compile has (bench/quiet.py).
The "auto" op decides its path in that quiet too: the op column's first call, and again the convops backend's."""
from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass, field

import torch

import convops

from . import quiet
from .cases import Case
from .columns import BASELINES, COMPILED, Unavailable, column_policy, make_runner
from .floors import Ceilings, flops, min_bytes
from .timing import Mode, bench_ms, check, first_call_ms, make_inputs, rotating, rotation_count


# A max-autotune compile is started only with this much budget left: the slowest seen took about 50 s (the
# depthwise-separable seed: its 1x1 conv is autotuned as a matmul over 21 choices on 4M rows).
AUTOTUNE_RESERVE_S = 50.0


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
            return "skipped (time budget)"
        return None


def _column_result(status: str, ms=None, max_error=None, first_call_s=None, note="", path=None,
                   settled: quiet.Settled | None = None):
    result = {"status": status, "ms": ms, "max_error": max_error, "first_call_s": first_call_s, "note": note,
              "path": path}
    if settled is not None:  # how long the timing waited for quiet, and how busy the background still was
        result["settle_s"] = settled.waited_s
        result["background_cores"] = settled.background_cores
    return result


def _chosen_path() -> str:
    """What the "auto" policy chose in the call just made: "convops", "aten", "mixed", or e.g. "aten+convops"
    where one model call made several decisions."""
    paths = sorted({choice.path for choice in convops.path_choices()})
    return "+".join(paths) if paths else "convops"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def run_case(case: Case, mode: Mode, plan: Plan, columns: tuple[str, ...] | None = None, device: str = "cuda",
             timer=None) -> dict:
    """The given columns (default: the plan's) of one case in one mode. `timer(fn) -> ms` defaults to the CUDA
    do_bench timer."""
    timer = timer or _cuda_timer
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
        settled = None
        for column in timing_order(wanted):
            skip = plan.skip_reason(column, case, mode)
            if skip:
                results[column] = _column_result("skipped", note=skip)
                continue
            if column not in COMPILED and settled is None:
                settled = quiet.settle()  # once: the uncompiled columns leave nothing running behind them
            results[column] = _run_column(column, model, inputs, expected, mode, plan, timer, settled)
        del expected
    record["columns"] = {column: results[column] for column in wanted if column in results}
    summarize(record)
    return record


def timing_order(columns) -> list[str]:
    """The uncompiled columns before the compiled ones, each group in the given order."""
    return [c for c in columns if c not in COMPILED] + [c for c in columns if c in COMPILED]


def _run_column(column, model, inputs, expected, mode, plan, timer, settled=None) -> dict:
    """`settled`: the quiet the uncompiled columns start from (a compiled column settles after its compile)."""
    try:
        fn = make_runner(column, model, plan.backend, plan.backend_note)
    except Unavailable as why:
        status = "missing" if str(why).startswith("missing") else "n/a"
        return _column_result(status, note=str(why))
    try:
        with column_policy(column):
            if column == "convops_op":
                convops.clear_path_choices()  # so that the first call decides, and says what it decided
            start = time.perf_counter()
            actual = _synchronized(fn(inputs[0]))
            first_call_s = time.perf_counter() - start
            if column in COMPILED:
                settled = quiet.settle()  # the compile's worker processes and threads wind down
                if column == "convops_backend" and actual.is_cuda:
                    # The ops of the compiled graph decided their paths right after the compile, while it wound
                    # down: decide again in quiet, as the op column did.
                    convops.clear_path_choices()
                    actual = _synchronized(fn(inputs[0]))
            path = _chosen_path() if column == "convops_op" and actual.is_cuda else None
            verdict = check(actual, expected, mode)
            del actual
            if not verdict.ok:
                return _column_result("fail", max_error=verdict.max_error, first_call_s=first_call_s,
                                      note=verdict.note, settled=settled)
            with quiet.gc_paused():
                ms = timer(rotating(fn, inputs))
        return _column_result("ok", ms=ms, max_error=verdict.max_error, first_call_s=first_call_s, path=path,
                              settled=settled)
    except torch.cuda.OutOfMemoryError as exc:
        torch.cuda.empty_cache()
        return _column_result("error", note=_first_line(exc))
    except Exception as exc:
        return _column_result("error", note=_first_line(exc))


def _synchronized(output: torch.Tensor) -> torch.Tensor:
    if output.is_cuda:
        torch.cuda.synchronize()
    return output


def _cuda_timer(fn) -> float:
    return bench_ms(fn, first_call_ms(fn))


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
