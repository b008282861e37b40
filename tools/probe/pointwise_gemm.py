"""How fast is a 1x1 convolution of NCHW data as a batched GEMM (cuBLAS) against ATen's convolution (cuDNN), and
how far is the fused separable kernel from a float64 TF32-rounded reference past 128 output channels?

    python tools/probe/pointwise_gemm.py
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tabulate import tabulate  # noqa: E402
from triton.testing import do_bench  # noqa: E402

SHAPES = [  # (N, C_in, H, W, C_out)
    (16, 64, 512, 512, 128), (16, 64, 510, 510, 128), (32, 96, 56, 56, 384), (32, 384, 14, 14, 1536), (1, 32, 112, 112, 16),
    (32, 32, 112, 112, 16), (1, 96, 56, 56, 24),
]


def as_gemm(x, w):
    """The bias-free 1x1 as convops' mixed path runs it on NCHW data (the seed has no bias)."""
    n, c, h, wd = x.shape
    return torch.matmul(w.view(w.shape[0], c), x.view(n, c, h * wd)).view(n, w.shape[0], h, wd)


def main():
    rows = []
    for dtype, tf32 in ((torch.float32, True), (torch.float32, False), (torch.bfloat16, True), (torch.float16, True)):
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for n, c, h, wd, co in SHAPES:
            x = torch.randn(n, c, h, wd, device="cuda", dtype=dtype)
            w = torch.randn(co, c, 1, 1, device="cuda", dtype=dtype) / c**0.5
            ref = F.conv2d(x.double(), w.double())
            conv = F.conv2d(x, w)
            gemm = as_gemm(x, w)
            t_conv = do_bench(lambda: F.conv2d(x, w), warmup=25, rep=100, return_mode="median")
            t_gemm = do_bench(lambda: as_gemm(x, w), warmup=25, rep=100, return_mode="median")
            floor = (x.numel() + conv.numel()) * x.element_size() / 4.24e12 * 1e3
            rows.append([f"{n}x{c}x{h}x{wd}->{co}", "tf32" if (dtype == torch.float32 and tf32) else str(dtype)[6:],
                         f"{t_conv:.4f}", f"{t_gemm:.4f}", f"{t_conv / t_gemm:.2f}", f"{floor:.4f}",
                         f"{(conv.double() - ref).abs().max().item():.1e}",
                         f"{(gemm.double() - ref).abs().max().item():.1e}",
                         f"{(gemm - conv).abs().max().item():.1e}", gemm.is_contiguous()])
    print(tabulate(rows, headers=["shape", "mode", "cudnn ms", "gemm ms", "cudnn/gemm", "mem floor ms",
                                  "cudnn err64", "gemm err64", "|gemm-cudnn|", "contig"]))
    torch.backends.cuda.matmul.allow_tf32 = False


def fused_wide_tf32():
    """The fused kernel past one 128-channel tile in TF32 mode, against eager and a float64 reference whose 1x1
    operands are rounded to TF32 (nearest) as cuDNN rounds them."""
    import convops  # noqa: F401
    from tests.common_utils import round_tf32
    torch.backends.cudnn.allow_tf32 = True
    rows = []
    for shape, co in (((3, 16, 9, 48), 200), ((2, 33, 6, 16), 130), ((2, 64, 40, 64), 256), ((2, 64, 40, 64), 128)):
        x = torch.randn(shape, device="cuda")
        c = shape[1]
        dw = torch.randn(c, 1, 3, 3, device="cuda") / 3
        pw = torch.randn(co, c, 1, 1, device="cuda") / c**0.5
        with convops.forced_path("convops"):
            out = torch.ops.convops.depthwise_separable_conv2d(x, dw, None, pw, None, [1, 1], [1, 1], [1, 1])
        mid = F.conv2d(x, dw, None, 1, 1, 1, c)
        eager = F.conv2d(mid, pw)
        ref = F.conv2d(round_tf32(mid).double(), round_tf32(pw).double())
        rows.append([f"{shape}->{co}", f"{(out.double() - ref).abs().max().item():.2e}",
                     f"{(eager.double() - ref).abs().max().item():.2e}", f"{(out - eager).abs().max().item():.2e}"])
    print(tabulate(rows, headers=["case", "|fused - ref|", "|eager - ref|", "|fused - eager|"]))


if __name__ == "__main__":
    main()
    if len(sys.argv) > 1 and sys.argv[1] == "fused":
        fused_wide_tf32()
