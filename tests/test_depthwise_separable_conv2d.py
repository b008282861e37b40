"""convops::depthwise_separable_conv2d against the ATen pair F.conv2d(F.conv2d(x, dw, groups=C_in), pw)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import convops
from common_utils import (DEVICES, DTYPES, LAYOUTS, allow_tf32, assert_close, assert_output_layout,
                          cuda_kernels_run, make_tensor, opcheck, poison_allocator, round_tf32, tf32_active)

OP = torch.ops.convops.depthwise_separable_conv2d.default

# (batch, C_in, multiplier, C_out, H, W, kernel, stride, padding, dilation, depthwise bias, pointwise bias)
CASES = [
    (2, 8, 1, 16, 16, 16, (3, 3), (1, 1), (1, 1), (1, 1), True, True),
    (1, 3, 1, 5, 17, 13, (3, 3), (1, 1), (0, 0), (1, 1), False, False),
    (3, 4, 2, 12, 15, 19, (3, 3), (2, 2), (1, 1), (1, 1), True, False),
    (1, 20, 1, 130, 9, 70, (3, 3), (1, 1), (1, 1), (1, 1), False, True),   # two C_mid chunks, two C_out tiles
    (2, 3, 1, 7, 21, 23, (5, 5), (1, 1), (2, 2), (1, 1), True, True),
    (1, 2, 3, 4, 18, 14, (5, 5), (1, 1), (0, 1), (1, 1), False, True),
    (2, 6, 1, 9, 13, 11, (1, 1), (1, 1), (0, 0), (1, 1), True, True),
    (1, 3, 2, 8, 20, 20, (7, 7), (1, 1), (3, 3), (1, 1), True, False),
    (1, 5, 1, 3, 19, 25, (7, 7), (3, 3), (2, 1), (1, 1), True, True),
    (3, 2, 1, 6, 12, 16, (2, 4), (1, 2), (1, 0), (1, 1), False, True),
    (1, 4, 1, 33, 25, 17, (3, 5), (2, 1), (2, 1), (2, 3), True, True),
    (2, 3, 2, 1, 16, 31, (1, 3), (3, 2), (0, 1), (1, 2), True, False),
    (1, 17, 1, 20, 30, 30, (3, 3), (1, 1), (2, 2), (2, 2), True, True),
    (1, 1, 4, 64, 8, 70, (4, 4), (2, 3), (3, 2), (1, 1), False, False),
    # Fused-kernel problems (contiguous NCHW) with whole 32-column tiles and 64-cout warp blocks, whose stores take
    # the epilogue's unchecked path, beside ragged ones: a second chunk of 8 channels, a C_out tile of 8 (24 of 72).
    (2, 24, 1, 136, 9, 64, (3, 3), (1, 1), (1, 1), (1, 1), True, True),
    (1, 12, 2, 72, 7, 40, (5, 5), (1, 1), (2, 2), (1, 1), False, True),
]

SAMPLED = [(case, DTYPES[i % len(DTYPES)], LAYOUTS[(i // len(DTYPES)) % len(LAYOUTS)])
           for i, case in enumerate(CASES)]


def make_problem(case, dtype, device, layout="contiguous", requires_grad=False):
    n, c, m, c_out, h, w, kernel, stride, padding, dilation, has_dw_bias, has_pw_bias = case
    x = make_tensor((n, c, h, w), dtype, device, layout, requires_grad=requires_grad)
    dw = make_tensor((m * c, 1, *kernel), dtype, device, requires_grad=requires_grad)
    dw_bias = make_tensor((m * c,), dtype, device, requires_grad=requires_grad) if has_dw_bias else None
    pw = make_tensor((c_out, m * c, 1, 1), dtype, device, requires_grad=requires_grad)
    pw_bias = make_tensor((c_out,), dtype, device, requires_grad=requires_grad) if has_pw_bias else None
    return x, dw, dw_bias, pw, pw_bias, list(stride), list(padding), list(dilation)


def torch_separable(x, dw, dw_bias, pw, pw_bias, stride, padding, dilation):
    return F.conv2d(F.conv2d(x, dw, dw_bias, stride, padding, dilation, groups=x.shape[1]), pw, pw_bias)


def separable_reference(x, dw, dw_bias, pw, pw_bias, stride, padding, dilation):
    """The unfused pair in float64, with the intermediate rounded as ATen stores and cuDNN reads it: to the input
    dtype, and for fp32 under TF32 to TF32 (with the pointwise weight). Under TF32 the intermediate is eager's own
    fp32 depthwise result (the kernel reproduces its accumulation order), so a value that sits on a TF32 rounding
    tie rounds the same way in both."""
    def f64(t):
        return None if t is None else t.detach().cpu().double()
    if tf32_active(x):
        with allow_tf32(False):
            mid = F.conv2d(x.detach().contiguous(), dw.detach(), None if dw_bias is None else dw_bias.detach(),
                           stride, padding, dilation, groups=x.shape[1])
        mid, pw = round_tf32(mid), round_tf32(pw.detach())
    else:
        mid = F.conv2d(f64(x), f64(dw), f64(dw_bias), stride, padding, dilation, groups=x.shape[1]).to(x.dtype)
    return F.conv2d(f64(mid), f64(pw), f64(pw_bias))


# Problems outside the fused kernel's scope run the two stages unfused, the pointwise one through cuDNN. Under TF32
# cuDNN picks its own algorithm and operand rounding, which the RN-rounded reference does not reproduce exactly (seen
# up to 3e-3 on values of order 1), so those get a TF32-level tolerance; the fused kernel is held to the fp32
# tolerance against the same reference.
CUDNN_TF32_TOLERANCE = dict(atol=1e-2, rtol=1e-2)


def fused_kernel_takes(x, dw, pw, stride, padding, dilation) -> bool:
    """The scope of csrc/cuda/depthwise_separable_conv2d_pipelined.cuh (launch_separable_pipelined and its
    shared-memory bound), which holds the row-streaming kernel's, so that tests hold the fused kernels to the tight
    tolerance."""
    k = dw.shape[2]
    vec = 16 // x.element_size()
    if not (x.is_cuda and x.is_contiguous() and x.dtype != torch.float64 and list(stride) == [1, 1]
            and list(dilation) == [1, 1] and dw.shape[3] == k and k in (3, 5, 7) and padding[1] == (k - 1) // 2
            and x.shape[3] % vec == 0):
        return False
    chunks = -(-dw.shape[0] // 16)
    operand = 4 if x.dtype == torch.float32 else 2
    # D in the mma.sync layout: the larger of the kernel's two (wgmma's is 8704 / 4352 bytes a buffer), as Smem sizes.
    staged = 3 * 16 * (4 + k - 1) * (32 + 3 * vec) * x.element_size()
    d_tiles = 2 * 16 * (4 * (32 + (4 if operand == 4 else 8)) + 8) * operand  # double-buffered
    weights = 128 * chunks * 16 * operand
    align = lambda b: -(-b // 16) * 16  # noqa: E731
    barriers = 3 * 8  # one mbarrier a stage (box copies)
    total = sum(align(b) for b in (staged, d_tiles, weights, chunks * 16 * k * k * 4, chunks * 16 * 4, 128 * 4,
                                   barriers))
    return total <= 110 * 1024


def takes_cudnn_pointwise(args, unfused: bool = False) -> bool:
    x, dw, _, pw, _, stride, padding, dilation = args
    return tf32_active(x) and (unfused or not fused_kernel_takes(x, dw, pw, stride, padding, dilation))


def check_against_reference(case, dtype, device, layout, unfused=False):
    args = make_problem(case, dtype, device, layout)
    expected = separable_reference(*args)
    poison_allocator(device, expected.numel() * args[0].element_size())
    out = convops.depthwise_separable_conv2d(*args)
    assert out.dtype == dtype and out.shape == expected.shape
    assert_close(out, expected, **(CUDNN_TF32_TOLERANCE if takes_cudnn_pointwise(args, unfused) else {}))
    assert_output_layout(out, args[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case,dtype,layout", SAMPLED)
def test_matches_reference(device, case, dtype, layout):
    check_against_reference(case, dtype, device, layout)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64])
def test_every_dtype_and_layout(device, dtype, layout):
    check_against_reference(CASES[2], dtype, device, layout)


@pytest.mark.cuda
@pytest.mark.parametrize("tf32", [True, False])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:6])))
def test_cuda_fp32_both_precision_modes(case, layout, tf32):
    with allow_tf32(tf32):
        check_against_reference(case, torch.float32, "cuda", layout)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:6])))
def test_cuda_half_precision(case, dtype):
    check_against_reference(case, dtype, "cuda", "contiguous")


@pytest.mark.cuda
def test_cuda_tf32_matches_eager_on_seed_like_problem():
    """Under PyTorch's default flags (TF32 allowed for convolutions) the fused kernel agrees with eager within
    KernelBench's fp32 tolerance on the seed's configuration (3x3 pad 1, 64 -> 128, 16 x 512x512; about 4,000 of
    the intermediate's values are TF32 rounding ties, so the tie rule is checked too)."""
    with allow_tf32(True):
        x = torch.randn(16, 64, 512, 512, device="cuda")
        dw, pw = torch.randn(64, 1, 3, 3, device="cuda"), torch.randn(128, 64, 1, 1, device="cuda") / 8
        args = (x, dw, None, pw, None, [1, 1], [1, 1], [1, 1])
        torch.testing.assert_close(convops.depthwise_separable_conv2d(*args), torch_separable(*args),
                                   atol=1e-4, rtol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.usefixtures("without_small_separable_kernel")
def test_cuda_strict_fp32_ignores_the_matmul_tf32_flag(layout):
    """The mixed path runs its 1x1 on cuBLAS only where cuBLAS computes what cuDNN's convolution would. With TF32
    off for convolutions but on for matmuls (torch.backends.cuda.matmul.allow_tf32), the op must stay strict fp32:
    a TF32 GEMM over these 20 channels misses the reference by ~1e-3. W = 70 keeps the problem outside the tile
    kernel (and the small-problem one is left out), so the convops path is the mixed one (NCHW GEMM, or one
    (N HW x C) GEMM in channels-last)."""
    args = make_problem(CASES[3], torch.float32, "cuda", layout)
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        with allow_tf32(False), convops.forced_path("convops"):
            out = convops.depthwise_separable_conv2d(*args)
            expected = separable_reference(*args)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    assert_close(out, expected)
    assert_output_layout(out, args[0])


@pytest.mark.cuda
@pytest.mark.usefixtures("without_small_separable_kernel")
def test_cuda_fp32_precision_flags_disagreeing_with_the_old_ones():
    """torch >= 2.9's fp32_precision flags, TF32 off for convolutions but on for matmuls: the op must neither raise
    (ATen's old-style getters allowTF32CuBLAS / float32MatmulPrecision throw when the two APIs disagree) nor let the
    mixed path's GEMM use TF32."""
    conv, matmul = torch.backends.cudnn.conv, torch.backends.cuda.matmul
    if not hasattr(conv, "fp32_precision") or not hasattr(matmul, "fp32_precision"):
        pytest.skip("this torch has no fp32_precision flags")
    args = make_problem(CASES[3], torch.float32, "cuda", "contiguous")
    saved = conv.fp32_precision, matmul.fp32_precision
    try:
        conv.fp32_precision, matmul.fp32_precision = "ieee", "tf32"
        with convops.forced_path("convops"):
            out = convops.depthwise_separable_conv2d(*args)
    finally:
        conv.fp32_precision, matmul.fp32_precision = saved
    with allow_tf32(False):
        assert_close(out, separable_reference(*args))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64])
