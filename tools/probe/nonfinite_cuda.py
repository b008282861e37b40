"""Where the CUDA NaN/Inf fuzz cases disagree with the float64 CPU reference, does eager PyTorch on CUDA (same dtype)
agree with convops instead? Prints, per op and kind, how many seeds differ in their NaN/+Inf/-Inf masks from the
reference and from eager CUDA.
    PYTHONPATH=$PWD python tools/probe/nonfinite_cuda.py"""
import sys

sys.path.insert(0, "tests")
import torch  # noqa: E402

import convops  # noqa: E402
import test_fuzz  # noqa: E402
from common_utils import allow_tf32  # noqa: E402
from fuzz_configs import OPS, aten_chain, draw, poison  # noqa: E402

convops.set_path_policy("convops")


def masks(t):
    t = t.detach().cpu().double()
    return torch.stack([torch.isnan(t), torch.isposinf(t), torch.isneginf(t)])


def eager_cuda(op_name, args):
    if op_name.startswith("conv_transpose"):
        x, w, b, params = args
        f = torch.nn.functional.conv_transpose2d if op_name.endswith("2d") else torch.nn.functional.conv_transpose3d
        return f(x, w, b, **params)
    x, w, b, stride, padding, dilation, groups, gamma, beta, eps, scale, pool, lo, hi = args
    return aten_chain(x, w, b, gamma, beta, scale, stride=stride, padding=padding, dilation=dilation, groups=groups,
                      eps=eps, pool=pool, lo=lo, hi=hi)


def survey(op_name, kind, seeds, show=3):
    op = OPS[op_name]
    vs_ref = vs_eager = eager_vs_ref = 0
    for seed in seeds:
        c = draw(op_name, seed, "cuda")
        tf32 = c["tf32"]
        with allow_tf32(torch.backends.cudnn.allow_tf32 if tf32 is None else tf32):
            torch.default_generator.manual_seed(seed)
            args = op.build(c, "cuda")
            if kind == "transposed_weights":
                poison(op, c, args, seed, only=("weight",))
                poison(op, c, args, seed + 1, only=("input", "bias"))
            else:
                poison(op, c, args, seed, only=tuple(n for n in op.tensor_names if n != "weight")
                       if op_name.startswith("conv_t") else None)
            if args[0].shape[0] == 0:
                continue
            ref = op.expected(c, args)[0]
            ours, eager = op.run(args), eager_cuda(op_name, args)
        a, b, e = masks(ours), masks(ref), masks(eager)
        d1, d2, d3 = (a != b).any().item(), (a != e).any().item(), (e != b).any().item()
        vs_ref += d1
        vs_eager += d2
        eager_vs_ref += d3
        if d2 and show:
            show -= 1
            print(f"  seed {seed} {c}\n    ours  {ours.flatten()[:12].tolist()}\n    eager {eager.flatten()[:12].tolist()}"
                  f"\n    ref   {ref.flatten()[:12].tolist()}")
    print(f"{op_name} {kind}: {len(seeds)} seeds; masks differ: ours vs ref {vs_ref}, ours vs eager CUDA {vs_eager}, "
          f"eager CUDA vs ref {eager_vs_ref}", flush=True)


survey("conv2d_group_norm_scale_max_pool_clamp", "nonfinite", [300276, 300343] + list(range(300000, 300400)))
survey("conv_transpose2d", "transposed_weights", range(500000, 500400))
survey("conv_transpose3d", "transposed_weights", range(500000, 500400))
