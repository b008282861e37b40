"""The demo (python -m convops.demo) at reduced sizes on the CPU, and the benchmark's case definitions, floor
arithmetic, runner and report on the CPU (no GPU or triton needed)."""
import gc
import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import convops
from convops import demo, path_choice
from convops.path_choice import SEPARABLE_MIXED_LAYOUT, SEPARABLE_POINTWISE

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/ lives beside the package, not inside it
from bench import cases as bench_cases  # noqa: E402
from bench import floors, provenance, quiet, report, runner, timing  # noqa: E402


# ---------------------------------------------------------------------------------------------------------- demo ----

def test_demo_reduced_cpu_matches_pytorch():
    rows = demo.run_demo("cpu")
    assert [r.op for r in rows] == ["depthwise_conv2d", "depthwise_separable_conv2d", "conv_transpose2d",
                                    "conv_transpose3d", "conv2d_group_norm_scale_max_pool_clamp"]
    for r in rows:
        assert r.status == "pass", (r.problem, r.status, r.max_error, r.note)
        assert r.max_error <= demo.ATOL


def test_demo_main_prints_table(capsys):
    assert demo.main(["--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "5/5 problems match PyTorch" in out
    for name in ("L1-82", "L1-86", "L1-65", "L1-70", "L2-85"):
        assert name in out


def test_demo_reports_a_wrong_result_as_fail(monkeypatch):
    problem = demo.seed_problems(reduced=True)[0]
    model_cls = type(problem.make())
    monkeypatch.setattr(model_cls, "convops_forward", lambda self, x: self.forward(x) + 1e-2)
    row = demo.run_problem(problem, torch.device("cpu"), timed=False)
    assert row.status == "FAIL" and row.max_error == pytest.approx(1e-2, rel=1e-3)


def test_demo_modules_equal_their_pytorch_forms():
    """The convops_forward of every module computes the module's forward (the bench relies on it)."""
    for problem in demo.seed_problems(reduced=True):
        torch.manual_seed(0)
        model = problem.make().double()
        x = torch.rand(problem.input_shape, dtype=torch.float64)
        with torch.no_grad():
            torch.testing.assert_close(model.convops_forward(x), model(x))


def test_seed_shapes_are_the_seed_problems():
    shapes = [p.input_shape for p in demo.seed_problems()]
    assert shapes == [(16, 64, 512, 512), (16, 64, 512, 512), (8, 64, 512, 512), (8, 48, 96, 96, 96),
                      (128, 8, 128, 128)]


# ------------------------------------------------------------------------------------------------------ bench ----

def _meta_output(case):
    with torch.device("meta"):
        model = case.make()
        return model, model(torch.empty(case.input_shape))


def test_bench_cases_are_well_formed():
    cases = bench_cases.all_cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names))
    assert {c.group for c in cases} == {"seed", "mobilenet_v2", "efficientnet_b0", "convnext_t", "unet", "vae3d",
                                        "gn_block"}
    assert all(re.fullmatch(r"[\w.\-]+/[\w.\-]+", n) for n in names)
    quick = bench_cases.select(cases, quick=True)
    assert len([c for c in quick if c.is_seed]) == 5
    assert {c.group for c in quick} == {c.group for c in cases}      # quick touches every family
    assert len(quick) == len(bench_cases.QUICK_SWEEP) + 5
    for case in cases:
        model, out = _meta_output(case)
        assert out.numel() > 0, case.name
        assert floors.flops(model, case.input_shape) > 0
        assert floors.min_bytes(model, case.input_shape, out.shape, 4) > 0


