"""A bad call fails with the same message in eager mode and under torch.compile.

Every op checks its arguments twice: in C++ (csrc/, on CPU and CUDA tensors) and in its Python fake (ops/, on meta
and fake tensors, i.e. under torch.compile). Each bad call of the battery below runs on CPU tensors and again with
every tensor moved to meta; the two messages must be identical and start with the op's name.

The battery: the bad calls of test_hostile_inputs.py (less the device mismatches, which meta makes valid, and what
the schema's argument parser rejects before either check runs), the error cases of each op's own test file, and
valid fuzz configurations (fuzz_configs.py) each broken in one way, which vary dtypes, batch sizes and geometry.

tools/fake_messages.py runs the same battery and prints how many messages differ, and how.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_map

import convops  # noqa: F401  (registers the ops and their fake implementations)
import fuzz_configs
import test_conv2d_group_norm_scale_max_pool_clamp as gn_tests
import test_conv_transpose as conv_transpose_tests
import test_depthwise_conv2d as depthwise_tests
import test_depthwise_separable_conv2d as separable_tests
import test_hostile_inputs as hostile


@dataclass(frozen=True)
class BadCall:
    op: str                                # the op's name in torch.ops.convops
    id: str
    build: Callable[[], tuple[list, dict]]  # the call's positional and keyword arguments, on CPU tensors


def hostile_calls() -> list[BadCall]:
    return [BadCall(op, f"hostile-{case.id}", lambda op=op, case=case: ([], hostile.bad_kwargs(op, case, "cpu")))
            for op, (_, cases) in hostile.OPS.items() for case in cases if case.meta and not case.parser]


def own_test_calls() -> list[BadCall]:
    """The error cases of test_depthwise_conv2d, test_depthwise_separable_conv2d, test_conv_transpose and
    test_conv2d_group_norm_scale_max_pool_clamp."""
    calls = []
    for problem in depthwise_tests.bad_inputs("cpu"):
        def build(problem=problem):
            tensors, params = depthwise_tests.bad_inputs("cpu")[problem]
            return [*tensors, params["stride"], params["padding"], params["dilation"]], {}
        calls.append(BadCall("depthwise_conv2d", f"own-{problem}", build))
    for problem in separable_tests.bad_inputs("cpu"):
        def build(problem=problem):
            tensors, params = separable_tests.bad_inputs("cpu")[problem]
            return [*tensors, *params], {}
        calls.append(BadCall("depthwise_separable_conv2d", f"own-{problem}", build))
    for i, (fn, _, _) in enumerate(conv_transpose_tests._bad_calls("cpu")):
        def build(i=i):
            _, args, kwargs = conv_transpose_tests._bad_calls("cpu")[i]
            return list(args), kwargs
        calls.append(BadCall(fn.__name__, f"own-bad call {i}", build))
    for what in gn_tests.ERROR_CASES:
        calls.append(BadCall("conv2d_group_norm_scale_max_pool_clamp", f"own-{what}",
                             lambda what=what: ([], gn_tests.error_case("cpu", what))))
    return calls


# ---- valid fuzz configurations, each broken in one way (in spatial dimension i) ----

def stride_0(c, i):
    c["stride"][i] = 0


def padding_negative(c, i):
    c["padding"][i] = -1


def dilation_0(c, i):
    c["dilation"][i] = 0


def kernel_past_the_padded_input(c, i):
    c["padding"] = [0] * len(c["padding"])
    c["kernel"][i] = c["size"][i] + 1


def num_groups_not_dividing(c, i):
    c["num_groups"] = c["out_channels"] + 1


def eps_negative(c, i):
    c["eps"] = -c["eps"]


def pool_past_the_conv_output(c, i):
    c["pool_kernel"][i] = fuzz_configs.conv_out(c["size"], c["kernel"], c["stride"], c["padding"], c["dilation"])[i] + 1


def output_padding_too_large(c, i):
    c["output_padding"][i] = max(c["stride"][i], c["dilation"][i])


def output_size_not_positive(c, i):
    c["padding"][i] = 100


COMMON_BREAKS = [stride_0, padding_negative, dilation_0]
FUZZ_BREAKS = {
    "depthwise_conv2d": COMMON_BREAKS + [kernel_past_the_padded_input],
    "depthwise_separable_conv2d": COMMON_BREAKS + [kernel_past_the_padded_input],
    "conv_transpose2d": COMMON_BREAKS + [output_padding_too_large, output_size_not_positive],
    "conv_transpose3d": COMMON_BREAKS + [output_padding_too_large, output_size_not_positive],
    "conv2d_group_norm_scale_max_pool_clamp": COMMON_BREAKS + [kernel_past_the_padded_input, num_groups_not_dividing,
                                                               eps_negative, pool_past_the_conv_output],
}
FUZZ_SEEDS = range(8)


def broken_fuzz_call(op: str, seed: int, brk) -> tuple[list, dict]:
    """Fuzz configuration `seed` of `op` (drawn for CPU), broken by brk in one spatial dimension, as (args, kwargs)."""
    c = fuzz_configs.draw(op, seed, "cpu")
    brk(c, seed % len(c["stride"]))
    args = fuzz_configs.OPS[op].build(c, "cpu")
    return (args[:-1], args[-1]) if isinstance(args[-1], dict) else (args, {})


def weight_dtype_call(op: str, seed: int) -> tuple[list, dict]:
    """A valid fuzz configuration with its weight (args[1] of every op) in another floating dtype."""
    args, kwargs = broken_fuzz_call(op, seed, lambda c, i: None)
    args[1] = args[1].to(torch.float32 if args[1].dtype == torch.float64 else torch.float64)
    return args, kwargs


def fuzz_calls() -> list[BadCall]:
    calls = []
    for op, breaks in FUZZ_BREAKS.items():
        for seed in FUZZ_SEEDS:
            calls += [BadCall(op, f"fuzz {seed}-{brk.__name__}", lambda op=op, seed=seed, brk=brk:
                              broken_fuzz_call(op, seed, brk)) for brk in breaks]
            calls.append(BadCall(op, f"fuzz {seed}-weight dtype", lambda op=op, seed=seed: weight_dtype_call(op, seed)))
    return calls


def int64_overflow_calls() -> list[BadCall]:
    """Transposed output sizes past int64 ((4 - 1) * 2**62 wraps to -2**62 in int64; with 5 for 4 it wraps to a
    small positive size that used to pass every C++ check and fail later without the op's name): both sides reject
    them by name (conv_transpose_output_size in csrc/common/checks.h and ops/_shapes.py)."""
    return [BadCall(op, "stride 2**62", lambda op=op, dims=dims:
                    ([], dict(hostile.OPS[op][0]("cpu"), stride=[2**62] * dims)))
            for op, dims in (("conv_transpose2d", 2), ("conv_transpose3d", 3))]


def battery() -> list[BadCall]:
    return hostile_calls() + own_test_calls() + fuzz_calls() + int64_overflow_calls()


# ---- running a call both ways ----

def message(call: BadCall, device: str) -> str:
    """The error the call raises with its tensors on `device`, as "<class>: <message>"."""
    args, kwargs = call.build()
    args, kwargs = tree_map(lambda v: v.to(device) if isinstance(v, torch.Tensor) else v, (args, kwargs))
    try:
        getattr(torch.ops.convops, call.op).default(*args, **kwargs)
    except Exception as e:  # noqa: BLE001  (the class is part of what is compared)
        return f"{type(e).__name__}: {e}"
    return "no error"


def assert_same_message(call: BadCall) -> None:
    real, fake = message(call, "cpu"), message(call, "meta")
    assert real == fake
    assert real.startswith(f"RuntimeError: convops::{call.op}: "), real


BATTERY = battery()


def test_battery_ids_are_distinct():
    ids = [(call.op, call.id) for call in BATTERY]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("call", [pytest.param(call, id=f"{call.op}-{call.id}") for call in BATTERY])
def test_meta_message_is_the_cpu_message(call):
    assert_same_message(call)


@pytest.mark.parametrize("call", [pytest.param(call, id=f"{call.op}-{call.id}") for call in int64_overflow_calls()])
def test_transposed_output_size_past_int64_is_named(call):
    """The battery has these calls too (same message on both sides); here: the message says what overflowed."""
    assert "take the output size past 64 bits" in message(call, "cpu")


COMPILED = [("depthwise_conv2d", "hostile-bias one short"),
            ("depthwise_separable_conv2d", "hostile-kernel larger than the padded input"),
            ("conv_transpose2d", "hostile-unbatched, output size <= 0"),
            ("conv2d_group_norm_scale_max_pool_clamp", "hostile-pool taller than the conv output")]


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("op, id", COMPILED)
def test_compiled_message_is_the_cpu_message(op, id, dynamic):
    """Under torch.compile the fake sees FakeTensors, and with dynamic=True symbolic sizes, which the message shows
    as the sizes the eager call sees."""
    call = next(call for call in BATTERY if (call.op, call.id) == (op, id))
    args, kwargs = call.build()
    fn = torch.compile(getattr(torch.ops.convops, op).default, backend="eager", dynamic=dynamic, fullgraph=True)
    with pytest.raises(RuntimeError) as compiled:
        fn(*args, **kwargs)
    assert message(call, "cpu").removeprefix("RuntimeError: ") in str(compiled.value)


@pytest.mark.parametrize("to_layout", [torch.Tensor.to_sparse, torch.Tensor.to_sparse_csr])
def test_fake_tensor_layout_message_is_the_cpu_message(to_layout):
    """Sparse meta tensors are rejected in C++ (their own dispatch keys), but under torch.compile a sparse FakeTensor
    reaches the fake's layout check."""
    call = BadCall("depthwise_conv2d", "sparse input", lambda: ([], hostile.depthwise_base("cpu")))
    _, kwargs = call.build()
    kwargs["input"] = to_layout(kwargs["input"])
    with pytest.raises(RuntimeError) as real:
        torch.ops.convops.depthwise_conv2d.default(**kwargs)
    mode = FakeTensorMode()
    fake_kwargs = tree_map(lambda v: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v, kwargs)
    with pytest.raises(RuntimeError) as fake, mode:
        torch.ops.convops.depthwise_conv2d.default(**fake_kwargs)
    assert str(fake.value) == str(real.value)
