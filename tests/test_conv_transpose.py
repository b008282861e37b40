"""convops::conv_transpose2d / conv_transpose3d against F.conv_transpose2d / conv_transpose3d."""
from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

import convops
from convops.ops._shapes import conv_transpose_output_size
from common_utils import (DEVICES, DTYPES, LAYOUTS, allow_tf32, assert_close, assert_output_layout, cuda_kernels_run,
                          make_tensor, opcheck, poison_allocator, reference, tf32_active)

OPS = {2: (convops.conv_transpose2d, F.conv_transpose2d, torch.ops.convops.conv_transpose2d.default),
       3: (convops.conv_transpose3d, F.conv_transpose3d, torch.ops.convops.conv_transpose3d.default)}


@dataclass(frozen=True)
class Case:
    batch: int
    in_channels: int
    out_channels: int  # per group
    spatial: tuple
    kernel: tuple
    stride: tuple
    padding: tuple
    output_padding: tuple
    dilation: tuple
    groups: int = 1
    bias: bool = True

    @property
    def dims(self) -> int:
        return len(self.spatial)

    def params(self) -> dict:
        return dict(stride=self.stride, padding=self.padding, output_padding=self.output_padding,
                    groups=self.groups, dilation=self.dilation)

    def output_numel(self) -> int:
        sizes = [conv_transpose_output_size(*dim)[0] for dim in zip(self.spatial, self.kernel, self.stride,
                                                                     self.padding, self.output_padding, self.dilation)]
        return self.batch * self.out_channels * self.groups * math.prod(sizes)

    def tensors(self, dtype, device, layout="contiguous", requires_grad=False):
        x = make_tensor((self.batch, self.in_channels * self.groups, *self.spatial), dtype, device, layout,
                        requires_grad=requires_grad)
        w = make_tensor((self.in_channels * self.groups, self.out_channels, *self.kernel), dtype, device,
                        requires_grad=requires_grad)
        b = (make_tensor((self.out_channels * self.groups,), dtype, device, requires_grad=requires_grad)
             if self.bias else None)
        return x, w, b


def random_case(rng: random.Random, dims: int, max_channels: int, max_spatial: int) -> Case:
    """A random point of the parameter space with a positive output size."""
    kernel = tuple(rng.randint(1, 7 if dims == 2 else 4) for _ in range(dims))
    stride = tuple(rng.choice([1, 1, 2, 3]) for _ in range(dims))
    dilation = tuple(rng.choice([1, 1, 2, 3]) for _ in range(dims))
    spatial = tuple(rng.randint(1, max_spatial) for _ in range(dims))
    output_padding = tuple(rng.randint(0, max(s, d) - 1) for s, d in zip(stride, dilation))
    padding = []
    for i, s, k, d, op in zip(spatial, stride, kernel, dilation, output_padding):
        largest = ((i - 1) * s + d * (k - 1) + op) // 2  # keeps the output size positive
        padding.append(min(rng.randint(0, 3), largest))
    return Case(batch=rng.choice([0, 1, 1, 3]), in_channels=rng.randint(1, max_channels),
                out_channels=rng.randint(1, max_channels), spatial=spatial, kernel=kernel, stride=stride,
                padding=tuple(padding), output_padding=output_padding, dilation=dilation,
                groups=rng.choice([1, 1, 2, 3]), bias=rng.random() < 0.7)


# Named cases for the paths a random grid may miss: the seeds' structure at small size, wide channel blocks and
# several input-channel chunks, phases no tap reaches (stride > kernel), output_padding under a large dilation,
# odd channel counts per group (the last bf16/fp16 channel pair), and halos too wide for one shared-memory brick.
NAMED = {
    "seed3d_small": Case(2, 48, 24, (5, 7, 9), (3, 3, 3), (1,) * 3, (0,) * 3, (0,) * 3, (1,) * 3, bias=False),
    "seed2d_small": Case(2, 64, 64, (13, 37), (3, 7), (1, 1), (0, 0), (0, 0), (1, 1), bias=False),
    "wide_channels": Case(1, 40, 70, (6, 9), (3, 3), (2, 1), (1, 0), (1, 0), (1, 1)),
    "phases_without_taps": Case(2, 3, 5, (4, 5), (2, 1), (3, 4), (0, 1), (2, 3), (1, 1)),
    "output_padding_by_dilation": Case(1, 4, 6, (5, 6, 4), (3, 2, 2), (1, 2, 1), (1, 0, 2), (2, 1, 1), (3, 2, 2)),
    "odd_group_channels": Case(2, 3, 3, (7, 6), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), groups=3),
    "huge_halo_3d": Case(1, 5, 7, (4, 5, 6), (7, 7, 7), (1,) * 3, (2,) * 3, (0,) * 3, (3,) * 3),
    "large_kernel_2d": Case(2, 9, 17, (21, 19), (7, 7), (1, 1), (3, 3), (0, 0), (1, 1)),
    "stride_and_dilation_coprime": Case(1, 6, 10, (6, 7, 5), (3, 4, 2), (2, 3, 2), (1, 2, 0), (1, 2, 0), (3, 2, 1)),
    "many_tiles": Case(3, 4, 12, (40, 70), (2, 3), (2, 1), (0, 1), (1, 0), (1, 1)),
}


def sampled_grid(device: str):
    """A deterministic sample of (case, dtype, layout): the CPU part stays small, the CUDA part goes wider."""
    rng = random.Random(1234)
    count, channels, spatial = (120, 4, 6) if device == "cpu" else (250, 20, 12)
    dtypes = DTYPES + [torch.float64]
    grid = [(random_case(rng, rng.choice([2, 3]), channels, spatial), rng.choice(dtypes), rng.choice(LAYOUTS))
            for _ in range(count)]
    for case in NAMED.values():
        grid += [(case, dtype, rng.choice(LAYOUTS)) for dtype in dtypes]
    return grid


def tf32_accumulation_tolerance(case: Case, tf32: bool) -> dict:
    """TF32 tensor cores (ours and cuDNN's alike) add in fp32 with truncation, so their error grows with the
    reduction length K = C_in/groups x taps; strict fp32 (on CUDA 3xTF32 with each k-step's sums added in fp32,
    or FFMA; round-to-nearest either way) keeps the default tolerance."""
    if not tf32:
        return {}
    k = case.in_channels * torch.Size(case.kernel).numel()
    tol = 5e-5 * max(1.0, k / 128)
    return dict(atol=tol, rtol=tol)


def check_against_aten(case: Case, dtype, device, layout, tf32: bool | None = None, **overrides):
    ours, aten, _ = OPS[case.dims]
    x, w, b = case.tensors(dtype, device, layout)
    poison_allocator(device, case.output_numel() * x.element_size())
    with allow_tf32(torch.backends.cudnn.allow_tf32 if tf32 is None else tf32):
        y = ours(x, w, b, **case.params())
        rounded = tf32_active(x)
    bias64 = None if b is None else b.detach().cpu().double()
    expected = reference(lambda x, w: aten(x, w, bias64, **case.params()), x, w, tf32_inputs=rounded)
    assert y.shape == expected.shape and y.dtype == dtype and y.device == x.device
    assert_close(y, expected, dtype, **(overrides or tf32_accumulation_tolerance(case, rounded)))
    assert_output_layout(y, x)


@pytest.mark.parametrize("device", DEVICES)
def test_matches_aten_on_sampled_grid(device):
    for case, dtype, layout in sampled_grid(device):
        if dtype == torch.float32 and device == "cuda":
            for tf32 in (True, False):
                check_against_aten(case, dtype, device, layout, tf32)
        else:
            check_against_aten(case, dtype, device, layout)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(NAMED))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_named_cases_fp32(device, name, layout):
    check_against_aten(NAMED[name], torch.float32, device, layout)


