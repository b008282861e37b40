"""convops::depthwise_conv2d against F.conv2d(..., groups=C_in) in float64."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import convops
from common_utils import (DEVICES, DTYPES, LAYOUTS, allow_tf32, assert_close, assert_output_layout,
                          cuda_kernels_run, make_tensor, opcheck, poison_allocator, reference)

OP = torch.ops.convops.depthwise_conv2d.default

# (batch, C_in, multiplier, H, W, kernel, stride, padding, dilation, bias): a deterministic sample of the
# parameter grid (kernels 1-7 square and not, strides 1-3, paddings, dilations, multipliers, odd sizes, batch 0/1/3).
CASES = [
    (2, 4, 1, 16, 16, (3, 3), (1, 1), (1, 1), (1, 1), True),
    (1, 3, 1, 17, 13, (3, 3), (1, 1), (0, 0), (1, 1), False),
    (3, 2, 2, 15, 19, (3, 3), (2, 2), (1, 1), (1, 1), True),
    (1, 5, 1, 40, 150, (3, 3), (1, 1), (1, 1), (1, 1), True),   # several tiles in both directions
    (2, 3, 1, 21, 23, (5, 5), (1, 1), (2, 2), (1, 1), True),
    (1, 2, 3, 18, 14, (5, 5), (1, 1), (0, 1), (1, 1), False),
    (2, 4, 1, 13, 11, (1, 1), (1, 1), (0, 0), (1, 1), True),
    (1, 3, 2, 20, 20, (7, 7), (1, 1), (3, 3), (1, 1), True),
    (1, 2, 1, 19, 25, (7, 7), (3, 3), (2, 1), (1, 1), False),
    (3, 2, 1, 12, 16, (2, 4), (1, 2), (1, 0), (1, 1), True),
    (1, 4, 1, 25, 17, (3, 5), (2, 1), (2, 1), (2, 3), True),
    (2, 3, 2, 16, 31, (1, 3), (3, 2), (0, 1), (1, 2), False),
    (1, 2, 1, 30, 30, (3, 3), (1, 1), (2, 2), (2, 2), True),
    (1, 3, 1, 9, 9, (6, 2), (1, 1), (0, 0), (1, 1), True),
    (2, 2, 1, 33, 35, (3, 3), (3, 3), (0, 0), (3, 3), True),
    (1, 1, 4, 8, 70, (4, 4), (2, 3), (3, 2), (1, 1), False),
]

# Each case runs in one dtype and one layout, rotating through both lists so the sample covers every pairing.
SAMPLED = [(case, DTYPES[i % len(DTYPES)], LAYOUTS[(i // len(DTYPES)) % len(LAYOUTS)])
           for i, case in enumerate(CASES)]


def make_problem(case, dtype, device, layout="contiguous", requires_grad=False):
    n, c, m, h, w, kernel, stride, padding, dilation, has_bias = case
    x = make_tensor((n, c, h, w), dtype, device, layout, requires_grad=requires_grad)
    weight = make_tensor((m * c, 1, *kernel), dtype, device, requires_grad=requires_grad)
    bias = make_tensor((m * c,), dtype, device, requires_grad=requires_grad) if has_bias else None
    return x, weight, bias, list(stride), list(padding), list(dilation)


def torch_depthwise(x, weight, bias, stride, padding, dilation):
    return F.conv2d(x, weight, bias, stride, padding, dilation, groups=x.shape[1])


def output_nbytes(x, weight, stride, padding, dilation):
    hw = [(x.shape[2 + i] + 2 * padding[i] - dilation[i] * (weight.shape[2 + i] - 1) - 1) // stride[i] + 1
          for i in range(2)]
    return x.shape[0] * weight.shape[0] * hw[0] * hw[1] * x.element_size()


def check_against_reference(case, dtype, device, layout):
    args = make_problem(case, dtype, device, layout)
    poison_allocator(device, output_nbytes(*args[:2], *args[3:]))
    out = convops.depthwise_conv2d(*args)
    # The kernels never use TF32 for the depthwise stage (no tensor cores), so fp32 is compared strictly.
    assert_close(out, reference(torch_depthwise, *args))
    assert out.dtype == dtype and out.shape == torch_depthwise(*args).shape
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
@pytest.mark.parametrize("case", CASES[:6] + CASES[9:12], ids=lambda c: "x".join(map(str, c[3:6])))
def test_cuda_fp32_both_precision_modes(case, tf32):
    with allow_tf32(tf32):
        check_against_reference(case, torch.float32, "cuda", "contiguous")


@pytest.mark.cuda
def test_cuda_seed_like_shape_matches_eager_bitwise_order():
    """The fp32 kernel accumulates in ATen's order, so it agrees with eager (NCHW) to the last bits."""
    x = make_tensor((2, 8, 130, 258), torch.float32, "cuda")
    weight = make_tensor((8, 1, 3, 3), torch.float32, "cuda")
    bias = make_tensor((8,), torch.float32, "cuda")
    torch.testing.assert_close(convops.depthwise_conv2d(x, weight, bias, 1, 1, 1),
                               F.conv2d(x, weight, bias, 1, 1, 1, groups=8), atol=1e-6, rtol=1e-6)


