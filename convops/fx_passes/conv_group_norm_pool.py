"""conv2d -> group_norm -> multiply by a per-channel scale -> max_pool2d [-> clamp]
=> convops::conv2d_group_norm_scale_max_pool_clamp.

A candidate is a max_pool2d whose input is group_norm(conv2d(...)) multiplied by something, in any spelling. The
clamp after the pool is optional: absorbed when the pool's only user is a clamp (or a clamp_min/clamp_max pair that
composes into one clamp), otherwise the fused op runs without bounds and the pool's users read its result.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.fx

from . import matching
from .base import ConvopsPass, NewTensor, Replacement
from .matching import (CLAMP, CLAMP_MAX, CLAMP_MIN, CONV2D, GROUP_NORM, MAX_POOL2D, MAX_POOL2D_WITH_INDICES, MUL,
                       Constants, Declined, read_conv2d)

OP = "conv2d_group_norm_scale_max_pool_clamp"


@dataclass
class _Chain:
    conv: torch.fx.Node
    norm: torch.fx.Node
    mul: torch.fx.Node
    pool: torch.fx.Node
    scale: object  # the other operand of the multiply: a node or a Python number


def _chain(pool: torch.fx.Node) -> _Chain | None:
    """The conv -> group_norm -> mul structure above a max_pool2d, whatever the spellings; None if absent."""
    if not (MAX_POOL2D.matches(pool) or MAX_POOL2D_WITH_INDICES.matches(pool)) or not pool.args:
        return None
    mul = matching.producer(pool.args[0], MUL)
    if mul is None or len(mul.args) != 2:
        return None
    for norm_side, scale_side in ((0, 1), (1, 0)):
        norm = matching.producer(mul.args[norm_side], GROUP_NORM)
        if norm is not None and norm.args and matching.producer(norm.args[0], CONV2D) is not None:
            if mul.args[scale_side] is norm:
                return None  # a square, not a scale
            return _Chain(norm.args[0], norm, mul, pool, mul.args[scale_side])
    return None


class ConvGroupNormPoolPass(ConvopsPass):
    name = "conv_group_norm_pool"
    patterns = (OP,)

    def candidates(self, graph: torch.fx.Graph) -> Iterable[torch.fx.Node]:
        return [n for n in graph.nodes if _chain(n) is not None]

    def match(self, pool_node: torch.fx.Node) -> Replacement:
        chain = _chain(pool_node)
        constants = Constants()
        conv = read_conv2d(chain.conv, constants)
        if not matching.known(conv.groups == 1):
            raise Declined(f"the conv has groups={conv.groups} (the fused op takes groups=1)")
        channels = conv.weight_value.shape[0]

        norm = GROUP_NORM.bind(chain.norm)
        num_groups = constants.read(norm["num_groups"], "num_groups")
        eps = constants.read(norm["eps"], "eps")
        if not isinstance(num_groups, int) or not isinstance(eps, (int, float)):
            raise Declined(f"num_groups={num_groups!r} / eps={eps!r} are not numbers")

        MUL.bind(chain.mul)  # declines out=
        matching.inplace_target_is(chain.mul, MUL, chain.norm, "scale")
        scale, scale_value = self._scale(chain, channels, constants, like=conv.input)

        pool_kernel = self._pool_kernel(chain.pool, constants)
        clamps, lo, hi = _absorbed_clamps(chain.pool, constants)

        nodes = [chain.conv, chain.norm, chain.mul, chain.pool, *clamps]
        for node, user, what in ((chain.conv, chain.norm, "conv"), (chain.norm, chain.mul, "group_norm"),
                                 (chain.mul, chain.pool, "scale multiply")):
            matching.only_user(node, user, what)
        matching.check_nothing_between(nodes)
        matching.check_kernel_inputs(
            OP, conv.input_value, 4,
            {"conv weight": conv.weight_value, "conv bias": matching.example_value(conv.bias),
             "group_norm weight": matching.example_value(norm["weight"]),
             "group_norm bias": matching.example_value(norm["bias"]), "scale": scale_value},
            [(n.name, matching.example_value(n)) for n in nodes])
        return Replacement(OP, nodes,
                           (conv.input, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, num_groups,
                            norm["weight"], norm["bias"], float(eps), scale, pool_kernel, lo, hi), constants)

    @staticmethod
    def _scale(chain: _Chain, channels, constants: Constants, like: torch.fx.Node):
        """The scale as the op takes it: a tensor of one value per channel or one value in all."""
        if isinstance(chain.scale, torch.fx.Node) and isinstance(matching.example_value(chain.scale),
                                                                  torch.Tensor):
            value = matching.example_value(chain.scale)
            shape = tuple(value.shape)
            per_channel = len(shape) <= 4 and (
                matching.known(value.numel() == 1)
                or (len(shape) >= 3 and matching.known(shape[-3] == channels)
                    and all(matching.known(s == 1) for s in shape[-2:]) and all(matching.known(s == 1)
                                                                                 for s in shape[:-3])))
            if not per_channel:
                raise Declined(f"the scale of shape {list(shape)} is not one value per channel: multiplied into an "
                               f"(N, C, H, W) tensor it broadcasts along other dimensions")
            return chain.scale, value
        number = constants.read(chain.scale, "scale")
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise Declined(f"the scale {number!r} is neither a tensor nor a number")
        return NewTensor(like, float(number)), None

    @staticmethod
    def _pool_kernel(pool: torch.fx.Node, constants: Constants) -> list[int]:
        if MAX_POOL2D_WITH_INDICES.matches(pool):
            raise Declined("the max_pool2d returns indices")
        a = MAX_POOL2D.bind(pool)
        kernel = matching.expand(constants.read(a["kernel_size"], "pool kernel"), 2, "pool kernel")
        stride = constants.read(a["stride"], "pool stride")
        stride = kernel if stride is None or stride == [] or stride == () else matching.expand(stride, 2,
                                                                                                "pool stride")
        if stride != kernel:
            raise Declined(f"the max_pool2d stride {stride} differs from its kernel {kernel}")
        if matching.expand(constants.read(a["padding"], "pool padding"), 2, "pool padding") != [0, 0]:
            raise Declined("the max_pool2d pads")
        if matching.expand(constants.read(a["dilation"], "pool dilation"), 2, "pool dilation") != [1, 1]:
            raise Declined("the max_pool2d dilates")
        if constants.read(a["ceil_mode"], "ceil_mode"):
            raise Declined("the max_pool2d uses ceil_mode")
        if constants.read(a["return_indices"], "return_indices"):
            raise Declined("the max_pool2d returns indices")
        return kernel


def _bounds(node: torch.fx.Node, constants: Constants):
    """(min, max) of a clamp-family call, None where unbounded; raises Declined for a tensor bound."""
    if CLAMP.matches(node):
        a = CLAMP.bind(node)
        return constants.read(a["min"], "clamp min"), constants.read(a["max"], "clamp max")
    if CLAMP_MIN.matches(node):
        return constants.read(CLAMP_MIN.bind(node)["min"], "clamp min"), None
    return None, constants.read(CLAMP_MAX.bind(node)["max"], "clamp max")


def _absorbed_clamps(pool: torch.fx.Node, constants: Constants):
    """The clamp step(s) that can join the fused op: the pool's only user if it is a clamp, and a second clamp that
    composes with it into one clamp(lo, hi) = min(max(x, lo), hi). Anything else stays in the graph."""
    nodes, lo, hi = [], None, None
    current = pool
    while len(nodes) < 2 and len(current.users) == 1:
        user = next(iter(current.users))
        if not any(s.matches(user) for s in (CLAMP, CLAMP_MIN, CLAMP_MAX)) or not user.args \
                or user.args[0] is not current:
            break
        trial = Constants()
        try:
            new_lo, new_hi = _bounds(user, trial)
        except Declined:
            break
        numbers = [b for b in (new_lo, new_hi) if b is not None]
        if not numbers or any(isinstance(b, bool) or not isinstance(b, (int, float)) or math.isnan(b)
                              for b in numbers):
            break
        if nodes:
            # clamp_min then clamp_max is clamp(lo, hi) exactly; clamp_max then clamp_min only when lo <= hi.
            if lo is not None and hi is None and new_lo is None:
                hi = new_hi
            elif hi is not None and lo is None and new_hi is None and new_lo <= hi:
                lo = new_lo
            else:
                break
        else:
            lo, hi = new_lo, new_hi
        constants.pending.extend(trial.pending)
        nodes.append(user)
        current = user
    return nodes, (None if lo is None else float(lo)), (None if hi is None else float(hi))