def test_bench_source_digest_names_the_sources(tmp_path):
    """The digest a run records (bench/provenance.py) follows the package's source files and nothing else."""
    (tmp_path / "convops" / "csrc" / "cuda").mkdir(parents=True)
    (tmp_path / "convops" / "__pycache__").mkdir()
    (tmp_path / "setup.py").write_text("setup()\n")
    (tmp_path / "convops" / "ops.py").write_text("x = 1\n")
    kernel = tmp_path / "convops" / "csrc" / "cuda" / "k.cuh"
    kernel.write_text("// a kernel\n")
    assert provenance.source_files(str(tmp_path)) == ["convops/csrc/cuda/k.cuh", "convops/ops.py", "setup.py"]
    digest = provenance.source_digest(str(tmp_path))
    assert re.fullmatch(r"[0-9a-f]{12}", digest)
    (tmp_path / "convops" / "__pycache__" / "ops.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "convops" / "_C.so").write_bytes(b"\0")
    (tmp_path / "notes.md").write_text("not a source\n")
    assert provenance.source_digest(str(tmp_path)) == digest
    kernel.write_text("// a kernel, changed\n")
    assert provenance.source_digest(str(tmp_path)) != digest


def test_bench_git_revision_marks_changed_tracked_files(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("needs git")
    assert provenance.git_revision(str(tmp_path)) is None  # not a checkout
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    (tmp_path / "setup.py").write_text("setup()\n")
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "setup.py"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "c"], check=True)
    clean = provenance.git_revision(str(tmp_path))
    assert re.fullmatch(r"[0-9a-f]{7,40}", clean)
    (tmp_path / "untracked.py").write_text("")
    assert provenance.git_revision(str(tmp_path)) == clean
    (tmp_path / "setup.py").write_text("setup(name='x')\n")
    assert provenance.git_revision(str(tmp_path)) == clean + "-dirty"


def test_bench_case_selection():
    cases = bench_cases.all_cases()
    assert [c.name for c in bench_cases.select(cases, "L1-70")] == ["seed/L1-70_conv_transpose3d"]
    convnext = bench_cases.select(cases, r"^convnext_t/dw_b(1|32)_")
    assert len(convnext) == 8 and all(c.make().conv.kernel_size == (7, 7) for c in convnext)


def test_bench_real_layer_configs():
    """Spot checks of the published architectures (torchvision MobileNetV2 / EfficientNet-B0, ConvNeXt-T)."""
    by_name = {c.name: c for c in bench_cases.all_cases()}
    mb = by_name["mobilenet_v2/dws_b32_c144_h56_k3_s2_o32"].make()
    assert (mb.depthwise.stride, mb.depthwise.padding, mb.depthwise.groups) == ((2, 2), (1, 1), 144)
    assert mb.pointwise.out_channels == 32 and mb.depthwise.bias is None
    eff = by_name["efficientnet_b0/dw_b32_c1152_h7_k5_s1"].make()
    assert eff.conv.kernel_size == (5, 5) and eff.conv.padding == (2, 2)
    cnx = by_name["convnext_t/dws_b1_c768_h7_k7_s1_o3072"].make()
    assert cnx.depthwise.padding == (3, 3) and cnx.depthwise.bias is not None and cnx.pointwise.out_channels == 3072
    up = by_name["unet/convT2d_b8_c256-128_h64_k3_s2_p1_op1"]
    _, out = _meta_output(up)
    assert tuple(out.shape) == (8, 128, 128, 128)         # stride 2 with output_padding doubles the size exactly


def test_bench_floors_match_the_anchor_arithmetic():
    """../shared/anchors/README.md: bytes and GFLOP of the five seeds."""
    expected = {"L1-82": (2.14, 4.8), "L1-86": (3.22, 73.6), "L1-65": (1.08, 360.8), "L1-70": (2.08, 440.3),
                "L2-85": (0.10, 18.7)}
    for case in bench_cases.select(bench_cases.all_cases(), "^seed/"):
        model, out = _meta_output(case)
        gb = floors.min_bytes(model, case.input_shape, out.shape, 4) / 1e9
        gflop = floors.flops(model, case.input_shape) / 1e9
        want_gb, want_gflop = expected[case.name.split("/")[1][:5]]
        assert gb == pytest.approx(want_gb, abs=0.01) and gflop == pytest.approx(want_gflop, rel=2e-3), case.name
    ceilings = floors.Ceilings(4.25e12, {"tf32": 395e12, "fp32": 60e12, "bf16": 790e12})
    ms, bound = ceilings.floor_ms(int(1.08e9), int(360.8e9), "tf32")
    assert bound == "compute" and ms == pytest.approx(0.913, rel=1e-2)


