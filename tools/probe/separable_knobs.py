"""The small-problem separable kernel's tilings (csrc/cuda/depthwise_separable_conv2d_small.cuh), timed against each
other in one process (its tuning switches are read each call), on the batch-1 layers of 7x7 and 14x14 planes:
CONVOPS_SMALL_SEPARABLE_CTAS (the CTAs the plan aims at; its cluster ranks follow; "dflt": the plan's own) x
CONVOPS_SMALL_SEPARABLE_TILE (pixels a CTA at most), against the eager pair and the op's ATen path. do_bench medians
with its L2 flush, best of three; every output checked against eager in the mode's bench tolerance.

    python tools/probe/separable_knobs.py

Found (H200, 2026-11-28). At 05:4x UTC, before the plan took these tilings (it aimed at one CTA an SM in tiles of 8
then), tiles of 16 in clusters of 16 ran the 14x14 layers (EfficientNet-B0 480 -> 80, MobileNetV2 384 -> 64) in
11.97 / 10.98 us in TF32 against the plan's 13.92 / 12.16, and the 7x7 layers were fastest in the plan's tiles of 7
(that run was of this probe's first draft: the same method, CTAs "one an SM" / 264 / 396 / 528 x tiles of the plan /
4 / 16). At 05:51 UTC, with the plan of max_tile_pixels, the plan's own ("ctas dflt tile dflt") read 11.97 / 10.85
us on the 14x14 layers and 11.26 / 14.18 on the 7x7 ones in TF32 (bf16 11.84 / 11.14, 11.26 / 12.70): no further
from each layer's fastest configuration than configurations that make the same plan are from each other (on the 7x7
layers every count aimed at gives clusters of 16; those read up to 6% apart). Needs a GPU and a CUDA build.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tabulate import tabulate  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import convops  # noqa: E402
from bench.timing import MODES  # noqa: E402

SMALL_LAYERS = [(384, 14, 3, 64), (960, 7, 3, 160), (480, 14, 3, 80), (1152, 7, 5, 192)]  # c, plane, k, couts


def problem(batch, c, plane, k, couts, dtype):
    dev = "cuda"
    x = torch.randn(batch, c, plane, plane, device=dev, dtype=dtype)
    dw = torch.randn(c, 1, k, k, device=dev, dtype=dtype) / k
    db = torch.randn(c, device=dev, dtype=dtype)
    pw = torch.randn(couts, c, 1, 1, device=dev, dtype=dtype) / c ** 0.5
    pb = torch.randn(couts, device=dev, dtype=dtype)
    return x, dw, db, pw, pb, k // 2


def op(x, dw, db, pw, pb, pad):
    return torch.ops.convops.depthwise_separable_conv2d(x, dw, db, pw, pb, [1, 1], [pad, pad], [1, 1])


def eager(x, dw, db, pw, pb, pad):
    return F.conv2d(F.conv2d(x, dw, db, 1, pad, 1, x.shape[1]), pw, pb)


def set_env(settings: dict[str, str | None]) -> None:
    for name, value in settings.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def timed_us(fn, rep=60) -> float:
    fn()
    torch.cuda.synchronize()
    return do_bench(fn, warmup=10, rep=rep, return_mode="median") * 1e3


def main() -> None:
    configs = [(c, t) for c in (None, "132", "264", "528") for t in (None, "8", "16")]
    for mode_name in ("tf32", "bf16"):
        mode = MODES[mode_name]
        with mode.active():
            rows = []
            for c, plane, k, couts in SMALL_LAYERS:
                args = problem(1, c, plane, k, couts, mode.dtype)
                expected = eager(*args)
                times = {"eager": min(timed_us(lambda: eager(*args)) for _ in range(3))}
                convops.set_path_policy("aten")
                times["aten"] = min(timed_us(lambda: op(*args)) for _ in range(3))
                os.environ["CONVOPS_SEPARABLE_KERNEL"] = "small"
                convops.set_path_policy("convops")
                for ctas, tile in configs:
                    set_env({"CONVOPS_SMALL_SEPARABLE_CTAS": ctas, "CONVOPS_SMALL_SEPARABLE_TILE": tile})
                    out = op(*args)
                    diff = (out.float() - expected.float()).abs()
                    ok = bool((diff <= mode.atol + mode.rtol * expected.float().abs()).all())
                    name = f"ctas {ctas or 'dflt'} tile {tile or 'dflt'}"
                    times[name] = min(timed_us(lambda: op(*args)) for _ in range(3)) if ok else float("nan")
                set_env({"CONVOPS_SMALL_SEPARABLE_CTAS": None, "CONVOPS_SMALL_SEPARABLE_TILE": None,
                         "CONVOPS_SEPARABLE_KERNEL": None})
                rows.append([f"c{c} {plane}x{plane} k{k} ->{couts}", *(f"{v:.2f}" for v in times.values())])
                headers = ["layer", *times.keys()]
            print(mode_name)
            print(tabulate(rows, headers=headers), flush=True)


if __name__ == "__main__":
    main()
