"""convops::depthwise_separable_conv2d — depthwise conv2d followed by a pointwise 1x1 conv2d, in one kernel."""
from __future__ import annotations

import torch


def depthwise_separable_conv2d(input: torch.Tensor, depthwise_weight: torch.Tensor,
                               depthwise_bias: torch.Tensor | None, pointwise_weight: torch.Tensor,
                               pointwise_bias: torch.Tensor | None = None, stride=1, padding=0,
                               dilation=1) -> torch.Tensor:
    """Same result as F.conv2d(F.conv2d(input, depthwise_weight, depthwise_bias, stride, padding, dilation,
    groups=C_in), pointwise_weight, pointwise_bias)."""
    return torch.ops.convops.depthwise_separable_conv2d.default(
        input, depthwise_weight, depthwise_bias, pointwise_weight, pointwise_bias, stride, padding, dilation)
