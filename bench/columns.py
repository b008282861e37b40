"""The five columns: how each runs a case's model."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from convops.demo import op_unavailable

COLUMNS = ("eager", "inductor", "max_autotune", "convops_op", "convops_backend")
BASELINES = ("eager", "inductor", "max_autotune")
TITLES = {"eager": "eager", "inductor": "compile", "max_autotune": "max-autotune", "convops_op": "convops op",
          "convops_backend": "convops backend"}


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
    if column == "convops_op":
        device = next(model.parameters()).device
        why = op_unavailable(model.op, device)
        if why:
            raise Unavailable(f"missing ({why})")
        return model.convops_forward
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
