"""convops ops inside an autocast region: they compute in their inputs' dtype, as outside it.

Autocast would otherwise reach the ATen calls inside an op's kernel (convops registers no autocast cast policy, so
the region stays active down there): at::matmul under autocast returns fp16/bf16 products, which broke the
conv_transpose kernel == stride GEMM path, and an ATen fallback path returned another dtype than the op's fake
implementation promises. Each op is checked on the fixed configurations of tests/test_cuda_runtime.py, fp32
inputs with TF32 off, against its own result outside the region.
"""
from __future__ import annotations

import pytest
import torch

from common_utils import DEVICES, allow_tf32, assert_output_layout
from test_cuda_runtime import OP_NAMES, config, op_of

AUTOCAST_DTYPES = {"cpu": [torch.bfloat16], "cuda": [torch.float16, torch.bfloat16]}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_name", OP_NAMES)
def test_op_inside_autocast_computes_in_the_inputs_dtype(device, op_name):
    op, c = op_of(op_name), config(op_name, "float32")
    with allow_tf32(False):
        args = op.build(c, device)
        expected = op.run(args)
        for dtype in AUTOCAST_DTYPES[device]:
            with torch.autocast(device, dtype=dtype):
                out = op.run(args)
            assert out.dtype == torch.float32, (dtype, out.dtype)
            torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)
            assert_output_layout(out, args[0])
