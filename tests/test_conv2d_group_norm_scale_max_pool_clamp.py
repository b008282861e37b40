"""convops::conv2d_group_norm_scale_max_pool_clamp against the ATen chain
clamp(max_pool2d(group_norm(conv2d(x)) * scale, k), lo, hi) in float64."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import convops
from common_utils import (DEVICES, DTYPES, LAYOUTS, allow_tf32, assert_close, assert_output_layout, cuda_kernels_run,
                          make_tensor, opcheck, poison_allocator, reference)

OP = torch.ops.convops.conv2d_group_norm_scale_max_pool_clamp.default
NAME = "convops::conv2d_group_norm_scale_max_pool_clamp"

# (batch, C_in, H, W, C_out, kernel, stride, padding, dilation, bias, groups, pool, (clamp_min, clamp_max),
#  scale shape, GroupNorm affine): a deterministic sample of the grid. Conv outputs are mostly not divisible by the
# pool, so trailing rows/cols count in the statistics without being pooled.
CASES = [
    (2, 3, 18, 19, 8, (3, 3), (1, 1), (0, 0), (1, 1), True, 4, (2, 2), (0.0, 1.0), (8, 1, 1), True),
    (1, 4, 23, 21, 6, (5, 5), (1, 1), (2, 2), (1, 1), True, 3, (3, 3), (-0.5, 0.5), (6,), True),
    (3, 2, 20, 17, 12, (3, 3), (2, 2), (1, 1), (1, 1), False, 12, (4, 4), (None, 0.3), (1, 12, 1, 1), True),
    (1, 5, 40, 70, 16, (3, 3), (1, 1), (1, 1), (1, 1), True, 1, (4, 4), (-0.2, None), (16, 1, 1), False),
    (2, 3, 25, 23, 10, (1, 1), (1, 1), (0, 0), (1, 1), True, 5, (2, 3), (None, None), (1,), True),
    (1, 2, 22, 24, 4, (7, 7), (1, 1), (3, 3), (1, 1), False, 2, (3, 2), (0.0, 1.0), (), True),
    (1, 3, 31, 29, 9, (7, 7), (3, 3), (2, 1), (1, 1), True, 3, (2, 2), (0.0, 1.0), (9, 1, 1), True),
    (2, 2, 24, 26, 8, (2, 4), (1, 2), (1, 0), (1, 1), True, 2, (3, 4), (-1.0, 1.0), (8,), True),
    (1, 4, 27, 25, 8, (3, 5), (2, 1), (2, 1), (2, 3), True, 8, (2, 2), (None, None), (8, 1, 1), True),
    (1, 20, 21, 35, 96, (3, 3), (1, 1), (1, 1), (1, 1), True, 2, (4, 4), (0.0, 1.0), (96, 1, 1), True),  # 2 ch tiles
    (2, 13, 19, 37, 72, (5, 5), (1, 1), (2, 2), (1, 1), True, 8, (2, 2), (0.0, 1.0), (72,), True),  # cpg 9, chunks
    (1, 2, 40, 80, 8, (3, 3), (1, 1), (0, 0), (1, 1), True, 4, (3, 35), (0.0, 1.0), (8, 1, 1), True),  # wide pool
    (1, 3, 9, 11, 6, (6, 2), (1, 1), (0, 0), (1, 1), True, 3, (4, 10), (0.0, 1.0), (6, 1, 1), True),  # pool = conv
    (1, 2, 33, 35, 8, (3, 3), (3, 3), (0, 0), (3, 3), True, 4, (2, 2), (0.0, 1.0), (8, 1, 1), True),
    (0, 3, 16, 16, 8, (3, 3), (1, 1), (1, 1), (1, 1), True, 4, (2, 2), (0.0, 1.0), (8, 1, 1), True),  # empty batch
]

# Each case runs in one dtype and one layout, rotating through both lists so the sample covers every pairing.
SAMPLED = [(case, DTYPES[i % len(DTYPES)], LAYOUTS[(i // len(DTYPES)) % len(LAYOUTS)])
           for i, case in enumerate(CASES)]


# The devices and, on CUDA, the paths a test runs: the fused kernels ("cuda": the direct kernel where the convolution
# has few taps, else the tensor-core ones), the tensor-core kernels alone ("cuda-mma": CONVOPS_GN_KERNEL=mma, read each
# call, leaves the direct kernel out), and the mixed path ("cuda-mixed": ATen's convolution, then the epilogue kernel
# and the same finalize kernel; CONVOPS_GN_KERNEL=none leaves every fused kernel out, so that the forced convops path
# is the mixed one).
DEVICE_PATHS = [*DEVICES, pytest.param("cuda-mma", marks=pytest.mark.cuda),
                pytest.param("cuda-mixed", marks=pytest.mark.cuda)]
DIRECT_KERNEL = "conv_pool_direct_kernel"


@pytest.fixture(autouse=True)
def _switched_kernels_ran(request):
    """A "cuda-mixed" test ran the mixed path's kernels (not the ATen chain it falls back to where the mixed path does
    not apply: float64; an empty batch launches nothing); a "cuda-mma" test did not run the direct kernel."""
    callspec = getattr(request.node, "callspec", None)
    params = callspec.params if callspec else {}
    empty_batch = params.get("case", (1,))[0] == 0
    device = params.get("device")
    if device not in ("cuda-mixed", "cuda-mma") or params.get("dtype") is torch.float64 or empty_batch:
        yield
        return
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        yield
        torch.cuda.synchronize()
    ran = {e.key for e in prof.key_averages()}
    if device == "cuda-mixed":
        assert_mixed_path_ran(ran)
    else:
        assert not any(DIRECT_KERNEL in name for name in ran), ran


def assert_mixed_path_ran(ran: set[str], stats_kernel: str = "pool_stats_from") -> None:
    """Kernel names `ran` (cuda_kernels_run) hold the mixed path's: a stats kernel and finalize, no fused kernel."""
    assert any(stats_kernel in name for name in ran) and any("finalize_kernel" in name for name in ran), ran
    assert not any("conv_pool_" in name for name in ran), ran  # the fused kernels: conv_pool_{stats,window}_kernel


