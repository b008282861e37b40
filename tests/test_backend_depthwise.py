"""The depthwise-separable and depthwise passes: spellings, expected graphs, declined candidates."""
from __future__ import annotations

import expecttest
import torch
import torch.nn as nn
import torch.nn.functional as F

from test_backend_helpers import (assert_close_to_eager, compile_and_run, grads_after_step, ops_that_ran,
                                  requires_ops)

SEPARABLE, DEPTHWISE = "depthwise_separable_conv2d", "depthwise_conv2d"


class KernelBenchSeparable(nn.Module):
    """KernelBench L1-86 as written there (stride, padding and dilation off their defaults here)."""

    def __init__(self, c_in=4, c_out=6, k=3, stride=2, padding=1, dilation=2, bias=False):
        super().__init__()
        self.depthwise = nn.Conv2d(c_in, c_in, k, stride=stride, padding=padding, dilation=dilation, groups=c_in,
                                   bias=bias)
        self.pointwise = nn.Conv2d(c_in, c_out, kernel_size=1, bias=bias)

    def forward(self, x):
        return self.pointwise(self.depthwise(x))


class FunctionalSeparable(nn.Module):
    """F.conv2d with keywords, padding='same' / 'valid', channel multiplier 2, biases on both convs."""

    def __init__(self):
        super().__init__()
        self.dw = nn.Parameter(torch.randn(8, 1, 3, 5))
        self.dw_bias = nn.Parameter(torch.randn(8))
        self.pw = nn.Parameter(torch.randn(3, 8, 1, 1))
        self.pw_bias = nn.Parameter(torch.randn(3))

    def forward(self, x):
        y = F.conv2d(x, self.dw, self.dw_bias, padding="same", groups=x.shape[1])
        return F.conv2d(y, weight=self.pw, bias=self.pw_bias, padding="valid")


class Depthwise(nn.Module):
    """Depthwise convs alone, across their hyper-parameters (KernelBench L1-82 is the first one)."""

    def __init__(self, c=4):
        super().__init__()
        self.plain = nn.Conv2d(c, c, 3, groups=c, bias=False)
        self.strided = nn.Conv2d(c, c, (5, 3), stride=2, padding=(1, 2), groups=c)
        self.dilated_multiplier = nn.Conv2d(c, 3 * c, 3, dilation=2, padding="same", groups=c)
        self.dense = nn.Conv2d(c, c, 3)            # not depthwise: left alone, not even a candidate
        self.grouped = nn.Conv2d(c, c, 3, groups=2)  # grouped, two channels per group: likewise

    def forward(self, x):
        return self.plain(x), self.strided(x), self.dilated_multiplier(x), self.dense(x), self.grouped(x)


class NotSeparable(nn.Module):
    """Depthwise convs followed by 1x1 convs that the fused op does not compute: the depthwise part is still
    substituted on its own."""

    def __init__(self, c=4):
        super().__init__()
        self.dw1, self.pw_strided = nn.Conv2d(c, c, 3, groups=c), nn.Conv2d(c, 2, 1, stride=2)
        self.dw2, self.pw_grouped = nn.Conv2d(c, c, 3, groups=c), nn.Conv2d(c, 2, 1, groups=2)
        self.dw3, self.pw3 = nn.Conv2d(c, c, 3, groups=c), nn.Conv2d(c, 2, 1)

    def forward(self, x):
        shared = self.dw3(x)
        return self.pw_strided(self.dw1(x)), self.pw_grouped(self.dw2(x)), self.pw3(shared), shared.relu()


