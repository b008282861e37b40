"""Where a separable sweep row sits near 1.0x: eager against the op under each path policy, and the GPU work of each.
For each row: the "auto" decision, do_bench medians of eager and of the op (auto, forced aten, forced convops) in
three alternating rounds, then under the profiler the kernels of one call and the median span from a call's first
kernel start to its last kernel end (each call after do_bench's 256 MB cache flush, as the bench times it).

    python tools/probe/separable_paths.py                 # the batch-1 and batch-32 rows below
    python tools/probe/separable_paths.py c960            # rows whose name contains c960
    python tools/probe/separable_paths.py mobilenet_v2/dw_b1_c384_h14_k3_s1:bf16   # any rows, as case:mode

Found (H200, 2026-11-27 07:00 UTC) that eager and the op on the ATen path run the same kernels with the same spans
(MobileNetV2 c384 b1 tf32 9.66 / 9.66 us), and that the mixed path's NCHW batched GEMM was the slow part of the
batch-32 bf16 rows (EfficientNet-B0 c1152: 40 us against cuDNN's 15 for the 1x1); those runs were of this
probe's first draft (same rows and method). And (H200, 2026-11-28 03:2x UTC): ConvNeXt-T c768 batch 1 TF32, whose
full-run row read 0.90x, is decided as the mixed path with cuDNN's 1x1 and times 26-29 us against eager's 29-36 (the
GEMM 1x1 would spend 7.5 of its 31 us rounding operands to TF32); MobileNetV2 c144 stride 2 bf16 is decided ATen by
the 3% margin (convops 9.95 us, aten 10.08), so it ties eager. Needs a GPU and a CUDA build.
"""
from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import convops  # noqa: E402
from bench.cases import all_cases  # noqa: E402
from bench.timing import HOST_SLACK_US, MODES, gpu_spin_after_flush  # noqa: E402

ROWS = [("mobilenet_v2/dws_b1_c960_h7_k3_s1_o160", "tf32"), ("mobilenet_v2/dws_b1_c384_h14_k3_s1_o64", "tf32"),
        ("efficientnet_b0/dws_b1_c480_h14_k3_s1_o80", "tf32"), ("mobilenet_v2/dws_b1_c144_h56_k3_s2_o32", "bf16"),
        ("convnext_t/dws_b32_c768_h7_k7_s1_o3072", "bf16"), ("efficientnet_b0/dws_b32_c1152_h7_k5_s1_o192", "bf16"),
        ("convnext_t/dws_b1_c768_h7_k7_s1_o3072", "tf32")]
DECISIONS = 3
POLICIES = {"op auto": None, "op aten": "aten", "op convops": "convops"}
FLUSH = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int, device="cuda")  # do_bench's cache flush


def under(policy, fn):
    """fn run under a forced path policy (None: the current one)."""
    def run():
        if policy is None:
            return fn()
        with convops.forced_path(policy):
            return fn()
    return run


def timeline(fn, calls: int = 40) -> tuple[float, list[tuple[str, float]]]:
    """Median span in us of a call's kernels (the first five calls dropped) and the last call's kernels."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            FLUSH.zero_()
            fn()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    per_call, current = [], None
    for e in events:
        if "fill" in e.name.lower():  # the flush starts a call
            if current:
                per_call.append(current)
            current = []
        elif current is not None:
            current.append(e)
    if current:
        per_call.append(current)
    per_call = [c for c in per_call[5:] if c]
    spans = [c[-1].time_range.end - c[0].time_range.start for c in per_call]
    return statistics.median(spans), [(e.name[:70], e.time_range.end - e.time_range.start) for e in per_call[-1]]


def selected_rows(args: list[str]) -> list[tuple[str, str]]:
    """ROWS whose name contains the first argument (all without one); arguments "case:mode" name rows themselves,
    depthwise ones too."""
    named = [tuple(a.split(":", 1)) for a in args if ":" in a]
    if named:
        return named
    return [r for r in ROWS if not args or args[0] in r[0]]


def main() -> None:
    rows = selected_rows(sys.argv[1:])
    cases = {c.name: c for c in all_cases()}
    torch.manual_seed(0)
    print("card:", torch.cuda.get_device_name())
    for name, mode_name in rows:
        mode, case = MODES[mode_name], cases[name]
        model = case.make().cuda().to(mode.dtype).eval()
        inputs = [torch.randn(case.input_shape, device="cuda").to(mode.dtype) for _ in range(4)]
        calls = iter(range(10**9))
        eager = lambda: model(inputs[next(calls) % 4])  # noqa: E731
        op = lambda: model.convops_forward(inputs[next(calls) % 4])  # noqa: E731
        with torch.no_grad(), mode.active(), convops.forced_path("auto"):
            for _ in range(DECISIONS):  # how stable "auto"'s decision is
                convops.clear_path_choices()
                op()
                torch.cuda.synchronize()
                print(f"{name} {mode_name}:", *convops.path_choices(), sep="\n  ")
            fns = {"eager": eager, **{label: under(policy, op) for label, policy in POLICIES.items()}}
            times = {label: [] for label in fns}
            with gpu_spin_after_flush(HOST_SLACK_US):  # as bench/ times them
                for _ in range(3):
                    for label, fn in fns.items():
                        times[label].append(do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3)
            print("  do_bench us (GPU spin after the flush), 3 rounds:",
                  {k: [round(v, 2) for v in vs] for k, vs in times.items()})
            for label in ("eager", "op aten", "op convops"):
                span, kernels = timeline(fns[label])
                print(f"  {label}: span {span:.2f} us;", ", ".join(f"{k} {d:.2f}" for k, d in kernels))


if __name__ == "__main__":
    main()
