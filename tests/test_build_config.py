"""setup.py's build configuration: compute capability 9.0 is built as sm_90a (wgmma), other targets as asked."""
from __future__ import annotations

import ast
import os

import pytest
import torch

SETUP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")


def hopper_as_sm90a():
    """setup.py's _hopper_as_sm90a, compiled on its own (running setup.py would build)."""
    with open(SETUP) as f:
        tree = ast.parse(f.read())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_hopper_as_sm90a")
    namespace = {"os": os, "torch": torch}
    exec(compile(ast.Module(body=[node], type_ignores=[]), SETUP, "exec"), namespace)
    return namespace["_hopper_as_sm90a"]


@pytest.mark.parametrize("requested,arches,flags", [
    ("9.0", "9.0a", []),
    ("9.0+PTX", "9.0a", ["-gencode=arch=compute_90,code=compute_90"]),
    ("Hopper", "9.0a", ["-gencode=arch=compute_90,code=compute_90"]),
    ("8.0;9.0", "8.0;9.0a", []),
    ("8.6 9.0+PTX", "8.6;9.0a", ["-gencode=arch=compute_90,code=compute_90"]),
    ("9.0a", "9.0a", []),
    ("8.0;10.0+PTX", "8.0;10.0+PTX", []),
])
def test_arch_list_builds_hopper_as_sm90a(monkeypatch, requested, arches, flags):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", requested)
    assert hopper_as_sm90a()() == flags
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == arches
