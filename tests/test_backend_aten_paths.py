"""Where the op would run ATen's composition anyway, the conv_transpose pass leaves the node to the compiler in TF32
and 16-bit (fx_passes/base.py, decided_path; conv_transpose.py, leaves_aten_paths): the decline, its reason, where it
does not apply, and on CUDA its agreement with what "auto" decided."""
from __future__ import annotations

import expecttest
import pytest
import torch
import torch.nn as nn

import convops
import convops.fx_passes.base as base
from test_backend_helpers import assert_close_to_eager, compile_and_run, requires_ops

T2D = "conv_transpose2d"


def _upsampling(device: str = "cpu") -> tuple[nn.Module, torch.Tensor]:
    """A UNet decoder's k3 stride-2 upsampling layer (small)."""
    model = nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1).to(device).eval()
    return model, torch.randn(2, 16, 12, 10, device=device)


@requires_ops(T2D)
class TestDeclineWhereAtenRuns(expecttest.TestCase):
    def test_aten_decision_keeps_the_node(self):
        model, x = _upsampling()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(base, "decided_path", lambda r, values: "aten")
            compiled = compile_and_run(model, x)
        self.assertEqual(compiled.replaced, {})
        self.assertExpectedInline(compiled.declines(), """conv_transpose2d conv_transpose2d: convops::conv_transpose2d would run ATen's composition for these shapes (the path policy, or what "auto" timed: convops.path_choices()); the compiler keeps the nodes""")
        self.assertExpectedInline(compiled.report.after, """\
inputs: fn_weight, fn_bias, args_0
conv_transpose2d = torch.conv_transpose2d(args_0, fn_weight, fn_bias, (2, 2), (1, 1), (1, 1), 1, (1, 1))
return (conv_transpose2d,)""")
        assert_close_to_eager(model, (x,), compiled.outputs)

    def test_convops_decision_substitutes(self):
        model, x = _upsampling()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(base, "decided_path", lambda r, values: "convops")
            compiled = compile_and_run(model, x)
        self.assertEqual(compiled.replaced, {T2D: 1})
        assert_close_to_eager(model, (x,), compiled.outputs)

    def test_strict_fp32_keeps_the_substitution(self):
        model, x = _upsampling()
        torch.backends.cudnn.allow_tf32 = False
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(base, "decided_path", lambda r, values: "aten")
            compiled = compile_and_run(model, x)
        self.assertEqual(compiled.replaced, {T2D: 1})

    def test_cpu_involves_no_decision(self):
        def no_call(*args):
            raise AssertionError("auto_path called for a CPU candidate")

        model, x = _upsampling()
        with pytest.MonkeyPatch.context() as patch, convops.forced_path("auto"):
            patch.setattr(base, "auto_path", no_call)
            compiled = compile_and_run(model, x)
        self.assertEqual(compiled.replaced, {T2D: 1})


def _conv_transpose_choices() -> list[convops.PathChoice]:
    return [c for c in convops.path_choices() if c.problem.startswith(f"convops::{T2D} ")]


@pytest.mark.cuda
@requires_ops(T2D)
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "fp32"])
def test_cuda_auto_declines_exactly_where_it_decided_aten(tf32):
    """Under "auto" the pass times the op on the node's shapes at compile time (one decision, kept for the compiled
    graph's calls) and declines the node where that decision is ATen's composition."""
    model, x = _upsampling("cuda")
    torch.backends.cudnn.allow_tf32 = tf32
    asked = []

    def spy(op, *args):
        asked.append(op)
        return convops.path_choice.auto_path(op, *args)

    with pytest.MonkeyPatch.context() as patch, convops.forced_path("auto"):
        patch.setattr(base, "auto_path", spy)
        convops.clear_path_choices()
        compiled = compile_and_run(model, x)
        compiled.fn(x)  # the compiled graph's calls take the decision made at compile time
        choices = _conv_transpose_choices()
    assert len(choices) == 1, choices
    assert len(asked) == tf32, asked  # strict fp32 substitutes without asking (leaves_aten_paths)
    if tf32 and choices[0].path == "aten":
        assert compiled.replaced == {}
        assert "would run ATen's composition" in compiled.declines()
    else:
        assert compiled.replaced == {T2D: 1}
    assert_close_to_eager(model, (x,), compiled.outputs, atol=1e-3, rtol=1e-3)


@pytest.mark.cuda
@requires_ops(T2D)
@pytest.mark.parametrize("policy,replaced", [("aten", {}), ("convops", {T2D: 1})])
def test_cuda_fixed_policies(policy, replaced):
    model, x = _upsampling("cuda")
    with convops.forced_path(policy):
        compiled = compile_and_run(model, x)
    assert compiled.replaced == replaced


@pytest.mark.cuda
@requires_ops(T2D)
def test_cuda_symbolic_sizes_substitute_without_a_decision():
    model, x = _upsampling("cuda")
    with convops.forced_path("auto"):
        convops.clear_path_choices()
        compiled = compile_and_run(model, x, dynamic=True)
        decisions = _conv_transpose_choices()
    assert compiled.replaced == {T2D: 1}
    assert len(decisions) == 1  # made by the call, as the op's first call makes it


@pytest.mark.cuda
@requires_ops(T2D)
def test_cuda_expanded_and_offset_inputs_decide_without_failing_the_pass():
    """Real stand-ins for an expanded (stride 0) input and a view with a storage offset; a candidate whose decision
    fails would have cost every substitution of the graph."""
    model, x = _upsampling("cuda")
    base_tensor = torch.randn(1, 16, 12, 10, device="cuda")

    def fn(x, y):
        return model(x.expand(3, -1, -1, -1)), model(y[:, :, 1:])

    y = torch.randn(2, 16, 13, 10, device="cuda")
    with convops.forced_path("auto"):
        compiled = compile_and_run(fn, base_tensor, y)
    assert not compiled.report.failed, compiled.report.failed
    assert sum(compiled.replaced.values()) + len(compiled.report.declined) == 2
    with torch.no_grad():
        expected = fn(base_tensor, y)
    torch.testing.assert_close(compiled.outputs, expected, atol=1e-3, rtol=1e-3)
