"""Loading of the compiled library, convops._C.

Importing convops must not fail just because the extension could not load (a torch/convops ABI mismatch, a
missing build): the package records why, and every op call or backend use then says so clearly.
"""
from __future__ import annotations

import os

import torch

# CONVOPS_LIBRARY=/path/to/_C.so loads a library built elsewhere (python setup.py build_ext --build-lib DIR), so that
# several development builds can live side by side; normally the in-package convops._C is imported.
_LIBRARY_OVERRIDE = os.environ.get("CONVOPS_LIBRARY")

_LOAD_ERROR: Exception | None = None
try:
    if _LIBRARY_OVERRIDE:
        torch.ops.load_library(_LIBRARY_OVERRIDE)
    else:
        from . import _C  # noqa: F401  (importing runs the TORCH_LIBRARY registrations)
except (ImportError, OSError) as exc:  # pragma: no cover - exercised only on broken installs
    _LOAD_ERROR = exc


def has_ops() -> bool:
    """True when the compiled library loaded and torch.ops.convops.* exist."""
    return _LOAD_ERROR is None


def require_ops() -> None:
    if _LOAD_ERROR is not None:
        raise RuntimeError(
            "convops: the compiled library convops._C could not be loaded "
            f"({type(_LOAD_ERROR).__name__}: {_LOAD_ERROR}). Build it against the installed torch "
            f"({torch.__version__}) with `pip install --no-build-isolation -e .` from the repository root."
        )


def has_cuda_kernels(op: str = "depthwise_conv2d") -> bool:
    """True when the library was built with its CUDA kernels (setup.py builds them where CUDA is usable)."""
    return (has_ops() and hasattr(torch.ops.convops, op)
            and torch._C._dispatch_has_kernel_for_dispatch_key(f"convops::{op}", "CUDA"))
