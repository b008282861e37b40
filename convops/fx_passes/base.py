"""The shape every convops pass has: find candidate nodes, match each into a Replacement or decline it with a reason,
and commit a Replacement by putting one call of the convops op where the matched nodes were. A pass may also leave to
the compiler the CUDA candidates for which the op would run ATen's composition anyway (leaves_aten_paths), where the
compiler was measured to do better with the nodes.

A pass follows Inductor's CustomGraphPass protocol: it is called with a torch.fx.Graph and has uuid(), a digest of
the source it runs, so it could be installed as an Inductor custom pass and so caches can key on it.
"""
from __future__ import annotations

import hashlib
import inspect
import logging
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from .. import path_choice
from ..path_choice import auto_path, path_policy
from . import matching
from .matching import Constants, Declined
from .report import Decline, GraphReport, source_line

log = logging.getLogger("convops")


@dataclass(frozen=True)
class NewTensor:
    """An argument the replacement creates: a 0-dim tensor like `like` holding `value` (a scale given as a number)."""
    like: torch.fx.Node
    value: float


@dataclass
class Replacement:
    """Replace `nodes` (graph order; the last one's value is the result) by torch.ops.convops.<op_name>(*args)."""
    op_name: str
    nodes: Sequence[torch.fx.Node]
    args: tuple
    constants: Constants = field(default_factory=Constants)


class ConvopsPass:
    """Base of the passes. Subclasses set name (the option that turns the pass off), patterns (the ops it may
    substitute: the report's names for its candidates) and implement candidates() and match()."""
    name: str = ""
    patterns: tuple[str, ...] = ()
    uses: tuple = ()  # other modules whose code the pass runs (they go into uuid())

    def leaves_aten_paths(self, values: list) -> bool:
        """Whether a candidate with these matched values, for which the op would run ATen's composition
        (decided_path), is left to the compiler. Only where that was measured to pay (a pass says where)."""
        return False

    def candidates(self, graph: torch.fx.Graph) -> Iterable[torch.fx.Node]:
        raise NotImplementedError

    def pattern_of(self, anchor: torch.fx.Node) -> str:
        return self.patterns[0]

    def match(self, anchor: torch.fx.Node) -> Replacement:
        """The replacement for this candidate; raises Declined with the reason it cannot be made exactly."""
        raise NotImplementedError

    def uuid(self) -> str:
        """Changes whenever the code this pass runs changes (its module, this one, the matching helpers, the path
        choice). (Where leaves_aten_paths holds, what the pass does also depends on the path policy and on what
        "auto" times on this GPU, which no digest of code can say.)"""
        modules = {sys.modules[type(self).__module__], sys.modules[__name__], matching, path_choice, *self.uses}
        digest = hashlib.sha256(type(self).__qualname__.encode())
        for source in sorted(_source(m) for m in modules):
            digest.update(source)
        return digest.hexdigest()

    def __call__(self, graph: torch.fx.Graph, report: GraphReport | None = None) -> GraphReport:
        report = report if report is not None else GraphReport(graph="?", patterns=self.patterns)
        removed: set[torch.fx.Node] = set()
        for anchor in list(self.candidates(graph)):
            if anchor in removed:
                continue
            try:
                replacement = self.match(anchor)
                result, values = _fake_result(replacement)
                if self.leaves_aten_paths(values):
                    _decline_where_aten_runs(replacement, values)
                replacement.constants.commit()
            except Declined as reason:
                report.declined.append(Decline(self.pattern_of(anchor), anchor.name, str(reason),
                                               source_line(anchor)))
                continue
            removed.update(replacement.nodes)
            _commit(graph, replacement, result, values)
            report.replaced[replacement.op_name] += 1
        return report


def _source(module) -> bytes:
    try:
        return inspect.getsource(module).encode()
    except (OSError, TypeError):  # installed without sources: the release stands in for them
        from .. import __version__
        return f"{module.__name__}@{__version__}".encode()


# ---------------------------------------------------------------------------------------------------------------------
# Committing a replacement
# ---------------------------------------------------------------------------------------------------------------------

def _fake_result(r: Replacement) -> tuple[Any, list]:
    """Runs the op's fake implementation on the matched values: the new node's example_value (and those of the
    arguments it creates), and a last check that the op accepts these arguments (a rejection declines the
    candidate instead of failing the compile)."""
    op = matching.op_overload(r.op_name)
    values = [matching.example_value(a.like if isinstance(a, NewTensor) else a) for a in r.args]
    fake_mode = next((v.fake_mode for v in values if hasattr(v, "fake_mode")), None)
    if fake_mode is None:
        raise Declined("the graph carries no fake tensors to check the op against")
    try:
        with fake_mode:
            values = [v.new_full((), a.value) if isinstance(a, NewTensor) else v for a, v in zip(r.args, values)]
            return op(*values), values
    except Exception as exc:  # noqa: BLE001 - any rejection by the op means: leave this candidate alone
        raise Declined(f"convops::{r.op_name} rejects these arguments ({type(exc).__name__}: {exc})") from None