def on_device(device_path: str, monkeypatch) -> str:
    """The device of a DEVICE_PATHS entry, with its kernels switched: the tensor-core ones for "cuda-mma", the mixed
    path for "cuda-mixed", there with TF32 off, since the mixed path's convolution is ATen's, which follows the TF32
    flag (these tests hold fp32 to the float64 chain; test_cuda_mixed_path_matches_eager_in_its_precision_mode covers
    TF32)."""
    if device_path == "cuda-mma":
        monkeypatch.setenv("CONVOPS_GN_KERNEL", "mma")
        return "cuda"
    if device_path != "cuda-mixed":
        return device_path
    monkeypatch.setenv("CONVOPS_GN_KERNEL", "none")
    torch.backends.cudnn.allow_tf32 = False  # restored by conftest's _seed_and_restore_precision_flags
    return "cuda"


def make_problem(case, dtype, device, layout="contiguous", requires_grad=False, shift=0.0):
    (n, cin, h, w, cout, kernel, stride, padding, dilation, has_bias, groups, pool, (lo, hi), scale_shape,
     affine) = case
    rg = dict(requires_grad=requires_grad)
    x = make_tensor((n, cin, h, w), dtype, device, layout, **rg)
    weight = make_tensor((cout, cin, *kernel), dtype, device, **rg)
    bias = make_tensor((cout,), dtype, device, low=-1 + shift, high=1 + shift, **rg) if has_bias or shift else None
    # GroupNorm weight and scale of both signs, so some channels pool their max and others their min.
    gamma = make_tensor((cout,), dtype, device, **rg) if affine else None
    beta = make_tensor((cout,), dtype, device, **rg) if affine else None
    scale = make_tensor(scale_shape, dtype, device, low=-2.0, high=2.0, **rg)
    return (x, weight, bias, list(stride), list(padding), list(dilation), groups, gamma, beta, 1e-5, scale,
            list(pool), lo, hi)


def torch_chain(x, weight, bias, gamma, beta, scale, *, stride, padding, dilation, groups, eps, pool, lo, hi):
    y = F.conv2d(x, weight, bias, stride, padding, dilation)
    y = F.group_norm(y, groups, gamma, beta, eps)
    y = y * (scale.reshape(1, -1, 1, 1) if scale.numel() != 1 else scale.reshape(1, 1, 1, 1))
    y = F.max_pool2d(y, pool, pool)
    return torch.clamp(y, lo, hi) if lo is not None or hi is not None else y


def split(args):
    x, weight, bias, stride, padding, dilation, groups, gamma, beta, eps, scale, pool, lo, hi = args
    return (x, weight, bias, gamma, beta, scale), dict(stride=stride, padding=padding, dilation=dilation,
                                                        groups=groups, eps=eps, pool=pool, lo=lo, hi=hi)


def expected(args):
    """The float64 chain on the same inputs. fp32 is compared strictly in both TF32 modes: the CUDA kernel's 3xTF32
    arithmetic is fp32-accurate, as eager's cuDNN convolution is for these shapes even with TF32 allowed."""
    tensors, params = split(args)
    return reference(torch_chain, *tensors, **params)


def check_against_reference(case, dtype, device, layout, **overrides):
    args = make_problem(case, dtype, device, layout)
    ref = expected(args)
    poison_allocator(device, ref.numel() * args[0].element_size())
    out = convops.conv2d_group_norm_scale_max_pool_clamp(*args)
    assert out.dtype == dtype and out.shape == ref.shape
    assert_close(out, ref, **overrides)
    assert_output_layout(out, args[0])


