"""cpu_sim's own kernels for reductions, scans, sorting, softmax and losses
(csrc/vendor/cpu_sim/kernels/reduce*.cpp, scan.cpp, sort.cpp, softmax.cpp, loss.cpp), run with
DEVX_SIM_KERNELS=own-only and checked against the CPU: several shapes (broadcast, strided,
empty, 0-dim), dtypes, the functional, in-place and out= variants and the backward kernels.
kernel_stats() proves that every kernel ran, none declined and nothing of the family reached
the CPU fallback."""

from __future__ import annotations

import pytest

from conftest import assert_child_ok, run_many

CHECK = r"""
import re
import torch, torch_devx
import torch.nn.functional as F
from torch_devx import diagnostics as d

KERNELS = [
    "sum.IntList_out", "sum.out", "mean.out", "prod.out", "amax.out", "amin.out", "max.unary_out",
    "min.unary_out", "max.dim_max", "min.dim_min", "argmax.out", "argmin.out", "all.all_out", "all.out",
    "any.all_out", "any.out", "var.correction_out", "std.correction_out", "linalg_vector_norm.out",
    "cumsum.out", "_foreach_norm.Scalar_out", "sort.values_stable", "topk.values", "_softmax.out",
    "_log_softmax.out", "_softmax_backward_data.out", "_log_softmax_backward_data.out",
    "nll_loss_forward.output", "nll_loss_backward.grad_input", "nll_loss2d_forward.output",
    "nll_loss2d_backward.grad_input", "mse_loss.out", "mse_loss_backward.grad_input",
    "binary_cross_entropy.out", "binary_cross_entropy_backward.grad_input",
]
FAMILY = re.compile(r"^(sum|mean|prod|amax|amin|max|min|argmax|argmin|all|any|var|std|linalg_vector_norm|cumsum_?"
                    r"|_foreach_norm|sort|topk|_(log_)?softmax(_backward_data)?|nll_loss2?d?_(forward|backward)"
                    r"|mse_loss(_backward)?|binary_cross_entropy(_backward)?)(\.|$)")
cov = d.coverage()
family = {op for op, how in cov.items() if FAMILY.match(op) and how == "vendor"}
for op in ["sum", "sum.dim_IntList", "mean.dim", "max.dim", "cumsum_", "sort.stable", "_softmax",
           "nll_loss2d_backward", "binary_cross_entropy.out"]:
    assert op in family, (op, cov.get(op))

torch.manual_seed(0)
nan, inf = float("nan"), float("inf")
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
counts = {"checks": 0}

def on_devx(v):
    if isinstance(v, torch.Tensor):
        return v.to("devx")
    if isinstance(v, (list, tuple)):
        return type(v)(on_devx(x) for x in v)
    if isinstance(v, dict):
        return {k: on_devx(x) for k, x in v.items()}
    return v

def close(got, want, **kw):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            close(g, w, **kw)
        return
    assert got.device.type == "devx", got.device
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **kw)
    counts["checks"] += 1

def check(f, *args, want=None, **kw):
    # f on the devx copies of the arguments against f on the CPU (or `want`).
    close(f(*on_devx(args), **on_devx(kw)), f(*args, **kw) if want is None else want)

def strided(x):
    # The same values in a layout that is not contiguous.
    return x.transpose(0, -1).contiguous().transpose(0, -1) if x.dim() > 1 else x[::1]

d.reset_kernel_stats(); d.reset_fallback_stats()

# ---- sums, means, products, all/any
x = torch.randn(5, 6, 7)
for dt in FLOATS + [torch.int64, torch.int32, torch.uint8, torch.bool]:
    a = (x * 4).to(dt)
    check(torch.sum, a)
    check(torch.sum, a, (0, 2))
    check(torch.sum, a, -1, keepdim=True)
    check(torch.sum, strided(a), (1, -1))
    check(torch.sum, a.permute(2, 0, 1), 1)
    check(torch.prod, a[:2, :2, :2])
    check(torch.all, a); check(torch.any, a); check(torch.all, a, 1); check(torch.any, strided(a), -1, True)
    if dt.is_floating_point:
        check(torch.mean, a); check(torch.mean, a, (0, -1)); check(torch.mean, strided(a), 1, True)
check(torch.sum, x, 1, dtype=torch.float64)
check(torch.sum, x.half(), (0, 1), dtype=torch.float32)
check(torch.sum, torch.arange(10, dtype=torch.int32))                      # int32 -> int64
check(torch.prod, torch.tensor([3, -2, 7], dtype=torch.int16))
check(torch.sum, torch.tensor(2.5)); check(torch.sum, torch.tensor(2.5), 0); check(torch.sum, torch.tensor(2.5), [])
check(torch.sum, torch.zeros(0, 3)); check(torch.sum, torch.zeros(0, 3), 0); check(torch.sum, torch.zeros(3, 0), 1)
check(torch.mean, torch.zeros(0, 3), 0); check(torch.prod, torch.zeros(0)); check(torch.all, torch.zeros(0, 2), 0)
check(torch.mean, torch.randn(4, 3, dtype=torch.complex64), 0); check(torch.sum, torch.randn(3, 4, dtype=torch.complex128))
check(torch.any, torch.tensor([0j, 1j])); check(torch.all, torch.tensor([1, 0], dtype=torch.uint8))
big = torch.randn(600, 700)                                                 # chunked and blocked paths
check(torch.sum, big); check(torch.sum, big, 0); check(torch.mean, big, 1); check(torch.sum, big.t(), 1)
o = torch.empty(0, device="devx"); torch.sum(x.to("devx"), 1, out=o); close(o, x.sum(1))
o = torch.empty(7, 5, device="devx").t(); torch.sum(x.to("devx"), 1, out=o); close(o, x.sum(1))
o = torch.empty(0, device="devx"); torch.mean(x.to("devx"), (0, 2), keepdim=True, out=o); close(o, x.mean((0, 2), True))
o = torch.empty(0, dtype=torch.bool, device="devx"); torch.any(x.to("devx") > 1, 0, out=o); close(o, (x > 1).any(0))

# ---- maxima, minima and their indices (NaN wins, first occurrence)
v = torch.tensor([[1, nan, 3, nan, -1], [2, 2, 1, 1, 0.], [-inf, -inf, -inf, -inf, -inf]])
for dt in FLOATS + [torch.int64, torch.int8, torch.bool]:
    a = (x * 4).to(dt)
    check(torch.max, a); check(torch.min, strided(a))
    check(torch.max, a, 1); check(torch.min, strided(a), -1, True); check(torch.max, a.permute(2, 0, 1), 0)
    if dt != torch.bool:
        check(torch.amax, a, (0, 2)); check(torch.amin, strided(a), 1, True); check(torch.amax, a, [])
        check(torch.argmax, a); check(torch.argmin, a, 1); check(torch.argmax, strided(a), -1, True)
for f in (torch.max, torch.min, torch.argmax, torch.argmin):
    check(f, v, 1)
check(torch.amax, v, 1); check(torch.amin, v, 0); check(torch.max, v); check(torch.argmax, v)
check(torch.max, torch.tensor(3.0), 0); check(torch.argmax, torch.tensor(3.0)); check(torch.amax, torch.zeros(0, 3), 1)
check(torch.max, big, 0); check(torch.argmin, big); check(torch.amax, big.t(), 1)
vals, idx = torch.empty(0, device="devx"), torch.empty(0, dtype=torch.long, device="devx")
torch.max(x.to("devx"), 2, out=(vals, idx)); close((vals, idx), tuple(x.max(2)))
for f in (lambda t: t.max(), lambda t: t.amax(1)):
    try:
        f(torch.zeros(2, 0, device="devx"))
    except (RuntimeError, IndexError):
        pass
    else:
        raise AssertionError("no error for the maximum of nothing")

# ---- var, std, norms, cumsum
for dt in FLOATS + [torch.complex64]:
    a = x.to(dt)
    check(torch.var, a); check(torch.std, a, (0, 2)); check(torch.var, strided(a), 1, correction=0, keepdim=True)
    check(torch.std, a, -1, correction=2.5)
    for ord_ in [2, 1, inf, -inf, 0, 3, 0.5, -1.5]:
        check(torch.linalg.vector_norm, a, ord_); check(torch.linalg.vector_norm, strided(a), ord_, (0, -1), True)
    check(torch.cumsum, a, 1); check(torch.cumsum, strided(a), 0)
check(torch.var, torch.tensor([1.0])); check(torch.var, torch.tensor([1.0, 2.0]), correction=3)
check(torch.var, big); check(torch.std, big, 0)
check(torch.linalg.vector_norm, v, inf, 1); check(torch.linalg.vector_norm, v, 0, 1)
check(torch.linalg.vector_norm, x.half(), dtype=torch.float32); check(torch.linalg.vector_norm, torch.zeros(0, 3))
# ATen's float32 norm accumulates in float: a long vector is checked against float64.
close(torch.linalg.vector_norm(big.to("devx")), torch.linalg.vector_norm(big.double()).float())
for dt in [torch.int64, torch.int32, torch.uint8, torch.bool]:
    check(torch.cumsum, (x * 3).to(dt), -1)
check(torch.cumsum, x, 1, dtype=torch.float64); check(torch.cumsum, torch.tensor(2.0), 0); check(torch.cumsum, torch.zeros(3, 0), 1)
c = x.clone(); cd = c.to("devx"); c.cumsum_(2); cd.cumsum_(2); close(cd, c)
o = torch.empty(0, device="devx"); torch.cumsum(x.to("devx"), 0, out=o); close(o, x.cumsum(0))
ts = [x, big[:1, :300], torch.randn(3), torch.zeros(0)]
for ord_ in [2, 1, inf]:
    check(torch._foreach_norm, ts[:3] if ord_ == inf else ts, ord_)
p = torch.nn.Parameter(torch.randn(10, 10)); p.grad = torch.randn(10, 10)
pd = torch.nn.Parameter(p.detach().to("devx")); pd.grad = p.grad.to("devx")
close(torch.nn.utils.clip_grad_norm_([pd], 1.0), torch.nn.utils.clip_grad_norm_([p], 1.0)); close(pd.grad, p.grad)

# ---- sort and topk (stable; NaN above everything)
s = torch.tensor([[1, nan, 3, nan, -1, 3, 0], [2, 2, 1, 1, 0, 0, -0.0]])
for dt in FLOATS + [torch.int64, torch.int16, torch.uint8, torch.bool]:
    a = (x * 3).to(dt)
    check(torch.sort, a); check(torch.sort, a, 0, True); check(torch.sort, strided(a), dim=1, stable=True)
for desc in (False, True):
    check(torch.sort, s, descending=desc); check(torch.argsort, s, 1, desc)
check(torch.sort, torch.tensor(3.0)); check(torch.sort, torch.zeros(0, 4))
for dt in [torch.float32, torch.float64, torch.int64]:
    a = torch.randperm(5 * 6 * 7).reshape(5, 6, 7).to(dt)                  # no ties: one right answer
    check(torch.topk, a, 3); check(torch.topk, strided(a), 2, 0, False); check(torch.topk, a, 0, 1)
    # sorted=False leaves the order open: the same set of values.
    tv = torch.topk(a.to("devx"), 4, -1, True, False).values.cpu()
    torch.testing.assert_close(tv.sort(-1).values, torch.topk(a, 4, -1).values.sort(-1).values)
for k, largest in [(3, True), (2, False)]:
    # With ties ATen's indices are unspecified: the values must agree and the indices point at them.
    tv, ti = torch.topk(s.to("devx"), k, largest=largest)
    close(tv, torch.topk(s, k, largest=largest).values); close(s.to("devx").gather(1, ti), tv.cpu())
vals, idx = torch.empty(0, device="devx"), torch.empty(0, dtype=torch.long, device="devx")
torch.sort(x.to("devx"), 1, out=(vals, idx)); close((vals, idx), tuple(x.sort(1)))

# ---- softmax and log_softmax, forward and backward
for dt in FLOATS:
    a = x.to(dt)
    for dim in [0, 1, -1]:
        check(torch.softmax, a, dim); check(torch.softmax, strided(a), dim); check(torch.softmax, a.permute(1, 2, 0), dim)
        if dt.itemsize == 2 and dim == -1:
            # ATen's last-dim log_softmax rounds its intermediates to 16 bits: compared with float32 here.
            close(torch.log_softmax(a.to("devx"), dim), torch.log_softmax(a.float(), dim).to(dt))
        else:
            check(torch.log_softmax, a, dim); check(torch.log_softmax, strided(a), dim)
        y, g = torch.softmax(a, dim), torch.randn(5, 6, 7).to(dt)
        check(torch._softmax_backward_data, g, y, dim, dt)
        check(torch._softmax_backward_data, strided(g), strided(y), dim, dt)
        check(torch._log_softmax_backward_data, g, torch.log_softmax(a, dim), dim, dt)
h = x.half()
close(torch._softmax(h.to("devx"), 1, True), torch.softmax(h.float(), 1))  # half_to_float (not on the CPU)
close(torch._log_softmax(h.to("devx"), 2, True), torch.log_softmax(h.float(), 2))
g, y = torch.randn(5, 6, 7), torch.softmax(h.float(), 1)
close(torch._softmax_backward_data(g.to("devx"), y.to("devx"), 1, torch.float16), torch._softmax_backward_data(g, y, 1, torch.float32).half())
check(torch.softmax, torch.tensor(2.0), 0); check(torch.log_softmax, torch.zeros(0, 3), 1)
o = torch.empty(0, device="devx"); torch.ops.aten._softmax.out(x.to("devx"), 1, False, out=o); close(o, torch.softmax(x, 1))
for f in (torch.softmax, torch.log_softmax):
    for dt in [torch.float32, torch.float64]:
        a = x.to(dt).clone().requires_grad_(); ad = a.detach().to("devx").requires_grad_()
        g = torch.randn(5, 6, 7, dtype=dt)
        f(a, 1).backward(g); f(ad, 1).backward(g.to("devx")); close(ad.grad, a.grad)

# ---- losses
logits, t, w = torch.randn(8, 5), torch.randint(0, 5, (8,)), torch.rand(5)
t[2] = -100
img, ti = torch.randn(2, 4, 3, 5), torch.randint(0, 4, (2, 3, 5))
pr, pt = torch.rand(6, 4), torch.rand(6, 4)
pr[0, 0], pr[1, 1] = 0.0, 1.0                                                # the logs clamp at -100
for red in ["none", "mean", "sum"]:
    for dt in [torch.float32, torch.float64, torch.bfloat16]:
        check(F.nll_loss, logits.to(dt), t, reduction=red)
    check(F.nll_loss, logits, t, weight=w, reduction=red)
    check(F.nll_loss, strided(logits), t.clamp(min=3), weight=w, reduction=red, ignore_index=3)
    check(F.nll_loss, logits[0], t[0], reduction=red); check(F.nll_loss, logits[0], t[2], reduction=red)
    check(F.nll_loss, img, ti, reduction=red); check(F.nll_loss, img, ti, weight=torch.rand(4), reduction=red, ignore_index=1)
    check(F.nll_loss, img.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2), ti, reduction=red)
    check(F.nll_loss, torch.randn(0, 5), torch.zeros(0, dtype=torch.long), reduction=red)
    check(F.mse_loss, logits, torch.randn(8, 5), reduction=red); check(F.mse_loss, strided(logits), torch.randn(8, 5).double(), reduction=red)
    check(F.mse_loss, logits.bfloat16(), torch.randn(8, 5).bfloat16(), reduction=red)
    check(F.binary_cross_entropy, pr, pt, reduction=red); check(F.binary_cross_entropy, strided(pr.double()), pt.double(), weight=torch.rand(4).double(), reduction=red)
check(F.nll_loss, logits, torch.full((8,), -100), reduction="mean")         # all ignored: NaN
# ATen sums a float16 nll_loss in float16: compared with float32 here.
close(F.nll_loss(logits.half().to("devx"), t.to("devx")), F.nll_loss(logits.half().float(), t).half())
o, tw = torch.empty(0, device="devx"), torch.empty(0, device="devx")
torch.ops.aten.nll_loss_forward.output(logits.to("devx"), t.to("devx"), None, 1, -100, output=o, total_weight=tw)
close((o, tw), tuple(torch.ops.aten.nll_loss_forward(logits, t, None, 1, -100)))
o = torch.empty(0, device="devx"); torch.ops.aten.mse_loss.out(logits.to("devx"), logits.t().contiguous().t().to("devx"), 2, out=o)
close(o, torch.zeros(()))

def grads(fn, inp, *rest, **kw):
    # The gradient of the first argument, on devx against the CPU, for every reduction.
    for red in ["none", "mean", "sum"]:
        a = inp.clone().requires_grad_(); ad = inp.to("devx").requires_grad_()
        lc = fn(a, *rest, reduction=red, **kw); ld = fn(ad, *on_devx(rest), reduction=red, **on_devx(kw))
        g = torch.randn_like(lc)
        lc.backward(g); ld.backward(g.to("devx"))
        close(ad.grad, a.grad)

grads(F.nll_loss, logits, t); grads(F.nll_loss, logits, t.clamp(min=0), weight=w, ignore_index=1); grads(F.nll_loss, logits[0], t[0])
grads(F.nll_loss, img, ti); grads(F.nll_loss, img.double(), ti, weight=torch.rand(4).double())
grads(F.mse_loss, logits, torch.randn(8, 5)); grads(F.mse_loss, logits.double(), torch.randn(8, 5).double())
grads(F.binary_cross_entropy, pr * 0.98 + 0.01, pt); grads(F.binary_cross_entropy, pr, pt, weight=torch.rand(4))

# cross_entropy training, end to end: log_softmax, nll_loss and their backwards.
torch.manual_seed(1)
model = torch.nn.Linear(10, 5)
model_d = torch.nn.Linear(10, 5).to("devx"); model_d.load_state_dict(model.state_dict())
data, labels = torch.randn(16, 10), torch.randint(0, 5, (16,))
labels[3] = -100
opt, opt_d = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(model_d.parameters(), lr=0.1)
for _ in range(3):
    losses = []
    for m, o_, xs, ys in [(model, opt, data, labels), (model_d, opt_d, data.to("devx"), labels.to("devx"))]:
        o_.zero_grad()
        losses.append(F.cross_entropy(m(xs), ys))
        losses[-1].backward()
        o_.step()
    close(losses[1], losses[0].detach())
close(model_d.weight, model.weight.detach())

# ---- user errors, reported at the next synchronisation
for bad, message in [
    (lambda: F.nll_loss(logits.to("devx"), torch.tensor([0, 1, 2, 3, 4, 5, 1, 1], device="devx")), "Target 5 is out of bounds"),
    (lambda: F.binary_cross_entropy(torch.tensor([1.5], device="devx"), torch.tensor([1.0], device="devx")), "between 0 and 1"),
]:
    try:
        bad().cpu()
    except RuntimeError as e:
        assert message in str(e), e
    else:
        raise AssertionError("no error: " + message)

stats = d.kernel_stats()
missing = [k for k in KERNELS if not stats["vendor"].get(k)]
assert not missing, missing
assert stats["declined"] == {}, stats["declined"]
assert stats["aten"] == 0, stats
fell_back = set(d.fallback_stats()) & family
assert not fell_back, fell_back
print("ok", counts["checks"])
"""


def test_own_reduce_family_matches_the_cpu_sync_and_async():
    sync, asynchronous = run_many([
        (CHECK, {"DEVX_SIM_KERNELS": "own-only", "DEVX_SIM_ASYNC": "0"}),
        (CHECK, {"DEVX_SIM_KERNELS": "own-only", "DEVX_SIM_ASYNC": "1"}),
    ])
    for proc in (sync, asynchronous):
        assert_child_ok(proc)
        assert "ok" in proc.stdout
    # Both runs made the same comparisons.
    assert sync.stdout.split()[-1] == asynchronous.stdout.split()[-1]
