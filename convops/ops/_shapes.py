"""Shape arithmetic for the fake (meta) implementations. Works on ints and SymInts alike."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch._prims_common import suggest_memory_format


def conv_output_size(size, kernel, stride, padding, dilation):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def conv_transpose_output_size(size, kernel, stride, padding, output_padding, dilation):
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def conv_output_sizes(op: str, sizes: Sequence, kernel: Sequence, stride: Sequence, padding: Sequence,
                      dilation: Sequence) -> list:
    out = []
    for i, s in enumerate(sizes):
        span = dilation[i] * (kernel[i] - 1) + 1
        torch._check(s + 2 * padding[i] >= span,
                     lambda: f"{op}: the padded input is smaller than the dilated kernel")
        out.append(conv_output_size(s, kernel[i], stride[i], padding[i], dilation[i]))
    return out


def empty_output(input: torch.Tensor, sizes: Sequence, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The output the kernels return: dense, in the input's suggested memory format (see csrc/common/checks.h)."""
    return torch.empty(list(sizes), dtype=dtype or input.dtype, device=input.device,
                       memory_format=suggest_memory_format(input))


def check_param(op: str, name: str, values: Sequence, n: int, min_value: int) -> None:
    torch._check(len(values) == n, lambda: f"{op}: {name} must have {n} values, got {list(values)}")
    for v in values:
        torch._check(v >= min_value, lambda: f"{op}: {name} must be "
                     f"{'non-negative' if min_value == 0 else 'positive'}, got {list(values)}")