# ---------------------------------------------------------------------------------------------------------------------
# Leaving ATen's compositions to the compiler
# ---------------------------------------------------------------------------------------------------------------------

def _decline_where_aten_runs(r: Replacement, values: list) -> None:
    """Declines a candidate for which the op would run ATen's composition anyway, so that the compiler, given the
    nodes, may choose their layout and fuse their neighbours (see the passes' leaves_aten_paths)."""
    if decided_path(r, values) == "aten":
        raise Declined(f"convops::{r.op_name} would run ATen's composition for these shapes (the path policy, or "
                       f"what \"auto\" timed: convops.path_choices()); the compiler keeps the nodes")


def decided_path(r: Replacement, values: list) -> str | None:
    """The path the op runs for the matched values on CUDA: under "auto", what it decides (or decided) for random
    tensors of their sizes, strides and dtypes (convops.path_choice.auto_path: the decision its first call would
    make, kept for that call); "aten" under the "aten" policy. None on other devices, with symbolic sizes, under the
    "convops" policy, where the op's call involves no decision, or where deciding failed (out of memory, say: the
    op then decides on its first call, as without the passes)."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not tensors or tensors[0].device.type != "cuda":
        return None
    policy = path_policy()
    if policy != "auto":
        return "aten" if policy == "aten" else None
    if any(_is_symbolic(v) for v in values):
        return None
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    try:
        with unset_fake_temporarily():
            generator = torch.Generator(device=tensors[0].device).manual_seed(0)  # the user's stream untouched
            real = [_random_like(a, v, generator) for a, v in zip(r.args, values)]
            return auto_path(matching.op_overload(r.op_name), *real)
    except Exception:  # noqa: BLE001 - no decision now is no worse than before the passes asked
        log.debug("convops: deciding convops::%s at compile time failed", r.op_name, exc_info=True)
        return None


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride()))
    if isinstance(value, (list, tuple)):
        return any(_is_symbolic(v) for v in value)
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _random_like(arg: Any, value: Any, generator: torch.Generator) -> Any:
    """A real argument for the op in place of a matched (fake) value: random normal values in its sizes, strides,
    storage offset (the decision keys on 16-byte alignment) and dtype, expanded (stride 0) dimensions included; a
    created scale: its value."""
    if not isinstance(value, torch.Tensor):
        return value
    if isinstance(arg, NewTensor):
        return torch.full((), arg.value, dtype=value.dtype, device=value.device)
    extent = 1 + sum((n - 1) * abs(st) for n, st in zip(value.shape, value.stride())) if value.numel() else 0
    storage = torch.empty(value.storage_offset() + extent, dtype=value.dtype, device=value.device)
    if storage.is_floating_point():
        storage.normal_(generator=generator)
    else:
        storage.zero_()
    return storage.as_strided(value.shape, value.stride(), value.storage_offset())


_COPIED_META = ("stack_trace", "nn_module_stack", "source_fn_stack")


def _commit(graph: torch.fx.Graph, r: Replacement, result: Any, values: list) -> None:
    last = r.nodes[-1]
    args = []
    with graph.inserting_before(last):
        for arg, value in zip(r.args, values):
            if isinstance(arg, NewTensor):
                arg = graph.call_method("new_full", (arg.like, (), arg.value))
                arg.meta["example_value"] = value
            args.append(arg)
        new = graph.create_node("call_function", matching.op_overload(r.op_name), tuple(args), name=r.op_name)
    new.meta.update({k: last.meta[k] for k in _COPIED_META if k in last.meta})
    new.meta["example_value"] = result
    last.replace_all_uses_with(new)
    inputs = {a for n in r.nodes for a in n.all_input_nodes}
    for node in reversed(r.nodes):
        graph.erase_node(node)
    _erase_orphaned_scalars(graph, inputs)


def _erase_orphaned_scalars(graph: torch.fx.Graph, nodes: set[torch.fx.Node]) -> None:
    """Under dynamic=True Dynamo passes float hyper-parameters as tensors read with .item(); the replacement takes
    them as constants, so the .item() calls that fed only the removed nodes go too."""
    for node in nodes:
        if node.op == "call_method" and node.target == "item" and not node.users:
            graph.erase_node(node)