# NaN/Inf weight taps (issue #8). The reference multiplies a tap only by real input elements, so a non-finite tap
# must not meet the zeros around the input that an implicit GEMM's zero-filled bricks multiply it by. In this
# geometry some taps meet only those zeros (W: input 2, kernel 3, padding 2, dilation 2 -> taps 0 and 2 reach no
# input), some only real elements, some both (H: stride 2, padding 1, output_padding 1 -> tap 0). The x = 0 and
# x = +Inf elements make x * Inf NaN and +-Inf * +-Inf = +-Inf reach the output.
NONFINITE_CASE = Case(2, 2, 2, (3, 2), (3, 3), (2, 1), (1, 2), (1, 0), (1, 2))
NONFINITE_TAPS = {  # (input channel, output channel, kh, kw): value
    (0, 0, 1, 0): float("inf"), (1, 0, 0, 2): float("-inf"), (0, 1, 2, 2): float("nan"),  # zeros only
    (0, 1, 1, 1): float("-inf"), (1, 0, 2, 1): float("inf"),  # real elements only
    (1, 1, 0, 1): float("nan"), (0, 0, 0, 1): float("inf"),  # both
}
NONFINITE_INPUTS = {(0, 0, 1, 1): 0.0, (1, 0, 0, 0): float("inf")}


def tap_meets(case: Case, tap: tuple) -> set:
    """{"zeros", "real"}: what the taps' terms multiply in a phase-decomposed implicit GEMM, whose output phases
    read input index (o + padding - k * dilation) / stride whether or not it lies inside the input."""
    per_dim = []
    for d, k in enumerate(tap):
        out = ((case.spatial[d] - 1) * case.stride[d] - 2 * case.padding[d] + case.dilation[d] * (case.kernel[d] - 1)
               + case.output_padding[d] + 1)
        reads = [(o + case.padding[d] - k * case.dilation[d]) // case.stride[d] for o in range(out)
                 if (o + case.padding[d] - k * case.dilation[d]) % case.stride[d] == 0]
        per_dim.append({"real" if 0 <= i < case.spatial[d] else "zeros" for i in reads})
    meets = set()
    if all("real" in m for m in per_dim):
        meets.add("real")
    if all(m for m in per_dim) and any("zeros" in m for m in per_dim):
        meets.add("zeros")
    return meets


def test_nonfinite_case_reaches_every_kind_of_tap():
    kinds = {frozenset(tap_meets(NONFINITE_CASE, index[2:])) for index in NONFINITE_TAPS}
    assert kinds == {frozenset({"zeros"}), frozenset({"real"}), frozenset({"zeros", "real"})}


NONFINITE_MODES = [(torch.float32, True), (torch.float32, False), (torch.bfloat16, None), (torch.float16, None),
                   (torch.float64, None)]


# The same for stride 1 (the CUDA shift kernel, csrc/cuda/conv_transpose_shift_gemm.cuh, whose zero-filled bricks
# meet every tap at the output's edges): tap (kh 0, kw 0) of channel 0 -> 0 reaches real elements at outputs (0..2,
# 0..3) and the zeros elsewhere; outputs reached by +Inf and -Inf taps alike are NaN, by one of them +-Inf.
NONFINITE_STRIDE_ONE = (Case(2, 2, 2, (3, 4), (2, 3), (1, 1), (0, 0), (0, 0), (1, 1)),
                        {(0, 0, 0, 0): float("inf"), (1, 0, 1, 2): float("-inf"), (0, 1, 1, 1): float("nan")},
                        {(0, 0, 1, 1): 0.0, (1, 1, 0, 0): float("inf")})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype,tf32", NONFINITE_MODES, ids=["tf32", "fp32", "bf16", "fp16", "fp64"])
@pytest.mark.parametrize("geometry", ["phases", "stride_one"])
def test_nonfinite_weights_propagate_as_in_aten(device, dims, layout, dtype, tf32, geometry):
    """NaN, +Inf and -Inf exactly where float64 ATen has them, and the finite values within tolerance."""
    if device == "cpu" and tf32:
        pytest.skip("TF32 is a CUDA mode")
    from test_fuzz import compare  # not at the top: test_fuzz imports this module through fuzz_configs
    case, taps, inputs = ((NONFINITE_CASE, NONFINITE_TAPS, NONFINITE_INPUTS) if geometry == "phases"
                          else NONFINITE_STRIDE_ONE)
    if dims == 3:  # a leading depth of 2 through kernel 2, stride 2 (every depth tap meets real elements only) or 1
        depth_stride = 2 if geometry == "phases" else 1
        case = Case(case.batch, case.in_channels, case.out_channels, (2, *case.spatial), (2, *case.kernel),
                    (depth_stride, *case.stride), (0, *case.padding), (0, *case.output_padding), (1, *case.dilation))
        taps = {(ci, co, 1, *k): v for (ci, co, *k), v in taps.items()}
        inputs = {(n, c, 0, *i): v for (n, c, *i), v in inputs.items()}
    ours, aten, _ = OPS[dims]
    torch.manual_seed(0)
    x, w, b = case.tensors(dtype, device, layout)
    w = make_tensor(w.shape, dtype, device, layout)  # the weight in the same layout: its strides reach the kernel
    with torch.no_grad():
        for index, value in taps.items():
            w[index] = value
        for index, value in inputs.items():
            x[index] = value
    with allow_tf32(bool(tf32)):
        y = ours(x, w, b, **case.params())
        rounded = tf32_active(x)
    bias64 = b.detach().cpu().double()
    expected = reference(lambda x, w: aten(x, w, bias64, **case.params()), x, w, tf32_inputs=rounded)
    for name, mask in (("NaN", torch.isnan), ("+Inf", torch.isposinf), ("-Inf", torch.isneginf),
                       ("finite", torch.isfinite)):
        assert mask(expected).any(), f"the case must reach {name} outputs"
    compare(y, expected, dtype, tf32_accumulation_tolerance(case, rounded), None)
    assert_output_layout(y, x)


# Stride 1, dilation 1, one group: on CUDA (compute capability 9.0) the wgmma shift kernel serves these in TF32,
# bf16 and fp16 where the input's rows load as vectors (csrc/cuda/conv_transpose_shift_gemm.cuh). Its edges: both
# channel tiles (24 and 64) and C_out past one tile (70: two blocks of 64), C_in that ends in a part k-step (19, 5)
# and several k-steps (48, 64), bricks that start 0-3 columns before the tile's first input column (the kernel width
# and padding set it), paddings past kernel - 1 (the brick then starts inside the input), output rows wider than one
# tile (306: tiles of balanced widths), the seeds' 3x3x3 and 3x7 kernels and a 5x1 kernel. Odd widths and a 1 x 1
# input (rows that do not load as vectors) take the mma.sync kernel.
STRIDE_ONE = {"seed3d_shape": Case(2, 48, 24, (5, 7, 12), (3, 3, 3), (1,) * 3, (0,) * 3, (0,) * 3, (1,) * 3),
              "seed2d_wide": Case(1, 64, 64, (6, 300), (3, 7), (1, 1), (0, 0), (0, 0), (1, 1), bias=False),
              "two_channel_blocks": Case(2, 19, 70, (9, 12), (3, 2), (1, 1), (1, 0), (0, 0), (1, 1)),
              "padding_past_kernel": Case(1, 5, 3, (7, 8), (2, 3), (1, 1), (2, 3), (0, 0), (1, 1)),
              "tall_kernel": Case(1, 8, 24, (20, 4), (5, 1), (1, 1), (0, 0), (0, 0), (1, 1)),
              "odd_width_3d": Case(1, 9, 17, (3, 5, 13), (2, 3, 4), (1,) * 3, (1, 0, 1), (0,) * 3, (1,) * 3),
              "one_input_pixel": Case(3, 20, 8, (1, 1), (2, 1), (1, 1), (0, 0), (0, 0), (1, 1))}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(STRIDE_ONE))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64])