def test_rotation_exceeds_l2():
    l2 = 50 * 2**20
    assert timing.rotation_count(2 * 2**30, l2) == 1
    n = timing.rotation_count(150_000, l2)
    assert n * 150_000 >= 3 * l2
    assert timing.rotation_count(1, l2) == 4096


def test_check_tolerances():
    mode = timing.MODES["fp32"]
    ref = torch.randn(100)
    assert timing.check(ref + 5e-5, ref, mode).ok
    assert not timing.check(ref + 1e-2, ref, mode).ok
    nan = ref.clone()
    nan[3] = float("nan")
    assert not timing.check(nan, ref, mode).ok
    assert not timing.check(ref[:50], ref, mode).ok


def _cpu_plan(columns):
    return runner.Plan(columns=columns, autotune="none", deadline=math.inf, budget_s=math.inf, l2_bytes=0,
                       ceilings=floors.Ceilings(1e12, {"tf32": 1e14, "fp32": 1e13, "bf16": 2e14}))


def test_bench_runner_on_cpu(tmp_path):
    """The per-case runner end to end on the CPU with a tiny case: correctness check, timing, speedup, floor,
    a compiled column (backend="eager", no C++ toolchain needed), and the report files."""
    case = bench_cases.Case("seed/tiny_dws", lambda: demo.DepthwiseSeparableConv2d(4, 8, 3, padding=1),
                            (2, 4, 9, 9))
    plan = _cpu_plan(("eager", "max_autotune", "convops_kernel", "convops_op", "convops_backend"))
    plan.backend, plan.backend_note = "eager", ""
    times = iter([2.0, 1.6, 1.0, 0.5])
    record = runner.run_case(case, timing.MODES["tf32"], plan, device="cpu", timer=lambda fn: (fn(), next(times))[1])
    cols = record["columns"]
    assert cols["eager"]["status"] == "ok" and cols["convops_op"]["status"] == "ok", cols
    assert cols["convops_kernel"]["status"] == "ok", cols
    assert cols["max_autotune"]["status"] == "skipped"         # --autotune none
    assert cols["convops_op"]["max_error"] < 1e-5
    assert record["speedup"] == pytest.approx(2.0 / 1.0) and record["best_baseline"] == "eager"
    assert record["kernel_speedup"] == pytest.approx(2.0 / 1.6)
    assert record["backend_speedup"] == pytest.approx(4.0)
    assert record["floor_ms"] > 0 and record["floor_fraction"] == pytest.approx(record["floor_ms"] / 1.6)

    meta = {"card": "cpu", "torch": torch.__version__, "date": "now"}
    report.write_json(str(tmp_path / "r.json"), meta, [record])
    assert json.loads((tmp_path / "r.json").read_text())["results"][0]["case"] == "seed/tiny_dws"
    report.write_markdown(str(tmp_path / "r.md"), meta, [record], plan.columns)
    text = (tmp_path / "r.md").read_text()
    assert "seed/tiny_dws" in text and "2.00x" in text
    assert "seeds [tf32]: 2.00x" in report.summary([record])


@pytest.mark.cuda
def test_bench_op_column_records_its_decisions():
    """On CUDA the op column keeps every "auto" decision of its first call (problem, path, each path's median) as
    convops.path_choices() prints them; the other columns have none."""
    case = bench_cases.Case("seed/tiny_dws", lambda: demo.DepthwiseSeparableConv2d(4, 8, 3, padding=1),
                            (2, 4, 9, 9))
    with convops.forced_path("auto"):  # the bench runs under the default policy; tests/conftest.py forces "convops"
        record = runner.run_case(case, timing.MODES["fp32"], _cpu_plan(("eager", "convops_op")), device="cuda",
                                 timer=lambda fn: 1.0)
    op = record["columns"]["convops_op"]
    assert op["status"] == "ok" and op["decisions"], op
    assert any(d.startswith("convops::depthwise_separable_conv2d cuda:0 ") for d in op["decisions"]), op
    assert all(path_choice._LINE.fullmatch(d) for d in op["decisions"]), op
    assert record["columns"]["eager"]["decisions"] is None


