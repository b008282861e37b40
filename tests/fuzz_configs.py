"""Random valid configurations of every convops op, and how to build, run and check each one (used by test_fuzz.py).

A configuration is a plain dict drawn from a random.Random seeded by (op, device, seed); the tensors are drawn
on the CPU generator seeded with the seed. Both depend on the seed alone, so a failing seed replays exactly
(test_fuzz.replay). The references follow each op's own test file: float64 ATen on the same inputs, with the
TF32 conventions of that op.
"""
from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F

import convops
from common_utils import make_tensor, reference, tf32_active
from test_conv_transpose import Case, tf32_accumulation_tolerance
from test_depthwise_conv2d import torch_depthwise
from test_depthwise_separable_conv2d import CUDNN_TF32_TOLERANCE, separable_reference, takes_cudnn_pointwise

DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
LAYOUTS = ["contiguous", "channels_last", "strided"]
SCALE_SHAPES = ["(C,1,1)", "(1,C,1,1)", "(C,)", "()", "(1,)", "(1,1,1)", "(1,1,1,1)"]
NONFINITE = (math.nan, math.inf, -math.inf)


def forward_weight_values(c: dict) -> tuple:
    """Forward convolutions' weights are poisoned only without padding: ATen's float64 CPU convolution multiplies
    padded zeros by the weight (im2col), so a non-finite weight tap on the padding gives NaN there and a finite or
    +-Inf value in a kernel that skips the padding -- an artefact of the reference, not a property of the op."""
    return () if any(c["padding"]) else NONFINITE


# ---- drawing helpers ----

def draw_common(rng: random.Random, device: str) -> dict:
    dtype = rng.choice(list(DTYPES))
    # On CUDA, fp32 runs with TF32 allowed or not (torch.backends.cudnn.allow_tf32); elsewhere the flag is moot.
    tf32 = rng.random() < 0.5 if device == "cuda" and dtype == "float32" else None
    return dict(dtype=dtype, layout=rng.choice(LAYOUTS), tf32=tf32, batch=rng.choice([0, 1, 1, 2, 3]))


def draw_size(rng: random.Random, largest: int) -> int:
    """Spatial sizes, 1 (1x1 planes) drawn often."""
    return 1 if rng.random() < 0.25 else rng.randint(1, largest)


def draw_conv_geometry(rng: random.Random, max_size: int, max_kernel: int) -> dict:
    """A forward convolution's spatial geometry with a positive output: the kernel may exceed the input, the
    padding then makes up the difference."""
    geometry = dict(size=[], kernel=[], stride=[], padding=[], dilation=[])
    for _ in range(2):
        s, k, d = draw_size(rng, max_size), rng.randint(1, max_kernel), rng.choice([1, 1, 1, 2, 3])
        least_padding = max(0, math.ceil((d * (k - 1) + 1 - s) / 2))
        padding = least_padding + rng.choice([0, 0, 0, 1, 2])
        for key, v in zip(geometry, (s, k, rng.choice([1, 1, 2, 3]), padding, d)):
            geometry[key].append(v)
    return geometry


