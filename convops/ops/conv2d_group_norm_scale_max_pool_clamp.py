"""convops::conv2d_group_norm_scale_max_pool_clamp — the fused block
clamp(max_pool2d(group_norm(conv2d(x)) * scale, pool_kernel), clamp_min, clamp_max)."""
from __future__ import annotations

import torch


def conv2d_group_norm_scale_max_pool_clamp(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                                           stride, padding, dilation, num_groups: int,
                                           gn_weight: torch.Tensor | None, gn_bias: torch.Tensor | None,
                                           eps: float, scale: torch.Tensor, pool_kernel,
                                           clamp_min: float | None = None,
                                           clamp_max: float | None = None) -> torch.Tensor:
    """Same result as
    clamp(max_pool2d(group_norm(conv2d(input, weight, bias, stride, padding, dilation), num_groups, gn_weight,
    gn_bias, eps) * scale, pool_kernel), clamp_min, clamp_max), with scale per channel: shape (C,1,1), (C,) or one
    value (pool stride = kernel, no padding, floor mode)."""
    return torch.ops.convops.conv2d_group_norm_scale_max_pool_clamp.default(
        input, weight, bias, stride, padding, dilation, num_groups, gn_weight, gn_bias, eps, scale, pool_kernel,
        clamp_min, clamp_max)
