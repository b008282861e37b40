"""depthwise conv2d (groups = C_in, any channel multiplier) => convops::depthwise_conv2d."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from . import matching
from .base import ConvopsPass, Replacement
from .matching import CONV2D, Constants, Declined


@dataclass
class Conv2dCall:
    """A conv2d call with its arguments read as constants (stride, padding, dilation as two ints each)."""
    node: torch.fx.Node
    input: torch.fx.Node
    weight: torch.fx.Node
    bias: Any
    stride: list[int]
    padding: list[int]
    dilation: list[int]
    groups: Any  # an int, or a SymInt where the model passes x.shape[1]: compared symbolically, never specialised

    @property
    def input_value(self) -> torch.Tensor:
        return matching.tensor_value(self.input, "input")

    @property
    def weight_value(self) -> torch.Tensor:
        return matching.tensor_value(self.weight, "weight")


def read_conv2d(node: torch.fx.Node, constants: Constants) -> Conv2dCall:
    a = CONV2D.bind(node)
    x = matching.tensor_value(a["input"], "input")
    w = matching.tensor_value(a["weight"], "weight")
    if x.dim() != 4 or w.dim() != 4:
        raise Declined(f"the input has rank {x.dim()} (the op takes batched (N, C, H, W) inputs)")
    dilation = matching.expand(constants.read(a["dilation"], "dilation"), 2, "dilation")
    return Conv2dCall(node, a["input"], a["weight"], a["bias"],
                      stride=matching.expand(constants.read(a["stride"], "stride"), 2, "stride"),
                      padding=matching.conv_padding(constants.read(a["padding"], "padding"), w, dilation, 2),
                      dilation=dilation,
                      groups=matching.example_value(a["groups"]))


def is_depthwise_conv2d(node: torch.fx.Node) -> bool:
    """A conv2d with one input channel per group and more than one group: what the depthwise kernels compute.
    (A one-channel dense conv is left alone: it is depthwise only on paper.) groups may be symbolic (groups=
    x.shape[1] under dynamic shapes): the depthwise ops take no groups argument, so it need not be a constant."""
    if not CONV2D.matches(node):
        return False
    try:
        a = CONV2D.bind(node)
        x = matching.tensor_value(a["input"], "input")
        w = matching.tensor_value(a["weight"], "weight")
        groups = matching.example_value(a["groups"])
    except Declined:
        return False
    return (isinstance(groups, (int, torch.SymInt)) and w.dim() == 4 and x.dim() >= 3
            and matching.known(groups > 1) and matching.known(w.shape[1] == 1)
            and matching.known(x.shape[-3] == groups))


def check_depthwise(conv: Conv2dCall, op_name: str, outputs) -> None:
    matching.check_kernel_inputs(op_name, conv.input_value, 4,
                                 {"weight": conv.weight_value, "bias": matching.example_value(conv.bias)}, outputs)


class DepthwiseConvPass(ConvopsPass):
    name = "depthwise_conv"
    patterns = ("depthwise_conv2d",)

    def candidates(self, graph: torch.fx.Graph) -> Iterable[torch.fx.Node]:
        return [n for n in graph.nodes if is_depthwise_conv2d(n)]

    def match(self, node: torch.fx.Node) -> Replacement:
        constants = Constants()
        conv = read_conv2d(node, constants)
        check_depthwise(conv, "depthwise_conv2d", [("convolution", matching.example_value(node))])
        return Replacement("depthwise_conv2d", [node],
                           (conv.input, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation), constants)
