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
    """An op's Python wrapper, which raises require_ops()' error (why the compiled library did not load) instead of
    torch.ops' AttributeError when the op is missing."""
    @functools.wraps(wrapper)
    def checked(*args, **kwargs):
        if not has_ops():
            require_ops()
        return wrapper(*args, **kwargs)
    return checked
