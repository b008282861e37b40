"""Hostile inputs: every bad call of every convops op raises a RuntimeError that names the op and the problem.

Each op has one valid base call and a table of bad calls, each a small mutation of the base arguments plus a regex
for the problem. Every bad call is checked on the real kernels (CPU in CI, CUDA on the GPU machine) and again on the
fake (meta) path with every tensor moved to the meta device: both must raise the same error class with a message
that names the op and matches the same problem regex. CUDA-only cases mix devices (a CPU weight with a CUDA input,
a CUDA bias with a CPU input, ...).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

import convops  # noqa: F401  (registers the ops and their fake implementations)

FLOATS = "must be float64, float32, float16 or bfloat16"
DENSE = r"must be a dense \(strided\) tensor"
SPAN = "the padded input .*is smaller than the dilated kernel"
NOT_EMPTY = "only an empty batch may be empty"
PAST_64_BITS = "take the convolution's extents past 64 bits"

Mutation = Callable[[dict, str], None]


@dataclass(frozen=True)
class Bad:
    id: str
    mutate: Mutation       # edits the base call's keyword arguments in place; gets the device
    problem: str           # regex for the problem, searched after the op's name
    meta: bool = True      # False where moving every tensor to meta makes the call valid (device mismatches)
    parser: bool = False   # True where the schema's argument parser rejects the call, before any check of the op


# ---- mutations ----------------------------------------------------------------------------------------------------

def put(**changes) -> Mutation:
    """Replace arguments by literals, or by callables of (kwargs, device)."""
    def mutate(kw, device):
        for name, value in changes.items():
            kw[name] = value(kw, device) if callable(value) else value
    return mutate


def shaped(name: str, shape) -> Mutation:
    """A fresh tensor of another shape in place of `name`, same dtype and device."""
    def mutate(kw, device):
        kw[name] = torch.randn(shape, dtype=kw[name].dtype, device=kw[name].device)
    return mutate


def apply(*names: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> Mutation:
    def mutate(kw, device):
        for name in names:
            kw[name] = fn(kw[name])
    return mutate


def both(*mutations: Mutation) -> Mutation:
    def mutate(kw, device):
        for m in mutations:
            m(kw, device)
    return mutate


def to_int(t):
    return (t * 4).to(torch.int32)


def to_complex(t):
    return t.to(torch.complex64)


def to_sparse(t):
    return t.to_sparse()


def to_meta(t):
    return t.to("meta")


# ---- cases every op shares: tensor kinds, dtypes, devices, parameter lists --------------------------------------

def tensor_cases(tensors: list[str], optional: list[str]) -> list[Bad]:
    """Bad tensor arguments: integer/complex/sparse tensors, dtype mismatches, meta mixed with a real device,
    None or a non-tensor for a required tensor. tensors[0] is the input."""
    inp, others = tensors[0], tensors[1:]
    w = others[0]
    cases = [
        Bad(f"{inp} int32", apply(*tensors, fn=to_int), f"{inp} {FLOATS}"),
        Bad(f"{inp} complex64", apply(*tensors, fn=to_complex), f"{inp} {FLOATS}"),
        Bad(f"{inp} bool", apply(inp, fn=lambda t: t > 0), f"{inp} {FLOATS}"),
        Bad(f"{inp} float8_e4m3fn", apply(inp, fn=lambda t: t.to(torch.float8_e4m3fn)), f"{inp} {FLOATS}"),
        Bad(f"{inp} bfloat16, the rest float32", apply(inp, fn=torch.Tensor.bfloat16),
            f"{w} has dtype .* but input has dtype"),
        Bad(f"{inp} sparse", apply(inp, fn=to_sparse), f"{inp} {DENSE}"),
        Bad(f"{inp} None", put(**{inp: None}), f"{inp} is undefined"),
        Bad(f"{inp} a list", put(**{inp: [1.0, 2.0]}), f"Expected a value of type 'Tensor' for argument '{inp}'",
            parser=True),
        Bad(f"{w} None", put(**{w: None}), f"{w} is undefined"),
        Bad(f"{inp} on meta, {w} not", apply(inp, fn=to_meta), f"{w} is on \\S+ but input is on meta", meta=False),
        Bad(f"{w} on meta, {inp} not", apply(w, fn=to_meta), f"{w} is on meta but input is on", meta=False),
    ]
    for name in others:
        cases += [
            Bad(f"{name} float64", apply(name, fn=torch.Tensor.double), f"{name} has dtype .* but input has dtype"),
            Bad(f"{name} int32", apply(name, fn=to_int), f"{name} {FLOATS}"),
            Bad(f"{name} sparse", apply(name, fn=to_sparse), f"{name} {DENSE}"),
        ]
    for name in optional:
        cases += [
            Bad(f"{name} float16", apply(name, fn=torch.Tensor.half), f"{name} has dtype .* but input has dtype"),
            Bad(f"{name} complex64", apply(name, fn=to_complex), f"{name} {FLOATS}"),
            Bad(f"{name} 0-D", apply(name, fn=lambda t: t[0]), f"expected {name} of shape"),
            Bad(f"{name} 2-D", apply(name, fn=lambda t: t[None]), f"expected {name} of shape"),
            Bad(f"{name} one short", apply(name, fn=lambda t: t[1:]), f"expected {name} of shape"),
            Bad(f"{name} empty", apply(name, fn=lambda t: t[:0]), f"expected {name} of shape"),
        ]
    return cases


def param_cases(params: dict[str, int], spatial: int) -> list[Bad]:
    """params: name -> minimum value (1: positive, 0: non-negative)."""
    cases = []
    for name, minimum in params.items():
        sign = "positive" if minimum else "non-negative"
        cases += [
            Bad(f"{name} {minimum - 1}", put(**{name: [minimum - 1] + [1] * (spatial - 1)}),
                f"{name} must be {sign}"),
            Bad(f"{name} {spatial + 1} values", put(**{name: [1] * (spatial + 1)}),
                f"{name} must have {spatial} values"),
        ]
        if minimum == 1:
            cases.append(Bad(f"{name} -2", put(**{name: [1] * (spatial - 1) + [-2]}), f"{name} must be positive"))
        else:
            cases.append(Bad(f"{name} -3", put(**{name: [1] * (spatial - 1) + [-3]}), f"{name} must be non-negative"))
    first = next(iter(params))
    cases += [
        Bad(f"{first} as a string", put(**{first: "1"}), f"argument '{first}'", parser=True),
        Bad(f"{first} of floats", put(**{first: [1.5] * spatial}), f"argument '{first}'", parser=True),
    ]
    return cases


# ---- the ops ------------------------------------------------------------------------------------------------------

def randn(*shape, device):
    return torch.randn(shape, device=device)


def depthwise_base(device):
    return dict(input=randn(2, 3, 8, 8, device=device), weight=randn(6, 1, 3, 3, device=device),
                bias=randn(6, device=device), stride=[1, 1], padding=[1, 1], dilation=[1, 1])


def depthwise_shape_cases(weight: str, bias: str) -> list[Bad]:
    """Geometry of the depthwise stage; shared by depthwise_conv2d and depthwise_separable_conv2d."""
    return [
        Bad("input 0-D", apply("input", fn=lambda t: t[0, 0, 0, 0]), r"expected input to be 4-D"),
        Bad("input 3-D", apply("input", fn=lambda t: t[0]), r"expected input to be 4-D"),
        Bad("input 5-D", apply("input", fn=lambda t: t[None]), r"expected input to be 4-D"),
        Bad(f"{weight} 3-D", apply(weight, fn=lambda t: t[0]), f"expected {weight} to be 4-D"),
        Bad(f"{weight} 5-D", apply(weight, fn=lambda t: t[None]), f"expected {weight} to be 4-D"),
        Bad(f"{weight} with 2 input channels per group", shaped(weight, (6, 2, 3, 3)),
            "a depthwise weight has one input channel per group"),
        Bad("multiplier not integral", both(shaped(weight, (5, 1, 3, 3)), shaped(bias, (5,))),
            r"must be a positive multiple of C_in = 3"),
        Bad(f"{weight} with no output channels", both(shaped(weight, (0, 1, 3, 3)), shaped(bias, (0,))),
            r"must be a positive multiple of C_in = 3"),
        Bad("empty kernel", shaped(weight, (6, 1, 0, 3)), "empty kernel"),
        Bad("no input channels", shaped("input", (2, 0, 8, 8)), "input must have at least one channel"),
        Bad("empty height", shaped("input", (2, 3, 0, 8)), NOT_EMPTY),
        Bad("empty width, 1x1 kernel", both(shaped("input", (2, 3, 8, 0)), shaped(weight, (6, 1, 1, 1))), NOT_EMPTY),
        Bad("kernel larger than the padded input", shaped(weight, (6, 1, 11, 3)), SPAN),
        Bad("dilated kernel larger than the padded input", put(dilation=[5, 1]), SPAN),
        Bad("empty images in an empty batch, kernel past them",
            both(shaped("input", (0, 3, 0, 8)), put(padding=[0, 0])), SPAN),
        Bad("input channels not matching the weight", shaped("input", (2, 4, 8, 8)),
            r"must be a positive multiple of C_in = 4"),
        Bad("padding past 64 bits", put(padding=[2**62, 1]), PAST_64_BITS),
        Bad("padding at the int64 maximum", put(padding=[1, 2**63 - 1]), PAST_64_BITS),
        Bad("dilation past 64 bits", put(dilation=[1, 2**62 + 1]), PAST_64_BITS),  # (k - 1) d wraps to 2
    ]


def depthwise_cases():
    return (tensor_cases(["input", "weight", "bias"], ["bias"])
            + param_cases({"stride": 1, "padding": 0, "dilation": 1}, 2)
            + depthwise_shape_cases("weight", "bias"))


def separable_base(device):
    return dict(input=randn(2, 3, 8, 8, device=device), depthwise_weight=randn(6, 1, 3, 3, device=device),
                depthwise_bias=randn(6, device=device), pointwise_weight=randn(5, 6, 1, 1, device=device),
                pointwise_bias=randn(5, device=device), stride=[1, 1], padding=[1, 1], dilation=[1, 1])


def separable_cases():
    pw = r"expected pointwise_weight of shape \(C_out, 6, 1, 1\)"
    return (tensor_cases(["input", "depthwise_weight", "depthwise_bias", "pointwise_weight", "pointwise_bias"],
                         ["depthwise_bias", "pointwise_bias"])
            + param_cases({"stride": 1, "padding": 0, "dilation": 1}, 2)
            + depthwise_shape_cases("depthwise_weight", "depthwise_bias")
            + [
                Bad("pointwise_weight 3x3", shaped("pointwise_weight", (5, 6, 3, 3)), pw),
                Bad("pointwise_weight 1x3", shaped("pointwise_weight", (5, 6, 1, 3)), pw),
                Bad("pointwise_weight 2-D", apply("pointwise_weight", fn=lambda t: t[:, :, 0, 0]), pw),
                Bad("pointwise_weight 5-D", apply("pointwise_weight", fn=lambda t: t[None]), pw),
                Bad("pointwise_weight reading C_in", shaped("pointwise_weight", (5, 3, 1, 1)), pw),
                Bad("pointwise_weight with no outputs",
                    both(shaped("pointwise_weight", (0, 6, 1, 1)), put(pointwise_bias=None)), pw),
                Bad("pointwise_bias for the depthwise stage", shaped("pointwise_bias", (6,)),
                    r"expected pointwise_bias of shape \(5\)"),
            ])


def conv_transpose_base(spatial: int):
    def base(device):
        return dict(input=randn(2, 4, *[4] * spatial, device=device),
                    weight=randn(4, 3, *[3] * spatial, device=device), bias=randn(6, device=device),
                    stride=[2] * spatial, padding=[1] * spatial, output_padding=[1] * spatial, groups=2,
                    dilation=[1] * spatial)
    return base


def conv_transpose_cases(spatial: int):
    d = spatial + 2
    ones = [1] * spatial
    s = [4] * spatial
    k = [3] * spatial
    return (tensor_cases(["input", "weight", "bias"], ["bias"])
            + param_cases({"stride": 1, "padding": 0, "output_padding": 0, "dilation": 1}, spatial)
            + [
                Bad(f"input {d - 2}-D", apply("input", fn=lambda t: t[0, 0]), f"expected input to be {d}-D"),
                Bad(f"input {d + 1}-D", apply("input", fn=lambda t: t[None]), f"expected input to be {d}-D"),
                Bad(f"weight {d - 1}-D", apply("weight", fn=lambda t: t[0]), f"expected weight to be {d}-D"),
                Bad(f"weight {d + 1}-D", apply("weight", fn=lambda t: t[None]), f"expected weight to be {d}-D"),
                Bad("groups 0", put(groups=0), "groups must be positive"),
                Bad("groups -2", put(groups=-2), "groups must be positive"),
                Bad("groups not dividing the channels", put(groups=3), r"must be divisible by groups=3"),
                Bad("groups above the channels", put(groups=8), r"at least groups=8"),
                Bad("input channels not matching the weight", shaped("input", (2, 5, *s)),
                    "input has 5 channels but weight"),
                Bad("bias of C_out / groups", shaped("bias", (3,)), r"expected bias of shape \(6\)"),
                Bad("output_padding == stride > dilation", put(output_padding=[2] * spatial),
                    "output_padding must be smaller than either stride or dilation"),
                Bad("output_padding >= stride and dilation",
                    put(stride=ones, output_padding=[0] * (spatial - 1) + [1]),
                    "output_padding must be smaller than either stride or dilation"),
                Bad("output size <= 0",
                    both(shaped("input", (2, 4, *ones)),
                         put(stride=ones, output_padding=[0] * spatial, padding=[2] * spatial)),
                    "non-positive output size"),
                Bad("empty kernel", shaped("weight", (4, 3, *k[:-1], 0)), "kernel size must be positive"),
                Bad("empty spatial input", shaped("input", (2, 4, *s[:-1], 0)), NOT_EMPTY),
                Bad("no input channels", both(shaped("input", (2, 0, *s)), shaped("weight", (0, 3, *k)), put(groups=1),
                                              shaped("bias", (3,))),
                    r"at least groups=1"),
                Bad("weight with no entries", shaped("weight", (0, 3, *k)), r"at least groups=2"),
                # An unbatched input (C_in, *spatial) is checked as a batch of one, and its messages say so.
                Bad("unbatched, channels not matching the weight", shaped("input", (5, *s)),
                    r"input has 5 channels but weight"),
                Bad("unbatched, bias of C_out / groups", both(shaped("input", (4, *s)), shaped("bias", (3,))),
                    r"expected bias of shape \(6\)"),
                Bad("unbatched, empty spatial input", shaped("input", (4, *s[:-1], 0)), NOT_EMPTY),
                Bad("unbatched, output size <= 0",
                    both(shaped("input", (4, *ones)),
                         put(stride=ones, output_padding=[0] * spatial, padding=[2] * spatial)),
                    "non-positive output size"),
            ])


def gn_base(device):
    return dict(input=randn(2, 3, 10, 10, device=device), weight=randn(8, 3, 3, 3, device=device),
                bias=randn(8, device=device), stride=[1, 1], padding=[1, 1], dilation=[1, 1], num_groups=4,
                gn_weight=randn(8, device=device), gn_bias=randn(8, device=device), eps=1e-5,
                scale=randn(8, 1, 1, device=device), pool_kernel=[2, 2], clamp_min=-1.0, clamp_max=1.0)


def gn_cases():
    c_in = r"\(C_out, C_in = 3"
    scale = r"scale must have shape \(C,1,1\), \(1,C,1,1\), \(C,\) or hold a single value"
    return (tensor_cases(["input", "weight", "bias", "gn_weight", "gn_bias", "scale"], ["bias", "gn_weight", "gn_bias"])
            + param_cases({"stride": 1, "padding": 0, "dilation": 1, "pool_kernel": 1}, 2)
            + [
                Bad("input 3-D", apply("input", fn=lambda t: t[0]), "expected input to be 4-D"),
                Bad("input 5-D", apply("input", fn=lambda t: t[None]), "expected input to be 4-D"),
                Bad("weight 3-D", apply("weight", fn=lambda t: t[0]), "expected weight to be 4-D"),
                Bad("weight 5-D", apply("weight", fn=lambda t: t[None]), "expected weight to be 4-D"),
                Bad("weight C_in mismatch", shaped("weight", (8, 2, 3, 3)), rf"weight must have shape {c_in}"),
                Bad("grouped weight", shaped("weight", (8, 1, 3, 3)), rf"weight must have shape {c_in}"),
                Bad("empty kernel", shaped("weight", (8, 3, 3, 0)), "empty weight"),
                Bad("no input channels", both(shaped("input", (2, 0, 10, 10)), shaped("weight", (8, 0, 3, 3))),
                    "input must have at least one channel"),
                Bad("empty height", both(shaped("input", (2, 3, 0, 10)), shaped("weight", (8, 3, 1, 1))), NOT_EMPTY),
                Bad("num_groups 0", put(num_groups=0), "num_groups must be positive and divide C_out = 8"),
                Bad("num_groups -4", put(num_groups=-4), "num_groups must be positive and divide C_out = 8"),
                Bad("num_groups not dividing", put(num_groups=3), "num_groups must be positive and divide C_out = 8"),
                Bad("num_groups above the channels", put(num_groups=16),
                    "num_groups must be positive and divide C_out = 8"),
                Bad("num_groups 2**40", put(num_groups=2**40), "num_groups must be positive and divide C_out = 8"),
                Bad("weight with no output channels", shaped("weight", (0, 3, 3, 3)), "empty weight"),
                # ATen's group_norm takes any eps and answers NaN where var + eps < 0; a negative (or non-finite)
                # eps is a bug in the caller, so convops refuses it on every path.
                Bad("eps negative", put(eps=-1e-5), "eps must be finite and non-negative"),
                Bad("eps NaN", put(eps=float("nan")), "eps must be finite and non-negative"),
                Bad("eps inf", put(eps=float("inf")), "eps must be finite and non-negative"),
                Bad("eps -inf", put(eps=-float("inf")), "eps must be finite and non-negative"),
                Bad("eps -NaN", put(eps=-float("nan")), "eps must be finite and non-negative"),
                Bad("eps of 7 digits", put(eps=-0.1234567), "eps must be finite and non-negative"),
                Bad("eps -1e300", put(eps=-1e300), "eps must be finite and non-negative"),
                Bad("scale (C, 2)", shaped("scale", (8, 2)), scale),
                Bad("scale (C-1, 1, 1)", shaped("scale", (7, 1, 1)), scale),
                Bad("scale (2, C, 1, 1)", shaped("scale", (2, 8, 1, 1)), scale),
                Bad("scale (1, 1, C)", shaped("scale", (1, 1, 8)), scale),
                Bad("scale empty", shaped("scale", (0,)), scale),
                Bad("scale (C, 1)", shaped("scale", (8, 1)), scale),
                Bad("scale (C, 1, 1, 1)", shaped("scale", (8, 1, 1, 1)), scale),
                Bad("scale None", put(scale=None), "scale is undefined"),
                Bad("pool taller than the conv output", put(pool_kernel=[11, 2]),
                    "pool_kernel .*is larger than the convolution output"),
                Bad("pool wider than the conv output", put(stride=[3, 3], pool_kernel=[2, 5]),
                    "pool_kernel .*is larger than the convolution output"),
                Bad("kernel larger than the padded input", shaped("weight", (8, 3, 13, 3)), SPAN),
                Bad("dilated kernel larger than the padded input", put(dilation=[1, 6]), SPAN),
                Bad("pool past the conv output both ways", put(pool_kernel=[11, 11]),
                    "pool_kernel .*is larger than the convolution output"),
                Bad("padding past 64 bits", put(padding=[2**62, 1]), PAST_64_BITS),
                Bad("dilation past 64 bits", put(dilation=[2**62 + 1, 1]), PAST_64_BITS),
                Bad("clamp_min a string", put(clamp_min="0"), "argument 'clamp_min'", parser=True),
            ])


OPS = {
    "depthwise_conv2d": (depthwise_base, depthwise_cases()),
    "depthwise_separable_conv2d": (separable_base, separable_cases()),
    "conv_transpose2d": (conv_transpose_base(2), conv_transpose_cases(2)),
    "conv_transpose3d": (conv_transpose_base(3), conv_transpose_cases(3)),
    "conv2d_group_norm_scale_max_pool_clamp": (gn_base, gn_cases()),
}


def tensor_names(op: str) -> list[str]:
    return [name for name, value in OPS[op][0]("cpu").items() if isinstance(value, torch.Tensor)]


def cuda_only_cases(op: str) -> list[Bad]:
    """One operand on the other device than the input, each way round (the base call is built on CUDA)."""
    cases = []
    for name in tensor_names(op)[1:]:
        cases += [
            Bad(f"{name} on CPU, input on CUDA", apply(name, fn=torch.Tensor.cpu),
                f"{name} is on cpu but input is on cuda"),
            Bad(f"{name} on CUDA, input and the rest on CPU",
                both(*[apply(n, fn=torch.Tensor.cpu) for n in tensor_names(op) if n != name]),
                f"{name} is on cuda\\S* but input is on cpu"),
        ]
    others = tensor_names(op)[1:]
    cases.append(Bad("input on CPU, the rest on CUDA", apply("input", fn=torch.Tensor.cpu),
                     f"{others[0]} is on cuda\\S* but input is on cpu"))
    return cases


# ---- machinery ----------------------------------------------------------------------------------------------------

def call(op: str, kwargs: dict):
    return getattr(torch.ops.convops, op).default(**kwargs)


def pattern(op: str, problem: str) -> str:
    """The op's qualified name (not a prefix of a longer name), then the problem anywhere after it."""
    return rf"(?s)convops::{re.escape(op)}(?!\w).*{problem}"