def test_stride_one_matches_aten(device, name, layout, dtype):
    if dtype == torch.float32 and device == "cuda":
        for tf32 in (True, False):
            check_against_aten(STRIDE_ONE[name], dtype, device, layout, tf32)
    else:
        check_against_aten(STRIDE_ONE[name], dtype, device, layout)


def takes_shift_kernel(case: Case, x: torch.Tensor, tf32: bool) -> bool:
    """Whether CUDA runs the wgmma shift kernel (shift_gemm::applies): stride 1, dilation 1, one group, compute
    capability 9.0, and rows that load as 4-column vectors (shift_gemm::vectors_fit: contiguous rows, the other
    strides multiples of 4, the data aligned to the vector). TF32 and 16-bit load x itself; strict fp32 (3xTF32)
    loads x's split copy, dense in x's suggested memory format. (No case here has a 1 x 1 .. kernel, which the GEMM
    path takes.)"""
    eligible = (all(s == 1 for s in case.stride) and all(d == 1 for d in case.dilation) and case.groups == 1
                and torch.cuda.get_device_capability() == (9, 0)
                and x.dtype in (torch.float32, torch.bfloat16, torch.float16))  # fp64 runs FFMA
    if x.dtype == torch.float32 and not tf32:
        fmt = torch._prims_common.suggest_memory_format(x)
        x = torch.empty((x.shape[0], 3 * x.shape[1], *x.shape[2:]), device=x.device).contiguous(memory_format=fmt)
    sizes, strides = x.shape, x.stride()
    rows = strides[-1] == 1 or sizes[-1] == 1
    aligned = (x.data_ptr() % (4 * x.element_size()) == 0
               and all(st % 4 == 0 for sz, st in zip(sizes[:-1], strides[:-1]) if sz > 1))
    return eligible and rows and aligned


# The shift kernel and, for channel tiles of 64, its warp-specialized form (conv_transpose_shift_gemm_ws.cuh).
SHIFT_KERNELS = ("conv_transpose_shift_gemm_kernel<", "conv_transpose_shift_gemm_ws_kernel<")


def shift_kernels_run(kernels: set[str]) -> list[str]:
    return [k for k in kernels if any(name in k for name in SHIFT_KERNELS)]


def ran_shift_kernel(kernels: set[str]) -> bool:
    return bool(shift_kernels_run(kernels))


def ran_warp_specialized(kernels: set[str]) -> bool:
    return any(SHIFT_KERNELS[1] in k for k in kernels)


def check_input_view(case: Case, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> list[bool]:
    """The op on the view x in each precision mode of its device (TF32 on and off for CUDA fp32): against float64
    ATen, and on CUDA the shift kernel exactly where takes_shift_kernel says. Returns whether it ran, per mode."""
    ours, aten, _ = OPS[case.dims]
    cuda = x.device.type == "cuda"
    ran_shift = []
    for tf32 in ((True, False) if x.dtype == torch.float32 and cuda else (None,)):
        with allow_tf32(torch.backends.cudnn.allow_tf32 if tf32 is None else tf32):
            poison_allocator(x.device.type, case.output_numel() * x.element_size())
            ran = cuda_kernels_run(lambda: ours(x, w, b, **case.params())) if cuda else set()
            y = ours(x, w, b, **case.params())
            rounded = tf32_active(x)
        expected = reference(lambda x, w: aten(x, w, b.detach().cpu().double(), **case.params()), x, w,
                             tf32_inputs=rounded)
        assert_close(y, expected, x.dtype, **tf32_accumulation_tolerance(case, rounded))
        if cuda:
            assert ran_shift_kernel(ran) == takes_shift_kernel(case, x, bool(tf32)), ran
            ran_shift.append(ran_shift_kernel(ran))
    return ran_shift


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(STRIDE_ONE))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype,tf32", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, False),
                                        (torch.float16, False)], ids=["tf32", "fp32", "bf16", "fp16"])
def test_cuda_stride_one_runs_the_shift_kernel(name, layout, dtype, tf32):
    """The forced convops path runs the shift kernel exactly where it applies (results: the test above)."""
    case = STRIDE_ONE[name]
    x, w, b = case.tensors(dtype, "cuda", layout)
    with allow_tf32(tf32):
        ran = cuda_kernels_run(lambda: OPS[case.dims][0](x, w, b, **case.params()))
    assert ran_shift_kernel(ran) == takes_shift_kernel(case, x, tf32), ran


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("view", ["channel_slice", "offset_by_one"])
def test_stride_one_views(device, dtype, view):
    """A channel slice of a wider input keeps rows that load as vectors (the shift kernel runs on CUDA); a view one
    element into its storage does not (misaligned vectors: the mma.sync kernel runs), except in strict fp32, which
    loads a dense split copy. Both match ATen."""
    case = Case(2, 6, 5, (5, 12), (3, 3), (1, 1), (1, 0), (0, 0), (1, 1))
    if view == "channel_slice":
        x = make_tensor((2, 10, 5, 12), dtype, device)[:, 3:9]
    else:
        x = make_tensor((2 * 6 * 5 * 12 + 1,), dtype, device)[1:].view(2, 6, 5, 12)
    _, w, b = case.tensors(dtype, device)
    shifts = check_input_view(case, x, w, b)
    if shifts:
        # Strict fp32 (the last on CUDA fp32) loads its dense split copy, so runs the shift kernel for either view.
        if dtype == torch.float32:
            assert shifts[1] == (torch.cuda.get_device_capability() == (9, 0))
            shifts = shifts[:1]
        assert shifts == [view == "channel_slice" and torch.cuda.get_device_capability() == (9, 0)]


