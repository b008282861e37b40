"""The backend as users drive it: Inductor end to end (dynamic shapes, training, the FX graph cache, CUDA graphs),
options, explain(), logging, failure isolation, pass uuids, and lookup through the entry point."""
from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import subprocess
import sys
import textwrap

import expecttest
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.utils import counters

import convops
from convops.backend import BackendOptions
from convops.fx_passes import PASS_NAMES, PassManager
from convops.fx_passes.depthwise_conv import DepthwiseConvPass
from convops.fx_passes.report import collect
from test_backend_helpers import (assert_close_to_eager, compile_and_run, grads_after_step, ops_that_ran,
                                  requires_ops)

ALL_OPS = ("conv2d_group_norm_scale_max_pool_clamp", "depthwise_separable_conv2d", "depthwise_conv2d",
           "conv_transpose2d")
needs_ops = requires_ops(*ALL_OPS)


class AllPatterns(nn.Module):
    """One of each pattern, chained: conv/group_norm/scale/pool/clamp, depthwise-separable, depthwise, transposed."""

    def __init__(self):
        super().__init__()
        self.conv, self.gn = nn.Conv2d(3, 8, 3), nn.GroupNorm(4, 8)
        self.scale = nn.Parameter(torch.rand(8, 1, 1) + 0.5)
        self.dw, self.pw = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Conv2d(8, 4, 1)
        self.dw2 = nn.Conv2d(4, 8, 3, groups=4)
        self.up = nn.ConvTranspose2d(8, 2, 3, stride=2)

    def forward(self, x):
        y = torch.clamp(F.max_pool2d(self.gn(self.conv(x)) * self.scale, 2), 0, 1)
        return self.up(self.dw2(self.pw(self.dw(y))))


EVERY_OP_RAN = {f"convops::{op}" for op in ALL_OPS}


def _input(batch, device="cpu"):
    return torch.randn(batch, 3, 14, 14, device=device)


# ---------------------------------------------------------------------------------------------------------------------
# Inductor
# ---------------------------------------------------------------------------------------------------------------------

def _inductor_dynamic_then_cache_hit(device):
    from torch._inductor.utils import fresh_cache

    model = AllPatterns().to(device).eval()
    with fresh_cache(), torch.no_grad():
        counters.clear()
        x = _input(2, device)
        compiled = compile_and_run(model, x, dynamic=True, compiler="inductor")
        assert compiled.replaced == {op: 1 for op in ALL_OPS}
        assert_close_to_eager(model, (x,), compiled.outputs)
        x3 = _input(3, device)
        assert_close_to_eager(model, (x3,), compiled.fn(x3))
        assert compiled.frames == 1, "a new batch size recompiled"
        assert ops_that_ran(compiled.fn, x3) == EVERY_OP_RAN
        assert counters["inductor"]["fxgraph_cache_miss"] >= 1

        # A fresh Dynamo state compiles the same graph again (same input shape: Inductor's own cache key varies with
        # the size hints): Inductor's cache answers, and what it answers with is the graph with the convops ops.
        counters.clear()
        again = compile_and_run(model, x, dynamic=True, compiler="inductor")
        assert counters["inductor"]["fxgraph_cache_hit"] >= 1, dict(counters["inductor"])
        assert counters["inductor"]["fxgraph_cache_miss"] == 0, dict(counters["inductor"])
        assert_close_to_eager(model, (x,), again.outputs)
        assert ops_that_ran(again.fn, x) == EVERY_OP_RAN


def _inductor_training_step(device):
    model = AllPatterns().to(device).train()
    x = _input(2, device)
    expected = grads_after_step(model, (x,), model)
    compiled = torch.compile(model, backend="convops")
    actual = grads_after_step(model, (x,), compiled)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
    assert ops_that_ran(compiled, x) == EVERY_OP_RAN


@needs_ops
def test_inductor_dynamic_batch_then_fx_graph_cache_hit():
    _inductor_dynamic_then_cache_hit("cpu")


@needs_ops
def test_inductor_training_step_matches_eager():
    _inductor_training_step("cpu")


@needs_ops
@pytest.mark.cuda
def test_cuda_inductor_dynamic_batch_then_fx_graph_cache_hit():
    torch.backends.cudnn.allow_tf32 = False
    _inductor_dynamic_then_cache_hit("cuda")


@needs_ops
@pytest.mark.cuda
def test_cuda_inductor_training_step_matches_eager():
    torch.backends.cudnn.allow_tf32 = False
    _inductor_training_step("cuda")


@needs_ops
@pytest.mark.cuda
def test_cuda_reduce_overhead():
    torch.backends.cudnn.allow_tf32 = False
    model = AllPatterns().cuda().eval()
    compiled = torch.compile(model, backend="convops", mode="reduce-overhead")
    counters.clear()
    with torch.no_grad():
        x = _input(2, "cuda")
        # The first call is CUDA graphs' warm-up, which runs the ops as such (replays later show only kernels).
        assert ops_that_ran(compiled, x) == EVERY_OP_RAN
        for _ in range(3):  # record, then replay
            x = _input(2, "cuda")
            torch.testing.assert_close(compiled(x).clone(), model(x))
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


