"""How far from the memory floor do cuDNN and cuBLAS run the 1x1 of a batch-1 separable layer of few pixels?

The late layers of ConvNeXt-T, MobileNetV2 and EfficientNet-B0 at batch 1 have 49-196 pixels and up to 3072 output
channels: the 1x1 reads a weight of up to 9.4 MB (fp32) and little else. Prints do_bench medians (cold L2, us) of
cuDNN's 1x1 in NCHW and NHWC, cuBLAS's addmm (pixels x C) @ W^T and mm W @ (C x pixels) under the mode's flags, and a
copy of the weight, beside the floor (the bytes over 3.6 TB/s).

    python tools/probe/batch1_pointwise.py

Found (H200, 2026-11-28 12:10 UTC, bench/RESULTS.md): every library call sits at 3-10x the floor; c768 7x7 -> 3072
TF32: cuDNN 20.2 us NCHW, 14.1 NHWC, cuBLAS addmm 10.6 (its own TF32 conversion, not cuDNN's rounding), floor 2.8.
Needs a GPU.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from tabulate import tabulate
from triton.testing import do_bench

LAYERS = [(768, 7, 3072), (384, 14, 1536), (960, 7, 160), (1152, 7, 192)]  # (C, H = W, C_out), batch 1
MODES = [(torch.float32, "tf32"), (torch.float32, "fp32"), (torch.bfloat16, "bf16")]
FLOOR_BYTES_PER_S = 3.6e12


def median_us(fn) -> float:
    return do_bench(fn, return_mode="median") * 1e3


def main():
    rows = []
    for c, hw, c_out in LAYERS:
        for dtype, mode in MODES:
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
            mid = torch.randn(1, c, hw, hw, device="cuda", dtype=dtype)
            w = torch.randn(c_out, c, 1, 1, device="cuda", dtype=dtype) / c**0.5
            b = torch.randn(c_out, device="cuda", dtype=dtype)
            mid_cl, w_cl = (t.contiguous(memory_format=torch.channels_last) for t in (mid, w))
            pixels_by_c, w2 = mid_cl.permute(0, 2, 3, 1).reshape(hw * hw, c), w.view(c_out, c)
            times = [median_us(lambda: F.conv2d(mid, w, b)), median_us(lambda: F.conv2d(mid_cl, w_cl, b)),
                     median_us(lambda: torch.addmm(b, pixels_by_c, w2.t())),
                     median_us(lambda: torch.mm(w2, mid.view(c, hw * hw))), median_us(lambda: w.clone())]
            floor = (w.nbytes + mid.nbytes + c_out * hw * hw * mid.element_size()) / FLOOR_BYTES_PER_S * 1e6
            rows.append([f"c{c} {hw}x{hw} -> {c_out}", mode, f"{floor:.2f}"] + [f"{t:.2f}" for t in times])
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = True, False
    print(tabulate(rows, headers=["layer", "mode", "floor", "cuDNN NCHW", "cuDNN NHWC", "addmm", "mm W @ X",
                                  "copy of W"]))


if __name__ == "__main__":
    main()
