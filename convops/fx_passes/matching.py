"""Matching helpers shared by the passes: recognising an op in any of its spellings, binding its arguments to names,
reading constant hyper-parameters, and the checks every substitution needs (dtype, device, a kernel to call).

The passes work on the graph Dynamo hands to a backend (torch IR, before AOTAutograd): one node per user call, every
hyper-parameter visible as an argument, shape metadata under node.meta["example_value"]. That IR is not normalised,
so an op is described by an OpSpec that lists its spellings (torch functions, Tensor methods, operators) and its
parameter names, and bind() turns any call into one dict of arguments.
"""
from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

_NO_DEFAULT = object()


class Declined(Exception):
    """A candidate the pass leaves to the rest of the compiler; the message is the reason the report shows."""


@dataclass(frozen=True)
class OpSpec:
    """One op as it can appear in a Dynamo graph.

    functions: call_function targets; methods: call_method names. inplace_* are the spellings that write their
    result into their first argument. params lists the parameter names in positional order, with defaults."""
    name: str
    params: tuple[tuple[str, Any], ...]
    functions: tuple[Callable, ...] = ()
    methods: tuple[str, ...] = ()
    inplace_functions: tuple[Callable, ...] = ()
    inplace_methods: tuple[str, ...] = ()

    def matches(self, node: torch.fx.Node) -> bool:
        if node.op == "call_function":
            return node.target in self.functions or node.target in self.inplace_functions
        if node.op == "call_method":
            return node.target in self.methods or node.target in self.inplace_methods
        return False

    def is_inplace(self, node: torch.fx.Node) -> bool:
        return node.target in self.inplace_functions or node.target in self.inplace_methods

    def bind(self, node: torch.fx.Node) -> dict[str, Any]:
        """The call's arguments by parameter name, defaults filled in. Raises Declined for what the op cannot take
        (an out= tensor, an argument this spec does not know)."""
        names = [p for p, _ in self.params]
        if len(node.args) > len(names):
            raise Declined(f"{node.name} has more positional arguments than {self.name} takes")
        bound = dict(zip(names, node.args))
        for key, value in node.kwargs.items():
            if key == "out":
                raise Declined(f"{node.name} writes into an out= tensor")
            if key not in names or key in bound:
                raise Declined(f"{node.name} has an argument {key!r} that {self.name} does not take")
            bound[key] = value
        for p, default in self.params:
            if p not in bound:
                if default is _NO_DEFAULT:
                    raise Declined(f"{node.name} lacks the argument {p!r}")
                bound[p] = default
        return bound


def _spec(name, params, **spellings) -> OpSpec:
    return OpSpec(name, tuple((p if isinstance(p, tuple) else (p, _NO_DEFAULT)) for p in params), **spellings)


F = torch.nn.functional

CONV2D = _spec("conv2d", ("input", "weight", ("bias", None), ("stride", 1), ("padding", 0), ("dilation", 1),
                          ("groups", 1)),
               functions=(torch.conv2d, torch.ops.aten.conv2d.default))
CONV_TRANSPOSE = {
    dims: _spec(f"conv_transpose{dims}d", ("input", "weight", ("bias", None), ("stride", 1), ("padding", 0),
                                           ("output_padding", 0), ("groups", 1), ("dilation", 1)),
                functions=(fn, aten_fn))
    for dims, fn, aten_fn in ((2, torch.conv_transpose2d, torch.ops.aten.conv_transpose2d.input),
                              (3, torch.conv_transpose3d, torch.ops.aten.conv_transpose3d.input))
}
GROUP_NORM = _spec("group_norm", ("input", "num_groups", ("weight", None), ("bias", None), ("eps", 1e-5),
                                  ("cudnn_enabled", True)),
                   functions=(F.group_norm, torch.group_norm))
MUL = _spec("mul", ("input", "other"),
            functions=(operator.mul, torch.mul, torch.multiply, torch.Tensor.mul, torch.Tensor.multiply),
            methods=("mul", "multiply", "__mul__", "__rmul__"),
            inplace_functions=(operator.imul, torch.Tensor.mul_, torch.Tensor.multiply_),
            inplace_methods=("mul_", "multiply_", "__imul__"))
