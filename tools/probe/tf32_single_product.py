"""Which rounding does cuDNN's TF32 1x1 convolution apply to each operand? With one non-zero input channel every
output is a single product, exact in fp32 once both operands have 11-bit significands, so each output names the
rounding of both operands. Then the L1-86 seed's pointwise step: eager vs float64 models on the real data.
    python tools/probe/tf32_single_product.py"""
import itertools

import torch
import torch.nn.functional as F


def bits(t):
    return t.contiguous().view(torch.int32)


def from_bits(b, like):
    return b.view(torch.float32).view_as(like)


def rn(t):  # to nearest, ties to even
    b = bits(t)
    lsb = torch.bitwise_and(torch.bitwise_right_shift(b, 13), 1)
    return from_bits(torch.bitwise_and(b + 0xFFF + lsb, ~0x1FFF), t)


def rna(t):  # to nearest, ties away
    return from_bits(torch.bitwise_and(bits(t) + 0x1000, ~0x1FFF), t)


def rz(t):  # truncated
    return from_bits(torch.bitwise_and(bits(t), ~0x1FFF), t)


def fp32(t):
    return t


def bf16(t):
    return t.bfloat16().float()


def fp16(t):
    return t.half().float()


MODELS = [rn, rna, rz, fp32, bf16, fp16]


def kernels_of(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.key for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA})


torch.backends.cudnn.allow_tf32 = True
torch.manual_seed(0)
for shape in [(4, 64, 64, 64), (16, 64, 128, 128)]:
    x = torch.zeros(shape, device="cuda")
    x[:, 0] = torch.randn(shape[0], *shape[2:], device="cuda")
    w = torch.randn(128, 64, 1, 1, device="cuda")
    y = F.conv2d(x, w)
    print(shape, "kernels:", kernels_of(lambda: F.conv2d(x, w)))
    for fx, fw in itertools.product(MODELS, MODELS):
        model = (fx(x[:, :1]).double() * fw(w[:, :1]).double().view(1, 128, 1, 1)).float()
        exact = (model == y).double().mean().item()
        if exact > 0.01:
            print(f"  x:{fx.__name__:5s} w:{fw.__name__:5s} exact on {exact:.4f} of outputs")

# The L1-86 pointwise step on the real data (first 2 images of the seed batch).
from torch import nn  # noqa: E402
dw = nn.Conv2d(64, 64, 3, padding=1, groups=64, bias=False).cuda()
pw = nn.Conv2d(64, 128, 1, bias=False).cuda()
x = torch.randn(16, 64, 512, 512, device="cuda")
with torch.no_grad():
    d = dw(x)
    y = pw(d)
    print("L1-86 pointwise kernels:", kernels_of(lambda: pw(d)))
    d2, y2, w = d[:2].double(), y[:2].double(), pw.weight.detach()
    for fx, fw in itertools.product([rn, rna, rz, fp32], [rn, rna, rz, fp32]):
        ref = F.conv2d(fx(d[:2]).double(), fw(w).double())
        err = (y2 - ref).abs()
        ok = torch.isclose(y2, ref, rtol=1e-4, atol=1e-4).all().item()
        print(f"  x:{fx.__name__:5s} w:{fw.__name__:5s} max|eager-ref| {err.max().item():.2e} "
              f"mean {err.mean().item():.2e} allclose(1e-4) {ok}")
    try:
        import convops  # noqa: F401
        ours = torch.ops.convops.depthwise_separable_conv2d(x, dw.weight, None, pw.weight, None, [1, 1], [1, 1], [1, 1])
        err = (ours.double() - y.double()).abs()
        tol = 1e-4 + 1e-4 * y.double().abs()
        print(f"convops vs eager: max {err.max().item():.2e}, elements over tolerance {(err > tol).sum().item()}")
        ref = F.conv2d(rn(d[:2]).double(), rn(pw.weight.detach()).double())
        print(f"convops vs RN model (2 images): max {(ours[:2].double() - ref).abs().max().item():.2e}")
    except Exception as e:  # noqa: BLE001
        print("convops:", e)
