"""Guarded registration of Python-side op pieces.

register_fake on an op the compiled library did not define raises at import time (the torchvision nms pitfall);
this helper skips the registration instead, and the op call itself reports why. (Autograd is registered in C++,
csrc/autograd/, so that a call pays no Python kernel on the Autograd key.)"""
from __future__ import annotations

import torch

from .._extension import has_ops


def op_exists(qualname: str) -> bool:
    if not has_ops():
        return False
    namespace, name = qualname.split("::")
    return hasattr(getattr(torch.ops, namespace), name)


def register_fake(qualname: str):
    def decorator(fn):
        if op_exists(qualname):
            torch.library.register_fake(qualname, fn)
        return fn
    return decorator