# Shapes whose CUDA plans (shift_gemm::choose_plan) take the kernel's other tilings, with more tiles than an H200 has
# SMs (so blocks walk several tiles and store accumulators between them): every MB of both channel tiles, rows of
# several output rows (GEMM rows wrapping onto brick rows past the first) and output rows split in tiles. The plans,
# from a replica of choose_plan (the same for fp32 and 16-bit): N 24 MB 4, 3 rows, 2 tiles a row, 216 tiles; N 24
# MB 6, 14 rows, 7 tiles a row, 252 tiles; N 24 MB 2, 3 rows, 2 tiles a row, 384 tiles; N 64 MB 3, 5 rows, 3 tiles
# a row, 2 channel blocks, 216 tiles. CUDA only: the float64 references take a few GFLOP each.
SHIFT_TILINGS = {"mb4_split_rows": Case(2, 16, 24, (4, 24, 300), (3, 3, 3), (1,) * 3, (0,) * 3, (0,) * 3, (1,) * 3),
                 "mb6_split_rows": Case(2, 16, 24, (4, 40, 300), (3, 3, 3), (1,) * 3, (0,) * 3, (0,) * 3, (1,) * 3),
                 "mb2_split_rows": Case(3, 16, 24, (6, 20, 128), (3, 3, 3), (1,) * 3, (0,) * 3, (0,) * 3, (1,) * 3),
                 "n64_mb3_two_blocks": Case(2, 24, 70, (4, 12, 200), (3, 3, 3), (1,) * 3, (0,) * 3, (0,) * 3,
                                            (1,) * 3),
                 # 16-bit bricks 2 columns mod 4 wide take their units in quartets (shift_gemm::UnitPlace): 42 brick
                 # rows (the last quartet padded, as the L1-70 seed's), 27 column blocks (the last pair padded) over
                 # 264 tiles, and N = 64 in 2-D with 17 blocks a row.
                 "quartets_padded_rows": Case(3, 16, 24, (6, 20, 24), (3, 3, 3), (1,) * 3, (0,) * 3, (0,) * 3, (1,) * 3),
                 "quartets_odd_blocks": Case(3, 16, 24, (6, 20, 100), (3, 3, 3), (1,) * 3, (0,) * 3, (0,) * 3, (1,) * 3),
                 "quartets_n64": Case(2, 40, 64, (20, 60), (3, 5), (1, 1), (1, 2), (0, 0), (1, 1)),
                 # The L1-70 seed's plan at a tenth of its size: 1,144 quartet indices, the fifth unit a thread used.
                 "quartets_five_units": Case(3, 16, 24, (6, 20, 96), (3, 3, 3), (1,) * 3, (0,) * 3, (0,) * 3, (1,) * 3),
                 # Odd brick rows (13 = tile_w) over two tile rows: the epilogue's pixel pairs straddle output rows
                 # and are stored one by one (store_tile_staged without pair_stores), N = 64 and N = 24 (TF32).
                 "pairs_across_rows_n64": Case(8, 16, 40, (20, 13), (3, 1), (1, 1), (0, 0), (0, 0), (1, 1)),
                 "pairs_across_rows_n24": Case(8, 16, 24, (20, 13), (3, 1), (1, 1), (0, 0), (0, 0), (1, 1)),
                 # Channel tiles of 64 on the warp-specialized kernel (WARP_SPECIALIZED below): an odd brick width (53:
                 # pixel pairs stored one by one, across rows) with 4 stages; the m64n192 and m64n128 instructions of
                 # 3 and 2 row blocks with 3 stages, as the L1-65 seed takes them (16-bit bricks 142 and 146 columns
                 # wide: units in quartets).
                 "ws_odd_brick": Case(2, 16, 64, (20, 252), (5, 2), (1, 1), (0, 1), (0, 0), (1, 1)),
                 "quartets_ws_mb3": Case(4, 16, 64, (64, 128), (3, 7), (1, 1), (0, 0), (0, 0), (1, 1)),
                 "quartets_ws_mb2": Case(4, 16, 64, (30, 132), (3, 7), (1, 1), (0, 0), (0, 0), (1, 1)),
                 # 600 units a k-step: the producer's two halves (Params::producer_halves).
                 "ws_two_halves": Case(2, 16, 64, (4, 12, 100), (3, 3, 1), (1,) * 3, (0,) * 3, (0,) * 3, (1,) * 3)}


def ran_quartets(kernels: set[str]) -> bool:
    """Whether the shift kernel (or its warp-specialized form) ran with its units in quartets (the last template
    argument of both)."""
    return any("true>" in k for k in shift_kernels_run(kernels))


def takes_quartets(name: str, dtype: torch.dtype) -> bool:
    """The SHIFT_TILINGS cases made for quartets, in 16-bit, unless CONVOPS_SHIFT_QUARTETS=0 turns them off."""
    return (name.startswith("quartets") and dtype in (torch.bfloat16, torch.float16)
            and os.environ.get("CONVOPS_SHIFT_QUARTETS") != "0")


# The SHIFT_TILINGS cases with channel tiles of 64, and whether their stage (brick and weights of a k-step) fits three
# times, so that the warp-specialized kernel takes them (shift_gemm::ws_stages): n64_mb3_two_blocks' 94 KB stage
# fits twice (the shift kernel runs), the others 3 or 4 times (pairs_across_rows_n64's rows, 13 elements apart, do
# not load as vectors: no shift kernel at all). The cases not listed have channel tiles of 24, which it never takes.
WARP_SPECIALIZED = {"quartets_n64": True, "pairs_across_rows_n64": True, "n64_mb3_two_blocks": False,
                    "ws_odd_brick": True, "quartets_ws_mb3": True, "quartets_ws_mb2": True, "ws_two_halves": True}


def takes_warp_specialized(name: str, case: Case, x: torch.Tensor, tf32: bool) -> bool:
    """Strict fp32's 3xTF32 (rounded sums) never does: its MMA warpgroups lack the registers."""
    strict = x.dtype == torch.float32 and not tf32
    return (WARP_SPECIALIZED.get(name, False) and takes_shift_kernel(case, x, tf32) and not strict
            and os.environ.get("CONVOPS_SHIFT_WS") != "0")


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(SHIFT_TILINGS))
@pytest.mark.parametrize("dtype,tf32", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, False),
                                        (torch.float16, False)], ids=["tf32", "fp32", "bf16", "fp16"])
def test_cuda_shift_kernel_tilings_match_aten(name, dtype, tf32):
    case = SHIFT_TILINGS[name]
    x, w, b = case.tensors(dtype, "cuda")
    with allow_tf32(tf32):
        ran = cuda_kernels_run(lambda: OPS[case.dims][0](x, w, b, **case.params()))
    assert ran_shift_kernel(ran) == takes_shift_kernel(case, x, tf32), ran
    assert ran_quartets(ran) == takes_quartets(name, dtype), ran
    assert ran_warp_specialized(ran) == takes_warp_specialized(name, case, x, tf32), ran
    check_against_aten(case, dtype, "cuda", "contiguous", tf32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64])
@pytest.mark.parametrize("width", [13, 14, 15])
@pytest.mark.parametrize("kernel", [(3, 4), (3, 3)])
def test_stride_one_rows_padded_past_the_width(device, dtype, width, kernel):
    """Rows of a wider allocation (strides multiples of 4, widths that are not): the shift kernel loads the last
    columns of each row element by element, and nothing past them. (A 3 x 3 kernel on 13 columns makes 16-bit bricks
    18 columns wide: units in quartets.)"""
    case = Case(2, 10, 6, (5, width), kernel, (1, 1), (1, 1), (0, 0), (1, 1))
    x = make_tensor((2, 10, 5, 16), dtype, device)[..., :width]
    _, w, b = case.tensors(dtype, device)
    check_input_view(case, x, w, b)


