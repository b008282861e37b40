"""Device-side checks of the row-streaming depthwise kernels, run on the GPU machine after convops is built (e.g. by
tools/gpu_check.sh): the bulk-copy kernel (convops/csrc/cuda/depthwise_conv2d_bulk.cuh, sm_90) and the
register-ring rows kernel (depthwise_conv2d_rows.cuh), each forced by CONVOPS_DEPTHWISE_KERNEL.

    python tools/dev_depthwise_rows.py all        # check + compute-sanitizer + bench (about 60 s)
    python tools/dev_depthwise_rows.py check      # float64 reference + bitwise vs eager fp32, seed + ~40 small shapes
    python tools/dev_depthwise_rows.py bench      # seed shape: both kernels vs eager and the copy-bandwidth floor
    python tools/dev_depthwise_rows.py shapes     # the bulk kernel's ring slots and band rows on the seed shape
    python tools/dev_depthwise_rows.py sanitize   # small cases of every instantiation, for compute-sanitizer
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import convops  # noqa: E402

# The ops may pick ATen's path where it times faster (convops/path_choice.py); here the convops kernels must run.
if hasattr(convops, "set_path_policy"):
    convops.set_path_policy("convops")

SEED_SHAPE = (16, 64, 512, 512)  # KernelBench L1-82: 3x3, stride 1, padding 0 -> 510 x 510
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


KERNELS = ("bulk", "rows")


def lane_vec(kernel: str, dname: str, k: int) -> int:
    """Elements a lane loads per row (BulkConfig::kVec, RowsConfig::kVec): a kernel takes W % vec == 0 only, and the
    dispatch only rows at least one strip (32 vectors) wide. The bulk kernel's 16-bit 3x3 lanes are 16 elements where
    W allows (a multiple of 16, at least 512) and this smallest width otherwise."""
    if kernel == "bulk":
        return 4 if dname == "fp32" else 8
    return 4 if dname == "fp32" or k * k > 25 else 8


def use_kernel(kernel: str | None) -> None:
    """Restricts the depthwise dispatch to one kernel (None: the default choice); read by every call."""
    if kernel is None:
        os.environ.pop("CONVOPS_DEPTHWISE_KERNEL", None)
    else:
        os.environ["CONVOPS_DEPTHWISE_KERNEL"] = kernel


def small_cases() -> list[tuple]:
    """(input shape, (kh, kw), (pad_h, pad_w), multiplier, bias, dtype name). W is a multiple of 8 unless noted, so
    that every dtype takes the rows kernel; a few W % 8 != 0 cases check the fallback still answers."""
    cases = []
    shapes = [(2, 3, 37, 64), (1, 4, 9, 200), (3, 2, 70, 136), (1, 1, 1, 8), (2, 5, 130, 520), (1, 3, 2, 24),
              (1, 2, 33, 1040), (2, 3, 64, 256)]
    i = 0
    for k in (3, 5, 7):
        for pad in range(k):
            for m in (1, 2):
                shape = next(s for j in range(len(shapes)) for s in [shapes[(i + j) % len(shapes)]]
                             if s[2] + 2 * pad >= k and s[3] + 2 * pad >= k)
                dtype = ("fp32", "fp16", "bf16")[i % 3]
                cases.append((shape, (k, k), (pad, pad), m, (i // 2) % 2 == 0, dtype))
                i += 1
    # Asymmetric paddings, pads past the filter (bands that see only padding), the fallback for W % 8 != 0, the
    # test suite's first case.
    cases += [((2, 3, 40, 96), (3, 3), (0, 1), 1, True, "fp32"), ((2, 3, 40, 96), (5, 5), (2, 0), 1, False, "fp32"),
              ((1, 2, 20, 48), (3, 3), (4, 5), 1, True, "fp32"), ((1, 2, 20, 48), (7, 7), (3, 3), 3, True, "bf16"),
              ((1, 2, 20, 36), (3, 3), (1, 1), 1, True, "fp16"), ((1, 2, 19, 30), (3, 3), (1, 1), 1, True, "fp32"),
              ((4, 8, 100, 128), (3, 3), (1, 1), 1, False, "fp32"), ((4, 8, 100, 128), (7, 7), (0, 0), 1, True, "fp32"),
              ((1, 2, 6, 16), (3, 3), (9, 9), 1, True, "fp32"), ((1, 2, 6, 16), (5, 5), (9, 2), 2, True, "bf16"),
              ((2, 4, 16, 16), (3, 3), (1, 1), 1, True, "fp32")]
    return cases


def kernel_ran(fn, kernel: str) -> bool:
    """Whether fn() launched depthwise_<kernel>_kernel (kernel names from the profiler)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return any(f"depthwise_{kernel}_kernel" in e.key for e in prof.key_averages())


