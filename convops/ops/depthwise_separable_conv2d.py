"""convops::depthwise_separable_conv2d — depthwise conv2d followed by a pointwise 1x1 conv2d, in one kernel."""
from __future__ import annotations

import torch

from . import _shapes
from ._registry import register_autograd, register_fake
from .depthwise_conv2d import check_depthwise, pair, placeholder

OP = "convops::depthwise_separable_conv2d"


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
    torch._check(pointwise_weight.dim() == 4 and pointwise_weight.shape[0] > 0 and pointwise_weight.shape[1] == mid
                 and pointwise_weight.shape[2] == 1 and pointwise_weight.shape[3] == 1,
                 lambda: f"{OP}: expected pointwise_weight of shape (C_out, {mid}, 1, 1) with C_out > 0, "
                         f"got {tuple(pointwise_weight.shape)}")
    _shapes.check_optional_like_input(OP, "pointwise_bias", pointwise_bias, input, pointwise_weight.shape[0])
    return _shapes.empty_output(input, [input.shape[0], pointwise_weight.shape[0], *out_hw])


def _setup_context(ctx, inputs, output):
    input, dw_weight, dw_bias, pw_weight, pw_bias, stride, padding, dilation = inputs
    ctx.conv_args = (pair(stride), pair(padding), pair(dilation))
    ctx.groups = input.shape[1]
    ctx.shapes = (input.shape, dw_weight.shape, pw_weight.shape)
    ctx.dw_bias_sizes = None if dw_bias is None else [dw_bias.shape[0]]
    ctx.pw_bias_sizes = None if pw_bias is None else [pw_bias.shape[0]]
    need = ctx.needs_input_grad
    need_pw_weight = need[3]
    need_depthwise_grad = need[0] or need[1] or (dw_bias is not None and need[2])
    # The depthwise intermediate is recomputed (never kept from the fused forward) only for the pointwise weight's
    # gradient; the input feeds that and the depthwise weight's gradient, the depthwise weight that and the input's.
    ctx.save_for_backward(
        input if need_pw_weight or need[1] else None,
        dw_weight if need_pw_weight or need[0] else None,
        dw_bias if need_pw_weight else None,
        pw_weight if need_depthwise_grad else None,
    )


def _backward(ctx, grad):
    input, dw_weight, dw_bias, pw_weight = ctx.saved_tensors
    need = ctx.needs_input_grad
    stride, padding, dilation = ctx.conv_args
    input_shape, dw_shape, pw_shape = ctx.shapes
    mid_shape = [grad.shape[0], dw_shape[0], grad.shape[2], grad.shape[3]]
    need_mid = need[0] or need[1] or (ctx.dw_bias_sizes is not None and need[2])

    if need[3]:
        mid = torch.ops.aten.convolution.default(input, dw_weight, dw_bias, stride, padding, dilation, False, [0, 0],
                                                 ctx.groups)
    else:
        mid = grad.new_empty(mid_shape)
    grad_mid, grad_pw_weight, grad_pw_bias = torch.ops.aten.convolution_backward.default(
        grad, mid, placeholder(pw_weight, grad, pw_shape), ctx.pw_bias_sizes, [1, 1], [0, 0], [1, 1], False, [0, 0],
        1, [need_mid, need[3], ctx.pw_bias_sizes is not None and need[4]])

    grad_input = grad_dw_weight = grad_dw_bias = None
    if need_mid:
        grad_input, grad_dw_weight, grad_dw_bias = torch.ops.aten.convolution_backward.default(
            grad_mid, placeholder(input, grad, input_shape), placeholder(dw_weight, grad, dw_shape),
            ctx.dw_bias_sizes, stride, padding, dilation, False, [0, 0], ctx.groups,
            [need[0], need[1], ctx.dw_bias_sizes is not None and need[2]])
    return grad_input, grad_dw_weight, grad_dw_bias, grad_pw_weight, grad_pw_bias, None, None, None


register_autograd(OP, _backward, _setup_context)
