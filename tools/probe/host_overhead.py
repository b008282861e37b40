"""Host time per call of each convops op vs its eager counterpart on a tiny input (launch-bound), in us."""
import time

import torch
import torch.nn.functional as F

import convops  # noqa: F401


def per_call_us(fn, n=3000):
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


x = torch.randn(1, 16, 14, 14, device="cuda")
w = torch.randn(16, 1, 3, 3, device="cuda")
pw = torch.randn(32, 16, 1, 1, device="cuda")
with torch.no_grad():
    rows = [
        ("F.conv2d depthwise", per_call_us(lambda: F.conv2d(x, w, None, 1, 1, 1, 16))),
        ("convops depthwise (torch.ops)", per_call_us(lambda: torch.ops.convops.depthwise_conv2d(x, w, None, [1, 1], [1, 1], [1, 1]))),
        ("convops depthwise (.default)", per_call_us(lambda: torch.ops.convops.depthwise_conv2d.default(x, w, None, [1, 1], [1, 1], [1, 1]))),
        ("eager separable pair", per_call_us(lambda: F.conv2d(F.conv2d(x, w, None, 1, 1, 1, 16), pw))),
        ("convops separable", per_call_us(lambda: torch.ops.convops.depthwise_separable_conv2d(x, w, None, pw, None, [1, 1], [1, 1], [1, 1]))),
    ]
for name, us in rows:
    print(f"{name:35s} {us:7.2f} us/call (host, no_grad)")
