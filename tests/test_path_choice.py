"""The path policy (convops/path_choice.py): on CUDA each op runs its own kernel or the ATen composition it replaces;
"auto" times both once per problem, keeps the faster and reports the decision."""
from __future__ import annotations

import pytest
import torch

import convops
from common_utils import allow_tf32, make_tensor, reference
from fuzz_configs import OPS, draw
from test_depthwise_conv2d import torch_depthwise
from test_fuzz import compare


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
        assert len(choices) == 1 and choices[0].problem.startswith(f"convops::{op_name} cuda:0 "), choices
        assert choices[0].path in ("convops", "aten") and choices[0].convops_ms > 0 and choices[0].aten_ms > 0, choices
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
