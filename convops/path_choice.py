"""Which implementation the ops run on CUDA: convops' own kernel or the ATen composition it replaces.

A convops kernel is specialised; on problems where it does not pay, the op runs ATen's path instead. Policies:

- ``"auto"`` (default): the first call of each problem (op, dtypes, sizes, strides, parameters, TF32 flag) times
  both paths and keeps the faster; :func:`path_choices` lists every decision with its timings.
- ``"convops"``: always the convops kernel.  ``"aten"``: always ATen.

The environment variable ``CONVOPS_PATH`` sets the policy at load time. CPU calls are unaffected.
"""
from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import NamedTuple

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


class PathChoice(NamedTuple):
    """One decision of "auto": the problem (op, device, TF32, tensors' dtype/sizes/strides, parameters), the path
    it took ("convops" or "aten") and the mean time of each path."""
    problem: str
    path: str
    convops_ms: float
    aten_ms: float

    def __str__(self) -> str:
        return f"{self.problem} -> {self.path} (convops {self.convops_ms:.4g} ms, aten {self.aten_ms:.4g} ms)"


# The line convops::_path_choices writes per decision (csrc/path_choice.cpp, choices_op).
_LINE = re.compile(r"(?P<problem>.*) -> (?P<path>convops|aten) \(convops (?P<convops>\S+) ms, aten (?P<aten>\S+) ms\)")


def path_choices() -> list[PathChoice]:
    """The decisions "auto" made so far."""
    require_ops()
    choices = []
    for line in torch.ops.convops._path_choices():
        m = _LINE.fullmatch(line)
        choices.append(PathChoice(m["problem"], m["path"], float(m["convops"]), float(m["aten"])))
    return choices


def clear_path_choices() -> None:
    """Forgets the decisions, so that the next call of each problem times both paths again."""
    require_ops()
    torch.ops.convops._clear_path_choices()
