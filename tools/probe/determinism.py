"""Repeat a depthwise kernel on the same inputs and count the calls whose output differs from the first: a race that
compute-sanitizer cannot see (the bulk-copy engine's async proxy) shows up here as a rare differing call.

    python tools/probe/determinism.py --kernel bulk --dtype fp32 --calls 160

Shape: the L1-82 seed (16x64x512x512, 3x3, no padding, bias) unless --shape is given. Needs a GPU and a CUDA build
of convops. Found the bulk-copy kernel's race on an H200 (2026-11-26: 1 call in 160 in fp32, 24 outputs of one row).
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
    parser.add_argument("--kernel", default="any", help="CONVOPS_DEPTHWISE_KERNEL (any: the default dispatch)")
    parser.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    parser.add_argument("--calls", type=int, default=160)
    parser.add_argument("--shape", type=int, nargs=4, default=(16, 64, 512, 512), metavar=("N", "C", "H", "W"))
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--padding", type=int, default=0)
    args = parser.parse_args()
    if args.kernel != "any":
        os.environ["CONVOPS_DEPTHWISE_KERNEL"] = args.kernel
    convops.set_path_policy("convops")
    dtype = DTYPES[args.dtype]
    n, c, h, w = args.shape
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
    weight = torch.randn(c, 1, args.k, args.k, device="cuda", dtype=dtype)
    bias = torch.randn(c, device="cuda", dtype=dtype)

    def call():
        return torch.ops.convops.depthwise_conv2d(x, weight, bias, [1, 1], [args.padding] * 2, [1, 1])

    first = call()
    differing = 0
    for i in range(1, args.calls):
        out = call()
        if not torch.equal(out, first):
            differing += 1
            where = (out != first).nonzero()
            print(f"call {i}: {where.shape[0]} outputs differ, first (n, c, y, x): {where[:6].tolist()}, "
                  f"max |difference| {(out.float() - first.float()).abs().max().item():.3g}", flush=True)
    print(f"{torch.cuda.get_device_name()}: kernel {args.kernel}, {args.dtype}, {tuple(args.shape)}: "
          f"{differing} of {args.calls - 1} calls differ from the first")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
