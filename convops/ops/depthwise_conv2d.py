"""convops::depthwise_conv2d — groups = C_in convolution with channel multiplier m = C_out / C_in."""
from __future__ import annotations

import torch

from . import _shapes
from ._registry import needs_ops, register_fake

OP = "convops::depthwise_conv2d"


@needs_ops
def depthwise_conv2d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     stride=1, padding=0, dilation=1) -> torch.Tensor:
    """Same result as F.conv2d(input, weight, bias, stride, padding, dilation, groups=input.shape[1])."""
    return torch.ops.convops.depthwise_conv2d.default(input, weight, bias, stride, padding, dilation)


def pair(value) -> list:
    """int[2] arguments arrive as one int or as two (the schema broadcasts a single int)."""
    return [value, value] if isinstance(value, int) else list(value)


def check_depthwise(op: str, input, weight, bias, stride, padding, dilation, weight_name: str = "weight",
                    bias_name: str = "bias") -> list:
    """The checks of csrc/depthwise_conv2d.cpp, in its order and with its messages; returns the output's spatial
    size."""
    _shapes.check_float_tensor(op, "input", input)
    _shapes.check_rank(op, "input", input, 4, "(N, C_in, H, W)")
    _shapes.check_like_input(op, weight_name, weight, input)
    _shapes.check_rank(op, weight_name, weight, 4, "(multiplier * C_in, 1, kh, kw)")
    _shapes.check_param(op, "stride", stride, 2, 1)
    _shapes.check_param(op, "padding", padding, 2, 0)
    _shapes.check_param(op, "dilation", dilation, 2, 1)
    in_channels = input.shape[1]
    _shapes.check(op, in_channels > 0, "input must have at least one channel, got shape ", input.shape)
    _shapes.check_images_nonempty(op, input.shape)
    _shapes.check(op, weight.shape[1] == 1, "a depthwise weight has one input channel per group: expected shape (",
                  "multiplier * ", in_channels, ", 1, kh, kw), got ", weight.shape)
    _shapes.check(op, weight.shape[0] > 0 and weight.shape[0] % in_channels == 0,
                  weight_name, ".size(0) must be a positive multiple of C_in = ", in_channels, " (groups = C_in), got ",
                  weight_name, " ", weight.shape)
    _shapes.check(op, weight.shape[2] > 0 and weight.shape[3] > 0, "empty kernel: ", weight_name, " ", weight.shape)
    _shapes.check_optional_like_input(op, bias_name, bias, input, weight.shape[0])
    return _shapes.conv_output_sizes(op, input.shape[2:], weight.shape[2:], stride, padding, dilation)


@register_fake(OP)
def _depthwise_conv2d_fake(input, weight, bias=None, stride=1, padding=0, dilation=1):
    stride, padding, dilation = pair(stride), pair(padding), pair(dilation)
    out_hw = check_depthwise(OP, input, weight, bias, stride, padding, dilation)
    return _shapes.empty_output(input, [input.shape[0], weight.shape[0], *out_hw])