@pytest.mark.parametrize("in_hw", [(13, 17), (11, 9), (7, 13), (15, 15)], ids=["odd", "pairs", "quads", "octets"])
@pytest.mark.usefixtures("without_small_separable_kernel")
def test_cuda_mixed_path_adds_the_pointwise_bias_as_aten_does(dtype, in_hw):
    """The mixed path (stride 2: no fused kernel but the small-problem one, left out) adds the pointwise bias after its NCHW GEMM with convops' own
    per-channel add (cuda/channel_bias.cuh), whose vectors are as wide as the output plane's length allows (63, 30,
    28 and 64 outputs here: 1, 2, 4 and 8 elements). Its result must be bitwise ATen's add of the bias to the
    unbiased output of the same path. Strict fp32, so that fp32 takes the GEMM too; fp64 has no cuBLAS GEMM that
    matches cuDNN (cublas_gemm_matches_convolution) and keeps ATen's convolution, whose bias ATen adds."""
    x = make_tensor((3, 5, *in_hw), dtype, "cuda")
    dw, pw = make_tensor((5, 1, 3, 3), dtype, "cuda"), make_tensor((7, 5, 1, 1), dtype, "cuda")
    bias = make_tensor((7,), dtype, "cuda")
    with allow_tf32(False), convops.forced_path("convops"):
        unbiased = convops.depthwise_separable_conv2d(x, dw, None, pw, None, 2, 1)
        biased = convops.depthwise_separable_conv2d(x, dw, None, pw, bias, 2, 1)
        ran = cuda_kernels_run(lambda: convops.depthwise_separable_conv2d(x, dw, None, pw, bias, 2, 1))
    assert any("add_channel_bias_kernel" in name for name in ran) == (dtype != torch.float64), ran
    assert biased.is_contiguous()
    torch.testing.assert_close(biased, unbiased + bias.view(1, -1, 1, 1), atol=0, rtol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.usefixtures("without_small_separable_kernel")
def test_cuda_mixed_path_tf32_gemm_rounds_its_operands(layout):
    """With TF32 allowed the mixed path's NCHW 1x1 is still a GEMM (cuda/convolution_gemm.cuh: operands rounded to
    TF32 by convops' kernel, then cuBLAS's TF32 GEMM), matching the TF32 reference; in channels-last it stays ATen's
    1x1 convolution, since ATen's mm would not round as cuDNN does."""
    case = (2, 6, 1, 40, 21, 33, (3, 3), (2, 2), (1, 1), (1, 1), True, True)  # stride 2: the mixed path
    with allow_tf32(True), convops.forced_path("convops"):
        args = make_problem(case, torch.float32, "cuda", layout)
        ran = cuda_kernels_run(lambda: convops.depthwise_separable_conv2d(*args))
        check_against_reference(case, torch.float32, "cuda", layout, unfused=True)
    rounded = any("round_to_tf32_kernel" in name for name in ran)
    assert rounded == (layout == "contiguous"), ran


def to_nhwc_stage_fits(case, dtype) -> bool:
    """Whether the NCHW -> NHWC depthwise kernel's stage fits its shared memory (csrc/cuda/depthwise_conv2d_to_nhwc.cuh,
    smem_bytes, kMaxSmem and the device's opt-in limit): the input planes of 32 output channels, plus 16 elements of
    alignment slack; and whether the round trip applies at all (more than one pixel a plane: path_choice.cu,
    layout_for)."""
    n, c, m, c_out, h, w = case[:6]
    planes = min(32, 31 // m + 2)
    limit = min(100 * 1024, torch.cuda.get_device_properties(0).shared_memory_per_block_optin)
    return h * w > 1 and (planes * h * w + 16) * torch.empty((), dtype=dtype).element_size() <= limit


@pytest.mark.cuda
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("mixed", ["input", "channels_last"])
def test_cuda_mixed_path_in_either_layout(monkeypatch, case, dtype, layout, mixed):
    """The mixed path in the input's layout (the convops NCHW depthwise kernels) and through channels-last (the
    depthwise kernel from NCHW into NHWC, the 1x1 on the NHWC intermediate, the output transposed back with the 1x1's
    bias), each forced by CONVOPS_SEPARABLE_MIXED, with every fused kernel left out (CONVOPS_SEPARABLE_KERNEL=none:
    the convops path is the mixed one): both agree with the reference and give an output dense in the input's layout
    (NCHW for a strided view too). The round trip takes dense NCHW inputs of more than one channel (a strided view
    or one channel runs in the input's layout)."""
    monkeypatch.setenv("CONVOPS_SEPARABLE_KERNEL", "none")
    monkeypatch.setenv("CONVOPS_SEPARABLE_MIXED", mixed)
    args = make_problem(case, dtype, "cuda", layout)
    with convops.forced_path("convops"):
        ran = cuda_kernels_run(lambda: convops.depthwise_separable_conv2d(*args))
        check_against_reference(case, dtype, "cuda", layout, unfused=True)
    round_trip = mixed == "channels_last" and case[1] > 1 and layout == "contiguous" and to_nhwc_stage_fits(case, dtype)
    assert any("depthwise_to_nhwc_kernel" in name for name in ran) == round_trip, ran
    assert any("batched_transpose" in name for name in ran) == round_trip, ran


# Sweep-like problems for the round trip's kernels: several CTAs of 32 channels with a ragged last one, a multiplier,
# stride 2, a 7x7 filter with a halo of 3, and an image count past one CTA row of the transpose.
ROUND_TRIP_CASES = [
    (3, 70, 1, 33, 7, 7, (3, 3), (1, 1), (1, 1), (1, 1), True, True),
    (2, 40, 1, 24, 14, 14, (7, 7), (1, 1), (3, 3), (1, 1), True, True),
    (5, 36, 2, 40, 13, 11, (5, 5), (2, 2), (2, 2), (1, 1), False, True),
    (33, 48, 1, 65, 7, 7, (3, 3), (1, 1), (1, 1), (1, 1), True, False),
]


@pytest.mark.cuda
@pytest.mark.parametrize("case", ROUND_TRIP_CASES, ids=lambda c: "x".join(map(str, c[:6])))
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_round_trip_on_small_planes_of_many_channels(monkeypatch, case, dtype):
    """The mixed path through channels-last on problems of the sweep's kind (many channels, small planes): the NCHW ->
    NHWC depthwise kernel and the transpose back with the bias both run, and the output (poisoned before) agrees
    with the reference, in NCHW."""
    monkeypatch.setenv("CONVOPS_SEPARABLE_KERNEL", "none")
    monkeypatch.setenv("CONVOPS_SEPARABLE_MIXED", "channels_last")
    with convops.forced_path("convops"):
        ran = cuda_kernels_run(lambda: check_against_reference(case, dtype, "cuda", "contiguous", unfused=True))
    assert any("depthwise_to_nhwc_kernel" in name for name in ran), ran
    assert any("batched_transpose" in name for name in ran), ran


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_one_channel_channels_last_output_stays_channels_last(dtype):
    """With one input channel a channels-last tensor is NCHW-contiguous too: the mixed path must pick its GEMM by the
    layout, so that the output is channels-last like the input's."""
    case = (2, 1, 1, 8, 16, 16, (3, 3), (1, 1), (1, 1), (1, 1), True, True)
    with allow_tf32(False):
        check_against_reference(case, dtype, "cuda", "channels_last")


@pytest.mark.cuda
@pytest.mark.parametrize("tf32", [False, True])
def test_cuda_huge_dilation_uses_unfused_fallback(tf32):
    case = (1, 2, 1, 3, 170, 900, (9, 9), (1, 1), (0, 0), (20, 110), True, True)
    with allow_tf32(tf32):
        check_against_reference(case, torch.float32, "cuda", "contiguous", unfused=True)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch(device):
    args = make_problem(CASES[0], torch.float32, device)
    out = convops.depthwise_separable_conv2d(args[0][:0], *args[1:])
    assert out.shape == (0, *torch_separable(*args).shape[1:])


def bad_inputs(device):
    x = make_tensor((2, 4, 10, 10), torch.float32, device)
    dw = make_tensor((8, 1, 3, 3), torch.float32, device)
    db = make_tensor((8,), torch.float32, device)
    pw = make_tensor((5, 8, 1, 1), torch.float32, device)
    pb = make_tensor((5,), torch.float32, device)
    ok = [[1, 1], [0, 0], [1, 1]]
    return {
        "input rank": ((x[0], dw, db, pw, pb), ok),
        "depthwise in-channels": ((x, make_tensor((8, 2, 3, 3), torch.float32, device), db, pw, pb), ok),
        "depthwise multiple": ((x, make_tensor((6, 1, 3, 3), torch.float32, device), None, pw, pb), ok),
        "depthwise bias": ((x, dw, db[:3], pw, pb), ok),
        "pointwise channels": ((x, dw, db, make_tensor((5, 4, 1, 1), torch.float32, device), pb), ok),
        "pointwise kernel": ((x, dw, db, make_tensor((5, 8, 3, 3), torch.float32, device), pb), ok),
        "pointwise rank": ((x, dw, db, pw[:, :, 0, 0], pb), ok),
        "pointwise bias": ((x, dw, db, pw, pb[:2]), ok),
        "pointwise dtype": ((x, dw, db, pw.half(), pb), ok),
        "integer input": ((x.int(), dw.int(), None, pw.int(), None), ok),
        "zero stride": ((x, dw, db, pw, pb), [[1, 0], [0, 0], [1, 1]]),
        "negative padding": ((x, dw, db, pw, pb), [[1, 1], [0, -2], [1, 1]]),
        "zero dilation": ((x, dw, db, pw, pb), [[1, 1], [0, 0], [0, 1]]),
        "kernel larger than input": ((x, dw, db, pw, pb), [[1, 1], [0, 0], [6, 1]]),
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("problem", list(bad_inputs("cpu")))
def test_errors(device, problem):
    tensors, params = bad_inputs(device)[problem]
    with pytest.raises(RuntimeError, match="convops::depthwise_separable_conv2d"):
        OP(*tensors, *params)


@pytest.mark.cuda
def test_error_device_mismatch():
    x, dw, db, pw, pb, *params = make_problem(CASES[0], torch.float32, "cuda")
    with pytest.raises(RuntimeError, match="convops::depthwise_separable_conv2d"):
        OP(x, dw, db, pw.cpu(), pb, *params)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("case", [CASES[10]])
def test_opcheck(device, case, requires_grad):
    opcheck(OP, make_problem(case, torch.float32, device, requires_grad=requires_grad))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [(2, 2, 2, 3, 6, 7, (3, 2), (2, 1), (1, 0), (1, 2), True, True),
                                  (1, 3, 1, 2, 5, 5, (3, 3), (1, 1), (1, 1), (1, 1), False, True)])
def test_gradcheck(device, case):
    args = make_problem(case, torch.float64, device, requires_grad=True)
    tensors = args[:5]
    present = [t for t in tensors if t is not None]

    def fn(*values):
        it = iter(values)
        return OP(*[None if t is None else next(it) for t in tensors], *args[5:])

    assert torch.autograd.gradcheck(fn, present, fast_mode=True)


@pytest.mark.parametrize("device", DEVICES)
def test_partial_gradients(device):
    """Only some inputs require grad: the backward saves and computes only what they need."""
    x, dw, db, pw, pb, *params = make_problem(CASES[0], torch.float64, device)
    pw.requires_grad_()
    OP(x, dw, db, pw, pb, *params).sum().backward()
    ref_pw = pw.detach().requires_grad_()
    torch_separable(x, dw, db, ref_pw, pb, *params).sum().backward()
    torch.testing.assert_close(pw.grad, ref_pw.grad)


@pytest.mark.cuda
@pytest.mark.parametrize("case", [CASES[0], CASES[4], CASES[10]])
def test_cuda_gradients_match_aten(case):
    with allow_tf32(False):
        ours = make_problem(case, torch.float32, "cuda", requires_grad=True)
        theirs = [t.detach().clone().requires_grad_() if isinstance(t, torch.Tensor) else t for t in ours]
        grad = torch.randn_like(torch_separable(*theirs))
        convops.depthwise_separable_conv2d(*ours).backward(grad)
        torch_separable(*theirs).backward(grad)
        for a, b in zip(ours[:5], theirs[:5]):
            if a is not None:
                torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-4)


# Problems of the small-problem fused kernel (csrc/cuda/depthwise_separable_conv2d_small.cuh), with the tiling its
# launcher picks on 132 SMs: MobileNetV2's 384 -> 64 at 14x14 (tiles of 8 pixels, the last of 4; 6 slices of the mid
# channels over a cluster; 4 shares a slice) and EfficientNet-B0's 1152 -> 192 at 7x7 with both biases (tiles of 7,
# clusters of 16 on Hopper, 192 couts); a 56x56 stride-2 layer (tiles of 32 pixels that span output rows); a multiplier of 2
# with padding past half the filter along H, a short last slice and two images; one cout (one CTA a tile, no
# cluster; three images); 200 couts without padding (a short last slice); 7x7 stride 2 with a multiplier of 3 and
# padding past half the filter along W; 150 couts on a 17x19 plane (tiles of 30: 600 tasks, more than a CTA's
# threads).
SMALL_CASES = [
    (1, 384, 1, 64, 14, 14, (3, 3), (1, 1), (1, 1), (1, 1), False, False),
    (1, 1152, 1, 192, 7, 7, (5, 5), (1, 1), (2, 2), (1, 1), True, True),
    (1, 144, 1, 32, 56, 56, (3, 3), (2, 2), (1, 1), (1, 1), False, True),
    (2, 37, 2, 33, 9, 11, (5, 5), (2, 2), (3, 1), (1, 1), True, True),
    (3, 20, 1, 1, 13, 17, (7, 7), (1, 1), (3, 3), (1, 1), True, False),
    (1, 100, 1, 200, 10, 9, (3, 3), (1, 1), (0, 0), (1, 1), False, True),
    (1, 24, 3, 17, 20, 19, (7, 7), (2, 2), (2, 4), (1, 1), True, True),
    (1, 40, 1, 150, 17, 19, (3, 3), (1, 1), (1, 1), (1, 1), True, True),
]


def small_kernel_pays(case) -> bool:
    """small_separable_pays of csrc/cuda/depthwise_separable_conv2d_small.cuh: at most 2^18 depthwise outputs on
    output planes of at most 256 pixels, a 1x1 of at most 2^24 multiply-adds."""
    n, c, m, c_out, h, w, kernel, stride, padding, _, _, _ = case
    out_h, out_w = ((size + 2 * p - k) // s + 1 for size, k, s, p in zip((h, w), kernel, stride, padding))
    outputs = n * c * m * out_h * out_w
    return outputs <= 2 ** 18 and out_h * out_w <= 256 and outputs * c_out <= 2 ** 24


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: "x".join(map(str, c[:6])))
def test_cuda_small_problem_fused_kernel(monkeypatch, case, dtype):
    """The small-problem fused kernel, forced (CONVOPS_SEPARABLE_KERNEL=small) and by the default dispatch (which
    takes it where it pays: all these problems but the 28x28 and 17x19 planes), against the float64 reference in
    every precision mode: the intermediate rounded to the input dtype, and under TF32 the 1x1's operands rounded to
    TF32 as cuDNN does, so TF32 is held to the fp32 tolerance; outputs poisoned first."""
    args = make_problem(case, dtype, "cuda")
    for tf32 in ([True, False] if dtype == torch.float32 else [True]):
        for forced in (True, False):
            if forced:
                monkeypatch.setenv("CONVOPS_SEPARABLE_KERNEL", "small")
            else:
                monkeypatch.delenv("CONVOPS_SEPARABLE_KERNEL", raising=False)
            with allow_tf32(tf32):
                expected = separable_reference(*args)
                poison_allocator("cuda", expected.numel() * args[0].element_size())
                out = convops.depthwise_separable_conv2d(*args)
                names = cuda_kernels_run(lambda: convops.depthwise_separable_conv2d(*args))
            ran = any("separable_small_kernel" in n for n in names)
            assert ran == (forced or small_kernel_pays(case)), (tf32, forced, names)
            if ran or not tf32:
                assert_close(out, expected)
            else:
                assert_close(out, expected, **CUDNN_TF32_TOLERANCE)
            assert out.is_contiguous()


SMALL_PLANS = {
    # CONVOPS_SMALL_SEPARABLE_RANKS caps the clusters: EfficientNet-B0's 1152 -> 192 layer on clusters of 8 CTAs (the
    # portable size, the fallback where 16 do not fit), MobileNetV2's 384 -> 64 layer on one CTA a tile (no cluster:
    # the kernel on GPUs without clusters; its weights still fit in shared memory).
    "ranks8": (SMALL_CASES[1], {"CONVOPS_SMALL_SEPARABLE_RANKS": "8"}),
    "ranks1": (SMALL_CASES[0], {"CONVOPS_SMALL_SEPARABLE_RANKS": "1"}),
    # CONVOPS_SMALL_SEPARABLE_TILE caps the pixels a CTA: two tiles of 15 and ten of an odd 3 pixels that span rows
    # of an odd 6x5 output plane (two images, multiplier 2, stride 2; clusters of 4, as wide as 74 channels allow).
    "tile15": (SMALL_CASES[3], {"CONVOPS_SMALL_SEPARABLE_TILE": "16"}),
    "tile3": (SMALL_CASES[3], {"CONVOPS_SMALL_SEPARABLE_TILE": "3"}),
    # The 14x14 plane in tiles of 8 (its plan before it took tiles of 16; clusters of 11 CTAs now, 6 then) and, with
    # CONVOPS_SMALL_SEPARABLE_CTAS aiming at 40 CTAs, its 13 tiles of 16 in clusters of 4 (96 channels a CTA).
    "tile8": (SMALL_CASES[0], {"CONVOPS_SMALL_SEPARABLE_TILE": "8"}),
    "ctas40": (SMALL_CASES[0], {"CONVOPS_SMALL_SEPARABLE_CTAS": "40"}),
}


@pytest.mark.cuda
@pytest.mark.parametrize("plan", SMALL_PLANS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_small_problem_fused_kernel_plans(monkeypatch, plan, dtype):
    """The small-problem kernel under other tilings than its own (the tuning switches, read each call) matches the
    reference: the plans of SMALL_PLANS."""
    case, switches = SMALL_PLANS[plan]
    args = make_problem(case, dtype, "cuda")
    monkeypatch.setenv("CONVOPS_SEPARABLE_KERNEL", "small")
    for name, value in switches.items():
        monkeypatch.setenv(name, value)
    expected = separable_reference(*args)
    poison_allocator("cuda", expected.numel() * args[0].element_size())
    assert_close(convops.depthwise_separable_conv2d(*args), expected)
    names = cuda_kernels_run(lambda: convops.depthwise_separable_conv2d(*args))
    assert any("separable_small_kernel" in n for n in names), names


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_small_problem_fused_kernel_odd_offsets_and_padding_tiles(monkeypatch, dtype):
    """The kernel stages its operands as whole 4-byte words: every operand here is a contiguous view that starts one
    element into its storage (16-bit spans from the upper half of a word), and padding 4 around a 5x6 image with a
    3x3 filter gives tiles whose windows lie wholly in the padding above or below the image (no rows to stage)."""
    monkeypatch.setenv("CONVOPS_SEPARABLE_KERNEL", "small")

    def offset_view(shape):
        t = make_tensor((1 + math.prod(shape),), dtype, "cuda")[1:]
        return t.view(shape)

    for c, c_out, h, w, pad in [(37, 19, 7, 9, 1), (16, 8, 5, 6, 4)]:
        x = offset_view((2, c, h, w))
        dw, db = offset_view((c, 1, 3, 3)), offset_view((c,))
        pw, pb = offset_view((c_out, c, 1, 1)), offset_view((c_out,))
        args = (x, dw, db, pw, pb, [1, 1], [pad, pad], [1, 1])
        assert x.is_contiguous() and x.storage_offset() == 1
        with allow_tf32(True):
            expected = separable_reference(*args)
            poison_allocator("cuda", expected.numel() * x.element_size())
            assert_close(convops.depthwise_separable_conv2d(*args), expected)
            names = cuda_kernels_run(lambda: convops.depthwise_separable_conv2d(*args))
        assert any("separable_small_kernel" in n for n in names), names


@pytest.mark.cuda
def test_cuda_small_problem_fused_kernel_after_a_smaller_cluster(monkeypatch):
    """One kernel instance (fp32, TF32, 5x5, stride 1) on clusters of 16 CTAs for a problem that needs more shared
    memory, then one that needs less (its cluster check is new), then the first again: the allowance the first set
    must still hold (the cluster check may only ever raise it)."""
    monkeypatch.setenv("CONVOPS_SEPARABLE_KERNEL", "small")
    large = SMALL_CASES[1]  # 1152 -> 192: 16 slices of 72 channels, about 60 KB a CTA
    small = (1, 272, 1, 24, 7, 7, (5, 5), (1, 1), (2, 2), (1, 1), True, True)  # 16 slices of 17: about 5 KB
    with allow_tf32(True):
        for case in (large, small, large):
            args = make_problem(case, torch.float32, "cuda")
            expected = separable_reference(*args)
            poison_allocator("cuda", expected.numel() * args[0].element_size())
            assert_close(convops.depthwise_separable_conv2d(*args), expected)
            names = cuda_kernels_run(lambda: convops.depthwise_separable_conv2d(*args))
            assert any("separable_small_kernel" in n for n in names), (case, names)


@pytest.mark.cuda
def test_cuda_small_problem_fused_kernel_leaves_large_problems(monkeypatch):
    """The default dispatch gives the small-problem kernel only latency-bound problems: not a batch-32 layer (1.6
    million depthwise outputs), nor a batch-1 layer whose 1x1 is 2^26.8 multiply-adds (ConvNeXt-T 768 -> 3072 at 7x7).
    Forced, it computes the batch-32 one (32 images of 25 tiles, one CTA a tile) and declines the other, whose
    weight slices (3072 couts x 48 channels) would not fit in shared memory."""
    batch32 = (32, 64, 1, 32, 28, 28, (3, 3), (1, 1), (1, 1), (1, 1), True, True)
    convnext = (1, 768, 1, 3072, 7, 7, (7, 7), (1, 1), (3, 3), (1, 1), True, True)
    for case in (batch32, convnext):
        args = make_problem(case, torch.bfloat16, "cuda")
        names = cuda_kernels_run(lambda: convops.depthwise_separable_conv2d(*args))
        assert not any("separable_small_kernel" in n for n in names), (case, names)
    monkeypatch.setenv("CONVOPS_SEPARABLE_KERNEL", "small")
    for case, runs in ((batch32, True), (convnext, False)):
        args = make_problem(case, torch.bfloat16, "cuda")
        expected = separable_reference(*args)
        poison_allocator("cuda", expected.numel() * args[0].element_size())
        assert_close(convops.depthwise_separable_conv2d(*args), expected)
        names = cuda_kernels_run(lambda: convops.depthwise_separable_conv2d(*args))
        assert any("separable_small_kernel" in n for n in names) == runs, (case, names)


# Runs the fused kernel on saved inputs in a fresh process, whose environment picks the variant (the launcher reads
# its switches once a process).
_RUN_FUSED_KERNEL = """
import sys, torch, convops
convops.set_path_policy("convops")
x, dw, db, pw, pb, params, tf32 = torch.load(sys.argv[1])
torch.backends.cudnn.allow_tf32 = tf32
torch.save(torch.ops.convops.depthwise_separable_conv2d(x, dw, db, pw, pb, *params).cpu(), sys.argv[2])
"""


def fused_kernel_in_process(tmp_path, args, tf32: bool, **env) -> torch.Tensor:
    """The fused kernel's output for `args` (make_problem's) in a fresh process with `env` added to its environment."""
    import os
    import subprocess
    import sys
    torch.save((*args[:5], list(args[5:]), tf32), tmp_path / "inputs.pt")
    subprocess.run([sys.executable, "-c", _RUN_FUSED_KERNEL, str(tmp_path / "inputs.pt"), str(tmp_path / "out.pt")],
                   env={**os.environ, **env}, check=True, timeout=300)
    return torch.load(tmp_path / "out.pt")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,tf32,kernel", [(torch.float32, True, 3), (torch.float32, False, 5),
                                               (torch.bfloat16, True, 7)])
