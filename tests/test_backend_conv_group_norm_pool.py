"""The conv2d -> group_norm -> scale -> max_pool2d -> clamp pass: spellings, expected graphs, declined candidates."""
from __future__ import annotations

import expecttest
import torch
import torch.nn as nn
import torch.nn.functional as F

from test_backend_helpers import (assert_close_to_eager, compile_and_run, grads_after_step, ops_that_ran,
                                  requires_ops)

OP = "conv2d_group_norm_scale_max_pool_clamp"
C = 8


class KernelBenchSpelling(nn.Module):
    """KernelBench L2-85 as written there: modules, `*` with a (C, 1, 1) Parameter, clamp with attribute bounds."""

    def __init__(self, scale_shape=(C, 1, 1), pool=2, clamp_min=0.0, clamp_max=1.0):
        super().__init__()
        self.conv = nn.Conv2d(3, C, 3)
        self.group_norm = nn.GroupNorm(4, C)
        self.scale = nn.Parameter(torch.rand(scale_shape) + 0.5)
        self.maxpool = nn.MaxPool2d(kernel_size=pool)
        self.clamp_min, self.clamp_max = clamp_min, clamp_max

    def forward(self, x):
        x = self.conv(x)
        x = self.group_norm(x)
        x = x * self.scale
        x = self.maxpool(x)
        return torch.clamp(x, self.clamp_min, self.clamp_max)


class FunctionalSpelling(nn.Module):
    """torch.nn.functional with keywords, torch.mul by a (1, C, 1, 1) buffer, a non-square pool, clamp(min=) then
    clamp_max, conv stride/padding/dilation and GroupNorm eps off their defaults."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(C, 3, 3, 3) * 0.3)
        self.bias = nn.Parameter(torch.randn(C))
        self.gn_weight = nn.Parameter(torch.rand(C) + 0.5)
        self.register_buffer("scale", torch.rand(1, C, 1, 1) + 0.5)

    def forward(self, x):
        y = F.conv2d(x, self.weight, self.bias, stride=2, padding=1, dilation=2)
        y = F.group_norm(y, num_groups=2, weight=self.gn_weight, eps=1e-3)
        y = torch.mul(y, self.scale)
        y = F.max_pool2d(y, kernel_size=(2, 3))
        return y.clamp(min=-0.5).clamp_max(0.5)


class MethodSpelling(nn.Module):
    """Scale first and a Python number, in-place multiply and clamp_, torch.max_pool2d, conv without bias."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, C, (3, 5), bias=False, padding="same")
        self.gn = nn.GroupNorm(8, C, affine=False)

    def forward(self, x):
        y = self.gn(self.conv(x))
        y *= 1.5
        y = torch.max_pool2d(y, 3)
        return y.clamp_(max=0.75)


class NoClampSpelling(nn.Module):
    """The pool's result used twice: the fused op runs without bounds and both users read it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, C, 3)
        self.gn = nn.GroupNorm(2, C)
        self.scale = nn.Parameter(torch.rand(C, 1, 1))

    def forward(self, x):
        y = F.max_pool2d(self.scale * self.gn(self.conv(x)), 2)
        return y.clamp(0, 1), y.sigmoid()


class Branch(nn.Module):
    """One conv -> group_norm -> * scale -> pool -> clamp chain, with the pieces a negative case varies."""

    def __init__(self, scale_shape=(C, 1, 1), pool=None, groups=1, scale_dtype=torch.float32):
        super().__init__()
        self.conv = nn.Conv2d(4, C, 3, groups=groups)
        self.gn = nn.GroupNorm(4, C)
        self.scale = nn.Parameter(torch.rand(scale_shape, dtype=scale_dtype) + 0.5)
        self.pool = pool or nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(self.gn(self.conv(x)) * self.scale)


class Declined(nn.Module):
    """Chains that look right but are not exactly the fused op; each branch breaks one rule."""

    def __init__(self):
        super().__init__()
        self.scale_along_width = Branch(scale_shape=(C,))  # broadcasts over W (= C here), not over channels
        self.pool_stride = Branch(pool=nn.MaxPool2d(2, stride=1))
        self.pool_padding = Branch(pool=nn.MaxPool2d(2, padding=1))
        self.pool_dilation = Branch(pool=nn.MaxPool2d(2, dilation=2))
        self.pool_ceil = Branch(pool=nn.MaxPool2d(2, ceil_mode=True))
        self.grouped_conv = Branch(groups=2)
        self.double_scale = Branch(scale_dtype=torch.float64)
        self.returns_indices = Branch(pool=nn.MaxPool2d(2, return_indices=True))
        self.shared = Branch()

    def forward(self, x):
        shared_norm = self.shared.gn(self.shared.conv(x))
        return (self.scale_along_width(x), self.pool_stride(x), self.pool_padding(x), self.pool_dilation(x),
                self.pool_ceil(x), self.grouped_conv(x), self.double_scale(x), self.returns_indices(x)[0],
                F.max_pool2d(shared_norm * self.shared.scale, 2), shared_norm)


@requires_ops(OP)
class TestConvGroupNormPool(expecttest.TestCase):
    def check(self, model, x, replaced=1, dynamic=None):
        compiled = compile_and_run(model, x, dynamic=dynamic)
        self.assertEqual(compiled.frames, 1)
        self.assertEqual(compiled.replaced, {OP: replaced} if replaced else {})
        assert_close_to_eager(model, (x,), compiled.outputs)
        return compiled

    def test_kernelbench_spelling(self):
        compiled = self.check(KernelBenchSpelling(), torch.randn(2, 3, 10, 10))
        self.assertExpectedInline(compiled.report.before, """\
