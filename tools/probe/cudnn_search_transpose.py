"""Whether cuDNN's algorithm search (torch.backends.cudnn.benchmark) beats its heuristics on the conv_transpose
shapes of the bench sweep where the op takes ATen's path (issue #6), input and weight in NCHW or channels-last:
do_bench medians, both settings, both layouts, every precision mode. H200 2026-11-28: within 0.995-1.010x.

    python tools/probe/cudnn_search_transpose.py
"""
import torch
import torch.nn.functional as F
from triton.testing import do_bench
from tabulate import tabulate

CASES = [  # name, dims, cin, cout, k, stride, pad, out_pad, input shape
    ("2d c256 h64 k3s2", 2, 256, 128, 3, 2, 1, 1, (8, 256, 64, 64)),
    ("2d c128 h128 k3s2", 2, 128, 64, 3, 2, 1, 1, (8, 128, 128, 128)),
    ("3d c512 d4 k4s2", 3, 512, 256, 4, 2, 1, 0, (8, 512, 4, 4, 4)),
    ("3d c256 d8 k4s2", 3, 256, 128, 4, 2, 1, 0, (8, 256, 8, 8, 8)),
    ("3d c128 d16 k4s2", 3, 128, 64, 4, 2, 1, 0, (8, 128, 16, 16, 16)),
    ("3d c64 d32 k4s2", 3, 64, 32, 4, 2, 1, 0, (8, 64, 32, 32, 32)),
    ("3d t8 h32 k3 s122", 3, 128, 128, 3, (1, 2, 2), 1, (0, 1, 1), (4, 128, 8, 32, 32)),
]
rows = []
for name, dims, cin, cout, k, s, p, op, shape in CASES:
    for mode in ("tf32", "fp32", "bf16"):
        dt = torch.bfloat16 if mode == "bf16" else torch.float32
        torch.backends.cudnn.allow_tf32 = mode != "fp32"
        x = torch.randn(shape, device="cuda", dtype=dt)
        w = torch.randn((cin, cout) + (k,) * dims, device="cuda", dtype=dt) * 0.05
        b = torch.randn(cout, device="cuda", dtype=dt)
        f = F.conv_transpose2d if dims == 2 else F.conv_transpose3d
        cl = torch.channels_last if dims == 2 else torch.channels_last_3d
        xc, wc = x.contiguous(memory_format=cl), w.contiguous(memory_format=cl)
        t = {}
        for bench in (False, True):
            torch.backends.cudnn.benchmark = bench
            for lay, (xx, ww) in (("nchw", (x, w)), ("cl", (xc, wc))):
                fn = lambda: f(xx, ww, b, s, p, op)
                fn(); torch.cuda.synchronize()
                t[(bench, lay)] = do_bench(fn, warmup=25, rep=100, return_mode="median")
        torch.backends.cudnn.benchmark = False
        base = min(t[(False, "nchw")], t[(False, "cl")])
        rows.append([name, mode] + [f"{t[(bb, l)]*1000:.1f}" for bb in (False, True) for l in ("nchw", "cl")] +
                    [f"{base / min(t[(True, 'nchw')], t[(True, 'cl')]):.3f}"])
print(tabulate(rows, headers=["case", "mode", "heur nchw us", "heur cl", "bench nchw", "bench cl", "best heur / best bench"]))
