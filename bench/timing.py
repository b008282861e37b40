"""Precision modes, correctness checks against eager, and timing over rotated inputs."""
from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Mode:
    name: str
    label: str
    dtype: torch.dtype
    cudnn_tf32: bool   # torch.backends.cudnn.allow_tf32 while the mode runs (matmul TF32 stays at its default)
    rate_key: str      # which measured matrix rate bounds its FLOPs
    atol: float        # agreement with eager: |x - eager| <= atol + rtol * |eager| everywhere
    rtol: float

    @contextlib.contextmanager
    def active(self):
        old = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = self.cudnn_tf32
        try:
            yield
        finally:
            torch.backends.cudnn.allow_tf32 = old


# TF32 keeps 10 mantissa bits: two correct TF32 convolutions that round differently (cuDNN picks Winograd or FFT
# algorithms for some shapes, Inductor's Triton templates truncate) differ by about 1e-3 of the values, more after
# GroupNorm divides by a small standard deviation (Inductor's own compile of L2-85 differs from eager by 3e-3).
# Wrong results are off by far more. bf16 outputs differ by an ulp (2^-8 relative) and more through bf16
# intermediates.
MODES = {
    "tf32": Mode("tf32", "fp32, default TF32 setting", torch.float32, True, "tf32", 5e-3, 5e-3),
    "fp32": Mode("fp32", "strict fp32 (cudnn.allow_tf32=False)", torch.float32, False, "fp32", 1e-4, 1e-4),
    "bf16": Mode("bf16", "bf16", torch.bfloat16, True, "bf16", 3e-2, 3e-2),
}


@dataclass
class Check:
    ok: bool
    max_error: float
    note: str = ""


def check(actual: torch.Tensor, expected: torch.Tensor, mode: Mode) -> Check:
    """Same shape and dtype as eager, and within the mode's tolerance everywhere (NaN where eager has none fails)."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return Check(False, math.nan, f"got {tuple(actual.shape)} {actual.dtype}, eager "
                                      f"{tuple(expected.shape)} {expected.dtype}")
    diff = (actual.float() - expected.float()).abs()
    max_error = diff.max().item() if diff.numel() else 0.0
    ok = bool((diff <= mode.atol + mode.rtol * expected.float().abs()).all())
    return Check(ok, max_error, "" if ok else "differs from eager")


def rotation_count(set_bytes: int, l2_bytes: int, factor: float = 3.0, limit: int = 4096) -> int:
    """How many input sets to cycle through so that together they exceed the L2 cache `factor` times: then every
    call reads its input from device memory, as a layer does in a real network."""
    return max(1, min(limit, math.ceil(factor * l2_bytes / max(1, set_bytes))))


def make_inputs(shape: Sequence[int], dtype: torch.dtype, device, dist: str, count: int) -> list[torch.Tensor]:
    draw = torch.rand if dist == "rand" else torch.randn
    return [draw(tuple(shape), device=device).to(dtype) for _ in range(count)]


def first_call_ms(fn: Callable[[], object]) -> float:
    """One synchronized call in ms (compilation, if any, happens here)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


# GPU time a spin kernel adds after do_bench's L2 flush, so that the host has enqueued the whole call (its start
# event, every launch of fn, its end event) before the GPU reaches it. Without it the flush (a 256 MB memset, about
# 57 us on an H200) is the only cover: a batch-1 layer whose call takes the host longer, as eager's two to four
# launches do on a busy host, is timed with the GPU waiting for the host in between. Measured so (H200,
# 2026-11-28 06:52 UTC), eager's five rounds of ConvNeXt-T 768 -> 3072 at 7x7 read 29.8 to 54.2 us. Every column
# gets the same spin, outside its timed region; `--host-slack-us 0` times with the host in the loop again.
HOST_SLACK_US = 200.0
SPIN_CYCLES_PER_US = 2000  # at most ~2 GHz SM clocks on Hopper: a slower clock only lengthens the spin


@contextlib.contextmanager
def gpu_spin_after_flush(slack_us: float):
    """Within it, triton's L2 flush between do_bench's calls is followed by a `slack_us` spin on the GPU."""
    from triton import runtime
    driver = runtime.driver.active
    cycles = int(slack_us * SPIN_CYCLES_PER_US)
    if cycles <= 0:
        yield
        return
    flush = driver.clear_cache

    def flush_then_spin(cache):
        flush(cache)
        torch.cuda._sleep(cycles)

    driver.clear_cache = flush_then_spin
    try:
        yield
    finally:
        driver.clear_cache = flush


def bench_ms(fn: Callable[[], object], estimate_ms: float | None = None, host_slack_us: float = HOST_SLACK_US) -> float:
    """Median time of fn in ms with triton.testing.do_bench (CUDA events; it also zeroes a 256 MB buffer before
    each call, flushing L2, and here spins the GPU for `host_slack_us` after it). At least about 20 timed calls,
    also for slow cases; fast cases get hundreds (20 ms of them: launch-bound cases are timed in five such rounds,
    bench/runner.py)."""
    from triton.testing import do_bench
    estimate_ms = estimate_ms if estimate_ms is not None else first_call_ms(fn)
    rep = min(2000.0, max(20.0, 20 * estimate_ms))
    warmup = min(200.0, max(10.0, 2 * estimate_ms))
    with gpu_spin_after_flush(host_slack_us):
        return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def rotating(fn: Callable[[torch.Tensor], object], inputs: Sequence[torch.Tensor]) -> Callable[[], object]:
    """fn called on the next input set each time."""
    cycle = itertools.cycle(inputs)
    return lambda: fn(next(cycle))
