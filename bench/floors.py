"""The physical floor of a case: max(fewest bytes / copy bandwidth, FLOPs / matrix rate of the precision), with
both ceilings measured on the card the bench runs on.

Fewest bytes: the input, every parameter and the output, each moved once (intermediates stay on chip: the
depthwise result of a separable conv, the conv output of the GroupNorm block). FLOPs: 2 per multiply-add of the
convolutions (GroupNorm, pooling and clamp are a few operations per element and are left out).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from convops.demo import ConvGroupNormScaleMaxPoolClamp, ConvTranspose, DepthwiseConv2d, DepthwiseSeparableConv2d


def _conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _conv_out_spatial(conv: nn.Conv2d, spatial) -> list[int]:
    return [_conv_out(n, k, s, p, d) for n, k, s, p, d in zip(spatial, conv.kernel_size, conv.stride, conv.padding,
                                                                conv.dilation)]


def flops(model: nn.Module, input_shape) -> int:
    n, c_in, *spatial = input_shape
    if isinstance(model, DepthwiseConv2d):
        conv = model.conv
        return 2 * n * conv.out_channels * math.prod(_conv_out_spatial(conv, spatial)) * math.prod(conv.kernel_size)
    if isinstance(model, DepthwiseSeparableConv2d):
        dw, pw = model.depthwise, model.pointwise
        pixels = n * math.prod(_conv_out_spatial(dw, spatial))
        return 2 * pixels * c_in * (math.prod(dw.kernel_size) + pw.out_channels)
    if isinstance(model, ConvTranspose):
        conv = model.conv
        # every input element meets (C_out / groups) * prod(kernel) weights
        return 2 * math.prod(input_shape) * (conv.out_channels // conv.groups) * math.prod(conv.kernel_size)
    if isinstance(model, ConvGroupNormScaleMaxPoolClamp):
        conv = model.conv
        pixels = n * math.prod(_conv_out_spatial(conv, spatial))
        return 2 * pixels * conv.out_channels * c_in * math.prod(conv.kernel_size)
    raise TypeError(f"no FLOP count for {type(model).__name__}")


def min_bytes(model: nn.Module, input_shape, output_shape, element_size: int) -> int:
    params = sum(p.numel() for p in model.parameters())
    return (math.prod(input_shape) + params + math.prod(output_shape)) * element_size


@dataclass(frozen=True)
class Ceilings:
    """Measured on the card: copy bandwidth (bytes read + written per second) and dense matrix rates (FLOP/s)."""
    copy_bytes_per_s: float
    matmul_flops_per_s: dict  # mode name -> rate: "fp32" (CUDA cores), "tf32", "bf16"

    def floor_ms(self, nbytes: int, nflops: int, rate_key: str) -> tuple[float, str]:
        memory = nbytes / self.copy_bytes_per_s * 1e3
        compute = nflops / self.matmul_flops_per_s[rate_key] * 1e3
        return (memory, "memory") if memory >= compute else (compute, "compute")


def measure_ceilings(bench_ms) -> Ceilings:
    """A 1 GiB device-to-device copy, and 8192^3 matrix products in strict fp32 (cuBLAS on CUDA cores: TF32 off),
    TF32 and bf16. bench_ms(fn) is the bench's timer."""
    rates = {"fp32": _matmul_rate(bench_ms, torch.float32, tf32=False),
             "tf32": _matmul_rate(bench_ms, torch.float32, tf32=True),
             "bf16": _matmul_rate(bench_ms, torch.bfloat16, tf32=False)}
    return Ceilings(_copy_rate(bench_ms), rates)


def _copy_rate(bench_ms) -> float:
    src = torch.rand(2**28, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * src.element_size() / (bench_ms(lambda: dst.copy_(src)) * 1e-3)


def _matmul_rate(bench_ms, dtype: torch.dtype, tf32: bool, n: int = 8192) -> float:
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        return 2 * n**3 / (bench_ms(lambda: torch.mm(a, b)) * 1e-3)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