def test_cuda_fused_box_copies_match_cp_async(tmp_path, dtype, tf32, kernel):
    """On sm_90 the tile kernel stages its input (multiplier 1) by box copies of the bulk-copy engine; a process
    with CONVOPS_BULK_COPIES=0 stages it by cp.async. The same bytes reach the same arithmetic: bitwise equal
    outputs (edges included: top and bottom padding, a ragged last column tile and channel chunk)."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("box copies need sm_90")
    case = (2, 24, 1, 40, 13, 72, (kernel, kernel), (1, 1), (kernel // 2, kernel // 2), (1, 1), True, True)
    args = make_problem(case, dtype, "cuda")
    assert fused_kernel_takes(args[0], args[1], args[3], *args[5:])
    boxes = fused_kernel_in_process(tmp_path, args, tf32, CONVOPS_SEPARABLE_KERNEL="tile")
    assert torch.equal(boxes, fused_kernel_in_process(tmp_path, args, tf32, CONVOPS_SEPARABLE_KERNEL="tile",
                                                      CONVOPS_BULK_COPIES="0"))


def _edges_case(kernel):  # one tile a CTA: top and bottom padding, a ragged last column tile and channel chunk
    return (2, 40, 1, 72, 13, 72, (kernel, kernel), (1, 1), (kernel // 2, kernel // 2), (1, 1), True, True)


# Several tiles a CTA (the sums restart after each tile's store) and a ragged second tile of 72 couts.
_MANY_TILES = (8, 48, 1, 200, 62, 96, (3, 3), (1, 1), (1, 1), (1, 1), True, True)


@pytest.mark.cuda
@pytest.mark.parametrize("mma", ["wgmma", "sync"])
@pytest.mark.parametrize("dtype,case", [(torch.float32, _edges_case(3)), (torch.bfloat16, _edges_case(5)),
                                        (torch.float16, _edges_case(7)), (torch.float32, _MANY_TILES),
                                        (torch.bfloat16, _MANY_TILES)])
def test_cuda_fused_kernel_on_either_mma(tmp_path, dtype, case, mma):
    """Where the build has sm_90a code the tile kernel runs its 1x1 on wgmma (by default in 16-bit) or mma.sync
    (by default in TF32; always on other GPUs and plain sm_90 builds, where both runs here are mma.sync);
    CONVOPS_SEPARABLE_MMA forces either in every mode. Each matches the reference, as does the default."""
    args = make_problem(case, dtype, "cuda")
    assert fused_kernel_takes(args[0], args[1], args[3], *args[5:])
    with allow_tf32(True):
        expected = separable_reference(*args)
        assert_close(convops.depthwise_separable_conv2d(*args), expected)
    assert_close(fused_kernel_in_process(tmp_path, args, True, CONVOPS_SEPARABLE_MMA=mma,
                                         CONVOPS_SEPARABLE_KERNEL="tile"), expected)


# Problems of the row-streaming kernel's scope (3x3, multiplier 1, at most 64 channels in, 64 to 128 out): the seed's
# channels with a ragged second strip (200 = 128 + 72 columns); a partial K (24 channels), a ragged cout tile (100)
# and no padding along H; a strip narrower than one (32 columns) with 2 rows of padding; shares of 16 rows that cross
# images (16 x 66 rows over 66 groups of a CTA for each of 2 strips, on 132 SMs), 72 couts (a warp with 8 of its 16
# couts), no biases.
_STREAMING = [(2, 64, 1, 128, 37, 200, (3, 3), (1, 1), (1, 1), (1, 1), True, True),
              (3, 24, 1, 100, 19, 136, (3, 3), (1, 1), (0, 1), (1, 1), True, True),
              (1, 8, 1, 64, 5, 32, (3, 3), (1, 1), (2, 1), (1, 1), False, True),
              (16, 16, 1, 72, 66, 256, (3, 3), (1, 1), (1, 1), (1, 1), False, False)]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", _STREAMING)
@pytest.mark.usefixtures("without_small_separable_kernel")
def test_cuda_streaming_kernel_matches_reference(dtype, case):
    """On compute capability 9.0 (with setup.py's sm_90a code) the row-streaming kernel takes these problems; in
    TF32 and 16-bit it matches the reference as closely as the tile kernel does. Strict fp32 stays on the tile
    kernel (3xTF32). (The small-problem kernel, left out here, would take the third.)"""
    args = make_problem(case, dtype, "cuda")
    assert fused_kernel_takes(args[0], args[1], args[3], *args[5:])
    with allow_tf32(True):
        expected = separable_reference(*args)
        poison_allocator("cuda", expected.numel() * args[0].element_size())
        names = cuda_kernels_run(lambda: convops.depthwise_separable_conv2d(*args))
        out = convops.depthwise_separable_conv2d(*args)
    assert_close(out, expected)
    streaming = any("separable_streaming_kernel" in n for n in names)
    assert streaming == (torch.cuda.get_device_capability() == (9, 0)), names
    if dtype == torch.float32:
        with allow_tf32(False):
            names = cuda_kernels_run(lambda: convops.depthwise_separable_conv2d(*args))
        assert not any("separable_streaming_kernel" in n for n in names), names


@pytest.mark.cuda
@pytest.mark.usefixtures("without_small_separable_kernel")
def test_cuda_streaming_kernel_leaves_few_couts_to_the_tile_kernel():
    """Under 64 couts (where the streaming kernel's 128-cout rows cost more than they bring) the tile kernel runs."""
    args = make_problem((2, 32, 1, 16, 20, 128, (3, 3), (1, 1), (1, 1), (1, 1), True, True), torch.float32, "cuda")
    with allow_tf32(True):
        names = cuda_kernels_run(lambda: convops.depthwise_separable_conv2d(*args))
        assert_close(convops.depthwise_separable_conv2d(*args), separable_reference(*args))
    assert not any("separable_streaming_kernel" in n for n in names), names
    assert any("separable_pipelined_kernel" in n for n in names), names


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ctas,slots", [(7, 4), (3, 5)])
def test_cuda_streaming_kernel_shares_and_ring_sizes(tmp_path, dtype, ctas, slots):
    """Grids of 7 and 3 CTAs and rings of 4 and 5 slots (CONVOPS_STREAM_CTAS, CONVOPS_STREAM_SLOTS; fp32 fits 4):
    (3 groups of a CTA for each of the 2 strips, and 1 group) each share of the rows then crosses several images,
    and the ring's slots are refilled in every phase. Each matches the reference, as the tile kernel does."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the row-streaming kernel runs on compute capability 9.0")
    args = make_problem(_STREAMING[3], dtype, "cuda")
    with allow_tf32(True):
        expected = separable_reference(*args)
    out = fused_kernel_in_process(tmp_path, args, True, CONVOPS_STREAM_CTAS=str(ctas), CONVOPS_STREAM_SLOTS=str(slots))
    assert_close(out, expected)
    assert_close(fused_kernel_in_process(tmp_path, args, True, CONVOPS_SEPARABLE_KERNEL="tile"), expected)
