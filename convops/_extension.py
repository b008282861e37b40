"""Loading of the compiled library, convops._C.

Importing convops must not fail just because the extension could not load (a torch/convops ABI mismatch, a
missing build): the package records why, and every convops.<op> call or backend use then says so clearly.
"""
from __future__ import annotations

import os

import torch

# CONVOPS_LIBRARY=/path/to/_C.so loads a library built elsewhere (python setup.py build_ext --build-lib DIR), so that
# several development builds can live side by side; normally the in-package convops._C is imported.
_LIBRARY_OVERRIDE = os.environ.get("CONVOPS_LIBRARY")

# The ops the compiled library defines (convops/csrc/<op>.cpp).
OP_NAMES = ("depthwise_conv2d", "depthwise_separable_conv2d", "conv_transpose2d", "conv_transpose3d",
            "conv2d_group_norm_scale_max_pool_clamp")

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


def has_cuda_kernels(op: str | None = None) -> bool:
    """True when the loaded library has CUDA kernels: for `op` ("depthwise_conv2d", ...), or for any op if None.
    setup.py builds them where CUDA is usable; CONVOPS_OPS development builds may carry only some."""
    if not has_ops():
        return False
    names = [op] if op else OP_NAMES
    return any(hasattr(torch.ops.convops, n)
               and torch._C._dispatch_has_kernel_for_dispatch_key(f"convops::{n}", "CUDA") for n in names)