# Kernels equal to their strides, no padding, dilation 1, one group (UNet's 2x2 stride-2 upsampling): every input
# pixel owns its output patch, a structure a kernel can exploit (a GEMM and a pixel shuffle), so these cases check it
# in every layout and dtype. For the CUDA shuffle (csrc/cuda/tap_shuffle.cuh): widths odd (single elements) and
# multiples of 16 (vector loads), 2112 (more vectors than a row's 256 threads); last kernel extents 1, 2 (compiled
# in), 3, 5 and 8 (interleaved at run time, 2-D and 3-D) and 9 (past the shuffle: the implicit-GEMM kernel). The
# "few_pixels" cases have fewer pixels an image than C_out taps, where TF32 takes pixel-major products and the
# transposing shuffle: tiles of 32 pixels (one part-filled, or two across rows) and of 64 / taps channels (the last
# one part-filled), last kernel extents 1, 2 and 3 (the tile's row pitch follows k_w), 2-D and 3-D, with and without
# a bias, and 40 input channels (the TF32 weight's transposing rounding over more than one 32-wide tile). The "k2"
# and "3x2" cases (and "wide", "long_rows") are what TF32 runs as one fused kernel (k_h x 2, W even, H W a multiple
# of 4): a C_in that ends in a part stage (40 = 32 + 8), three stages (72) and five (136: around the three-stage
# shared ring), output row families past whole tiles (140 of 192; 90 with a channel's k_h = 3 rows split across two
# 128-row tiles), pixel tiles of 128 past a row and part-filled, k_h = 3, no bias; "k2_past_in_bound" has more
# input channels than the fused kernel takes.
KERNEL_IS_STRIDE = {"2d": Case(3, 5, 7, (9, 13), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1)),
                    "2d_3x1_no_bias": Case(2, 6, 3, (5, 4), (3, 1), (3, 1), (0, 0), (0, 0), (1, 1), bias=False),
                    "2d_wide": Case(2, 6, 5, (3, 16), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1)),
                    "2d_1x3_wide": Case(2, 3, 4, (2, 32), (1, 3), (1, 3), (0, 0), (0, 0), (1, 1)),
                    "2d_1x3_odd": Case(2, 3, 4, (3, 5), (1, 3), (1, 3), (0, 0), (0, 0), (1, 1)),
                    "2d_1x8_wide": Case(1, 2, 3, (2, 16), (1, 8), (1, 8), (0, 0), (0, 0), (1, 1)),
                    "2d_long_rows": Case(1, 2, 3, (2, 2112), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1)),
                    "2d_1x9": Case(2, 3, 4, (3, 5), (1, 9), (1, 9), (0, 0), (0, 0), (1, 1)),
                    "3d": Case(2, 4, 5, (3, 5, 4), (2, 1, 2), (2, 1, 2), (0,) * 3, (0,) * 3, (1,) * 3),
                    "3d_1x2x5_odd": Case(2, 3, 2, (2, 3, 13), (1, 2, 5), (1, 2, 5), (0,) * 3, (0,) * 3, (1,) * 3),
                    "3d_wide": Case(2, 3, 4, (2, 3, 16), (2, 2, 2), (2, 2, 2), (0,) * 3, (0,) * 3, (1,) * 3),
                    "2d_few_pixels": Case(2, 8, 24, (3, 5), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1)),
                    "2d_few_pixels_rows": Case(1, 4, 40, (5, 9), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1)),
                    "2d_few_pixels_1x3": Case(2, 4, 11, (2, 7), (1, 3), (1, 3), (0, 0), (0, 0), (1, 1)),
                    "3d_few_pixels": Case(2, 4, 9, (2, 3, 3), (2, 2, 2), (2, 2, 2), (0,) * 3, (0,) * 3, (1,) * 3),
                    "2d_few_pixels_3x1_no_bias": Case(2, 4, 12, (2, 5), (3, 1), (3, 1), (0, 0), (0, 0), (1, 1),
                                                      bias=False),
                    "2d_few_pixels_40_in": Case(1, 40, 24, (3, 5), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1)),
                    "2d_k2_tiles": Case(2, 40, 70, (6, 10), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1)),
                    "2d_k2_pixel_tiles": Case(1, 16, 8, (10, 26), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1)),
                    "2d_3x2_no_bias": Case(1, 8, 5, (4, 6), (3, 2), (3, 2), (0, 0), (0, 0), (1, 1), bias=False),
                    "2d_3x2_deep": Case(2, 72, 30, (4, 8), (3, 2), (3, 2), (0, 0), (0, 0), (1, 1)),
                    "2d_k2_ring": Case(1, 136, 12, (4, 6), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1)),
                    "2d_k2_past_in_bound": Case(1, 264, 6, (2, 4), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1))}
# The widest last kernel extent the CUDA GEMM path takes (tap_shuffle::kMaxLastTaps in csrc/cuda/tap_shuffle.cuh),
# and the most taps its pixel-major shuffle takes (tap_shuffle::kMaxPixelMajorTaps).
MAX_GEMM_LAST_TAPS = 8
MAX_PIXEL_MAJOR_TAPS = 64
# The most input channels the fused k_h x 2 TF32 kernel takes (k2_gemm::kMaxInChannels).
K2_MAX_IN_CHANNELS = 256


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(KERNEL_IS_STRIDE))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64])
def test_kernel_equal_to_stride_matches_aten(device, name, layout, dtype):
    check_against_aten(KERNEL_IS_STRIDE[name], dtype, device, layout)


def uses_gemm(kernels: set[str]) -> bool:
    """Whether the profiled kernels are the GEMM path's (a cuBLAS GEMM and the tap shuffle, or the fused k_h x 2
    TF32 kernel; no implicit-GEMM kernel)."""
    implicit_gemm = any("convops::cuda::conv_transpose_kernel<" in k for k in kernels)
    cublas = any("gemm" in k.lower() or "nvjet" in k for k in kernels)
    shuffle = any("tap_shuffle_kernel<" in k for k in kernels)
    return (uses_k2_kernel(kernels) or (cublas and shuffle)) and not implicit_gemm


def uses_k2_kernel(kernels: set[str]) -> bool:
    return any("conv_transpose_k2_gemm_kernel<" in k for k in kernels)


def takes_k2_kernel(case: Case, tf32: bool) -> bool:
    """Where the GEMM path runs, whether it is the fused k_h x 2 TF32 kernel (conv_transpose_k2_gemm_applies in
    csrc/cuda/conv_transpose_k2_gemm.cuh): 2-D, TF32, a last kernel extent of 2, C_in up to K2_MAX_IN_CHANNELS,
    W even, H W a multiple of 4."""
    return (tf32 and case.dims == 2 and case.kernel[-1] == 2 and case.in_channels <= K2_MAX_IN_CHANNELS
            and case.spatial[-1] % 2 == 0 and math.prod(case.spatial) % 4 == 0)


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(KERNEL_IS_STRIDE))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype,tf32", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, False),
                                        (torch.float16, False), (torch.float64, False)],
                         ids=["tf32", "fp32", "bf16", "fp16", "fp64"])
def test_cuda_kernel_equal_to_stride_runs_as_a_gemm(name, layout, dtype, tf32):
    """On CUDA the convops path (tests/conftest.py forces it) runs these as one cuBLAS GEMM and a pixel shuffle
    (csrc/cuda/conv_transpose_gemm.cuh) where the input is dense NCHW / NCDHW and the last kernel extent fits the
    shuffle, in every precision mode, and the implicit-GEMM kernel otherwise; both match float64 ATen (with TF32,
    of operands rounded to nearest, as cuDNN rounds them)."""
    case = KERNEL_IS_STRIDE[name]
    x, w, b = case.tensors(dtype, "cuda", layout)
    with allow_tf32(tf32):
        ran = cuda_kernels_run(lambda: OPS[case.dims][0](x, w, b, **case.params()))
        check_against_aten(case, dtype, "cuda", layout, tf32)
    fits = case.kernel[-1] <= MAX_GEMM_LAST_TAPS
    assert uses_gemm(ran) == (layout == "contiguous" and fits), ran
    # TF32 runs k_h x 2 kernels on even widths as one fused kernel (conv_transpose_k2_gemm.cuh), and otherwise takes
    # pixel-major products where an image has fewer pixels than C_out taps (conv_transpose_gemm.cuh).
    fused = takes_k2_kernel(case, tf32)
    assert uses_k2_kernel(ran) == (uses_gemm(ran) and fused), ran
    taps = math.prod(case.kernel)
    few_pixels = math.prod(case.spatial) < case.out_channels * taps and taps <= MAX_PIXEL_MAJOR_TAPS
    pixel_major = any("pixel_major_tap_shuffle_kernel<" in k for k in ran)
    assert pixel_major == (uses_gemm(ran) and tf32 and few_pixels and not fused), ran


