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


SM80 = "-gencode=arch=compute_80,code=sm_80"
SM86 = "-gencode=arch=compute_86,code=sm_86"
SM90A = "-gencode=arch=compute_90a,code=sm_90a"
PTX90 = "-gencode=arch=compute_90,code=compute_90"


@pytest.mark.parametrize("requested,arches,flags", [
    ("9.0", "9.0a", [SM90A]),
    ("9.0+PTX", "9.0a", [SM90A, PTX90]),
    ("Hopper", "9.0a", [SM90A, PTX90]),
    ("8.0;9.0", "8.0;9.0a", [SM80, SM90A]),
    ("8.6 9.0+PTX", "8.6;9.0a", [SM86, SM90A, PTX90]),
    ("9.0a", "9.0a", [SM90A]),
    ("8.0;10.0+PTX", "8.0;10.0+PTX", ["-gencode=arch=compute_100,code=compute_100",
                                       "-gencode=arch=compute_100,code=sm_100", SM80]),
])
def test_arch_list_builds_hopper_as_sm90a(monkeypatch, requested, arches, flags):
    """The flags are the whole target list (torch adds none once one names an arch): every requested target is in
    it, 9.0 as sm_90a, and the compute_90 PTX where asked for; the host code is told where sm_90a is built."""
    from torch.utils.cpp_extension import _get_cuda_arch_flags
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", requested)
    got = hopper_as_sm90a()()
    told = ["-DCONVOPS_SM90A_CODE"] if "9.0a" in arches.split(";") else []
    assert got == flags + told
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == arches
    assert _get_cuda_arch_flags(got) == []  # torch then keeps exactly these


def test_every_switch_the_kernels_read_is_in_the_readme():
    """Each CONVOPS_* environment variable that the C++/CUDA sources read (getenv or tuning_value) is named in the
    README, so that no behaviour hides behind an undocumented switch."""
    import glob
    import re

    root = os.path.dirname(SETUP)
    sources = glob.glob(os.path.join(root, "convops", "csrc", "**", "*.*"), recursive=True)
    read = set()
    for path in sources:
        with open(path) as f:
            read |= set(re.findall(r"(?:getenv|tuning_value)\(\s*\"(CONVOPS_[A-Z0-9_]+)\"", f.read()))
    with open(os.path.join(root, "README.md")) as f:
        readme = f.read()
    assert len(read) >= 10, read  # the pattern still finds them
    assert sorted(v for v in read if v not in readme) == []