def test_bench_runner_reports_wrong_and_missing(monkeypatch):
    case = bench_cases.Case("gn_block/tiny", lambda: demo.ConvGroupNormScaleMaxPoolClamp(
        3, 8, 3, 4, 2, None, 0.5, scale_init="negative"), (2, 3, 10, 10))
    plan = _cpu_plan(("eager", "convops_op", "convops_backend"))
    plan.backend, plan.backend_note = None, "n/a (no convops.backend)"
    monkeypatch.setattr(demo.ConvGroupNormScaleMaxPoolClamp, "convops_forward", lambda self, x: self(x) * 1.5)
    record = runner.run_case(case, timing.MODES["fp32"], plan, device="cpu", timer=lambda fn: 1.0)
    assert record["columns"]["convops_op"]["status"] == "fail" and record["columns"]["convops_op"]["ms"] is None
    assert record["columns"]["convops_backend"]["status"] == "n/a"
    assert record["speedup"] is None
    assert any("FAIL" in line or "fail" in line for line in report.problems([record]))

    monkeypatch.setattr(demo, "op_unavailable", lambda op, device: "op not built")
    monkeypatch.setattr("bench.columns.op_unavailable", lambda op, device: "op not built")
    record = runner.run_case(case, timing.MODES["fp32"], plan, device="cpu", timer=lambda fn: 1.0)
    assert record["columns"]["convops_op"]["status"] == "missing"
    assert "missing" in report.table([record], plan.columns)


def test_bench_chart(tmp_path):
    pytest.importorskip("matplotlib")
    records = [{"case": "seed/a", "group": "seed", "mode": m, "speedup": s, "columns": {}}
               for m, s in (("tf32", 2.0), ("bf16", 0.8))]
    assert report.write_chart(str(tmp_path / "c.png"), records, "t") is None
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_bench_autotune_order_and_budget():
    """max-autotune runs last, tf32 first, seeds before the sweep, transposed convs (cheap to autotune) first; the
    --quick policy keeps it to the seeds in tf32 mode; work order puts every seed mode before the sweep."""
    from bench import run as bench_run
    args = bench_run.parse_args([])
    cases = bench_cases.all_cases()
    items = bench_run.work_items(cases, args)
    assert len(items) == 3 * len(cases) and all(c.is_seed for c, _ in items[:15])
    plan = runner.Plan(columns=args.columns, autotune=args.autotune, deadline=math.inf, budget_s=args.budget_s,
                       l2_bytes=0, ceilings=None)
    tuned = bench_run.autotune_items(items, plan)
    head = [(c.name.split("/")[1][:5], m.name) for c, m in tuned[:5]]
    assert head == [("L1-65", "tf32"), ("L1-70", "tf32"), ("L1-82", "tf32"), ("L1-86", "tf32"), ("L2-85", "tf32")]
    assert len(tuned) == 15 + len(bench_cases.QUICK_SWEEP)
    quick = bench_run.parse_args(["--quick"])
    plan.autotune = quick.autotune
    assert len(bench_run.autotune_items(bench_run.work_items(bench_cases.select(cases, quick=True), quick), plan)) == 5
    plan.deadline = 0.0  # budget spent: compiled columns give way, eager and the op still run
    case, mode = items[0]
    assert plan.skip_reason("max_autotune", case, mode) == "skipped (time budget)"
    assert plan.skip_reason("inductor", case, mode) == "skipped (time budget)"
    assert plan.skip_reason("convops_op", case, mode) is None


def test_bench_shards_split_the_work_into_interleaved_shares():
    """--shard K/N: N disjoint shares whose union is the whole run, each with its part of the seeds and modes."""
    from bench import run as bench_run
    cases = bench_cases.all_cases()
    whole = bench_run.work_items(cases, bench_run.parse_args([]))
    shares = [bench_run.work_items(cases, bench_run.parse_args(["--shard", f"{k}/4"])) for k in range(4)]
    names = [[(c.name, m.name) for c, m in share] for share in shares]
    assert sorted(sum(names, [])) == sorted((c.name, m.name) for c, m in whole)
    assert all(share[0][0].is_seed and {m.name for _, m in share} == {"tf32", "fp32", "bf16"} for share in shares)
    for bad in ("4/4", "1", "a/b", "-1/2"):
        with pytest.raises(SystemExit):
            bench_run.parse_args(["--shard", bad])


