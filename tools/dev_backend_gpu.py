"""Scratch (backend work) for the GPU machine: the five seed models (convops.demo.seed_problems, nn.Module form, seed
shapes, fp32, default TF32 setting) compiled with backend="convops", checked against eager (atol = rtol = 1e-4),
the convops op seen in the profiler, and timed against eager and torch.compile's default (Inductor).

    bash tools/gpu_check.sh --co -q >/dev/null          # build in place (collects the tests, runs none)
    PYTHONPATH=$PWD python3 tools/dev_backend_gpu.py [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter

import torch

import convops
from convops.demo import seed_problems
from convops.fx_passes.report import collect

ATOL = RTOL = 1e-4


def bench_ms(fn) -> float:
    from triton.testing import do_bench
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def profiled_ops(fn) -> list[str]:
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.key for e in prof.key_averages() if e.key.startswith("convops::")})


def run(problem) -> dict:
    torch.manual_seed(0)
    model = problem.make().cuda().eval()
    x = torch.rand(problem.input_shape, device="cuda")
    row = {"problem": problem.name, "op": model.op}
    with torch.no_grad():
        expected = model(x)
        torch._dynamo.reset()
        start = time.perf_counter()
        with collect() as reports:
            compiled = torch.compile(model, backend="convops")
            actual = compiled(x)
        row["convops_compile_s"] = round(time.perf_counter() - start, 1)
        row["replaced"] = dict(sum((r.replaced for r in reports), start=Counter()))
        row["declined"] = [f"{d.pattern}: {d.reason}" for r in reports for d in r.declined]
        row["max_abs_err"] = (actual - expected).abs().max().item()
        row["allclose_1e-4"] = torch.allclose(actual, expected, atol=ATOL, rtol=RTOL)
        row["profiler_ops"] = profiled_ops(lambda: compiled(x))
        del actual
        start = time.perf_counter()
        inductor = torch.compile(model)
        inductor(x)
        row["inductor_compile_s"] = round(time.perf_counter() - start, 1)
        row["eager_ms"] = bench_ms(lambda: model(x))
        row["convops_compiled_ms"] = bench_ms(lambda: compiled(x))
        row["inductor_ms"] = bench_ms(lambda: inductor(x))
    del model, x, expected, compiled, inductor
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="write the rows here too")
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cudnn.allow_tf32="
          f"{torch.backends.cudnn.allow_tf32}, convops CUDA kernels: {convops.has_cuda_kernels()}", flush=True)
    rows = []
    for problem in seed_problems():
        try:
            row = run(problem)
        except Exception as exc:  # noqa: BLE001 - report and go on to the next model
            row = {"problem": problem.name, "error": f"{type(exc).__name__}: {exc}"[:500]}
            torch._dynamo.reset()
            torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"\n{'problem':34} {'ok':>5} {'max err':>9} {'eager':>8} {'convops':>8} {'inductor':>8}  (ms)")
    for r in rows:
        if "error" in r:
            print(f"{r['problem']:34} ERROR {r['error'][:80]}")
            continue
        print(f"{r['problem']:34} {str(r['allclose_1e-4']):>5} {r['max_abs_err']:9.2e} {r['eager_ms']:8.3f} "
              f"{r['convops_compiled_ms']:8.3f} {r['inductor_ms']:8.3f}  ops={r['profiler_ops']}")


if __name__ == "__main__":
    main()
