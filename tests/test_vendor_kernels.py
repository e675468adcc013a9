"""A vendor's own kernels (vendor_api.h, DIOPI-style C signatures) through the core's adapters:
cpu_sim offers its softmax with DEVX_SIM_VENDOR_KERNELS=1. With the simulated hardware told it
lacks ATen's softmax (DEVX_SIM_UNSUPPORTED_OPS=_softmax), anything that did not run on the vendor's
kernel would show up in the CPU fallback's counts — so the counts prove which kernel ran."""

from __future__ import annotations

import pytest

from conftest import assert_child_ok, run_python

CHECK = """
import torch, torch_devx
from torch_devx import diagnostics
assert diagnostics.coverage()["_softmax"] == "vendor", diagnostics.coverage()["_softmax"]
torch.manual_seed(0)
cases = [(torch.randn(6, 9), 1), (torch.randn(4, 7, 5), 0), (torch.randn(4, 7, 5), 2),
         (torch.randn(3, 5, dtype=torch.float64), -1), (torch.randn(2, 0, 3), 1),
         (torch.randn(5, 4).t(), 1)]  # non-contiguous: the adapter makes it contiguous
diagnostics.reset_fallback_stats()
side = torch.devx.Stream()
for x, dim in cases:
    with torch.devx.stream(side):
        got = torch.softmax(x.to("devx"), dim)
    side.synchronize()
    torch.testing.assert_close(got.cpu(), torch.softmax(x, dim))
assert "_softmax" not in diagnostics.fallback_stats(), diagnostics.fallback_stats()
# float16 is declined by the vendor's kernel: the op runs as without it (here: the CPU fallback).
h = torch.randn(3, 8, dtype=torch.float16)
torch.testing.assert_close(torch.softmax(h.to("devx"), 1).cpu(), torch.softmax(h, 1))
assert diagnostics.fallback_stats().get("_softmax") == 1, diagnostics.fallback_stats()
# Autograd through the vendor's forward.
x = torch.randn(4, 6, device="devx", requires_grad=True)
torch.softmax(x, 1)[:, 0].sum().backward()
xc = x.detach().cpu().requires_grad_()
torch.softmax(xc, 1)[:, 0].sum().backward()
torch.testing.assert_close(x.grad.cpu(), xc.grad)
print("ok")
"""


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vendor_softmax_runs_on_its_stream_and_declines_what_it_lacks(mode):
    proc = run_python(CHECK, DEVX_SIM_VENDOR_KERNELS="1", DEVX_SIM_UNSUPPORTED_OPS="_softmax",
                      DEVX_SIM_ASYNC="1" if mode == "async" else "0")
    assert_child_ok(proc)
    assert "ok" in proc.stdout


def test_without_the_switch_aten_runs_softmax():
    proc = run_python("""
        import torch, torch_devx
        print(torch_devx.diagnostics.coverage()["_softmax"])
        """)
    assert_child_ok(proc)
    assert proc.stdout.strip() == "aten"


def test_bad_switch_value_names_the_variable():
    proc = run_python("import torch_devx", DEVX_SIM_VENDOR_KERNELS="maybe")
    assert proc.returncode == 1
    assert "DEVX_SIM_VENDOR_KERNELS" in proc.stderr and "maybe" in proc.stderr
