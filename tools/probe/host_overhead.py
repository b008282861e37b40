"""Host time a call (us) of eager and of the convops ops on batch-1 layers, and of the pieces of an op call.

For each layer and precision mode: an nn.Conv2d module (what the bench's eager column calls), F.conv2d, the boxed
torch.ops.aten.convolution call, the convops op under "auto" and under each forced path (with do_bench's time beside
it), and the separable pair. A call's host time is perf_counter over 200 calls without a sync (below the launch
queue's depth, so the host is what is timed), best of 15 repetitions.

    python tools/probe/host_overhead.py

Found (H200 machine, 2026-11-27 10:15 UTC, bench/PERF_NOTES.md "Host time of the batch-1 layers"): F.conv2d 13-22
us, the nn.Conv2d module 18-27, the op on the ATen path 18-28, on the convops path 14-23, and the boxed
torch.ops.aten.convolution call 21-32: torch.ops' boxed call from Python is what the op's ATen path loses to
F.conv2d. Those numbers came from this probe's first draft (the same layers, calls and method). Needs a GPU and a
CUDA build.
"""
from __future__ import annotations

import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import convops  # noqa: E402

LAYERS = ((960, 7, 3, 160), (1152, 7, 5, 192), (32, 112, 3, 16))  # channels, plane, filter, separable couts


def host_us(fn, calls: int = 200, reps: int = 15) -> float:
    for _ in range(50):
        fn()
    best = float("inf")
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return best


def gpu_us(fn) -> float:
    from triton.testing import do_bench
    return do_bench(fn, warmup=25, rep=100) * 1e3


def probe_layer(c: int, h: int, k: int, cout: int, dtype: torch.dtype) -> None:
    dev, p = "cuda", k // 2
    x = torch.randn(1, c, h, h, device=dev, dtype=dtype)
    w = torch.randn(c, 1, k, k, device=dev, dtype=dtype)
    b = torch.randn(c, device=dev, dtype=dtype)
    pw = torch.randn(cout, c, 1, 1, device=dev, dtype=dtype)
    pb = torch.randn(cout, device=dev, dtype=dtype)
    module = torch.nn.Conv2d(c, c, k, 1, p, groups=c).to(dev, dtype)
    op = torch.ops.convops.depthwise_conv2d.default
    separable = torch.ops.convops.depthwise_separable_conv2d.default
    pair = (1, 1), (p, p), (1, 1)
    host_rows = {
        "nn.Conv2d module": lambda: module(x),
        "F.conv2d": lambda: F.conv2d(x, w, b, 1, p, 1, c),
        "torch.ops.aten.convolution.default": lambda: torch.ops.aten.convolution.default(
            x, w, b, [1, 1], [p, p], [1, 1], False, [0, 0], c),
        "convops.depthwise_conv2d (auto)": lambda: convops.depthwise_conv2d(x, w, b, 1, p, 1),
    }
    for name, fn in host_rows.items():
        print(f"  {name:48s} host {host_us(fn):6.2f} us")
    for policy in ("aten", "convops"):
        with convops.forced_path(policy):
            fn = lambda: op(x, w, b, *pair)  # noqa: E731
            print(f"  {'op under ' + policy:48s} host {host_us(fn):6.2f} us  do_bench {gpu_us(fn):6.2f} us")
    print(f"  {'F.conv2d':48s} {'':17s} do_bench {gpu_us(host_rows['F.conv2d']):6.2f} us")
    eager_pair = lambda: F.conv2d(F.conv2d(x, w, b, 1, p, 1, c), pw, pb)  # noqa: E731
    op_pair = lambda: separable(x, w, b, pw, pb, *pair)  # noqa: E731
    print(f"  {'separable: eager pair':48s} host {host_us(eager_pair):6.2f} us")
    print(f"  {'separable: op (auto)':48s} host {host_us(op_pair):6.2f} us")


def main() -> None:
    print("card:", torch.cuda.get_device_name())
    for dtype, tf32 in ((torch.float32, True), (torch.bfloat16, False)):
        torch.backends.cudnn.allow_tf32 = tf32
        for c, h, k, cout in LAYERS:
            print(f"== {dtype} (TF32 {'on' if tf32 else 'off'}), batch 1, c{c} {h}x{h}, {k}x{k}")
            with torch.no_grad():
                probe_layer(c, h, k, cout, dtype)


if __name__ == "__main__":
    main()
