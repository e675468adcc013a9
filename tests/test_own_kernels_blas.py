"""cpu_sim's own BLAS-backed kernels (DEVX_SIM_KERNELS=own-only): matrix products on OpenBLAS,
convolution as im2col + GEMM, 2-d pooling. Every kernel is checked against the CPU over shapes,
layouts, dtypes and the functional / in-place / out= variants, forward and backward; the kernel
counts prove that the vendor's kernels, not ATen or the CPU fallback, computed the results."""

from __future__ import annotations

import pytest

from conftest import assert_child_ok, run_many

# Helpers every child shares: run `f` on CPU tensors and on devx copies, compare results and
# (grad=True) the gradients of every floating-point tensor argument.
PRELUDE = """
import time
import torch, torch_devx
import torch.nn.functional as F
from torch_devx import diagnostics as d

torch.manual_seed(0)
MINE = {"mm", "addmm", "bmm", "baddbmm", "addmv", "dot", "convolution_overrideable",
        "convolution_backward_overrideable", "max_pool2d_with_indices", "max_pool2d_with_indices_backward",
        "avg_pool2d", "avg_pool2d_backward", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward"}

def base(op):
    return op.split(".")[0].rstrip("_") if not op.startswith("_") else op.split(".")[0]

def tol_of(dtype, tol):
    if tol is not None:
        return dict(atol=tol, rtol=tol)
    return dict(atol=2e-2, rtol=2e-2) if dtype in (torch.float16, torch.bfloat16) else {}

def check(f, *args, tol=None, grad=False):
    def prepare(device):
        return [a.detach().to(device).requires_grad_(grad and a.is_floating_point())
                if isinstance(a, torch.Tensor) else a for a in args]
    cpu_args, dev_args = prepare("cpu"), prepare("devx")
    expected, actual = f(*cpu_args), f(*dev_args)
    if not isinstance(expected, tuple):
        expected, actual = (expected,), (actual,)
    dtype = expected[0].dtype
    for e, a in zip(expected, actual):
        assert a.device.type == "devx", a.device
        torch.testing.assert_close(a.cpu(), e, equal_nan=True, **tol_of(dtype, tol))
    if grad:
        g = torch.randn_like(expected[0])
        expected[0].backward(g)
        actual[0].backward(g.to("devx"))
        for c, v in zip(cpu_args, dev_args):
            if isinstance(c, torch.Tensor) and c.grad is not None:
                torch.testing.assert_close(v.grad.cpu(), c.grad, **tol_of(dtype, tol))
            elif isinstance(c, torch.Tensor):
                assert v.grad is None

def assert_mine_only(expected_kernels):
    stats = d.kernel_stats()
    for k in expected_kernels:
        assert stats["vendor"].get(k, 0) > 0, (k, stats)
    declined = {key: n for key, n in stats["declined"].items() if base(key[0]) in MINE}
    assert not declined, declined
    fallen = {op: n for op, n in d.fallback_stats().items() if base(op) in MINE}
    assert not fallen, fallen

d.reset_kernel_stats()
d.reset_fallback_stats()
"""

