"""convops::depthwise_separable_conv2d — depthwise conv2d followed by a pointwise 1x1 conv2d, in one kernel."""
from __future__ import annotations

import torch

from . import _shapes
from ._registry import needs_ops, register_fake
from .depthwise_conv2d import check_depthwise, pair

OP = "convops::depthwise_separable_conv2d"


@needs_ops
def depthwise_separable_conv2d(input: torch.Tensor, depthwise_weight: torch.Tensor,
                               depthwise_bias: torch.Tensor | None, pointwise_weight: torch.Tensor,
                               pointwise_bias: torch.Tensor | None = None, stride=1, padding=0,
                               dilation=1) -> torch.Tensor:
    """Same result as F.conv2d(F.conv2d(input, depthwise_weight, depthwise_bias, stride, padding, dilation,
    groups=C_in), pointwise_weight, pointwise_bias)."""
    return torch.ops.convops.depthwise_separable_conv2d.default(
        input, depthwise_weight, depthwise_bias, pointwise_weight, pointwise_bias, stride, padding, dilation)


@register_fake(OP)
def _depthwise_separable_conv2d_fake(input, depthwise_weight, depthwise_bias, pointwise_weight,
                                     pointwise_bias=None, stride=1, padding=0, dilation=1):
    stride, padding, dilation = pair(stride), pair(padding), pair(dilation)
    out_hw = check_depthwise(OP, input, depthwise_weight, depthwise_bias, stride, padding, dilation,
                             "depthwise_weight", "depthwise_bias")
    _shapes.check_like_input(OP, "pointwise_weight", pointwise_weight, input)
    mid = depthwise_weight.shape[0]
    _shapes.check(OP, pointwise_weight.dim() == 4 and pointwise_weight.shape[0] > 0
                  and pointwise_weight.shape[1] == mid and pointwise_weight.shape[2] == 1
                  and pointwise_weight.shape[3] == 1,
                  "expected pointwise_weight of shape (C_out, ", mid, ", 1, 1) with C_out > 0, got ",
                  pointwise_weight.shape)
    _shapes.check_optional_like_input(OP, "pointwise_bias", pointwise_bias, input, pointwise_weight.shape[0])
    return _shapes.empty_output(input, [input.shape[0], pointwise_weight.shape[0], *out_hw])