@pytest.mark.cuda
def test_cuda_gemm_takes_the_convolution_precision_not_the_matmul_flags():
    """The GEMM path computes in the convolution's precision: strict fp32 when cuDNN may not use TF32, even where
    matmuls may (torch.set_float32_matmul_precision("high")), which a TF32 matmul of the same operands misses."""
    case = Case(2, 64, 8, (8, 16), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1))  # K = 256 products a sum
    x, w, b = case.tensors(torch.float32, "cuda")
    was = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        with allow_tf32(False):
            ran = cuda_kernels_run(lambda: OPS[2][0](x, w, b, **case.params()))
            y = OPS[2][0](x, w, b, **case.params())
            # The control: a TF32 matmul of the same 1x1 convolution, against its float64 value.
            w_rows = w.detach().permute(1, 2, 3, 0).reshape(-1, case.in_channels)
            x_cols = x.detach().reshape(case.batch, case.in_channels, -1)
            tf32_products = torch.matmul(w_rows, x_cols)
    finally:
        torch.set_float32_matmul_precision(was)
    assert uses_gemm(ran), ran
    expected = reference(lambda x, w: F.conv_transpose2d(x, w, b.detach().cpu().double(), **case.params()), x, w,
                         tf32_inputs=False)
    assert_close(y, expected, torch.float32)
    exact_products = torch.matmul(w_rows.cpu().double(), x_cols.cpu().double())
    with pytest.raises(AssertionError):
        assert_close(tf32_products, exact_products, torch.float32)


@pytest.mark.cuda
def test_cuda_deterministic_algorithms_keep_the_op_running(monkeypatch):
    """Under torch.use_deterministic_algorithms without CUBLAS_WORKSPACE_CONFIG, ATen's cuBLAS calls raise while
    eager's convolution runs: the op must run too (the kernel == stride GEMM steps aside for the implicit kernel),
    and so must the separable op's mixed path, whose 1x1 is otherwise a cuBLAS GEMM."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    case = KERNEL_IS_STRIDE["2d"]
    x, w, b = case.tensors(torch.bfloat16, "cuda")
    dw, pw = make_tensor((5, 1, 3, 3), torch.bfloat16, "cuda"), make_tensor((7, 5, 1, 1), torch.bfloat16, "cuda")
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        ran = cuda_kernels_run(lambda: OPS[2][0](x, w, b, **case.params()))
        y = OPS[2][0](x, w, b, **case.params())
        mixed = convops.depthwise_separable_conv2d(x, dw, None, pw, None, 2, 1)  # stride 2: the mixed path
    finally:
        torch.use_deterministic_algorithms(was)
    assert not uses_gemm(ran), ran
    torch.testing.assert_close(y, F.conv_transpose2d(x, w, b, **case.params()), atol=3e-2, rtol=3e-2)
    expected = F.conv2d(F.conv2d(x, dw, None, 2, 1, groups=5), pw)
    torch.testing.assert_close(mixed, expected, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_equal_to_stride_keeps_nonfinite_values_where_aten_has_them(device, dtype):
    """An Inf or NaN weight tap reaches the outputs of its own output pixels only, as in float64 ATen, and a zero
    input meeting an Inf tap gives NaN there."""
    case = KERNEL_IS_STRIDE["2d"]
    x, w, b = case.tensors(dtype, device)
    with torch.no_grad():
        w[1, 2, 0, 1], w[3, 4, 1, 1], w[0, 0, 1, 0] = float("inf"), float("-inf"), float("nan")
        x[0, 1, 2, 3], x[1, 3, 0, 0], x[2, 2, 4, 5] = 0.0, 0.0, float("inf")
    with allow_tf32(False):
        y = OPS[2][0](x, w, b, **case.params())
    expected = reference(lambda x, w: F.conv_transpose2d(x, w, b.detach().cpu().double(), **case.params()), x, w,
                         tf32_inputs=False)
    for mask in (torch.isnan, torch.isposinf, torch.isneginf):
        assert mask(expected).any() and torch.equal(mask(y.cpu()), mask(expected)), mask
    finite = torch.isfinite(expected)
    assert_close(y.cpu()[finite], expected[finite], dtype)


@pytest.mark.cuda
def test_cuda_k2_kernel_keeps_nonfinite_values_where_aten_has_them():
    """The fused k_h x 2 TF32 kernel: an Inf or NaN tap reaches its own output pixels only, and a zero input meeting
    an Inf tap gives NaN there, as in float64 ATen (of TF32-rounded operands)."""
    case = Case(3, 5, 7, (8, 12), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1))
    x, w, b = case.tensors(torch.float32, "cuda")
    with torch.no_grad():
        w[1, 2, 0, 1], w[3, 4, 1, 1], w[0, 0, 1, 0] = float("inf"), float("-inf"), float("nan")
        x[0, 1, 2, 3], x[1, 3, 0, 0], x[2, 2, 4, 5] = 0.0, 0.0, float("inf")
    with allow_tf32(True):
        ran = cuda_kernels_run(lambda: OPS[2][0](x, w, b, **case.params()))
        y = OPS[2][0](x, w, b, **case.params()).cpu()
    assert uses_k2_kernel(ran), ran
    expected = reference(lambda x, w: F.conv_transpose2d(x, w, b.detach().cpu().double(), **case.params()), x, w,
                         tf32_inputs=True)
    for mask in (torch.isnan, torch.isposinf, torch.isneginf):
        assert mask(expected).any() and torch.equal(mask(y), mask(expected)), mask
    finite = torch.isfinite(expected)
    assert_close(y[finite], expected[finite], torch.float32, **tf32_accumulation_tolerance(case, True))


# Strict fp32 on CUDA is 3xTF32 on the tensor cores (conv_transpose_tf32x3.cuh): the input and the weight split
# into copies with three channel blocks each, the input a chunk of images at a time. Its accuracy in every layout,
# group count and parameter is the sampled grid's and the named cases' (above) at fp32's tolerance.
TF32X3_SPLIT_KERNEL = "tf32x3::split_kernel<"


@pytest.mark.cuda
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_strict_fp32_is_tf32x3_at_fp32_tolerance(layout):
    """At the L1-65 seed's reduction length (64 channels x 21 taps), the longest the seeds have, strict fp32 runs
    the split and a TF32 kernel and stays within fp32's tolerance of float64; with TF32 allowed nothing is split."""
    case = NAMED["seed2d_small"]
    x, w, b = case.tensors(torch.float32, "cuda", layout)
    for tf32 in (False, True):
        with allow_tf32(tf32):
            ran = cuda_kernels_run(lambda: OPS[2][0](x, w, b, **case.params()))
        assert any(TF32X3_SPLIT_KERNEL in k for k in ran) == (not tf32), ran
        assert any("Tf32RoundedSumsMma" in k for k in ran) == (not tf32), ran
        assert not any("Fma<float>" in k for k in ran), ran
    poison_allocator("cuda", case.output_numel() * 4)
    with allow_tf32(False):
        y = OPS[2][0](x, w, b, **case.params())
    expected = reference(lambda x, w, b: F.conv_transpose2d(x, w, b, **case.params()), x, w, b)
    assert_close(y, expected, torch.float32)


