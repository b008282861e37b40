"""Runs the convops passes over one graph, in order, each one isolated: a pass that raises is rolled back (its graph
copy restored) with a warning, and the other passes' work stands."""
from __future__ import annotations

import copy
import hashlib
import logging
import warnings
from collections.abc import Iterable

import torch
import torch.fx

from .base import ConvopsPass
from .conv_group_norm_pool import ConvGroupNormPoolPass
from .conv_transpose import ConvTransposePass
from .depthwise_conv import DepthwiseConvPass
from .depthwise_separable import DepthwiseSeparablePass
from .report import GraphReport, format_graph, wants_graph_text

log = logging.getLogger("convops")

# Most specific first: the fused chain and the separable pair must see their convs before the depthwise pass takes
# them one by one.
PASSES: tuple[type[ConvopsPass], ...] = (ConvGroupNormPoolPass, DepthwiseSeparablePass, DepthwiseConvPass,
                                         ConvTransposePass)
PASS_NAMES: tuple[str, ...] = tuple(p.name for p in PASSES)


def clone_graph(graph: torch.fx.Graph) -> torch.fx.Graph:
    """A copy of the graph to roll back to. Node meta is shared, not copied; attributes Dynamo sets on nodes outside
    meta (a placeholder's _dynamo_source, which AOTAutograd reads) are carried over."""
    clone = torch.fx.Graph(tracer_cls=graph._tracer_cls)
    nodes: dict[torch.fx.Node, torch.fx.Node] = {}
    result, old_output = clone.graph_copy(graph, nodes, return_output_node=True)
    clone.output(result, type_expr=getattr(old_output, "type", None)).meta = copy.copy(old_output.meta)
    clone._codegen = copy.deepcopy(graph._codegen)
    for old, new in nodes.items():
        for key, value in vars(old).items():
            if key not in vars(new):
                setattr(new, key, value)
    return clone


class PassManager:
    """The enabled passes, in PASSES order, run over a GraphModule with each pass rolled back on failure (run()), and
    a uuid() of them all for caches to key on. (Each pass alone follows Inductor's CustomGraphPass protocol; the
    manager does not, since its rollback replaces the module's Graph object rather than mutating the one given.)"""

    def __init__(self, enabled: Iterable[str] | None = None):
        enabled = set(PASS_NAMES if enabled is None else enabled)
        unknown = enabled - set(PASS_NAMES)
        if unknown:
            raise ValueError(f"convops: unknown pass(es) {sorted(unknown)}; the passes are {list(PASS_NAMES)}")
        self.passes = [cls() for cls in PASSES if cls.name in enabled]

    @property
    def patterns(self) -> tuple[str, ...]:
        return tuple(p for ps in self.passes for p in ps.patterns)

    def uuid(self) -> str:
        digest = hashlib.sha256()
        for p in self.passes:
            digest.update(f"{p.name}:{p.uuid()};".encode())
        return digest.hexdigest()

    def run(self, gm: torch.fx.GraphModule, graph_id: str = "?") -> GraphReport:
        """Rewrites gm in place; never raises."""
        report = GraphReport(graph=graph_id, patterns=self.patterns)
        text = wants_graph_text()
        if text:
            report.before = format_graph(gm.graph)
        for p in self.passes:
            snapshot = clone_graph(gm.graph)
            replaced, declined = report.replaced.copy(), len(report.declined)
            try:
                p(gm.graph, report)
                gm.graph.lint()
            except Exception as exc:  # noqa: BLE001 - a bug in a pass must never break the user's compile
                gm.graph = snapshot
                report.replaced, report.declined[declined:] = replaced, []
                report.failed.append(f"{p.name}: {type(exc).__name__}: {exc}")
                warnings.warn(f"convops: the {p.name} pass failed on graph {graph_id} and was skipped "
                              f"({type(exc).__name__}: {exc}); the graph compiles without it", stacklevel=2)
                log.debug("convops: %s failed", p.name, exc_info=True)
        gm.recompile()
        if text:
            report.after = format_graph(gm.graph)
        return report
