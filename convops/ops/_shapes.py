"""Shape arithmetic and argument checks for the fake (meta) implementations, whose messages are the C++ checks'
word for word. Works on ints and SymInts alike."""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch._prims_common import suggest_memory_format

_INT64_MAX = 2**63 - 1


def conv_output_size(size, kernel, stride, padding, dilation):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def conv_transpose_output_size(size, kernel, stride, padding, output_padding, dilation):
    """csrc/common/checks.h's twin: the output extent, and whether its products and sums stay within int64 as C++
    computes them (validated arguments: sizes, kernel, stride and dilation >= 1, paddings >= 0, so after the padding's
    subtraction, which cannot overflow, each step only grows)."""
    strided, padded, span = (size - 1) * stride, 2 * padding, dilation * (kernel - 1)
    out = strided - padded + span + output_padding + 1
    return out, strided <= _INT64_MAX and padded <= _INT64_MAX and span <= _INT64_MAX and out <= _INT64_MAX


def check_images_nonempty(op: str, shape) -> None:
    """check_images_nonempty of csrc/common/checks.h: a non-empty batch has non-empty images. Each image size is
    tested before the batch: under dynamic shapes it is known positive, so no guard on the batch is added."""
    for size in shape[2:]:
        check(op, size > 0 or shape[0] == 0, "only an empty batch may be empty, got input of shape ", shape)


def conv_output_sizes(op: str, sizes: Sequence, kernel: Sequence, stride: Sequence, padding: Sequence,
                      dilation: Sequence) -> list:
    out = []
    for i, s in enumerate(sizes):
        span = dilation[i] * (kernel[i] - 1) + 1
        check(op, s + 2 * padding[i] <= _INT64_MAX and span <= _INT64_MAX, "the padding ", padding, " and dilation ",
              dilation, " with kernel ", kernel, " take the convolution's extents past 64 bits")
        check(op, s + 2 * padding[i] >= span, "the padded input (", sizes, " + 2 * ", padding,
              ") is smaller than the dilated kernel (", kernel, ", dilation ", dilation, ")")
        out.append(conv_output_size(s, kernel[i], stride[i], padding[i], dilation[i]))
    return out


def empty_output(input: torch.Tensor, sizes: Sequence, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The output the kernels return: dense, in the input's suggested memory format (see csrc/common/checks.h)."""
    return torch.empty(list(sizes), dtype=dtype or input.dtype, device=input.device,
                       memory_format=suggest_memory_format(input))


def check_param(op: str, name: str, values: Sequence, n: int, min_value: int) -> None:
    check(op, len(values) == n, name, " must have ", n, " values, got ", values)
    for v in values:
        check(op, v >= min_value, name, " must be ", "non-negative" if min_value == 0 else "positive", ", got ", values)


# ---- the fake-path twins of csrc/common/checks.h, with the same messages, so a bad call fails alike on meta ----

FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)

# c10's names of the layouts (operator<<(ostream&, Layout) in c10/core/Layout.h).
_LAYOUT_NAMES = {torch.strided: "Strided", torch.sparse_coo: "Sparse", torch.sparse_csr: "SparseCsr",
                 torch.sparse_csc: "SparseCsc", torch.sparse_bsr: "SparseBsr", torch.sparse_bsc: "SparseBsc",
                 torch._mkldnn: "Mkldnn", torch.jagged: "Jagged"}


def dtype_name(dtype: torch.dtype) -> str:
    """c10's name of a dtype (Float, Double, Half, BFloat16, Int, ComplexFloat...), as C++ messages print a
    ScalarType. TorchScript's TensorType takes it from c10::toString itself, so no table here can go stale."""
    return torch._C.TensorType.get().with_dtype(dtype).scalarType()


def c10_str(value) -> str:
    """One part of a message as the C++ checks print it (c10's operator<<), so that a bad call reads the same in
    eager mode and under torch.compile: sizes as an IntArrayRef ([3, 5], not (3, 5) or torch.Size([3, 5])), dtypes
    and layouts by their c10 names, doubles as an ostream does (6 significant digits: -1, not -1.0; -nan keeps its
    sign), and a symbolic size (torch.compile(dynamic=True)) by its hint, the size the eager call sees, not as s0."""
    if isinstance(value, (list, tuple)):  # torch.Size is a tuple
        return "[" + ", ".join(c10_str(v) for v in value) + "]"
    if isinstance(value, torch.SymInt) and value.node.hint is not None:
        return str(int(value.node.hint))
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, torch.layout):
        return _LAYOUT_NAMES.get(value, str(value))
    if isinstance(value, float):
        return "-nan" if math.isnan(value) and math.copysign(1.0, value) < 0 else f"{value:g}"
    return str(value)


def check(op: str, cond, *message) -> None:
    """CONVOPS_CHECK(op, cond, message...) of csrc/common/checks.h: torch._check with the op's name, then the
    message's parts in c10's spelling (c10_str), formatted only when the check fails."""
    torch._check(cond, lambda: f"{op}: " + "".join(c10_str(part) for part in message))


def check_float_tensor(op: str, name: str, t: torch.Tensor | None) -> None:
    check(op, t is not None, name, " is undefined")  # None passed for a required Tensor
    check(op, t.layout == torch.strided, name, " must be a dense (strided) tensor, got layout ", t.layout)
    check(op, t.dtype in FLOAT_DTYPES, name, " must be float64, float32, float16 or bfloat16, got ", t.dtype)


def check_rank(op: str, name: str, t: torch.Tensor, rank: int, layout: str) -> None:
    check(op, t.dim() == rank, "expected ", name, " to be ", rank, "-D ", layout, ", got a ", t.dim(),
          "-D tensor of shape ", t.shape)


def check_like_input(op: str, name: str, t: torch.Tensor, input: torch.Tensor) -> None:
    check_float_tensor(op, name, t)
    check(op, t.device == input.device, name, " is on ", t.device, " but input is on ", input.device)
    check(op, t.dtype == input.dtype, name, " has dtype ", t.dtype, " but input has dtype ", input.dtype)


def check_optional_like_input(op: str, name: str, t: torch.Tensor | None, input: torch.Tensor, numel) -> None:
    if t is None:
        return
    check_like_input(op, name, t, input)
    check(op, t.dim() == 1 and t.shape[0] == numel, "expected ", name, " of shape (", numel, "), got ", t.shape)
