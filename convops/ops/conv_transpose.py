"""convops::conv_transpose2d and convops::conv_transpose3d — the whole parameter space of nn.ConvTranspose2d/3d."""
from __future__ import annotations

import torch

from . import _shapes
from ._registry import register_autograd, register_fake


def conv_transpose2d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> torch.Tensor:
    """Same result as F.conv_transpose2d with the same arguments."""
    return torch.ops.convops.conv_transpose2d.default(input, weight, bias, stride, padding, output_padding, groups,
                                                      dilation)


def conv_transpose3d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> torch.Tensor:
    """Same result as F.conv_transpose3d with the same arguments."""
    return torch.ops.convops.conv_transpose3d.default(input, weight, bias, stride, padding, output_padding, groups,
                                                      dilation)


# ---- fake (meta) implementation: the shape and layout the kernels return (see csrc/conv_transpose.cpp) ----

def _fake(op: str, spatial_dims: int, input, weight, bias, stride, padding, output_padding, groups, dilation):
    unbatched = input.dim() == spatial_dims + 1
    torch._check(input.dim() == spatial_dims + 2 or unbatched,
                 lambda: f"{op}: expected input of rank {spatial_dims + 2}, got shape {tuple(input.shape)}")
    torch._check(weight.dim() == spatial_dims + 2,
                 lambda: f"{op}: expected weight of rank {spatial_dims + 2}, got shape {tuple(weight.shape)}")
    for name, values, minimum in (("stride", stride, 1), ("padding", padding, 0),
                                  ("output_padding", output_padding, 0), ("dilation", dilation, 1)):
        _shapes.check_param(op, name, values, spatial_dims, minimum)
    torch._check(groups > 0, lambda: f"{op}: groups must be positive, got {groups}")
    in_channels = input.shape[0 if unbatched else 1]
    torch._check(weight.shape[0] == in_channels,
                 lambda: f"{op}: input has {in_channels} channels but weight expects {weight.shape[0]}")
    torch._check(in_channels % groups == 0, lambda: f"{op}: weight dimension 0 must be divisible by groups")
    out_channels = weight.shape[1] * groups
    if bias is not None:
        torch._check(bias.dim() == 1 and bias.shape[0] == out_channels,
                     lambda: f"{op}: expected bias of shape ({out_channels},), got {tuple(bias.shape)}")
    sizes = []
    for i in range(spatial_dims):
        torch._check(output_padding[i] < stride[i] or output_padding[i] < dilation[i],
                     lambda: f"{op}: output_padding must be smaller than either stride or dilation")
        size = _shapes.conv_transpose_output_size(input.shape[-spatial_dims + i], weight.shape[2 + i], stride[i],
                                                  padding[i], output_padding[i], dilation[i])
        torch._check(size > 0, lambda: f"{op}: non-positive output size")
        sizes.append(size)
    if unbatched:
        return input.new_empty([out_channels, *sizes])
    return _shapes.empty_output(input, [input.shape[0], out_channels, *sizes])


@register_fake("convops::conv_transpose2d")
def _conv_transpose2d_fake(input, weight, bias=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0),
                           groups=1, dilation=(1, 1)):
    return _fake("convops::conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups,
                 dilation)


@register_fake("convops::conv_transpose3d")
def _conv_transpose3d_fake(input, weight, bias=None, stride=(1, 1, 1), padding=(0, 0, 0), output_padding=(0, 0, 0),
                           groups=1, dilation=(1, 1, 1)):
    return _fake("convops::conv_transpose3d", 3, input, weight, bias, stride, padding, output_padding, groups,
                 dilation)


# ---- autograd: ATen's own transposed-convolution backward, so gradients match F.conv_transpose*d ----

def _placeholder(like: torch.Tensor, shape) -> torch.Tensor:
    """A zero-stride stand-in of the given shape for an operand whose values backward never reads
    (convolution_backward takes both operands but reads only the one the requested gradient needs)."""
    return like.new_zeros(()).expand(shape)


def _setup_context(ctx, inputs, output):
    input, weight, bias, stride, padding, output_padding, groups, dilation = inputs
    needs_input, needs_weight = ctx.needs_input_grad[:2]
    # grad_input reads only the weight and grad_weight only the input: keep the other one's shape alone.
    ctx.save_for_backward(weight if needs_input else None, input if needs_weight else None)
    ctx.input_shape, ctx.weight_shape = input.shape, weight.shape
    ctx.unbatched = input.dim() == weight.dim() - 1
    ctx.bias_sizes = None if bias is None else list(bias.shape)
    ctx.params = (list(stride), list(padding), list(dilation), list(output_padding), groups)


def _backward(ctx, grad_output):
    weight, input = ctx.saved_tensors
    needs_input, needs_weight, needs_bias = ctx.needs_input_grad[:3]
    needs_bias = needs_bias and ctx.bias_sizes is not None
    if not (needs_input or needs_weight or needs_bias):
        return None, None, None, None, None, None, None, None
    input = _placeholder(grad_output, ctx.input_shape) if input is None else input
    weight = _placeholder(grad_output, ctx.weight_shape) if weight is None else weight
    stride, padding, dilation, output_padding, groups = ctx.params
    if ctx.unbatched:
        grad_output, input = grad_output.unsqueeze(0), input.unsqueeze(0)
    grad_input, grad_weight, grad_bias = torch.ops.aten.convolution_backward.default(
        grad_output, input, weight, ctx.bias_sizes, stride, padding, dilation, True, output_padding, groups,
        [needs_input, needs_weight, needs_bias])
    if ctx.unbatched and grad_input is not None:
        grad_input = grad_input.squeeze(0)
    return grad_input, grad_weight, grad_bias, None, None, None, None, None


register_autograd("convops::conv_transpose2d", _backward, _setup_context)
register_autograd("convops::conv_transpose3d", _backward, _setup_context)