@needs_ops
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_substitution_per_dtype(dtype):
    torch.backends.cudnn.allow_tf32 = False
    model = AllPatterns().to("cuda", dtype)
    x = _input(2, "cuda").to(dtype)
    compiled = compile_and_run(model, x)
    assert compiled.replaced == {op: 1 for op in ALL_OPS}
    tolerance = {} if dtype == torch.float32 else dict(atol=5e-2, rtol=5e-2)
    assert_close_to_eager(model, (x,), compiled.outputs, **tolerance)


# ---------------------------------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------------------------------

@needs_ops
def test_passes_can_be_turned_off():
    model, x = AllPatterns(), _input(2)
    no_separable = compile_and_run(model, x, options={"depthwise_separable": False, "conv_transpose": False})
    assert no_separable.replaced == {"conv2d_group_norm_scale_max_pool_clamp": 1, "depthwise_conv2d": 2}
    assert_close_to_eager(model, (x,), no_separable.outputs)

    nothing = compile_and_run(model, x, options={name: False for name in PASS_NAMES})
    assert nothing.replaced == {}
    assert nothing.report.after == nothing.report.before


def test_option_parsing():
    assert BackendOptions.parse(None) == BackendOptions()
    assert BackendOptions.parse({"depthwise_conv": False}).passes == tuple(p for p in PASS_NAMES
                                                                           if p != "depthwise_conv")
    assert BackendOptions.parse(None, mode="reduce-overhead").inductor_config == {"triton.cudagraphs": True}
    assert BackendOptions.parse({"max-autotune": True}).inductor_config == {"max_autotune": True}
    assert BackendOptions.parse({"compiler": "aot_eager"}).compiler == "aot_eager"
    with pytest.raises(ValueError, match="unknown option 'depthwise'"):
        BackendOptions.parse({"depthwise": False})
    with pytest.raises(ValueError, match="takes True or False"):
        BackendOptions.parse({"depthwise_conv": "no"})
    with pytest.raises(ValueError, match="are for Inductor"):
        BackendOptions.parse({"compiler": "eager", "max_autotune": True})


@needs_ops
def test_compiler_option_takes_a_backend_callable():
    seen = []

    def backend(gm, example_inputs):
        seen.append({n.target for n in gm.graph.nodes if n.op == "call_function"})
        return gm.forward

    model, x = AllPatterns(), _input(2)
    torch._dynamo.reset()
    out = torch.compile(model, backend="convops", options={"compiler": backend})(x)
    assert_close_to_eager(model, (x,), out)
    assert {getattr(torch.ops.convops, op).default for op in ALL_OPS} <= seen[0]


# ---------------------------------------------------------------------------------------------------------------------
# What the user sees: explain(), the log, failures that do not break the compile
# ---------------------------------------------------------------------------------------------------------------------

class ShortChain(nn.Module):
    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(4, 4, 3, groups=4)
        self.pool = nn.MaxPool2d(2, stride=1)
        self.gn = nn.GroupNorm(2, 4)
        self.conv = nn.Conv2d(4, 4, 1)
        self.scale = nn.Parameter(torch.ones(4, 1, 1))

    def forward(self, x):
        return self.pool(self.gn(self.conv(self.dw(x))) * self.scale).clamp(0, 1)


@needs_ops
class TestExplain(expecttest.TestCase):
    def test_report(self):
        torch._dynamo.reset()
        report = convops.explain(ShortChain(), torch.randn(1, 4, 8, 8))
        self.assertEqual(dict(report.replaced), {"depthwise_separable_conv2d": 1})
        [declined] = report.declined
        self.assertEqual(declined.reason, "the max_pool2d stride [1, 1] differs from its kernel [2, 2]")
        self.assertRegex(declined.source, r"^test_backend_compile.py:\d+: return self.pool\(")
        # The table as printed, with the source column (line numbers move as this file changes) shortened.
        text = str(report).replace(declined.source, "test_backend_compile.py:N")
        self.assertExpectedInline(text, """\
convops: 1 graph(s) compiled

pattern                                   replaced    declined
--------------------------------------  ----------  ----------
conv2d_group_norm_scale_max_pool_clamp           0           1
depthwise_separable_conv2d                       1           0
depthwise_conv2d                                 0           0
conv_transpose2d                                 0           0
conv_transpose3d                                 0           0

declined candidates:

graph    pattern                                 node        reason                                                       source
-------  --------------------------------------  ----------  -----------------------------------------------------------  ------------------------------------------------------------------------------------------------------
0/0      conv2d_group_norm_scale_max_pool_clamp  max_pool2d  the max_pool2d stride [1, 1] differs from its kernel [2, 2]  test_backend_compile.py:N""")