def test_bench_times_every_column_of_a_case_under_the_same_conditions(monkeypatch):
    """Every column runs and is checked first (the uncompiled ones after one settle, each compile followed by a
    settle), then all are timed after one more settle, the uncompiled ones first; the kernel column's calls run
    under the forced convops path as a whole, the op's under the user's policy; the record keeps the requested
    column order."""
    events = []

    def fake_runner(column, model, backend=None, backend_note=""):
        def fn(x):
            events.append(f"call {column}")
            return model(x)
        return fn

    def fake_settle():
        events.append("settle")
        return quiet.Settled(0.0, 0.0, True)

    def timer(fn):
        fn()
        events.append(f"time under {convops.path_policy()}")
        return 1.0

    monkeypatch.setattr(runner, "make_runner", fake_runner)
    monkeypatch.setattr(runner.quiet, "settle", fake_settle)
    case = bench_cases.Case("seed/tiny_dw", lambda: demo.DepthwiseConv2d(4, 3, 1, 1), (1, 4, 9, 9))
    columns = ("eager", "inductor", "max_autotune", "convops_kernel", "convops_op", "convops_backend")
    plan = _cpu_plan(columns)
    plan.autotune = "all"
    with convops.forced_path("auto"):
        record = runner.run_case(case, timing.MODES["tf32"], plan, device="cpu", timer=timer)
    assert list(record["columns"]) == list(columns)
    assert all(col["status"] == "ok" for col in record["columns"].values()), record["columns"]
    assert all(col["settle_s"] == 0.0 for col in record["columns"].values())
    assert events == ["settle", "call eager", "call convops_kernel", "call convops_op",
                      "call inductor", "settle", "call max_autotune", "settle", "call convops_backend", "settle",
                      "settle",
                      "call eager", "time under auto",
                      "call convops_kernel", "time under convops",
                      "call convops_op", "time under auto",
                      "call inductor", "time under auto",
                      "call max_autotune", "time under auto",
                      "call convops_backend", "time under auto"]
    assert all(col["round_ms"] == [1.0] for col in record["columns"].values())
    assert runner.timing_order(["convops_backend", "eager", "inductor", "convops_op"]) == [
        "eager", "convops_op", "convops_backend", "inductor"]


def test_bench_times_launch_bound_cases_in_interleaved_rounds(monkeypatch):
    """Where a column times under runner.LAUNCH_BOUND_MS in the first round, every column is timed again in
    further rounds, one column after the other in each, and keeps the fastest of its rounds (a slow host only adds
    time)."""
    monkeypatch.setattr(runner.quiet, "settle", lambda: quiet.Settled(0.0, 0.0, True))
    called, order = [], []
    draws = {"eager": iter([0.010, 0.030, 0.011, 0.040, 0.012]),
             "convops_op": iter([0.009, 0.020, 0.008, 0.030, 0.021])}

    def fake_runner(column, model, backend=None, backend_note=""):
        def fn(x):
            called.append(column)
            return model(x)
        return fn

    def timer(fn):
        fn()
        order.append(called[-1])
        return next(draws[called[-1]])

    monkeypatch.setattr(runner, "make_runner", fake_runner)
    case = bench_cases.Case("seed/tiny_dw", lambda: demo.DepthwiseConv2d(4, 3, 1, 1), (1, 4, 9, 9))
    record = runner.run_case(case, timing.MODES["tf32"], _cpu_plan(("eager", "convops_op")), device="cpu",
                             timer=timer)
    assert order == ["eager", "convops_op"] * runner.LAUNCH_BOUND_ROUNDS
    assert runner.LAUNCH_BOUND_ROUNDS == 5
    assert record["columns"]["eager"]["round_ms"] == [0.010, 0.030, 0.011, 0.040, 0.012]
    assert record["columns"]["eager"]["ms"] == 0.010 and record["columns"]["convops_op"]["ms"] == 0.008
    assert record["speedup"] == pytest.approx(0.010 / 0.008)


