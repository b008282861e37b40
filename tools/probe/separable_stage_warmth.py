"""Does the separable op's nested 1x1 decision, timed alone behind an L2 flush, pick the 1x1 that is faster inside
the op, where it reads the intermediate the depthwise kernel has just written?

For each row, do_bench (bench/timing.py's bench_ms: L2 flush and GPU spin before each run) times, in us:
  eager            the module's pair (cuDNN's depthwise, cuDNN's 1x1)
  op auto          the op with fresh decisions (its path and nested choices printed)
  dw + gemm        the mixed path as the forced "convops" policy runs it: the convops depthwise kernel, the 1x1 as
                   convops' GEMM (the bench's `kernel` column where no fused kernel applies)
  dw + cudnn       the convops depthwise kernel (forced), then F.conv2d's 1x1: the mixed path with cuDNN's 1x1
  1x1 gemm cold / 1x1 cudnn cold
                   the 1x1 alone on a stored intermediate, as the nested decision times it
Rows: EfficientNet-B0's c144 5x5 stride-2 layer in bf16, whose decision ran ATen's path at 11.81 against 11.46 us
while do_bench timed the convops path at 10.22 against eager's 10.98 (H200, 2026-11-28 12:01 UTC), and two
neighbours. If "dw + gemm" beats "dw + cudnn" while "1x1 cudnn cold" beats "1x1 gemm cold", the stage decided alone
is the wrong one inside the op (bench/PERF_NOTES.md, #5).

    python tools/probe/separable_stage_warmth.py

Found (H200, 2026-11-28 13:21 UTC, bench/PERF_NOTES.md): not the cold decision. On the c144 5x5 bf16 row the two 1x1s
tie alone (GEMM 5.98, cuDNN 5.95 us), "auto" took cuDNN's, and the op ran 10.46 us, as fast as the forced GEMM path
(10.40) and not the 11.49 of "dw + cudnn". On the c144 3x3 bf16 row "auto" took the GEMM and ran 10.37 us against the
forced path's 9.38, unexplained.

Needs a GPU and a CUDA build.
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F
from tabulate import tabulate

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import convops  # noqa: E402
from bench.timing import bench_ms  # noqa: E402
from convops.path_choice import forced_path, stage_of  # noqa: E402

# (input shape, filter, stride, C_out, dtype, TF32 allowed)
ROWS = (
    ((1, 144, 56, 56), 5, 2, 40, torch.bfloat16, True),
    ((1, 144, 56, 56), 3, 2, 32, torch.bfloat16, True),
    ((1, 144, 56, 56), 3, 2, 32, torch.float32, False),
)


def main() -> None:
    table = []
    for shape, size, stride, c_out, dtype, tf32 in ROWS:
        torch.backends.cudnn.allow_tf32 = tf32
        channels, padding = shape[1], size // 2
        x = torch.randn(shape, device="cuda", dtype=dtype)
        dw = torch.randn(channels, 1, size, size, device="cuda", dtype=dtype)
        pw = torch.randn(c_out, channels, 1, 1, device="cuda", dtype=dtype) / channels**0.5
        args = (x, dw, None, pw, None, [stride] * 2, [padding] * 2, [1, 1])
        mid = F.conv2d(x, dw, None, stride, padding, 1, channels)

        def op():
            return torch.ops.convops.depthwise_separable_conv2d(*args)

        def forced(fn):
            def call():
                with forced_path("convops"):
                    return fn()
            return call

        def depthwise():
            return torch.ops.convops.depthwise_conv2d(x, dw, None, [stride] * 2, [padding] * 2, [1, 1])

        def pointwise_gemm():  # the GEMM convops' 1x1 stage runs here (convolution_gemm.cuh: ATen's matmul)
            return torch.matmul(pw.view(c_out, channels), mid.view(1, channels, -1))

        convops.clear_path_choices()
        with forced_path("auto"):
            op()  # the decisions
            auto_us = bench_ms(op) * 1e3
        choices = "; ".join(f"{stage_of(c.problem) or 'op'} -> {c.path} "
                            f"({c.convops_ms * 1e3:.2f} / {c.aten_ms * 1e3:.2f})" for c in convops.path_choices())
        times = {
            "eager": bench_ms(lambda: F.conv2d(F.conv2d(x, dw, None, stride, padding, 1, channels), pw)) * 1e3,
            "op auto": auto_us,
            "forced convops": bench_ms(forced(op)) * 1e3,
            "dw + cudnn": bench_ms(lambda: F.conv2d(forced(depthwise)(), pw)) * 1e3,
            "1x1 gemm cold": bench_ms(pointwise_gemm) * 1e3,
            "1x1 cudnn cold": bench_ms(lambda: F.conv2d(mid, pw)) * 1e3,
        }
        table.append([f"c{channels} {shape[2]}x{shape[3]} k{size} s{stride} -> {c_out}",
                      f"{dtype} tf32={tf32}"] + [f"{t:.2f}" for t in times.values()] + [choices])
    print(tabulate(table, headers=["layer (batch 1)", "mode", *times, "auto's choices (convops / aten us)"]))


if __name__ == "__main__":
    main()
