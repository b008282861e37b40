"""convops::conv_transpose2d and convops::conv_transpose3d — the whole parameter space of nn.ConvTranspose2d/3d."""
from __future__ import annotations

import torch

from . import _shapes
from ._registry import needs_ops, register_fake


@needs_ops
def conv_transpose2d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> torch.Tensor:
    """Same result as F.conv_transpose2d with the same arguments."""
    return torch.ops.convops.conv_transpose2d.default(input, weight, bias, stride, padding, output_padding, groups,
                                                      dilation)


@needs_ops
def conv_transpose3d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> torch.Tensor:
    """Same result as F.conv_transpose3d with the same arguments."""
    return torch.ops.convops.conv_transpose3d.default(input, weight, bias, stride, padding, output_padding, groups,
                                                      dilation)


# ---- fake (meta) implementation: the shape and layout the kernels return (see csrc/conv_transpose.cpp) ----

def _fake(op: str, spatial_dims: int, input, weight, bias, stride, padding, output_padding, groups, dilation):
    """The checks of csrc/conv_transpose.cpp, in its order and with its messages, then the output it returns."""
    _shapes.check_float_tensor(op, "input", input)
    # As in C++ (run_conv_transpose), an unbatched input is checked, and shown in messages, as a batch of one.
    unbatched = input.dim() == spatial_dims + 1
    batched = input.unsqueeze(0) if unbatched else input
    layout = "(N, C_in, H, W)" if spatial_dims == 2 else "(N, C_in, D, H, W)"
    _shapes.check_rank(op, "input", batched, spatial_dims + 2, layout)
    _shapes.check_like_input(op, "weight", weight, batched)
    _shapes.check_rank(op, "weight", weight, spatial_dims + 2,
                       "(C_in, C_out / groups, kH, kW)" if spatial_dims == 2 else "(C_in, C_out / groups, kD, kH, kW)")
    for name, values, minimum in (("stride", stride, 1), ("padding", padding, 0),
                                  ("output_padding", output_padding, 0), ("dilation", dilation, 1)):
        _shapes.check_param(op, name, values, spatial_dims, minimum)
    _shapes.check(op, groups > 0, "groups must be positive, got ", groups)
    in_channels = batched.shape[1]
    _shapes.check(op, weight.shape[0] >= groups, "expected weight to have at least groups=", groups,
                  " entries in dimension 0, got weight of shape ", weight.shape)
    _shapes.check(op, weight.shape[0] % groups == 0, "weight dimension 0 (", weight.shape[0],
                  ") must be divisible by groups=", groups)
    _shapes.check(op, weight.shape[0] == in_channels, "input has ", in_channels, " channels but weight of shape ",
                  weight.shape, " expects ", weight.shape[0])
    for i in range(spatial_dims):
        _shapes.check(op, weight.shape[2 + i] > 0, "kernel size must be positive, got weight of shape ", weight.shape)
        _shapes.check(op, output_padding[i] < stride[i] or output_padding[i] < dilation[i],
                      "output_padding must be smaller than either stride or dilation, got output_padding ",
                      output_padding, ", stride ", stride, ", dilation ", dilation)
    out_channels = weight.shape[1] * groups
    _shapes.check_optional_like_input(op, "bias", bias, batched, out_channels)
    _shapes.check_images_nonempty(op, batched.shape)
    sizes = []
    for i in range(spatial_dims):
        size, fits = _shapes.conv_transpose_output_size(batched.shape[2 + i], weight.shape[2 + i], stride[i],
                                                        padding[i], output_padding[i], dilation[i])
        _shapes.check(op, fits, "the stride ", stride, ", padding ", padding, ", output_padding ", output_padding,
                      " and dilation ", dilation, " with input of shape ", batched.shape, " and weight of shape ",
                      weight.shape, " take the output size past 64 bits")
        _shapes.check(op, size > 0, "input of shape ", batched.shape, " and weight of shape ", weight.shape,
                      " with stride ", stride, ", padding ", padding, ", output_padding ", output_padding,
                      " and dilation ", dilation, " give a non-positive output size in dimension ", 2 + i)
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
