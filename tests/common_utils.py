"""Shared test machinery: device/dtype/layout parameters, inputs, references in float64, poisoning, tolerances."""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence

import pytest
import torch

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
LAYOUTS = ["contiguous", "channels_last", "strided"]

# Tolerances of a kernel against the float64 reference of the same inputs (and the same TF32 operand rounding,
# where the kernel applies it). fp32 accumulates in fp32; fp16/bf16 outputs are rounded once to their dtype.
TOLERANCES = {
    torch.float64: dict(atol=1e-9, rtol=1e-9),
    torch.float32: dict(atol=5e-5, rtol=5e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
}


def tolerance(dtype: torch.dtype) -> dict:
    return TOLERANCES[dtype]


def make_tensor(shape: Sequence[int], dtype: torch.dtype, device, layout: str = "contiguous",
                low: float = -1.0, high: float = 1.0, requires_grad: bool = False) -> torch.Tensor:
    """Fresh uniform random values (never zeros) in the requested memory layout.

    layout: "contiguous"; "channels_last" (4-D and 5-D); "strided": a non-dense view whose innermost stride is 2
    and whose channel dimension is a slice of a larger tensor, so kernels that assume density read wrong values.
    """
    shape = tuple(shape)
    if layout == "strided" and len(shape) >= 2:
        big = list(shape)
        big[1] += 1
        big[-1] *= 2
        base = torch.empty(big, dtype=torch.float64).uniform_(low, high).to(device=device, dtype=dtype)
        t = base[:, 1:][..., ::2]
    else:
        t = torch.empty(shape, dtype=torch.float64).uniform_(low, high).to(device=device, dtype=dtype)
        if layout == "channels_last" and t.dim() in (4, 5):
            fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
            t = t.contiguous(memory_format=fmt)
    assert t.shape == shape
    return t.requires_grad_(requires_grad)


def round_tf32(t: torch.Tensor) -> torch.Tensor:
    """fp32 -> TF32 rounding to nearest, ties to even (cvt.rn.tf32.f32), as cuBLAS and cuDNN's Hopper kernels round
    TF32 operands (tools/probe/tf32_ties.py) and convops' kernels do."""
    assert t.dtype == torch.float32
    bits = t.contiguous().view(torch.int32)
    half = torch.bitwise_and(torch.bitwise_right_shift(bits, 13), 1) + 0xFFF
    rounded = torch.bitwise_and(bits + half, ~0x1FFF)
    finite = torch.isfinite(t)
    return torch.where(finite, rounded.view(torch.float32), t).view_as(t)


def tf32_active(t: torch.Tensor) -> bool:
    """Whether a convops kernel may use TF32 for this input under the current flags."""
    return t.is_cuda and t.dtype == torch.float32 and torch.backends.cudnn.allow_tf32


def reference(fn: Callable, *tensors, tf32_inputs: bool = False, **kwargs):
    """fn evaluated in float64 on the CPU on copies of the tensors (None passes through).

    tf32_inputs rounds fp32 operands to TF32 first, which reproduces what a TF32 tensor-core kernel computes up to
    fp32 accumulation order.
    """
    def lift(t):
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach()
        if tf32_inputs and t.dtype == torch.float32:
            t = round_tf32(t)
        return t.cpu().double()
    return fn(*[lift(t) for t in tensors], **kwargs)


@contextlib.contextmanager
def allow_tf32(flag: bool):
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = flag
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = old


def poison_allocator(device, *nbytes: int) -> None:
    """Fill the memory the next allocations of these sizes will most likely receive with NaN.

    On CUDA the caching allocator hands a freed block of the same size class to the next request, so an op's output
    starts as NaN and any element the kernel fails to write shows up as a mismatch. Where the op allocates
    intermediates before its output, pass their sizes too, in any order: the blocks are all held, then freed, so that
    each allocation finds one of its size. (On the CPU, large blocks come from fresh mmap pages; the CPU kernels are
    checked by the same comparisons.)
    """
    if torch.device(device).type != "cuda":
        return
    fillers = [torch.full((math.ceil(n / 4),), float("nan"), dtype=torch.float32, device=device) for n in nbytes if n]
    del fillers


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None, **overrides):
    """Compare values (layout-agnostic) against a float64 reference at the tolerance of `dtype`."""
    tol = dict(tolerance(dtype or actual.dtype))
    tol.update(overrides)
    assert not actual.isnan().any() or expected.isnan().any(), "output has NaN (unwritten or poisoned elements?)"
    torch.testing.assert_close(actual.detach().cpu().double(), expected.detach().cpu().double(), equal_nan=True,
                               **tol)


def assert_output_layout(output: torch.Tensor, input: torch.Tensor) -> None:
    """The documented output memory format: dense, in the input's suggested memory format."""
    fmt = torch._prims_common.suggest_memory_format(input)
    assert output.is_contiguous(memory_format=fmt), (output.shape, output.stride(), fmt)


OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def cuda_kernels_run(fn) -> set[str]:
    """Names of the CUDA kernels that fn() launched (from the profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.key for e in prof.key_averages()}


def opcheck(op, args, kwargs=None) -> None:
    result = torch.library.opcheck(op, args, kwargs or {}, test_utils=OPCHECK_UTILS)
    assert all(v == "SUCCESS" for v in result.values()), result
