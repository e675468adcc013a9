"""Issued ops (DEVX_SIM_ASYNC=1) allocate their results from meta kernels: those results must have
the sizes, strides and storage offsets the real kernel gives (issue 20), or a channels_last model
computes differently in async mode."""
from __future__ import annotations

import pytest

from conftest import assert_child_ok, run_python

LAYOUTS = """
import torch, torch_devx
import torch.nn.functional as F
cl = torch.channels_last
def layouts(device):
    torch.manual_seed(0)
    rows = []
    for transposed in (False, True):
        for in_cl in (False, True):
            for w_cl in (False, True):
                x = torch.randn(2, 4, 7, 7)
                w = torch.randn(4, 6, 3, 3) if transposed else torch.randn(6, 4, 3, 3)
                x = x.contiguous(memory_format=cl) if in_cl else x
                w = w.contiguous(memory_format=cl) if w_cl else w
                x = x.to(device).requires_grad_()
                w = w.to(device).requires_grad_()
                conv = F.conv_transpose2d if transposed else F.conv2d
                y = conv(x, w, padding=1)
                y.backward(torch.ones_like(y))
                rows.append((transposed, in_cl, w_cl, tuple(y.shape), y.stride(), y.storage_offset(),
                             x.grad.stride(), w.grad.stride(), y.detach().sum().item()))
    return rows
cpu, devx = layouts("cpu"), layouts("devx")
for c, d in zip(cpu, devx):
    assert c[:-1] == d[:-1], (c, d)
    assert abs(c[-1] - d[-1]) < 1e-3 * max(1.0, abs(c[-1])), (c, d)
print("OK", len(cpu))
"""


@pytest.mark.parametrize("asynchronous", ["0", "1"])
def test_channels_last_convolutions_are_laid_out_as_the_kernel_lays_them_out(asynchronous):
    proc = run_python(LAYOUTS, DEVX_SIM_ASYNC=asynchronous)
    assert_child_ok(proc)
    assert "OK 8" in proc.stdout
