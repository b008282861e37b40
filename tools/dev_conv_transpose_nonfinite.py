"""NaN/Inf weight taps in convops::conv_transpose{2,3}d on CUDA (issue #8): the fuzz seeds and what the fix costs.

    python tools/dev_conv_transpose_nonfinite.py seeds     # GPU: seeds 500000-500399 of both ops, transposed_weights
    python tools/dev_conv_transpose_nonfinite.py timing    # GPU: the L1-70 / L1-65 seed shapes, convops path forced
    python tools/dev_conv_transpose_nonfinite.py emulate   # CPU: the fix's arithmetic on the same seeds, no GPU

`timing` gives the op's median time (triton.testing.do_bench) next to eager PyTorch, and a profiler breakdown of
one call into its kernels: the implicit GEMM, the weight transform (incl. the nan_to_num that makes non-finite taps
finite) and conv_transpose_nonfinite_weight_kernel (one short launch when every tap is finite).

`emulate` runs the CUDA kernel's phase/brick arithmetic (tools/dev_conv_transpose_emulate.py, which multiplies
taps by the zeros around the input as the kernel does) on the sanitised weight, casts to the dtype, then adds
x * w of every non-finite tap in the dtype, and checks the NaN/+-Inf masks against the fuzz reference.
"""
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import convops  # noqa: E402

OPS = ("conv_transpose2d", "conv_transpose3d")
FIRST, COUNT = 500_000, 400


def run_seeds():
    import test_fuzz
    print(torch.cuda.get_device_name(), flush=True)
    total = 0
    with convops.forced_path("convops"):
        for op_name in OPS:
            failures = []
            for seed in range(FIRST, FIRST + COUNT):
                try:
                    test_fuzz.check(op_name, seed, "cuda", "transposed_weights")
                except Exception as error:  # a crash counts like a mismatch
                    failures.append((seed, str(error).splitlines()[0][:160]))
            total += len(failures)
            print(f"{op_name}: {len(failures)} of {COUNT} seeds fail", flush=True)
            for seed, message in failures[:5]:
                print(f"  seed {seed}: {message}")
    print(f"failures: {total}")


