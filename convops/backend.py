"""The torch.compile backend "convops".

    torch.compile(model, backend="convops")                                  # passes + Inductor
    torch.compile(model, backend="convops", options={"depthwise_conv": False, "compiler": "eager"})
    torch.compile(model, backend="convops", mode="reduce-overhead", dynamic=True)
    print(convops.explain(model, x))                                         # what was substituted, what was not

Where the passes run: on the graph Dynamo hands the backend (torch IR, before AOTAutograd), which is then compiled
as usual. At that point every call of the user's model is one node with its hyper-parameters as arguments, whatever
the spelling, so one matcher per pattern covers every configuration and dtype. AOTAutograd then traces the convops
ops through their registered autograd formulas, so training works unchanged, and Inductor's caches key on the graph
that already holds the convops ops, so a cache hit runs the rewritten graph. (Inductor's post-grad pattern hooks would
see group_norm, max_pool2d and clamp already decomposed, and only inference graphs.)

Options (options={...}): "<pass name>": False turns a pass off (see convops.fx_passes.PASS_NAMES);
"compiler": "inductor" (default), any other torch.compile backend name such as "eager" or "aot_eager" (for
debugging), or a callable backend, compiles the rewritten graph; every other key is an Inductor config option and
goes to Inductor, as torch.compile(options=...) would send it.
"""
from __future__ import annotations

import functools
import importlib.metadata
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .fx_passes import PASS_NAMES, PassManager, Report
from .fx_passes.pass_manager import clone_graph
from .fx_passes.report import collect, publish

log = logging.getLogger("convops")


@dataclass(frozen=True)
class BackendOptions:
    """torch.compile(..., mode=, options=) as the backend reads them: the passes to run, what compiles the rewritten
    graph, and the Inductor config patches (mode's options, then the user's Inductor keys)."""
    passes: tuple[str, ...] = PASS_NAMES
    compiler: str | Callable = "inductor"
    inductor_config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: dict[str, Any] | None, mode: str | None = None) -> BackendOptions:
        options = dict(options or {})
        passes = []
        for name in PASS_NAMES:
            enabled = options.pop(name, True)
            if not isinstance(enabled, bool):
                raise ValueError(f"convops: option {name!r} takes True or False, got {enabled!r}")
            if enabled:
                passes.append(name)
        compiler = options.pop("compiler", "inductor")
        inductor_config: dict[str, Any] = {}
        if compiler == "inductor":
            from torch._inductor import config, list_mode_options
            if mode not in (None, "default"):
                inductor_config.update(list_mode_options(mode))
            known = config.get_config_copy()
            for key, value in options.items():
                if key.replace("-", "_") not in known:
                    raise ValueError(f"convops: unknown option {key!r}. convops takes "
                                     f"{[*PASS_NAMES, 'compiler']}; other keys must be Inductor config options "
                                     f"(torch._inductor.config)")
                inductor_config[key.replace("-", "_")] = value
        else:
            if options:
                raise ValueError(f"convops: options {sorted(options)} are for Inductor, but compiler={compiler!r}")
            if mode not in (None, "default"):
                warnings.warn(f"convops: mode={mode!r} applies to Inductor and is ignored with compiler={compiler!r}",
                              stacklevel=3)
        return cls(tuple(passes), compiler, inductor_config)


def convops_backend(gm: torch.fx.GraphModule, example_inputs: list, *, mode: str | None = None,
                    options: dict[str, Any] | None = None):
    """A torch.compile backend: substitutes the convops ops into the graph, then compiles it (Inductor by default).
    torch.compile passes its mode= and options= arguments here."""
    opts = BackendOptions.parse(options, mode)
    original = clone_graph(gm.graph)
    report = PassManager(opts.passes).run(gm, graph_id=_compile_id())
    try:
        return _compile_rest(gm, example_inputs, opts)
    except Exception as exc:
        from torch._dynamo.exc import TorchDynamoException
        if not sum(report.replaced.values()) or isinstance(exc, TorchDynamoException):
            raise  # not ours, or Dynamo's own control flow (a restart with a float specialised, ...)
        # Something in the substituted graph broke the compile (say a fake implementation the compiler disagrees
        # with): the user still gets their model compiled, as it would be without convops, and the report says so.
        warnings.warn(f"convops: compiling graph {report.graph} with the convops ops failed "
                      f"({type(exc).__name__}: {exc}); compiling it without them", stacklevel=2)
        log.debug("convops: compile failure", exc_info=True)
        report.failed.append(f"compiling with the convops ops: {type(exc).__name__}: {exc}")
        report.replaced.clear()
        report.after = report.before
        gm.graph = original
        gm.recompile()
        return _compile_rest(gm, example_inputs, opts)
    finally:
        publish(report)  # once the report says what was compiled


def _compile_rest(gm: torch.fx.GraphModule, example_inputs: list, opts: BackendOptions):
    if opts.compiler == "inductor":
        from torch._inductor.compile_fx import compile_fx
        return compile_fx(gm, example_inputs, config_patches=opts.inductor_config or None)
    if callable(opts.compiler):
        return opts.compiler(gm, example_inputs)
    from torch._dynamo.backends.registry import lookup_backend
    return lookup_backend(opts.compiler)(gm, example_inputs)


def _compile_id() -> str:
    compile_id = torch._guards.CompileContext.current_compile_id()
    return "?" if compile_id is None else str(compile_id)


def explain(model: Callable, *args, options: dict[str, Any] | None = None, **kwargs) -> Report:
    """What the convops backend does to `model` called with these arguments: which patterns it substituted in each
    graph Dynamo captured, and which candidates it declined and why. Compiles the model (the rest of each graph runs
    eagerly, which keeps this quick; pass options as for torch.compile) and calls it once."""
    options = dict(options or {})
    options.setdefault("compiler", "eager")
    with collect() as graphs:
        torch.compile(model, backend=functools.partial(convops_backend, options=options))(*args, **kwargs)
    return Report(graphs)


def _register() -> None:
    """torch.compile(backend="convops") finds the backend through the torch_dynamo_backends entry point of the
    installed distribution, without `import convops`. A source tree used without installing registers it here (at the
    price of importing torch._dynamo), so that importing convops is enough."""
    try:
        entry_points = importlib.metadata.distribution("convops").entry_points
    except importlib.metadata.PackageNotFoundError:
        entry_points = []
    if any(ep.group == "torch_dynamo_backends" and ep.name == "convops" for ep in entry_points):
        return
    from torch._dynamo.backends.registry import register_backend
    try:
        register_backend(convops_backend, name="convops")
    except AssertionError:  # already registered (the module was reloaded)
        pass


_register()
