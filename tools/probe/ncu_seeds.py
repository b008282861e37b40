r"""One call of issue #5's seed kernels at the seed size (16 x 64 x 512 x 512, 3 x 3), for ncu:

    ncu --clock-control none --kernel-name regex:'depthwise|separable' --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section Occupancy --section LaunchStats \
        --metrics regex:'smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
        python tools/probe/ncu_seeds.py dws bf16      # dw | dws, fp32 | tf32 | bf16

(the sections of the run behind bench/RESULTS.md's ncu table)

The convops kernel is forced. Found (H200, 2026-11-28 04:23 UTC): bench/RESULTS.md, "Issue #5's cases in one full
run". Needs a GPU and a CUDA build.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

import convops  # noqa: E402

op, mode = sys.argv[1], sys.argv[2]
torch.backends.cudnn.allow_tf32 = mode == "tf32"  # the kernels follow the convolution flag
dtype = torch.bfloat16 if mode == "bf16" else torch.float32
convops.set_path_policy("convops")
x = torch.randn(16, 64, 512, 512, device="cuda", dtype=dtype)
depthwise_weight = torch.randn(64, 1, 3, 3, device="cuda", dtype=dtype)
if op == "dw":  # L1-82: no padding
    torch.ops.convops.depthwise_conv2d(x, depthwise_weight, None, [1, 1], [0, 0], [1, 1])
else:  # L1-86: padding 1, 64 -> 128
    pointwise_weight = torch.randn(128, 64, 1, 1, device="cuda", dtype=dtype)
    torch.ops.convops.depthwise_separable_conv2d(x, depthwise_weight, None, pointwise_weight, None, [1, 1], [1, 1],
                                                 [1, 1])
torch.cuda.synchronize()
