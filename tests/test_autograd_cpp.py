"""The autograd of every convops op, registered in C++ (convops/csrc/autograd/): gradients equal ATen's for any
subset of differentiated inputs (absent optional tensors included), the forward saves only what those need, a call
runs no Python kernel, and the formulas trace under dynamic shapes."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

from common_utils import make_tensor

ops = torch.ops.convops


@dataclass
class Spec:
    """One op call: its tensor arguments (None for an absent optional one) and the same call in convops and ATen."""
    shapes: list  # shape per tensor argument, None where absent
    ours: Callable
    eager: Callable
    # Which tensor arguments (positions) the forward saves, given which need a gradient (tuple of bools).
    saves: Callable | None = None
    low: float = -1.0

    def tensors(self, dtype, device="cpu"):
        return [None if s is None else make_tensor(s, dtype, device, low=self.low) for s in self.shapes]


def conv_saves(need):
    """convolution_backward reads the weight for the input's gradient and the input for the weight's."""
    return ({0} if need[1] else set()) | ({1} if need[0] else set())


def separable_saves(need):
    need_dw = need[0] or need[1] or bool(need[2])
    saved = set()
    if need[3] or need[1]:
        saved.add(0)
    if need[3] or need[0]:
        saved.add(1)
    if need[3] and need[2] is not None:
        saved.add(2)
    if need_dw:
        saved.add(3)
    return saved


def gn_chain(x, w, b, gamma, beta, scale, groups, lo, hi):
    y = F.group_norm(F.conv2d(x, w, b, 1, 1), groups, gamma, beta, 1e-5)
    y = F.max_pool2d(y * (scale.reshape(1, -1, 1, 1) if scale.numel() != 1 else scale.reshape(1, 1, 1, 1)), 2)
    return torch.clamp(y, lo, hi)


SPECS = {
    "depthwise": Spec(
        [(2, 3, 7, 8), (6, 1, 3, 2), (6,)],
        lambda x, w, b: ops.depthwise_conv2d(x, w, b, [2, 1], [1, 0], [1, 2]),
        lambda x, w, b: F.conv2d(x, w, b, [2, 1], [1, 0], [1, 2], groups=x.shape[1]),
        lambda need: conv_saves(need)),
    "depthwise_no_bias": Spec(
        [(1, 2, 6, 6), (2, 1, 3, 3), None],
        lambda x, w, b: ops.depthwise_conv2d(x, w, b, [1, 1], [1, 1], [1, 1]),
        lambda x, w, b: F.conv2d(x, w, b, 1, 1, 1, groups=x.shape[1]),
        lambda need: conv_saves(need)),
    "separable": Spec(
        [(2, 3, 7, 6), (6, 1, 3, 3), (6,), (5, 6, 1, 1), (5,)],
        lambda x, dw, db, pw, pb: ops.depthwise_separable_conv2d(x, dw, db, pw, pb, [1, 1], [1, 1], [1, 1]),
        lambda x, dw, db, pw, pb: F.conv2d(F.conv2d(x, dw, db, 1, 1, 1, groups=x.shape[1]), pw, pb),
        separable_saves),
    # No depthwise bias: the pointwise weight is the third autograd edge, not the fourth.
    "separable_no_dw_bias": Spec(
        [(1, 2, 6, 5), (4, 1, 3, 3), None, (3, 4, 1, 1), (3,)],
        lambda x, dw, db, pw, pb: ops.depthwise_separable_conv2d(x, dw, db, pw, pb, [2, 2], [0, 1], [1, 1]),
        lambda x, dw, db, pw, pb: F.conv2d(F.conv2d(x, dw, db, 2, [0, 1], 1, groups=x.shape[1]), pw, pb),
        separable_saves),
    "conv_transpose2d": Spec(
        [(2, 4, 5, 6), (4, 3, 3, 2), (6,)],
        lambda x, w, b: ops.conv_transpose2d(x, w, b, [2, 1], [1, 0], [1, 0], 2, [1, 2]),
        lambda x, w, b: F.conv_transpose2d(x, w, b, [2, 1], [1, 0], [1, 0], 2, [1, 2]),
        lambda need: conv_saves(need)),
    "conv_transpose2d_unbatched": Spec(
        [(2, 4, 3), (2, 3, 2, 2), None],
        lambda x, w, b: ops.conv_transpose2d(x, w, b, [2, 2], [0, 0], [0, 0], 1, [1, 1]),
        lambda x, w, b: F.conv_transpose2d(x, w, b, 2),
        lambda need: conv_saves(need)),
    "conv_transpose3d": Spec(
        [(1, 2, 3, 4, 3), (2, 2, 2, 2, 2), (2,)],
        lambda x, w, b: ops.conv_transpose3d(x, w, b, [2, 1, 2], [0, 1, 0], [1, 0, 0], 1, [1, 1, 1]),
        lambda x, w, b: F.conv_transpose3d(x, w, b, [2, 1, 2], [0, 1, 0], [1, 0, 0], 1, 1),
        lambda need: conv_saves(need)),
    "conv_gn_pool_clamp": Spec(
        [(2, 3, 9, 10), (8, 3, 3, 3), (8,), (8,), (8,), (8, 1, 1)],
        lambda x, w, b, g, be, s: ops.conv2d_group_norm_scale_max_pool_clamp(
            x, w, b, [1, 1], [1, 1], [1, 1], 4, g, be, 1e-5, s, [2, 2], -0.5, 0.7),
        lambda x, w, b, g, be, s: gn_chain(x, w, b, g, be, s, 4, -0.5, 0.7),
        lambda need: {0, 1, 2, 3, 4, 5}),
    # No conv bias and no GroupNorm bias: gn_weight and scale are the third and fourth autograd edges. (Not the
    # other way round: ATen's own group_norm backward fails for a bias without a weight, "tensor does not have a
    # device", eagerly as in this op.)
    "conv_gn_pool_clamp_sparse_args": Spec(
        [(1, 2, 8, 9), (4, 2, 3, 3), None, (4,), None, ()],
        lambda x, w, b, g, be, s: ops.conv2d_group_norm_scale_max_pool_clamp(
            x, w, b, [1, 1], [1, 1], [1, 1], 2, g, be, 1e-5, s, [2, 2], None, 0.5),
        lambda x, w, b, g, be, s: gn_chain(x, w, b, g, be, s, 2, None, 0.5),
        lambda need: {0, 1, 3, 5}),
}


def present_positions(spec):
    return [i for i, s in enumerate(spec.shapes) if s is not None]


def subsets(spec_name):
    """Every tensor argument alone, then all of them."""
    spec = SPECS[spec_name]
    return [(spec_name, (i,)) for i in present_positions(spec)] + [(spec_name, tuple(present_positions(spec)))]


SUBSETS = [s for name in SPECS for s in subsets(name)]


def run_backward(fn, tensors, wanted, grad_seed=0):
    leaves = [None if t is None else t.detach().clone().requires_grad_(i in wanted) for i, t in enumerate(tensors)]
    out = fn(*leaves)
    torch.manual_seed(grad_seed)
    out.backward(torch.randn_like(out))
    return [None if t is None else t.grad for t in leaves]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("spec_name,wanted", SUBSETS, ids=lambda v: "-".join(map(str, v)) if isinstance(v, tuple)
                         else v)
def test_gradients_match_aten(spec_name, wanted, dtype):
    spec = SPECS[spec_name]
    tensors = spec.tensors(dtype)
    ours = run_backward(spec.ours, tensors, wanted)
    theirs = run_backward(spec.eager, tensors, wanted)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-10)
    for i, (got, want) in enumerate(zip(ours, theirs)):
        assert (got is None) == (i not in wanted), f"tensor argument {i}"
        if got is not None:
            torch.testing.assert_close(got, want, **tol, msg=lambda m: f"tensor argument {i}: {m}")


@pytest.mark.parametrize("spec_name", list(SPECS))
def test_gradcheck(spec_name):
    spec = SPECS[spec_name]
    tensors = spec.tensors(torch.float64)
    positions = present_positions(spec)

    def fn(*values):
        args = list(tensors)
        for i, v in zip(positions, values):
            args[i] = v
        return spec.ours(*args)

    inputs = [tensors[i].requires_grad_() for i in positions]
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


@pytest.mark.parametrize("spec_name,wanted", SUBSETS, ids=lambda v: "-".join(map(str, v)) if isinstance(v, tuple)
                         else v)
def test_saves_only_what_the_wanted_gradients_need(spec_name, wanted):
    spec = SPECS[spec_name]
    tensors = [None if t is None else t.requires_grad_(i in wanted)
               for i, t in enumerate(spec.tensors(torch.float32))]
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        spec.ours(*tensors)
    positions = {i for t in saved for i, arg in enumerate(tensors) if arg is not None and t is arg}
    assert len(positions) == len(saved), "the forward saved a tensor that is not one of the op's arguments"
    need = tuple(None if t is None else i in wanted for i, t in enumerate(tensors))
    assert positions == spec.saves(need)


def python_functions_called(fn):
    """The Python functions that run during fn(), other than this file's and the OpOverload call itself."""
    called = []

    def profile(frame, event, arg):
        if event == "call":
            called.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return [c for c in called if not c.startswith(__file__) and not c.endswith("torch/_ops.py:__call__")]


