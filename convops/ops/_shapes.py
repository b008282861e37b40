"""Shape arithmetic for the fake (meta) implementations. Works on ints and SymInts alike."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch._prims_common import suggest_memory_format

_INT64_MAX = 2**63 - 1


def conv_output_size(size, kernel, stride, padding, dilation):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def conv_transpose_output_size(size, kernel, stride, padding, output_padding, dilation):
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def conv_output_sizes(op: str, sizes: Sequence, kernel: Sequence, stride: Sequence, padding: Sequence,
                      dilation: Sequence) -> list:
    out = []
    for i, s in enumerate(sizes):
        span = dilation[i] * (kernel[i] - 1) + 1
        torch._check(s + 2 * padding[i] <= _INT64_MAX and span <= _INT64_MAX,
                     lambda: f"{op}: the padding {list(padding)} and dilation {list(dilation)} with kernel "
                             f"{list(kernel)} take the convolution's extents past 64 bits")
        torch._check(s + 2 * padding[i] >= span,
                     lambda: f"{op}: the padded input ({list(sizes)} + 2 * {list(padding)}) is smaller than the "
                             f"dilated kernel ({list(kernel)}, dilation {list(dilation)})")
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


# ---- the fake-path twins of csrc/common/checks.h, with the same messages, so a bad call fails alike on meta ----

FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def check_float_tensor(op: str, name: str, t: torch.Tensor | None) -> None:
    torch._check(t is not None, lambda: f"{op}: {name} is undefined")  # None passed for a required Tensor
    torch._check(t.layout == torch.strided,
                 lambda: f"{op}: {name} must be a dense (strided) tensor, got layout {t.layout}")
    torch._check(t.dtype in FLOAT_DTYPES,
                 lambda: f"{op}: {name} must be float64, float32, float16 or bfloat16, got {t.dtype}")


def check_rank(op: str, name: str, t: torch.Tensor, rank: int, layout: str) -> None:
    torch._check(t.dim() == rank, lambda: f"{op}: expected {name} to be {rank}-D {layout}, got a {t.dim()}-D "
                                          f"tensor of shape {tuple(t.shape)}")


def check_like_input(op: str, name: str, t: torch.Tensor, input: torch.Tensor) -> None:
    check_float_tensor(op, name, t)
    torch._check(t.device == input.device, lambda: f"{op}: {name} is on {t.device} but input is on {input.device}")
    torch._check(t.dtype == input.dtype,
                 lambda: f"{op}: {name} has dtype {t.dtype} but input has dtype {input.dtype}")


def check_optional_like_input(op: str, name: str, t: torch.Tensor | None, input: torch.Tensor, numel) -> None:
    if t is None:
        return
    check_like_input(op, name, t, input)
    torch._check(t.dim() == 1 and t.shape[0] == numel,
                 lambda: f"{op}: expected {name} of shape ({numel}), got {tuple(t.shape)}")
