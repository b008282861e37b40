"""Seeded fuzzing of every convops op against ATen in float64 (configurations: tests/fuzz_configs.py).

Each seed draws one valid configuration (shapes down to 1x1, kernels larger than the input with padding, every
parameter, dtype and layout, batch 0, optional tensors) and its tensors; the op must match the float64 reference at
its dtype's tolerance, NaN/Inf included. Seeds are grouped into chunks of a few hundred per test so a failure
localises; the test id names the seed range and the failure message every failing seed with its configuration.

Replay one seed (arguments: op, seed, device='cpu', kind='values' | 'nonfinite' | 'transposed_weights' | 'views'):
    python -c "import sys; sys.path.insert(0, 'tests'); import test_fuzz as f; f.replay('depthwise_conv2d', 17)"
"""
from __future__ import annotations

import traceback

import pytest
import torch

from common_utils import DEVICES, allow_tf32, assert_output_layout, poison_allocator, tolerance
from fuzz_configs import DTYPES, OPS, draw, poison, restride

# Kinds of run: "values" (finite inputs), "nonfinite" (NaN/Inf in the inputs, biases and, where the reference is
# exact for them, weights), "transposed_weights" (NaN/Inf in transposed convolutions' weights, plus the rest),
# "views" (every tensor argument a non-dense view: fuzz_configs.as_view).
# (device, kind) -> (first seed, configurations per test, tests per op); each device and kind has its own seeds.
PLAN = {
    ("cpu", "values"): (0, 500, 5),                     # 2,500 configurations per op
    ("cuda", "values"): (100_000, 250, 4),              # 1,000
    ("cpu", "nonfinite"): (200_000, 400, 1),            # 400
    ("cuda", "nonfinite"): (300_000, 400, 1),           # 400
    ("cpu", "transposed_weights"): (400_000, 400, 1),   # 400 per transposed op
    ("cuda", "transposed_weights"): (500_000, 400, 1),
    ("cpu", "views"): (600_000, 400, 1),                # 400
    ("cuda", "views"): (700_000, 400, 1),
}
TRANSPOSED = ("conv_transpose2d", "conv_transpose3d")
MAX_REPORTED = 5


