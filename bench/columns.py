"""The five columns: how each runs a case's model."""
from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn as nn

import convops
from convops.demo import op_unavailable

# convops_op runs the op as users get it (the "auto" path policy: its own kernel or ATen, whichever it timed
# faster); convops_kernel forces the convops kernel, which is what the kernel issues' floor fractions measure.
COLUMNS = ("eager", "inductor", "max_autotune", "convops_kernel", "convops_op", "convops_backend")
BASELINES = ("eager", "inductor", "max_autotune")
# The columns that compile: their first call leaves background work running (see bench/quiet.py), so a case times
# the others first.
COMPILED = ("inductor", "max_autotune", "convops_backend")
TITLES = {"eager": "eager", "inductor": "compile", "max_autotune": "max-autotune", "convops_kernel": "kernel",
          "convops_op": "convops op", "convops_backend": "convops backend"}


def convops_backend() -> tuple[object | None, str]:
    """The backend to pass to torch.compile, or None and why not. Importing convops.backend registers "convops";
    the callable is used directly because the entry point exists only in pip-installed trees."""
    try:
        import convops.backend as backend
    except ModuleNotFoundError:
        return None, "n/a (no convops.backend)"
    except Exception as exc:  # a half-written backend must not take the bench down
        return None, f"n/a (import failed: {type(exc).__name__})"
    return getattr(backend, "convops_backend", "convops"), ""


class Unavailable(Exception):
    """The column cannot run this case; its message is what the table shows ("missing", "n/a ...")."""


def make_runner(column: str, model: nn.Module, backend: object | None = None,
                backend_note: str = "") -> Callable[[torch.Tensor], torch.Tensor]:
    """A callable x -> model output for the column. Compiled columns start from a clean dynamo state so that
    nothing of an earlier case or precision mode is reused."""
    if column == "eager":
        return model
    if column in ("convops_op", "convops_kernel"):
        device = next(model.parameters()).device
        why = op_unavailable(model.op, device)
        if why:
            raise Unavailable(f"missing ({why})")
        return model.convops_forward  # convops_kernel: under column_policy's forced path
    torch._dynamo.reset()
    if column == "inductor":
        return torch.compile(model)
    if column == "max_autotune":
        return torch.compile(model, mode="max-autotune-no-cudagraphs")
    if column == "convops_backend":
        if backend is None:
            raise Unavailable(backend_note or "n/a")
        return torch.compile(model, backend=backend)
    raise ValueError(f"unknown column {column!r}")


def column_policy(column: str) -> contextlib.AbstractContextManager:
    """The path policy a column's calls run under, set once around its whole measurement: the kernel column forces
    the convops kernel. (Switching it around every call would add three op calls of host time to each call, which
    no user pays and which launch-bound batch-1 layers show.)"""
    return convops.forced_path("convops") if column == "convops_kernel" else contextlib.nullcontext()
