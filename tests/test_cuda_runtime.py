"""Every convops op under the CUDA runtime's rules: side streams, CUDA graph capture, a second device, and tensors
past 2^31 elements.

The small tests reuse the configurations' builders and float64 references of tests/fuzz_configs.py (one fixed,
valid configuration per op), in fp32 with TF32 off and in bf16:
  - side stream: inputs made on a fresh torch.cuda.Stream and the op run there while the default stream sleeps; the
    result must be complete once the side stream alone has synchronized (and the default stream still be asleep):
    the op launches on the current stream and never waits for the default one;
  - CUDA graphs: captured after a side-stream warm-up (as PyTorch's docs prescribe), then replayed on new values
    copied into the static inputs, so nothing derived from the inputs (e.g. a transformed weight) may be cached;
  - cuda:1 (two GPUs or more): outputs on the inputs' device, the current device left alone, and a device mismatch
    rejected with the op's name.
The huge tests (GPUs with >= 40 GiB) give each op a bf16 input and/or output of more than 2^31 elements, poisoned
first, and check the first image, the image holding element 2^31 and the last image against eager fp32 on those
images alone, plus the absence of NaN (unwritten elements) anywhere: 64-bit offsets wherever a tensor can pass 2^31
elements. (And the depthwise op rejects parameters whose plane coordinates would not fit the kernels' ints.)
"""
from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

import convops
from common_utils import allow_tf32, assert_output_layout, make_tensor, poison_allocator, tolerance
from fuzz_configs import OPS, aten_chain
from test_depthwise_conv2d import torch_depthwise
from test_fuzz import compare

pytestmark = pytest.mark.cuda

# One valid configuration per op (the keys of fuzz_configs' draws): several CTAs, biases and every optional tensor.
CONFIGS = {
    "depthwise_conv2d": dict(
        layout="contiguous", batch=2, channels=3, multiplier=2, bias=True, size=[20, 37], kernel=[3, 3],
        stride=[1, 1], padding=[1, 1], dilation=[1, 1]),
    "depthwise_separable_conv2d": dict(
        layout="contiguous", batch=2, channels=3, multiplier=2, bias=True, out_channels=5, pointwise_bias=True,
        size=[20, 37], kernel=[3, 3], stride=[1, 1], padding=[1, 1], dilation=[1, 1]),
    "conv_transpose2d": dict(
        layout="contiguous", batch=2, in_channels=3, out_channels=4, groups=1, bias=True, spatial=[7, 9],
        kernel=[3, 3], stride=[2, 2], padding=[1, 1], output_padding=[1, 1], dilation=[1, 1]),
    "conv_transpose3d": dict(
        layout="contiguous", batch=2, in_channels=2, out_channels=3, groups=1, bias=True, spatial=[3, 4, 5],
        kernel=[3, 3, 3], stride=[2, 2, 2], padding=[1, 1, 1], output_padding=[1, 0, 1], dilation=[1, 1, 1]),
    # Kernel == stride: the GEMM and pixel-shuffle path (csrc/cuda/conv_transpose_gemm.cuh), on ATen's cuBLAS.
    "conv_transpose2d kernel=stride": dict(
        layout="contiguous", batch=2, in_channels=3, out_channels=4, groups=1, bias=True, spatial=[7, 9],
        kernel=[2, 2], stride=[2, 2], padding=[0, 0], output_padding=[0, 0], dilation=[1, 1]),
    "conv2d_group_norm_scale_max_pool_clamp": dict(
        layout="contiguous", batch=2, in_channels=3, num_groups=2, out_channels=4, bias=True, gn_weight=True,
        gn_bias=True, eps=1e-5, scale_shape="(C,1,1)", size=[20, 40], kernel=[3, 3], stride=[1, 1],
        padding=[1, 1], dilation=[1, 1], pool_kernel=[2, 2], clamp_min=-1.0, clamp_max=1.0),
}
OP_NAMES = list(CONFIGS)
DTYPE_NAMES = ["float32", "bfloat16"]  # fp32 runs with TF32 off

# torch.cuda._sleep spins this many cycles: ~0.5 s at the H100's clock, far longer than one small op takes.
SLEEP_CYCLES = 1_000_000_000


def config(name: str, dtype_name: str) -> dict:
    return dict(CONFIGS[name], dtype=dtype_name, tf32=False if dtype_name == "float32" else None)


def op_of(name: str):
    """The fuzz op of a configuration: its name up to the first space ("conv_transpose2d kernel=stride")."""
    return OPS[name.split()[0]]


def check(op, c: dict, out: torch.Tensor, args: list) -> None:
    """out against the float64 reference of the arguments' current values, at the op's fuzz tolerances."""
    with allow_tf32(False):
        expected, tol, extra = op.expected(c, args)
    compare(out, expected, getattr(torch, c["dtype"]), tol, extra)


