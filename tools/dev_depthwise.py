"""Device-side checks of the depthwise kernels, run on the GPU machine (the first three after tools/gpu_check.sh has
built convops).

    python tools/dev_depthwise.py sanitize   # small cases of every kernel variant (run under compute-sanitizer)
    python tools/dev_depthwise.py bench      # seed shapes: convops vs eager, max error, bandwidth vs copy floor
    python tools/dev_depthwise.py profile    # one launch of each seed kernel, for Nsight Compute
    python tools/dev_depthwise.py gpu        # the whole device call: build + tests, bench, sanitizer, ncu summary
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import convops


def sanitize() -> None:
    """One small problem per kernel variant: specialised 3x3 / 5x5, general tiled, direct fallback, and the fused
    kernel in every math mode, in NCHW, channels_last and sliced layouts."""
    torch.manual_seed(0)
    dw_cases = [((2, 3, 37, 133), (6, 1, 3, 3), 1, 1, 1), ((1, 2, 20, 21), (2, 1, 5, 5), 1, 2, 1),
                ((1, 2, 20, 30), (4, 1, 3, 2), (2, 1), (1, 0), (1, 2)),
                ((1, 1, 300, 700), (1, 1, 9, 9), 3, 4, (32, 70))]
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        for shape, wshape, s, p, d in dw_cases:
            for fmt in ("nchw", "nhwc", "sliced"):
                x = torch.randn(shape, device="cuda", dtype=dtype)
                if fmt == "nhwc":
                    x = x.contiguous(memory_format=torch.channels_last)
                elif fmt == "sliced":
                    x = torch.randn(shape[0], shape[1] + 1, shape[2], shape[3] * 2, device="cuda",
                                    dtype=dtype)[:, 1:, :, ::2]
                w = torch.randn(wshape, device="cuda", dtype=dtype)
                b = torch.randn(wshape[0], device="cuda", dtype=dtype)
                out = convops.depthwise_conv2d(x, w, b, s, p, d)
                ref = F.conv2d(x.double(), w.double(), b.double(), s, p, d, groups=shape[1])
                err = (out.double() - ref).abs().max().item()
                print(f"depthwise {dtype} {fmt} {shape} k{wshape[2:]} s{s} d{d}: max err {err:.2e}")
    sep_cases = [((2, 20, 9, 70), 1, 130, (3, 3), 1, 1, 1), ((1, 3, 15, 19), 2, 12, (3, 2), 2, 1, (1, 2)),
                 ((1, 2, 170, 900), 1, 3, (9, 9), 1, 0, (20, 110))]
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        for tf32 in ((True, False) if dtype == torch.float32 else (False,)):
            torch.backends.cudnn.allow_tf32 = tf32
            for shape, m, c_out, k, s, p, d in sep_cases:
                for fmt in ("nchw", "nhwc"):
                    x = torch.randn(shape, device="cuda", dtype=dtype)
                    if fmt == "nhwc":
                        x = x.contiguous(memory_format=torch.channels_last)
                    dw = torch.randn(m * shape[1], 1, *k, device="cuda", dtype=dtype)
                    db = torch.randn(m * shape[1], device="cuda", dtype=dtype)
                    pw = torch.randn(c_out, m * shape[1], 1, 1, device="cuda", dtype=dtype)
                    pb = torch.randn(c_out, device="cuda", dtype=dtype)
                    out = convops.depthwise_separable_conv2d(x, dw, db, pw, pb, s, p, d)
                    ref = F.conv2d(F.conv2d(x, dw, db, s, p, d, groups=shape[1]), pw, pb)
                    err = (out.double() - ref.double()).abs().max().item()
                    print(f"separable {dtype} tf32={tf32} {fmt} {shape}->{c_out} k{k}: max err vs eager {err:.2e}")
    torch.backends.cudnn.allow_tf32 = True
    torch.cuda.synchronize()
    print("sanitize cases done")


def bench() -> None:
    from triton.testing import do_bench

    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    torch.manual_seed(0)
    copy_src = torch.empty(2**28, device="cuda")
    copy_dst = torch.empty_like(copy_src)
    copy_ms = do_bench(lambda: copy_dst.copy_(copy_src), return_mode="median")
    copy_bw = 2 * copy_src.numel() * 4 / (copy_ms * 1e-3)  # bytes / s
    print(f"copy bandwidth {copy_bw / 1e9:.0f} GB/s")
    rows = []

    def time_pair(name, ours, eager, nbytes):
        out, ref = ours(), eager()
        err = (out.double() - ref.double()).abs().max().item()
        tol = 1e-2 if out.dtype == torch.bfloat16 else 1e-4
        close = torch.allclose(out.double(), ref.double(), atol=tol, rtol=tol)
        del out, ref
        t_ours = do_bench(ours, return_mode="median")
        t_eager = do_bench(eager, return_mode="median")
        floor = nbytes / copy_bw * 1e3  # ms
        rows.append((name, t_ours, t_eager, floor, err, close))

    x = torch.rand(16, 64, 512, 512, device="cuda")
    w = torch.rand(64, 1, 3, 3, device="cuda")
    for mode in ("tf32", "fp32", "bf16"):
        torch.backends.cudnn.allow_tf32 = mode != "fp32"
        xx, ww = (x.bfloat16(), w.bfloat16()) if mode == "bf16" else (x, w)
        nbytes = (xx.numel() + 16 * 64 * 510 * 510) * xx.element_size()
        time_pair(f"depthwise 3x3 {mode}", lambda: convops.depthwise_conv2d(xx, ww),
                  lambda: F.conv2d(xx, ww, groups=64), nbytes)
    xl = x.contiguous(memory_format=torch.channels_last)
    time_pair("depthwise 3x3 fp32 NHWC", lambda: convops.depthwise_conv2d(xl, w),
              lambda: F.conv2d(xl, w, groups=64), (x.numel() + 16 * 64 * 510 * 510) * 4)

    dw = torch.rand(64, 1, 3, 3, device="cuda")
    pw = torch.rand(128, 64, 1, 1, device="cuda")
    for mode in ("tf32", "fp32", "bf16"):
        torch.backends.cudnn.allow_tf32 = mode != "fp32"
        cast = (lambda t: t.bfloat16()) if mode == "bf16" else (lambda t: t)
        xx, dd, pp = cast(x), cast(dw), cast(pw)
        nbytes = (xx.numel() + 16 * 128 * 512 * 512) * xx.element_size()
        time_pair(f"separable 3x3 64->128 {mode}",
                  lambda: convops.depthwise_separable_conv2d(xx, dd, None, pp, None, 1, 1),
                  lambda: F.conv2d(F.conv2d(xx, dd, None, 1, 1, groups=64), pp), nbytes)
    torch.backends.cudnn.allow_tf32 = True
    xl, dl, pl = (t.contiguous(memory_format=torch.channels_last) for t in (x, dw, pw))
    time_pair("separable 3x3 64->128 tf32 NHWC",
              lambda: convops.depthwise_separable_conv2d(xl, dl, None, pl, None, 1, 1),
              lambda: F.conv2d(F.conv2d(xl, dl, None, 1, 1, groups=64), pl), (x.numel() + 16 * 128 * 512 * 512) * 4)

    print(f"{'problem':34s} {'convops ms':>10s} {'eager ms':>9s} {'speedup':>8s} {'% floor':>8s} {'max err':>9s} "
          "allclose")
    for name, t_ours, t_eager, floor, err, close in rows:
        print(f"{name:34s} {t_ours:10.3f} {t_eager:9.3f} {t_eager / t_ours:8.2f} {100 * floor / t_ours:7.1f}% "
              f"{err:9.2e} {close}")


def profile() -> None:
    """One launch of each seed kernel (batch 4; the depthwise one in fp32 and bf16), for Nsight Compute."""
    convops.set_path_policy("convops")
    x = torch.rand(4, 64, 512, 512, device="cuda")
    w = torch.rand(64, 1, 3, 3, device="cuda")
    pw = torch.rand(128, 64, 1, 1, device="cuda")
    convops.depthwise_conv2d(x, w)
    convops.depthwise_conv2d(x.bfloat16(), w.bfloat16())
    convops.depthwise_separable_conv2d(x, w, None, pw, None, 1, 1)
    torch.cuda.synchronize()


# One device call for the depthwise family (run: `python3 tools/dev_depthwise.py gpu`).
GPU_CALL = r"""
set -uo pipefail
export PYTHONUNBUFFERED=1 CONVOPS_OPS=depthwise
out="${OUT:-/tmp}"
tests="tests/test_depthwise_conv2d.py tests/test_depthwise_separable_conv2d.py"
# The error tests run apart: on the device machine an exception thrown by the extension has crashed the process.
timeout 200 bash tools/gpu_check.sh $tests -q -rf --maxfail=25 -k "not test_errors" "$@" 2>&1 \
  | tee "$out/tests.log" | grep -vE "^(SKIPPED|PASSED|\[[0-9]/)" | tail -n 40
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout 40 python3 -m pytest $tests -q -rf -k test_errors > "$out/errors.log" 2>&1
echo "error tests exit $? ($(grep -cE "Segmentation fault" "$out/errors.log") segfault lines)"
timeout 80 python3 tools/dev_depthwise.py bench 2>&1 | tee "$out/bench.log"
timeout 90 compute-sanitizer --tool memcheck --print-limit 5 python3 tools/dev_depthwise.py sanitize \
  > "$out/sanitizer.log" 2>&1
echo "sanitizer exit $?"; grep -E "ERROR SUMMARY|Invalid|sanitize cases done" "$out/sanitizer.log" | head -n 12
echo "== Nsight Compute, seed kernels at batch 4"
timeout 100 ncu -k regex:depthwise --section SpeedOfLight --section Occupancy --section WarpStateStats \
  --section LaunchStats python3 tools/dev_depthwise.py profile > "$out/ncu.log" 2>&1
keys="depthwise_(conv2d_tile|separable)|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Th|Registers Per"
grep -E "$keys|Achieved Occupancy|Stall|Warp Cycles Per Issued" "$out/ncu.log" \
  | sed -E 's/ +/ /g' | cut -c1-150 | head -n 40
"""


def gpu() -> None:
    import subprocess
    sys.exit(subprocess.run(["bash", "-c", GPU_CALL]).returncode)


if __name__ == "__main__":
    {"sanitize": sanitize, "bench": bench, "profile": profile, "gpu": gpu}[sys.argv[1]]()