@pytest.mark.parametrize("paths,label", [
    ([], "convops"),
    ([("convops::depthwise_conv2d cuda:0 Float[1]", "aten")], "aten"),
    ([("convops::depthwise_separable_conv2d cuda:0 BFloat16[1]", "mixed"),
      (f"{SEPARABLE_POINTWISE} cuda:0 BFloat16[1]", "aten")], "mixed (1x1 cudnn)"),
    ([("convops::depthwise_separable_conv2d cuda:0 Float[1]", "convops"),
      (f"{SEPARABLE_POINTWISE} cuda:0 Float[1]", "convops"),
      ("convops::depthwise_conv2d cuda:0 Float[1]", "aten")], "aten+convops (1x1 gemm)"),
    ([("convops::depthwise_separable_conv2d cuda:0 Float[1]", "mixed"),
      (f"{SEPARABLE_MIXED_LAYOUT} cuda:0 Float[1]", "convops"),
      (f"{SEPARABLE_POINTWISE} cuda:0 Float[1]", "aten"),
      (f"{SEPARABLE_POINTWISE} cuda:0 Float[2]", "convops")], "mixed (channels-last, 1x1 cudnn+gemm)"),
    ([(f"{SEPARABLE_MIXED_LAYOUT} cuda:0 Float[1]", "aten")], "convops (input layout)"),
])
def test_bench_op_path_names_the_ops_decisions_and_the_separable_1x1_apart(monkeypatch, paths, label):
    """The "op path" column: the ops' own decisions joined, the separable mixed path's layout and 1x1 decisions in a
    suffix (layout: "convops" channels-last, "aten" the input's; 1x1: "convops" the cuBLAS GEMM, "aten" cuDNN's 1x1),
    never mixed into the ops' paths."""
    choices = [convops.PathChoice(problem, path, 1.0, 2.0) for problem, path in paths]
    monkeypatch.setattr(runner.convops, "path_choices", lambda: choices)
    assert runner._chosen_path() == label


def test_bench_background_cpu_counts_child_processes():
    before = quiet.background_cpu_s()
    if before is None:
        pytest.skip("needs /proc")
    busy = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        deadline = time.monotonic() + 60
        while quiet.background_cpu_s() - before < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert quiet.background_cpu_s() - before >= 0.5  # the child's CPU time, while it lives
    finally:
        child.kill()
        child.wait()


def test_bench_settle_waits_for_quiet_and_gives_up_on_a_background_that_never_rests(monkeypatch):
    monkeypatch.setattr(quiet, "_wait_compile_pool", lambda timeout_s: None)
    monkeypatch.setattr(quiet, "_timeouts_in_a_row", 0)
    now = [0.0]

    def sleep(s):
        now[0] += s

    def cpu_use(rates):  # CPU seconds of the background, rising at rates[window] cores
        used, windows = [0.0], iter(rates)

        def sample():
            used[0] += next(windows, 0.0) * quiet.WINDOW_S
            return used[0]
        return sample

    settled = quiet.settle(sample=cpu_use([0.0, 2.0, 1.0, 0.5, 0.1]), sleep=sleep, clock=lambda: now[0])
    assert settled.quiet and settled.waited_s == pytest.approx(4 * quiet.WINDOW_S), settled
    for expected_timeout in (quiet.TIMEOUT_S, quiet.TIMEOUT_S, quiet.SHORT_TIMEOUT_S):
        start = now[0]
        settled = quiet.settle(sample=cpu_use([0.0] + [3.0] * 10**6), sleep=sleep, clock=lambda: now[0])
        assert not settled.quiet and settled.background_cores == pytest.approx(3.0)
        assert now[0] - start == pytest.approx(expected_timeout, abs=1.5 * quiet.WINDOW_S)
    assert quiet.settle(sample=cpu_use([0.0, 0.0]), sleep=sleep, clock=lambda: now[0]).quiet
    assert quiet._timeouts_in_a_row == 0
    assert quiet.settle(sample=lambda: None).quiet  # nothing to measure (no /proc): no wait


def test_bench_gc_paused_restores_the_collector():
    assert gc.isenabled()
    with quiet.gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), quiet.gc_paused():
        raise ValueError
    assert gc.isenabled()
