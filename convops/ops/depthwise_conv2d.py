"""convops::depthwise_conv2d — groups = C_in convolution with channel multiplier m = C_out / C_in."""
from __future__ import annotations

import torch


def depthwise_conv2d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     stride=1, padding=0, dilation=1) -> torch.Tensor:
    """Same result as F.conv2d(input, weight, bias, stride, padding, dilation, groups=input.shape[1])."""
    return torch.ops.convops.depthwise_conv2d.default(input, weight, bias, stride, padding, dilation)
