"""The main job: the five seed problems through torch.ops.convops, checked against PyTorch, printed as a table.

    python -m convops.demo            # on the GPU at the seed shapes if there is one, else on the CPU at reduced sizes
    python -m convops.demo --device cpu

The five problems are written here as the nn.Modules a user would write (KernelBench's `Model`s), each with a
`convops_forward` that computes the same thing with its own parameters through the convops op. bench/ builds its
real-world sweep from the same classes, so the demo, the benchmark and the torch.compile columns all see one model.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn

import convops


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


# ---------------------------------------------------------------------------------------------------------------------
# The problems as nn.Modules. `op` names the convops op that replaces the module's forward.
# ---------------------------------------------------------------------------------------------------------------------

class DepthwiseConv2d(nn.Module):
    """nn.Conv2d with groups = C_in (KernelBench L1-82)."""
    op = "depthwise_conv2d"

    def __init__(self, channels: int, kernel_size, stride=1, padding=0, dilation=1, multiplier: int = 1,
                 bias: bool = False):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels * multiplier, kernel_size, stride, padding, dilation,
                              groups=channels, bias=bias)

    def forward(self, x):
        return self.conv(x)

    def convops_forward(self, x):
        c = self.conv
        return torch.ops.convops.depthwise_conv2d(x, c.weight, c.bias, c.stride, c.padding, c.dilation)


class DepthwiseSeparableConv2d(nn.Module):
    """Depthwise conv2d then a pointwise 1x1 conv2d (KernelBench L1-86; MobileNet/EfficientNet/ConvNeXt blocks)."""
    op = "depthwise_separable_conv2d"

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 bias: bool = False):
        super().__init__()
        self.depthwise = nn.Conv2d(in_channels, in_channels, kernel_size, stride, padding, dilation,
                                   groups=in_channels, bias=bias)
        self.pointwise = nn.Conv2d(in_channels, out_channels, 1, bias=bias)

    def forward(self, x):
        return self.pointwise(self.depthwise(x))

    def convops_forward(self, x):
        d, p = self.depthwise, self.pointwise
        return torch.ops.convops.depthwise_separable_conv2d(x, d.weight, d.bias, p.weight, p.bias, d.stride,
                                                            d.padding, d.dilation)


class ConvTranspose(nn.Module):
    """nn.ConvTranspose2d or nn.ConvTranspose3d (KernelBench L1-65, L1-70; UNet and 3-D VAE decoders)."""

    def __init__(self, dims: int, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = False, dilation=1):
        super().__init__()
        cls = {2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}[dims]
        self.op = f"conv_transpose{dims}d"
        self.conv = cls(in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, bias,
                        dilation)

    def forward(self, x):
        return self.conv(x)

    def convops_forward(self, x):
        c = self.conv
        return getattr(torch.ops.convops, self.op)(x, c.weight, c.bias, c.stride, c.padding, c.output_padding,
                                                   c.groups, c.dilation)


class ConvGroupNormScaleMaxPoolClamp(nn.Module):
    """conv2d -> GroupNorm -> * scale -> MaxPool2d -> clamp (KernelBench L2-85). `scale_init` picks the sign of the
    per-channel scale ("positive", "negative", "mixed"); either clamp bound may be None."""
    op = "conv2d_group_norm_scale_max_pool_clamp"

    def __init__(self, in_channels: int, out_channels: int, kernel_size, num_groups: int, pool_kernel: int,
                 clamp_min: float | None, clamp_max: float | None, stride=1, padding=0, dilation=1,
                 scale_init: str = "positive"):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)
        self.scale = nn.Parameter(torch.empty(out_channels, 1, 1).uniform_(0.5, 1.5))
        with torch.no_grad():
            if scale_init == "negative":
                self.scale.neg_()
            elif scale_init == "mixed":
                self.scale[::2].neg_()
            elif scale_init != "positive":
                raise ValueError(f"scale_init must be positive, negative or mixed, got {scale_init!r}")
        self.maxpool = nn.MaxPool2d(pool_kernel)
        self.clamp_min, self.clamp_max = clamp_min, clamp_max
        # Non-trivial affine parameters, so that the check exercises them (the defaults are ones and zeros).
        with torch.no_grad():
            self.group_norm.weight.uniform_(0.5, 1.5)
            self.group_norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = self.group_norm(self.conv(x)) * self.scale
        return torch.clamp(self.maxpool(x), self.clamp_min, self.clamp_max)

    def convops_forward(self, x):
        c, gn = self.conv, self.group_norm
        return torch.ops.convops.conv2d_group_norm_scale_max_pool_clamp(
            x, c.weight, c.bias, c.stride, c.padding, c.dilation, gn.num_groups, gn.weight, gn.bias, gn.eps,
            self.scale, _pair(self.maxpool.kernel_size), self.clamp_min, self.clamp_max)


# ---------------------------------------------------------------------------------------------------------------------
# The seed problems (../shared/seeds, KernelBench): seed shapes, and reduced sizes for the CPU.
# ---------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    name: str
    make: Callable[[], nn.Module]
    input_shape: tuple[int, ...]


def seed_problems(reduced: bool = False) -> list[Problem]:
    """KernelBench L1-82, L1-86, L1-65, L1-70, L2-85 at their seed shapes, or at reduced sizes (same structure:
    kernels, strides, groups and pool kept; batch, channels and spatial sizes shrunk)."""
    if not reduced:
        return [
            Problem("L1-82 depthwise 3x3", lambda: DepthwiseConv2d(64, 3), (16, 64, 512, 512)),
            Problem("L1-86 depthwise-separable", lambda: DepthwiseSeparableConv2d(64, 128, 3, padding=1),
                    (16, 64, 512, 512)),
            Problem("L1-65 conv_transpose2d 3x7", lambda: ConvTranspose(2, 64, 64, (3, 7)), (8, 64, 512, 512)),
            Problem("L1-70 conv_transpose3d 3x3x3", lambda: ConvTranspose(3, 48, 24, 3), (8, 48, 96, 96, 96)),
            Problem("L2-85 conv+GN+scale+pool+clamp",
                    lambda: ConvGroupNormScaleMaxPoolClamp(8, 64, 3, 16, 4, 0.0, 1.0), (128, 8, 128, 128)),
        ]
    return [
        Problem("L1-82 depthwise 3x3", lambda: DepthwiseConv2d(8, 3), (2, 8, 64, 64)),
        Problem("L1-86 depthwise-separable", lambda: DepthwiseSeparableConv2d(8, 16, 3, padding=1), (2, 8, 64, 64)),
        Problem("L1-65 conv_transpose2d 3x7", lambda: ConvTranspose(2, 8, 8, (3, 7)), (2, 8, 32, 32)),
        Problem("L1-70 conv_transpose3d 3x3x3", lambda: ConvTranspose(3, 8, 4, 3), (1, 8, 12, 12, 12)),
        Problem("L2-85 conv+GN+scale+pool+clamp",
                lambda: ConvGroupNormScaleMaxPoolClamp(8, 64, 3, 16, 4, 0.0, 1.0), (4, 8, 34, 34)),
    ]


# ---------------------------------------------------------------------------------------------------------------------
# Running them.
# ---------------------------------------------------------------------------------------------------------------------

# Agreement with eager PyTorch in the same precision mode (the library's promise on the seed shapes).
ATOL = RTOL = 1e-4


def op_unavailable(op: str, device: torch.device) -> str | None:
    """Why torch.ops.convops.<op> cannot run on `device`, or None when it can."""
    if not convops.has_ops():
        return "convops library not loaded"
    if not hasattr(torch.ops.convops, op):
        return "op not built"
    if not torch._C._dispatch_has_kernel_for_dispatch_key(f"convops::{op}", device.type.upper()):
        return f"no {device.type.upper()} kernel"
    return None


def _time_ms(fn: Callable[[], object]) -> float:
    """Median GPU time of fn in ms (triton.testing.do_bench, which also flushes L2 before each call)."""
    try:
        from triton.testing import do_bench
        return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
    except ImportError:
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(10):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return sorted(times)[len(times) // 2]


@dataclass
class Row:
    problem: str
    op: str
    shape: str
    status: str                # "pass", "FAIL", "missing", "error"
    max_error: float | None = None
    eager_ms: float | None = None
    convops_ms: float | None = None
    note: str = ""


def run_problem(problem: Problem, device: torch.device, timed: bool) -> Row:
    torch.manual_seed(0)
    model = problem.make().to(device).eval()
    row = Row(problem.name, model.op, "x".join(map(str, problem.input_shape)), "missing")
    why = op_unavailable(model.op, device)
    if why:
        row.note = why
        return row
    x = torch.rand(problem.input_shape, device=device)
    with torch.no_grad():
        try:
            expected = model(x)
            actual = model.convops_forward(x)
        except Exception as exc:  # a kernel's error message is the useful output here
            row.status, row.note = "error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            return row
        shape_ok = actual.shape == expected.shape and actual.dtype == expected.dtype
        row.max_error = (actual.double() - expected.double()).abs().max().item() if shape_ok else float("nan")
        ok = shape_ok and torch.allclose(actual, expected, atol=ATOL, rtol=RTOL)
        row.status = "pass" if ok else "FAIL"
        if not shape_ok:
            row.note = f"got {tuple(actual.shape)} {actual.dtype}, expected {tuple(expected.shape)} {expected.dtype}"
        del actual, expected
        if timed and ok:
            row.eager_ms = _time_ms(lambda: model(x))
            row.convops_ms = _time_ms(lambda: model.convops_forward(x))
    return row


def format_table(rows: Sequence[Row], timed: bool) -> str:
    headers = ["problem", "op", "input", "max |err|", "result"]
    if timed:
        headers += ["eager ms", "convops ms", "speedup"]
    headers.append("note")
    body = []
    for r in rows:
        line = [r.problem, r.op, r.shape, "" if r.max_error is None else f"{r.max_error:.2e}", r.status]
        if timed:
            both = r.eager_ms is not None and r.convops_ms is not None
            line += [f"{r.eager_ms:.3f}" if both else "", f"{r.convops_ms:.3f}" if both else "",
                     f"{r.eager_ms / r.convops_ms:.2f}x" if both else ""]
        line.append(r.note)
        body.append(line)
    try:
        from tabulate import tabulate
        return tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)
    except ImportError:  # tabulate is a dev requirement; keep the demo usable without it
        widths = [max(len(str(c)) for c in col) for col in zip(headers, *body)]
        return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)) for line in [headers, *body])


def run_demo(device: str | torch.device | None = None, reduced: bool | None = None,
             problems: Sequence[Problem] | None = None) -> list[Row]:
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    reduced = device.type == "cpu" if reduced is None else reduced
    timed = device.type == "cuda"
    return [run_problem(p, device, timed) for p in (problems or seed_problems(reduced))]


def _describe(device: torch.device) -> str:
    if device.type == "cuda":
        mode = "TF32 allowed" if torch.backends.cudnn.allow_tf32 else "strict fp32"
        return (f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, CUDA {torch.version.cuda}; "
                f"fp32 ({mode}), seed shapes; times: triton do_bench median")
    return f"CPU, torch {torch.__version__}; fp32, reduced sizes (no GPU)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m convops.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda if available, else cpu")
    parser.add_argument("--reduced", action="store_true", help="reduced sizes on the GPU too")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    print(f"convops demo: {_describe(device)}")
    start = time.perf_counter()
    rows = run_demo(device, reduced=True if args.reduced else None)
    print(format_table(rows, timed=device.type == "cuda"))
    failed = [r for r in rows if r.status != "pass"]
    print(f"{len(rows) - len(failed)}/{len(rows)} problems match PyTorch (atol = rtol = {ATOL:g}) "
          f"in {time.perf_counter() - start:.1f} s")
    if failed and not convops.has_ops():
        convops.require_ops()  # raises with the reason the library did not load
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
