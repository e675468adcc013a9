"""float16 and bfloat16 OpInfo samples of the ops autocast runs in lower or mixed precision
(matmuls and convolutions, norms, softmax, losses, activations, elementwise), forward and backward,
on devx against the CPU, natively (no CPU fallback). The check is torch_devx/tools/opinfo_check.py's."""
from __future__ import annotations

import pytest
import torch

from torch_devx.tools import opinfo_check as oc

# OpInfo names (name or name.variant) of what autocast produces: CUDA's lower-precision list, the
# fp32 list it feeds (norms, softmax, losses) and the elementwise ops between them.
AUTOCAST_OPS = (
    "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "nn.functional.linear",
    "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv_transpose2d",
    "nn.functional.scaled_dot_product_attention",
    "nn.functional.layer_norm", "nn.functional.group_norm", "nn.functional.batch_norm",
    "softmax", "log_softmax", "nn.functional.cross_entropy", "nn.functional.nll_loss",
    "nn.functional.mse_loss", "nn.functional.binary_cross_entropy_with_logits",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.relu", "sigmoid", "tanh",
    "add", "mul", "sub", "div.no_rounding_mode", "exp", "rsqrt", "pow", "sum", "mean", "where", "cat",
    "nn.functional.embedding",
)
LOW_PRECISION = (torch.float16, torch.bfloat16)

OP_DB = oc.load_op_db()
BY_NAME = {oc.full_name(op): op for op in OP_DB}


def test_every_listed_op_is_in_op_db():
    missing = [name for name in AUTOCAST_OPS if name not in BY_NAME]
    assert not missing, f"not in this torch's op_db: {missing}"


@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", AUTOCAST_OPS)
def test_low_precision_op_matches_cpu(name, dtype):
    op = BY_NAME[name]
    if not op.supports_dtype(dtype, "cpu"):
        pytest.skip(f"{name} has no {dtype} kernel on the CPU in this torch, so none to compare with")
    with oc.devx_checks():
        res = oc.check_op(op, limit_samples=2, dtypes=(dtype,))
    assert res.samples > 0, res.notes
    assert res.ok, f"{name} {dtype}: " + "; ".join(res.errors)
    assert res.native, f"{name} {dtype} fell back to the CPU: {res.fallback_ops}"
    if op.supports_autograd and dtype in op.supported_backward_dtypes("cpu"):
        assert res.backward_ok is True, f"{name} {dtype}: backward not checked: {res.notes}"