@pytest.mark.parametrize("dtype_name", DTYPE_NAMES)
@pytest.mark.parametrize("op_name", OP_NAMES)
def test_side_stream_while_default_stream_is_busy(op_name, dtype_name):
    op, c = op_of(op_name), config(op_name, dtype_name)
    side = torch.cuda.Stream()
    with allow_tf32(False):
        with torch.cuda.stream(side):
            args = op.build(c, "cuda")  # the host-to-device copies run on the side stream
            expected, tol, extra = op.expected(c, args)
            # A warm-up call loads the kernels and fills the caching allocator's side-stream pool, so that nothing
            # in the measured call (module loading, cudaMalloc) has a reason to wait for the default stream.
            warm = op.run(args)
            host = torch.empty_strided(warm.size(), warm.stride(), dtype=warm.dtype, pin_memory=True)
            side.synchronize()
            del warm
            poison_allocator("cuda", host.numel() * host.element_size())  # the side stream's pool, as the output's
        torch.cuda._sleep(SLEEP_CYCLES)  # the default stream
        with torch.cuda.stream(side):
            out = op.run(args)
            host.copy_(out, non_blocking=True)
    side.synchronize()
    default_still_busy = not torch.cuda.default_stream().query()
    torch.cuda.synchronize()
    assert default_still_busy, ("the default stream finished its sleep before the side stream's result was read: "
                                "the op (or a call it makes) waited for the default stream")
    assert out.device == args[0].device
    compare(host, expected, getattr(torch, dtype_name), tol, extra)
    assert_output_layout(out, args[0])