MATMUL = PRELUDE + """
def rand(dtype, *shape):
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    return torch.randint(-20 if dtype != torch.uint8 else 0, 20, shape, dtype=dtype)

nan = float("nan")
for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8):
    r = lambda *s: rand(dt, *s)
    a, b = r(7, 5), r(5, 9)
    check(torch.mm, a, b)
    check(torch.mm, r(5, 7).t(), r(9, 5).t())                      # both column-major
    check(torch.mm, r(7, 10)[:, ::2], r(10, 9)[::2])               # neither layout fits BLAS
    check(torch.mm, r(0, 5), r(5, 3))
    check(torch.mm, r(4, 0), r(0, 3))                              # k = 0: zeros
    o = torch.full((9, 7), 3, dtype=dt).to("devx").t()             # a column-major out=
    torch.mm(a.to("devx"), b.to("devx"), out=o)
    torch.testing.assert_close(o.cpu(), torch.mm(a, b))
    o = torch.empty(0, dtype=dt, device="devx")                    # out= resized
    torch.mm(a.to("devx"), b.to("devx"), out=o)
    torch.testing.assert_close(o.cpu(), torch.mm(a, b))
    check(torch.addmm, r(9), a, b)                                 # nn.Linear's broadcast bias
    check(lambda s, x, y: torch.addmm(s, x, y, beta=2, alpha=3), r(7, 1), a, b)
    check(lambda s, x, y: torch.addmm(s, x, y, beta=2), r(), a, b)
    check(lambda s, x, y: s.clone().addmm_(x, y, alpha=2), r(7, 9), a, b)
    check(torch.bmm, r(3, 4, 5), r(3, 5, 6))
    check(torch.bmm, r(3, 5, 4).transpose(1, 2), r(3, 6, 5).transpose(1, 2))
    check(torch.bmm, r(1, 4, 5).expand(3, 4, 5), r(3, 5, 6))       # batch stride 0
    check(torch.baddbmm, r(4, 6), r(3, 4, 5), r(3, 5, 6))
    check(lambda s, x, y: s.clone().baddbmm_(x, y, beta=3, alpha=2), r(3, 4, 6), r(3, 4, 5), r(3, 5, 6))
    check(torch.addmv, r(7), a, r(5))
    check(lambda s, m, v: s.clone().addmv_(m, v, beta=2), r(9), b.t(), r(10)[::2])
    check(torch.addmv, r(1), r(0, 3), r(3))
    check(torch.dot, r(10), r(10))
    check(torch.dot, r(10)[::2], r(15)[::3])
    check(torch.dot, r(0), r(0))
    o = torch.empty((), dtype=dt, device="devx")
    torch.dot(a[0].to("devx"), a[1].to("devx"), out=o)
    torch.testing.assert_close(o.cpu(), torch.dot(a[0], a[1]))
    if dt.is_floating_point:
        # beta = 0 ignores self, NaN included.
        check(lambda s, x, y: torch.addmm(s, x, y, beta=0), torch.full((7, 9), nan, dtype=dt), a, b)
        check(lambda s, x, y: torch.baddbmm(s, x, y, beta=0), torch.full((3, 4, 6), nan, dtype=dt),
              r(3, 4, 5), r(3, 5, 6))
        check(lambda s, m, v: torch.addmv(s, m, v, beta=0), torch.full((7,), nan, dtype=dt), a, r(5))
        o = torch.full((7, 9), nan, dtype=dt, device="devx")
        torch.mm(a.to("devx"), b.to("devx"), out=o)
        torch.testing.assert_close(o.cpu(), torch.mm(a, b), **tol_of(dt, None))

# uint8 products wrap around as ATen's do.
x8 = torch.full((2, 40), 200, dtype=torch.uint8)
check(torch.mm, x8, x8.t())

# nn.Linear forward and backward (addmm and mm on transposed views), with and without bias.
check(F.linear, torch.randn(6, 20), torch.randn(12, 20), torch.randn(12), grad=True, tol=1e-4)
check(F.linear, torch.randn(2, 3, 20), torch.randn(12, 20), None, grad=True, tol=1e-4)
check(F.linear, torch.randn(6, 20, dtype=torch.float64), torch.randn(12, 20, dtype=torch.float64),
      torch.randn(12, dtype=torch.float64), grad=True)
check(F.linear, torch.randn(6, 20).half(), torch.randn(12, 20).half(), torch.randn(12).half(), grad=True)
check(lambda x, y: torch.matmul(x, y), torch.randn(2, 3, 4, 5), torch.randn(2, 3, 5, 6), grad=True)

# Converted float16 operands larger than one tile: several row and column tiles, and batches in groups.
k = (1 << 21) + 7
check(torch.mm, torch.randn(3, k).half() * 0.01, torch.randn(k, 3).half() * 0.01, tol=2e-2)
check(torch.bmm, torch.randn(70, 256, 8).bfloat16(), torch.randn(70, 8, 256).bfloat16())

assert_mine_only(["mm.out", "addmm.out", "bmm.out", "baddbmm.out", "addmv.out", "dot.out"])
print("ok")
"""

