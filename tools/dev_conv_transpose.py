"""GPU-side checks of convops::conv_transpose{2,3}d beyond pytest.

    python tools/dev_conv_transpose.py small   # every kernel path once on small shapes (run under compute-sanitizer)
    python tools/dev_conv_transpose.py seeds   # seed shapes: kernel and op time vs eager per mode, error vs eager
    python tools/dev_conv_transpose.py errors  # each rejected call of the tests, one by one (finds a crash)
    python tools/dev_conv_transpose.py accuracy  # long reductions in TF32: our error vs cuDNN's, against fp64
    python tools/dev_conv_transpose.py once    # one TF32 call per seed shape (for ncu)
"""
import sys

import torch
import torch.nn.functional as F

import convops

SMALL = [
    # (dims, x shape, w shape, stride, padding, output_padding, groups, dilation)
    (3, (2, 48, 5, 6, 7), (48, 24, 3, 3, 3), 1, 0, 0, 1, 1),
    (2, (2, 64, 9, 21), (64, 64, 3, 7), 1, 0, 0, 1, 1),
    (2, (1, 6, 7, 9), (6, 5, 3, 2), (2, 3), (1, 0), (1, 2), 2, (1, 2)),
    (3, (1, 5, 3, 4, 5), (5, 7, 7, 7, 7), 1, 2, 0, 1, 3),  # halo too wide for one brick
    (3, (2, 9, 3, 4, 5), (9, 12, 2, 3, 2), 2, 1, 1, 3, 1),
]


def run_small():
    for dims, xs, ws, *params in SMALL:
        conv, aten = (convops.conv_transpose2d, F.conv_transpose2d) if dims == 2 else \
            (convops.conv_transpose3d, F.conv_transpose3d)
        for dtype, tf32 in ((torch.float32, True), (torch.float32, False), (torch.float64, False),
                            (torch.bfloat16, False), (torch.float16, False)):
            for channels_last in (False, True):
                torch.backends.cudnn.allow_tf32 = tf32
                x = torch.randn(xs, device="cuda", dtype=dtype)
                if channels_last:
                    x = x.contiguous(memory_format=torch.channels_last if dims == 2 else torch.channels_last_3d)
                w = torch.randn(ws, device="cuda", dtype=dtype)
                b = torch.randn(ws[1] * params[3], device="cuda", dtype=dtype)
                y = conv(x, w, b, *params)
                ref = aten(x.double(), w.double(), b.double(), *params)
                err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
                print(f"small {dims}d {tuple(xs)} {dtype} tf32={tf32} cl={channels_last}: rel err {err:.2e}")
    torch.cuda.synchronize()


def bench(fn):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def run_seeds():
    print(torch.cuda.get_device_name())
    seeds = [
        ("conv_transpose3d", (8, 48, 96, 96, 96), (48, 24, 3, 3, 3), convops.conv_transpose3d, F.conv_transpose3d),
        ("conv_transpose2d", (8, 64, 512, 512), (64, 64, 3, 7), convops.conv_transpose2d, F.conv_transpose2d),
    ]
    rows = []
    for name, xs, ws, ours, eager in seeds:
        x32 = torch.rand(xs, device="cuda")
        w32 = torch.rand(ws, device="cuda") * 0.1
        for mode in ("tf32", "fp32", "bf16"):
            torch.backends.cudnn.allow_tf32 = mode != "fp32"
            dtype = torch.bfloat16 if mode == "bf16" else torch.float32
            x, w = x32.to(dtype), w32.to(dtype)
            with convops.forced_path("convops"):
                y_ours = ours(x, w)
            y_eager = eager(x, w)
            err = (y_ours.float() - y_eager.float()).abs().max().item()
            close = torch.allclose(y_ours.float(), y_eager.float(), atol=1e-4, rtol=1e-4)
            del y_ours, y_eager
            with convops.forced_path("convops"):
                t_kernel = bench(lambda: ours(x, w))
            t_ours, t_eager = bench(lambda: ours(x, w)), bench(lambda: eager(x, w))
            rows.append((name, mode, t_eager, t_kernel, t_ours, t_eager / t_ours, err, close))
            print(rows[-1], flush=True)
        del x32, w32
        torch.cuda.empty_cache()
    print(f"\n{torch.cuda.get_device_name()} (kernel: the convops kernel forced; op: the \"auto\" path policy)")
    print(f"{'seed':18s} {'mode':5s} {'eager ms':>9s} {'kernel ms':>9s} {'op ms':>9s} {'op speedup':>10s} "
          f"{'max|err|':>9s} 1e-4 (kernel vs eager)")
    for name, mode, te, tk, to, sp, err, close in rows:
        print(f"{name:18s} {mode:5s} {te:9.3f} {tk:9.3f} {to:9.3f} {sp:10.2f} {err:9.2e} {close}")


def run_errors():
    sys.path.insert(0, "tests")
    from test_conv_transpose import _bad_calls
    for i, (op, args, kwargs) in enumerate(_bad_calls("cuda")):
        print(f"bad call {i}: {op.__name__} {[tuple(a.shape) if hasattr(a, 'shape') else a for a in args]} "
              f"{kwargs}", flush=True)
        try:
            op(*args, **kwargs)
            print("  NOT REJECTED", flush=True)
        except RuntimeError as e:
            print("  ok:", str(e).splitlines()[0][:150], flush=True)


def run_accuracy():
    sys.path.insert(0, "tests")
    from common_utils import round_tf32
    torch.backends.cudnn.allow_tf32 = True
    for xs, ws in [((2, 64, 13, 37), (64, 64, 3, 7)), ((2, 48, 5, 7, 9), (48, 24, 3, 3, 3))]:
        conv, aten = (convops.conv_transpose2d, F.conv_transpose2d) if len(xs) == 4 else \
            (convops.conv_transpose3d, F.conv_transpose3d)
        x = torch.empty(xs, dtype=torch.float64).uniform_(-1, 1).float().cuda()
        w = torch.empty(ws, dtype=torch.float64).uniform_(-1, 1).float().cuda()
        ref = aten(round_tf32(x).double(), round_tf32(w).double())
        for name, y in (("convops", conv(x, w)), ("cudnn", aten(x, w))):
            err = (y.double() - ref).abs()
            excess = (err - 5e-5 * ref.abs()).max().item()
            print(f"accuracy {tuple(xs)} {name}: max abs err {err.max().item():.2e}, "
                  f"max(err - 5e-5|ref|) {excess:.2e}, max|ref| {ref.abs().max().item():.1f}")


def run_once():
    convops.set_path_policy("convops")  # the kernel itself, not whatever "auto" times faster
    for xs, ws, conv in [((8, 48, 96, 96, 96), (48, 24, 3, 3, 3), convops.conv_transpose3d),
                         ((8, 64, 512, 512), (64, 64, 3, 7), convops.conv_transpose2d)]:
        conv(torch.rand(xs, device="cuda"), torch.rand(ws, device="cuda"))
    torch.cuda.synchronize()


if __name__ == "__main__":
    {"small": run_small, "seeds": run_seeds, "errors": run_errors, "accuracy": run_accuracy,
     "once": run_once}[sys.argv[1]]()