def kernel_times(fn, calls=20):
    """Mean CUDA time per call of each kernel fn launches."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name] = times.get(event.name, 0.0) + event.device_time_total / calls / 1000  # us -> ms
    return sorted(times.items(), key=lambda item: -item[1])


def bench(fn, rep=300):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=min(50, rep), rep=rep, return_mode="median")


def time_seed(name, x_shape, w_shape, ours, eager):
    x = torch.rand(x_shape, device="cuda")
    w = torch.rand(w_shape, device="cuda") * 0.1
    err = (ours(x, w) - eager(x, w)).abs().max().item()
    t_ours, t_eager = bench(lambda: ours(x, w)), bench(lambda: eager(x, w))
    print(f"\n{name} fp32 (TF32 allowed): convops {t_ours:.3f} ms, eager {t_eager:.3f} ms, "
          f"max|err| vs eager {err:.2e}")
    breakdown = kernel_times(lambda: ours(x, w))
    main = sum(ms for kernel, ms in breakdown if "conv_transpose_kernel" in kernel)
    rest = sum(ms for kernel, ms in breakdown if "conv_transpose_kernel" not in kernel)
    for kernel, ms in breakdown:
        print(f"  {ms * 1000:10.1f} us  {kernel[:110]}")
    print(f"  implicit GEMM {main:.3f} ms; everything else (weight transform incl. nan_to_num, correction launch) "
          f"{rest * 1000:.1f} us = {100 * rest / max(main, 1e-9):.2f}% of it")
    # One NaN tap in the middle of the weight: the slow path (every term of that tap through atomics).
    w_bad = w.clone()
    w_bad.view(-1)[w_bad.numel() // 2] = float("nan")
    t_bad = bench(lambda: ours(x, w_bad), rep=50)
    print(f"  with one NaN tap: {t_bad:.3f} ms; NaN outputs {int(ours(x, w_bad).isnan().sum())} "
          f"(eager: {int(eager(x, w_bad).isnan().sum())})")


def run_timing():
    import torch.nn.functional as F
    print(torch.cuda.get_device_name(), flush=True)
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default for convolutions
    with convops.forced_path("convops"):
        time_seed("L1-70 conv_transpose3d", (8, 48, 96, 96, 96), (48, 24, 3, 3, 3), convops.conv_transpose3d,
                  F.conv_transpose3d)
        torch.cuda.empty_cache()
        time_seed("L1-65 conv_transpose2d", (8, 64, 512, 512), (64, 64, 3, 7), convops.conv_transpose2d,
                  F.conv_transpose2d)


def emulated_op(args):
    """The fixed CUDA path on the CPU: main kernel on sanitised weights, then the correction in the dtype."""
    import dev_conv_transpose_emulate as emu
    x, w, b, params = args
    dtype, dims = x.dtype, x.dim() - 2
    x5, w5 = (x.unsqueeze(2), w.unsqueeze(2)) if dims == 2 else (x, w)
    tiny = 2.0 ** -14 if dtype == torch.float16 else torch.finfo(torch.float32).tiny
    w_main = torch.nan_to_num(w5, 0.0, tiny, -tiny)  # as transform_weight
    lead = [1] if dims == 2 else []  # 2-D is 3-D with depth 1
    stride, padding = lead + list(params["stride"]), [0] * len(lead) + list(params["padding"])
    output_padding = [0] * len(lead) + list(params["output_padding"])
    dilation = lead + list(params["dilation"])
    y = emu.emulate(x5.double(), w_main.double(), None if b is None else b.double(), stride, padding,
                    output_padding, params["groups"], dilation, tile_log2=[0, 1, 2], group_taps=[2, 2, 2]).to(dtype)
    cin_g, cout_g = x.shape[1] // params["groups"], w.shape[1]
    positions = torch.cartesian_prod(*[torch.arange(s) for s in x5.shape[2:]]).view(-1, 3).tolist()
    for index in (~torch.isfinite(w5)).nonzero().tolist():  # conv_transpose_nonfinite_weight_kernel
        ci, co, *k = index
        value = w5[tuple(index)].double()
        for n in range(x5.shape[0]):
            for i in positions:
                o = [i[d] * stride[d] - padding[d] + k[d] * dilation[d] for d in range(3)]
                if all(0 <= o[d] < y.shape[2 + d] for d in range(3)):
                    at = (n, ci // cin_g * cout_g + co, *o)
                    y[at] += (x5[(n, ci, *i)].double() * value).to(dtype)
    return y.squeeze(2) if dims == 2 else y


def run_emulate(fixed=True):
    """test_fuzz.check's steps for the CUDA seeds, with the tensors on the CPU and the op emulated."""
    import test_fuzz
    from fuzz_configs import DTYPES, OPS as FUZZ_OPS, draw, poison
    total = 0
    for op_name in OPS:
        op = FUZZ_OPS[op_name]
        failures = []
        for seed in range(FIRST, FIRST + COUNT):
            config = draw(op_name, seed, "cuda")
            try:
                torch.default_generator.manual_seed(seed)
                args = op.build(config, "cpu")
                poison(op, config, args, seed, only=("weight",))
                poison(op, config, args, seed + 1, only=("input", "bias"))
                expected, tol, extra = op.expected(config, args)
                out = emulated_op(args) if fixed else emulated_unfixed_op(args)
                test_fuzz.compare(out, expected, DTYPES[config["dtype"]], tol, extra)
            except Exception as error:
                failures.append((seed, config["dtype"], str(error).splitlines()[0][:140]))
        total += len(failures)
        print(f"{op_name}: {len(failures)} of {COUNT} emulated seeds fail", flush=True)
        for failure in failures[:5]:
            print("  ", *failure)
    print(f"failures: {total}")


def emulated_unfixed_op(args):
    """The kernel before the fix: original weights against the zero-filled bricks."""
    import dev_conv_transpose_emulate as emu
    x, w, b, params = args
    dims = x.dim() - 2
    x5, w5 = (x.unsqueeze(2), w.unsqueeze(2)) if dims == 2 else (x, w)
    lead = [1] if dims == 2 else []
    y = emu.emulate(x5.double(), w5.double(), None if b is None else b.double(), lead + list(params["stride"]),
                    [0] * len(lead) + list(params["padding"]), [0] * len(lead) + list(params["output_padding"]),
                    params["groups"], lead + list(params["dilation"]), tile_log2=[0, 1, 2],
                    group_taps=[2, 2, 2]).to(x.dtype)
    return y.squeeze(2) if dims == 2 else y


if __name__ == "__main__":
    {"seeds": run_seeds, "timing": run_timing, "emulate": run_emulate,
     "emulate_unfixed": lambda: run_emulate(fixed=False)}[sys.argv[1]]()
