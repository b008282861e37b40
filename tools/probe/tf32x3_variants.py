"""Strict fp32 conv_transpose seeds under each 3xTF32 variant of this branch (CONVOPS_TF32X3_SUMS: shift-sums (the
default: the wgmma shift kernel with fp32 k-step sums), shift, step, window, none), against eager (cuDNN FFMA):
do_bench ms and max |op - eager|. Found (H200, 2026-11-28 ~05:00 UTC):
L1-65 eager 8.10 ms, step 14.05 (err 2.2e-6), window 15.24 (2.2e-6), none 13.03 (2.5e-5), shift 4.11 (2.5e-5);
L1-70 eager 38.91, step 23.35 (1.9e-6), window 25.17, none 17.40 (2.4e-5), shift 12.69 (2.4e-5).
shift-sums (H200, 2026-11-28 06:13 UTC, this branch at fcb84af built with CONVOPS_OPS=conv_transpose, the loop cut
to that variant): L1-65 5.972 ms against eager's 8.319 (1.39x), max err 1.19e-6 on outputs up to 1.94, none past
fp32's 5e-5 + 5e-5 |x|; L1-70 12.933 against 39.068 (3.02x), 1.55e-6, none past. The branch's tests and
compute-sanitizer have not run on this variant yet (the session's device time ran out).

    python tools/probe/tf32x3_variants.py      # needs a GPU and a CUDA build of this branch
"""
import os, torch, torch.nn.functional as F
from triton.testing import do_bench
import convops
convops.set_path_policy("convops")
torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(0)
cases = {"L1-65": (torch.rand(8, 64, 512, 512, device="cuda") * 2 - 1, (torch.rand(64, 64, 3, 7, device="cuda") * 2 - 1) / 37, F.conv_transpose2d, convops.conv_transpose2d),
         "L1-70": (torch.rand(8, 48, 96, 96, 96, device="cuda") * 2 - 1, (torch.rand(48, 24, 3, 3, 3, device="cuda") * 2 - 1) / 36, F.conv_transpose3d, convops.conv_transpose3d)}
for name, (x, w, ref_op, op) in cases.items():
    ref = ref_op(x, w)
    scale = ref.abs().max().item()
    print(name, "eager", f"{do_bench(lambda: ref_op(x, w), rep=300):.3f} ms", flush=True)
    for v in ("shift-sums", "shift", "step", "none"):
        os.environ["CONVOPS_TF32X3_SUMS"] = v
        y = op(x, w)
        err = ((y - ref).abs().max().item())
        viol = ((y - ref).abs() > 5e-5 + 5e-5 * ref.abs()).sum().item()
        ms = do_bench(lambda: op(x, w), rep=300)
        print(f"  {v:7s} {ms:.3f} ms  max err {err:.2e} (scale {scale:.2f})  >5e-5 tol vs eager: {viol}", flush=True)
    del ref, y
    torch.cuda.empty_cache()
