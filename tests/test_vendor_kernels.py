"""A vendor's own kernels through the kernel ABI (devx_kernel_abi.h) and the generated adapters:
cpu_sim offers its own kernel library with DEVX_SIM_KERNELS=own (ATen's kernels for the rest) or
own-only (nothing of ATen: what it lacks goes to the CPU fallback). kernel_stats() says which
kernel ran each call, so the counts prove the path taken."""

from __future__ import annotations

import pytest

from conftest import assert_child_ok, run_python

CHECK = """
import torch, torch_devx
from torch_devx import diagnostics as d
cov = d.coverage()
for op in ["add.Tensor", "add_.Tensor", "add.out", "mul.Tensor", "relu", "relu_", "_softmax"]:
    assert cov[op] == "vendor", (op, cov[op])
torch.manual_seed(0)
a, b = torch.randn(4, 5), torch.randn(5)
x, y = a.to("devx"), b.to("devx")
z = x.clone()
h = a.half()
hd = h.to("devx")
d.reset_kernel_stats()
side = torch.devx.Stream()
with torch.devx.stream(side):
    r = x + y                                  # broadcast
side.synchronize()
torch.testing.assert_close(r.cpu(), a + b)
torch.testing.assert_close(torch.add(x, y, alpha=3).cpu(), torch.add(a, b, alpha=3))
torch.testing.assert_close((x * 2.5).cpu(), a * 2.5)                    # a wrapped number
torch.testing.assert_close((x * torch.tensor(2.0)).cpu(), a * 2.0)      # a 0-dim CPU tensor
z.add_(y); torch.testing.assert_close(z.cpu(), a + b)                   # in-place
o = torch.empty(0, device="devx"); torch.mul(x, y, out=o)               # out=, resized
torch.testing.assert_close(o.cpu(), a * b)
torch.testing.assert_close((x.t() * x.t()).t().cpu(), a * a)            # strided
i = torch.arange(6).reshape(2, 3)
torch.testing.assert_close((i.to("devx") + 1).cpu(), i + 1)             # int64
torch.testing.assert_close((i.to("devx") * 0.5).cpu(), i * 0.5)         # int64 * float -> float32
torch.testing.assert_close((hd + hd).cpu(), h + h)
torch.testing.assert_close(torch.relu(x).cpu(), torch.relu(a))
for shape, dim in [((6, 9), 1), ((4, 7, 5), 0), ((4, 7, 5), 2), ((2, 0, 3), 1)]:
    s = torch.randn(shape)
    torch.testing.assert_close(torch.softmax(s.to("devx"), dim).cpu(), torch.softmax(s, dim))
stats = d.kernel_stats()
assert stats["aten"] == 0, stats
assert stats["vendor"]["add.out"] == 5 and stats["vendor"]["mul.out"] == 5, stats
assert stats["vendor"]["_softmax.out"] == 4, stats
# Copies on the device (dtype conversion, strides, broadcasting) run the vendor's copy kernel.
d.reset_kernel_stats()
torch.testing.assert_close(x.t().contiguous().cpu(), a.t().contiguous())
torch.testing.assert_close(x.half().cpu(), a.half())
torch.testing.assert_close(x.to(torch.int64).cpu(), a.to(torch.int64))
e = torch.empty(3, 4, 5, device="devx"); e.copy_(x)
torch.testing.assert_close(e.cpu(), a.expand(3, 4, 5))
stats = d.kernel_stats()
assert stats["vendor"] == {"copy.out": 4} and stats["aten"] == 0, stats
# A declined case: the ABI carries no uint16, so the core declines without asking the vendor.
u = torch.tensor([1, 2, 300]).to(torch.uint16)
ud = u.to("devx")
d.reset_kernel_stats(); d.reset_fallback_stats()
assert ((ud * ud).cpu().to(torch.int64) == (u * u).to(torch.int64)).all()
stats = d.kernel_stats()
assert stats["declined"] == {("mul.Tensor", "dtype UInt16"): 1}, stats
if "{mode}" == "own":
    assert stats["aten"] >= 1 and not d.fallback_stats(), (stats, d.fallback_stats())
else:
    assert stats["aten"] == 0 and d.fallback_stats() == {"mul.Tensor": 1}, (stats, d.fallback_stats())
# Mixed devices are the same error as on CUDA, raised before the vendor is asked.
try:
    x + torch.randn(4, 5)
except RuntimeError as e:
    assert "same device" in str(e), e
else:
    raise AssertionError("no error for mixed devices")
# Autograd through the vendor's kernels.
w = torch.randn(4, 6, device="devx", requires_grad=True)
torch.softmax(w * 2, 1)[:, 0].sum().backward()
wc = w.detach().cpu().requires_grad_()
torch.softmax(wc * 2, 1)[:, 0].sum().backward()
torch.testing.assert_close(w.grad.cpu(), wc.grad)
print("ok")
"""


@pytest.mark.parametrize("mode", ["own", "own-only"])
@pytest.mark.parametrize("stream_mode", ["sync", "async"])
def test_own_kernels_serve_functional_inplace_and_out_variants(mode, stream_mode):
    proc = run_python(CHECK.replace("{mode}", mode), DEVX_SIM_KERNELS=mode,
                      DEVX_SIM_ASYNC="1" if stream_mode == "async" else "0")
    assert_child_ok(proc)
    assert "ok" in proc.stdout


def test_by_default_aten_runs_and_the_vendor_offers_nothing():
    proc = run_python("""
        import torch, torch_devx
        from torch_devx import diagnostics as d
        print(d.coverage()["_softmax"], d.coverage()["add.Tensor"])
        x = torch.ones(3, device="devx")
        d.reset_kernel_stats()
        x + 1
        s = d.kernel_stats()
        assert s["vendor"] == {} and s["aten"] == 1, s
        """)
    assert_child_ok(proc)
    assert proc.stdout.split() == ["aten", "aten"]


def test_bad_kernel_source_names_the_variable():
    proc = run_python("import torch_devx", DEVX_SIM_KERNELS="mine")
    assert proc.returncode == 1
    assert "DEVX_SIM_KERNELS" in proc.stderr and "mine" in proc.stderr