@requires_ops(SEPARABLE, DEPTHWISE)
class TestDepthwise(expecttest.TestCase):
    def check(self, model, x, replaced, **tolerance):
        compiled = compile_and_run(model, x)
        self.assertEqual(compiled.frames, 1)
        self.assertEqual(compiled.replaced, replaced)
        assert_close_to_eager(model, (x,), compiled.outputs, **tolerance)
        return compiled

    def test_kernelbench_separable(self):
        compiled = self.check(KernelBenchSeparable(), torch.randn(2, 4, 11, 12), {SEPARABLE: 1})
        self.assertExpectedInline(compiled.report.before, """\
inputs: depthwise_weight, x, pointwise_weight
conv2d = torch.conv2d(x, depthwise_weight, None, (2, 2), (1, 1), (2, 2), 4)
conv2d_1 = torch.conv2d(conv2d, pointwise_weight, None, (1, 1), (0, 0), (1, 1), 1)
return (conv2d_1,)""")
        self.assertExpectedInline(compiled.report.after, """\
inputs: depthwise_weight, x, pointwise_weight
depthwise_separable_conv2d = convops.depthwise_separable_conv2d(x, depthwise_weight, None, pointwise_weight, None, [2, 2], [1, 1], [2, 2])
return (depthwise_separable_conv2d,)""")

    def test_functional_separable(self):
        compiled = self.check(FunctionalSeparable(), torch.randn(1, 4, 7, 9), {SEPARABLE: 1})
        self.assertExpectedInline(compiled.report.after, """\
inputs: dw, dw_bias, x, pw, pw_bias
depthwise_separable_conv2d = convops.depthwise_separable_conv2d(x, dw, dw_bias, pw, pw_bias, [1, 1], [1, 2], [1, 1])
return (depthwise_separable_conv2d,)""")

    def test_depthwise_hyper_parameters(self):
        compiled = self.check(Depthwise(), torch.randn(2, 4, 9, 10), {DEPTHWISE: 3})
        self.assertExpectedInline(compiled.report.after, """\
inputs: plain_weight, x, strided_weight, strided_bias, dilated_multiplier_weight, dilated_multiplier_bias, dense_weight, dense_bias, grouped_weight, grouped_bias
depthwise_conv2d = convops.depthwise_conv2d(x, plain_weight, None, [1, 1], [0, 0], [1, 1])
depthwise_conv2d_1 = convops.depthwise_conv2d(x, strided_weight, strided_bias, [2, 2], [1, 2], [1, 1])
depthwise_conv2d_2 = convops.depthwise_conv2d(x, dilated_multiplier_weight, dilated_multiplier_bias, [1, 1], [2, 2], [2, 2])
conv2d_3 = torch.conv2d(x, dense_weight, dense_bias, (1, 1), (0, 0), (1, 1), 1)
conv2d_4 = torch.conv2d(x, grouped_weight, grouped_bias, (1, 1), (0, 0), (1, 1), 2)
return (depthwise_conv2d, depthwise_conv2d_1, depthwise_conv2d_2, conv2d_3, conv2d_4)""")

    def test_not_separable(self):
        compiled = self.check(NotSeparable(), torch.randn(2, 4, 9, 10), {DEPTHWISE: 3})
        self.assertExpectedInline(compiled.declines(), """\
depthwise_separable_conv2d conv2d_2: the pointwise conv has stride [2, 2] (the fused op takes stride 1)
depthwise_separable_conv2d conv2d_4: the pointwise conv has groups=2 (the fused op takes groups=1)
depthwise_separable_conv2d conv2d_5: the depthwise conv output (shared) is also used by relu""")

    def test_declined(self):
        def fn(x, unbatched, w, w4):
            same_even = F.conv2d(x, w4, padding="same", groups=4)  # would pad one side more than the other
            with torch.autocast("cpu", dtype=torch.bfloat16):
                autocast = F.conv2d(x, w, groups=4)  # computes in bfloat16 from float32 inputs
            return same_even, autocast, F.conv2d(unbatched, w, groups=4)

        args = (torch.randn(1, 4, 8, 8), torch.randn(4, 8, 8), torch.randn(4, 1, 3, 3), torch.randn(4, 1, 4, 4))
        compiled = compile_and_run(fn, *args)
        self.assertEqual(compiled.replaced, {})
        self.assertExpectedInline(compiled.declines(), """\
depthwise_conv2d same_even: padding='same' pads asymmetrically here (an even dilated kernel extent)
depthwise_conv2d autocast: the convolution computes in torch.bfloat16, the input is torch.float32 (autocast?)
depthwise_conv2d conv2d_2: the input has rank 3 (the op takes batched (N, C, H, W) inputs)""")
        torch.testing.assert_close(compiled.outputs, fn(*args))

    def test_dynamic_shapes(self):
        # dynamic=True makes even the channel count symbolic, and groups=x.shape[1] with it: the passes compare it
        # symbolically and specialise nothing, so a new batch and a new image size reuse the graph.
        for model, replaced in ((FunctionalSeparable(), {SEPARABLE: 1}), (Depthwise(), {DEPTHWISE: 3})):
            compiled = compile_and_run(model, torch.randn(2, 4, 9, 10), dynamic=True)
            self.assertEqual(compiled.replaced, replaced)
            x = torch.randn(3, 4, 11, 13)
            assert_close_to_eager(model, (x,), compiled.fn(x))
            self.assertEqual(compiled.frames, 1)

    def test_float64_and_channels_last(self):
        model = KernelBenchSeparable().double()
        x = torch.randn(2, 4, 11, 12, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
        self.check(model, x, {SEPARABLE: 1})

    def test_training_step_matches_eager(self):
        model = nn.Sequential(KernelBenchSeparable(bias=True), nn.Conv2d(6, 6, 3, groups=6))
        x = torch.randn(2, 4, 12, 12)
        expected = grads_after_step(model, (x,), model)
        compiled_model = torch.compile(model, backend="convops", options={"compiler": "eager"})
        actual = grads_after_step(model, (x,), compiled_model)
        torch.testing.assert_close(actual, expected)
        self.assertEqual(ops_that_ran(compiled_model, x), {f"convops::{SEPARABLE}", f"convops::{DEPTHWISE}"})
