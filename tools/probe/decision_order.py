"""How the order of timed runs moves "auto"'s times of a depthwise layer's two paths, against do_bench's.

Each protocol times the op under the "convops" and "aten" policies, 15 runs each, every run behind a 200 us GPU spin
and a 256 MB L2 flush as the decision's (path_choice.cu), and prints the medians (us):
  alt              the paths taking turns, one run each per round, convops first (the decision before 2026-11-28)
  alt-aten-first   the same, ATen first
  consecutive      each path's 15 runs back to back (the decision since)
  flush-then-spin  back to back, the flush before the spin (bench/timing.py's order)
then bench/timing.py's bench_ms (do_bench) of each path and of eager F.conv2d. Rows: the batch-1 depthwise layers of
the bench sweep whose decisions went to ATen although do_bench times the convops kernel 7-10% faster.

    python tools/probe/decision_order.py

Found (H200, 2026-11-28 11:00 and 11:05 UTC, two processes, bench/PERF_NOTES.md): taking turns, the two paths' times
flip by 0.3-0.6 us from one process to the next (c384 14x14 bf16, convops first: 5.41 / 5.44, then 5.28 / 6.02; ATen
first: 4.93 / 6.08, then 5.60 / 5.76); back to back they hold (5.12 / 5.70, then 5.09 / 5.57) as do_bench's do (5.14
/ 5.57, then 5.41 / 5.92). Needs a GPU and a CUDA build.
"""
from __future__ import annotations

import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import convops  # noqa: E402,F401
from bench.timing import bench_ms  # noqa: E402
from convops.path_choice import forced_path  # noqa: E402

SPIN_CYCLES = 400_000  # path_choice.cu's kHostLeadCycles
RUNS = 15
# (input shape, filter, stride, padding, dtype, TF32 allowed)
ROWS = (
    ((1, 384, 14, 14), 3, 1, 1, torch.bfloat16, False),
    ((1, 384, 14, 14), 3, 1, 1, torch.float32, False),
    ((1, 480, 14, 14), 3, 1, 1, torch.float32, True),
    ((1, 144, 56, 56), 3, 2, 1, torch.bfloat16, False),
    ((1, 960, 7, 7), 3, 1, 1, torch.bfloat16, False),
)


class Protocols:
    def __init__(self):
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def run(self, fn, spin_first: bool = True):
        """One timed run behind a spin and a flush; its events."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if spin_first:
            torch.cuda._sleep(SPIN_CYCLES)
            self.flush.zero_()
        else:
            self.flush.zero_()
            torch.cuda._sleep(SPIN_CYCLES)
        start.record()
        fn()
        end.record()
        return start, end

    @staticmethod
    def median_us(runs) -> float:
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) * 1000 for start, end in runs)

    def turns(self, paths):
        runs = {name: [] for name, _ in paths}
        for _ in range(RUNS):
            for name, fn in paths:
                runs[name].append(self.run(fn))
        return {name: self.median_us(r) for name, r in runs.items()}

    def blocks(self, paths, spin_first: bool = True):
        return {name: self.median_us([self.run(fn, spin_first) for _ in range(RUNS)]) for name, fn in paths}


def main() -> None:
    protocols = Protocols()
    for shape, size, stride, padding, dtype, tf32 in ROWS:
        torch.backends.cudnn.allow_tf32 = tf32
        x = torch.randn(shape, device="cuda", dtype=dtype)
        w = torch.randn(shape[1], 1, size, size, device="cuda", dtype=dtype)

        def op():
            return torch.ops.convops.depthwise_conv2d(x, w, None, [stride] * 2, [padding] * 2, [1, 1])

        def under(policy):
            def call():
                with forced_path(policy):
                    return op()
            return call

        def eager():
            return F.conv2d(x, w, None, stride, padding, 1, shape[1])

        convops_path, aten_path = ("convops", under("convops")), ("aten", under("aten"))
        for _, fn in (convops_path, aten_path, ("eager", eager)):
            fn()
        results = {
            "alt": protocols.turns([convops_path, aten_path]),
            "alt-aten-first": protocols.turns([aten_path, convops_path]),
            "consecutive": protocols.blocks([convops_path, aten_path]),
            "flush-then-spin": protocols.blocks([convops_path, aten_path], spin_first=False),
        }
        line = " ".join(f"{tag} {r['convops']:.2f}/{r['aten']:.2f}" for tag, r in results.items())
        bench = " ".join(f"{name} {bench_ms(fn) * 1000:.2f}" for name, fn in (convops_path, aten_path, ("eager", eager)))
        print(f"{dtype} {shape} k{size} s{stride} tf32={tf32}: convops/aten us: {line} | do_bench: {bench}", flush=True)


if __name__ == "__main__":
    main()
