"""Small calls of every CUDA kernel path in convops, for compute-sanitizer (tools/run_sanitizers.sh).

Each case is small enough to run in seconds under memcheck/racecheck/initcheck, yet exercises the kernel's tiling
edges: odd sizes, partial tiles, padding, stride and dilation, every dtype, TF32 on and off, channels_last and
strided inputs. It also checks the results against ATen, so a run that is clean for the sanitizer but wrong fails.
"""
from __future__ import annotations

import itertools
import os
import sys

import torch
import torch.nn.functional as F

import convops

convops.set_path_policy("convops")  # every case must reach the convops kernel, not whatever "auto" times faster

DEV = "cuda"


def rand(*shape, dtype=torch.float32, layout="contiguous"):
    t = torch.rand(*shape, device=DEV, dtype=dtype) * 2 - 1
    if layout == "channels_last":
        t = t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)
    elif layout == "strided":
        t = torch.rand(*shape[:-1], shape[-1] * 2, device=DEV, dtype=dtype)[..., ::2] * 2 - 1
    return t


def check(name, out, ref, tol):
    """NaN / +Inf / -Inf where the reference has them, finite values within tol (1 + max |ref|)."""
    out, ref = out.float(), ref.float().to(out.device)
    masks_equal = all(torch.equal(f(out), f(ref)) for f in (torch.isnan, torch.isposinf, torch.isneginf))
    finite = ref.isfinite()
    err = (out[finite] - ref[finite]).abs().max().item() if finite.any() else 0.0
    scale = ref[finite].abs().max().item() if finite.any() else 0.0
    ok = masks_equal and err <= tol * (1 + scale)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max err {err:.2e}{'' if masks_equal else ', NaN/Inf masks differ'}")
    return ok


def stride_two(name, x, w, b, tol):
    """The case of conv_transpose2d / 3d (by x's rank) with stride 2 and no padding: (name, convops, ATen, tol)."""
    dims = x.dim() - 2
    ours, aten = getattr(torch.ops.convops, f"conv_transpose{dims}d"), getattr(F, f"conv_transpose{dims}d")
    return (f"conv_transpose{dims}d kernel = stride 2 {name}", lambda: ours(x, w, b, 2, 0, 0, 1, 1),
            lambda: aten(x, w, b, 2, 0, 0, 1, 1), tol)


def restricted(variable, kernel, fn, *args):
    """fn(*args) with a dispatch restricted to one kernel by an environment variable it reads every call."""
    os.environ[variable] = kernel
    try:
        return fn(*args)
    finally:
        del os.environ[variable]


def with_depthwise_kernel(kernel, fn, *args):
    return restricted("CONVOPS_DEPTHWISE_KERNEL", kernel, fn, *args)


def with_separable_kernel(kernel, fn, *args):
    return restricted("CONVOPS_SEPARABLE_KERNEL", kernel, fn, *args)


