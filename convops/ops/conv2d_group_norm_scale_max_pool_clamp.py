"""convops::conv2d_group_norm_scale_max_pool_clamp — the fused block
clamp(max_pool2d(group_norm(conv2d(x)) * scale, pool_kernel), clamp_min, clamp_max)."""
from __future__ import annotations

import math

import torch

from . import _registry, _shapes

_OP = "convops::conv2d_group_norm_scale_max_pool_clamp"
aten = torch.ops.aten


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


def _check_scale_shape(scale: torch.Tensor, channels) -> None:
    """(C,1,1), (1,C,1,1), (C,) or any single value, as check_scale_shape in the .cpp."""
    if scale.numel() == 1:
        return
    s = tuple(scale.shape)
    per_channel = ((len(s) == 1 and s[0] == channels) or (len(s) == 3 and s[0] == channels and s[1] == 1 and s[2] == 1)
                   or (len(s) == 4 and s[0] == 1 and s[1] == channels and s[2] == 1 and s[3] == 1))
    torch._check(per_channel, lambda: f"{_OP}: scale must have shape (C,1,1), (1,C,1,1), (C,) or hold a single value, "
                                      f"with C = {channels}, got {s}")


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
    torch._check(in_channels > 0,
                 lambda: f"{_OP}: input must have at least one channel, got shape {tuple(input.shape)}")
    torch._check(input.shape[2] > 0 and input.shape[3] > 0,
                 lambda: f"{_OP}: only an empty batch may be empty, got input of shape {tuple(input.shape)}")
    torch._check(weight.shape[1] == in_channels,
                 lambda: f"{_OP}: weight must have shape (C_out, C_in = {in_channels}, kh, kw) (the convolution has "
                         f"groups = 1), got {tuple(weight.shape)}")
    torch._check(channels > 0 and weight.shape[2] > 0 and weight.shape[3] > 0,
                 lambda: f"{_OP}: empty weight {tuple(weight.shape)}")
    _shapes.check_optional_like_input(_OP, "bias", bias, input, channels)
    torch._check(num_groups > 0 and channels % num_groups == 0,
                 lambda: f"{_OP}: num_groups must be positive and divide C_out = {channels}, got {num_groups}")
    _shapes.check_optional_like_input(_OP, "gn_weight", gn_weight, input, channels)
    _shapes.check_optional_like_input(_OP, "gn_bias", gn_bias, input, channels)
    torch._check(eps >= 0 and math.isfinite(eps), lambda: f"{_OP}: eps must be finite and non-negative, got {eps}")
    _shapes.check_like_input(_OP, "scale", scale, input)
    _check_scale_shape(scale, channels)
    conv_h, conv_w = _shapes.conv_output_sizes(_OP, input.shape[2:], weight.shape[2:], stride, padding, dilation)
    torch._check(pool_kernel[0] <= conv_h and pool_kernel[1] <= conv_w,
                 lambda: f"{_OP}: pool_kernel {list(pool_kernel)} is larger than the convolution output "
                         f"{[conv_h, conv_w]}")
    sizes = [input.shape[0], channels, conv_h // pool_kernel[0], conv_w // pool_kernel[1]]
    return _shapes.empty_output(input, sizes)


def _channel_scale(scale: torch.Tensor, channels: int) -> torch.Tensor:
    """scale as a (1, C, 1, 1) or (1, 1, 1, 1) tensor: (C,) means one factor per channel here, not per column."""
    return scale.reshape(1, -1, 1, 1) if scale.numel() != 1 else scale.reshape(1, 1, 1, 1)


def _setup_context(ctx, inputs, output):
    (input, weight, bias, stride, padding, dilation, num_groups, gn_weight, gn_bias, eps, scale, pool_kernel,
     clamp_min, clamp_max) = inputs
    # The backward recomputes the forward chain with ATen ops, which needs every tensor whatever is differentiated.
    ctx.save_for_backward(input, weight, bias, gn_weight, gn_bias, scale)
    ctx.params = (list(stride), list(padding), list(dilation), num_groups, eps, list(pool_kernel), clamp_min, clamp_max)


def _backward(ctx, grad):
    input, weight, bias, gn_weight, gn_bias, scale = ctx.saved_tensors
    stride, padding, dilation, num_groups, eps, pool_kernel, clamp_min, clamp_max = ctx.params
    need = ctx.needs_input_grad
    need_input, need_weight, need_bias = need[0], need[1], need[2] and bias is not None
    need_gamma, need_beta, need_scale = need[7] and gn_weight is not None, need[8] and gn_bias is not None, need[10]

    conv = aten.convolution(input, weight, bias, stride, padding, dilation, False, [0, 0], 1)
    n, c, h, w = conv.shape
    gn_out, mean, rstd = aten.native_group_norm(conv, gn_weight, gn_bias, n, c, h * w, num_groups, eps)
    s = _channel_scale(scale, c)
    z = gn_out * s
    pooled, indices = aten.max_pool2d_with_indices(z, pool_kernel, pool_kernel, [0, 0], [1, 1], False)

    # clamp's backward (ATen): the gradient passes where clamp_min <= pooled <= clamp_max.
    if clamp_min is not None or clamp_max is not None:
        keep = torch.ones_like(pooled, dtype=torch.bool)
        if clamp_min is not None:
            keep = keep & (pooled >= clamp_min)
        if clamp_max is not None:
            keep = keep & (pooled <= clamp_max)
        grad = torch.where(keep, grad, torch.zeros_like(grad))
    grad_z = aten.max_pool2d_with_indices_backward(grad, z, pool_kernel, pool_kernel, [0, 0], [1, 1], False, indices)

    grad_scale = None
    if need_scale:
        grad_scale = (grad_z * gn_out).sum(dim=(0, 2, 3) if scale.numel() != 1 else None).reshape(scale.shape)
    grad_input = grad_weight = grad_bias = grad_gamma = grad_beta = None
    if need_input or need_weight or need_bias or need_gamma or need_beta:
        grad_conv, grad_gamma, grad_beta = aten.native_group_norm_backward(
            grad_z * s, conv, mean, rstd, gn_weight, n, c, h * w, num_groups,
            [need_input or need_weight or need_bias, need_gamma, need_beta])
        if need_input or need_weight or need_bias:
            grad_input, grad_weight, grad_bias = aten.convolution_backward(
                grad_conv, input, weight, [c] if bias is not None else None, stride, padding, dilation, False,
                [0, 0], 1, [need_input, need_weight, need_bias])
    return (grad_input if need_input else None, grad_weight if need_weight else None,
            grad_bias if need_bias else None, None, None, None, None,
            grad_gamma if need_gamma else None, grad_beta if need_beta else None, None,
            grad_scale, None, None, None)


_registry.register_autograd(_OP, _backward, _setup_context)
