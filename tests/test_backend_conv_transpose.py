"""The conv_transpose2d / conv_transpose3d pass: spellings, expected graphs, declined candidates."""
from __future__ import annotations

import expecttest
import torch
import torch.nn as nn
import torch.nn.functional as F

from test_backend_helpers import (assert_close_to_eager, compile_and_run, grads_after_step, ops_that_ran,
                                  requires_ops)

T2D, T3D = "conv_transpose2d", "conv_transpose3d"


class Transposed(nn.Module):
    """KernelBench L1-65 (asymmetric kernel) and L1-70 (3-d) spellings, every hyper-parameter off its default, the
    functional form, and output_size= (nn.ConvTranspose2d computes the output padding from it)."""

    def __init__(self):
        super().__init__()
        self.kernelbench_2d = nn.ConvTranspose2d(4, 6, (3, 7), bias=False)
        self.everything_2d = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2,
                                                dilation=2)
        self.kernelbench_3d = nn.ConvTranspose3d(4, 2, 3, stride=(1, 2, 1), padding=(0, 1, 1))
        self.weight = nn.Parameter(torch.randn(4, 3, 2, 2))

    def forward(self, x, v):
        return (self.kernelbench_2d(x), self.everything_2d(x), self.kernelbench_3d(v),
                F.conv_transpose2d(x, self.weight, stride=2), self.everything_2d(x, output_size=[16, 18]))


@requires_ops(T2D, T3D)
class TestConvTranspose(expecttest.TestCase):
    def test_spellings(self):
        model = Transposed()
        x, v = torch.randn(2, 4, 7, 8), torch.randn(1, 4, 3, 4, 5)
        compiled = compile_and_run(model, x, v)
        self.assertEqual(compiled.frames, 1)
        self.assertEqual(compiled.replaced, {T2D: 4, T3D: 1})
        self.assertExpectedInline(compiled.report.after, """\
inputs: kernelbench_2d_weight, x, everything_2d_weight, everything_2d_bias, kernelbench_3d_weight, kernelbench_3d_bias, v, weight
conv_transpose2d_4 = convops.conv_transpose2d(x, kernelbench_2d_weight, None, [1, 1], [0, 0], [0, 0], 1, [1, 1])
conv_transpose2d_5 = convops.conv_transpose2d(x, everything_2d_weight, everything_2d_bias, [2, 2], [1, 1], [1, 1], 2, [2, 2])
conv_transpose3d_1 = convops.conv_transpose3d(v, kernelbench_3d_weight, kernelbench_3d_bias, [1, 2, 1], [0, 1, 1], [0, 0, 0], 1, [1, 1, 1])
conv_transpose2d_6 = convops.conv_transpose2d(x, weight, None, [2, 2], [0, 0], [0, 0], 1, [1, 1])
conv_transpose2d_7 = convops.conv_transpose2d(x, everything_2d_weight, everything_2d_bias, [2, 2], [1, 1], [1, 1], 2, [2, 2])
return (conv_transpose2d_4, conv_transpose2d_5, conv_transpose3d_1, conv_transpose2d_6, conv_transpose2d_7)""")
        assert_close_to_eager(model, (x, v), compiled.outputs)

    def test_dynamic_shapes(self):
        model = nn.Sequential(nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1, groups=2))
        compiled = compile_and_run(model, torch.randn(2, 4, 5, 6), dynamic=True)
        self.assertEqual(compiled.replaced, {T2D: 1})
        x = torch.randn(3, 4, 7, 9)
        assert_close_to_eager(model, (x,), compiled.fn(x))
        self.assertEqual(compiled.frames, 1)

    def test_declined(self):
        def fn(unbatched, w):
            return F.conv_transpose2d(unbatched, w)

        args = (torch.randn(4, 5, 5), torch.randn(4, 2, 3, 3))
        compiled = compile_and_run(fn, *args)
        self.assertEqual(compiled.replaced, {})
        self.assertExpectedInline(compiled.declines(), """conv_transpose2d conv_transpose2d: the input has rank 3 (the op is applied to batched rank-4 inputs)""")

    def test_training_step_matches_eager(self):
        model = nn.Sequential(nn.ConvTranspose2d(4, 4, 3, stride=2, groups=2), nn.Tanh(),
                              nn.ConvTranspose2d(4, 2, (2, 3)))
        x = torch.randn(2, 4, 5, 6)
        expected = grads_after_step(model, (x,), model)
        compiled_model = torch.compile(model, backend="convops", options={"compiler": "eager"})
        actual = grads_after_step(model, (x,), compiled_model)
        torch.testing.assert_close(actual, expected)
        self.assertEqual(ops_that_ran(compiled_model, x), {f"convops::{T2D}"})
