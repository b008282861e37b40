"""depthwise conv2d -> pointwise 1x1 conv2d => convops::depthwise_separable_conv2d (the intermediate stays on chip)."""
from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.fx

from . import depthwise_conv, matching
from .base import ConvopsPass, Replacement
from .depthwise_conv import check_depthwise_inputs, is_depthwise_conv2d
from .matching import CONV2D, Constants, Declined, read_conv2d

OP = "depthwise_separable_conv2d"


def _is_pointwise_after_depthwise(node: torch.fx.Node) -> bool:
    if not CONV2D.matches(node):
        return False
    try:
        a = CONV2D.bind(node)
        w = matching.tensor_value(a["weight"], "weight")
    except Declined:
        return False
    source = a["input"]
    return (isinstance(source, torch.fx.Node) and is_depthwise_conv2d(source) and w.dim() == 4
            and matching.known(w.shape[2] == 1) and matching.known(w.shape[3] == 1))


class DepthwiseSeparablePass(ConvopsPass):
    name = "depthwise_separable"
    patterns = (OP,)
    uses = (depthwise_conv,)

    def candidates(self, graph: torch.fx.Graph) -> Iterable[torch.fx.Node]:
        return [n for n in graph.nodes if _is_pointwise_after_depthwise(n)]

    def match(self, node: torch.fx.Node) -> Replacement:
        constants = Constants()
        pointwise = read_conv2d(node, constants)
        depthwise = read_conv2d(pointwise.input, constants)
        if pointwise.stride != [1, 1]:
            raise Declined(f"the pointwise conv has stride {pointwise.stride} (the fused op takes stride 1)")
        if pointwise.padding != [0, 0]:
            raise Declined(f"the pointwise conv pads by {pointwise.padding} (the fused op takes no padding)")
        if not matching.known(pointwise.groups == 1):
            raise Declined(f"the pointwise conv has groups={pointwise.groups} (the fused op takes groups=1)")
        matching.only_user(depthwise.node, node, "depthwise conv")
        matching.check_nothing_between([depthwise.node, node])
        check_depthwise_inputs(depthwise, OP, [("depthwise conv", matching.example_value(depthwise.node)),
                                               ("pointwise conv", matching.example_value(node))],
                               {"pointwise weight": pointwise.weight_value,
                                "pointwise bias": matching.example_value(pointwise.bias)})
        return Replacement(OP, [depthwise.node, node],
                           (depthwise.input, depthwise.weight, depthwise.bias, pointwise.weight, pointwise.bias,
                            depthwise.stride, depthwise.padding, depthwise.dilation), constants)
