"""One call each of the separable op's round trip through channels-last on the sweep layers it won (H200,
2026-11-28 08:48), for ncu on its own kernels:

    ncu --kernel-name regex:"depthwise_to_nhwc|batched_transpose" --section SpeedOfLight --section Occupancy \\
        --section LaunchStats python3 tools/probe/ncu_round_trip.py

MobileNetV2 c960 -> 160 at 7x7 (fp32, bf16), c384 -> 64 at 14x14 (fp32: planes of 196 floats, 4-way bank
conflicts expected), ConvNeXt-T c768 -> 3072 at 7x7 with a 7x7 filter (fp32), all batch 32."""
import os

import torch

import convops

os.environ["CONVOPS_SEPARABLE_KERNEL"] = "none"          # the convops path is the mixed one
os.environ["CONVOPS_SEPARABLE_MIXED"] = "channels_last"  # through channels-last
convops.set_path_policy("convops")
for c, plane, k, couts, dtype in [(960, 7, 3, 160, torch.float32), (960, 7, 3, 160, torch.bfloat16),
                                  (384, 14, 3, 64, torch.float32), (768, 7, 7, 3072, torch.float32)]:
    x = torch.randn(32, c, plane, plane, device="cuda", dtype=dtype)
    dw, db = torch.randn(c, 1, k, k, device="cuda", dtype=dtype), torch.randn(c, device="cuda", dtype=dtype)
    pw, pb = torch.randn(couts, c, 1, 1, device="cuda", dtype=dtype), torch.randn(couts, device="cuda", dtype=dtype)
    torch.ops.convops.depthwise_separable_conv2d(x, dw, db, pw, pb, [1, 1], [k // 2, k // 2], [1, 1])
torch.cuda.synchronize()
