"""Does cuDNN / cuBLAS round TF32 ties to even or away from zero? Every input element is an exact tie (low 13 bits
0x1000), every weight an exact TF32 value, so the two rules give outputs apart by whole TF32 ulps of the input.
    python tools/probe/tf32_ties.py"""
import torch
import torch.nn.functional as F


def ties(shape):
    b = torch.randint(0, 1 << 10, shape, device="cuda", dtype=torch.int32)  # the 10 explicit TF32 mantissa bits
    b = (b << 13) | 0x1000 | (127 << 23)               # value in [1, 2) with a tie in the low 13 bits
    x = b.view(torch.float32)
    return torch.where(torch.rand(shape, device="cuda") < 0.5, -x, x)


def tf32_exact(shape):
    w = torch.randn(shape, device="cuda")
    return (w.view(torch.int32) & ~0x1FFF).view(torch.float32)


def rne(t):
    b = t.view(torch.int32)
    return ((b + 0xFFF + ((b >> 13) & 1)) & ~0x1FFF).view(torch.float32)


def rna(t):
    return ((t.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


torch.backends.cudnn.allow_tf32 = True
torch.backends.cuda.matmul.allow_tf32 = False
cases = {
    "conv2d 1x1 64->128 (16,64,128,128)": (lambda x, w: F.conv2d(x, w), (16, 64, 128, 128), (128, 64, 1, 1)),
    "conv2d 1x1 64->128 (4,64,64,64)": (lambda x, w: F.conv2d(x, w), (4, 64, 64, 64), (128, 64, 1, 1)),
    "conv2d 3x3 8->64 (L2-85)": (lambda x, w: F.conv2d(x, w), (128, 8, 128, 128), (64, 8, 3, 3)),
    "conv2d 3x3 8->64 small": (lambda x, w: F.conv2d(x, w), (8, 8, 66, 66), (64, 8, 3, 3)),
    "convT2d 64->64 3x7 (L1-65 shape/4)": (lambda x, w: F.conv_transpose2d(x, w), (2, 64, 256, 256), (64, 64, 3, 7)),
    "convT3d 48->24 3^3 (L1-70 shape/4)": (lambda x, w: F.conv_transpose3d(x, w), (2, 48, 48, 48, 48),
                                            (48, 24, 3, 3, 3)),
    "convT2d s2 op1 (UNet)": (lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1),
                              (4, 64, 64, 64), (64, 32, 3, 3)),
}
for name, (fn, xs, ws) in cases.items():
    torch.manual_seed(0)
    x, w = ties(xs), tf32_exact(ws)
    y = fn(x, w).double()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(x, w)
        torch.cuda.synchronize()
    kernels = sorted({e.key[:70] for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA})
    errs = {r.__name__: (y - fn(r(x).double(), w.double())).abs().max().item() for r in (rne, rna)}
    print(f"{name:36s} even {errs['rne']:.2e} away {errs['rna']:.2e}  {kernels}", flush=True)