def run_with_kernel(monkeypatch, kernel, args):
    """convops.depthwise_conv2d(*args) with the NCHW dispatch restricted to `kernel` (CONVOPS_DEPTHWISE_KERNEL; None:
    the default dispatch): its output poisoned first, so that every output must be written, and checked against
    float64. Returns the output and the CUDA kernels that a second call ran."""
    if kernel is None:
        monkeypatch.delenv("CONVOPS_DEPTHWISE_KERNEL", raising=False)
    else:
        monkeypatch.setenv("CONVOPS_DEPTHWISE_KERNEL", kernel)
    poison_allocator("cuda", output_nbytes(args[0], args[1], *args[3:]))
    out = convops.depthwise_conv2d(*args)
    assert_close(out, reference(torch_depthwise, *args))
    return out, cuda_kernels_run(lambda: convops.depthwise_conv2d(*args))


# Row-streaming problems: (C_in, multiplier, H, W, kernel, padding) with rows a whole number of 16-byte vectors,
# wide enough for one strip (128 fp32 / 256 16-bit columns) in every dtype. W 520 gives fp32 five strips (a block's
# column group of four and a ragged one of one) and 16-bit three; W 1040 gives 16-bit five. Paddings: none, the
# centred one, one off centre (outputs not aligned with input vectors) and one past the filter (bands of padding).
# 16-bit 3x3 rows of a multiple of 16 columns, at least 512, take the bulk kernel's 32-byte lanes (BulkConfig): W
# 1040 (three strips of 512), 528 (a second strip of one lane's columns), 1024, 512, and 2080 / 2064 (five strips: a
# block's column group of four and a ragged one).
STREAMING_CASES = [
    (3, 1, 37, 520, 3, 0), (2, 2, 21, 520, 3, 1), (2, 1, 9, 1040, 3, 4),
    (3, 1, 37, 528, 3, 0), (2, 2, 21, 1024, 3, 1), (1, 1, 11, 512, 3, 2), (1, 1, 7, 2080, 3, 1),
    (1, 1, 9, 2064, 3, 0),
    (2, 1, 19, 520, 5, 2), (1, 2, 17, 1040, 5, 1), (2, 1, 6, 520, 5, 0),
    (1, 1, 23, 520, 7, 3), (2, 1, 12, 1040, 7, 0), (1, 1, 8, 520, 7, 2),
]


