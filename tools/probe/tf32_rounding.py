"""How does cuDNN round TF32 operands? Compares cuDNN's fp32 convolutions under allow_tf32 with float64 references
whose operands are rounded in each way (to nearest, ties away / truncated), per operand."""
import torch
import torch.nn.functional as F


def rna(t):
    b = t.contiguous().view(torch.int32)
    return torch.bitwise_and(b + 0x1000, ~0x1FFF).view(torch.float32).view_as(t)


def trunc(t):
    return torch.bitwise_and(t.contiguous().view(torch.int32), ~0x1FFF).view(torch.float32).view_as(t)


def same(t):
    return t


torch.backends.cudnn.allow_tf32 = True
cases = {
    "1x1 64->128 (L1-86 pointwise)": (lambda x, w: F.conv2d(x, w), (4, 64, 64, 64), (128, 64, 1, 1)),
    "3x3 8->64 (L2-85 conv)": (lambda x, w: F.conv2d(x, w), (8, 8, 66, 66), (64, 8, 3, 3)),
    "convT2d 64->64 3x7 (L1-65)": (lambda x, w: F.conv_transpose2d(x, w), (2, 64, 40, 40), (64, 64, 3, 7)),
    "convT3d 48->24 3^3 (L1-70)": (lambda x, w: F.conv_transpose3d(x, w), (1, 48, 20, 20, 20), (48, 24, 3, 3, 3)),
}
for name, (fn, xs, ws) in cases.items():
    x = torch.rand(xs, device="cuda")
    w = torch.rand(ws, device="cuda") * 2 - 1
    y = fn(x, w).double()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(x, w)
        torch.cuda.synchronize()
    kernels = sorted({e.key for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA})
    print(f"{name:32s} cuDNN kernels: {kernels}")
    for xr, wr in [(rna, rna), (trunc, rna), (rna, trunc), (trunc, trunc), (same, same), (same, rna), (rna, same)]:
        ref = fn(xr(x).double(), wr(w).double())
        err = (y - ref).abs().max().item()
        print(f"{name:32s} x:{xr.__name__:5s} w:{wr.__name__:5s} max|cudnn - ref| = {err:.2e}  (|y|max {ref.abs().max().item():.1f})")