# F.max_pool2d and nn.MaxPool2d reach the graph as the boolean_dispatch wrapper F.max_pool2d; torch.max_pool2d
# spells "stride = kernel" as an empty list; F.max_pool2d_with_indices always returns the indices.
MAX_POOL2D = _spec("max_pool2d", ("input", "kernel_size", ("stride", None), ("padding", 0), ("dilation", 1),
                                  ("ceil_mode", False), ("return_indices", False)),
                   functions=(F.max_pool2d, F._max_pool2d, torch.max_pool2d, torch.ops.aten.max_pool2d.default))
MAX_POOL2D_WITH_INDICES = _spec("max_pool2d_with_indices",
                                ("input", "kernel_size", ("stride", None), ("padding", 0), ("dilation", 1),
                                 ("ceil_mode", False), ("return_indices", True)),
                                functions=(F.max_pool2d_with_indices,))
CLAMP = _spec("clamp", ("input", ("min", None), ("max", None)),
              functions=(torch.clamp, torch.clip, torch.Tensor.clamp, torch.Tensor.clip),
              methods=("clamp", "clip"),
              inplace_functions=(torch.clamp_, torch.clip_, torch.Tensor.clamp_, torch.Tensor.clip_),
              inplace_methods=("clamp_", "clip_"))
CLAMP_MIN = _spec("clamp_min", ("input", "min"),
                  functions=(torch.clamp_min, torch.Tensor.clamp_min), methods=("clamp_min",),
                  inplace_functions=(torch.clamp_min_, torch.Tensor.clamp_min_), inplace_methods=("clamp_min_",))
CLAMP_MAX = _spec("clamp_max", ("input", "max"),
                  functions=(torch.clamp_max, torch.Tensor.clamp_max), methods=("clamp_max",),
                  inplace_functions=(torch.clamp_max_, torch.Tensor.clamp_max_), inplace_methods=("clamp_max_",))


# ---------------------------------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------------------------------

def example_value(node: Any) -> Any:
    """What Dynamo recorded for a node (a FakeTensor, a SymInt/SymFloat, a tuple); plain values pass through."""
    if not isinstance(node, torch.fx.Node):
        return node
    if "example_value" in node.meta:
        return node.meta["example_value"]
    if "val" in node.meta:
        return node.meta["val"]
    raise Declined(f"{node.name} carries no shape information")


def tensor_value(node: Any, what: str) -> torch.Tensor:
    value = example_value(node)
    if not isinstance(value, torch.Tensor):
        raise Declined(f"the {what} is not a tensor")
    return value


@dataclass
class Constants:
    """Reads hyper-parameters as Python values. A symbolic scalar (Dynamo turns float attributes into graph inputs
    under dynamic=True) is read through its hint and pinned with a guard only when the rewrite is committed, so a
    declined candidate leaves no guard behind and a rewritten graph recompiles if the value ever changes."""
    pending: list[tuple[Any, Any]] = field(default_factory=list)

    def read(self, value: Any, what: str) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(self.read(v, what) for v in value)
        if isinstance(value, torch.fx.Node):
            value = example_value(value)
        if isinstance(value, torch.Tensor):
            raise Declined(f"the {what} is a tensor, not a constant")
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            hint = _hint(value)
            if hint is None:
                raise Declined(f"the {what} depends on data")
            self.pending.append((value, hint))
            return hint
        return value

    def commit(self) -> None:
        from torch.fx.experimental.symbolic_shapes import guard_scalar
        for sym, hint in self.pending:
            if guard_scalar(sym) != hint:  # cannot differ for a backed symbol; a safety net, not a code path
                raise Declined("a symbolic hyper-parameter changed while guarding it")
        self.pending.clear()


def _hint(value):
    """The value Dynamo saw for a backed symbol; None for a data-dependent (unbacked) one."""
    hint = value.node.hint
    if hint is None:
        return None
    if isinstance(value, torch.SymInt):
        return int(hint)
    if isinstance(value, torch.SymFloat):
        return float(hint)
    return bool(hint)