def bad_kwargs(op: str, case: Bad, device: str) -> dict:
    kwargs = OPS[op][0](device)
    case.mutate(kwargs, device)
    return kwargs


def on_meta(kwargs: dict) -> dict:
    return {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


def raised(op: str, kwargs: dict, case: Bad) -> RuntimeError:
    with pytest.raises(RuntimeError, match=pattern(op, case.problem)) as info:
        call(op, kwargs)
    return info.value


TABLE = [pytest.param(op, case, id=f"{op}-{case.id}") for op, (_, cases) in OPS.items() for case in cases]
CUDA_TABLE = [pytest.param(op, case, id=f"{op}-{case.id}") for op in OPS for case in cuda_only_cases(op)]


def test_case_ids_are_distinct():
    for op, (_, cases) in OPS.items():
        ids = [case.id for case in cases]
        assert len(ids) == len(set(ids)), op
        assert len(cases) >= 30, (op, len(cases))


@pytest.mark.parametrize("device", ["cpu", "meta", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("op", list(OPS))
def test_base_call_is_valid(op, device):
    """The tables mutate a call that works, so each error comes from the one thing changed."""
    assert call(op, OPS[op][0](device)).device.type == device


@pytest.mark.parametrize("op, case", TABLE)
def test_bad_call_cpu_and_meta(op, case):
    kwargs = bad_kwargs(op, case, "cpu")
    real = raised(op, kwargs, case)
    if case.meta:
        fake = raised(op, on_meta(kwargs), case)
        assert type(fake) is type(real), (type(fake), type(real))


@pytest.mark.cuda
@pytest.mark.parametrize("op, case", TABLE)
def test_bad_call_cuda(op, case):
    kwargs = bad_kwargs(op, case, "cuda")
    real = raised(op, kwargs, case)
    if case.meta:
        fake = raised(op, on_meta(kwargs), case)
        assert type(fake) is type(real), (type(fake), type(real))


@pytest.mark.cuda
@pytest.mark.parametrize("op, case", CUDA_TABLE)
def test_bad_call_cuda_mixed_devices(op, case):
    raised(op, bad_kwargs(op, case, "cuda"), case)