inputs: conv_weight, conv_bias, x, group_norm_weight, group_norm_bias, scale
x = torch.conv2d(x, conv_weight, conv_bias, (1, 1), (0, 0), (1, 1), 1)
x_1 = F.group_norm(x, 4, group_norm_weight, group_norm_bias, 1e-05)
x_2 = operator.mul(x_1, scale)
x_3 = F.max_pool2d(x_2, 2, 2, 0, 1, ceil_mode=False, return_indices=False)
clamp = torch.clamp(x_3, 0.0, 1.0)
return (clamp,)""")
        self.assertExpectedInline(compiled.report.after, """\
inputs: conv_weight, conv_bias, x, group_norm_weight, group_norm_bias, scale
conv2d_group_norm_scale_max_pool_clamp = convops.conv2d_group_norm_scale_max_pool_clamp(x, conv_weight, conv_bias, [1, 1], [0, 0], [1, 1], 4, group_norm_weight, group_norm_bias, 1e-05, scale, [2, 2], 0.0, 1.0)
return (conv2d_group_norm_scale_max_pool_clamp,)""")

    def test_functional_spelling(self):
        compiled = self.check(FunctionalSpelling(), torch.randn(2, 3, 17, 23))
        self.assertExpectedInline(compiled.report.after, """\
inputs: weight, bias, x, gn_weight, scale
conv2d_group_norm_scale_max_pool_clamp = convops.conv2d_group_norm_scale_max_pool_clamp(x, weight, bias, [2, 2], [1, 1], [2, 2], 2, gn_weight, None, 0.001, scale, [2, 3], -0.5, 0.5)
return (conv2d_group_norm_scale_max_pool_clamp,)""")

    def test_method_spelling(self):
        compiled = self.check(MethodSpelling(), torch.randn(1, 3, 9, 12))
        self.assertExpectedInline(compiled.report.after, """\
inputs: conv_weight, x
new_full = x.new_full((), 1.5)
conv2d_group_norm_scale_max_pool_clamp = convops.conv2d_group_norm_scale_max_pool_clamp(x, conv_weight, None, [1, 1], [1, 2], [1, 1], 8, None, None, 1e-05, new_full, [3, 3], None, 0.75)
return (conv2d_group_norm_scale_max_pool_clamp,)""")

    def test_pool_with_other_users_keeps_its_clamp_outside(self):
        compiled = self.check(NoClampSpelling(), torch.randn(2, 3, 10, 10))
        self.assertExpectedInline(compiled.report.after, """\
inputs: scale, conv_weight, conv_bias, x, gn_weight, gn_bias
conv2d_group_norm_scale_max_pool_clamp = convops.conv2d_group_norm_scale_max_pool_clamp(x, conv_weight, conv_bias, [1, 1], [0, 0], [1, 1], 2, gn_weight, gn_bias, 1e-05, scale, [2, 2], None, None)
clamp = conv2d_group_norm_scale_max_pool_clamp.clamp(0, 1)
sigmoid = conv2d_group_norm_scale_max_pool_clamp.sigmoid()
return (clamp, sigmoid)""")

    def test_declined(self):
        model, x = Declined(), torch.randn(2, 4, 10, 10)
        compiled = compile_and_run(model, x)
        self.assertEqual(compiled.frames, 1)
        self.assertEqual(compiled.replaced, {})
        self.assertExpectedInline(compiled.declines(), """\
