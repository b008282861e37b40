"""What the passes did to each graph: substitutions per pattern, declined candidates with their reasons, passes that
failed. The backend logs every GraphReport on the logger "convops" and hands it to any active collector, which is how
convops.explain() returns them without the user reading logs."""
from __future__ import annotations

import contextlib
import logging
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch.fx

log = logging.getLogger("convops")


@dataclass(frozen=True)
class Decline:
    """A candidate left to the rest of the compiler."""
    pattern: str   # the convops op it would have become
    node: str      # the graph node the candidate was found at
    reason: str
    source: str = ""  # the user's line of code, "file.py:12: y = self.conv(x)"


@dataclass
class GraphReport:
    """The passes' work on one graph Dynamo compiled."""
    graph: str                                   # Dynamo's compile id, "frame/recompile" (e.g. "0/0")
    patterns: tuple[str, ...] = ()               # the patterns that were looked for (enabled passes)
    replaced: Counter = field(default_factory=Counter)
    declined: list[Decline] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # "pass: error" for passes that raised and were rolled back
    before: str = ""                             # the graph before and after the passes, as readable code
    after: str = ""                              # (filled in only for collectors and debug logging)

    def summary(self) -> str:
        done = ", ".join(f"{n} x{c}" for n, c in self.replaced.items() if c) or "nothing"
        text = f"graph {self.graph}: replaced {done}; declined {len(self.declined)}"
        if self.failed:
            text += f"; {len(self.failed)} pass(es) failed and were rolled back"
        return text


@dataclass
class Report:
    """convops.explain()'s answer: one GraphReport per graph Dynamo compiled for the call."""
    graphs: list[GraphReport] = field(default_factory=list)

    @property
    def replaced(self) -> Counter:
        """Substitutions per pattern, over all graphs."""
        total = Counter()
        for g in self.graphs:
            total.update(g.replaced)
        return total

    @property
    def declined(self) -> list[Decline]:
        return [d for g in self.graphs for d in g.declined]

    @property
    def failed(self) -> list[str]:
        return [f for g in self.graphs for f in g.failed]

    def __str__(self) -> str:
        if not self.graphs:
            return "convops: no graph was compiled (was the model already compiled, or did Dynamo skip it?)"
        patterns = list(dict.fromkeys(p for g in self.graphs for p in g.patterns))
        declined_by = Counter(d.pattern for d in self.declined)
        rows = [[p, self.replaced[p], declined_by[p]] for p in patterns]
        parts = [f"convops: {len(self.graphs)} graph(s) compiled",
                 _table(rows, ["pattern", "replaced", "declined"])]
        if self.declined:
            rows = [[g.graph, d.pattern, d.node, d.reason, d.source] for g in self.graphs for d in g.declined]
            parts += ["declined candidates:", _table(rows, ["graph", "pattern", "node", "reason", "source"])]
        if self.failed:
            parts += ["passes that failed (their graph was compiled without them):"] + self.failed
        return "\n\n".join(parts)


def _table(rows: list[list], headers: list[str]) -> str:
    try:
        from tabulate import tabulate
    except ImportError:  # tabulate is optional at run time; a plain layout keeps the report readable
        widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
        lines = [headers, ["-" * w for w in widths], *rows]
        return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip() for line in lines)
    return tabulate(rows, headers=headers)


# ---------------------------------------------------------------------------------------------------------------------
# Publishing
# ---------------------------------------------------------------------------------------------------------------------

_collectors: list[list[GraphReport]] = []


@contextlib.contextmanager
def collect() -> Iterator[list[GraphReport]]:
    """Collects the GraphReport of every graph the backend compiles inside the block."""
    sink: list[GraphReport] = []
    _collectors.append(sink)
    try:
        yield sink
    finally:
        _collectors.remove(sink)


def wants_graph_text() -> bool:
    return bool(_collectors) or log.isEnabledFor(logging.DEBUG)


def publish(report: GraphReport) -> None:
    log.info("convops %s", report.summary())
    for d in report.declined:
        log.info("convops graph %s: declined %s at %s%s: %s", report.graph, d.pattern, d.node,
                 f" ({d.source})" if d.source else "", d.reason)
    if report.before:
        log.debug("convops graph %s before:\n%s\nafter:\n%s", report.graph, report.before, report.after)
    for sink in _collectors:
        if sink and sink[-1].graph == report.graph:
            sink[-1] = report  # Dynamo restarted this compile (say to specialise a float): the last attempt counts
        else:
            sink.append(report)


# ---------------------------------------------------------------------------------------------------------------------
# Readable graphs
# ---------------------------------------------------------------------------------------------------------------------

def source_line(node: torch.fx.Node) -> str:
    """The innermost user frame of node's stack trace, as "file.py:12: code"."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)', trace)
    if not frames:
        return ""
    path, line, code = frames[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line}: {code.strip()}"


def short_name(name: str) -> str:
    """Dynamo's input names, shortened: l_self_modules_conv_parameters_weight_ -> conv_weight."""
    name = re.sub(r"^l_(self_)?", "", name)
    for part in ("modules_", "parameters_", "buffers_"):
        name = name.replace(part, "")
    return name.rstrip("_") or name


def _target(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return f".{node.target}"
    if isinstance(node.target, torch._ops.OpOverload):
        name = node.target.name()  # "convops::depthwise_conv2d" (overload ".default" omitted)
        return name.replace("::", ".")
    try:
        name = torch.fx.node._get_qualified_name(node.target)
    except Exception:  # noqa: BLE001 - display only
        name = getattr(node.target, "__name__", str(node.target))
    return name.replace("torch.nn.functional.", "F.").replace("_operator.", "operator.")


def _arg(value, names: dict) -> str:
    if isinstance(value, torch.fx.Node):
        return names[value]
    if isinstance(value, tuple):
        return "(" + ", ".join(_arg(v, names) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_arg(v, names) for v in value) + "]"
    return repr(value)


def format_graph(graph: torch.fx.Graph) -> str:
    """One line per call, inputs by short names: compact enough to compare against an expected string."""
    names: dict[torch.fx.Node, str] = {}
    inputs, lines = [], []
    for node in graph.nodes:
        if node.op == "placeholder":
            names[node] = short_name(node.name)
            inputs.append(names[node])
            continue
        names[node] = node.name
        if node.op == "output":
            lines.append(f"return {_arg(node.args[0], names)}")
            continue
        args = [_arg(a, names) for a in node.args] + [f"{k}={_arg(v, names)}" for k, v in node.kwargs.items()]
        if node.op == "call_method":
            call = f"{args[0]}{_target(node)}({', '.join(args[1:])})"
        elif node.op == "get_attr":
            call = f"self.{node.target}"
        else:
            call = f"{_target(node)}({', '.join(args)})"
        lines.append(f"{node.name} = {call}")
    return "\n".join([f"inputs: {', '.join(inputs)}", *lines])
