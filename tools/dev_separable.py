"""Device-side checks of the fused depthwise-separable kernels (convops/csrc/cuda/
depthwise_separable_conv2d_streaming.cuh and _pipelined.cuh), run on the GPU machine after convops is built.

    python tools/dev_separable.py check   # fused-kernel shapes vs eager in every mode (and which kernel ran)
    python tools/dev_separable.py bench   # seed + W >= 112 sweep layers: eager, convops kernel, floor
    python tools/dev_separable.py bench seed   # the seed only

On compute capability 9.0 (sm_90a code) the row-streaming kernel takes the 3x3 problems of at most 64 -> 128
channels in TF32 and 16-bit (check prints "fused/rows"); CONVOPS_SEPARABLE_KERNEL=tile gives them to the tile
kernel, for timing the two. On sm_90 the tile kernel stages its input by box copies of the bulk-copy engine where
the multiplier is 1 (check prints "fused/box"); CONVOPS_BULK_COPIES=0 makes it use cp.async everywhere. Where the
build has sm_90a code its 1x1 runs on wgmma in 16-bit and on mma.sync in TF32; CONVOPS_SEPARABLE_MMA=wgmma or =sync
picks one for every mode.
"""
from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import convops  # noqa: E402
from bench.timing import bench_ms, rotating, rotation_count  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
# The unfused pair in float64 with the operands rounded as a correct kernel sees them (TF32 under TF32).
from common_utils import cuda_kernels_run  # noqa: E402
from test_depthwise_separable_conv2d import separable_reference  # noqa: E402

convops.set_path_policy("convops")
MODES = {"tf32": (torch.float32, True), "fp32": (torch.float32, False), "bf16": (torch.bfloat16, True),
         "fp16": (torch.float16, True)}


def eager(x, dw, db, pw, pb, pad):
    mid = F.conv2d(x, dw, db, 1, pad, 1, x.shape[1])
    return F.conv2d(mid, pw, pb)


def op(x, dw, db, pw, pb, pad):
    return torch.ops.convops.depthwise_separable_conv2d(x, dw, db, pw, pb, [1, 1], [pad, pad], [1, 1])


def mixed(x, dw, db, pw, pb, pad):
    """The op's "mixed" path: the convops depthwise kernel, then ATen's 1x1."""
    return F.conv2d(torch.ops.convops.depthwise_conv2d(x, dw, db, [1, 1], [pad, pad], [1, 1]), pw, pb)


def make(shape, k, m, c_out, bias, dtype, pad_h=None):
    c = shape[1]
    x = torch.randn(shape, device="cuda", dtype=dtype)
    dw = torch.randn(c * m, 1, k, k, device="cuda", dtype=dtype) / k
    db = torch.randn(c * m, device="cuda", dtype=dtype) if bias else None
    pw = torch.randn(c_out, c * m, 1, 1, device="cuda", dtype=dtype) / (c * m) ** 0.5
    pb = torch.randn(c_out, device="cuda", dtype=dtype) if bias else None
    return x, dw, db, pw, pb


CASES = [  # (input shape, k, multiplier, C_out, bias)
    ((2, 64, 40, 64), 3, 1, 128, True), ((1, 20, 13, 96), 3, 1, 40, False), ((3, 16, 9, 48), 5, 1, 200, True),
    ((1, 8, 37, 32), 7, 2, 24, True), ((2, 33, 6, 16), 3, 1, 130, False), ((1, 5, 70, 136), 5, 3, 7, True),
    ((2, 32, 112, 112), 3, 1, 16, False), ((1, 64, 8, 512), 3, 1, 128, True), ((1, 17, 3, 40), 7, 1, 64, True),
]


def check() -> int:
    failures = 0
    torch.manual_seed(0)
    for shape, k, m, c_out, bias in CASES:
        for name, (dtype, tf32) in MODES.items():
            torch.backends.cudnn.allow_tf32 = tf32
            args = make(shape, k, m, c_out, bias, dtype)
            pad = (k - 1) // 2
            ran = [n for n in cuda_kernels_run(lambda: op(*args, pad)) if "separable" in n or "depthwise" in n]
            rows = any("separable_streaming" in n for n in ran)
            fused = rows or any("pipelined" in n for n in ran)
            # separable_pipelined_kernel<scalar, KH, KW, math, box copies, wgmma allowed>
            boxes = any("pipelined" in n and re.search(r", true, (true|false)>", n) for n in ran)
            kind = "fused/rows" if rows else "fused/box" if boxes else "fused" if fused else "unfused"
            # Under TF32 the unfused path's 1x1 is cuDNN's, as eager's is; the fused kernel computes the exact TF32 pair
            # (eager's TF32 1x1 differs from that by ~1e-3 of the values, no reference at 1e-4).
            out = op(*args, pad)
            if name == "tf32" and fused:
                expect = separable_reference(*args, [1, 1], [pad, pad], [1, 1]).to(out.device)
            else:
                expect = eager(*args, pad)
            err = (out.float() - expect.float()).abs().max().item()
            scale = max(1.0, expect.float().abs().max().item())
            tol = {"tf32": 1e-4, "fp32": 1e-4, "bf16": 3e-2, "fp16": 3e-3}[name] * scale
            status = "ok" if err <= tol else "FAIL"
            failures += status == "FAIL"
            print(f"{status} {name} {shape} k{k} m{m} o{c_out} bias={bias}: max err {err:.3g} "
                  f"({kind})")
    torch.backends.cudnn.allow_tf32 = True
    print(f"check: {failures} failures")
    return failures