@pytest.mark.cuda
def test_cuda_tf32x3_split_keeps_values_near_the_float_max():
    """An input whose TF32 rounding would overflow (|x| just under FLT_MAX) splits toward zero instead: the result
    is finite and as accurate as elsewhere, not Inf or NaN."""
    case = Case(2, 3, 4, (5, 6), (2, 3), (1, 1), (0, 1), (0, 0), (1, 1), bias=False)
    x, w, _ = case.tensors(torch.float32, "cuda")
    with torch.no_grad():
        x.copy_(torch.finfo(torch.float32).max * (1 - x.abs() * 1e-4) * x.sign())  # mantissas that round up
        w.mul_(1e-3)
    with allow_tf32(False):
        y = OPS[2][0](x, w, None, **case.params())
    expected = reference(lambda x, w: F.conv_transpose2d(x, w, None, **case.params()), x, w)
    assert torch.isfinite(expected).all() and torch.isfinite(y).all()
    # fp32's rtol; an atol at the outputs' scale (about 1e35), where 5e-5 would leave rtol alone for cancelled sums.
    assert_close(y, expected, torch.float32, atol=5e-6 * expected.abs().max().item())


_RUN_STRICT_FP32 = """
import sys, torch, convops
convops.set_path_policy("convops")
torch.backends.cudnn.allow_tf32 = False
x, w, b, params, output_numel = torch.load(sys.argv[1])
poison = torch.full((output_numel,), float("nan"), device="cuda")  # the output's memory, poisoned
del poison
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    y = convops.conv_transpose3d(x, w, b, **params)
    torch.cuda.synchronize()
splits = sum(e.count for e in prof.key_averages() if "tf32x3::split_kernel<" in e.key)
torch.save((y.cpu(), splits), sys.argv[2])
"""