@pytest.mark.cuda
@pytest.mark.parametrize("kernel", ["bulk", "rows"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", STREAMING_CASES, ids=lambda c: "c{}m{}_{}x{}_k{}p{}".format(*c))
def test_cuda_row_streaming_kernels(monkeypatch, case, dtype, kernel):
    """The bulk-copy kernel (sm_90) and the register-ring rows kernel, each forced: against float64, bitwise against
    each other (the same fp32 sums in the same order), every output written."""
    c, m, h, w, k, pad = case
    if kernel == "bulk" and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the bulk-copy kernel needs sm_90")
    x = make_tensor((2, c, h, w), dtype, "cuda")
    weight = make_tensor((c * m, 1, k, k), dtype, "cuda")
    bias = make_tensor((c * m,), dtype, "cuda") if (h + k) % 2 else None
    args = (x, weight, bias, [1, 1], [pad, pad], [1, 1])
    out, ran = run_with_kernel(monkeypatch, kernel, args)
    # The bulk kernel declines 16-bit 7x7 filters (BulkConfig::kTakes); the general kernels answer instead.
    both_take = dtype == torch.float32 or k < 7
    assert any(f"depthwise_{kernel}_kernel" in name for name in ran) == (kernel == "rows" or both_take)
    if kernel == "bulk" and both_take:
        # 16-bit 3x3 rows of a multiple of 16 columns, at least 512, on 32-byte lanes (VEC 16, 4 blocks an SM).
        wide = dtype != torch.float32 and k == 3 and w % 16 == 0 and w >= 512
        assert any(re.search(r"depthwise_bulk_kernel<[^>]*, 16, 4>", name) for name in ran) == wide, ran
    if both_take and torch.cuda.get_device_capability() >= (9, 0):
        monkeypatch.setenv("CONVOPS_DEPTHWISE_KERNEL", "rows" if kernel == "bulk" else "bulk")
        assert torch.equal(out, convops.depthwise_conv2d(*args))


# Register-blocked kernel problems: (batch, C_in, multiplier, H, W, kernel, padding). Whole planes several a block
# (7x7 and 14x14 planes, many of them), bands of rows of one plane (tall planes), widths not a multiple of 4 (scalar
# stores), odd paddings (16-bit copies then start a column early), paddings past half the filter, multipliers, and
# an odd width, which 16-bit leaves to the plane-block kernel.
BLOCKED_CASES = [
    (64, 3, 1, 7, 7, 3, 1), (4, 5, 2, 14, 14, 3, 0), (2, 3, 1, 57, 30, 5, 2), (3, 2, 1, 28, 22, 7, 3),
    (1, 2, 3, 300, 40, 3, 1), (1, 1, 1, 260, 112, 7, 3), (2, 4, 1, 9, 18, 5, 4), (2, 3, 1, 16, 10, 7, 6),
    (40, 8, 1, 14, 14, 7, 3),
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", BLOCKED_CASES, ids=lambda c: "n{}c{}m{}_{}x{}_k{}p{}".format(*c))
def test_cuda_register_blocked_kernel(monkeypatch, case, dtype):
    """The register-blocked kernel forced: against float64, every output written, and in fp32 bitwise equal to the
    plane-block kernel (both add the taps in ATen's (ky, kx) order)."""
    n, c, m, h, w, k, pad = case
    x = make_tensor((n, c, h, w), dtype, "cuda")
    weight = make_tensor((c * m, 1, k, k), dtype, "cuda")
    bias = make_tensor((c * m,), dtype, "cuda") if (h + k) % 2 else None
    args = (x, weight, bias, [1, 1], [pad, pad], [1, 1])
    out, ran = run_with_kernel(monkeypatch, "blocked", args)
    takes = dtype == torch.float32 or w % 2 == 0
    assert any("depthwise_blocked_kernel" in name for name in ran) == takes
    if dtype == torch.float32:
        monkeypatch.setenv("CONVOPS_DEPTHWISE_KERNEL", "planes")
        assert torch.equal(out, convops.depthwise_conv2d(*args))


# Plane-block kernel problems: (C_in, multiplier, H, W, kernel, stride, padding, dilation). Small planes several a
# block (14x14, 7x7 with a multiplier), stride 2 on an even and an odd plane, a dilation (the general kernel), and a
# 28-wide output (bands of rows).
PLANES_CASES = [
    (6, 1, 14, 14, 3, 1, 1, 1), (4, 2, 7, 7, 7, 1, 3, 1), (5, 1, 56, 56, 5, 2, 2, 1), (3, 1, 29, 31, 3, 2, 1, 1),
    (4, 1, 20, 20, 3, 1, 2, 2),
]
SMALL_PROBLEM_OUTPUTS = 1 << 18  # cuda/depthwise_conv2d_launch.cuh, is_small_problem


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", PLANES_CASES, ids=lambda c: "c{}m{}_{}x{}_k{}s{}p{}d{}".format(*c))
def test_cuda_plane_block_kernel_short_and_long_runs(monkeypatch, case, dtype):
    """The plane-block kernel forced, on a batch-1 problem (a small one: runs of 2 outputs a thread where outputs
    are under 28 wide) and on the same images in a batch past the small-problem size (runs of 8): both against
    float64, every output written, the kernel ran, and the first image's outputs bitwise equal in both (each output
    adds its taps in (ky, kx) order whatever the run)."""
    c, m, h, w, k, stride, pad, dil = case
    out_hw = [(size + 2 * pad - dil * (k - 1) - 1) // stride + 1 for size in (h, w)]
    big_batch = SMALL_PROBLEM_OUTPUTS // (c * m * out_hw[0] * out_hw[1]) + 1
    x = make_tensor((big_batch, c, h, w), dtype, "cuda")
    weight = make_tensor((c * m, 1, k, k), dtype, "cuda")
    bias = make_tensor((c * m,), dtype, "cuda") if k != 5 else None
    params = ([stride] * 2, [pad] * 2, [dil] * 2)
    outs = []
    for images in (x[:1], x):
        out, ran = run_with_kernel(monkeypatch, "planes", (images, weight, bias, *params))
        assert any("depthwise_planes_kernel" in name for name in ran), ran
        outs.append(out)
    assert torch.equal(outs[0][0], outs[1][0])


# Small-problem kernel problems: (batch, C_in, multiplier, H, W, kernel, stride, padding, dilation). The filters and
# strides it takes, odd and non-square planes, multipliers, no padding, padding past half the filter (whole windows
# outside) and a batch of three; then what the dispatch leaves to the register-blocked kernel (stride 1, outputs 28
# or more wide) and what it declines (7x7, a dilation).
SMALL_CASES = [
    (1, 6, 1, 14, 14, 3, 1, 1, 1), (1, 4, 2, 7, 7, 5, 1, 2, 1), (2, 5, 1, 29, 31, 3, 2, 1, 1),
    (1, 3, 1, 56, 56, 5, 2, 2, 1), (1, 3, 3, 9, 13, 5, 1, 3, 1), (1, 2, 1, 10, 12, 3, 1, 0, 1),
    (1, 2, 1, 8, 8, 5, 1, 4, 1), (3, 2, 1, 11, 7, 3, 2, 1, 1), (1, 2, 1, 30, 30, 3, 1, 1, 1),
    (1, 3, 1, 14, 14, 7, 1, 3, 1), (1, 4, 1, 12, 12, 3, 1, 2, 2),
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: "n{}c{}m{}_{}x{}_k{}s{}p{}d{}".format(*c))
def test_cuda_small_problem_kernel(monkeypatch, case, dtype):
    """The small-problem kernel forced, then the default dispatch: against float64, every output written, the
    kernel ran exactly where it takes the problem (forced) and where it pays (default: all these problems are under
    the small-problem size), and in fp32 bitwise equal to the plane-block kernel (both add the taps in ATen's
    (ky, kx) order)."""
    n, c, m, h, w, k, stride, pad, dil = case
    out_w = (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
    x = make_tensor((n, c, h, w), dtype, "cuda")
    weight = make_tensor((c * m, 1, k, k), dtype, "cuda")
    bias = make_tensor((c * m,), dtype, "cuda") if (h + k) % 2 else None
    args = (x, weight, bias, [stride] * 2, [pad] * 2, [dil] * 2)
    takes = dil == 1 and k in (3, 5)
    pays = takes and not (stride == 1 and out_w >= 28)
    for kernel, runs in (("small", takes), (None, pays)):
        out, ran = run_with_kernel(monkeypatch, kernel, args)
        assert any("depthwise_small_kernel" in name for name in ran) == runs, (kernel, ran)
    if dtype == torch.float32:
        monkeypatch.setenv("CONVOPS_DEPTHWISE_KERNEL", "planes")
        assert torch.equal(out, convops.depthwise_conv2d(*args))


@pytest.mark.cuda
def test_cuda_huge_dilation_uses_fallback():
    """An input rectangle too large for shared memory takes the direct kernel."""
    case = (1, 2, 1, 300, 700, (9, 9), (3, 3), (4, 4), (32, 70), True)
    check_against_reference(case, torch.float32, "cuda", "contiguous")


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch(device):
    x, weight, bias, *params = make_problem(CASES[0], torch.float32, device)
    out = convops.depthwise_conv2d(x[:0], weight, bias, *params)
    assert out.shape == (0, *torch_depthwise(x, weight, bias, *params).shape[1:])


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch_of_empty_images(device):
    """As F.conv2d: an empty batch may have empty images, which padding makes valid ones (shape only)."""
    x = make_tensor((0, 4, 0, 5), torch.float32, device)
    weight = make_tensor((8, 1, 3, 3), torch.float32, device)
    expected = F.conv2d(x, weight, None, 1, 2, 1, 4)
    for out in (convops.depthwise_conv2d(x, weight, None, 1, 2, 1),
                torch.compile(convops.depthwise_conv2d, fullgraph=True, backend="eager")(x, weight, None, 1, 2, 1)):
        assert out.shape == expected.shape == (0, 8, 2, 7)


@pytest.mark.parametrize("device", DEVICES)
def test_int_arguments_broadcast(device):
    x, weight, bias, *_ = make_problem(CASES[0], torch.float32, device)
    assert_close(convops.depthwise_conv2d(x, weight, bias, 2, 1, 1),
                 reference(torch_depthwise, x, weight, bias, [2, 2], [1, 1], [1, 1]))


def bad_inputs(device):
    x = make_tensor((2, 4, 10, 10), torch.float32, device)
    w = make_tensor((8, 1, 3, 3), torch.float32, device)
    b = make_tensor((8,), torch.float32, device)
    ok = dict(stride=[1, 1], padding=[0, 0], dilation=[1, 1])
    return {
        "input rank": ((x[0], w, b), ok),
        "weight rank": ((x, w[:, 0], b), ok),
        "weight in-channels": ((x, make_tensor((8, 2, 3, 3), torch.float32, device), b), ok),
        "weight multiple": ((x, make_tensor((6, 1, 3, 3), torch.float32, device), None), ok),
        "bias shape": ((x, w, b[:5]), ok),
        "weight dtype": ((x, w.double(), b), ok),
        "bias dtype": ((x, w, b.half()), ok),
        "integer input": ((x.int(), w.int(), None), ok),
        "zero stride": ((x, w, b), dict(ok, stride=[0, 1])),
        "negative padding": ((x, w, b), dict(ok, padding=[-1, 0])),
        "zero dilation": ((x, w, b), dict(ok, dilation=[1, 0])),
        "three strides": ((x, w, b), dict(ok, stride=[1, 1, 1])),
        "kernel larger than input": ((x, make_tensor((8, 1, 11, 3), torch.float32, device), b), ok),
        "dilated kernel larger than input": ((x, w, b), dict(ok, dilation=[5, 1])),
        "empty images in a batch": ((x[:, :, :0], w, b), dict(ok, padding=[2, 2])),
        "dilation past 64 bits": ((x, w, b), dict(ok, dilation=[2**62 + 1, 1])),  # (k - 1) d wraps to 4
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("problem", list(bad_inputs("cpu")))
def test_errors(device, problem):
    tensors, params = bad_inputs(device)[problem]
    with pytest.raises(RuntimeError, match="convops::depthwise_conv2d"):
        OP(*tensors, params["stride"], params["padding"], params["dilation"])


@pytest.mark.cuda
def test_error_device_mismatch():
    x, weight, bias, *params = make_problem(CASES[0], torch.float32, "cuda")
    with pytest.raises(RuntimeError, match="convops::depthwise_conv2d"):
        OP(x, weight.cpu(), bias, *params)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("case", [CASES[10]])
def test_opcheck(device, case, requires_grad):
    opcheck(OP, make_problem(case, torch.float32, device, requires_grad=requires_grad))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [(2, 2, 2, 6, 7, (3, 2), (2, 1), (1, 0), (1, 2), True),
                                  (1, 3, 1, 5, 5, (3, 3), (1, 1), (1, 1), (1, 1), False)])
def test_gradcheck(device, case):
    args = make_problem(case, torch.float64, device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, *b: OP(x, w, b[0] if b else None, *args[3:]),
                                    [t for t in args[:3] if t is not None], fast_mode=True)


@pytest.mark.cuda
@pytest.mark.parametrize("case", [CASES[0], CASES[5], CASES[10]])
def test_cuda_gradients_match_aten(case):
    with allow_tf32(False):
        ours = make_problem(case, torch.float32, "cuda", "channels_last", requires_grad=True)
        theirs = [t.detach().clone().requires_grad_() if isinstance(t, torch.Tensor) else t for t in ours]
        grad = torch.randn_like(torch_depthwise(*theirs))
        convops.depthwise_conv2d(*ours).backward(grad)
        torch_depthwise(*theirs).backward(grad)
        for a, b in zip(ours[:3], theirs[:3]):
            if a is not None:
                torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-4)
