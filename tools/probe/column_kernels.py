"""Which GPU kernels each column of a bench case runs, and how long each takes: the evidence for what the op must do
to match `torch.compile` on a row it loses.

For each case and mode it prints Inductor's generated `call` (its extern kernels and Triton kernels, in order), then
one table per column: every kernel's name, its launches per call and its mean GPU time (torch.profiler over rotated
inputs that exceed L2, after warm-up). Columns: compile, the op under "auto", eager, and by case kind:
- separable: the op's mixed path through channels-last forced, and ATen's channels-last pair by hand (Inductor's
  layout);
- conv_transpose: the op's ATen path in the input's layout and through channels-last.

    python tools/probe/column_kernels.py [--cases REGEX] [--modes tf32,bf16]    # needs a GPU and a CUDA build
"""
from __future__ import annotations

import collections
import contextlib
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
from tabulate import tabulate  # noqa: E402
from torch._inductor.utils import run_and_get_code  # noqa: E402

import convops  # noqa: E402
from convops import demo  # noqa: E402
from bench.cases import all_cases  # noqa: E402
from bench.timing import MODES, make_inputs, rotation_count  # noqa: E402
from tools.probe.separable_small_planes import environment, parse_args  # noqa: E402

DEFAULT_CASES = r"mobilenet_v2/dws_b32_c960|convnext_t/dws_b32_c768|unet/convT2d_b8_c256-128_h64_k3"
CALLS = 40


def kernel_table(fn, inputs):
    """(kernel, launches per call, mean us) for every CUDA kernel `fn` launches, over CALLS calls."""
    for x in inputs[:3]:
        fn(x)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(CALLS):
            fn(inputs[i % len(inputs)])
        torch.cuda.synchronize()
    totals, counts = collections.defaultdict(float), collections.Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] += event.device_time
            counts[event.name] += 1
    rows = [(name[:110], counts[name] / CALLS, totals[name] / counts[name]) for name in totals]
    rows.append(("total per call", "", sum(totals.values()) / CALLS))
    return rows


def inductor_call_lines(compiled, x):
    """The lines of Inductor's generated `call` that launch work: extern kernels, Triton kernels, layout copies."""
    _, codes = run_and_get_code(compiled, x)
    lines = []
    for code in codes:
        body = code.split("def call(", 1)[-1]
        lines += [line.strip() for line in body.splitlines()
                  if re.search(r"extern_kernels\.|\.run\(|empty_strided|reinterpret_tensor\(buf", line)]
    return lines


def columns(model, compiled):
    """(name, fn(x), CONVOPS_* switches, path policy or None) of every column the case's kind has."""
    common = [("compile", compiled, {}, None), ("op auto", model.convops_forward, {}, None)]
    if hasattr(model, "depthwise") and hasattr(model, "pointwise"):  # demo.DepthwiseSeparableConv2d
        d, p = model.depthwise, model.pointwise

        def aten_channels_last(x):
            y = torch.nn.functional.conv2d(x.contiguous(memory_format=torch.channels_last), d.weight, d.bias,
                                           d.stride, d.padding, d.dilation, d.groups)
            return torch.nn.functional.conv2d(y, p.weight, p.bias).contiguous()

        round_trip = {"CONVOPS_SEPARABLE_KERNEL": "none", "CONVOPS_SEPARABLE_MIXED": "channels_last"}
        common += [("op round trip", model.convops_forward, round_trip, "convops"),
                   ("aten CL", aten_channels_last, {}, None)]
    elif isinstance(model, demo.ConvTranspose):
        common += [("op aten NCHW", model.convops_forward, {"CONVOPS_CONV_TRANSPOSE_LAYOUT": "input"}, "aten"),
                   ("op aten CL", model.convops_forward, {"CONVOPS_CONV_TRANSPOSE_LAYOUT": "channels_last"}, "aten")]
    return common + [("eager", model, {}, None)]


def main() -> None:
    args = parse_args(__doc__, DEFAULT_CASES)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    with torch.no_grad():
        for case in (c for c in all_cases() if re.search(args.cases, c.name)):
            for mode in (MODES[m] for m in args.modes.split(",")):
                with mode.active():
                    torch._dynamo.reset()
                    torch.manual_seed(0)
                    model = case.make().cuda().to(mode.dtype).eval()
                    size = torch.empty((), dtype=mode.dtype).element_size()
                    inputs = make_inputs(case.input_shape, mode.dtype, "cuda", case.input_dist,
                                         rotation_count(size * torch.Size(case.input_shape).numel(), l2))
                    compiled = torch.compile(model)
                    print(f"\n=== {case.name} [{mode.name}]\nInductor's call:")
                    print("\n".join("    " + line for line in inductor_call_lines(compiled, inputs[0])))
                    convops.clear_path_choices()
                    with convops.forced_path("auto"):
                        model.convops_forward(inputs[0])
                    print("The op's decisions:\n" + "\n".join(f"    {c}" for c in convops.path_choices()))
                    for name, fn, switches, policy in columns(model, compiled):
                        print(f"-- {name}")
                        policy_cm = convops.forced_path(policy) if policy else contextlib.nullcontext()
                        with environment(**switches), policy_cm:
                            table = kernel_table(fn, inputs)
                        print(tabulate(table, headers=["kernel", "per call", "mean us"], floatfmt=".2f"))


if __name__ == "__main__":
    main()