@pytest.mark.parametrize("device", DEVICE_PATHS)
@pytest.mark.parametrize("case,dtype,layout", SAMPLED)
def test_matches_reference(monkeypatch, device, case, dtype, layout):
    device = on_device(device, monkeypatch)
    check_against_reference(case, dtype, device, layout)


@pytest.mark.parametrize("device", DEVICE_PATHS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64])
def test_every_dtype_and_layout(monkeypatch, device, dtype, layout):
    device = on_device(device, monkeypatch)
    check_against_reference(CASES[2], dtype, device, layout)


@pytest.mark.cuda
@pytest.mark.parametrize("tf32", [True, False])
@pytest.mark.parametrize("case", CASES)
def test_cuda_fp32_tf32_on_and_off(case, tf32):
    with allow_tf32(tf32):
        check_against_reference(case, torch.float32, "cuda", "contiguous")


# Shapes the CUDA window kernel takes (stride 1, dilation 1, 3x3, 2x2 or 4x4 pools; conv2d_group_norm_window_kernel.cuh)
# with everything its tiling has to get right: 37 x 45 conv outputs (edge tiles of its 16 x 16 tiles both ways, and
# rows / columns the pool drops), 11 input channels (two channel chunks, the second mostly padding), 80 outputs (two
# channel tiles, group 12 of 16 split between them: 5 channels a group), 40 images (several a persistent CTA's item
# range, which then crosses images); with a conv bias (which the 16-bit kernels add through the pad tap) and without.
WINDOW_CASES = [(40, 11, 37, 45, 80, (3, 3), (1, 1), (1, 1), (1, 1), pool == 4, 16, (pool, pool), (-0.5, 0.8),
                 (80, 1, 1), True) for pool in (2, 4)]


@pytest.mark.cuda
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", WINDOW_CASES, ids=["pool2_no_bias", "pool4_bias"])
def test_cuda_window_kernel_shapes(case, dtype, layout):
    with allow_tf32(False):
        check_against_reference(case, dtype, "cuda", layout)


# Problems for the mixed path's split (conv2d_group_norm_epilogue_kernel.cuh): several bands of window rows a plane
# (few images), groups across channel tiles (72 channels of 9 a group; 130 of 65: three tiles), one window a plane,
# wide windows, and rows and columns no window holds.
MIXED_CASES = [
    (1, 5, 40, 41, 72, (3, 3), (1, 1), (1, 1), (1, 1), True, 8, (2, 2), (-0.5, 0.8), (72, 1, 1), True),
    (2, 3, 11, 13, 130, (3, 3), (1, 1), (0, 0), (1, 1), False, 2, (2, 3), (0.0, 1.0), (130,), True),
    (1, 3, 9, 11, 6, (6, 2), (1, 1), (0, 0), (1, 1), True, 3, (4, 10), (0.0, 1.0), (6, 1, 1), True),
    (1, 2, 40, 80, 8, (3, 3), (1, 1), (0, 0), (1, 1), True, 4, (3, 35), (None, 0.4), (8, 1, 1), False),
    *WINDOW_CASES,
    # 16 input channels of 20 x 24 positions: whole 16-byte chunks for the channels-last copy in every dtype; square
    # 3 x 3 windows (the stats kernels' unrolled kPool = 3) with two rows below the last window.
    (2, 16, 20, 24, 24, (3, 3), (1, 1), (1, 1), (1, 1), True, 6, (3, 3), (-0.5, 0.8), (24, 1, 1), True),
    # One group of 300 channels: finalize reads the group's parameters in two chunks of at most 256.
    (1, 3, 8, 8, 300, (3, 3), (1, 1), (1, 1), (1, 1), True, 1, (2, 2), (0.0, 1.0), (300, 1, 1), True),
    # cpg65 with a conv bias and square 2 x 2 windows: the NHWC kernel a channel a thread with its windows unrolled
    # (130 channels: not vectors of 4), a tail column and a bottom row, all with the bias the stats kernels add.
    (2, 3, 11, 13, 130, (3, 3), (1, 1), (0, 0), (1, 1), True, 2, (2, 2), (0.0, 1.0), (130,), True),
]


@pytest.mark.cuda
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", MIXED_CASES,
                         ids=["bands", "cpg65", "one_window", "wide_pool", "pool2", "pool4", "pool3_chunks", "cpg300",
                              "cpg65_bias"])
