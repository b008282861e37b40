"""Shared machinery of the tests/test_backend_*.py files (this module holds no tests).

Most backend tests compile with options={"compiler": "eager"}: the passes run on the Dynamo graph before any compiler,
so what they substitute does not depend on what compiles the rest, and the eager runner keeps CPU CI fast. The
tests that need Inductor (training, dynamic shapes, the FX graph cache, CUDA graphs) live in test_backend_compile.py.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest
import torch

import convops
from convops.backend import convops_backend
from convops.fx_passes import GraphReport
from convops.fx_passes.report import collect


def has_op(name: str) -> bool:
    return convops.has_ops() and hasattr(torch.ops.convops, name)


def requires_ops(*names: str):
    missing = [n for n in names if not has_op(n)]
    return pytest.mark.skipif(bool(missing), reason=f"this build of convops lacks {missing}")


class FrameCounter:
    """Counts the graphs Dynamo compiles (a graph break or a recompile adds one) by their compile ids. Unlike
    torch._dynamo.testing.CompileCounterWithBackend it does not count a compile twice when Dynamo restarts it (as it
    does under dynamic=True to specialise a float hyper-parameter the convops op takes as a constant)."""

    def __init__(self, backend):
        self.backend = backend
        self.compile_ids: set[str] = set()

    def __call__(self, gm, example_inputs):
        self.compile_ids.add(str(torch._guards.CompileContext.current_compile_id()))
        return self.backend(gm, example_inputs)

    @property
    def frame_count(self) -> int:
        return len(self.compile_ids)


@dataclass
class Compiled:
    outputs: object
    reports: list[GraphReport]
    fn: object  # the compiled model, to call again
    counter: FrameCounter

    @property
    def frames(self) -> int:
        """Frames Dynamo compiled so far (a graph break or a recompile adds one)."""
        return self.counter.frame_count

    @property
    def report(self) -> GraphReport:
        assert len(self.reports) == 1, [r.summary() for r in self.reports]
        return self.reports[0]

    @property
    def replaced(self) -> dict[str, int]:
        return {k: v for k, v in self.report.replaced.items() if v}

    def declines(self) -> str:
        """One line per declined candidate: "pattern node: reason"."""
        return "\n".join(f"{d.pattern} {d.node}: {d.reason}" for r in self.reports for d in r.declined)


def compile_and_run(model, *inputs, options=None, dynamic=None, compiler="eager") -> Compiled:
    """model compiled with the convops backend and called once; the passes' reports and Dynamo's frame count."""
    torch._dynamo.reset()
    counter = FrameCounter(functools.partial(convops_backend, options={"compiler": compiler, **(options or {})}))
    fn = torch.compile(model, backend=counter, dynamic=dynamic)
    with collect() as reports:
        outputs = fn(*inputs)
    return Compiled(outputs, list(reports), fn, counter)


def assert_close_to_eager(model, inputs, outputs, **tolerance) -> None:
    with torch.no_grad():
        expected = model(*inputs)
    torch.testing.assert_close(outputs, expected, **tolerance)


def grads_after_step(model, inputs, run) -> dict[str, torch.Tensor]:
    """The parameter gradients of one backward step of run(model, inputs) summed to a scalar."""
    model.zero_grad(set_to_none=True)
    outputs = run(*inputs)
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    sum((o.float() * torch.linspace(0.5, 1.5, o.numel(), device=o.device).view_as(o)).sum() for o in outputs).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def ops_that_ran(fn, *inputs) -> set[str]:
    """The convops ops the profiler saw while fn ran (not the private ones, convops::_*, which read or set the path
    policy: a first call compiles, and the passes ask the policy)."""
    with torch.profiler.profile() as prof:
        fn(*inputs)
    return {e.key for e in prof.key_averages() if e.key.startswith("convops::") and not e.key.startswith("convops::_")}



_UNLOADED_LIBRARY_CALLS = """
import torch, convops
assert not convops.has_ops()
x2, w2 = torch.randn(1, 2, 5, 5), torch.randn(2, 1, 3, 3)
x3, w3 = torch.randn(1, 2, 3, 3, 3), torch.randn(2, 2, 1, 1, 1)
for call in (lambda: convops.depthwise_conv2d(x2, w2), lambda: convops.conv_transpose3d(x3, w3)):
    try:
        call()
    except RuntimeError as exc:
        assert "could not be loaded" in str(exc) and "no-such-library" in str(exc), exc
    else:
        raise AssertionError("no error")
"""


def test_op_calls_say_why_when_the_library_did_not_load(tmp_path):
    """With the compiled library unloadable, import convops still works, and an op call raises require_ops()'
    error (what failed and how to rebuild) rather than torch.ops' AttributeError."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "CONVOPS_LIBRARY": str(tmp_path / "no-such-library.so")}
    result = subprocess.run([sys.executable, "-c", _UNLOADED_LIBRARY_CALLS], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
