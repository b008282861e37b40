"""Device-side checks of the narrow-row depthwise kernels (convops/csrc/cuda/depthwise_conv2d_planes.cuh and
depthwise_conv2d_blocked.cuh) against the other NCHW kernels, run on the GPU machine after convops is built (e.g. by tools/gpu_check.sh).

    python tools/dev_depthwise_planes.py check     # every kernel vs eager on odd small shapes (fp32 bitwise)
    python tools/dev_depthwise_planes.py bench     # the bench sweep's depthwise layers + seed: each kernel vs eager
    python tools/dev_depthwise_planes.py sanitize  # small cases of every instantiation, for compute-sanitizer

CONVOPS_DEPTHWISE_KERNEL=small|rows|blocked|planes|tiled restricts the dispatch (a kernel that does not take a problem
falls through to the general ones), so every kernel can be timed on every shape from one build.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import convops  # noqa: E402
from bench.cases import CONVNEXT_T, EFFICIENTNET_B0, MOBILENET_V2  # noqa: E402
from bench.timing import bench_ms, rotating, rotation_count  # noqa: E402

convops.set_path_policy("convops")
KERNELS = ("any", "small", "rows", "blocked", "planes", "tiled")
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def use_kernel(name: str) -> None:
    if name == "any":
        os.environ.pop("CONVOPS_DEPTHWISE_KERNEL", None)
    else:
        os.environ["CONVOPS_DEPTHWISE_KERNEL"] = name


def run(x, w, b, stride, pad, dil):
    return torch.ops.convops.depthwise_conv2d(x, w, b, [stride] * 2 if isinstance(stride, int) else stride,
                                              [pad] * 2 if isinstance(pad, int) else pad,
                                              [dil] * 2 if isinstance(dil, int) else dil)


def small_cases():
    """(input shape, k, stride, pad, dilation, multiplier, bias): odd planes, whole-plane blocks and bands, strides,
    multipliers, paddings past the filter, dilation (generic instantiation)."""
    cases = []
    shapes = [(2, 3, 7, 7), (3, 5, 14, 14), (1, 7, 13, 29), (2, 4, 57, 31), (1, 2, 150, 90), (2, 3, 1, 9),
              (1, 3, 300, 5), (5, 16, 9, 11), (1, 1, 120, 200)]
    i = 0
    for k, s in ((3, 1), (3, 2), (5, 1), (5, 2), (7, 1), (3, 3), (4, 1), (1, 1), (2, 2)):
        for pad in sorted({0, (k - 1) // 2, k}):
            for m in (1, 2, 3):
                shape = shapes[i % len(shapes)]
                dil = 2 if i % 7 == 3 else 1
                if shape[2] + 2 * pad < dil * (k - 1) + 1 or shape[3] + 2 * pad < dil * (k - 1) + 1:
                    shape = (shape[0], shape[1], 20, 23)
                cases.append((shape, k, s, pad, dil, m, i % 2 == 0))
                i += 1
    cases.append(((64, 32, 7, 7), 3, 1, 1, 1, 1, True))   # many planes per block
    cases.append(((2, 8, 112, 112), 3, 2, 1, 1, 1, False))
    return cases


def check() -> int:
    failures = 0
    torch.manual_seed(0)
    for shape, k, s, pad, dil, m, has_bias in small_cases():
        for dname, dtype in DTYPES.items():
            c = shape[1]
            x = torch.randn(shape, device="cuda", dtype=dtype)
            w = torch.randn(c * m, 1, k, k, device="cuda", dtype=dtype)
            b = torch.randn(c * m, device="cuda", dtype=dtype) if has_bias else None
            ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), s, pad, dil, c)
            eager = F.conv2d(x, w, b, s, pad, dil, c)
            for kernel in KERNELS:
                use_kernel(kernel)
                out = run(x, w, b, s, pad, dil)
                err = (out.double() - ref).abs().max().item()
                tol = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 1e-1}[dname] * max(1.0, ref.abs().max().item())
                bitwise = dname != "fp32" or torch.equal(out, eager)
                if err > tol or not bitwise:
                    failures += 1
                    print(f"FAIL {kernel} {dname} {shape} k{k} s{s} p{pad} d{dil} m{m} bias={has_bias}: "
                          f"err {err:.3g} bitwise-vs-eager {bitwise}")
    use_kernel("any")
    print(f"check: {len(small_cases()) * len(DTYPES) * len(KERNELS)} runs, {failures} failures")
    return failures


def sweep_shapes():
    yield "seed L1-82", (16, 64, 512, 512), 3, 1, 0, False
    for net, layers in (("mobilenet_v2", MOBILENET_V2), ("efficientnet_b0", EFFICIENTNET_B0),
                        ("convnext_t", CONVNEXT_T)):
        for c, hw, k, s, _c_out, bias in layers:
            for batch in (1, 32):
                yield f"{net} b{batch} c{c} h{hw} k{k} s{s}", (batch, c, hw, hw), k, s, (k - 1) // 2, bias


def bench() -> None:
    from tabulate import tabulate
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print("card:", torch.cuda.get_device_name(), "| ms, do_bench median, inputs rotated past 3x L2")
    rows = []
    for name, shape, k, s, pad, has_bias in sweep_shapes():
        for dname in ("fp32", "bf16"):
            dtype = DTYPES[dname]
            c = shape[1]
            bytes_ = torch.Size(shape).numel() * dtype.itemsize
            xs = [torch.randn(shape, device="cuda", dtype=dtype)
                  for _ in range(min(64, rotation_count(2 * bytes_, l2)))]
            w = torch.randn(c, 1, k, k, device="cuda", dtype=dtype)
            b = torch.randn(c, device="cuda", dtype=dtype) if has_bias else None
            eager_fn = rotating(lambda x: F.conv2d(x, w, b, s, pad, 1, c), xs)
            row = [name, dname, bench_ms(eager_fn)]
            expect = F.conv2d(xs[0], w, b, s, pad, 1, c)
            for kernel in KERNELS:
                use_kernel(kernel)
                out = run(xs[0], w, b, s, pad, 1)
                err = (out.float() - expect.float()).abs().max().item()
                ms = bench_ms(rotating(lambda x: run(x, w, b, s, pad, 1), xs))
                row.append(f"{ms:.4g}" + ("" if err < 1e-2 else f" ERR {err:.2g}"))
            use_kernel("any")
            out_bytes = expect.numel() * dtype.itemsize
            floor_ms = (bytes_ + out_bytes) / 4.25e12 * 1e3  # H200 copy bandwidth measured by bench.run
            row.append(f"{floor_ms:.4g}")
            rows.append(row)
            del xs
    print(tabulate(rows, headers=["layer", "dtype", "eager", *KERNELS, "floor@4.25TB/s"]))


def sanitize() -> None:
    torch.manual_seed(0)
    for shape, k, s, pad, dil, m, has_bias in small_cases()[::3]:
        for dtype in (torch.float32, torch.bfloat16):
            c = shape[1]
            x = torch.randn(shape, device="cuda", dtype=dtype)
            w = torch.randn(c * m, 1, k, k, device="cuda", dtype=dtype)
            b = torch.randn(c * m, device="cuda", dtype=dtype) if has_bias else None
            for kernel in ("blocked", "planes"):
                use_kernel(kernel)
                run(x, w, b, s, pad, dil)
    torch.cuda.synchronize()
    print("sanitize cases done")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "check"
    if what == "check":
        sys.exit(1 if check() else 0)
    elif what == "bench":
        bench()
    elif what == "sanitize":
        sanitize()

