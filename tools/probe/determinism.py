"""Repeat a convops kernel on the same inputs and count the calls whose output differs from the first: a race that
compute-sanitizer cannot see (the bulk-copy engine's async proxy) shows up here as a rare differing call.

    python tools/probe/determinism.py --kernel bulk --dtype fp32 --calls 160     # depthwise, the L1-82 seed
    python tools/probe/determinism.py --op separable --dtype bf16                # the L1-86 seed, fused kernel

Shapes: the L1-82 seed (16x64x512x512, 3x3, no padding, bias) for the depthwise op, the L1-86 seed (16x64x512x512,
3x3, padding 1, 64 -> 128, no biases) for the separable one, unless --shape is given. The convops path is forced
("convops" policy); --kernel sets CONVOPS_DEPTHWISE_KERNEL. Needs a GPU and a CUDA build of convops. Found the
depthwise bulk-copy kernel's race on an H200 (2026-11-26: 1 call in 160 in fp32, 24 outputs of one row).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

import convops  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", default="depthwise", choices=("depthwise", "separable"))
    parser.add_argument("--kernel", default="any", help="CONVOPS_DEPTHWISE_KERNEL (any: the default dispatch)")
    parser.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    parser.add_argument("--calls", type=int, default=160)
    parser.add_argument("--shape", type=int, nargs=4, default=(16, 64, 512, 512), metavar=("N", "C", "H", "W"))
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--padding", type=int, default=None, help="default: 0 (depthwise), 1 (separable)")
    parser.add_argument("--out-channels", type=int, default=128, help="separable: the 1x1's output channels")
    args = parser.parse_args()
    if args.kernel != "any":
        os.environ["CONVOPS_DEPTHWISE_KERNEL"] = args.kernel
    convops.set_path_policy("convops")
    dtype = DTYPES[args.dtype]
    n, c, h, w = args.shape
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
    weight = torch.randn(c, 1, args.k, args.k, device="cuda", dtype=dtype)
    bias = torch.randn(c, device="cuda", dtype=dtype)
    pointwise = torch.randn(args.out_channels, c, 1, 1, device="cuda", dtype=dtype) / c ** 0.5
    padding = [args.padding if args.padding is not None else int(args.op == "separable")] * 2

    def call():
        if args.op == "separable":
            return torch.ops.convops.depthwise_separable_conv2d(x, weight, None, pointwise, None, [1, 1], padding,
                                                                [1, 1])
        return torch.ops.convops.depthwise_conv2d(x, weight, bias, [1, 1], padding, [1, 1])

    first = call()
    differing = 0
    for i in range(1, args.calls):
        out = call()
        if not torch.equal(out, first):
            differing += 1
            where = (out != first).nonzero()
            print(f"call {i}: {where.shape[0]} outputs differ, first (n, c, y, x): {where[:6].tolist()}, "
                  f"max |difference| {(out.float() - first.float()).abs().max().item():.3g}", flush=True)
    print(f"{torch.cuda.get_device_name()}: {args.op}, kernel {args.kernel}, {args.dtype}, {tuple(args.shape)}: "
          f"{differing} of {args.calls - 1} calls differ from the first")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
