"""Guarded registration of Python-side op pieces.

register_fake on an op the compiled library did not define raises at import time (the torchvision nms pitfall);
this helper skips the registration instead, and the op call itself reports why (needs_ops). (Autograd is registered
in C++, csrc/autograd/, so that a call pays no Python kernel on the Autograd key.)"""
from __future__ import annotations

import functools

import torch

from .._extension import has_ops, require_ops


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


def needs_ops(wrapper):
    """An op's Python wrapper as it is where the compiled library loaded (decided once, at import: no cost a call);
    where it did not, a stand-in that raises require_ops()' error (why, and how to rebuild) instead of torch.ops'
    AttributeError."""
    if has_ops():
        return wrapper

    @functools.wraps(wrapper)
    def unavailable(*args, **kwargs):
        require_ops()
    return unavailable
