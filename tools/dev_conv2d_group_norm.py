"""GPU checks of convops::conv2d_group_norm_scale_max_pool_clamp beyond pytest (run on the device machine).

  python tools/dev_conv2d_group_norm.py sanitize   # small cases of every kernel variant, for compute-sanitizer
  python tools/dev_conv2d_group_norm.py bench      # seed shape vs eager per precision mode (+ --compile: Inductor)
  python tools/dev_conv2d_group_norm.py profile    # a few seed-shape calls, for ncu
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import convops


def chain(x, w, b, stride, padding, dilation, groups, gamma, beta, eps, scale, pool, lo, hi):
    y = F.conv2d(x, w, b, stride, padding, dilation)
    y = F.group_norm(y, groups, gamma, beta, eps)
    y = y * (scale.reshape(1, -1, 1, 1) if scale.numel() != 1 else scale.reshape(1, 1, 1, 1))
    y = F.max_pool2d(y, pool, pool)
    return torch.clamp(y, lo, hi) if lo is not None or hi is not None else y


def problem(n, cin, h, w, cout, k, groups, pool, dtype, stride=1, padding=0, dilation=1, layout="contiguous",
            lo=0.0, hi=1.0):
    dev = "cuda"
    x = torch.rand(n, cin, h, w, device=dev, dtype=dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    conv = torch.nn.Conv2d(cin, cout, k, stride, padding, dilation).to(dev, dtype)
    gamma = torch.randn(cout, device=dev, dtype=dtype)
    beta = torch.randn(cout, device=dev, dtype=dtype)
    scale = torch.randn(cout, 1, 1, device=dev, dtype=dtype)
    pair = lambda v: [v, v] if isinstance(v, int) else list(v)  # noqa: E731
    return (x, conv.weight.detach(), conv.bias.detach(), pair(stride), pair(padding), pair(dilation), groups, gamma,
            beta, 1e-5, scale, pair(pool), lo, hi)


def sanitize():
    cases = [
        dict(n=2, cin=3, h=19, w=21, cout=8, k=3, groups=4, pool=2),
        dict(n=1, cin=13, h=20, w=37, cout=72, k=5, groups=8, pool=3, padding=2),
        dict(n=1, cin=2, h=40, w=80, cout=8, k=3, groups=4, pool=(3, 35)),
        dict(n=2, cin=4, h=17, w=18, cout=16, k=3, groups=2, pool=4, layout="channels_last", stride=2),
    ]
    for dtype, tf32 in [(torch.float32, True), (torch.float32, False), (torch.bfloat16, False),
                        (torch.float16, False)]:
        torch.backends.cudnn.allow_tf32 = tf32
        for case in cases:
            args = problem(**case, dtype=dtype)
            out = convops.conv2d_group_norm_scale_max_pool_clamp(*args)
            ref = chain(*[a.double() if isinstance(a, torch.Tensor) else a for a in args])
            err = (out.double() - ref).abs().max().item()
            print(f"sanitize {dtype} tf32={tf32} {case}: max err vs fp64 {err:.2e}")
    torch.cuda.synchronize()


def bench(with_compile: bool):
    from triton.testing import do_bench
    print("device:", torch.cuda.get_device_name())
    rows = []
    for mode in ["tf32", "fp32", "bf16"]:
        dtype = torch.bfloat16 if mode == "bf16" else torch.float32
        torch.backends.cudnn.allow_tf32 = mode != "fp32"
        torch.manual_seed(0)
        args = problem(128, 8, 128, 128, 64, 3, 16, 4, dtype)
        ours = lambda: convops.conv2d_group_norm_scale_max_pool_clamp(*args)  # noqa: E731
        eager = lambda: chain(*args)  # noqa: E731
        err = (ours().float() - eager().float()).abs().max().item()
        ref = chain(*[a.double() if isinstance(a, torch.Tensor) else a for a in args])
        err64 = (ours().double() - ref).abs().max().item()
        print(mode, "NaN in ours:", ours().isnan().sum().item(), "in fp64 chain:", ref.isnan().sum().item(),
              "in eager:", eager().isnan().sum().item())
        t_ours = do_bench(ours, warmup=50, rep=300, return_mode="median")
        t_eager = do_bench(eager, warmup=50, rep=300, return_mode="median")
        t_ours2 = do_bench(ours, warmup=50, rep=300, return_mode="median")
        row = dict(mode=mode, ours=t_ours, ours_again=t_ours2, eager=t_eager, err_vs_eager=err, err_vs_fp64=err64)
        if with_compile and mode != "bf16":
            compiled = torch.compile(chain)
            compiled(*args)
            row["inductor"] = do_bench(lambda: compiled(*args), warmup=50, rep=300, return_mode="median")
        rows.append(row)
    torch.backends.cudnn.allow_tf32 = True
    args = problem(128, 8, 128, 128, 64, 3, 16, 4, torch.float32)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            convops.conv2d_group_norm_scale_max_pool_clamp(*args)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=6))
    for r in rows:
        print("  ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
              f"speedup={r['eager'] / r['ours']:.1f}x")


def profile():
    args = problem(128, 8, 128, 128, 64, 3, 16, 4, torch.float32)
    for _ in range(3):
        convops.conv2d_group_norm_scale_max_pool_clamp(*args)
    torch.cuda.synchronize()


if __name__ == "__main__":
    if sys.argv[1] == "sanitize":
        sanitize()
    elif sys.argv[1] == "profile":
        profile()
    else:
        bench("--compile" in sys.argv)