@pytest.mark.cuda
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_tf32x3_in_chunks_of_images(tmp_path, layout):
    """With the split copy's budget at 1 MB (CONVOPS_TF32X3_SCRATCH_MB, read once a process), 5 images of 3 x 208
    KB copies go as chunks of one (5 chunks): every chunk's output lands on its own images (poisoned beforehand)."""
    import subprocess
    import sys
    case = Case(5, 16, 8, (13, 16, 16), (3, 3, 3), (1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 1, 1))
    x, w, b = case.tensors(torch.float32, "cuda", layout)
    torch.save((x, w, b, case.params(), case.output_numel()), tmp_path / "inputs.pt")
    subprocess.run([sys.executable, "-c", _RUN_STRICT_FP32, str(tmp_path / "inputs.pt"), str(tmp_path / "out.pt")],
                   env={**os.environ, "CONVOPS_TF32X3_SCRATCH_MB": "1"}, check=True, timeout=300)
    expected = reference(lambda x, w: F.conv_transpose3d(x, w, b.detach().cpu().double(), **case.params()), x, w)
    y, splits = torch.load(tmp_path / "out.pt")
    assert splits == 1 + 5, splits  # the weight's split once, then one split a chunk of one image
    assert_close(y, expected, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dims", [2, 3])
def test_unbatched_input(device, dims):
    ours, aten, _ = OPS[dims]
    x = make_tensor((4, *(5,) * dims), torch.float32, device)
    w = make_tensor((4, 3, *(3,) * dims), torch.float32, device)
    y = ours(x, w, None, 2, 1, 1, 2, 1)
    expected = reference(lambda x, w: aten(x, w, None, 2, 1, 1, 2, 1), x, w, tf32_inputs=tf32_active(x))
    assert y.is_contiguous()
    assert_close(y, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_scalar_parameters_broadcast(device):
    x = make_tensor((2, 4, 5, 6), torch.float32, device)
    w = make_tensor((4, 3, 3, 2), torch.float32, device)
    y = convops.conv_transpose2d(x, w, None, stride=2, padding=1, output_padding=1, groups=2, dilation=2)
    expected = reference(lambda x, w: F.conv_transpose2d(x, w, None, 2, 1, 1, 2, 2), x, w,
                         tf32_inputs=tf32_active(x))
    assert_close(y, expected)


def _bad_calls(device):
    """(op, args, kwargs) triples that ATen rejects and so must we."""
    f32 = dict(dtype=torch.float32, device=device)
    x2, w2 = torch.randn(1, 4, 5, 5, **f32), torch.randn(4, 3, 3, 3, **f32)
    x3, w3 = torch.randn(1, 4, 3, 3, 3, **f32), torch.randn(4, 3, 2, 2, 2, **f32)
    ct2, ct3 = convops.conv_transpose2d, convops.conv_transpose3d
    calls = [
        (ct2, (torch.randn(4, 5, **f32), w2), {}),                                   # input rank
        (ct2, (x2, torch.randn(4, 3, 3, **f32)), {}),                                # weight rank
        (ct3, (x2, w3), {}),                                                         # 2-D input to the 3-D op
        (ct2, (x2, w2.double()), {}),                                                # dtype mismatch
        (ct2, (x2.int(), w2.int()), {}),                                             # not floating
        (ct2, (x2, torch.randn(5, 3, 3, 3, **f32)), {}),                             # channels vs weight
        (ct2, (x2, w2), dict(groups=0)),                                             # groups
        (ct2, (x2, w2), dict(groups=3)),                                             # groups do not divide C_in
        (ct2, (x2, w2, torch.randn(4, **f32)), {}),                                  # bias shape
        (ct2, (x2, w2, torch.randn(3, 1, **f32)), {}),                               # bias rank
        (ct2, (x2, w2), dict(stride=0)),
        (ct2, (x2, w2), dict(stride=(1, -2))),
        (ct2, (x2, w2), dict(dilation=0)),
        (ct2, (x2, w2), dict(padding=-1)),
        (ct2, (x2, w2), dict(output_padding=-1)),
        (ct2, (x2, w2), dict(stride=2, output_padding=2)),                           # >= stride and dilation
        (ct3, (x3, w3), dict(output_padding=(0, 1, 0))),
        (ct2, (x2, w2), dict(stride=(1, 2, 3))),                                     # wrong length
        (ct2, (torch.randn(1, 2, 1, 1, **f32), torch.randn(2, 3, 1, 1, **f32)), dict(padding=1)),  # output <= 0
        (ct2, (x2, torch.randn(4, 3, 0, 3, **f32)), {}),                             # empty kernel
        (ct2, (torch.randn(1, 4, 0, 5, **f32), w2), {}),                             # empty spatial input
        (ct3, (x3, w3), dict(stride=(1, 1))),
    ]
    if device == "cuda":
        calls.append((ct2, (x2, w2.cpu()), {}))                                      # device mismatch
        calls.append((ct2, (x2, w2, torch.randn(3)), {}))                           # bias device
    return calls


@pytest.mark.parametrize("device", DEVICES)
def test_errors_name_the_op(device):
    for op, args, kwargs in _bad_calls(device):
        name = "conv_transpose3d" if op is convops.conv_transpose3d else "conv_transpose2d"
        with pytest.raises(RuntimeError, match=f"convops::{name}"):
            op(*args, **kwargs)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch(device):
    x = make_tensor((0, 4, 5, 6, 3), torch.float32, device)
    w = make_tensor((4, 2, 3, 3, 3), torch.float32, device)
    y = convops.conv_transpose3d(x, w, None, 2, 1, 1, 2, 1)
    assert y.shape == F.conv_transpose3d(x, w, None, 2, 1, 1, 2, 1).shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_opcheck(device, dims, requires_grad, layout):
    case = Case(2, 2, 3, (4,) * dims, (2,) * dims, (2,) * dims, (1,) * dims, (1,) * dims, (1,) * dims, groups=2)
    x, w, b = case.tensors(torch.float32, device, layout, requires_grad=requires_grad)
    p = case.params()
    opcheck(OPS[dims][2], (x, w, b, p["stride"], p["padding"], p["output_padding"], p["groups"], p["dilation"]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dims", [2, 3])
def test_gradcheck_float64(device, dims):
    case = Case(1, 1, 2, (2,) * dims, (2,) * dims, (2,) * dims, (1,) * dims, (1,) * dims, (2,) * dims, groups=2)
    x, w, b = case.tensors(torch.float64, device, requires_grad=True)
    ours = OPS[dims][0]
    assert torch.autograd.gradcheck(lambda x, w, b: ours(x, w, b, **case.params()), (x, w, b), fast_mode=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("wanted", ["all", "input", "weight", "bias"])
def test_gradients_match_aten(device, wanted):
    case = NAMED["stride_and_dilation_coprime"]
    ours, aten, _ = OPS[case.dims]
    tensors = case.tensors(torch.float32, device)
    flags = {"all": (True, True, True), "input": (True, False, False), "weight": (False, True, False),
             "bias": (False, False, True)}[wanted]
    with allow_tf32(False):
        grads = []
        for fn in (ours, aten):
            leaves = [t.detach().clone().requires_grad_(f) for t, f in zip(tensors, flags)]
            y = fn(*leaves, **case.params())
            torch.manual_seed(1)
            y.backward(torch.randn_like(y))
            grads.append([t.grad for t in leaves])
    for got, want, flag in zip(*grads, flags):
        assert (got is None) == (not flag)
        if flag:
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(NAMED))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("aten_layout", ["input", "channels_last"])
def test_cuda_aten_path_in_either_layout(monkeypatch, name, dtype, layout, aten_layout):
    """The op's ATen path in the input's layout and through channels-last (the input copied to NHWC / NDHWC, cuDNN's
    transposed convolution there, the output copied back), each forced by CONVOPS_CONV_TRANSPOSE_LAYOUT under the
    "aten" policy: both agree with the float64 reference and give an output dense in the input's layout (NCHW for a
    strided view too). fp32 strict: cuDNN's TF32 algorithms differ from the RN-rounded reference by more than the
    TF32 accumulation tolerance allows for some shapes (the bench checks TF32 against eager at 5e-3). fp16 at twice
    its tolerance: cuDNN's own NCHW kernel, eager's, missed it by up to 2x on large_kernel_2d (H200, 2026-11-28)."""
    monkeypatch.setenv("CONVOPS_CONV_TRANSPOSE_LAYOUT", aten_layout)
    overrides = dict(atol=4e-3, rtol=4e-3) if dtype == torch.float16 else {}
    with convops.forced_path("aten"):
        check_against_aten(NAMED[name], dtype, "cuda", layout, tf32=False, **overrides)


# The channels-last round trip's copies (layout_transpose.cu): channel counts and positions in whole 16-byte chunks
# (multiples of 8) but not of a tile (64 fp32, 128 16-bit elements), ragged tiles both ways and images past one, take
# the chunked transpose both ways, the copy back adding the bias; 3 channels of 63 positions leave chunks for the
# element kernel on the way there, and the output's 4 channels of 14 x 18 positions make whole chunks on the way back
# for fp32 (4 elements) and not for 16-bit (8).
ROUND_TRIP_CASES = {
    "chunks_ragged_tiles": (Case(2, 72, 40, (9, 24), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)), True, True),
    "chunks_two_channel_tiles": (Case(3, 136, 16, (17, 16), (3, 3), (1, 1), (1, 1), (0, 0), (1, 1)), True, True),
    "elements_in_chunks_out": (Case(2, 3, 4, (7, 9), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1)), False, None),
}


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(ROUND_TRIP_CASES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_round_trip_copies_in_chunks_where_they_fit(monkeypatch, name, dtype):
    """The ATen path through channels-last on shapes made for the copies' two kernels: the output (poisoned before)
    agrees with the float64 reference, and the chunked kernel ran exactly where the shapes give whole chunks."""
    case, chunks_in, chunks_out = ROUND_TRIP_CASES[name]
    if chunks_out is None:
        chunks_out = dtype == torch.float32
    monkeypatch.setenv("CONVOPS_CONV_TRANSPOSE_LAYOUT", "channels_last")
    with convops.forced_path("aten"):
        ran = cuda_kernels_run(lambda: check_against_aten(case, dtype, "cuda", "contiguous", tf32=False))
    chunked = any("batched_transpose_chunks_kernel" in k for k in ran)
    elementwise = any("batched_transpose_kernel" in k for k in ran)
    assert (chunked, elementwise) == (chunks_in or chunks_out, not (chunks_in and chunks_out)), ran


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_round_trip_adds_the_bias_as_aten_does(monkeypatch, dtype):
    """The chunked copy back adds the bias rounded once from float, as ATen's add does: the op with a bias equals,
    bit for bit, the op without one plus the bias in the same dtype (cuDNN deterministic, so that both calls'
    convolutions are the same sums)."""
    case = ROUND_TRIP_CASES["chunks_ragged_tiles"][0]
    x, w, b = case.tensors(dtype, "cuda")
    monkeypatch.setenv("CONVOPS_CONV_TRANSPOSE_LAYOUT", "channels_last")
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    with convops.forced_path("aten"):
        ran = cuda_kernels_run(lambda: OPS[2][0](x, w, b, **case.params()))
        with_bias = OPS[2][0](x, w, b, **case.params())
        without = OPS[2][0](x, w, None, **case.params())
    assert any("batched_transpose_chunks_kernel" in k for k in ran), ran
    assert torch.equal(with_bias, without + b.view(1, -1, 1, 1))


@pytest.mark.cuda
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_cuda_auto_decides_the_aten_paths_layout_as_a_problem_of_its_own(dims, layout):
    """Under "auto" the op's first call times its ATen path in the input's layout against the round trip through
    channels-last, as "<op>.aten_layout" ("convops" the round trip, "aten" the input's layout), once, beside the op's
    own decision; an input that is channels-last already has no such decision. Either way the output agrees with the
    reference, and so does the second call (the recorded decisions; not to the bit: cuDNN's transposed convolution
    is its data gradient, whose algorithms may add with atomics)."""
    case = NAMED["wide_channels"] if dims == 2 else NAMED["stride_and_dilation_coprime"]
    op_name = f"convops::conv_transpose{dims}d"
    x, w, b = case.tensors(torch.float32, "cuda", layout)
    convops.clear_path_choices()
    with allow_tf32(False), convops.forced_path("auto"):
        first = OPS[dims][0](x, w, b, **case.params())
        again = OPS[dims][0](x, w, b, **case.params())
    choices = convops.path_choices()
    own = [c for c in choices if c.problem.startswith(f"{op_name} cuda:0 ")]
    inner = [c for c in choices if c.problem.startswith(f"{op_name}.aten_layout cuda:0 ")]
    assert len(own) == 1 and len(own) + len(inner) == len(choices), choices
    assert len(inner) == (layout == "contiguous"), choices
    for c in inner:
        assert c.path in ("convops", "aten") and c.convops_ms > 0 and c.aten_ms > 0 and c.mixed_ms is None, c
    bias64 = b.detach().cpu().double()
    expected = reference(lambda x, w: OPS[dims][1](x, w, bias64, **case.params()), x, w, tf32_inputs=False)
    assert_close(first, expected, torch.float32)
    assert_close(again, expected, torch.float32)
    assert_output_layout(first, x)
    assert_output_layout(again, x)
