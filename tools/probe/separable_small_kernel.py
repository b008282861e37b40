"""The small-problem separable kernel (csrc/cuda/depthwise_separable_conv2d_small.cuh) on the batch-1 MobileNetV2 /
EfficientNet-B0 layers against the eager pair and the op's other paths. For each mode and layer: do_bench medians
(with its L2 flush; best of three) of eager, the op on the small kernel (forced), on the other convops paths (the
small kernel left out) and on ATen's, the switches set outside the timed call; then, after every timing (the
profiler disturbs do_bench's launches after it), the kernels' device time of one call from the profiler.

    python tools/probe/separable_small_kernel.py [tf32|fp32|bf16 ...]

Found (H100, 2026-11-28 02:00 UTC): on 7x7 and 14x14 planes the small kernel 11.4-14.0 us against eager's 12.5-15.9
in TF32 and bf16 (1.05-1.24x but for 480 -> 80 in TF32, 0.96x), 1.7-3.7x in strict fp32; on 28x28 planes slower
than eager and the mixed path (14.5-16.8 against 10.8-14.9), so the dispatch keeps it to planes of at most 256
pixels. Its device time (7.6-13.7 us) exceeds eager's two kernels together (4.9-10.1): it wins by the launch it saves.
Needs a GPU and a CUDA build.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import convops  # noqa: E402

# (channels, plane, kernel, stride, pointwise out channels): bench/cases.py's batch-1 layers but the 112x112 one.
LAYERS = [(144, 56, 3, 2, 32), (384, 14, 3, 1, 64), (960, 7, 3, 1, 160), (144, 56, 5, 2, 40),
          (240, 28, 5, 1, 40), (480, 14, 3, 1, 80), (1152, 7, 5, 1, 192)]


def do_bench_us(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return min(triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median") for _ in range(3)) * 1000


def device_us(fn) -> float:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in prof.key_averages() if e.device_time_total > 0) / 10


def under(env: dict, policy: str, measure, fn) -> float:
    os.environ.update(env)
    try:
        with convops.forced_path(policy):
            return measure(fn)
    finally:
        for key in env:
            os.environ.pop(key)


def main() -> None:
    print(torch.cuda.get_device_name())
    modes = sys.argv[1:] or ["tf32", "fp32", "bf16"]
    for measure in (do_bench_us, device_us):
        for mode in modes:
            torch.backends.cudnn.allow_tf32 = mode == "tf32"
            dtype = torch.bfloat16 if mode == "bf16" else torch.float32
            for c, hw, k, s, c_out in LAYERS:
                torch.manual_seed(0)
                x = torch.randn(1, c, hw, hw, device="cuda", dtype=dtype)
                w = torch.randn(c, 1, k, k, device="cuda", dtype=dtype)
                pw = torch.randn(c_out, c, 1, 1, device="cuda", dtype=dtype) / c ** 0.5
                p = (k - 1) // 2
                args = (x, w, None, pw, None, [s, s], [p, p], [1, 1])

                def op():
                    return torch.ops.convops.depthwise_separable_conv2d(*args)

                def eager():
                    return F.conv2d(F.conv2d(x, w, None, s, p, 1, c), pw)

                cols = {"eager": under({}, "aten", measure, eager),
                        "small": under({"CONVOPS_SEPARABLE_KERNEL": "small"}, "convops", measure, op),
                        "others": under({"CONVOPS_SEPARABLE_KERNEL": "streaming"}, "convops", measure, op),
                        "aten": under({}, "aten", measure, op)}
                print(f"{measure.__name__:11} {mode} c{c} h{hw} k{k} s{s} o{c_out}: " +
                      "  ".join(f"{name} {value:.2f}" for name, value in cols.items()) +
                      f"  eager/small {cols['eager'] / cols['small']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
