"""What the GPU's memory sustains for the separable seed's traffic (1 byte read : 2 written), next to the runner's
copy ceiling (1 : 1), which sets the issue's floor:

    python3 tools/probe/traffic_ceiling.py

torch.cat([x, x], 1) into a preallocated output of the seed's size reads the input once and writes the output once,
as the fused op does; a fill writes only. Each is timed as the bench times (do_bench medians, inputs rotated past
the L2). H200, 2026-11-26 21:11 UTC: cat 1.080 ms fp32 / 0.541 ms bf16 (2.98 TB/s), fill 4.67 TB/s (fp32); the
fused kernel moves the same bytes at 3.16 TB/s (fp32, TF32) and 2.72 TB/s (bf16).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench.timing import bench_ms, rotating, rotation_count  # noqa: E402


def main() -> None:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(16, 64, 512, 512, device="cuda", dtype=dtype)
        sets = min(16, rotation_count(x.numel() * x.element_size() * 3, l2))
        inputs = [x] + [torch.randn_like(x) for _ in range(sets - 1)]
        out = torch.empty(16, 128, 512, 512, device="cuda", dtype=dtype)
        cat_ms = bench_ms(rotating(lambda x: torch.cat([x, x], 1, out=out), inputs))
        fill_ms = bench_ms(lambda: out.fill_(1.0))
        moved = (x.numel() + out.numel()) * x.element_size()
        written = out.numel() * x.element_size()
        print(f"{dtype}: cat {cat_ms:.4f} ms ({moved / cat_ms / 1e9:.2f} TB/s over {moved / 1e9:.2f} GB), "
              f"fill {fill_ms:.4f} ms ({written / fill_ms / 1e9:.2f} TB/s)")
        del inputs, x, out


if __name__ == "__main__":
    main()
