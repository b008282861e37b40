"""One call each of the depthwise kernels on representative shapes, for `ncu --kernel-name regex:depthwise`:
the seed (row-streaming kernel, fp32 and bf16) and two batch-32 sweep layers (plane-block kernel)."""
import torch

import convops

convops.set_path_policy("convops")
for shape, k, s, dtype in [((4, 64, 512, 512), 3, 1, torch.float32), ((4, 64, 512, 512), 3, 1, torch.bfloat16),
                           ((32, 96, 56, 56), 7, 1, torch.float32), ((32, 144, 56, 56), 3, 2, torch.float32)]:
    x = torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(shape[1], 1, k, k, device="cuda", dtype=dtype)
    torch.ops.convops.depthwise_conv2d(x, w, None, [s, s], [k // 2, k // 2] if shape[2] < 512 else [0, 0], [1, 1])
torch.cuda.synchronize()
