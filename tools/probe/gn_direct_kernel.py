"""The GroupNorm block's direct kernel (CUDA cores, convolutions of at most 32 taps) against the tensor-core fused
kernels (CONVOPS_GN_KERNEL=mma), the mixed path (=none) and eager, on first-layer shapes: the op forced onto its
convops path, do_bench medians (ms) with the inputs rotated past L2.

    python tools/probe/gn_direct_kernel.py      # needs a GPU and a CUDA build

Found (H200, 2026-11-28 20:36 UTC, one pass; bench/RESULTS.md): the direct kernel 1.4-3.9x faster than the
tensor-core kernels in fp32 (3xTF32 there) and 1.4-2.1x in bf16 on 16-32 output channels; slower on (16, 3, 128,
64, pool 4) in bf16 (0.0640 against the window kernel's 0.0516 ms), a full 64-channel MMA tile: such 16-bit
problems keep the window kernel since (the op's rule; 0.0517 ms at 20:45).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tabulate import tabulate  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import convops  # noqa: E402

# (batch, C_in, size, C_out, kernel, stride, padding, groups, pool)
SHAPES = [
    (64, 3, 64, 16, 3, 1, 1, 4, 2),    # the bench's b64 c3 block
    (64, 1, 64, 16, 3, 1, 1, 4, 2),
    (64, 2, 64, 16, 3, 1, 1, 4, 2),
    (32, 3, 112, 32, 3, 2, 1, 8, 2),   # a stride-2 stem: the tile kernel's (the window kernel is stride 1)
    (16, 3, 128, 64, 3, 1, 1, 16, 4),  # the seed's block on 3 channels
    (32, 1, 64, 32, 5, 1, 2, 8, 2),    # 25 taps
]
VARIANTS = {"direct": None, "mma": "mma", "mixed": "none"}


def make(shape, dtype):
    n, cin, size, cout, k, s, p, g, pool = shape
    x = torch.randn(n, cin, size, size, device="cuda", dtype=dtype)
    w = torch.randn(cout, cin, k, k, device="cuda", dtype=dtype) / (cin * k * k) ** 0.5
    b, gamma, beta = (torch.randn(cout, device="cuda", dtype=dtype) for _ in range(3))
    scale = torch.randn(cout, 1, 1, device="cuda", dtype=dtype)
    return x, (w, b, [s, s], [p, p], [1, 1], g, gamma, beta, 1e-5, scale, [pool, pool], 0.0, 1.0)


def eager(x, w, b, stride, padding, dilation, g, gamma, beta, eps, scale, pool, lo, hi):
    y = F.group_norm(F.conv2d(x, w, b, stride, padding, dilation), g, gamma, beta, eps) * scale
    return F.max_pool2d(y, pool, pool).clamp(lo, hi)


def timed(fn, inputs):
    state = {"i": 0}

    def call():
        state["i"] = (state["i"] + 1) % len(inputs)
        fn(inputs[state["i"]])

    return do_bench(call, warmup=50, rep=200, return_mode="median")


def main() -> None:
    print(torch.cuda.get_device_name())
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for shape in SHAPES:
            x, rest = make(shape, dtype)
            inputs = [x] + [torch.randn_like(x) for _ in range(max(1, (256 << 20) // (x.numel() * x.element_size())))]
            row = [str(dtype).removeprefix("torch."), shape, timed(lambda t: eager(t, *rest), inputs)]
            for switch in VARIANTS.values():
                if switch is None:
                    os.environ.pop("CONVOPS_GN_KERNEL", None)
                else:
                    os.environ["CONVOPS_GN_KERNEL"] = switch
                with convops.forced_path("convops"):
                    row.append(timed(lambda t: convops.conv2d_group_norm_scale_max_pool_clamp(t, *rest), inputs))
            os.environ.pop("CONVOPS_GN_KERNEL", None)
            rows.append(row + [row[4] / row[3], row[5] / row[3]])
    print(tabulate(rows, headers=["dtype", "(n, cin, size, cout, k, s, p, g, pool)", "eager", *VARIANTS,
                                  "mma / direct", "mixed / direct"], floatfmt=".4f"))


if __name__ == "__main__":
    torch.backends.cudnn.allow_tf32 = False
    main()
