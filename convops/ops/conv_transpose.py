"""convops::conv_transpose2d and convops::conv_transpose3d — the whole parameter space of nn.ConvTranspose2d/3d."""
from __future__ import annotations

import torch


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
