"""The separable op's paths, one by one, on the sweep layers where `torch.compile` beat the op (the full run of issue
#5's cases with the host's time hidden, H200, 2026-11-28 07:08 / 07:12 UTC: layers of 7x7 and 14x14 planes, mostly
batch 32), against eager and Inductor, in TF32 and bf16. Inductor runs these graphs channels-last; the columns say
which of the op's paths comes closest and where its decision ("auto") missed:

    eager            the module pair, as the bench's eager column
    compile          torch.compile(module), default mode
    aten CL          Inductor's layout by hand: input to channels-last, F.conv2d twice, output back to NCHW
    op auto          the op under "auto", decided afresh (its decisions are printed below the table)
    fused            the fused kernel the dispatch picks (policy "convops")
    fused small      the small-problem fused kernel (CONVOPS_SEPARABLE_KERNEL=small; where it does not take the
                     problem, the next fused kernel runs, as in "fused")
    mixed NCHW       the mixed path in the input's layout (CONVOPS_SEPARABLE_KERNEL=none, _MIXED=input)
    mixed CL         the mixed path through channels-last (CONVOPS_SEPARABLE_KERNEL=none, _MIXED=channels_last)

Times are bench.timing.bench_ms medians (do_bench, its L2 flush followed by the bench's GPU spin, so GPU time
alone) over input sets that exceed L2, the best of three rounds; every output is checked against eager in the
bench's tolerance for the mode first ("FAIL" where it differs, "-" where the path does not take the problem).

    python tools/probe/separable_small_planes.py [--cases REGEX]    # needs a GPU and a CUDA build
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
from tabulate import tabulate  # noqa: E402

import convops  # noqa: E402
from bench.cases import all_cases  # noqa: E402
from bench.timing import MODES, bench_ms, check, make_inputs, rotating, rotation_count  # noqa: E402

# The rows the op lost to Inductor's GPU time (bench/RESULTS.md), and their batch-1 / other-mode neighbours.
DEFAULT_CASES = (r"mobilenet_v2/dws_b32_c(384|960)|efficientnet_b0/dws_b32_c(480|1152)|"
                 r"convnext_t/dws_b32_c(384|768)|convnext_t/dws_b1_c768")
ROUNDS = 3
COLUMNS = ["eager us", "compile", "aten CL", "op auto", "fused", "fused small", "mixed NCHW", "mixed CL"]


@contextlib.contextmanager
def environment(**values):
    """Sets CONVOPS_* switches that the op reads each call, then restores them."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if v is not None})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def variants(model):
    """(name, fn(x), switches, policy) for every column but eager."""
    d, p = model.depthwise, model.pointwise
    op = model.convops_forward

    def aten_channels_last(x):
        y = torch.nn.functional.conv2d(x.contiguous(memory_format=torch.channels_last), d.weight, d.bias, d.stride,
                                       d.padding, d.dilation, d.groups)
        return torch.nn.functional.conv2d(y, p.weight, p.bias).contiguous()

    return [
        ("compile", torch.compile(model), {}, None),
        ("aten CL", aten_channels_last, {}, None),
        ("op auto", op, {}, "auto"),
        ("fused", op, {}, "convops"),
        ("fused small", op, {"CONVOPS_SEPARABLE_KERNEL": "small"}, "convops"),
        ("mixed NCHW", op, {"CONVOPS_SEPARABLE_KERNEL": "none", "CONVOPS_SEPARABLE_MIXED": "input"}, "convops"),
        ("mixed CL", op, {"CONVOPS_SEPARABLE_KERNEL": "none", "CONVOPS_SEPARABLE_MIXED": "channels_last"},
         "convops"),
    ]


def parse_args(doc: str, default_cases: str) -> argparse.Namespace:
    """--cases (a regex over the bench's case names) and --modes, as the small-plane probes take them."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--cases", default=default_cases, help="regex over the bench's case names")
    parser.add_argument("--modes", default="tf32,bf16")
    return parser.parse_args()


def main() -> None:
    args = parse_args(__doc__, DEFAULT_CASES)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    cases = [c for c in all_cases() if re.search(args.cases, c.name)]
    rows, decisions = [], []
    with torch.no_grad():
        for case in cases:
            for mode in (MODES[m] for m in args.modes.split(",")):
                with mode.active():
                    torch._dynamo.reset()  # a fresh compile each row (Dynamo's recompile limit would fall back to eager)
                    torch.manual_seed(0)
                    model = case.make().cuda().to(mode.dtype).eval()
                    size = torch.empty((), dtype=mode.dtype).element_size()
                    inputs = make_inputs(case.input_shape, mode.dtype, "cuda", case.input_dist,
                                         rotation_count(size * torch.Size(case.input_shape).numel(), l2))
                    expected = model(inputs[0])
                    columns = [("eager", model, {}, None), *variants(model)]
                    times: dict[str, list[float]] = {name: [] for name, *_ in columns}
                    status: dict[str, str] = {}
                    for name, fn, switches, policy in columns:
                        policy_cm = convops.forced_path(policy) if policy else contextlib.nullcontext()
                        with environment(**switches), policy_cm:
                            if name == "op auto":
                                convops.clear_path_choices()
                            try:
                                verdict = check(fn(inputs[0]), expected, mode)
                            except RuntimeError as exc:  # a forced kernel that does not take the problem
                                status[name] = "-"
                                print(f"{case.name} {mode.name} {name}: {str(exc).splitlines()[0][:120]}")
                                continue
                            if name == "op auto":
                                decisions += [f"{case.name} [{mode.name}] {c}" for c in convops.path_choices()]
                            if not verdict.ok:
                                status[name] = "FAIL"
                    for _ in range(ROUNDS):
                        for name, fn, switches, policy in columns:
                            if name in status:
                                continue
                            policy_cm = convops.forced_path(policy) if policy else contextlib.nullcontext()
                            with environment(**switches), policy_cm:
                                times[name].append(bench_ms(rotating(fn, inputs)))
                    row = [case.name, mode.name]
                    for name, *_ in columns:
                        row.append(status.get(name) or f"{min(times[name]) * 1e3:.1f}")
                    rows.append(row)
                    print(tabulate([row], headers=["case", "mode", *COLUMNS]), flush=True)
    print()
    print(tabulate(rows, headers=["case", "mode", *COLUMNS]))
    print("\nThe op's decisions (problem -> path (each path's median)):")
    print("\n".join(decisions))


if __name__ == "__main__":
    main()