@pytest.mark.parametrize("dtype_name", DTYPE_NAMES)
@pytest.mark.parametrize("op_name", OP_NAMES)
def test_cuda_graph_replay_on_new_inputs(op_name, dtype_name):
    op, c = op_of(op_name), config(op_name, dtype_name)
    with allow_tf32(False):
        args = op.build(c, "cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                op.run(args)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = op.run(args)
        torch.cuda.synchronize()

        fresh = op.build(c, "cuda")  # same configuration, new values (the CPU generator has moved on)
        with torch.no_grad():
            for static, new in zip(op.tensors(args), op.tensors(fresh)):
                if static is not None:
                    static.copy_(new)
            static_out.fill_(math.nan)  # every element must be rewritten by the replay
        graph.replay()
        torch.cuda.synchronize()
    check(op, c, static_out, args)
    assert_output_layout(static_out, args[0])


def needs_two_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")


@pytest.mark.parametrize("dtype_name", DTYPE_NAMES)
@pytest.mark.parametrize("op_name", OP_NAMES)
def test_second_device_keeps_current_device(op_name, dtype_name):
    needs_two_gpus()
    op, c = op_of(op_name), config(op_name, dtype_name)
    with torch.cuda.device(0), allow_tf32(False):
        args = op.build(c, "cuda:1")
        out = op.run(args)
        assert torch.cuda.current_device() == 0, "the op changed the current device"
        torch.cuda.synchronize(1)
    assert out.device == torch.device("cuda", 1)
    check(op, c, out, args)


@pytest.mark.parametrize("op_name", OP_NAMES)
def test_device_mismatch_names_the_op(op_name):
    needs_two_gpus()
    op, c = op_of(op_name), config(op_name, "float32")
    args = op.build(c, "cuda:1")
    args[1] = args[1].to("cuda:0")  # the (first) weight, on the other device
    with pytest.raises(RuntimeError, match=re.escape(f"convops::{op_name.split()[0]}")):
        op.run(args)


def test_depthwise_parameters_past_int_range_raise():
    """A valid 1x1 output whose dilation (2^31) no int coordinate can hold: an error, not a wrapped stride."""
    x = make_tensor((1, 1, 1, 1), torch.float32, "cuda")
    w, b = make_tensor((1, 1, 2, 1), torch.float32, "cuda"), make_tensor((1,), torch.float32, "cuda")
    with pytest.raises(RuntimeError, match=re.escape("convops::depthwise_conv2d") + ".*32-bit"):
        convops.depthwise_conv2d(x, w, b, 1, [2**30, 0], [2**31, 1])


# ---- tensors past 2^31 elements ----

HUGE_MEMORY = 40 * 2**30
HUGE_DTYPE = torch.bfloat16
LIMIT = 2**31


@pytest.fixture
def huge_generator():
    """A generator for the big tensors; the test is skipped on GPUs under 40 GiB and the cache emptied around it."""
    if torch.cuda.get_device_properties(0).total_memory < HUGE_MEMORY:
        pytest.skip("needs a GPU with at least 40 GiB")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    yield torch.Generator(device="cuda").manual_seed(0)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def uniform(shape, generator, memory_format=torch.contiguous_format) -> torch.Tensor:
    """Made on the GPU: a CPU float64 detour (make_tensor) would need 8 bytes an element on the host."""
    t = torch.empty(shape, dtype=HUGE_DTYPE, device="cuda", memory_format=memory_format)
    return t.uniform_(-1.0, 1.0, generator=generator)


def small(*shape) -> torch.Tensor:
    return make_tensor(shape, HUGE_DTYPE, "cuda")


def check_huge(run, x: torch.Tensor, image_reference) -> None:
    """run() on the poisoned allocator; images 0, the ones holding element 2^31 of the input and of the output, and
    the last one equal image_reference(n) (eager fp32 on that image alone); no element left unwritten."""
    batch = x.shape[0]
    with allow_tf32(False):
        first = image_reference(0)
    per_image_out = first.numel()
    assert max(x.numel(), batch * per_image_out) > LIMIT, "the test shape must pass 2^31 elements"
    images = sorted({0, min(LIMIT // x[0].numel(), batch - 1), min(LIMIT // per_image_out, batch - 1), batch - 1})
    with allow_tf32(False):
        references = {n: first if n == 0 else image_reference(n) for n in images}

    poison_allocator("cuda", batch * per_image_out * x.element_size())
    out = run()
    torch.cuda.synchronize()
    assert out.shape == (batch, *first.shape[1:]) and out.dtype == x.dtype
    assert_output_layout(out, x)
    assert not out.isnan().any(), "output has NaN: elements left unwritten (poisoned)"
    for n, expected in references.items():
        torch.testing.assert_close(out[n:n + 1].float(), expected, **tolerance(HUGE_DTYPE),
                                   msg=lambda m, n=n: f"image {n} of {batch}: {m}")


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])  # the tiled and the channels-last kernels
def test_huge_depthwise_conv2d(huge_generator, layout):
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    x = uniform((35, 61, 1000, 1009), huge_generator, fmt)  # 2.15e9 elements in, 2.15e9 out
    w, b = small(61, 1, 3, 3), small(61)
    params = ([1, 1], [1, 1], [1, 1])
    check_huge(lambda: convops.depthwise_conv2d(x, w, b, *params), x,
               lambda n: torch_depthwise(x[n:n + 1].float(), w.float(), b.float(), *params))


@pytest.mark.slow
def test_huge_depthwise_separable_conv2d(huge_generator):
    x = uniform((35, 61, 1000, 1009), huge_generator)  # 2.15e9 elements in, 2.26e9 out
    dw, db, pw, pb = small(61, 1, 3, 3), small(61), small(64, 61, 1, 1), small(64)
    params = ([1, 1], [1, 1], [1, 1])

    def image_reference(n):
        # The unfused pair, with the intermediate rounded to the input dtype as ATen stores it (as
        # separable_reference does, here in fp32 on the GPU: a float64 CPU pass over 60M-element images is slow).
        mid = torch_depthwise(x[n:n + 1].float(), dw.float(), db.float(), *params).to(HUGE_DTYPE).float()
        return F.conv2d(mid, pw.float(), pb.float())

    check_huge(lambda: convops.depthwise_separable_conv2d(x, dw, db, pw, pb, *params), x, image_reference)


@pytest.mark.slow
def test_huge_conv_transpose2d(huge_generator):
    x = uniform((67, 16, 500, 511), huge_generator)  # 2.7e8 elements in, 2.19e9 out (67, 32, 1000, 1022)
    w, b = small(16, 32, 4, 4), small(32)
    params = dict(stride=2, padding=1)
    check_huge(lambda: convops.conv_transpose2d(x, w, b, **params), x,
               lambda n: F.conv_transpose2d(x[n:n + 1].float(), w.float(), b.float(), **params))


@pytest.mark.slow
def test_huge_conv_transpose3d(huge_generator):
    x = uniform((33, 16, 32, 128, 127), huge_generator)  # 2.7e8 elements in, 2.20e9 out (33, 16, 64, 256, 254)
    w, b = small(16, 16, 3, 3, 3), small(16)
    params = dict(stride=2, padding=1, output_padding=1)
    check_huge(lambda: convops.conv_transpose3d(x, w, b, **params), x,
               lambda n: F.conv_transpose3d(x[n:n + 1].float(), w.float(), b.float(), **params))


@pytest.mark.slow
def test_huge_conv2d_group_norm_scale_max_pool_clamp(huge_generator):
    # A 1x1 pool keeps the output as large as the convolution's: 2.16e9 elements in and out (and the kernel's
    # int32 window extrema, 8.6 GB, too).
    x = uniform((134, 16, 1000, 1009), huge_generator)
    w, b, gamma, beta = small(16, 16, 3, 3), small(16), small(16), small(16)
    scale = make_tensor((16, 1, 1), HUGE_DTYPE, "cuda", low=-2.0, high=2.0)
    conv = dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1])
    tail = dict(groups=4, eps=1e-5, pool=[1, 1], lo=-2.5, hi=2.5)
    check_huge(
        lambda: convops.conv2d_group_norm_scale_max_pool_clamp(x, w, b, conv["stride"], conv["padding"],
                                                               conv["dilation"], 4, gamma, beta, 1e-5, scale,
                                                               [1, 1], -2.5, 2.5),
        x,
        lambda n: aten_chain(x[n:n + 1].float(), w.float(), b.float(), gamma.float(), beta.float(), scale.float(),
                             **conv, **tail))