def bench(only_seed: bool = False) -> None:
    from tabulate import tabulate
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print("card:", torch.cuda.get_device_name(), "| ms, do_bench median, inputs rotated past 3x L2")
    rows = []
    for name, shape, k, c_out in (("seed L1-86", (16, 64, 512, 512), 3, 128),
                                  ("mobilenet_v2 b32 c32 h112 o16", (32, 32, 112, 112), 3, 16),
                                  ("mobilenet_v2 b1 c32 h112 o16", (1, 32, 112, 112), 3, 16))[:1 if only_seed else 3]:
        for mode in ("tf32", "fp32", "bf16"):
            dtype, tf32 = MODES[mode]
            torch.backends.cudnn.allow_tf32 = tf32
            x, dw, db, pw, pb = make(shape, k, 1, c_out, False, dtype)
            in_bytes = x.numel() * x.element_size()
            out_bytes = shape[0] * c_out * shape[2] * shape[3] * x.element_size()
            xs = [x] + [torch.randn_like(x) for _ in range(min(16, rotation_count(in_bytes + out_bytes, l2)) - 1)]
            t_eager = bench_ms(rotating(lambda x: eager(x, dw, db, pw, pb, 1), xs))
            row = [name, mode, t_eager]
            row.append(bench_ms(rotating(lambda x: op(x, dw, db, pw, pb, 1), xs)))  # the fused kernel (forced)
            row.append(bench_ms(rotating(lambda x: mixed(x, dw, db, pw, pb, 1), xs)))
            with convops.forced_path("auto"):  # the op as users get it: fused, mixed (dw + 1x1) or ATen
                convops.clear_path_choices()
                op(x, dw, db, pw, pb, 1)
                row.append(bench_ms(rotating(lambda x: op(x, dw, db, pw, pb, 1), xs)))
                row.append(next(c.path for c in convops.path_choices()  # not its 1x1's (".pointwise")
                                if c.problem.startswith("convops::depthwise_separable_conv2d cuda:")))
                err_auto = (op(x, dw, db, pw, pb, 1).float() - eager(x, dw, db, pw, pb, 1).float()).abs().max()
            err = (op(x, dw, db, pw, pb, 1).float() - eager(x, dw, db, pw, pb, 1).float()).abs().max().item()
            row += [(in_bytes + out_bytes) / 4.25e12 * 1e3, f"{err:.2g}", f"{err_auto.item():.2g}"]
            rows.append(row)
            del xs
    torch.backends.cudnn.allow_tf32 = True
    print(tabulate(rows, headers=["layer", "mode", "eager", "fused kernel", "convops dw + ATen 1x1", "op (auto)",
                                  "auto path", "mem floor", "max err fused", "max err auto"]))


def sanitize() -> None:
    """Small fused-kernel cases of every instantiation family, for compute-sanitizer (memcheck, racecheck)."""
    torch.manual_seed(0)
    for shape, k, m, c_out, bias in [((1, 20, 9, 32), 3, 1, 40, True), ((1, 8, 6, 16), 5, 2, 130, False),
                                     ((1, 4, 5, 48), 7, 1, 8, True)]:
        for name, (dtype, tf32) in MODES.items():
            torch.backends.cudnn.allow_tf32 = tf32
            args = make(shape, k, m, c_out, bias, dtype)
            op(*args, (k - 1) // 2)
    torch.cuda.synchronize()
    torch.backends.cudnn.allow_tf32 = True
    print("sanitize cases done")


def ncu() -> None:
    """One seed-like call (batch 2) per mode, for `ncu --kernel-name regex:pipelined`."""
    for mode in ("tf32", "bf16"):
        dtype, tf32 = MODES[mode]
        torch.backends.cudnn.allow_tf32 = tf32
        args = make((2, 64, 512, 512), 3, 1, 128, False, dtype)
        op(*args, 1)
    torch.cuda.synchronize()


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "check"
    if what == "check":
        sys.exit(1 if check() else 0)
    elif what == "bench":
        bench(only_seed=sys.argv[2:] == ["seed"])
    elif what == "ncu":
        ncu()
    elif what == "sanitize":
        sanitize()
