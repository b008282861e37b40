"""Strict fp32 conv_transpose seeds on the 3xTF32 path (csrc/cuda/conv_transpose_tf32x3.cuh) against eager (cuDNN
FFMA): do_bench ms, max |op - eager|, and how many elements fall outside fp32's 5e-5 + 5e-5 |eager|.

    python tools/probe/tf32x3_strict_fp32.py    # needs a GPU and a CUDA build

Found (H200, 2026-11-28), with a switch of branch tf32x3-conv-transpose (CONVOPS_TF32X3_SUMS, removed when it
landed) that picked how the 3 K-term reduction is summed: L1-65 eager 8.10 ms; the wgmma shift kernel with its
tensor-core sums alone 4.11 ms but 2.5e-5 from eager, past the op tests' fp32 tolerance; the mma.sync kernel with
each k-step's sums added in fp32 14.05 (2.2e-6), with those sums restarted a window of taps 15.24 (2.2e-6), without
them 13.03 (2.5e-5). L1-70 eager 38.91: 12.69 (2.4e-5), 23.35 (1.9e-6), 25.17, 17.40 (2.4e-5). The landed form,
the shift kernel with each k-step's sums added in fp32 (06:13 UTC, the branch at fcb84af): L1-65 5.972 ms against
eager's 8.319, 1.19e-6; L1-70 12.933 against 39.068, 1.55e-6; no element past fp32's tolerance.
"""
import torch
import torch.nn.functional as F
from triton.testing import do_bench

import convops

convops.set_path_policy("convops")
torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(0)
cases = {
    "L1-65": (torch.rand(8, 64, 512, 512, device="cuda") * 2 - 1,
              (torch.rand(64, 64, 3, 7, device="cuda") * 2 - 1) / 37, F.conv_transpose2d, convops.conv_transpose2d),
    "L1-70": (torch.rand(8, 48, 96, 96, 96, device="cuda") * 2 - 1,
              (torch.rand(48, 24, 3, 3, 3, device="cuda") * 2 - 1) / 36, F.conv_transpose3d, convops.conv_transpose3d),
}
for name, (x, w, ref_op, op) in cases.items():
    ref = ref_op(x, w)
    y = op(x, w)
    err = (y - ref).abs()
    outside = (err > 5e-5 + 5e-5 * ref.abs()).sum().item()
    eager_ms = do_bench(lambda: ref_op(x, w), rep=300)
    op_ms = do_bench(lambda: op(x, w), rep=300)
    print(f"{name}: eager {eager_ms:.3f} ms, 3xTF32 {op_ms:.3f} ms ({eager_ms / op_ms:.2f}x), max err "
          f"{err.max().item():.2e} (outputs up to {ref.abs().max().item():.2f}), outside fp32's tolerance: {outside}",
          flush=True)
    del ref, y, err
    torch.cuda.empty_cache()
