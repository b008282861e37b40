"""Seeded fuzzing of every convops op against ATen in float64 (configurations: tests/fuzz_configs.py).

Each seed draws one valid configuration (shapes down to 1x1, kernels larger than the input with padding, every
parameter, dtype and layout, batch 0, optional tensors) and its tensors; the op must match the float64 reference at
its dtype's tolerance, NaN/Inf included. Seeds are grouped into chunks of a few hundred per test so a failure
localises; the test id names the seed range and the failure message every failing seed with its configuration.

Replay one seed (arguments: op, seed, device='cpu', kind='values' | 'nonfinite' | 'transposed_weights'):
    python -c "import sys; sys.path.insert(0, 'tests'); import test_fuzz as f; f.replay('depthwise_conv2d', 17)"
"""
from __future__ import annotations

import traceback

import pytest
import torch

from common_utils import DEVICES, allow_tf32, assert_output_layout, poison_allocator, tolerance
from fuzz_configs import DTYPES, OPS, draw, poison

# Kinds of run: "values" (finite inputs), "nonfinite" (NaN/Inf in the inputs, biases and, where the reference is
# exact for them, weights), "transposed_weights" (NaN/Inf in transposed convolutions' weights, plus the rest).
# (device, kind) -> (first seed, configurations per test, tests per op); each device and kind has its own seeds.
PLAN = {
    ("cpu", "values"): (0, 500, 5),                     # 2,500 configurations per op
    ("cuda", "values"): (100_000, 250, 4),              # 1,000
    ("cpu", "nonfinite"): (200_000, 400, 1),            # 400
    ("cuda", "nonfinite"): (300_000, 400, 1),           # 400
    ("cpu", "transposed_weights"): (400_000, 400, 1),   # 400 per transposed op
    ("cuda", "transposed_weights"): (500_000, 400, 1),
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


ONEDNN_DECONV_BUG = (
    "convops CPU conv_transpose2d (fp32/fp16/bf16 run through at::convolution -> oneDNN deconvolution, as eager "
    "fp32 does) multiplies NaN/Inf weight taps by implicit zeros: NaN where float64 ATen (and fp32 ATen with mkldnn "
    "disabled) is finite or +-Inf; 4 of 400 seeds, e.g. replay('conv_transpose2d', 400048, 'cpu', "
    "'transposed_weights') (fp32) and 400030 (fp16)")


@pytest.mark.parametrize("op_name,seeds", [
    *chunks("cpu", "transposed_weights", ["conv_transpose2d"],
            [pytest.mark.xfail(strict=True, reason=ONEDNN_DECONV_BUG)]),
    *chunks("cpu", "transposed_weights", ["conv_transpose3d"])])
def test_nan_inf_in_transposed_weights_cpu(op_name, seeds):
    run_seeds(op_name, seeds, "cpu", "transposed_weights")


@pytest.mark.parametrize("op_name,seeds", chunks("cuda", "transposed_weights", TRANSPOSED))
def test_nan_inf_in_transposed_weights_cuda(op_name, seeds):
    run_seeds(op_name, seeds, "cuda", "transposed_weights")


GN_INFINITE_GAMMA = (
    "convops conv2d_group_norm_scale_max_pool_clamp computes ((v - mean) * rstd * gamma + beta) * s (CPU and CUDA), "
    "so an infinite GroupNorm weight gives +-Inf; ATen's group_norm computes x * a + b with a = rstd * gamma, "
    "b = beta - mean * a, which is inf - inf = NaN in every element of that channel")


@pytest.mark.xfail(strict=True, reason=GN_INFINITE_GAMMA)
@pytest.mark.parametrize("device", DEVICES)
def test_group_norm_infinite_gamma_follows_aten(device):
    op = OPS["conv2d_group_norm_scale_max_pool_clamp"]
    config = dict(dtype="float32", layout="contiguous", tf32=False, batch=2, in_channels=2, num_groups=2,
                  out_channels=4, bias=True, gn_weight=True, gn_bias=True, eps=1e-5, scale_shape="(C,1,1)",
                  size=[6, 6], kernel=[3, 3], stride=[1, 1], padding=[1, 1], dilation=[1, 1], pool_kernel=[2, 2],
                  clamp_min=None, clamp_max=None)
    torch.default_generator.manual_seed(0)
    args = op.build(config, device)
    args[7][1] = float("inf")
    with allow_tf32(False):
        expected, tol, extra = op.expected(config, args)
        compare(op.run(args), expected, torch.float32, tol, extra)


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
