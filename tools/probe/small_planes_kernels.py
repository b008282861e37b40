"""Which GPU kernels `torch.compile` and the separable op run on the sweep layers Inductor wins (7x7 / 14x14 planes),
and how long each takes: the evidence for what the op must do to match Inductor there.

For each case and mode it prints Inductor's generated `call` (its extern kernels and Triton kernels, in order), then
one table per column (compile, the op under "auto", the op's mixed path through channels-last forced, ATen's
channels-last pair by hand, eager): every kernel's name, its launches per call and its mean GPU time (torch.profiler
over rotated inputs that exceed L2, after warm-up).

    python tools/probe/small_planes_kernels.py [--cases REGEX] [--modes tf32,bf16]    # needs a GPU and a CUDA build
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
from bench.cases import all_cases  # noqa: E402
from bench.timing import MODES, make_inputs, rotation_count  # noqa: E402
from tools.probe.separable_small_planes import environment, parse_args  # noqa: E402

DEFAULT_CASES = r"mobilenet_v2/dws_b32_c960|convnext_t/dws_b32_c768"
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
                    d, p = model.depthwise, model.pointwise

                    def aten_channels_last(x):
                        y = torch.nn.functional.conv2d(x.contiguous(memory_format=torch.channels_last), d.weight,
                                                       d.bias, d.stride, d.padding, d.dilation, d.groups)
                        return torch.nn.functional.conv2d(y, p.weight, p.bias).contiguous()

                    convops.clear_path_choices()
                    with convops.forced_path("auto"):
                        model.convops_forward(inputs[0])
                    round_trip = {"CONVOPS_SEPARABLE_KERNEL": "none", "CONVOPS_SEPARABLE_MIXED": "channels_last"}
                    for name, fn, switches in (("compile", compiled, {}), ("op auto", model.convops_forward, {}),
                                               ("op round trip", model.convops_forward, round_trip),
                                               ("aten CL", aten_channels_last, {}), ("eager", model, {})):
                        print(f"-- {name}")
                        policy = convops.forced_path("convops") if switches else contextlib.nullcontext()
                        with environment(**switches), policy:
                            table = kernel_table(fn, inputs)
                        print(tabulate(table, headers=["kernel", "per call", "mean us"], floatfmt=".2f"))


if __name__ == "__main__":
    main()