conv2d_group_norm_scale_max_pool_clamp max_pool2d: the scale of shape [8] is not one value per channel: multiplied into an (N, C, H, W) tensor it broadcasts along other dimensions
conv2d_group_norm_scale_max_pool_clamp max_pool2d_1: the max_pool2d stride [1, 1] differs from its kernel [2, 2]
conv2d_group_norm_scale_max_pool_clamp max_pool2d_2: the max_pool2d pads
conv2d_group_norm_scale_max_pool_clamp max_pool2d_3: the max_pool2d dilates
conv2d_group_norm_scale_max_pool_clamp max_pool2d_4: the max_pool2d uses ceil_mode
conv2d_group_norm_scale_max_pool_clamp max_pool2d_5: the conv has groups=2 (the fused op takes groups=1)
conv2d_group_norm_scale_max_pool_clamp max_pool2d_6: the scale is torch.float64 but the input is torch.float32
conv2d_group_norm_scale_max_pool_clamp max_pool2d_7: the max_pool2d returns indices
conv2d_group_norm_scale_max_pool_clamp max_pool2d_8: the group_norm output (shared_norm) is also used by output""")
        assert_close_to_eager(model, (x,), compiled.outputs)

    def test_write_or_grad_mode_switch_between_matched_ops(self):
        def writes(x, w, scale):
            y = F.group_norm(F.conv2d(x, w), 2)
            x.add_(1.0)  # the fused op would read x after this write
            return F.max_pool2d(y * scale, 2), x

        def writes_by_dunder(x, w, scale):
            y = F.group_norm(F.conv2d(x, w), 2) * scale
            scale.__iadd__(1.0)  # a Tensor method spelled by its dunder name: the fused op would read the new scale
            return F.max_pool2d(y, 2)

        def switches_grad_mode(x, w, scale):
            with torch.no_grad():
                y = F.conv2d(x, w)  # no gradient flows into w; the fused op would run with grad enabled
            return F.max_pool2d(F.group_norm(y, 2) * scale, 2)

        args = (torch.randn(1, 3, 8, 8), torch.randn(C, 3, 3, 3, requires_grad=True), torch.rand(C, 1, 1))
        declines = [compile_and_run(fn, *args).declines() for fn in (writes, writes_by_dunder, switches_grad_mode)]
        self.assertExpectedInline("\n".join(declines), """\
conv2d_group_norm_scale_max_pool_clamp max_pool2d: add_ may write into a tensor between conv2d and max_pool2d
conv2d_group_norm_scale_max_pool_clamp max_pool2d: iadd may write into a tensor between conv2d and max_pool2d
conv2d_group_norm_scale_max_pool_clamp max_pool2d: _set_grad_enabled_1 switches grad mode or autocast between y and max_pool2d""")

    def test_dynamic_batch_and_float_attributes(self):
        # Under dynamic=True Dynamo turns the float attributes (clamp bounds, eps) into graph inputs read with
        # .item(); the pass reads them as constants (guarded), and a new batch size still does not recompile.
        model = KernelBenchSpelling(clamp_min=-0.25, clamp_max=0.5)
        compiled = self.check(model, torch.randn(2, 3, 10, 10), dynamic=True)
        self.assertNotIn(".item()", compiled.report.after)
        self.assertIn("-0.25, 0.5)", compiled.report.after)
        x = torch.randn(5, 3, 12, 12)  # (H == W: Dynamo gave both one symbol)
        assert_close_to_eager(model, (x,), compiled.fn(x))
        self.assertEqual(compiled.frames, 1)  # served by the first compile

    def test_training_step_matches_eager(self):
        model = KernelBenchSpelling(clamp_min=-0.5, clamp_max=0.5)
        x = torch.randn(2, 3, 10, 10)
        expected = grads_after_step(model, (x,), model)
        compiled_model = torch.compile(model, backend="convops", options={"compiler": "eager"})
        actual = grads_after_step(model, (x,), compiled_model)
        torch.testing.assert_close(actual, expected)
        self.assertEqual(ops_that_ran(compiled_model, x), {f"convops::{OP}"})

    def test_bfloat16(self):
        model = KernelBenchSpelling().to(torch.bfloat16)
        x = torch.randn(2, 3, 10, 10, dtype=torch.bfloat16)
        compiled = compile_and_run(model, x)
        self.assertEqual(compiled.replaced, {OP: 1})
        assert_close_to_eager(model, (x,), compiled.outputs, atol=2e-2, rtol=2e-2)