@needs_ops
def test_log_says_what_was_replaced_and_declined(caplog):
    with caplog.at_level(logging.INFO, logger="convops"):
        compile_and_run(ShortChain(), torch.randn(1, 4, 8, 8))
    messages = [r.getMessage() for r in caplog.records if r.name == "convops"]
    assert messages[0] == "convops graph 0/0: replaced depthwise_separable_conv2d x1; declined 1"
    assert messages[1].startswith("convops graph 0/0: declined conv2d_group_norm_scale_max_pool_clamp at max_pool2d")
    assert messages[1].endswith("the max_pool2d stride [1, 1] differs from its kernel [2, 2]")


@needs_ops
def test_a_failing_pass_is_rolled_back_with_a_warning(monkeypatch):
    def broken(self, node):
        raise RuntimeError("boom")

    monkeypatch.setattr(DepthwiseConvPass, "match", broken)
    model, x = AllPatterns(), _input(2)
    with pytest.warns(UserWarning, match="the depthwise_conv pass failed on graph 0/0 and was skipped"):
        compiled = compile_and_run(model, x)
    assert compiled.report.failed == ["depthwise_conv: RuntimeError: boom"]
    assert compiled.replaced == {"conv2d_group_norm_scale_max_pool_clamp": 1, "depthwise_separable_conv2d": 1,
                                 "conv_transpose2d": 1}
    assert "groups=4" not in compiled.report.after and "torch.conv2d(" in compiled.report.after
    assert_close_to_eager(model, (x,), compiled.outputs)


@needs_ops
def test_a_compile_failure_falls_back_to_the_unmodified_graph():
    graphs = []

    def picky(gm, example_inputs):
        graphs.append(gm.code)
        if "convops" in gm.code:
            raise RuntimeError("this compiler takes no convops ops")
        return gm.forward

    model, x = AllPatterns(), _input(2)
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match="with the convops ops failed .* compiling it without them"):
        with collect() as reports:
            out = torch.compile(model, backend="convops", options={"compiler": picky})(x)
    assert len(graphs) == 2 and "convops" not in graphs[1]
    assert_close_to_eager(model, (x,), out)
    # The report describes the graph that was compiled: nothing replaced, and why.
    (report,) = reports
    assert not sum(report.replaced.values())
    assert report.failed == ["compiling with the convops ops: RuntimeError: this compiler takes no convops ops"]
    assert "convops" not in report.after


# ---------------------------------------------------------------------------------------------------------------------
# uuid(): what caches could key on
# ---------------------------------------------------------------------------------------------------------------------

def test_uuid_is_stable_and_tracks_the_enabled_passes():
    assert PassManager().uuid() == PassManager().uuid()
    assert PassManager().uuid() != PassManager(["depthwise_conv"]).uuid()
    assert len({p.uuid() for p in PassManager().passes}) == len(PASS_NAMES)


def test_uuid_changes_when_the_pass_source_changes(tmp_path, monkeypatch):
    path = tmp_path / "my_pass.py"
    source = "from convops.fx_passes.depthwise_conv import DepthwiseConvPass\nclass MyPass(DepthwiseConvPass):\n"
    monkeypatch.syspath_prepend(str(tmp_path))

    def uuid_of(body):
        path.write_text(source + body)
        sys.modules.pop("my_pass", None)
        module = importlib.import_module("my_pass")
        return module.MyPass().uuid()

    try:
        assert uuid_of("    pass\n") != uuid_of("    name = 'changed'\n")
    finally:
        sys.modules.pop("my_pass", None)


# ---------------------------------------------------------------------------------------------------------------------
# Lookup by name in a fresh interpreter
# ---------------------------------------------------------------------------------------------------------------------

def _entry_point_installed() -> bool:
    return any(ep.name == "convops" for ep in importlib.metadata.entry_points(group="torch_dynamo_backends"))


@pytest.mark.skipif(not _entry_point_installed(),
                    reason="convops is not installed as a distribution (pip install --no-build-isolation -e .), "
                           "so torch has no torch_dynamo_backends entry point to find")
@needs_ops
def test_backend_name_resolves_through_the_entry_point_without_import():
    script = textwrap.dedent("""
        import sys
        import torch
        assert "convops" not in sys.modules
        model = torch.nn.Conv2d(4, 4, 3, groups=4)
        fn = torch.compile(model, backend="convops", options={"compiler": "eager"})
        x = torch.randn(1, 4, 8, 8)
        with torch.profiler.profile() as prof:
            torch.testing.assert_close(fn(x), model(x))
        assert "convops" in sys.modules
        print(sorted(e.key for e in prof.key_averages() if e.key.startswith("convops::")))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "['convops::depthwise_conv2d']"