def check(verbose: bool = True) -> bool:
    """Both kernels, each forced: every case against float64 (and bitwise against eager in fp32)."""
    ok = True
    for kernel in KERNELS:
        use_kernel(kernel)
        ok &= check_kernel(kernel, verbose)
    use_kernel(None)
    return ok


def check_kernel(kernel: str, verbose: bool) -> bool:
    """Every case against float64 (and bitwise against eager in fp32); prints each case (or only failures)."""
    torch.manual_seed(0)
    ok = True
    say = print if verbose else (lambda *a, **k: None)
    say(f"\n{kernel} kernel forced\n{'case':62s} {'ran':>4s} {'rel err':>9s} {'max err':>9s} bitwise-vs-eager")
    for shape, k, pad, m, has_bias, dname in small_cases():
        dtype = DTYPES[dname]
        c = shape[1]
        x = torch.randn(shape, device="cuda", dtype=dtype)
        w = torch.randn(c * m, 1, *k, device="cuda", dtype=dtype)
        b = torch.randn(c * m, device="cuda", dtype=dtype) if has_bias else None
        torch.full((x.numel() * m * 4,), float("nan"), device="cuda", dtype=dtype)  # poison the block reused next
        out = convops.depthwise_conv2d(x, w, b, 1, pad, 1)
        ref = F.conv2d(x.double(), w.double(), b.double() if b is not None else None, 1, pad, 1, groups=c)
        eager = F.conv2d(x, w, b, 1, pad, 1, groups=c)
        err = (out.double() - ref).abs().max().item()
        rel = ((out.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        tol = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1e-2}[dname]
        bitwise = torch.equal(out, eager)
        ran = kernel_ran(lambda: convops.depthwise_conv2d(x, w, b, 1, pad, 1), kernel)
        # The dispatch gives rows narrower than a warp's strip (32 vectors) to the plane-block kernel.
        vec = lane_vec(kernel, dname, k[0])
        # Forced, the rows kernel takes any width; the bulk kernel still declines rows narrower than a strip and
        # 16-bit 7x7 filters (BulkConfig::kTakes).
        expect_ran = shape[3] % vec == 0 and (kernel == "rows" or (shape[3] >= 32 * vec
                                                                  and (dname == "fp32" or k[0] < 7)))
        # Eager runs ATen's depthwise kernel (same fp32 FMA order) only when groups > 1; one channel goes to cuDNN.
        good = (out.shape == ref.shape and rel < tol and (bitwise or dname != "fp32" or c == 1)
                and ran == expect_ran)
        ok &= good
        name = f"{dname} {tuple(shape)} k{k} p{pad} m{m} bias={int(has_bias)}"
        (say if good else print)(f"{name:62s} {str(ran)[0]:>4s} {rel:9.2e} {err:9.2e} {bitwise}"
                                 f"{'' if good else f'   <-- FAIL ({kernel} kernel expected: {expect_ran})'}")

    # Seed shape: eager is ATen's own fp32 kernel; the rows kernel must agree bit for bit (bf16: same fp32 sums, one
    # rounding, so within one bf16 ulp).
    x = torch.rand(SEED_SHAPE, device="cuda")
    w = torch.rand(64, 1, 3, 3, device="cuda")
    for dname in ("fp32", "bf16"):
        for pad in (0, 1):
            xx, ww = x.to(DTYPES[dname]), w.to(DTYPES[dname])
            out = convops.depthwise_conv2d(xx, ww, None, 1, pad, 1)
            eager = F.conv2d(xx, ww, None, 1, pad, 1, groups=64)
            err = (out.double() - eager.double()).abs().max().item()
            bitwise = torch.equal(out, eager)
            ran = kernel_ran(lambda: convops.depthwise_conv2d(xx, ww, None, 1, pad, 1), kernel)
            good = ran and (bitwise or (dname != "fp32" and torch.allclose(out, eager, rtol=1e-2, atol=1e-2)))
            ok &= good
            (say if good else print)(f"seed {dname} pad {pad}: {kernel} kernel {ran}, max err vs eager {err:.2e}, "
                                     f"bitwise {bitwise}{'' if good else '   <-- FAIL'}")
            del out, eager
    # Poisoned output: every element written (a caching-allocator block that held NaNs just before).
    junk = torch.full((16 * 64 * 510 * 510,), float("nan"), device="cuda")
    del junk
    out = convops.depthwise_conv2d(x, w)
    finite = bool(torch.isfinite(out).all())
    ok &= finite
    (say if finite else print)(f"{kernel}: seed fp32 output fully written (no NaN left from a poisoned block): {finite}")
    return ok


def sanitize() -> None:
    """Small problems covering each instantiation (3x3, 5x5, 7x7; both column alignments; every dtype), edges,
    strips, bands and misaligned output rows, for compute-sanitizer memcheck (run without the caching allocator, so
    that a store past the output is past its allocation)."""
    torch.manual_seed(0)
    cases = [((2, 3, 37, 136), 3, 1, 1), ((1, 2, 20, 264), 3, 0, 2), ((1, 2, 11, 40), 5, 2, 1),
             ((1, 2, 11, 40), 5, 0, 1), ((1, 1, 9, 48), 7, 3, 1), ((1, 1, 9, 528), 7, 0, 1), ((1, 2, 5, 16), 3, 2, 1),
             ((1, 1, 3, 8), 7, 6, 1), ((1, 2, 6, 16), 3, 9, 1), ((2, 4, 16, 16), 3, 1, 1),
             # 16-bit 3x3 on 32-byte lanes (BulkConfig): unpadded, centred with a ragged second strip, off centre
             ((1, 2, 19, 512), 3, 0, 1), ((1, 1, 13, 528), 3, 1, 2), ((1, 1, 7, 1040), 3, 2, 1)]
    for kernel, (dname, dtype) in ((kernel, d) for kernel in KERNELS for d in DTYPES.items()):
        use_kernel(kernel)
        for shape, k, pad, m in cases:
            x = torch.randn(shape, device="cuda", dtype=dtype)
            w = torch.randn(shape[1] * m, 1, k, k, device="cuda", dtype=dtype)
            b = torch.randn(shape[1] * m, device="cuda", dtype=dtype)
            out = convops.depthwise_conv2d(x, w, b, 1, pad, 1)
            ref = F.conv2d(x.float(), w.float(), b.float(), 1, pad, 1, groups=shape[1])
            close = torch.allclose(out.float(), ref, rtol=2e-2, atol=2e-2)
            print(f"sanitize {kernel} {dname} {shape} k{k} p{pad} m{m}: {'ok' if close else 'WRONG'}")
    torch.cuda.synchronize()
    print("sanitize cases done")


def bench() -> None:
    from triton.testing import do_bench

    torch.manual_seed(0)
    card = torch.cuda.get_device_name()
    src = torch.empty(2**29, device="cuda")  # 2 GiB
    dst = torch.empty_like(src)
    copy_ms = do_bench(lambda: dst.copy_(src), return_mode="median")
    copy_bw = 2 * src.numel() * 4 / (copy_ms * 1e-3)
    src = dst = None  # free 4 GiB
    n, c, h, w_ = SEED_SHAPE
    print(f"\n{card}: copy {copy_bw / 1e9:.0f} GB/s (2 GiB copy_, do_bench median); floor = (input + output bytes) / "
          f"copy bandwidth")
    print(f"{'problem':24s} {'dtype':5s} {'eager ms':>8s} {'kernel':6s} {'ms':>8s} {'repeat':>7s} {'% floor':>8s} "
          f"{'vs eager':>8s} {'max err':>9s}")
    x = torch.rand(SEED_SHAPE, device="cuda")
    for k, pad, dnames in ((3, 0, ("fp32", "bf16", "fp16")), (3, 1, ("fp32",)), (5, 2, ("fp32", "bf16")),
                           (7, 3, ("fp32", "bf16"))):
        w = torch.rand(c, 1, k, k, device="cuda")
        for dname in dnames:
            xx, ww = x.to(DTYPES[dname]), w.to(DTYPES[dname])
            out_hw = (h + 2 * pad - k + 1) * (w_ + 2 * pad - k + 1)
            floor_ms = (xx.numel() + n * c * out_hw) * xx.element_size() / copy_bw * 1e3
            eager = F.conv2d(xx, ww, None, 1, pad, 1, groups=c).float()
            eager_ms = do_bench(lambda: F.conv2d(xx, ww, None, 1, pad, 1, groups=c), return_mode="median")
            for kernel in KERNELS:
                use_kernel(kernel)
                t = do_bench(lambda: convops.depthwise_conv2d(xx, ww, None, 1, pad, 1), return_mode="median")
                t2 = do_bench(lambda: convops.depthwise_conv2d(xx, ww, None, 1, pad, 1), return_mode="median")
                err = (convops.depthwise_conv2d(xx, ww, None, 1, pad, 1).float() - eager).abs().max().item()
                name = f"seed {k}x{k} pad {pad}"
                print(f"{name:24s} {dname:5s} {eager_ms:8.3f} {kernel:6s} {t:8.4f} {t2:7.4f} "
                      f"{100 * floor_ms / t:7.1f}% {eager_ms / t:7.2f}x {err:9.2e}", flush=True)
            use_kernel(None)
            del eager


def shapes() -> None:
    """The bulk kernel on the seed shape (3x3, no padding) under ring slots x band rows, each in its own process
    (the kernel reads CONVOPS_DEPTHWISE_BULK once)."""
    configs = ["8,16", "16,16", "4,16", "8,8", "16,8", "8,12", "8,24", "16,24"]
    for config in configs:
        env = {**os.environ, "CONVOPS_DEPTHWISE_BULK": config, "CONVOPS_DEPTHWISE_KERNEL": "bulk"}
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "seed-once"], env=env, capture_output=True,
                           text=True, timeout=120)
        print(f"stages,band_rows {config:6s}: {(r.stdout + r.stderr).strip()[-300:]}", flush=True)