def expand(value: Any, n: int, what: str) -> list[int]:
    """An int or a sequence of n ints (conv, pool arguments) as a list of n ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * n
    if isinstance(value, (list, tuple)) and len(value) == 1:
        return [value[0]] * n
    if isinstance(value, (list, tuple)) and len(value) == n and all(isinstance(v, int) for v in value):
        return list(value)
    raise Declined(f"the {what} {value!r} is not {n} integers")


def known(expr) -> bool:
    """True when a (possibly symbolic) boolean holds for every value of its symbols; adds no guard."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    return statically_known_true(expr)


def conv_padding(padding: Any, weight: torch.Tensor, dilation: list[int], n: int) -> list[int]:
    """Conv padding as n ints; the strings 'valid' and 'same' become the explicit padding they stand for where that
    padding is symmetric (for 'same': dilation * (kernel - 1) even in every dimension)."""
    if padding == "valid":
        return [0] * n
    if padding == "same":
        total = [dilation[i] * (int(weight.shape[2 + i]) - 1) for i in range(n)]
        if any(t % 2 for t in total):
            raise Declined("padding='same' pads asymmetrically here (an even dilated kernel extent)")
        return [t // 2 for t in total]
    return expand(padding, n, "padding")


# ---------------------------------------------------------------------------------------------------------------------
# Graph structure
# ---------------------------------------------------------------------------------------------------------------------

def producer(value: Any, spec: OpSpec | Sequence[OpSpec]) -> torch.fx.Node | None:
    """value's defining node when it is a call of the op (any spelling), else None."""
    specs = (spec,) if isinstance(spec, OpSpec) else tuple(spec)
    if isinstance(value, torch.fx.Node) and any(s.matches(value) for s in specs):
        return value
    return None


def only_user(node: torch.fx.Node, consumer: torch.fx.Node, what: str) -> None:
    """The rewrite removes node, so nothing but consumer may read it."""
    others = [u.name for u in node.users if u is not consumer]
    if others:
        raise Declined(f"the {what} output ({node.name}) is also used by {', '.join(others)}")


# Graph nodes that may write into a tensor: in-place methods and functions (trailing underscore), augmented
# assignment operators, item assignment, out= arguments.
_INPLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
                      operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift,
                      operator.irshift, operator.imatmul, operator.setitem}
# The same written as Tensor methods (`s.__iadd__(1.0)`, `torch.Tensor.__setitem__(s, i, v)`), which Dynamo records by
# their dunder names; a trailing underscore does not catch them.
_INPLACE_DUNDERS = {f"__{op.__name__}__" for op in _INPLACE_OPERATORS}


def may_mutate(node: torch.fx.Node) -> bool:
    if node.op not in ("call_function", "call_method"):
        return node.op == "call_module"
    if "out" in node.kwargs or node.target in _INPLACE_OPERATORS:
        return True
    if isinstance(node.target, torch._ops.OpOverload):
        return node.target._schema.is_mutable
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if (name.endswith("_") and not name.endswith("__")) or name in _INPLACE_DUNDERS:
        return True
    return node.op == "call_function" and _inplace_flag(node)


def _inplace_flag(node: torch.fx.Node) -> bool:
    """F.relu(x, inplace=True) and the other functionals with an `inplace` parameter, however it is passed."""
    if node.kwargs.get("inplace"):
        return True
    try:
        bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
    except (TypeError, ValueError):  # builtins without a signature, or a call this signature does not fit
        return False
    return bool(bound.arguments.get("inplace"))


def changes_global_state(node: torch.fx.Node) -> bool:
    """Grad mode and autocast switches, which Dynamo records as calls (torch._C._set_grad_enabled,
    torch.amp.autocast_mode._enter_autocast / _exit_autocast, ...)."""
    if node.op != "call_function":
        return False
    name = getattr(node.target, "__name__", "")
    return name.startswith(("_set_", "_enter_", "_exit_")) or "autocast" in name or "grad_mode" in name


def check_nothing_between(chain: Sequence[torch.fx.Node]) -> None:
    """The substitute op runs where the last node of the chain ran, reading its inputs there and under the grad mode
    and autocast state there. That is exact only if nothing between the first and the last node writes into a tensor
    (the chain's own in-place steps write only into the chain's private intermediates) or switches that state."""
    first, last = chain[0], chain[-1]
    inside = set(chain)
    node = first.next
    while node is not last:
        if node not in inside:
            if may_mutate(node):
                raise Declined(f"{node.name} may write into a tensor between {first.name} and {last.name}")
            if changes_global_state(node):
                raise Declined(f"{node.name} switches grad mode or autocast between {first.name} and {last.name}")
        node = node.next