@pytest.mark.parametrize("conv_layout", ["input", "channels_last"])
def test_cuda_mixed_path_shapes(monkeypatch, case, dtype, layout, conv_layout):
    """The mixed path against the float64 chain, its output poisoned first; its own kernels ran, the fused ones not:
    the NHWC one where the convolution ran channels-last (a channels-last input, or any other copied to channels-last
    under CONVOPS_GN_MIXED_LAYOUT=channels_last: a dense one by convops' transpose, a strided view by ATen's copy),
    the NCHW one elsewhere."""
    on_device("cuda-mixed", monkeypatch)
    monkeypatch.setenv("CONVOPS_GN_MIXED_LAYOUT", conv_layout)
    ran = cuda_kernels_run(lambda: check_against_reference(case, dtype, "cuda", layout))
    nhwc = layout == "channels_last" or conv_layout == "channels_last"
    stats_kernel = "pool_stats_from_nhwc_conv_kernel" if nhwc else "pool_stats_from_conv_kernel"
    assert_mixed_path_ran(ran, stats_kernel)
    if nhwc:  # 4 channels a thread where the channels are whole vectors of 4 (the kernel's last template argument)
        vector = 4 if case[4] % 4 == 0 else 1
        assert any(re.search(rf"{stats_kernel}<.*\b{vector}>", name) for name in ran), ran
    transposed = conv_layout == "channels_last" and layout == "contiguous"
    assert any("batched_transpose" in name for name in ran) == transposed, ran
    if transposed:  # in 16-byte chunks where channels and positions are whole ones (4 fp32, 8 16-bit elements)
        v = 16 // torch.empty((), dtype=dtype).element_size()
        chunks = case[1] % v == 0 and case[2] * case[3] % v == 0
        assert any("batched_transpose_chunks_kernel" in name for name in ran) == chunks, ran


# Problems for the direct kernel (conv2d_group_norm_direct_kernel.cuh: at most 32 taps, C_in x KH x KW): two channel
# tiles with a group of 5 across their edge (80 channels, 4 a thread), a column right of the windows and a row below
# them; 30 channels (not vectors of 4: a channel a thread) with stride 2 and 3 x 3 windows; a dilated 5 x 5 filter on
# one channel with 4 x 4 windows; a 3 x 1 filter with 2 x 3 windows (extents read at run time); one image of 200 rows
# (15 bands of 7 window rows, padding in the first and last only); 64 images 1,500 wide, where the staged input of the
# tiling's bands of 2 window rows (114 KB) is past the kernel's 96 KB, so its bands are thinned to one (80 KB), 512
# CTAs, more than an H100 / H200 holds at once (2 an SM), so the kernel writes codes for finalize_kernel (two passes);
# 500 images, a channel a thread: more CTAs than fit at once (3 an SM at 72 registers; 300 images ran in one pass,
# H200 2026-11-28). The others fit: one pass (a cooperative launch).
DIRECT_CASES = [
    (3, 3, 37, 45, 80, (3, 3), (1, 1), (1, 1), (1, 1), True, 16, (2, 2), (-0.5, 0.8), (80, 1, 1), True),
    (2, 2, 29, 31, 30, (3, 3), (2, 2), (2, 2), (1, 1), False, 5, (3, 3), (None, 0.5), (30,), True),
    (2, 1, 70, 66, 16, (5, 5), (1, 1), (4, 4), (2, 2), True, 4, (4, 4), (0.0, 1.0), (16, 1, 1), False),
    (2, 3, 20, 26, 12, (3, 1), (1, 2), (1, 0), (1, 1), True, 3, (2, 3), (-1.0, 1.0), (12,), True),
    (1, 3, 200, 40, 8, (3, 3), (1, 1), (1, 1), (1, 1), True, 2, (2, 2), (0.0, 1.0), (8, 1, 1), True),
    (64, 3, 16, 1500, 4, (3, 3), (1, 1), (1, 1), (1, 1), True, 2, (2, 2), (None, None), (4,), True),
    (500, 1, 8, 9, 6, (3, 3), (1, 1), (1, 1), (1, 1), True, 3, (2, 2), (-0.5, 0.5), (6,), True),
]
DIRECT_IDS = ["tiles", "stride2", "dilated_pool4", "runtime_pool", "bands", "thinned", "two_pass"]


@pytest.mark.cuda
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", DIRECT_CASES, ids=DIRECT_IDS)
def test_cuda_direct_kernel_shapes(case, dtype, layout):
    """The direct kernel against the float64 chain, its output poisoned first, in every dtype and input layout; it
    ran (8 or 4 channels a thread where the channels are whole vectors of them) in one pass, or in two with
    finalize_kernel where its CTAs do not fit on the device at once (as the list above expects of a 132-SM H100 /
    H200)."""
    with allow_tf32(False):
        ran = cuda_kernels_run(lambda: check_against_reference(case, dtype, "cuda", layout))
    # 8 channels a thread on 2 x 2 windows where they are whole vectors of 8, else 4, else 1.
    vector = 8 if case[11] == (2, 2) and case[4] % 8 == 0 else 4 if case[4] % 4 == 0 else 1
    one_pass = DIRECT_IDS[DIRECT_CASES.index(case)] not in ("thinned", "two_pass")
    assert any(re.search(rf"{DIRECT_KERNEL}<.*\b{vector}, {str(one_pass).lower()}>", name) for name in ran), ran
    assert any("finalize_kernel" in name for name in ran) != one_pass, ran


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_whole_channel_tiles_keep_the_window_kernel_in_16_bit(dtype):
    """3 channels in (27 taps), 64 out, 4 x 4 windows: 16-bit keeps the window kernel (its bf16 MMAs on a whole
    64-channel tile beat the direct kernel's FMAs), fp32 takes the direct kernel (the window kernel's 3xTF32 does
    not)."""
    case = (2, 3, 21, 22, 64, (3, 3), (1, 1), (1, 1), (1, 1), True, 16, (4, 4), (0.0, 1.0), (64, 1, 1), True)
    with allow_tf32(False):
        ran = cuda_kernels_run(lambda: check_against_reference(case, dtype, "cuda", "contiguous"))
    kernel = DIRECT_KERNEL if dtype == torch.float32 else "conv_pool_window_kernel"
    assert any(kernel in name for name in ran), ran