def seed_once() -> None:
    from triton.testing import do_bench
    x = torch.rand(SEED_SHAPE, device="cuda")
    times = []
    for dname, k, pad in (("fp32", 3, 0), ("bf16", 3, 0), ("fp32", 3, 1), ("fp32", 5, 2), ("bf16", 5, 2)):
        xx = x.to(DTYPES[dname])
        ww = torch.rand(SEED_SHAPE[1], 1, k, k, device="cuda", dtype=xx.dtype)
        ok = (torch.equal(convops.depthwise_conv2d(xx, ww, None, 1, pad),
                          F.conv2d(xx, ww, None, 1, pad, groups=SEED_SHAPE[1])) or dname != "fp32")
        ms = do_bench(lambda: convops.depthwise_conv2d(xx, ww, None, 1, pad), return_mode="median")
        times.append(f"{dname} {k}x{k}p{pad} {ms:.4f}{'' if ok else ' WRONG'}")
    print(", ".join(times))


def all_() -> None:
    start = time.time()
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    passed = check(verbose=False)
    print(f"check: {'PASSED' if passed else 'FAILED'} ({time.time() - start:.0f} s)")
    san = subprocess.run(["compute-sanitizer", "--tool", "memcheck", "--print-limit", "5", sys.executable,
                          os.path.abspath(__file__), "sanitize"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    lines = (san.stdout + san.stderr).splitlines()
    wrong = sum("WRONG" in line for line in lines)
    print("compute-sanitizer memcheck exit", san.returncode, "| wrong results:", wrong, "|",
          " | ".join(line for line in lines if "ERROR SUMMARY" in line or "Invalid" in line or "WRONG" in line
                     or "sanitize cases done" in line)[:800])
    print(f"sanitizer: {time.time() - start:.0f} s")
    bench()
    print(f"total: {time.time() - start:.0f} s")
    ok = passed and san.returncode == 0 and wrong == 0 and any("ERROR SUMMARY: 0 errors" in line for line in lines)
    print("CHECK", "PASSED" if ok else "FAILED")


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "all"
    if mode == "check":
        sys.exit(0 if check() else 1)
    {"bench": bench, "sanitize": sanitize, "shapes": shapes, "seed-once": seed_once, "all": all_}[mode]()