CONV_POOL = PRELUDE + """
cl = torch.channels_last
for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
    # The 16-bit floats take a subset: they share the float32 code after conversion.
    full = dt in (torch.float32, torch.float64)
    r = lambda *s: torch.randn(*s, dtype=dt)
    x, w, b = r(2, 4, 9, 8), r(6, 4, 3, 3), r(6)
    check(lambda x, w, b: F.conv2d(x, w, b, stride=(1, 2), padding=(2, 1), dilation=(2, 1), groups=2),
          x, r(6, 2, 3, 2), b, grad=True)
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1), x.to(memory_format=cl), w.to(memory_format=cl), b, grad=True)
    check(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2),
          x, r(4, 3, 3, 3), b, grad=True)
    check(lambda x: F.max_pool2d(x, 3, 2, 1), x, grad=True)
    check(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), x, grad=True)
    check(lambda x: F.adaptive_avg_pool2d(x, (5, 7)), x.to(memory_format=cl), grad=True)
    if not full:
        continue
    check(F.conv2d, x, w, b, grad=True)
    check(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), x, w, b, grad=True)
    check(lambda x, w, b: F.conv2d(x, w, b, groups=4), r(2, 4, 6, 6), r(8, 1, 3, 3), r(8), grad=True)  # depthwise
    check(F.conv2d, r(0, 4, 5, 5), w, b)
    check(F.conv2d, r(4, 6, 6), w, b, grad=True)                                            # unbatched
    check(lambda x, w, b: F.conv1d(x, w, b, padding=2, dilation=2, groups=2), r(3, 4, 11), r(6, 2, 3), b, grad=True)
    check(lambda x, w, b: F.conv1d(x, w, b, stride=2), r(3, 4, 11).transpose(1, 2).contiguous().transpose(1, 2),
          r(6, 4, 1), b, grad=True)
    check(lambda x, w, b: F.conv3d(x, w, b, padding=1, stride=(1, 2, 1)), r(2, 2, 4, 5, 5), r(3, 2, 3, 3, 3), r(3),
          grad=True)
    check(lambda x, w, b: F.conv_transpose1d(x, w, b, stride=3, dilation=2), r(2, 4, 5), r(4, 2, 4), r(2), grad=True)
    check(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(3, 2), padding=(1, 2), output_padding=(2, 3), groups=2,
                                             dilation=(4, 4)), r(2, 2, 4, 4), r(2, 2, 4, 5), r(4), grad=True)

    check(lambda x: F.max_pool2d(x, (2, 3), (1, 2), (1, 1), dilation=(2, 1), ceil_mode=True),
          x.to(memory_format=cl), grad=True)
    check(lambda x: F.max_pool2d(x, 2), x[0], grad=True)
    check(lambda x: F.max_pool2d(x, 3, 1, return_indices=True), x)
    check(lambda x: F.max_pool2d(x, 2, return_indices=True),
          torch.tensor([[[1.0, float("nan")], [3.0, 2.0]]], dtype=dt))                 # NaN is the maximum
    check(lambda x: F.max_pool2d(x, 2), r(0, 3, 4, 4))
    check(lambda x: F.avg_pool2d(x, 3, 2, 1), x, grad=True)
    check(lambda x: F.avg_pool2d(x, (3, 2), 2, (1, 0), divisor_override=5), x.to(memory_format=cl), grad=True)
    check(lambda x: F.avg_pool2d(x, 2), x[1], grad=True)
    check(lambda x: F.adaptive_avg_pool2d(x, (3, 5)), x, grad=True)
    check(lambda x: F.adaptive_avg_pool2d(x, (4, 3)), x[1].transpose(1, 2), grad=True)

    o, i = torch.empty(0, dtype=dt, device="devx"), torch.empty(0, dtype=torch.long, device="devx")
    torch.ops.aten.max_pool2d_with_indices.out(x.to("devx"), [2, 2], [2, 2], [0, 0], [1, 1], False, out=o, indices=i)
    torch.testing.assert_close((o.cpu(), i.cpu()), F.max_pool2d(x, 2, return_indices=True))
    o = torch.empty(0, dtype=dt, device="devx")
    torch._C._nn.avg_pool2d(x.to("devx"), [3, 3], [2, 2], [1, 1], out=o)
    torch.testing.assert_close(o.cpu(), F.avg_pool2d(x, 3, 2, 1))

check(lambda x: F.avg_pool2d(x, 3, 2, 1), torch.randint(-100, 100, (2, 3, 7, 7)))   # int64 divides as integers
for dt in (torch.int64, torch.int32, torch.uint8):  # integer sums wrap around
    ri = lambda *s: torch.randint(0, 50, s, dtype=dt)
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=2), ri(2, 4, 5, 5), ri(6, 2, 3, 3), ri(6))
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), ri(2, 3, 7, 7).to(memory_format=cl))
check(lambda x, w: F.conv_transpose2d(x, w, stride=2), torch.randint(-9, 9, (2, 4, 3, 3)),
      torch.randint(-9, 9, (4, 3, 2, 2)))

# Backward computes only the gradients asked for (output_mask), the others undefined.
x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
check(F.conv2d, x, w, grad=True)                                                   # no grad_bias
check(lambda x, w: F.conv2d(x, w.detach()), x, w, grad=True)                       # grad_input only
check(lambda x, w: F.conv_transpose2d(x.detach(), w, stride=2), x, torch.randn(3, 2, 3, 3), grad=True)
gi, gw, gb = torch.ops.aten.convolution_backward_overrideable(
    torch.randn(2, 4, 6, 6, device="devx"), x.to("devx"), w.to("devx"), [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
    [False, True, False])
assert gi is None and gb is None and gw.shape == w.shape, (gi, gb, gw)

# A small CNN: one training step matches the CPU's.
def model():
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, groups=2, dilation=2, padding=2, bias=False), torch.nn.ReLU(), torch.nn.AvgPool2d(2),
        torch.nn.AdaptiveAvgPool2d((3, 3)), torch.nn.Flatten(), torch.nn.Linear(144, 10))
cpu_model, dev_model = model(), model().to("devx")
data, grad = torch.randn(4, 3, 16, 16), torch.randn(4, 10)
for m, dev in ((cpu_model, "cpu"), (dev_model, "devx")):
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(data.to(dev)).backward(grad.to(dev))
    opt.step()
for p, q in zip(cpu_model.parameters(), dev_model.parameters()):
    torch.testing.assert_close(q.detach().cpu(), p.detach(), atol=1e-5, rtol=1e-4)

assert_mine_only(["convolution_overrideable.out", "convolution_backward_overrideable.out",
                  "max_pool2d_with_indices.out", "max_pool2d_with_indices_backward.grad_input",
                  "avg_pool2d.out", "avg_pool2d_backward.grad_input", "_adaptive_avg_pool2d.out",
                  "_adaptive_avg_pool2d_backward.out"])

# The convolution runs on BLAS: a naive loop takes seconds for this one.
x, w = torch.randn(16, 64, 32, 32, device="devx"), torch.randn(64, 64, 3, 3, device="devx")
best = float("inf")
for _ in range(3):
    start = time.perf_counter()
    F.conv2d(x, w, padding=1).cpu()
    best = min(best, time.perf_counter() - start)
assert best < 1.0, best
print("ok")
"""


@pytest.mark.parametrize("stream_mode", ["sync", "async"])
def test_own_blas_conv_and_pool_kernels_match_the_cpu(stream_mode):
    env = dict(DEVX_SIM_KERNELS="own-only", DEVX_SIM_ASYNC="1" if stream_mode == "async" else "0")
    for proc in run_many([(MATMUL, env), (CONV_POOL, env)]):
        assert_child_ok(proc)
        assert proc.stdout.strip().endswith("ok"), proc.stdout