def cases():
    tol = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 5e-2}
    for dtype, tf32, layout in itertools.product(tol, (True, False), ("contiguous", "channels_last", "strided")):
        if dtype != torch.float32 and not tf32:
            continue
        torch.backends.cudnn.allow_tf32 = tf32
        tag = f"{dtype} tf32={tf32} {layout}"
        x = rand(2, 6, 19, 37, dtype=dtype, layout=layout)
        for k, s, p, d, m in [(3, 1, 1, 1, 1), (5, 1, 2, 1, 2), (3, 2, 0, 2, 1), (7, 3, 3, 1, 1)]:
            w = rand(6 * m, 1, k, k, dtype=dtype)
            b = rand(6 * m, dtype=dtype)
            yield (f"depthwise k{k} s{s} p{p} d{d} m{m} {tag}", lambda: torch.ops.convops.depthwise_conv2d(x, w, b, s, p, d),
                   lambda: F.conv2d(x, w, b, s, p, d, groups=6), tol[dtype])
            pw, pb = rand(11, 6 * m, 1, 1, dtype=dtype), rand(11, dtype=dtype)  # pb: the mixed path's bias add
            yield (f"separable k{k} s{s} p{p} d{d} m{m} {tag}",
                   lambda: torch.ops.convops.depthwise_separable_conv2d(x, w, b, pw, pb, s, p, d),
                   lambda: F.conv2d(F.conv2d(x, w, b, s, p, d, groups=6), pw, pb), tol[dtype])
        if layout == "contiguous":  # the row-streaming kernels: contiguous NCHW, stride 1, W a multiple of 8
            xr = rand(2, 6, 21, 40, dtype=dtype)
            xw = rand(1, 3, 13, 520, dtype=dtype)  # wide enough for the bulk-copy and rows kernels in every dtype
            for k, p in [(3, 1), (3, 0), (5, 2), (7, 3), (7, 0)]:
                w = rand(6, 1, k, k, dtype=dtype)
                b = rand(6, dtype=dtype)
                yield (f"depthwise narrow k{k} p{p} {tag}",
                       lambda: torch.ops.convops.depthwise_conv2d(xr, w, b, 1, p, 1),
                       lambda: F.conv2d(xr, w, b, 1, p, 1, groups=6), tol[dtype])
                for kernel in ("bulk", "rows"):
                    yield (f"depthwise {kernel} k{k} p{p} {tag}",
                           lambda: with_depthwise_kernel(kernel, torch.ops.convops.depthwise_conv2d, xw, w[:3], b[:3],
                                                         1, p, 1),
                           lambda: F.conv2d(xw, w[:3], b[:3], 1, p, 1, groups=3), tol[dtype])
                if p == (k - 1) // 2:  # the fused separable kernel: "same" padding, W a multiple of 16 bytes
                    pw = rand(130, 6, 1, 1, dtype=dtype)
                    yield (f"separable fused k{k} {tag}",  # the tile kernel: the small-problem one left out
                           lambda: with_separable_kernel("tile", torch.ops.convops.depthwise_separable_conv2d, xr, w,
                                                         b, pw, None, 1, p, 1),
                           lambda: F.conv2d(F.conv2d(xr, w, b, 1, p, 1, groups=6), pw), tol[dtype])
                if (k, p) == (3, 1):  # the row-streaming separable kernel (Hopper, <= 64 -> 64 to 128 channels)
                    pw_s = rand(72, 6, 1, 1, dtype=dtype)
                    xs = rand(1, 6, 9, 200, dtype=dtype)  # two strips, the second ragged
                    xt = rand(2, 6, 330, 40, dtype=dtype)  # 660 rows: shares of 5 rows, the ring refilled
                    for shape, inp in (("one strip", xr), ("two strips", xs), ("tall", xt)):
                        yield (f"separable streaming {shape} {tag}",
                               lambda inp=inp: with_separable_kernel(
                                   "streaming", torch.ops.convops.depthwise_separable_conv2d, inp, w, b, pw_s, None,
                                   1, 1, 1),
                               lambda inp=inp: F.conv2d(F.conv2d(inp, w, b, 1, 1, 1, groups=6), pw_s), tol[dtype])
            # The plane-block kernel with several planes a block (enough planes that blocks take more than one).
            xp = rand(96, 6, 7, 9, dtype=dtype)
            for k, s_, m in [(3, 1, 1), (3, 2, 2), (5, 1, 1)]:
                w = rand(6 * m, 1, k, k, dtype=dtype)
                yield (f"depthwise planes k{k} s{s_} m{m} {tag}",
                       lambda: with_depthwise_kernel("planes", torch.ops.convops.depthwise_conv2d, xp, w, None, s_,
                                                     k // 2, 1),
                       lambda: F.conv2d(xp, w, None, s_, k // 2, 1, groups=6), tol[dtype])
                # The small-problem kernel on the same planes, and with a padding past half the filter.
                for p_ in (k // 2, k):
                    yield (f"depthwise small k{k} s{s_} p{p_} m{m} {tag}",
                           lambda p_=p_: with_depthwise_kernel("small", torch.ops.convops.depthwise_conv2d, xp, w,
                                                               None, s_, p_, 1),
                           lambda p_=p_: F.conv2d(xp, w, None, s_, p_, 1, groups=6), tol[dtype])
            # The small-problem separable kernel: mid channels over a cluster (48: 3 slices of 16; 272: 16 slices,
            # a non-portable cluster; 7x7 planes, tiles of 7), one CTA a tile (12 and 6 mid channels), tiles of 32
            # that span rows (20 x 19 outputs), strides 1 and 2, multipliers, padding past half the filter.
            for shape, k, s_, p_, m in [((1, 48, 7, 7), 5, 1, 2, 1), ((1, 272, 7, 7), 3, 1, 1, 1),
                                        ((2, 6, 20, 19), 3, 2, 3, 2), ((1, 6, 20, 19), 7, 1, 3, 1),
                                        ((1, 24, 14, 14), 3, 1, 1, 2)]:
                xs = rand(*shape, dtype=dtype)
                c = shape[1]
                w, b = rand(c * m, 1, k, k, dtype=dtype), rand(c * m, dtype=dtype)
                pw, pb = rand(19, c * m, 1, 1, dtype=dtype), rand(19, dtype=dtype)
                yield (f"separable small {tuple(shape)} k{k} s{s_} p{p_} m{m} {tag}",
                       lambda: with_separable_kernel("small", torch.ops.convops.depthwise_separable_conv2d, xs, w, b,
                                                     pw, pb, s_, p_, 1),
                       lambda: F.conv2d(F.conv2d(xs, w, b, s_, p_, 1, groups=c), pw, pb), tol[dtype])
            # The register-blocked kernel: many planes a block, bands of a tall plane, an odd padding, a multiplier.
            for shape, k, p_, m in [((96, 6, 7, 8), 3, 1, 1), ((1, 6, 300, 40), 7, 3, 1), ((4, 6, 14, 14), 5, 1, 2)]:
                xb = rand(*shape, dtype=dtype)
                w = rand(6 * m, 1, k, k, dtype=dtype)
                b = rand(6 * m, dtype=dtype)
                yield (f"depthwise blocked {tuple(shape)} k{k} p{p_} m{m} {tag}",
                       lambda: with_depthwise_kernel("blocked", torch.ops.convops.depthwise_conv2d, xb, w, b, 1, p_,
                                                     1),
                       lambda: F.conv2d(xb, w, b, 1, p_, 1, groups=6), tol[dtype])
            # Non-finite weight taps, one meeting only the zeros around the input: the correction kernel's case.
            wn = rand(6, 4, 3, 5, dtype=dtype)
            wn[0, 0, 0, 0], wn[1, 2, 2, 4], wn[3, 1, 1, 2] = float("inf"), float("-inf"), float("nan")
            yield (f"conv_transpose2d non-finite weights {tag}",
                   lambda: torch.ops.convops.conv_transpose2d(x, wn, None, 2, 2, 1, 1, 1),
                   lambda: F.conv_transpose2d(x.double().cpu(), wn.double().cpu(), None, 2, 2, 1, 1, 1), tol[dtype])
        for s, p, op, g, d in [(1, 0, 0, 1, 1), (2, 1, 1, 2, 1), (3, 2, 0, 1, 2)]:
            w2 = rand(6, 4 // g * 1, 3, 5, dtype=dtype)
            yield (f"conv_transpose2d s{s} p{p} op{op} g{g} d{d} {tag}",
                   lambda: torch.ops.convops.conv_transpose2d(x, w2, None, s, p, op, g, d),
                   lambda: F.conv_transpose2d(x, w2, None, s, p, op, g, d), tol[dtype])
            x3 = rand(2, 6, 5, 7, 9, dtype=dtype, layout=layout)
            w3 = rand(6, 4 // g, 3, 3, 3, dtype=dtype)
            b3 = rand(4, dtype=dtype)
            yield (f"conv_transpose3d s{s} p{p} op{op} g{g} d{d} {tag}",
                   lambda: torch.ops.convops.conv_transpose3d(x3, w3, b3, s, p, op, g, d),
                   lambda: F.conv_transpose3d(x3, w3, b3, s, p, op, g, d), tol[dtype])
        # Kernel equal to the stride: one GEMM and a pixel shuffle on contiguous inputs (TF32 too, on operands
        # rounded to nearest), the implicit-GEMM kernel otherwise.
        wk, bk = rand(6, 5, 2, 2, dtype=dtype), rand(5, dtype=dtype)
        yield stride_two(tag, x, wk, bk, tol[dtype])
        # Rows of 16: the tap shuffle's vector loads, with k_w = 2 compiled in and k_w = 3 at run time.
        xw = rand(2, 6, 3, 16, dtype=dtype)
        for kernel in [(2, 2), (1, 3)]:
            wv = rand(6, 5, *kernel, dtype=dtype)
            yield (f"conv_transpose2d kernel = stride {kernel} rows of 16 {tag}",
                   lambda wv=wv, kernel=kernel: torch.ops.convops.conv_transpose2d(xw, wv, bk, kernel, 0, 0, 1, 1),
                   lambda wv=wv, kernel=kernel: F.conv_transpose2d(xw, wv, bk, kernel, 0, 0, 1, 1), tol[dtype])
        # TF32's fused k_h x 2 kernel over several tiles: C_in 136 (five stages of 32, the last a part one, around
        # the three-stage ring), 70 x 2 output row families (past a whole 128-row tile), 260 pixels (three pixel
        # tiles, the last part-filled).
        if layout == "contiguous" and dtype == torch.float32:
            xk, wk2, bk2 = rand(2, 136, 10, 26, dtype=dtype), rand(136, 70, 2, 2, dtype=dtype), rand(70, dtype=dtype)
            yield stride_two(f"fused tiles {tag}", xk, wk2, bk2, tol[dtype])
        xw3, ww3 = rand(2, 6, 2, 3, 16, dtype=dtype), rand(6, 5, 2, 2, 2, dtype=dtype)
        yield stride_two(f"rows of 16 {tag}", xw3, ww3, bk, tol[dtype])
        # Fewer pixels than C_out taps: pixel-major products and the transposing shuffle, which run for contiguous
        # fp32 inputs with TF32 allowed (elsewhere these are channel-major cases like those above): two tiles of 32
        # pixels across rows, the last channel tile part-filled, 40 input channels (the weight's transposing
        # rounding over two tiles); 2-D and 3-D.
        if layout == "contiguous" and dtype == torch.float32:
            xf, wf, bf = rand(2, 40, 5, 9, dtype=dtype), rand(40, 40, 2, 2, dtype=dtype), rand(40, dtype=dtype)
            yield stride_two(f"few pixels {tag}", xf, wf, bf, tol[dtype])
            xf3, wf3 = rand(2, 6, 2, 3, 3, dtype=dtype), rand(6, 9, 2, 2, 2, dtype=dtype)
            yield stride_two(f"few pixels {tag}", xf3, wf3, bf[:9], tol[dtype])
        # Stride 1 on rows that load as vectors: the wgmma shift kernel (TF32, bf16, fp16; csrc/cuda/
        # conv_transpose_shift_gemm.cuh), the seeds' kernels at small size: 3-D C_out 24 over three k-steps, 2-D
        # C_out 64 with an output row split in tiles; then C_out 70 (two channel blocks) and rows padded past an odd
        # width (their last columns loaded element by element). (C_out 64 and 70 take the warp-specialized form,
        # conv_transpose_shift_gemm_ws.cuh: its mbarriers are what synccheck looks at; the last case's 600 units a
        # k-step take its producer's two halves.)
        if layout == "contiguous":
            xs3, ws3, bs3 = rand(2, 48, 5, 7, 12, dtype=dtype), rand(48, 24, 3, 3, 3, dtype=dtype), rand(24, dtype=dtype)
            xs2, ws2 = rand(1, 64, 4, 400, dtype=dtype), rand(64, 64, 3, 7, dtype=dtype)
            xs70, ws70 = rand(2, 19, 9, 12, dtype=dtype), rand(19, 70, 3, 2, dtype=dtype)
            xsp = rand(2, 10, 5, 16, dtype=dtype)[..., :13]
            wsp, wsq = rand(10, 6, 3, 4, dtype=dtype), rand(10, 6, 3, 3, dtype=dtype)
            x1, w1 = rand(3, 20, 1, 4, dtype=dtype), rand(20, 8, 2, 1, dtype=dtype)
            xh, wh, bh = rand(2, 16, 4, 12, 100, dtype=dtype), rand(16, 64, 3, 3, 1, dtype=dtype), rand(64, dtype=dtype)
            # (16-bit bricks of the 3-D case and of the 3 x 3 padded rows are 18 columns wide: units in quartets. One
            # input row of 4 pixels: a brick much smaller than the GEMM rows that read it.)
            for name, xi, wi, bi, pad in (("3d seed-like", xs3, ws3, bs3, 0), ("2d seed-like", xs2, ws2, None, 0),
                                          ("two channel blocks", xs70, ws70, None, (1, 0)),
                                          ("padded rows", xsp, wsp, None, 1), ("padded rows 3x3", xsp, wsq, None, 1),
                                          ("one input row", x1, w1, None, 0),
                                          ("two producer halves", xh, wh, bh, 0)):
                dims = xi.dim() - 2
                ours, aten = getattr(torch.ops.convops, f"conv_transpose{dims}d"), getattr(F, f"conv_transpose{dims}d")
                yield (f"conv_transpose shift kernel {name} {tag}",
                       lambda ours=ours, xi=xi, wi=wi, bi=bi, pad=pad: ours(xi, wi, bi, 1, pad, 0, 1, 1),
                       lambda aten=aten, xi=xi, wi=wi, bi=bi, pad=pad: aten(xi, wi, bi, 1, pad, 0, 1, 1), tol[dtype])
        wc = rand(8, 6, 3, 3, dtype=dtype)
        bc = rand(8, dtype=dtype)
        gamma, beta, scale = rand(8, dtype=dtype), rand(8, dtype=dtype), rand(8, 1, 1, dtype=dtype)
        for pool, lo, hi in [(2, -0.5, 0.5), (3, None, 0.25), (4, 0.0, None)]:
            yield (f"conv2d_gn_pool pool{pool} clamp({lo},{hi}) {tag}",
                   lambda: torch.ops.convops.conv2d_group_norm_scale_max_pool_clamp(
                       x, wc, bc, 1, 1, 1, 4, gamma, beta, 1e-5, scale, pool, lo, hi),
                   lambda: torch.clamp(F.max_pool2d(F.group_norm(F.conv2d(x, wc, bc, 1, 1), 4, gamma, beta, 1e-5)
                                                    * scale, pool), lo, hi), tol[dtype])


def main() -> int:
    """Runs every case, or those whose names contain one of the command line's words."""
    torch.manual_seed(0)
    failures = 0
    for name, run, ref, tol in cases():
        if len(sys.argv) > 1 and not any(word in name for word in sys.argv[1:]):
            continue
        out = run()
        torch.cuda.synchronize()
        failures += not check(name, out, ref(), tol)
    print(f"{failures} failed")
    return int(failures > 0)


if __name__ == "__main__":
    sys.exit(main())
