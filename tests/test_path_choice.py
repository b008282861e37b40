"""The path policy (convops/path_choice.py): on CUDA each op runs its own kernel or the ATen composition it replaces;
"auto" times both once per problem, keeps the faster and reports the decision."""
from __future__ import annotations

import threading

import pytest
import torch

import convops
# Decisions made inside a path (the separable mixed path's layout and 1x1, conv_transpose's ATen layout)
from convops.path_choice import SEPARABLE_MIXED_LAYOUT, SEPARABLE_POINTWISE, stage_of
from common_utils import allow_tf32, assert_close, make_tensor, poison_allocator, reference
from fuzz_configs import OPS, draw
import test_conv2d_group_norm_scale_max_pool_clamp as gn_block
from test_depthwise_conv2d import torch_depthwise
from test_depthwise_separable_conv2d import CUDNN_TF32_TOLERANCE, separable_reference
from test_fuzz import compare

SEPARABLE = "convops::depthwise_separable_conv2d"
GROUP_NORM_BLOCK = "convops::conv2d_group_norm_scale_max_pool_clamp"


def test_policy_round_trip_and_restore():
    with convops.forced_path("aten"):
        assert convops.path_policy() == "aten"
        with convops.forced_path("auto"):
            assert convops.path_policy() == "auto"
        assert convops.path_policy() == "aten"
    assert convops.path_policy() == "convops"  # tests/conftest.py forces the kernels


def test_unknown_policy_is_refused_by_name():
    with pytest.raises(RuntimeError, match="path policy must be 'auto', 'convops' or 'aten', got 'fastest'"):
        convops.set_path_policy("fastest")
    assert convops.path_policy() == "convops"


def test_cpu_calls_ignore_the_policy():
    x, w = torch.randn(1, 2, 5, 5), torch.randn(2, 1, 3, 3)
    convops.clear_path_choices()
    with convops.forced_path("auto"):
        out = convops.depthwise_conv2d(x, w, None, 1, 1)
    assert convops.path_choices() == []
    torch.testing.assert_close(out, torch.nn.functional.conv2d(x, w, None, 1, 1, groups=2))


