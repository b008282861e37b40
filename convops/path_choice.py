"""Which implementation the ops run on CUDA: convops' own kernel or the ATen composition it replaces.

A convops kernel is specialised; on problems where it does not pay, the op runs ATen's path instead. Policies:

- ``"auto"`` (default): the first call of each problem (op, dtypes, sizes, strides, parameters, TF32 flag) times its
  paths on the GPU, five runs each (fifteen where all take under 50 us), each path's runs back to back, each run from
  a cold L2 cache (as ``triton.testing.do_bench`` measures) and queued whole behind a short GPU spin (so that the
  host's launches are not what is timed), and keeps the one with the lowest median, the convops kernel only where it
  is at least 3% faster than ATen (a near tie runs eager's own kernels); :func:`path_choices` lists every decision
  with its timings.
- ``"convops"``: always the convops path (the op's kernel; for conv_transpose with kernel == stride, a GEMM and a
  pixel shuffle).  ``"aten"``: always ATen.

The environment variable ``CONVOPS_PATH`` sets the initial policy (read at the first policy use or CUDA call). CPU
calls are unaffected.
"""
from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch

from ._extension import require_ops

POLICIES = ("auto", "convops", "aten")


def set_path_policy(policy: str) -> None:
    require_ops()
    torch.ops.convops._set_path_policy(policy)


def path_policy() -> str:
    require_ops()
    return torch.ops.convops._path_policy()


@contextlib.contextmanager
def forced_path(policy: str) -> Iterator[None]:
    """Runs the block under `policy`, then restores the previous one."""
    previous = path_policy()
    set_path_policy(policy)
    try:
        yield
    finally:
        set_path_policy(previous)


# Decisions that a path makes inside an op's own, each recorded as a problem of its own named "<op>.<stage>":
# - "convops::depthwise_separable_conv2d.pointwise": the mixed path's 1x1, "convops" a cuBLAS GEMM, "aten" cuDNN's 1x1
#   (csrc/cuda/depthwise_separable_conv2d_kernel.cu, kPointwiseOp);
# - "convops::depthwise_separable_conv2d.mixed_layout": for an NCHW input of small planes, the mixed path's layout,
#   "convops" the round trip through channels-last (the convops depthwise kernel from NCHW into NHWC, the 1x1 in NHWC,
#   the output transposed back with the bias), taken where it leads by 3%, "aten" the input's layout (the convops
#   NCHW depthwise kernels);
# - "convops::conv_transpose2d.aten_layout" / "convops::conv_transpose3d.aten_layout": for an NCHW / NCDHW input, the
#   ATen path's layout, "convops" its round trip through channels-last, "aten" the input's layout
#   (csrc/cuda/path_choice.cuh, layout_for);
# - "convops::conv2d_group_norm_scale_max_pool_clamp.mixed_layout": for an NCHW input, the layout of the mixed path's
#   convolution, "convops" a channels-last copy (cuDNN's NHWC kernels, the NHWC stats kernel on their output), "aten"
#   the input's layout; made whenever "auto" times the mixed path, also where the fused kernels then win.
SEPARABLE_POINTWISE = "convops::depthwise_separable_conv2d.pointwise"
SEPARABLE_MIXED_LAYOUT = "convops::depthwise_separable_conv2d.mixed_layout"


def stage_of(problem: str) -> str | None:
    """The stage a decision's problem is of ("pointwise", "mixed_layout", "aten_layout"), or None for an op's own."""
    op = problem.split(" ", 1)[0]
    return op.rpartition(".")[2] if "." in op else None


class PathChoice(NamedTuple):
    """One decision of "auto": the problem (op, device, TF32, tensors' dtype/sizes/strides, parameters), the path
    it took and the median time of each path. Paths: "convops" (the op's own kernel), "aten" (the ATen composition it
    replaces) and, for ops that offer one, "mixed" (convops' kernel for part of the work, ATen for the rest: the
    separable op's convops depthwise kernel followed by the 1x1; the GroupNorm block's ATen convolution followed by
    convops' pooling and statistics kernel); mixed_ms is None where there is none. Decisions
    made inside a path are problems of their own, "<op>.<stage>" (stage_of; the module's comment above lists
    them)."""
    problem: str
    path: str
    convops_ms: float
    aten_ms: float
    mixed_ms: float | None = None

    def __str__(self) -> str:
        mixed = "" if self.mixed_ms is None else f", mixed {self.mixed_ms:.4g} ms"
        return f"{self.problem} -> {self.path} (convops {self.convops_ms:.4g} ms, aten {self.aten_ms:.4g} ms{mixed})"


# The line convops::_path_choices writes per decision (csrc/path_choice.cpp, choices_op).
_LINE = re.compile(r"(?P<problem>.*) -> (?P<path>convops|aten|mixed) \(convops (?P<convops>\S+) ms, "
                   r"aten (?P<aten>\S+) ms(?:, mixed (?P<mixed>\S+) ms)?\)")


def path_choices() -> list[PathChoice]:
    """The decisions "auto" made so far."""
    require_ops()
    choices = []
    for line in torch.ops.convops._path_choices():
        m = _LINE.fullmatch(line)
        mixed = None if m["mixed"] is None else float(m["mixed"])
        choices.append(PathChoice(m["problem"], m["path"], float(m["convops"]), float(m["aten"]), mixed))
    return choices


def clear_path_choices() -> None:
    """Forgets the decisions, so that the next call of each problem times its paths again."""
    require_ops()
    torch.ops.convops._clear_path_choices()


def auto_path(op: Callable[..., Any], *args: Any) -> str | None:
    """The path the "auto" policy runs for this call of a convops op on CUDA: "convops", "aten" or "mixed", as its
    first call of the problem decides it (timing the paths; the decision is kept, so that call does not time them
    again) or as it was decided before. None where no decision is involved: under another policy, or a call with one
    path only. Runs the op once (without autograd)."""
    require_ops()
    if path_policy() != "auto":
        return None
    torch.ops.convops._take_auto_path()  # forget an earlier call's
    with torch.no_grad():
        op(*args)
    return torch.ops.convops._take_auto_path() or None