@pytest.fixture(autouse=True)
def _one_cpu_thread():
    """The configurations are tiny: with intra-op threads on a loaded 2-core machine each ATen call pays
    milliseconds of thread wake-up (measured: 1 ms a configuration on one thread, 10-50 ms on two)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def chunks(device: str, kind: str, ops=tuple(OPS), marks=()) -> list:
    first, size, count = PLAN[(device, kind)]
    marks = [*marks, pytest.mark.cuda] if device == "cuda" else list(marks)
    return [pytest.param(op, range(first + i * size, first + (i + 1) * size), marks=marks,
                         id=f"{op}-seeds{first + i * size}-{first + (i + 1) * size - 1}")
            for op in ops for i in range(count)]


def compare(out: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, tol: dict, extra) -> None:
    """NaN, +Inf and -Inf exactly where the reference has them; finite values within atol + extra + rtol |ref|."""
    assert out.shape == expected.shape, f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}"
    assert out.dtype == dtype, f"dtype {out.dtype}, expected {dtype}"
    got = out.detach().cpu().double()
    for name, mask in (("NaN", torch.isnan), ("+Inf", torch.isposinf), ("-Inf", torch.isneginf)):
        wrong = mask(got) != mask(expected)
        if wrong.any():
            where = wrong.nonzero()[0].tolist()
            raise AssertionError(f"{name} mask differs at {int(wrong.sum())} elements, first {where}: "
                                 f"got {got[tuple(where)].item()}, expected {expected[tuple(where)].item()}")
    tol = dict(tolerance(dtype), **tol)
    finite = torch.isfinite(expected)
    allowed = tol["atol"] + tol["rtol"] * expected.abs()
    if extra is not None:
        allowed = allowed + extra
    excess = torch.where(finite, (got - expected).abs() - allowed, torch.zeros_like(got))
    if (excess > 0).any():
        where = excess.flatten().argmax().item()
        index = list(torch.unravel_index(torch.tensor(where), excess.shape))
        index = [int(i) for i in index]
        raise AssertionError(f"{int((excess > 0).sum())} of {got.numel()} elements off; worst at {index}: got "
                             f"{got[tuple(index)].item():.8g}, expected {expected[tuple(index)].item():.8g} "
                             f"(allowed {allowed[tuple(index)].item():.3g}; tolerance {tol})")


def check(op_name: str, seed: int, device: str, kind: str = "values", config: dict | None = None) -> dict:
    """Draws (into `config`, if given), runs and checks one configuration; raises AssertionError or the op's
    error."""
    op = OPS[op_name]
    config = {} if config is None else config
    config.update(draw(op_name, seed, device))
    tf32 = config["tf32"]
    with allow_tf32(torch.backends.cudnn.allow_tf32 if tf32 is None else tf32):
        torch.default_generator.manual_seed(seed)  # make_tensor draws on the CPU (torch.manual_seed costs 2 ms)
        args = op.build(config, device)
        if kind == "nonfinite":
            others = tuple(n for n in op.tensor_names if n != "weight") if op_name in TRANSPOSED else None
            config["poisoned"] = poison(op, config, args, seed, only=others)
        elif kind == "transposed_weights":
            config["poisoned"] = poison(op, config, args, seed, only=("weight",))
            config["poisoned"] += poison(op, config, args, seed + 1, only=("input", "bias"))
        elif kind == "views":
            config["views"] = restride(op, args, seed)
        expected, tol, extra = op.expected(config, args)
        poison_allocator(device, expected.numel() * args[0].element_size())
        out = op.run(args)
    compare(out, expected, DTYPES[config["dtype"]], tol, extra)
    assert_output_layout(out, args[0])
    return config


def describe(op_name: str, seed: int, device: str, kind: str, config: dict) -> str:
    return (f"  {op_name} seed={seed} device={device} kind={kind}\n"
            f"    config: {config}\n"
            f"    replay: test_fuzz.replay({op_name!r}, {seed}, {device!r}, {kind!r})\n")


def run_seeds(op_name: str, seeds: range, device: str, kind: str = "values") -> None:
    failures = []
    for seed in seeds:
        config = {}
        try:
            check(op_name, seed, device, kind, config)
        except Exception as error:  # a crash is a failure of its seed like a mismatch
            failures.append((seed, config, error))
    if failures:
        lines = [f"{len(failures)} of {len(seeds)} configurations failed (seeds {[f[0] for f in failures]}):"]
        for seed, config, error in failures[:MAX_REPORTED]:
            lines.append(describe(op_name, seed, device, kind, config) + "    error: "
                         + "".join(traceback.format_exception_only(type(error), error)).strip())
        pytest.fail("\n".join(lines), pytrace=False)


def replay(op_name: str, seed: int, device: str = "cpu", kind: str = "values") -> None:
    """Reruns one configuration and prints it; raises what the fuzz test reported."""
    config = {}
    try:
        check(op_name, seed, device, kind, config)
    finally:
        print(describe(op_name, seed, device, kind, config))
    print("  passes")


@pytest.mark.parametrize("op_name,seeds", chunks("cpu", "values"))
def test_fuzz_cpu(op_name, seeds):
    run_seeds(op_name, seeds, "cpu")


@pytest.mark.parametrize("op_name,seeds", chunks("cuda", "values"))
def test_fuzz_cuda(op_name, seeds):
    run_seeds(op_name, seeds, "cuda")


@pytest.mark.parametrize("op_name,seeds", chunks("cpu", "nonfinite"))
def test_nan_inf_propagation_cpu(op_name, seeds):
    run_seeds(op_name, seeds, "cpu", "nonfinite")


@pytest.mark.parametrize("op_name,seeds", chunks("cuda", "nonfinite"))
def test_nan_inf_propagation_cuda(op_name, seeds):
    run_seeds(op_name, seeds, "cuda", "nonfinite")


@pytest.mark.parametrize("op_name,seeds", chunks("cpu", "transposed_weights", TRANSPOSED))
def test_nan_inf_in_transposed_weights_cpu(op_name, seeds):
    """The CPU kernels use ATen's native gemm + col2im, which multiplies a tap only by real inputs (oneDNN's
    deconvolution, behind at::convolution, also multiplies it by the zeros around the input: NaN from a -Inf tap
    there, e.g. seed 400048, fp32)."""
    run_seeds(op_name, seeds, "cpu", "transposed_weights")


@pytest.mark.parametrize("op_name,seeds", chunks("cuda", "transposed_weights", TRANSPOSED))
def test_nan_inf_in_transposed_weights_cuda(op_name, seeds):
    """The CUDA implicit GEMM multiplies every tap by the zeros around the input too; it runs on weights made finite
    and a second kernel adds the terms of the non-finite taps (convops/csrc/cuda/conv_transpose_nonfinite.cuh), so
    a tap that meets only those zeros leaves no NaN (e.g. seed 500002: bf16, -Inf taps outside a 3x1 input)."""
    run_seeds(op_name, seeds, "cuda", "transposed_weights")


@pytest.mark.parametrize("op_name,seeds", chunks("cpu", "views"))
def test_non_dense_arguments_cpu(op_name, seeds):
    """Sliced, column, offset, permuted and broadcast (stride-0) views of every tensor argument, parameters included
    (the GroupNorm op's CPU kernel once read a strided GroupNorm weight, bias or scale as dense)."""
    run_seeds(op_name, seeds, "cpu", "views")


@pytest.mark.parametrize("op_name,seeds", chunks("cuda", "views"))
def test_non_dense_arguments_cuda(op_name, seeds):
    run_seeds(op_name, seeds, "cuda", "views")


# (conv input size, pool kernel): one window per element; whole 2x2 windows; on CUDA, windows straddling conv tiles
# (conv 6x40 -> tiles of 4x32 pixels, so 5-row windows are combined from pieces with atomics).
GN_INFINITE_GAMMA_GEOMETRIES = {"pixels": ([6, 6], [1, 1]), "windows": ([6, 6], [2, 2]),
                                "straddling": ([6, 40], [5, 2])}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
@pytest.mark.parametrize("geometry", GN_INFINITE_GAMMA_GEOMETRIES)
def test_group_norm_infinite_gamma_follows_aten(device, value, geometry):
    """ATen's group_norm computes x * a + b with a = rstd * gamma and b = beta - mean * a: with an infinite gamma an
    element is b (+-Inf) where x has the sign of a * b and NaN elsewhere (Inf - Inf, or Inf * 0), so a pooled window
    is NaN unless every element in it has that sign. The op must give exactly these NaN and +-Inf."""
    op = OPS["conv2d_group_norm_scale_max_pool_clamp"]
    size, pool_kernel = GN_INFINITE_GAMMA_GEOMETRIES[geometry]
    config = dict(dtype="float32", layout="contiguous", tf32=False, batch=2, in_channels=2, num_groups=2,
                  out_channels=4, bias=True, gn_weight=True, gn_bias=True, eps=1e-5, scale_shape="(C,1,1)",
                  size=size, kernel=[3, 3], stride=[1, 1], padding=[1, 1], dilation=[1, 1], pool_kernel=pool_kernel,
                  clamp_min=None, clamp_max=None)
    torch.default_generator.manual_seed(0)
    args = op.build(config, device)
    args[7][1] = value
    # Conv biases that make channel 1 mostly negative in a group of positive mean, so that whole windows keep the
    # sign that gives +-Inf while others hold a positive value and give NaN.
    args[2][0], args[2][1] = 10.0, -2.0
    with allow_tf32(False):
        expected, tol, extra = op.expected(config, args)
        compare(op.run(args), expected, torch.float32, tol, extra)
    poisoned = expected[:, 1]
    assert poisoned.isnan().any() and poisoned.isinf().any(), "the case must reach both outcomes"


def test_fuzz_covers_the_parameter_space():
    """The CPU draws reach every dtype, layout, batch 0, 1x1 inputs, kernels larger than the input, every scale
    shape and clamp form, and every optional tensor present and absent."""
    first, size, count = PLAN[("cpu", "values")]
    seen = {}
    for op_name in OPS:
        for seed in range(first, first + size * count):
            c = draw(op_name, seed, "cpu")
            facts = {f"dtype={c['dtype']}", f"layout={c['layout']}", f"batch0={c['batch'] == 0}"}
            sizes = c.get("size", c.get("spatial"))
            facts.add(f"1x1={all(s == 1 for s in sizes)}")
            facts.add(f"kernel>input={any(k > s for k, s in zip(c['kernel'], sizes))}")
            facts |= {f"{k}={c[k]}" for k in ("bias", "pointwise_bias", "gn_weight", "gn_bias", "scale_shape",
                                               "multiplier", "groups") if k in c}
            if "clamp_min" in c:
                facts.add(f"clamp=({c['clamp_min'] is None},{c['clamp_max'] is None})")
            seen.setdefault(op_name, set()).update(facts)
    for op_name, facts in seen.items():
        needed = {f"dtype={d}" for d in DTYPES} | {f"layout={x}" for x in ("contiguous", "channels_last", "strided")}
        needed |= {"batch0=True", "batch0=False", "1x1=True", "kernel>input=True", "bias=True", "bias=False"}
        assert needed <= facts, (op_name, needed - facts)
    gn = seen["conv2d_group_norm_scale_max_pool_clamp"]
    assert {"scale_shape=(C,1,1)", "scale_shape=(1,C,1,1)", "scale_shape=(C,)", "scale_shape=()",
            "clamp=(True,True)", "clamp=(False,True)", "clamp=(True,False)", "clamp=(False,False)",
            "gn_weight=False", "gn_bias=False"} <= gn
