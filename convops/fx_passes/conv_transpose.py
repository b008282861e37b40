"""conv_transpose2d / conv_transpose3d (every stride, padding, output_padding, groups, dilation) => the convops ops."""
from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.fx

from . import matching
from .base import ConvopsPass, Replacement
from .matching import CONV_TRANSPOSE, Constants, Declined


def _dims(node: torch.fx.Node) -> int | None:
    return next((d for d, spec in CONV_TRANSPOSE.items() if spec.matches(node)), None)


class ConvTransposePass(ConvopsPass):
    name = "conv_transpose"
    patterns = ("conv_transpose2d", "conv_transpose3d")

    def candidates(self, graph: torch.fx.Graph) -> Iterable[torch.fx.Node]:
        return [n for n in graph.nodes if _dims(n)]

    def pattern_of(self, anchor: torch.fx.Node) -> str:
        return f"conv_transpose{_dims(anchor)}d"

    def leaves_aten_paths(self, values: list) -> bool:
        """In TF32 and 16-bit, where the op would run ATen's composition, Inductor does better with the node:
        on UNet's k3 stride-2 layers it runs cuDNN's NHWC kernels, tf32 0.1422 / 0.2312 ms against the op's NCHW
        0.1996 / 0.3477, bf16 0.0867 / 0.1250 against 0.1457 / 0.2655 (H200, 2026-11-27 15:25-15:32 UTC). Not in
        strict fp32, where its NHWC kernels were the slower (0.7759 against 0.7057 ms on c256-128). The op's ATen path
        may itself run NHWC, on a channels-last copy of the input ("auto", `<op>.aten_layout`); Inductor still does
        better: the op's round trip ran at 0.53-0.80x of it on those layers (H200, 2026-11-28 08:35 UTC)."""
        dtype = values[0].dtype
        return dtype in (torch.float16, torch.bfloat16) or (dtype == torch.float32 and torch.backends.cudnn.allow_tf32)

    def match(self, node: torch.fx.Node) -> Replacement:
        dims = _dims(node)
        op = f"conv_transpose{dims}d"
        constants = Constants()
        a = CONV_TRANSPOSE[dims].bind(node)
        x = matching.tensor_value(a["input"], "input")
        w = matching.tensor_value(a["weight"], "weight")
        if x.dim() != dims + 2:
            raise Declined(f"the input has rank {x.dim()} (the op is applied to batched rank-{dims + 2} inputs)")
        hyper = {k: matching.expand(constants.read(a[k], k), dims, k)
                 for k in ("stride", "padding", "output_padding", "dilation")}
        groups = constants.read(a["groups"], "groups")
        if not isinstance(groups, int):
            raise Declined(f"groups={groups!r} is not an integer")
        matching.check_kernel_inputs(op, x, dims + 2, {"weight": w, "bias": matching.example_value(a["bias"])},
                                     [("transposed convolution", matching.example_value(node))])
        return Replacement(op, [node],
                           (a["input"], a["weight"], a["bias"], hyper["stride"], hyper["padding"],
                            hyper["output_padding"], groups, hyper["dilation"]), constants)