@pytest.mark.parametrize("mode", ["no_grad", "no_input_requires_grad", "requires_grad"])
@pytest.mark.parametrize("spec_name", ["depthwise", "separable", "conv_transpose2d", "conv_gn_pool_clamp"])
def test_a_call_runs_no_python_kernel(spec_name, mode):
    """The autograd kernel is C++: no torch/_library Python runs between the OpOverload call and the backend kernel
    (a Python autograd kernel cost about 10 us of host time per call)."""
    spec = SPECS[spec_name]
    tensors = [None if t is None else t.requires_grad_(mode != "no_input_requires_grad")
               for t in spec.tensors(torch.float32)]
    with torch.set_grad_enabled(mode != "no_grad"):
        spec.ours(*tensors)  # warm-up: lazy imports, first-call initialisation
        out = None

        def call():
            nonlocal out
            out = spec.ours(*tensors)
        called = python_functions_called(call)
    assert called == []
    assert (out.grad_fn is not None) == (mode == "requires_grad")
    assert out.requires_grad == (mode == "requires_grad")


def double_backward_inputs(spec_name):
    return [t.requires_grad_() for t in SPECS[spec_name].tensors(torch.float64) if t is not None]


@pytest.mark.parametrize("spec_name", ["depthwise", "separable", "conv_transpose2d", "conv_transpose3d"])
def test_double_backward(spec_name):
    """The backward is made of differentiable ATen ops on saved inputs, so it differentiates again."""
    assert torch.autograd.gradgradcheck(SPECS[spec_name].ours, double_backward_inputs(spec_name), fast_mode=True)