@pytest.mark.cuda
@pytest.mark.parametrize("tf32", [True, False])
def test_cuda_mixed_path_matches_eager_in_its_precision_mode(monkeypatch, tf32):
    """The seed block on 4 images: the mixed path's convolution is eager's (TF32 where the flag allows it), so its
    output is within 1e-4 of eager's chain in the same mode."""
    monkeypatch.setenv("CONVOPS_GN_KERNEL", "none")
    case = (4, 8, 128, 128, 64, (3, 3), (1, 1), (0, 0), (1, 1), True, 16, (4, 4), (0.0, 1.0), (64, 1, 1), True)
    with allow_tf32(tf32):
        args = make_problem(case, torch.float32, "cuda")
        tensors, params = split(args)
        outs = []
        ran = cuda_kernels_run(lambda: outs.append(convops.conv2d_group_norm_scale_max_pool_clamp(*args)))
        torch.testing.assert_close(outs[0], torch_chain(*tensors, **params), atol=1e-4, rtol=1e-4)
    assert any("pool_stats_from_conv_kernel" in name for name in ran), ran


def strided_norm_parameters(views: str, channels: int, dtype, device) -> tuple:
    """A GroupNorm weight, bias and scale that are not dense: every other element of a longer vector and columns of
    matrices ("sliced"), or one value broadcast to every channel ("expanded")."""
    if views == "sliced":
        return (make_tensor((2 * channels,), dtype, device)[::2], make_tensor((channels, 3), dtype, device)[:, 1],
                make_tensor((channels, 3), dtype, device, low=-2.0, high=2.0)[:, 1, None, None])
    return (make_tensor((1,), dtype, device).expand(channels), make_tensor((), dtype, device).expand(channels),
            make_tensor((1, 1, 1), dtype, device, low=-2.0, high=2.0).expand(channels, 1, 1))


