"""depthwise conv2d (groups = C_in, any channel multiplier) => convops::depthwise_conv2d."""
from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.fx

from . import matching
from .base import ConvopsPass, Replacement
from .matching import CONV2D, Constants, Conv2dCall, Declined, read_conv2d


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


def check_depthwise_inputs(conv: Conv2dCall, op_name: str, outputs, more_tensors: dict | None = None) -> None:
    """check_kernel_inputs for a substitution whose input is a depthwise conv's, with its weight and bias and any
    more tensors the op takes."""
    tensors = {"weight": conv.weight_value, "bias": matching.example_value(conv.bias), **(more_tensors or {})}
    matching.check_kernel_inputs(op_name, conv.input_value, 4, tensors, outputs)


class DepthwiseConvPass(ConvopsPass):
    name = "depthwise_conv"
    patterns = ("depthwise_conv2d",)

    def candidates(self, graph: torch.fx.Graph) -> Iterable[torch.fx.Node]:
        return [n for n in graph.nodes if is_depthwise_conv2d(n)]

    def match(self, node: torch.fx.Node) -> Replacement:
        constants = Constants()
        conv = read_conv2d(node, constants)
        check_depthwise_inputs(conv, "depthwise_conv2d", [("convolution", matching.example_value(node))])
        return Replacement("depthwise_conv2d", [node],
                           (conv.input, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation), constants)
