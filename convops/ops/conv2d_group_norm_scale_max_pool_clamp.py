"""convops::conv2d_group_norm_scale_max_pool_clamp — the fused block
clamp(max_pool2d(group_norm(conv2d(x)) * scale, pool_kernel), clamp_min, clamp_max)."""
from __future__ import annotations

import math

import torch

from . import _registry, _shapes

_OP = "convops::conv2d_group_norm_scale_max_pool_clamp"


@_registry.needs_ops
def conv2d_group_norm_scale_max_pool_clamp(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                                           stride, padding, dilation, num_groups: int,
                                           gn_weight: torch.Tensor | None, gn_bias: torch.Tensor | None,
                                           eps: float, scale: torch.Tensor, pool_kernel,
                                           clamp_min: float | None = None,
                                           clamp_max: float | None = None) -> torch.Tensor:
    """Same result as
    clamp(max_pool2d(group_norm(conv2d(input, weight, bias, stride, padding, dilation), num_groups, gn_weight,
    gn_bias, eps) * scale, pool_kernel), clamp_min, clamp_max) (pool stride = kernel, no padding, floor mode) for a
    scale of shape (C, 1, 1), (1, C, 1, 1) or one value. A (C,) scale is taken as one value per channel, i.e. as its
    (C, 1, 1) view: `* scale` with a (C,) tensor would broadcast it along W instead."""
    return torch.ops.convops.conv2d_group_norm_scale_max_pool_clamp.default(
        input, weight, bias, stride, padding, dilation, num_groups, gn_weight, gn_bias, eps, scale, pool_kernel,
        clamp_min, clamp_max)


def _check_scale_shape(scale: torch.Tensor, channels) -> None:
    """(C,1,1), (1,C,1,1), (C,) or any single value, as check_scale_shape in the .cpp."""
    if scale.numel() == 1:
        return
    s = tuple(scale.shape)
    per_channel = ((len(s) == 1 and s[0] == channels) or (len(s) == 3 and s[0] == channels and s[1] == 1 and s[2] == 1)
                   or (len(s) == 4 and s[0] == 1 and s[1] == channels and s[2] == 1 and s[3] == 1))
    _shapes.check(_OP, per_channel, "scale must have shape (C,1,1), (1,C,1,1), (C,) or hold a single value, with C = ",
                  channels, ", got ", s)


@_registry.register_fake(_OP)
def _fake(input, weight, bias, stride, padding, dilation, num_groups, gn_weight, gn_bias, eps, scale, pool_kernel,
          clamp_min=None, clamp_max=None):
    # The checks of csrc/conv2d_group_norm_scale_max_pool_clamp.cpp, in its order and with its messages.
    _shapes.check_float_tensor(_OP, "input", input)
    _shapes.check_rank(_OP, "input", input, 4, "(N, C_in, H, W)")
    _shapes.check_like_input(_OP, "weight", weight, input)
    _shapes.check_rank(_OP, "weight", weight, 4, "(C_out, C_in, kh, kw)")
    _shapes.check_param(_OP, "stride", stride, 2, 1)
    _shapes.check_param(_OP, "padding", padding, 2, 0)
    _shapes.check_param(_OP, "dilation", dilation, 2, 1)
    _shapes.check_param(_OP, "pool_kernel", pool_kernel, 2, 1)
    in_channels, channels = input.shape[1], weight.shape[0]
    _shapes.check(_OP, in_channels > 0, "input must have at least one channel, got shape ", input.shape)
    _shapes.check_images_nonempty(_OP, input.shape)
    _shapes.check(_OP, weight.shape[1] == in_channels, "weight must have shape (C_out, C_in = ", in_channels,
                  ", kh, kw) (the convolution has groups = 1), got ", weight.shape)
    _shapes.check(_OP, channels > 0 and weight.shape[2] > 0 and weight.shape[3] > 0, "empty weight ", weight.shape)
    _shapes.check_optional_like_input(_OP, "bias", bias, input, channels)
    _shapes.check(_OP, num_groups > 0 and channels % num_groups == 0, "num_groups must be positive and divide C_out = ",
                  channels, ", got ", num_groups)
    _shapes.check_optional_like_input(_OP, "gn_weight", gn_weight, input, channels)
    _shapes.check_optional_like_input(_OP, "gn_bias", gn_bias, input, channels)
    # C++ prints the double it received: float() hands c10_str a float whether eps came as an int or a float.
    _shapes.check(_OP, eps >= 0 and math.isfinite(eps), "eps must be finite and non-negative, got ", float(eps))
    _shapes.check_like_input(_OP, "scale", scale, input)
    _check_scale_shape(scale, channels)
    conv_h, conv_w = _shapes.conv_output_sizes(_OP, input.shape[2:], weight.shape[2:], stride, padding, dilation)
    _shapes.check(_OP, pool_kernel[0] <= conv_h and pool_kernel[1] <= conv_w, "pool_kernel ", pool_kernel,
                  " is larger than the convolution output ", [conv_h, conv_w])
    sizes = [input.shape[0], channels, conv_h // pool_kernel[0], conv_w // pool_kernel[1]]
    return _shapes.empty_output(input, sizes)