@pytest.mark.parametrize("device", DEVICE_PATHS)
@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64])
@pytest.mark.parametrize("views", ["sliced", "expanded"])
def test_strided_norm_weight_bias_and_scale(monkeypatch, device, dtype, views):
    """The op reads the elements the views of strided_norm_parameters show (the CPU kernel once read fp32 and fp64
    views through their storage as if dense)."""
    device = on_device(device, monkeypatch)
    args = list(make_problem(CASES[0], dtype, device))
    gamma, beta, scale = strided_norm_parameters(views, args[1].shape[0], dtype, device)
    assert not (gamma.is_contiguous() or beta.is_contiguous() or scale.is_contiguous())
    args[7], args[8], args[10] = gamma, beta, scale
    with allow_tf32(False):
        assert_close(convops.conv2d_group_norm_scale_max_pool_clamp(*args), expected(args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("views", ["sliced", "expanded"])
def test_gradients_with_strided_norm_weight_bias_and_scale(device, views):
    """Gradients of every input where the views of strided_norm_parameters are leaves, against the ATen chain's (the
    backward once passed them to native_group_norm, which reads them as dense: gradients off by up to 60, NaN in
    places)."""
    args = list(make_problem(CASES[0], torch.float64, device, requires_grad=True))
    views = strided_norm_parameters(views, args[1].shape[0], torch.float64, device)
    args[7], args[8], args[10] = (t.detach().requires_grad_() for t in views)  # detach keeps the strides
    tensors, params = split(args)
    inputs = [t for t in tensors if t is not None]
    out = OP(*args)
    grad = torch.randn_like(out)
    ours = torch.autograd.grad(out, inputs, grad)
    theirs = torch.autograd.grad(torch_chain(*tensors, **params), inputs, grad)
    for name, a, b in zip(["input", "weight", "bias", "gn_weight", "gn_bias", "scale"], ours, theirs):
        torch.testing.assert_close(a, b, msg=lambda m, name=name: f"gradient of {name}: {m}")


@pytest.mark.parametrize("device", DEVICE_PATHS)
def test_mean_far_above_spread(monkeypatch, device):
    """Conv outputs with mean 100-500x their spread: E[x^2] - E[x]^2 in fp32 would lose the variance entirely."""
    device = on_device(device, monkeypatch)
    with allow_tf32(False):
        # A large conv bias: the conv itself stays exact-ish, only the statistics are stressed (spread ~2, mean ~500);
        # 27 taps: the direct kernel on "cuda", the window kernel on "cuda-mma".
        case = (2, 3, 30, 33, 16, (3, 3), (1, 1), (0, 0), (1, 1), True, 4, (4, 4), (-1.0, 1.0), (16, 1, 1), True)
        args = make_problem(case, torch.float32, device, shift=500.0)
        assert_close(convops.conv2d_group_norm_scale_max_pool_clamp(*args), expected(args), atol=2e-4, rtol=2e-4)
        # A large constant on the input, one channel per group (else channel means differ by the constant too):
        # mean ~100 * sum(w) vs spread ~2; fp32 conv accumulation itself now costs ~1e-4 (as in eager).
        case = (2, 4, 30, 33, 8, (3, 3), (1, 1), (0, 0), (1, 1), True, 8, (3, 3), (None, None), (8, 1, 1), True)
        args = make_problem(case, torch.float32, device)
        args = ((args[0] + 100.0).detach(), *args[1:])
        assert_close(convops.conv2d_group_norm_scale_max_pool_clamp(*args), expected(args), atol=5e-4, rtol=5e-4)


@pytest.mark.parametrize("device", DEVICE_PATHS)
def test_mean_whose_square_overflows(monkeypatch, device):
    """Conv outputs near 3e19, spread ~1e17: the mean squared is past fp32's range (3.4e38), the variance is not; a
    merge of statistics that squares the mean (into an empty summary, say) turns it into Inf and the output into NaN."""
    device = on_device(device, monkeypatch)
    with allow_tf32(False):
        case = (2, 4, 30, 33, 16, (3, 3), (1, 1), (0, 0), (1, 1), True, 4, (4, 4), (None, None), (16, 1, 1), True)
        args = make_problem(case, torch.float32, device, shift=3e19)
        args = ((args[0] * 1e17).detach(), *args[1:])
        out = convops.conv2d_group_norm_scale_max_pool_clamp(*args)
        assert out.isfinite().all()
        assert_close(out, expected(args), atol=5e-4, rtol=5e-4)


@pytest.mark.parametrize("device", DEVICE_PATHS)
@pytest.mark.parametrize("signs", ["gamma_negative", "scale_negative", "both_negative", "mixed"])
def test_scale_and_gamma_signs(monkeypatch, device, signs):
    """Channels with gamma * s < 0 pool their window minimum; check every sign pattern."""
    device = on_device(device, monkeypatch)
    case = (2, 3, 21, 22, 12, (3, 3), (1, 1), (1, 1), (1, 1), True, 3, (3, 3), (-0.7, 0.9), (12, 1, 1), True)
    args = list(make_problem(case, torch.float32, device))
    gamma, scale = args[7].detach().abs(), args[10].detach().abs()
    if signs in ("gamma_negative", "both_negative"):
        gamma = -gamma
    if signs in ("scale_negative", "both_negative"):
        scale = -scale
    if signs == "mixed":
        gamma = gamma * torch.tensor([1.0, -1.0, 1.0, -1.0] * 3, device=device)
        scale = scale * torch.tensor([1.0, 1.0, -1.0, -1.0] * 3, device=device).reshape(12, 1, 1)
    args[7], args[10] = gamma, scale
    with allow_tf32(False):
        assert_close(convops.conv2d_group_norm_scale_max_pool_clamp(*args), expected(args))


@pytest.mark.parametrize("device", DEVICE_PATHS)
def test_uniform_scale_zero_gamma(monkeypatch, device):
    """A zero GroupNorm weight makes the channel constant (beta * s); a single negative scale flips every channel."""
    device = on_device(device, monkeypatch)
    case = (1, 3, 17, 16, 8, (3, 3), (1, 1), (0, 0), (1, 1), True, 2, (2, 2), (None, None), (1, 1, 1), True)
    args = list(make_problem(case, torch.float32, device))
    args[7] = args[7].detach().clone()
    args[7][3] = 0.0
    args[10] = torch.full((1, 1, 1), -1.5, device=device)
    with allow_tf32(False):
        assert_close(convops.conv2d_group_norm_scale_max_pool_clamp(*args), expected(args))


# How test_infinite_gamma_propagates_like_aten varies the problem around GroupNorm weights of +Inf (channel 1) and -Inf
# (channel 6).
INFINITE_GAMMA_VARIANTS = ["plain", "pixelwise_pool", "pool4", "bf16", "bf16_pool4", "negative_scale", "zero_scale",
                           "infinite_beta", "no_beta", "clamped", "nan_gamma"]


@pytest.mark.parametrize("device", DEVICE_PATHS)
@pytest.mark.parametrize("variant", INFINITE_GAMMA_VARIANTS)
def test_infinite_gamma_propagates_like_aten(monkeypatch, device, variant):
    """ATen's GroupNorm is y = a x + b with a = rstd * gamma, b = beta - a * mean: with gamma = +-Inf an element is b
    (+-Inf) where x has the sign of a * b and NaN elsewhere, and max_pool2d makes a window NaN if any element is. NaN
    and +-Inf must land exactly where the float64 chain puts them; the finite channels stay as accurate as ever."""
    device = on_device(device, monkeypatch)
    pool = {"pixelwise_pool": (1, 1), "pool4": (4, 4), "bf16_pool4": (4, 4)}.get(variant, (2, 2))
    lo_hi = (-0.5, 0.5) if variant == "clamped" else (None, None)
    case = (2, 3, 13, 14, 8, (3, 3), (1, 1), (1, 1), (1, 1), True, 4, pool, lo_hi, (8, 1, 1), True)
    args = list(make_problem(case, torch.bfloat16 if variant.startswith("bf16") else torch.float32, device))
    gamma, beta, scale = (args[i].detach().clone() for i in (7, 8, 10))
    gamma[1], gamma[6] = float("inf"), float("-inf")
    if variant == "negative_scale":
        scale[1], scale[6] = -scale[1].abs(), -scale[6].abs()
    if variant == "zero_scale":
        scale[1] = 0.0
    if variant == "infinite_beta":
        beta[1], beta[6] = float("-inf"), float("inf")
    if variant == "nan_gamma":
        gamma[1] = float("nan")
    args[7], args[8], args[10] = gamma, None if variant == "no_beta" else beta, scale
    with allow_tf32(False):
        ref = expected(args)
        out = convops.conv2d_group_norm_scale_max_pool_clamp(*args)
    assert_close(out, ref)
    assert torch.isfinite(ref[:, [0, 2, 3, 4, 5, 7]]).all()


@pytest.mark.parametrize("device", DEVICE_PATHS)
@pytest.mark.parametrize("bounds", [(float("nan"), 0.5), (-0.5, float("nan")), (float("nan"), None),
                                    (None, float("nan"))])
def test_nan_clamp_bound_acts_as_torch_clamp_on_the_same_device(monkeypatch, device, bounds):
    """torch.clamp's answer for a NaN bound differs by device and release (a lone one is ignored on CUDA, and on CPU
    by torch 2.11 but not 2.13), so the op's must be torch.clamp's of its unclamped result, wherever it runs."""
    device = on_device(device, monkeypatch)
    case = (2, 3, 13, 14, 8, (3, 3), (1, 1), (1, 1), (1, 1), True, 4, (2, 2), bounds, (8, 1, 1), True)
    args = make_problem(case, torch.float32, device)
    with allow_tf32(False):
        out = convops.conv2d_group_norm_scale_max_pool_clamp(*args)
        unclamped = convops.conv2d_group_norm_scale_max_pool_clamp(*args[:-2], None, None)
    assert not unclamped.isnan().any()
    assert_close(out, torch.clamp(unclamped, *bounds))


def error_case(device, what):
    x = torch.randn(2, 3, 10, 10, device=device)
    w = torch.randn(8, 3, 3, 3, device=device)
    s = torch.randn(8, 1, 1, device=device)
    base = dict(input=x, weight=w, bias=None, stride=[1, 1], padding=[0, 0], dilation=[1, 1], num_groups=4,
                gn_weight=None, gn_bias=None, eps=1e-5, scale=s, pool_kernel=[2, 2])
    changes = {
        "rank": dict(input=x[0]),
        "weight rank": dict(weight=w[0]),
        "channels": dict(weight=torch.randn(8, 2, 3, 3, device=device)),
        "dtype": dict(weight=w.double()),
        "integer": dict(input=x.int()),
        "bias shape": dict(bias=torch.randn(7, device=device)),
        "groups divide": dict(num_groups=3),
        "groups zero": dict(num_groups=0),
        "gn_weight shape": dict(gn_weight=torch.randn(4, device=device)),
        "gn_bias dtype": dict(gn_bias=torch.randn(8, device=device, dtype=torch.float64)),
        "eps": dict(eps=-1.0),
        "scale shape": dict(scale=torch.randn(8, 2, 1, device=device)),
        "scale count": dict(scale=torch.randn(4, 1, 1, device=device)),
        "scale dtype": dict(scale=s.half()),
        "stride": dict(stride=[0, 1]),
        "padding": dict(padding=[-1, 0]),
        "dilation": dict(dilation=[1, 0]),
        "kernel too large": dict(weight=torch.randn(8, 3, 11, 3, device=device)),
        "pool zero": dict(pool_kernel=[0, 2]),
        "pool too large": dict(pool_kernel=[9, 2]),
        "pool arity": dict(pool_kernel=[2, 2, 2]),
    }
    return dict(base, **changes[what])


ERROR_CASES = ["rank", "weight rank", "channels", "dtype", "integer", "bias shape", "groups divide", "groups zero",
               "gn_weight shape", "gn_bias dtype", "eps", "scale shape", "scale count", "scale dtype", "stride",
               "padding", "dilation", "kernel too large", "pool zero", "pool too large", "pool arity"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("what", ERROR_CASES)
def test_errors(device, what):
    with pytest.raises(RuntimeError, match=NAME):
        OP(**error_case(device, what))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(device, requires_grad):
    case = (2, 3, 12, 13, 8, (3, 3), (1, 1), (1, 1), (1, 1), True, 4, (2, 3), (-0.5, 0.8), (8, 1, 1), True)
    if not requires_grad:  # the autograd variant is the slow one (AOT tracing): one case, below, suffices
        opcheck(OP, make_problem(case, torch.float32, device))
    case = (1, 2, 9, 9, 4, (3, 3), (1, 1), (0, 0), (1, 1), False, 2, (3, 3), (None, None), (1,), False)
    opcheck(OP, make_problem(case, torch.float32, device, requires_grad=requires_grad))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("clamp", [(-0.3, 0.4), (None, 0.2), (None, None)])
def test_gradcheck(device, clamp):
    case = (2, 2, 6, 7, 4, (3, 3), (1, 1), (1, 1), (1, 1), True, 2, (2, 3), clamp, (4, 1, 1), True)
    args = make_problem(case, torch.float64, device, requires_grad=True)
    # ATen's CUDA convolution / pooling backward accumulate in nondeterministic order.
    nondet_tol = 1e-10 if device == "cuda" else 0.0
    assert torch.autograd.gradcheck(lambda *a: OP(*a), args, fast_mode=True, nondet_tol=nondet_tol)


@pytest.mark.cuda
@pytest.mark.parametrize("scale_shape", [(8, 1, 1), (8,), ()])
def test_cuda_gradients_match_aten(scale_shape):
    case = (2, 3, 20, 21, 8, (3, 3), (1, 1), (1, 1), (1, 1), True, 4, (3, 3), (-0.5, 0.6), scale_shape, True)
    args = make_problem(case, torch.float32, "cuda", requires_grad=True)
    tensors, params = split(args)
    grad = torch.randn_like(torch_chain(*tensors, **params))
    ours = torch.autograd.grad(OP(*args), [t for t in tensors if t is not None], grad)
    theirs = torch.autograd.grad(torch_chain(*tensors, **params), [t for t in tensors if t is not None], grad)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_compiles(device):
    case = CASES[0]
    args = make_problem(case, torch.float32, device)
    compiled = torch.compile(lambda *a: convops.conv2d_group_norm_scale_max_pool_clamp(*a), fullgraph=True)
    with allow_tf32(False):
        torch.testing.assert_close(compiled(*args), convops.conv2d_group_norm_scale_max_pool_clamp(*args))


@pytest.mark.cuda
@pytest.mark.parametrize("tf32", [True, False])
def test_cuda_seed_shape_matches_eager(tf32):
    """The seed block (8 -> 64 channels, 3x3, 16 groups, pool 4, clamp 0..1) on 4 images of 128x128: within 1e-4 of
    eager PyTorch in the same precision mode."""
    case = (4, 8, 128, 128, 64, (3, 3), (1, 1), (0, 0), (1, 1), True, 16, (4, 4), (0.0, 1.0), (64, 1, 1), True)
    with allow_tf32(tf32):
        args = make_problem(case, torch.float32, "cuda")
        tensors, params = split(args)
        out = convops.conv2d_group_norm_scale_max_pool_clamp(*args)
        torch.testing.assert_close(out, torch_chain(*tensors, **params), atol=1e-4, rtol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_half_seed_like_repeatable(dtype):
    """Half types on a seed-like shape (K = 72 padded to 80, many tiles per persistent CTA), called after eager's
    kernels and repeatedly: the same finite result each time. Guards the NaN seen on repeated bf16 seed-shape calls
    in tools/dev_conv2d_group_norm.py bench (run 3)."""
    case = (16, 8, 128, 128, 64, (3, 3), (1, 1), (0, 0), (1, 1), True, 16, (4, 4), (0.0, 1.0), (64, 1, 1), True)
    args = make_problem(case, dtype, "cuda")
    tensors, params = split(args)
    torch_chain(*tensors, **params)  # leave eager's half-precision kernels' data in shared memory and the allocator
    first = convops.conv2d_group_norm_scale_max_pool_clamp(*args)
    torch_chain(*tensors, **params)
    second = convops.conv2d_group_norm_scale_max_pool_clamp(*args)
    assert not first.isnan().any() and not second.isnan().any()
    torch.testing.assert_close(first, second, atol=0, rtol=0)
    assert_close(second, expected(args))
