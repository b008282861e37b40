"""Which implementation the ops run on CUDA: convops' own kernel or the ATen composition it replaces.

A convops kernel is specialised; on problems where it does not pay, the op runs ATen's path instead. Policies:

- ``"auto"`` (default): the first call of each problem (op, dtypes, sizes, strides, parameters, TF32 flag) times
  both paths and keeps the faster; :func:`path_choices` lists every decision with its timings.
- ``"convops"``: always the convops kernel.  ``"aten"``: always ATen.

The environment variable ``CONVOPS_PATH`` sets the policy at load time. CPU calls are unaffected.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

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


def path_choices() -> list[str]:
    """The decisions "auto" made so far, one line each: problem -> path (convops ms, aten ms)."""
    require_ops()
    return list(torch.ops.convops._path_choices())


def clear_path_choices() -> None:
    """Forgets the decisions, so that the next call of each problem times both paths again."""
    require_ops()
    torch.ops.convops._clear_path_choices()