def conv_out(size, kernel, stride, padding, dilation) -> list:
    return [(s + 2 * p - d * (k - 1) - 1) // st + 1 for s, k, st, p, d in zip(size, kernel, stride, padding, dilation)]


# ---- the ops ----

class DepthwiseConv2d:
    name = "depthwise_conv2d"
    tensor_names = ("input", "weight", "bias")

    def draw(self, rng, device):
        c = dict(draw_common(rng, device), channels=rng.randint(1, 4), multiplier=rng.choice([1, 1, 2, 3]),
                 bias=rng.random() < 0.6)
        return dict(c, **draw_conv_geometry(rng, 7, 7))

    def build(self, c, device):
        dtype, m = DTYPES[c["dtype"]], c["multiplier"] * c["channels"]
        x = make_tensor((c["batch"], c["channels"], *c["size"]), dtype, device, c["layout"])
        w = make_tensor((m, 1, *c["kernel"]), dtype, device)
        b = make_tensor((m,), dtype, device) if c["bias"] else None
        return [x, w, b, c["stride"], c["padding"], c["dilation"]]

    def tensors(self, args) -> list:
        """The tensor arguments (None where absent), in tensor_names order."""
        return [a for a in args if not isinstance(a, list)]

    def run(self, args):
        return convops.depthwise_conv2d(*args)

    def expected(self, c, args):
        # No tensor cores in either depthwise kernel: fp32 is compared strictly in both TF32 modes.
        return reference(torch_depthwise, *args), {}, None

    def poison_values(self, c):
        return dict(input=NONFINITE, weight=forward_weight_values(c), bias=NONFINITE)


class DepthwiseSeparableConv2d(DepthwiseConv2d):
    name = "depthwise_separable_conv2d"
    tensor_names = ("input", "depthwise_weight", "depthwise_bias", "pointwise_weight", "pointwise_bias")

    def draw(self, rng, device):
        return dict(super().draw(rng, device), out_channels=rng.randint(1, 6), pointwise_bias=rng.random() < 0.6)

    def build(self, c, device):
        x, dw, db, stride, padding, dilation = super().build(c, device)
        dtype = DTYPES[c["dtype"]]
        pw = make_tensor((c["out_channels"], dw.shape[0], 1, 1), dtype, device)
        pb = make_tensor((c["out_channels"],), dtype, device) if c["pointwise_bias"] else None
        return [x, dw, db, pw, pb, stride, padding, dilation]

    def run(self, args):
        return convops.depthwise_separable_conv2d(*args)

    def expected(self, c, args):
        # The intermediate rounded as ATen stores it (input dtype; TF32 with the pointwise weight under TF32), and
        # cuDNN's pointwise stage on the unfused paths held to a TF32-level tolerance, as in the op's own tests.
        tol = CUDNN_TF32_TOLERANCE if takes_cudnn_pointwise(args) else {}
        return separable_reference(*args), tol, None

    def poison_values(self, c):
        return dict(input=NONFINITE, depthwise_weight=forward_weight_values(c), depthwise_bias=NONFINITE,
                    pointwise_weight=NONFINITE, pointwise_bias=NONFINITE)


class ConvTranspose:
    tensor_names = ("input", "weight", "bias")

    def __init__(self, dims: int):
        self.dims = dims
        self.name = f"conv_transpose{dims}d"

    def draw(self, rng, device):
        c = draw_common(rng, device)
        largest_size, largest_kernel = (5, 5) if self.dims == 2 else (3, 3)
        geometry = dict(spatial=[], kernel=[], stride=[], padding=[], output_padding=[], dilation=[])
        for _ in range(self.dims):
            i, k = draw_size(rng, largest_size), rng.randint(1, largest_kernel)
            s, d = rng.choice([1, 1, 2, 3]), rng.choice([1, 1, 2, 3])
            op = rng.randint(0, max(s, d) - 1)
            largest_padding = ((i - 1) * s + d * (k - 1) + op) // 2  # keeps the output size positive
            for key, v in zip(geometry, (i, k, s, min(rng.randint(0, 3), largest_padding), op, d)):
                geometry[key].append(v)
        channels = 3 if self.dims == 2 else 2
        return dict(c, in_channels=rng.randint(1, channels), out_channels=rng.randint(1, channels),
                    groups=rng.choice([1, 1, 2, 3]), bias=rng.random() < 0.6, **geometry)

    def case(self, c) -> Case:
        keys = ("batch", "in_channels", "out_channels", "spatial", "kernel", "stride", "padding", "output_padding",
                "dilation")
        return Case(*[tuple(c[k]) if isinstance(c[k], list) else c[k] for k in keys], groups=c["groups"],
                    bias=c["bias"])

    def build(self, c, device):
        case = self.case(c)
        return [*case.tensors(DTYPES[c["dtype"]], device, c["layout"]), case.params()]

    def tensors(self, args) -> list:
        return args[:3]

    def run(self, args):
        x, w, b, params = args
        return (convops.conv_transpose2d if self.dims == 2 else convops.conv_transpose3d)(x, w, b, **params)

    def expected(self, c, args):
        x, w, b, params = args
        aten = F.conv_transpose2d if self.dims == 2 else F.conv_transpose3d
        rounded = tf32_active(x)
        # TF32 rounds only the convolution operands; the bias is added in fp32.
        bias64 = None if b is None else b.detach().cpu().double()
        expected = reference(lambda x, w: aten(x, w, bias64, **params), x, w, tf32_inputs=rounded)
        return expected, tf32_accumulation_tolerance(self.case(c), rounded), None

    def poison_values(self, c):
        # ATen's float64 transposed convolution (gemm + col2im) multiplies no implicit zero by a weight, so it is the
        # exact reference for non-finite weights too (out = bias + the sum of x * w over the valid pairs of input
        # element and tap); those have their own test (test_fuzz.py, *_transposed_weights), which draws NaN/Inf into
        # the weight and then into the input and bias, so +-Inf inputs meet +-Inf taps as well.
        return dict(input=NONFINITE, weight=NONFINITE, bias=NONFINITE)


def aten_chain(x, weight, bias, gamma, beta, scale, *, stride, padding, dilation, groups, eps, pool, lo, hi):
    """The op's definition in ATen ops. torch.group_norm rather than F.group_norm: the latter refuses groups of a
    single element (its training-mode batch-size check), which the op serves (GroupNorm of one value is beta)."""
    y = F.conv2d(x, weight, bias, stride, padding, dilation)
    y = torch.group_norm(y, groups, gamma, beta, eps)
    y = y * (scale.reshape(1, -1, 1, 1) if scale.numel() != 1 else scale.reshape(1, 1, 1, 1))
    y = F.max_pool2d(y, pool, pool)
    return torch.clamp(y, lo, hi) if lo is not None or hi is not None else y


class Conv2dGroupNormScaleMaxPoolClamp:
    name = "conv2d_group_norm_scale_max_pool_clamp"
    tensor_names = ("input", "weight", "bias", "gn_weight", "gn_bias", "scale")

    def draw(self, rng, device):
        c = draw_common(rng, device)
        num_groups = rng.randint(1, 4)
        c.update(in_channels=rng.randint(1, 3), num_groups=num_groups,
                 out_channels=num_groups * rng.randint(1, 3), bias=rng.random() < 0.6,
                 gn_weight=rng.random() < 0.7, gn_bias=rng.random() < 0.7, eps=rng.choice([1e-5, 1e-3, 0.1, 1.0]),
                 scale_shape=rng.choice(SCALE_SHAPES))
        c.update(draw_conv_geometry(rng, 7, 5))
        conv_hw = conv_out(c["size"], c["kernel"], c["stride"], c["padding"], c["dilation"])
        c["pool_kernel"] = [rng.randint(1, min(n, 3)) if rng.random() < 0.8 else rng.randint(1, n) for n in conv_hw]
        bound = lambda: round(rng.uniform(-1.5, 1.5), 2)  # noqa: E731
        lo, hi = rng.choice([(None, None), (bound(), None), (None, bound()), (bound(), bound())])
        c.update(clamp_min=lo, clamp_max=hi)
        return c

    def scale_shape(self, c) -> tuple:
        text = c["scale_shape"].replace("C", str(c["out_channels"]))
        return tuple(int(v) for v in text.strip("()").split(",") if v)

    def build(self, c, device):
        dtype, cout = DTYPES[c["dtype"]], c["out_channels"]
        x = make_tensor((c["batch"], c["in_channels"], *c["size"]), dtype, device, c["layout"])
        w = make_tensor((cout, c["in_channels"], *c["kernel"]), dtype, device)
        b = make_tensor((cout,), dtype, device) if c["bias"] else None
        gamma = make_tensor((cout,), dtype, device) if c["gn_weight"] else None
        beta = make_tensor((cout,), dtype, device) if c["gn_bias"] else None
        scale = make_tensor(self.scale_shape(c), dtype, device, low=-2.0, high=2.0)
        return [x, w, b, c["stride"], c["padding"], c["dilation"], c["num_groups"], gamma, beta, c["eps"], scale,
                c["pool_kernel"], c["clamp_min"], c["clamp_max"]]

    def tensors(self, args) -> list:
        return [args[0], args[1], args[2], args[7], args[8], args[10]]

    def run(self, args):
        return convops.conv2d_group_norm_scale_max_pool_clamp(*args)

    def expected(self, c, args):
        """The float64 chain; fp32 strict in both TF32 modes (the CUDA kernel's 3xTF32 is fp32-accurate).

        GroupNorm divides by the group's standard deviation, which amplifies the kernel's fp32 rounding of the
        convolution (its accumulation and the subtraction of the mean) when a group's values nearly coincide: a
        group of two conv outputs 1e-4 apart is a legitimate configuration. The extra absolute allowance is that
        amplified rounding bound, 2 K u S / sqrt(var + eps) |gamma s| with K the reduction length, u the unit
        roundoff of the accumulation and S the largest sum |x||w| + |b| in the group; it is ~0 for well-spread
        groups."""
        x, w, b, stride, padding, dilation, groups, gamma, beta, eps, scale, pool, lo, hi = args
        expected = reference(aten_chain, x, w, b, gamma, beta, scale, stride=stride, padding=padding,
                             dilation=dilation, groups=groups, eps=eps, pool=pool, lo=lo, hi=hi)
        return expected, {}, self.amplified_rounding(c, args, expected.shape)

    def amplified_rounding(self, c, args, out_shape):
        x, w, b, stride, padding, dilation, groups, gamma, beta, eps, scale, *_ = args
        if x.shape[0] == 0:
            return None
        f64 = lambda t: None if t is None else t.detach().cpu().double()  # noqa: E731
        conv = F.conv2d(f64(x), f64(w), f64(b), stride, padding, dilation)
        size = F.conv2d(f64(x).abs(), f64(w).abs(), None if b is None else f64(b).abs(), stride, padding, dilation)
        n, cout = conv.shape[:2]
        var = conv.reshape(n, groups, -1).var(dim=2, unbiased=False)
        biggest = size.reshape(n, groups, -1).amax(dim=2)
        unit = 2.0 ** -53 if x.dtype == torch.float64 else 2.0 ** -24
        reduction = w[0].numel() + 1
        per_group = 2 * reduction * unit * biggest / (var + eps).sqrt()
        per_channel = per_group.repeat_interleave(cout // groups, dim=1)
        factor = (f64(gamma) if gamma is not None else torch.ones(cout, dtype=torch.float64)).abs()
        s = f64(scale).reshape(-1).abs()
        factor = factor * (s if s.numel() != 1 else s.expand(cout))
        bound = (per_channel * factor).nan_to_num(nan=0.0, posinf=0.0)
        return bound.reshape(n, cout, 1, 1).expand(out_shape)

    def poison_values(self, c):
        """The scale gets NaN only. GroupNorm of a group whose values coincide (one element, or a plane of bias-only
        outputs) without gn_bias is 0 in exact arithmetic, but ATen's x * a + b (a = rstd * gamma, b = beta - mean * a)
        leaves a rounding residue of either sign (~1e-15 in float64), which an infinite scale turns into +-Inf in the
        reference; no fp32 evaluation reproduces that sign, and the op's (x - mean) * a + beta gives 0 * Inf = NaN.
        Infinite GroupNorm weights follow ATen's form: NaN where the two infinities of x * a + b cancel, b elsewhere
        (see test_fuzz.test_group_norm_infinite_gamma_follows_aten) -- except on 1x1 conv planes, where ATen's own
        CUDA group_norm (GroupNorm1dForward) computes (x - mean) * rstd * gamma + beta instead and disagrees with the
        CPU reference; the op's float64 CUDA path is that ATen chain, so those planes get NaN weights only."""
        plane = conv_out(c["size"], c["kernel"], c["stride"], c["padding"], c["dilation"])
        gamma = (math.nan,) if plane == [1, 1] else NONFINITE
        return dict(input=NONFINITE, weight=forward_weight_values(c), bias=NONFINITE, gn_weight=gamma,
                    gn_bias=NONFINITE, scale=(math.nan,))


OPS = {op.name: op for op in (DepthwiseConv2d(), DepthwiseSeparableConv2d(), ConvTranspose(2), ConvTranspose(3),
                               Conv2dGroupNormScaleMaxPoolClamp())}


def draw(op_name: str, seed: int, device: str) -> dict:
    return OPS[op_name].draw(random.Random(f"{op_name}/{device}/{seed}"), device)


def poison(op, c: dict, args: list, seed: int, only: tuple | None = None) -> list:
    """Sets 1-4 elements of the op's tensors (of those named in `only`, if given) to NaN, +Inf or -Inf, as the op's
    poison_values allows; returns [(tensor name, index, value)]."""
    rng = random.Random(f"{op.name}/poison/{seed}")
    allowed = op.poison_values(c)
    tensors = [(name, t) for name, t in zip(op.tensor_names, op.tensors(args))
               if allowed[name] and (only is None or name in only) and t is not None and t.numel() > 0]
    done = []
    for _ in range(rng.randint(1, 4) if tensors else 0):
        name, t = rng.choice(tensors)
        index = tuple(rng.randrange(s) for s in t.shape)
        value = rng.choice(allowed[name])
        with torch.no_grad():
            t[index] = value
        done.append((name, index, value))
    return done


# ---- non-dense views of the tensor arguments ----

# How an argument may arrive without being dense. Each keeps the tensor's values (but "broadcast", which keeps its
# first slice along one dimension and expands that back to its shape), and the storage around the view holds NaN,
# so that a kernel that reads an argument as dense sees NaN or other elements.
VIEWS = ("sliced", "column", "offset", "permuted", "broadcast")


def _padded(shape, t: torch.Tensor) -> torch.Tensor:
    return torch.full(shape, math.nan, dtype=t.dtype, device=t.device)


def as_view(t: torch.Tensor, kind: str, rng: random.Random) -> torch.Tensor:
    if t.numel() == 0 or t.dim() == 0:
        kind = "offset"
    if kind == "sliced":  # every other element along one dimension
        d = rng.randrange(t.dim())
        big = _padded([2 * n if i == d else n for i, n in enumerate(t.shape)], t)
        view = big[tuple(slice(None, None, 2) if i == d else slice(None) for i in range(t.dim()))]
    elif kind == "column":  # one column of a bigger tensor
        view = _padded([*t.shape, 3], t)[..., 1]
    elif kind == "permuted" and t.dim() > 1:  # dense, its dimensions in another order in memory
        order = list(range(t.dim()))
        while order == sorted(order):
            rng.shuffle(order)
        view = _padded([t.shape[i] for i in order], t).permute([order.index(i) for i in range(t.dim())])
    elif kind == "broadcast" and any(n > 1 for n in t.shape):  # stride 0 along one dimension
        d = rng.choice([i for i, n in enumerate(t.shape) if n > 1])
        return t.narrow(d, 0, 1).clone().expand(t.shape)
    else:  # dense, at a storage offset
        view = _padded([t.numel() + 7], t)[7:].view(t.shape)
    view.copy_(t)
    return view


def restride(op, args: list, seed: int) -> list:
    """Replaces every tensor argument of the op by a non-dense view (as_view), in place; returns [(name, view)]."""
    rng = random.Random(f"{op.name}/views/{seed}")
    names = {id(t): name for name, t in zip(op.tensor_names, op.tensors(args)) if t is not None}
    done = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and id(a) in names:
            kind = rng.choice(VIEWS)
            args[i] = as_view(a.detach(), kind, rng)
            done.append((names[id(a)], kind))
    return done