def fp32_problem(op_name: str) -> tuple[dict, list]:
    """The first fuzz configuration of the op with a non-empty fp32 batch, TF32 off (both paths exact in fp32)."""
    seed = next(s for s in range(600_000, 700_000)
                if (c := draw(op_name, s, "cuda"))["dtype"] == "float32" and c["batch"] > 0)
    config = dict(draw(op_name, seed, "cuda"), tf32=False)
    torch.default_generator.manual_seed(seed)
    return config, OPS[op_name].build(config, "cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("policy", ["auto", "aten", "convops"])
@pytest.mark.parametrize("op_name", list(OPS))
def test_cuda_every_policy_gives_the_reference(op_name, policy):
    op = OPS[op_name]
    config, args = fp32_problem(op_name)
    convops.clear_path_choices()
    with allow_tf32(False), convops.forced_path(policy):
        expected, tol, extra = op.expected(config, args)
        out = op.run(args)
        again = op.run(args)  # "auto": the recorded decision
    compare(out, expected, torch.float32, tol, extra)
    compare(again, expected, torch.float32, tol, extra)
    choices = convops.path_choices()
    if policy == "auto":
        own = [c for c in choices if c.problem.startswith(f"convops::{op_name} cuda:0 ")]
        assert len(own) == 1, choices
        assert own[0].path in ("convops", "aten", "mixed") and own[0].convops_ms > 0, choices
        assert own[0].aten_ms > 0 and (own[0].mixed_ms is None or own[0].mixed_ms > 0), choices
        # Besides, decisions made inside the op's paths, each a problem of its own ("<op>.<stage>"): the separable
        # mixed path's layout (once) and its 1x1 (once per intermediate layout); conv_transpose's ATen path's layout.
        rest = [c for c in choices if c not in own]
        stages = {"depthwise_separable_conv2d": {"mixed_layout": 1, "pointwise": 2},
                  "conv_transpose2d": {"aten_layout": 1}, "conv_transpose3d": {"aten_layout": 1}}.get(op_name, {})
        assert all(c.problem.startswith(f"convops::{op_name}.") and stage_of(c.problem) in stages for c in rest), choices
        for stage, most in stages.items():
            assert len([c for c in rest if stage_of(c.problem) == stage]) <= most, choices
    else:
        assert choices == []


@pytest.mark.cuda
def test_cuda_decisions_are_per_problem():
    convops.clear_path_choices()
    w = torch.randn(8, 1, 3, 3, device="cuda")
    with convops.forced_path("auto"):
        for shape in [(2, 8, 20, 20), (2, 8, 20, 20), (1, 8, 20, 20), (2, 8, 21, 20)]:
            convops.depthwise_conv2d(torch.randn(shape, device="cuda"), w, None, 1, 1)
        convops.depthwise_conv2d(torch.randn(2, 8, 20, 20, device="cuda").to(memory_format=torch.channels_last),
                                 w, None, 1, 1)
        with allow_tf32(False):
            convops.depthwise_conv2d(torch.randn(2, 8, 20, 20, device="cuda"), w, None, 1, 1)
    assert len(convops.path_choices()) == 5, convops.path_choices()


@pytest.mark.cuda
def test_cuda_graph_capture_of_an_undecided_problem_runs_the_kernel_and_records_nothing():
    x = make_tensor((2, 6, 33, 35), torch.float32, "cuda")
    w = make_tensor((6, 1, 3, 3), torch.float32, "cuda")
    convops.clear_path_choices()
    graph = torch.cuda.CUDAGraph()
    with convops.forced_path("auto"):
        with torch.cuda.graph(graph):
            out = convops.depthwise_conv2d(x, w, None, 1, 1)
        assert convops.path_choices() == []
        x.copy_(make_tensor(x.shape, torch.float32, "cuda"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out.double(), reference(torch_depthwise, x, w, None, [1, 1], [1, 1], [1, 1]).cuda(),
                                   atol=1e-5, rtol=1e-5)
        # Decided outside a capture, the problem is then captured on the recorded path.
        convops.depthwise_conv2d(x, w, None, 1, 1)
        assert len(convops.path_choices()) == 1
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = convops.depthwise_conv2d(x, w, None, 1, 1)
        x.copy_(make_tensor(x.shape, torch.float32, "cuda"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out.double(), reference(torch_depthwise, x, w, None, [1, 1], [1, 1], [1, 1]).cuda(),
                                   atol=1e-5, rtol=1e-5)


@pytest.mark.cuda
def test_cuda_scalars_are_part_of_the_problem_as_the_report_prints_them():
    """The decision cache tells problems apart exactly as the report's text does: eps values that print alike
    (6 significant digits) share a decision, others do not; the report keeps its format."""
    x = make_tensor((2, 3, 12, 12), torch.float32, "cuda")
    w = make_tensor((8, 3, 3, 3), torch.float32, "cuda")
    scale = make_tensor((8, 1, 1), torch.float32, "cuda")
    convops.clear_path_choices()
    with convops.forced_path("auto"):
        for eps, clamp_min in [(1e-5, None), (1e-5 * (1 + 1e-9), None), (2e-5, None), (1e-5, -0.5)]:
            convops.conv2d_group_norm_scale_max_pool_clamp(x, w, None, [1, 1], [1, 1], [1, 1], 4, None, None, eps,
                                                           scale, [2, 2], clamp_min, 0.5)
    op = "convops::conv2d_group_norm_scale_max_pool_clamp cuda:0"
    choices = sorted(choice.problem for choice in convops.path_choices())
    problems = [p for p in choices if p.startswith(op + " ")]
    # Each problem's mixed path (auto's third candidate) decided its convolution's layout under the same key.
    layouts = [p for p in choices if p.startswith(op.replace(" ", ".mixed_layout ", 1))]
    assert len(problems) == len(layouts) == 3 and len(choices) == 6, choices
    assert all(p.startswith(op + (" tf32 " if torch.backends.cudnn.allow_tf32 else " ")) for p in problems), problems
    assert any(p.endswith(" 1e-05 Float[8, 1, 1][1, 1, 1] [2, 2] - 0.5") for p in problems), problems
    assert any(p.endswith(" 1e-05 Float[8, 1, 1][1, 1, 1] [2, 2] -0.5 0.5") for p in problems), problems


@pytest.mark.cuda
def test_cuda_first_auto_call_returns_a_complete_output_of_the_chosen_path():
    """The deciding call returns the chosen path's last timed run: a fresh tensor, right for the current inputs,
    not aliased by the next call's output."""
    x = make_tensor((2, 6, 33, 35), torch.float32, "cuda")
    w = make_tensor((6, 1, 3, 3), torch.float32, "cuda")
    convops.clear_path_choices()
    with convops.forced_path("auto"):
        poison_allocator("cuda", x.numel() * x.element_size())  # the output has the input's shape here
        first = convops.depthwise_conv2d(x, w, None, 1, 1)
        second = convops.depthwise_conv2d(x, w, None, 1, 1)
    assert len(convops.path_choices()) == 1
    assert first.data_ptr() != second.data_ptr()
    want = reference(torch_depthwise, x, w, None, [1, 1], [1, 1], [1, 1]).cuda()
    torch.testing.assert_close(first.double(), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(second, first, atol=0, rtol=0)


@pytest.mark.cuda
def test_cuda_auto_from_several_threads():
    """Threads that look up and record decisions at once get right answers and one decision per problem."""
    w = make_tensor((8, 1, 3, 3), torch.float32, "cuda")
    inputs = [make_tensor((1 + k % 3, 8, 20, 20), torch.float32, "cuda") for k in range(12)]
    outputs, errors = [None] * len(inputs), []
    convops.clear_path_choices()
    previous = convops.path_policy()
    convops.set_path_policy("auto")  # process-wide: the worker threads see it

    def work(k):
        try:
            with torch.cuda.stream(torch.cuda.Stream()):
                for _ in range(20):
                    outputs[k] = convops.depthwise_conv2d(inputs[k], w, None, 1, 1)
                torch.cuda.current_stream().synchronize()
        except Exception as exc:  # reported below, in the test's thread
            errors.append(exc)

    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(len(inputs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        convops.set_path_policy(previous)
    assert not errors, errors
    for x, out in zip(inputs, outputs):
        torch.testing.assert_close(out.double(), reference(torch_depthwise, x, w, None, [1, 1], [1, 1], [1, 1]).cuda(),
                                   atol=1e-5, rtol=1e-5)
    assert len(convops.path_choices()) == 3, convops.path_choices()


def test_report_lines_parse_with_and_without_a_mixed_path():
    from convops.path_choice import _LINE
    two = _LINE.fullmatch("convops::depthwise_conv2d cuda:0 Float[1, 2][2, 1] -> aten (convops 0.5 ms, aten 0.25 ms)")
    assert two["path"] == "aten" and two["mixed"] is None
    three = _LINE.fullmatch("convops::depthwise_separable_conv2d cuda:0 tf32 Float[16, 64] -> mixed "
                            "(convops 2.4 ms, aten 3.3 ms, mixed 1.4 ms)")
    assert three["problem"].endswith("Float[16, 64]") and three["path"] == "mixed" and float(three["mixed"]) == 1.4
    assert str(convops.PathChoice("p", "mixed", 2.4, 3.3, 1.4)) == "p -> mixed (convops 2.4 ms, aten 3.3 ms, mixed 1.4 ms)"
    assert str(convops.PathChoice("p", "aten", 2.0, 1.0)) == "p -> aten (convops 2 ms, aten 1 ms)"


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_separable_times_its_mixed_path_where_the_fused_kernel_applies(dtype):
    """Where the fused kernel takes the problem (contiguous NCHW, stride 1, 3x3 "same"), "auto" times three paths:
    the fused kernel, the convops depthwise kernel + ATen's 1x1 ("mixed") and ATen's pair; elsewhere two."""
    x = torch.randn(2, 16, 24, 64, device="cuda", dtype=dtype)
    dw, pw = torch.randn(16, 1, 3, 3, device="cuda", dtype=dtype), torch.randn(24, 16, 1, 1, device="cuda", dtype=dtype)
    expected = torch.nn.functional.conv2d(torch.nn.functional.conv2d(x, dw, None, 1, 1, groups=16), pw)
    convops.clear_path_choices()
    with convops.forced_path("auto"):
        first = convops.depthwise_separable_conv2d(x, dw, None, pw, None, 1, 1)
        again = convops.depthwise_separable_conv2d(x, dw, None, pw, None, 1, 1)
        convops.depthwise_separable_conv2d(x[:, :, :, 1:], dw, None, pw, None, 1, 1)  # strided view: no fused kernel
    tol = dict(atol=5e-3, rtol=5e-3) if dtype == torch.float32 else dict(atol=6e-2, rtol=3e-2)
    torch.testing.assert_close(first, expected, **tol)
    torch.testing.assert_close(again, first)
    choices = [c for c in convops.path_choices() if c.problem.startswith(SEPARABLE + " cuda:0 ")]
    assert len(choices) == 2, convops.path_choices()
    with_mixed = [c for c in choices if c.mixed_ms is not None]
    assert len(with_mixed) == 1 and with_mixed[0].mixed_ms > 0, choices
    check_three_way_decision(with_mixed[0])


def check_three_way_decision(c: convops.PathChoice) -> None:
    """path_choice.cu's choose_path: the mixed path needs a 3% lead over the fused kernel to be taken in its place,
    and either needs one over ATen. The times are the printed ones (6 digits): a comparison within 1e-4 of its
    threshold could go either way in the op's doubles, and then the decision is not checked."""
    ratios = (c.mixed_ms / (0.97 * c.convops_ms), c.convops_ms / (0.97 * c.aten_ms), c.mixed_ms / (0.97 * c.aten_ms))
    if all(abs(r - 1) > 1e-4 for r in ratios):
        mixed_leads = ratios[0] < 1
        side_ms = c.mixed_ms if mixed_leads else c.convops_ms
        if side_ms < 0.97 * c.aten_ms:
            expected_path = "mixed" if mixed_leads else "convops"
        else:
            expected_path = "mixed" if ratios[2] < 1 else "aten"
        assert c.path == expected_path, c


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_group_norm_block_times_its_mixed_path_where_the_fused_kernels_apply(monkeypatch, dtype):
    """The GroupNorm block's "auto" times the fused kernels, ATen's convolution + the convops epilogue ("mixed") and
    the ATen chain; with the fused kernels left out (CONVOPS_GN_KERNEL=none) the mixed path stands in the convops
    path's place against the ATen chain, two candidates: the same arguments, a problem of its own, since the switch
    is part of the key while it is set. The mixed path's convolution layout is a decision of its own
    ("<op>.mixed_layout"), also per switch."""
    args = gn_block.make_problem(gn_block.CASES[9], dtype, "cuda")
    tensors, params = gn_block.split(args)
    convops.clear_path_choices()
    with allow_tf32(False), convops.forced_path("auto"):
        expected = gn_block.torch_chain(*tensors, **params)
        first = convops.conv2d_group_norm_scale_max_pool_clamp(*args)
        monkeypatch.setenv("CONVOPS_GN_KERNEL", "none")
        second = convops.conv2d_group_norm_scale_max_pool_clamp(*args)  # the switch set: a new decision
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=6e-2, rtol=3e-2)
    torch.testing.assert_close(first, expected, **tol)
    torch.testing.assert_close(second, expected, **tol)
    choices = [c for c in convops.path_choices() if c.problem.startswith(GROUP_NORM_BLOCK + " cuda:0 ")]
    three = [c for c in choices if c.mixed_ms is not None]  # path_choices() lists decisions by their text
    two = [c for c in choices if c.mixed_ms is None]
    assert len(three) == len(two) == 1 and three[0].mixed_ms > 0, choices
    check_three_way_decision(three[0])
    assert not three[0].problem.endswith("CONVOPS_GN_KERNEL=none"), choices
    assert two[0].path in ("convops", "aten") and two[0].problem.endswith(" CONVOPS_GN_KERNEL=none"), choices
    assert two[0].problem.removesuffix(" CONVOPS_GN_KERNEL=none") == three[0].problem, choices
    # Each problem's mixed path decided its convolution's layout once (a dense NCHW input): "convops" the round trip.
    layouts = [c for c in convops.path_choices() if c.problem.startswith(GROUP_NORM_BLOCK + ".mixed_layout cuda:0 ")]
    assert len(layouts) == 2 and all(c.path in ("convops", "aten") and c.mixed_ms is None for c in layouts), layouts


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.usefixtures("without_small_separable_kernel")
def test_cuda_separable_mixed_path_decides_its_1x1_as_a_problem_of_its_own(monkeypatch, dtype):
    """The mixed path's 1x1 is a cuBLAS GEMM ("convops") or ATen's 1x1 convolution ("aten"), whichever "auto" timed
    faster for the intermediate: a decision of its own, one per intermediate, recorded with both timings and the
    intermediate's dtype, sizes and strides. Stride 2 keeps the problem outside the fused kernels (the small-problem
    one, which would take it, is left out), so the op's convops path is the mixed one, which its own decision runs
    at least once (the warm-up); strict fp32, so that fp32 may take the GEMM too. The mixed path stays in the input's
    layout here (its layout decision: the next test)."""
    monkeypatch.setenv("CONVOPS_SEPARABLE_MIXED", "input")
    x = make_tensor((3, 24, 15, 17), dtype, "cuda")
    dw, pw, pb = (make_tensor(shape, dtype, "cuda") for shape in [(24, 1, 5, 5), (40, 24, 1, 1), (40,)])
    args = (x, dw, None, pw, pb, [2, 2], [2, 2], [1, 1])
    convops.clear_path_choices()
    with allow_tf32(False), convops.forced_path("auto"):
        outputs = [torch.ops.convops.depthwise_separable_conv2d(x[:batch], *args[1:]) for batch in (3, 3, 2)]
        wants = [separable_reference(x[:batch], *args[1:]).cuda() for batch in (3, 2)]
    choices = convops.path_choices()
    assert len([c for c in choices if c.problem.startswith(SEPARABLE + " cuda:0 ")]) == 2, choices
    pointwise = sorted((c for c in choices if c.problem.startswith(SEPARABLE_POINTWISE + " cuda:0 ")),
                       key=lambda c: c.problem)
    name = {torch.float32: "Float", torch.bfloat16: "BFloat16"}[dtype]
    assert [c.problem.split("]")[0] for c in pointwise] == [
        f"{SEPARABLE_POINTWISE} cuda:0 {name}[2, 24, 8, 9", f"{SEPARABLE_POINTWISE} cuda:0 {name}[3, 24, 8, 9"], choices
    for c in pointwise:
        assert c.path in ("convops", "aten") and c.convops_ms > 0 and c.aten_ms > 0 and c.mixed_ms is None, c
    assert_close(outputs[0], wants[0])
    torch.testing.assert_close(outputs[1], outputs[0], atol=0, rtol=0)  # the recorded decisions
    assert_close(outputs[2], wants[1])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tf32", [False, True])
@pytest.mark.usefixtures("without_small_separable_kernel")
def test_cuda_separable_mixed_path_decides_its_layout_as_a_problem_of_its_own(dtype, tf32):
    """For an NCHW input the mixed path runs through channels-last ("convops": the convops depthwise kernel from NCHW
    into NHWC, the 1x1 on the NHWC intermediate, the output copied back with the bias) or in the input's layout
    ("aten"), whichever "auto" timed faster: one
    decision per problem, recorded with both timings, beside the 1x1's decisions for the intermediate of each layout
    (both run in the warm-up). The output is NCHW either way and agrees with the reference (at cuDNN's TF32
    tolerance where TF32 is on: the NHWC 1x1 is cuDNN's there, and the NCHW one may be)."""
    x = make_tensor((3, 24, 15, 17), dtype, "cuda")
    dw, pw, pb = (make_tensor(shape, dtype, "cuda") for shape in [(24, 1, 5, 5), (40, 24, 1, 1), (40,)])
    args = (x, dw, None, pw, pb, [2, 2], [2, 2], [1, 1])
    convops.clear_path_choices()
    with allow_tf32(tf32), convops.forced_path("auto"):
        out = torch.ops.convops.depthwise_separable_conv2d(*args)
        again = torch.ops.convops.depthwise_separable_conv2d(*args)
        want = separable_reference(*args).cuda()
    choices = convops.path_choices()
    layout = [c for c in choices if c.problem.startswith(SEPARABLE_MIXED_LAYOUT + " cuda:0 ")]
    assert len(layout) == 1 and layout[0].path in ("convops", "aten"), choices
    assert layout[0].convops_ms > 0 and layout[0].aten_ms > 0 and layout[0].mixed_ms is None, choices
    pointwise = [c for c in choices if c.problem.startswith(SEPARABLE_POINTWISE + " cuda:0 ")]
    # The NCHW intermediate's and the NHWC one's (different strides); but in TF32 the NHWC 1x1 is cuDNN's alone
    # (ATen's mm would not round as cuDNN does: cublas_gemm_matches_convolution).
    assert len(pointwise) == (1 if dtype == torch.float32 and tf32 else 2), choices
    assert out.is_contiguous() and again.is_contiguous()
    assert_close(out, want, **(CUDNN_TF32_TOLERANCE if dtype == torch.float32 and tf32 else {}))
    torch.testing.assert_close(again, out, atol=0, rtol=0)  # the recorded decisions


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["channels_last", "one_channel", "one_pixel"])
def test_cuda_separable_mixed_path_has_no_layout_decision_where_the_round_trip_changes_nothing(layout):
    """A channels-last input is NHWC already, and with one channel or one pixel NCHW and NHWC are the same bytes: no
    layout decision is made there."""
    channels, hw = {"channels_last": (8, 9), "one_channel": (1, 9), "one_pixel": (8, 1)}[layout]
    x = make_tensor((2, channels, hw, hw), torch.float32, "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    dw, pw = make_tensor((channels, 1, 3, 3), torch.float32, "cuda"), make_tensor((6, channels, 1, 1), torch.float32,
                                                                                 "cuda")
    args = (x, dw, None, pw, None, [2, 2], [1, 1], [1, 1])
    convops.clear_path_choices()
    with allow_tf32(False), convops.forced_path("auto"):
        out = torch.ops.convops.depthwise_separable_conv2d(*args)
        want = separable_reference(*args).cuda()  # strict fp32, as the op ran
    assert not [c for c in convops.path_choices() if c.problem.startswith(SEPARABLE_MIXED_LAYOUT)], convops.path_choices()
    assert_close(out, want)


@pytest.mark.cuda
@pytest.mark.usefixtures("without_small_separable_kernel")
def test_cuda_graph_capture_of_an_undecided_separable_problem_takes_the_round_trip_and_records_nothing():
    """In capture nothing can be timed: an undecided NCHW separable problem off the fused kernels runs its convops
    path, the mixed one, whose undecided layout takes its "convops" side, the channels-last round trip (the depthwise
    kernel into NHWC, cuDNN's 1x1, the copy back: all capturable), and records no decision; the replayed graph then
    computes the reference on new inputs, in NCHW."""
    x = make_tensor((2, 12, 19, 21), torch.float32, "cuda")
    dw, pw, pb = (make_tensor(shape, torch.float32, "cuda") for shape in [(12, 1, 3, 3), (20, 12, 1, 1), (20,)])
    args = (dw, None, pw, pb, [2, 2], [1, 1], [1, 1])  # stride 2: no fused kernel but the small one, left out
    convops.clear_path_choices()
    with allow_tf32(False), convops.forced_path("auto"):
        torch.ops.convops.depthwise_separable_conv2d(x[:1], *args)  # cuBLAS and cuDNN set up outside the capture
        convops.clear_path_choices()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = torch.ops.convops.depthwise_separable_conv2d(x, *args)
        assert convops.path_choices() == []
        x.copy_(make_tensor(x.shape, torch.float32, "cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, separable_reference(x, *args).cuda())
    assert out.is_contiguous()


@pytest.mark.cuda
@pytest.mark.usefixtures("without_small_separable_kernel")
def test_cuda_auto_decides_where_the_l2_flush_buffer_does_not_fit():
    """Where the device has no room for the decision's L2 flush buffer (256 MB), "auto" times the paths with a warm L2
    instead of failing: here under a per-process memory cap 64 MB above what is in use. The separable op's mixed path
    makes decisions of its own in its first run (its layout, its 1x1), so nested decisions run under the cap too."""
    x = make_tensor((2, 12, 19, 21), torch.float32, "cuda")
    dw, pw = make_tensor((12, 1, 3, 3), torch.float32, "cuda"), make_tensor((20, 12, 1, 1), torch.float32, "cuda")
    args = (x, dw, None, pw, None, [2, 2], [1, 1], [1, 1])  # stride 2: a mixed path, no fused kernel but the small one
    convops.clear_path_choices()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    cap = torch.cuda.memory_reserved() + (64 << 20)
    torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(0).total_memory)
    try:
        with allow_tf32(False), convops.forced_path("auto"):
            out = torch.ops.convops.depthwise_separable_conv2d(*args)
            again = torch.ops.convops.depthwise_separable_conv2d(*args)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    decided = [c for c in convops.path_choices() if c.problem.startswith(SEPARABLE + " cuda:0 ")]
    assert len(decided) == 1 and decided[0].convops_ms > 0 and decided[0].aten_ms > 0, convops.path_choices()
    with allow_tf32(False):  # the reference follows the flag: strict fp32, as the op ran
        want = separable_reference(*args).cuda()
    assert_close(out, want)
    torch.testing.assert_close(again, out, atol=0, rtol=0)  # the recorded decision