def test_double_backward_of_group_norm_chain_says_why_not():
    """The backward runs native_group_norm_backward, which ATen cannot differentiate (eager group_norm uses a
    differentiable formula when a graph is built); the error says so rather than a wrong second derivative."""
    with pytest.raises(RuntimeError, match="derivative for aten::native_group_norm_backward is not implemented"):
        torch.autograd.gradgradcheck(SPECS["conv_gn_pool_clamp"].ours, double_backward_inputs("conv_gn_pool_clamp"),
                                     fast_mode=True)


@pytest.mark.parametrize("op,args", [
    (ops.depthwise_conv2d, lambda t: (t((4, 8, 8)), t((4, 1, 3, 3)), None, [1, 1], [0, 0], [1, 1])),
    (ops.depthwise_separable_conv2d,
     lambda t: (t((2, 8)), t((2, 1, 3, 3)), None, t((3, 2, 1, 1)), None, [1, 1], [0, 0], [1, 1])),
    (ops.conv_transpose2d, lambda t: (t((4,)), t((4, 2, 3, 3)), None, [1, 1], [0, 0], [0, 0], 1, [1, 1])),
    (ops.conv2d_group_norm_scale_max_pool_clamp,
     lambda t: (t((3, 8)), t((4, 3, 3, 3)), None, [1, 1], [0, 0], [1, 1], 2, None, None, 1e-5, t((4,)), [2, 2],
                None, None)),
], ids=["depthwise", "separable", "conv_transpose2d", "conv_gn_pool_clamp"])
def test_errors_with_requires_grad_name_the_op(op, args):
    """The forward lets the kernel validate before it saves anything, so a bad argument still gets convops' message."""
    def t(shape):
        return torch.randn(shape, requires_grad=True)
    with pytest.raises(RuntimeError, match=f"convops::{op._qualified_op_name.split('::')[1]}"):
        op(*args(t))


def test_dynamic_shapes_training_compiles_once():
    """Under dynamic shapes AOTAutograd traces the C++ backward on symbolic sizes; a second batch size reuses it."""
    specs = [SPECS[n] for n in ("depthwise", "separable_no_dw_bias", "conv_transpose2d", "conv_gn_pool_clamp")]

    def step(fn, tensors):
        out = fn(*tensors)
        grads = torch.autograd.grad(out.square().sum(), [t for t in tensors if t is not None])
        return out, grads

    compiled = [torch.compile(spec.ours, backend="aot_eager", dynamic=True, fullgraph=True) for spec in specs]
    for batch in (2, 3):
        for spec, fn in zip(specs, compiled):
            tensors = spec.tensors(torch.float64)
            tensors[0] = make_tensor((batch, *spec.shapes[0][1:]), torch.float64, "cpu")
            tensors = [None if t is None else t.requires_grad_() for t in tensors]
            got, want = step(fn, tensors), step(spec.eager, tensors)
            torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