def inplace_target_is(node: torch.fx.Node, spec: OpSpec, operand: torch.fx.Node, what: str) -> None:
    """An in-place step must write into the chain's intermediate, never into another tensor (a weight, a scale)."""
    if spec.is_inplace(node) and node.args[0] is not operand:
        raise Declined(f"{node.name} writes into the {what}, which is not private to the matched ops")


# ---------------------------------------------------------------------------------------------------------------------
# What the convops kernels accept
# ---------------------------------------------------------------------------------------------------------------------

_DTYPES = {"cpu": (torch.float32, torch.float16, torch.bfloat16, torch.float64),
           "cuda": (torch.float32, torch.float16, torch.bfloat16)}
_DISPATCH_KEY = {"cpu": "CPU", "cuda": "CUDA"}


def op_overload(name: str):
    """torch.ops.convops.<name>.default, or Declined when this build of convops lacks it."""
    from .._extension import has_ops
    if not has_ops() or not hasattr(torch.ops.convops, name):
        raise Declined(f"this build of convops has no op convops::{name}")
    return getattr(torch.ops.convops, name).default


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
        return tensor_value(self.input, "input")

    @property
    def weight_value(self) -> torch.Tensor:
        return tensor_value(self.weight, "weight")


def read_conv2d(node: torch.fx.Node, constants: Constants) -> Conv2dCall:
    a = CONV2D.bind(node)
    x = tensor_value(a["input"], "input")
    w = tensor_value(a["weight"], "weight")
    if x.dim() != 4:
        raise Declined(f"the input has rank {x.dim()} (the op takes batched (N, C, H, W) inputs)")
    if w.dim() != 4:
        raise Declined(f"the weight has rank {w.dim()} (a conv2d weight is (C_out, C_in / groups, kh, kw))")
    dilation = expand(constants.read(a["dilation"], "dilation"), 2, "dilation")
    return Conv2dCall(node, a["input"], a["weight"], a["bias"],
                      stride=expand(constants.read(a["stride"], "stride"), 2, "stride"),
                      padding=conv_padding(constants.read(a["padding"], "padding"), w, dilation, 2),
                      dilation=dilation,
                      groups=example_value(a["groups"]))


def check_kernel_inputs(op_name: str, input: torch.Tensor, rank: int, tensors: dict[str, Any],
                        outputs: Iterable[tuple[str, Any]]) -> None:
    """The checks every substitution shares: the input's rank, a dtype and device the op has a kernel for, every
    tensor argument in the input's dtype and on its device (the kernels take no mixed precision), and every replaced
    node producing the input's dtype (under autocast the graph computes in another dtype than its inputs)."""
    op_overload(op_name)
    if input.dim() != rank:
        raise Declined(f"the input has rank {input.dim()}, the op takes rank {rank}")
    device = input.device.type
    if device not in _DTYPES:
        raise Declined(f"convops has no kernels for device {device!r}")
    if input.dtype not in _DTYPES[device]:
        raise Declined(f"convops has no {device} kernel for {input.dtype}")
    if not torch._C._dispatch_has_kernel_for_dispatch_key(f"convops::{op_name}", _DISPATCH_KEY[device]):
        raise Declined(f"this build of convops has no {device} kernel for convops::{op_name}")
    for what, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise Declined(f"the {what} is not a tensor")
        if t.dtype != input.dtype:
            raise Declined(f"the {what} is {t.dtype} but the input is {input.dtype}")
        if t.device != input.device:
            raise Declined(f"the {what} is on {t.device} but the input is on {input.device}")
    for what, value in outputs:
        if not isinstance(value, torch.Tensor):
            raise Declined(f"the {what} does not produce one tensor")
        if value.dtype != input.dtype:
            raise Declined(f"the {what} computes in {value.dtype}, the input is {input.dtype} (autocast?)")
