"""convops::depthwise_conv2d — groups = C_in convolution with channel multiplier m = C_out / C_in."""
from __future__ import annotations

import torch

from . import _shapes
from ._registry import register_autograd, register_fake

OP = "convops::depthwise_conv2d"


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
    torch._check(in_channels > 0,
                 lambda: f"{op}: input must have at least one channel, got shape {tuple(input.shape)}")
    torch._check(input.shape[2] > 0 and input.shape[3] > 0,
                 lambda: f"{op}: only an empty batch may be empty, got input of shape {tuple(input.shape)}")
    torch._check(weight.shape[1] == 1,
                 lambda: f"{op}: a depthwise weight has one input channel per group: expected shape "
                         f"(multiplier * {in_channels}, 1, kh, kw), got {tuple(weight.shape)}")
    torch._check(weight.shape[0] > 0 and weight.shape[0] % in_channels == 0,
                 lambda: f"{op}: {weight_name}.size(0) must be a positive multiple of C_in = {in_channels} "
                         f"(groups = C_in), got {weight_name} {tuple(weight.shape)}")
    torch._check(weight.shape[2] > 0 and weight.shape[3] > 0,
                 lambda: f"{op}: empty kernel: {weight_name} {tuple(weight.shape)}")
    _shapes.check_optional_like_input(op, bias_name, bias, input, weight.shape[0])
    return _shapes.conv_output_sizes(op, input.shape[2:], weight.shape[2:], stride, padding, dilation)


@register_fake(OP)
def _depthwise_conv2d_fake(input, weight, bias=None, stride=1, padding=0, dilation=1):
    stride, padding, dilation = pair(stride), pair(padding), pair(dilation)
    out_hw = check_depthwise(OP, input, weight, bias, stride, padding, dilation)
    return _shapes.empty_output(input, [input.shape[0], weight.shape[0], *out_hw])


def placeholder(saved: torch.Tensor | None, like: torch.Tensor, shape) -> torch.Tensor:
    """convolution_backward takes both operands even when one gradient is not wanted; it reads only the shape of
    the operand whose gradient partner is not requested, so an uninitialised tensor stands in for what was not
    saved."""
    return saved if saved is not None else like.new_empty(shape)


def _setup_context(ctx, inputs, output):
    input, weight, bias, stride, padding, dilation = inputs
    ctx.conv_args = (pair(stride), pair(padding), pair(dilation))
    ctx.input_shape, ctx.weight_shape = input.shape, weight.shape
    ctx.bias_sizes = None if bias is None else [bias.shape[0]]
    ctx.groups = input.shape[1]
    need_input, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    ctx.save_for_backward(input if need_weight else None, weight if need_input else None)


def _backward(ctx, grad):
    input, weight = ctx.saved_tensors
    input = placeholder(input, grad, ctx.input_shape)
    weight = placeholder(weight, grad, ctx.weight_shape)
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.bias_sizes is not None and ctx.needs_input_grad[2]]
    grad_input, grad_weight, grad_bias = torch.ops.aten.convolution_backward.default(
        grad, input, weight, ctx.bias_sizes, *ctx.conv_args, False, [0, 0], ctx.groups, mask)
    return grad_input, grad_weight, grad_bias, None, None, None


register_autograd(OP, _backward, _setup_context)
