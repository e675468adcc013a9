"""cpu_sim's own normalisation, random-number and dropout kernels (kernels/batch_norm.cpp,
layer_norm.cpp, group_norm.cpp, random.cpp) under DEVX_SIM_KERNELS=own-only: the norms against
the CPU (in float64, rounded to the CPU's dtypes) over shapes, layouts, dtypes, variants and
backward; the random kernels by their statistics, ranges, errors and seeding. kernel_stats()
proves which kernels ran. The children run in parallel, once for the module."""

from __future__ import annotations

import json

import pytest

from conftest import assert_child_ok, run_many

COMMON = """
import json
import torch, torch_devx
import torch.nn.functional as F
from torch_devx import diagnostics as d
A = torch.ops.aten
torch.manual_seed(0)
LOWP = (torch.float16, torch.bfloat16)
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
       torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict()}
checks = 0
where = ""

def dev(t):
    return None if t is None else t.to("devx")

def same(got, want, tol, exact_dtype=True):
    global checks
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), where
        for g, w in zip(got, want):
            same(g, w, tol, exact_dtype)
        return
    if want is None:  # a gradient not asked for (the core's meta functions may allocate it still)
        return
    assert got.device.type == "devx", (where, got.device)
    assert got.shape == want.shape, (where, got.shape, want.shape)
    assert got.dtype == want.dtype or not exact_dtype, (where, got.dtype, want.dtype)
    torch.testing.assert_close(got.cpu().to(want.dtype), want, equal_nan=True, **tol, msg=lambda m: f"{where}: {m}")
    checks += 1

def raises(fn, text):
    try:
        fn()
    except RuntimeError as e:
        assert text in str(e), (text, str(e))
    else:
        raise AssertionError("no error: " + text)

def assert_ran(kernels, prefixes):
    torch.devx.synchronize()
    stats = d.kernel_stats()
    for k in kernels:
        assert stats["vendor"].get(k, 0) > 0, (k, stats)
    declined = [k for k in stats["declined"] if k[0].startswith(prefixes)]
    assert not declined, stats["declined"]
    fallen = [op for op in d.fallback_stats() if op.startswith(prefixes)]
    assert not fallen, fallen
    return {k: stats["vendor"][k] for k in kernels}
"""

NORMS = COMMON + """
FULL = {full}

def hi(t):
    return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t

def ref(fn, *args):
    # fn on the CPU computed in float64, rounded to the dtypes of the CPU's own results: ATen's CPU
    # kernels sum float32 in float32, and some 16-bit layouts in 16 bits.
    native = fn(*args)
    if not any(isinstance(a, torch.Tensor) and a.dtype in LOWP + (torch.float32,) for a in args):
        return native
    return tuple(None if n is None else h.to(n.dtype) for h, n in zip(fn(*[hi(a) for a in args]), native))

def layouts(x):
    # x, a channels-last (or transposed) copy of it, and a strided slice of a wider tensor
    if not FULL:
        return [x, x.transpose(0, -1).contiguous().transpose(0, -1)]
    out = [x]
    if x.dim() == 4:
        out.append(x.contiguous(memory_format=torch.channels_last))
    elif x.dim() >= 2:
        out.append(x.transpose(0, -1).contiguous().transpose(0, -1))
    out.append(torch.cat([x, x], dim=-1)[..., ::2])
    return out

def masks(x, dt):
    # every output of a backward; some left out (NULL outputs) on contiguous float32 inputs
    if x.is_contiguous() and dt == torch.float32:
        return [[True, True, True], [False, True, True], [True, False, False]]
    return [[True, True, True]]

def sweep(shapes, wide):
    # every float dtype on the shapes in `wide`, float32 on the others
    for shape in shapes:
        for dt in (FLOATS if FULL and shape in wide else [torch.float32]):
            yield shape, dt

# ---- batch norm: native_batch_norm (train, eval), its backward, the other entry points
for shape, dt in sweep([(6, 3), (4, 3, 7), (2, 3, 5, 4), (2, 2, 3, 2, 3), (1, 4, 2)], [(2, 3, 5, 4)]):
    pdt = torch.float32 if dt in LOWP else dt
    base, c = torch.randn(shape, dtype=dt) * 3 + 1, shape[1]
    for x in layouts(base):
        for affine in [True, False]:
            w, b = (torch.randn(c, dtype=pdt), torch.randn(c, dtype=pdt)) if affine else (None, None)
            for training in [True, False]:
                where = f"batch_norm {shape} {dt} {x.stride()} affine={affine} training={training}"
                rm, rv = torch.randn(c, dtype=pdt), torch.rand(c, dtype=pdt) + 0.5
                rmd, rvd = dev(rm), dev(rv)
                rmh, rvh = rm.double(), rv.double()  # updated by the float64 reference
                want = ref(lambda x, w, b: torch.native_batch_norm(
                    x, w, b, *((rmh, rvh) if x.dtype == torch.float64 else (rm.clone(), rv.clone())),
                    training, 0.1, 1e-5), x, w, b)
                got = torch.native_batch_norm(dev(x), dev(w), dev(b), rmd, rvd, training, 0.1, 1e-5)
                same(got[0], want[0], TOL[dt])
                same(got[1:], want[1:], TOL[pdt])
                same([rmd, rvd], [rmh.to(pdt), rvh.to(pdt)], TOL[pdt])
                gy = torch.randn_like(x)
                sm, si = (want[1], want[2]) if training else (None, None)
                for mask in masks(x, dt):
                    bw = ref(lambda *a: A.native_batch_norm_backward(*a, training, 1e-5, mask),
                             gy, x, w, rm, rv, sm, si)
                    bd = A.native_batch_norm_backward(dev(gy), dev(x), dev(w), dev(rm), dev(rv), dev(sm), dev(si),
                                                      training, 1e-5, mask)
                    same(bd[0], bw[0], TOL[dt])
                    # Without a weight the meta function says 16-bit parameter gradients, the CPU float32.
                    same(bd[1:], bw[1:], TOL[pdt] if affine else TOL[dt], exact_dtype=affine or dt == pdt)
where = "batch_norm variants"
x, w, b = torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)
rm, rv = torch.randn(3), torch.rand(3) + 0.5
same(A._native_batch_norm_legit_no_training(dev(x), dev(w), None, dev(rm), dev(rv), 0.1, 1e-5),
     A._native_batch_norm_legit_no_training(x, w, None, rm, rv, 0.1, 1e-5), TOL[torch.float32])
o = [torch.empty(0, device="devx") for _ in range(3)]
A._native_batch_norm_legit_no_training.out(dev(x), None, dev(b), dev(rm), dev(rv), 0.1, 1e-5, out0=o[0], out1=o[1],
                                           out2=o[2])
same(o, A._native_batch_norm_legit_no_training(x, None, b, rm, rv, 0.1, 1e-5), TOL[torch.float32])
o = [torch.empty(0, device="devx") for _ in range(3)]
torch.native_batch_norm(dev(x), dev(w), dev(b), None, None, True, 0.1, 1e-5, out=o)
same(o, torch.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5), TOL[torch.float32])
e = torch.randn(0, 3, 4)
same(torch.native_batch_norm(dev(e), dev(w), dev(b), dev(rm), dev(rv), False, 0.1, 1e-5),
     torch.native_batch_norm(e, w, b, rm, rv, False, 0.1, 1e-5), TOL[torch.float32])
# autograd through F.batch_norm, train then eval
for shape in [(8, 5), (4, 3, 6, 6), (2, 2, 3, 4, 5)]:
    c = shape[1]
    wc, bc = torch.randn(c, requires_grad=True), torch.randn(c, requires_grad=True)
    wd, bd_ = (t.detach().to("devx").requires_grad_() for t in (wc, bc))
    rc, vc = torch.randn(c), torch.rand(c) + 0.5
    rd, vd = dev(rc), dev(vc)
    for train in [True, False]:
        where = f"F.batch_norm {shape} train={train}"
        xc = torch.randn(shape, requires_grad=True)
        xd = xc.detach().to("devx").requires_grad_()
        yc = F.batch_norm(xc, rc, vc, wc, bc, train, 0.1, 1e-5)
        yd = F.batch_norm(xd, rd, vd, wd, bd_, train, 0.1, 1e-5)
        same(yd, yc, TOL[torch.float32])
        g = torch.randn(shape)
        yc.backward(g); yd.backward(dev(g))
        same(xd.grad, xc.grad, TOL[torch.float32])
        same([wd.grad, bd_.grad], [wc.grad, bc.grad], dict(rtol=1e-4, atol=1e-4))
        same([rd, vd], [rc, vc], TOL[torch.float32])

# ---- layer norm
for shape, dt in sweep([(4, 7), (2, 3, 5), (2, 2, 3, 4), (0, 6), (3, 1)], [(2, 3, 5), (2, 2, 3, 4)]):
    for ns in [shape[-1:], shape[-2:]] if len(shape) > 2 else [shape[-1:]]:
        base = torch.randn(shape, dtype=dt) * 2 + 0.5
        for pdt in ([dt, torch.float32] if dt in LOWP else [dt]):
            for x in layouts(base):
                for affine in [True, False]:
                    where = f"layer_norm {shape} {ns} {dt} {pdt} {x.stride()} affine={affine}"
                    w, b = (torch.randn(ns, dtype=pdt), torch.randn(ns, dtype=pdt)) if affine else (None, None)
                    want = ref(lambda x, w, b: torch.native_layer_norm(x, ns, w, b, 1e-5), x, w, b)
                    got = torch.native_layer_norm(dev(x), ns, dev(w), dev(b), 1e-5)
                    same(got[0], want[0], TOL[dt])
                    # The meta function says float32 statistics for 16-bit inputs (as CUDA), the CPU 16-bit.
                    same(got[1:], want[1:], TOL[dt], exact_dtype=dt not in LOWP)
                    if not affine:
                        continue
                    gy = torch.randn_like(x)
                    for mask in masks(x, dt):
                        # the reference's statistics in its own precision, as the devx ones are in float32
                        bw = ref(lambda gy, x, w, b: A.native_layer_norm_backward(
                            gy, x, ns, *torch.native_layer_norm(x, ns, w, b, 1e-5)[1:], w, b, mask), gy, x, w, b)
                        bd = A.native_layer_norm_backward(dev(gy), dev(x), ns, got[1], got[2], dev(w), dev(b), mask)
                        same(bd[0], bw[0], TOL[dt])
                        # With float32 weights on a 16-bit input the meta function says 16-bit gradients.
                        same(bd[1:], bw[1:], TOL[pdt] if dt == pdt else TOL[dt], exact_dtype=dt == pdt)
where = "layer_norm out= and module"
o = [torch.empty(0, device="devx") for _ in range(3)]
xl = torch.randn(3, 4)
A.native_layer_norm.out(dev(xl), [4], None, None, 1e-5, out0=o[0], out1=o[1], out2=o[2])
same(o, torch.native_layer_norm(xl, [4], None, None, 1e-5), TOL[torch.float32])
for bias in [True, False]:  # without a bias the backward's mask leaves grad_bias out
    ln = torch.nn.LayerNorm([4, 6], bias=bias)
    lnd = torch.nn.LayerNorm([4, 6], bias=bias).to("devx")
    lnd.load_state_dict(ln.state_dict())
    xc = torch.randn(3, 4, 6, requires_grad=True)
    xd = xc.detach().to("devx").requires_grad_()
    same(lnd(xd), ln(xc), TOL[torch.float32])
    g = torch.randn(3, 4, 6)
    ln(xc).backward(g); lnd(xd).backward(dev(g))
    same([xd.grad, lnd.weight.grad], [xc.grad, ln.weight.grad], dict(rtol=1e-4, atol=1e-4))

# ---- group norm
for (shape, groups), dt in sweep([((2, 6, 5), 3), ((3, 4, 2, 3), 2), ((2, 6, 2, 2, 2), 6), ((2, 4), 1),
                                  ((0, 4, 3), 2)], [((3, 4, 2, 3), 2)]):
    pdt = torch.float32 if dt in LOWP else dt
    base = torch.randn(shape, dtype=dt) - 0.5
    n, c, hw = shape[0], shape[1], 1
    for s in shape[2:]:
        hw *= s
    for x in layouts(base):
        for affine in [True, False]:
            where = f"group_norm {shape} {groups} {dt} {x.stride()} affine={affine}"
            w, b = (torch.randn(c, dtype=pdt), torch.randn(c, dtype=pdt)) if affine else (None, None)
            # The CPU's kernel takes contiguous inputs only.
            want = ref(lambda x, w, b: torch.native_group_norm(x.contiguous(), w, b, n, c, hw, groups, 1e-5), x, w, b)
            got = torch.native_group_norm(dev(x), dev(w), dev(b), n, c, hw, groups, 1e-5)
            same(got[0], want[0], TOL[dt])
            # The meta function says 16-bit statistics for 16-bit inputs, the CPU float32 with float32 weights.
            same(got[1:], want[1:], TOL[dt], exact_dtype=dt not in LOWP)
            # The backward's meta function views its inputs as (N, C, HxW): contiguous ones only.
            if not affine or n == 0 or not x.is_contiguous():
                continue
            gy = torch.randn_like(x)
            for mask in masks(x, dt):
                # both from the CPU's statistics (the devx forward's are 16-bit, see above)
                bw = ref(lambda gy, x, m, r, w: A.native_group_norm_backward(gy, x, m, r, w, n, c, hw, groups, mask),
                         gy, x, want[1], want[2], w)
                bd = A.native_group_norm_backward(dev(gy), dev(x), dev(want[1]), dev(want[2]), dev(w), n, c, hw,
                                                  groups, mask)
                # The meta function says a float32 grad_input for a 16-bit input with float32 weights.
                same(bd[0], bw[0], TOL[dt], exact_dtype=dt == pdt)
                same(bd[1:], bw[1:], TOL[pdt])
where = "group_norm module"
gn = torch.nn.GroupNorm(2, 4)
gnd = torch.nn.GroupNorm(2, 4).to("devx")
gnd.load_state_dict(gn.state_dict())
xc = torch.randn(3, 4, 5, 5, requires_grad=True)
xd = xc.detach().to("devx").requires_grad_()
same(gnd(xd), gn(xc), TOL[torch.float32])
g = torch.randn(3, 4, 5, 5)
gn(xc).backward(g); gnd(xd).backward(dev(g))
same([xd.grad, gnd.weight.grad, gnd.bias.grad], [xc.grad, gn.weight.grad, gn.bias.grad], dict(rtol=1e-4, atol=1e-4))
xh = torch.randn(2, 6, 5, dtype=torch.bfloat16)
wf = torch.randn(6)
yd = F.group_norm(dev(xh).requires_grad_(), 3, dev(wf).requires_grad_(), torch.zeros(6, device="devx"))
same(yd, F.group_norm(xh.double(), 3, wf.double(), torch.zeros(6, dtype=torch.float64)).bfloat16(), TOL[torch.bfloat16])

ran = assert_ran(["native_batch_norm.out", "native_batch_norm_backward.out", "_native_batch_norm_legit_no_training.out",
                  "native_layer_norm.out", "native_layer_norm_backward.out", "native_group_norm.out",
                  "native_group_norm_backward.out"], ("native_batch_norm", "_native_batch_norm_legit_no_training",
                                                      "native_layer_norm", "native_group_norm"))
print("RESULT", json.dumps({"checks": checks, "ran": ran}))
"""

RANDOM = COMMON + """
import math
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
N = 1 << 16

def moments(t):
    t = t.double()
    return t.mean().item(), t.var().item()

def layouts(dt):
    # contiguous, transposed, strided slice
    return [torch.empty(N, dtype=dt, device="devx"), torch.empty(256, N // 256, dtype=dt, device="devx").t(),
            torch.empty(2 * N, dtype=dt, device="devx")[::2]]

# uniform_: the range, the moments, every float dtype and layout; 0-dim and empty tensors
for dt in FLOATS:
    for lo, hi in [(0.0, 1.0), (-3.0, 5.0)]:
        for t in layouts(dt):
            c = t.uniform_(lo, hi).cpu().double()
            assert c.min() >= lo and c.max() < hi, (dt, lo, hi, c.min(), c.max())
            m, v = moments(c)
            w = hi - lo
            assert abs(m - (lo + hi) / 2) < 0.01 * w and abs(v - w * w / 12) < 0.03 * w * w / 12, (dt, m, v)
            # 16-bit floats hold few values in [lo, hi); the others hardly repeat
            assert c.unique().numel() > (200 if dt in LOWP else N // 2), dt
z = torch.empty((), device="devx").uniform_(2.0, 3.0).item()
assert 2.0 <= z < 3.0
assert torch.rand(3, 4, device="devx").shape == (3, 4) and torch.rand(0, device="devx").numel() == 0
assert torch.equal(torch.empty(5, device="devx").uniform_(2.0, 2.0).cpu(), torch.full((5,), 2.0))
raises(lambda: torch.empty(3, device="devx").uniform_(2, 1), "uniform_ expects to return a [from, to) range")

# normal_: mean, variance, a normal's kurtosis (3) and tails (0.27% beyond 3 sigma)
for dt in FLOATS:
    for t in layouts(dt)[:2]:
        c = t.normal_(1.5, 2.0).cpu().double()
        m, v = moments(c)
        assert abs(m - 1.5) < 0.04 and abs(v - 4.0) < 0.1, (dt, m, v)
        zs = (c - 1.5) / 2
        assert abs((zs ** 4).mean().item() - 3.0) < 0.2, dt
        assert 0.0 < (zs.abs() > 3).double().mean().item() < 0.006, dt
assert torch.isfinite(torch.randn(64, 33, device="devx")).all()
assert torch.equal(torch.empty(4, device="devx").normal_(3.0, 0.0).cpu(), torch.full((4,), 3.0))
assert math.isfinite(torch.randn((), device="devx").item())
raises(lambda: torch.empty(3, device="devx").normal_(0, -1), "normal expects std >= 0.0")

# bernoulli_(p): values in {0, 1} at rate p, every dtype
for dt in FLOATS + INTS + [torch.bool]:
    for p in [0.0, 0.3, 1.0]:
        c = torch.empty(N, dtype=dt, device="devx").bernoulli_(p).cpu()
        assert ((c == 0) | (c == 1)).all(), dt
        assert abs(c.double().mean().item() - p) < 0.01, (dt, p)
c = torch.empty(64, 64, device="devx").t().bernoulli_(0.5).cpu()
assert 0.4 < c.mean().item() < 0.6
raises(lambda: torch.empty(3, device="devx").bernoulli_(1.5), "bernoulli_ expects p to be in [0, 1]")

# random_: ATen's ranges by dtype ([0, 2^digits] for floats), both ends reached, uniform counts
top = {torch.float32: 2 ** 24, torch.float64: 2 ** 53, torch.float16: 2 ** 11, torch.bfloat16: 2 ** 8,
       torch.uint8: 255, torch.int8: 127, torch.int16: 2 ** 15 - 1, torch.int32: 2 ** 31 - 1,
       torch.int64: 2 ** 63 - 1, torch.bool: 1}
for dt, hi in top.items():
    c = torch.empty(N, dtype=dt, device="devx").random_().cpu()
    assert c.min().item() >= 0 and c.double().max().item() <= hi, (dt, c.min(), c.max())
    if hi * 16 < N:  # every value is drawn
        assert c.max().item() == hi and c.min().item() == 0, dt
    else:
        assert c.double().max().item() > hi * 0.99, dt
    if dt not in (torch.bool, torch.uint8):
        c = torch.empty(N, dtype=dt, device="devx").random_(-5, 7).cpu()
        counts = torch.bincount(c.long() + 5)
        assert counts.numel() == 12 and (counts.double() / N - 1 / 12).abs().max() < 0.01, (dt, counts)
    c = torch.empty(N, dtype=dt, device="devx").random_(1 if dt == torch.bool else 3).cpu()
    assert c.min().item() == 0 and c.max().item() == (0 if dt == torch.bool else 2), dt
    if dt != torch.bool:
        c = torch.empty(N, dtype=dt, device="devx").random_(3, None).cpu()
        assert c.min().item() >= 3 and c.double().max().item() > min(hi, 2 ** 40) * 0.9, dt
big = torch.empty(N, dtype=torch.int64, device="devx").random_(-2 ** 63, None).cpu()
assert big.min().item() < -2 ** 61 and big.max().item() > 2 ** 61 and 0.45 < (big < 0).double().mean().item() < 0.55
wide = torch.empty(N, dtype=torch.int64, device="devx").random_(-2 ** 40, 2 ** 40).cpu()
assert wide.min().item() >= -2 ** 40 and wide.max().item() < 2 ** 40 and wide.abs().max().item() > 2 ** 39
r = torch.randint(10, 20, (7, 9), device="devx").t()
assert r.dtype == torch.int64 and r.min().item() >= 10 and r.max().item() < 20
i8 = torch.empty(3, dtype=torch.int8, device="devx")
raises(lambda: i8.random_(-200, 3), "from is out of bounds for signed char")
raises(lambda: i8.random_(0, 300), "to - 1 is out of bounds for signed char")
raises(lambda: torch.empty(3, device="devx").random_(5, 5), "random_ expects 'from' to be less than 'to'")

# dropout: the mask and the output agree, scaled by 1 / (1 - p), at rate p; eval mode is the identity
for dt in FLOATS:
    for p in [0.0, 0.25, 0.6, 1.0]:
        x = torch.randn(N // 256, 256, dtype=dt)
        for xd in [dev(x), x.t().contiguous().to("devx").t()]:
            out, mask = (t.cpu() for t in torch.native_dropout(xd, p, True))
            assert mask.dtype == torch.bool and out.dtype == dt
            scale = 0.0 if p == 1 else 1 / (1 - p)
            torch.testing.assert_close(out, torch.where(mask, (x.float() * scale).to(dt), torch.zeros((), dtype=dt)))
            assert abs(mask.double().mean().item() - (1 - p)) < 0.01, (dt, p)
    out, mask = torch.native_dropout(dev(x), 0.5, False)
    assert torch.equal(out.cpu(), x) and mask.cpu().all()
assert torch.native_dropout(torch.empty(0, 3, device="devx"), 0.5, True)[0].shape == (0, 3)
assert torch.native_dropout(torch.tensor(3.0, device="devx"), 0.0, True)[0].item() == 3.0
x = torch.randn(64, 32)
xd = dev(x).requires_grad_()
y = F.dropout(xd, 0.3)
g = torch.randn(64, 32)
y.backward(dev(g))
kept = y.detach().cpu() != 0
torch.testing.assert_close(y.detach().cpu(), torch.where(kept, x / 0.7, torch.zeros(())))
torch.testing.assert_close(xd.grad.cpu(), torch.where(kept, g / 0.7, torch.zeros(())))
m = torch.nn.Dropout(0.5).to("devx")
m.eval()
assert torch.equal(m(dev(x)).cpu(), x)
for dt in FLOATS:
    gd, mk = torch.randn(33, 17, dtype=dt), torch.rand(33, 17) > 0.5
    got = A.native_dropout_backward(dev(gd).t(), dev(mk).t(), 2.5).cpu()
    torch.testing.assert_close(got, A.native_dropout_backward(gd.t(), mk.t(), 2.5))
o = torch.empty(0, device="devx")
A.native_dropout_backward.out(torch.ones(4, device="devx"), torch.tensor([True, False, True, False], device="devx"),
                              2.0, out=o)
assert torch.equal(o.cpu(), torch.tensor([2.0, 0.0, 2.0, 0.0]))

# seeding: manual_seed and a devx Generator repeat the numbers, get/set_rng_state replays them,
# and successive calls differ
def draws(gen=None):
    return [torch.rand(1000, device="devx", generator=gen).cpu(), torch.randn(999, device="devx", generator=gen).cpu(),
            torch.randint(0, 1000, (500,), device="devx", generator=gen).cpu(),
            torch.empty(300, device="devx").bernoulli_(0.5, generator=gen).cpu(),
            torch.empty(300, dtype=torch.float64, device="devx").uniform_(-1, 1, generator=gen).cpu(),
            torch.empty(300, dtype=torch.int16, device="devx").random_(generator=gen).cpu(),
            torch.empty(300, dtype=torch.int32, device="devx").random_(50, generator=gen).cpu()]

def all_draws():
    return draws() + [F.dropout(torch.ones(1000, device="devx"), 0.5).cpu()]

torch.manual_seed(1234)
a = all_draws()
torch.manual_seed(1234)
for i, (u, v) in enumerate(zip(a, all_draws())):
    assert torch.equal(u, v), i
for i, (u, v) in enumerate(zip(a, all_draws())):
    assert not torch.equal(u, v), i
state = torch.devx.get_rng_state()
first = all_draws()
torch.devx.set_rng_state(state)
for i, (u, v) in enumerate(zip(first, all_draws())):
    assert torch.equal(u, v), i
g1, g2 = torch.Generator(device="devx").manual_seed(7), torch.Generator(device="devx").manual_seed(7)
for i, (u, v) in enumerate(zip(draws(g1), draws(g2))):
    assert torch.equal(u, v), i
assert not torch.equal(torch.rand(100, device="devx", generator=torch.Generator(device="devx").manual_seed(8)).cpu(),
                       torch.rand(100, device="devx", generator=torch.Generator(device="devx").manual_seed(9)).cpu())
# neighbours (lanes of one Philox block, and across blocks) are uncorrelated
u = torch.rand(N, device="devx").cpu().double() - 0.5
assert abs((u[1:] * u[:-1]).mean().item()) < 0.003 and abs((u[4:] * u[:-4]).mean().item()) < 0.003

ran = assert_ran(["uniform.out", "normal.out", "bernoulli.float_out", "random.out", "random.from_out",
                  "random.to_out", "native_dropout.out", "native_dropout_backward.out"],
                 ("uniform", "normal", "bernoulli", "random", "native_dropout"))
print("RESULT", json.dumps({"ran": ran}))
"""

# randperm.out through the kernel ABI itself, no torch (torch.randperm itself reaches
# randperm.generator_out, see GAPS): the library loaded with ctypes, the Philox seed given by the test.
ABI = """
import collections, ctypes, json, sys
sys.path.insert(0, "tests")
from ctypes import byref, c_int, c_int64, c_uint64, c_void_p
from test_cpu_sim_vendor import Sim, find_library
from vendor_abi import DType, KernelContext, MemcpyKind, P, Status, Tensor
sim = Sim(str(find_library()[0]))
api = sim.api
sim.check(api.init())
kernels, i = {}, 0
while api.kernels[i].op:
    kernels[api.kernels[i].op.decode()] = api.kernels[i].fn
    i += 1
randperm = ctypes.CFUNCTYPE(c_int, P(KernelContext), c_int64, P(Tensor))(kernels["randperm.out"])
seed = [0]

@ctypes.CFUNCTYPE(c_int, P(KernelContext), c_void_p, c_uint64, P(c_uint64), P(c_uint64))
def philox_state(ctx, generator, increment, s, offset):
    s[0], offset[0] = seed[0], 0
    return Status.OK

stream = sim.stream()
ctx = KernelContext(device=0, stream=stream, philox_state=philox_state)

def perm(n, s, dtype=DType.INT64, ctype=ctypes.c_int64, stride=1):
    seed[0] = s
    count = max(1, n * stride)
    buf = sim.malloc(0, count * ctypes.sizeof(ctype))
    t = Tensor(buf, dtype, 1, (c_int64 * 1)(n), (c_int64 * 1)(stride), 0, 0)
    sim.check(randperm(byref(ctx), n, byref(t)))
    sim.check(api.stream_synchronize(stream))
    host = (ctype * count)()
    sim.check(api.memcpy_sync(host, buf, count * ctypes.sizeof(ctype), MemcpyKind.D2H))
    sim.check(api.free(0, buf))
    return list(host)[::stride][:n]

p = perm(1000, 1)
assert sorted(p) == list(range(1000)) and p != list(range(1000))
assert perm(1000, 1) == p and perm(1000, 2) != p  # the seed decides
assert sorted(perm(300, 3, DType.FLOAT32, ctypes.c_float)) == list(range(300))
assert sorted(perm(200, 4, DType.INT32, ctypes.c_int32, stride=3)) == list(range(200))
assert perm(1, 5) == [0] and perm(0, 6) == []
# Fisher-Yates without bias: every value lands first about equally often
firsts = collections.Counter(perm(8, s)[0] for s in range(4000))
assert sorted(firsts) == list(range(8)) and all(350 < n < 650 for n in firsts.values()), firsts
t = Tensor(None, DType.INT64, 1, (c_int64 * 1)(3), (c_int64 * 1)(1), 0, 0)
assert randperm(byref(ctx), -3, byref(t)) == Status.INVALID
print("RESULT", json.dumps({"ok": True}))
"""

# Cases the core does not yet bring to these kernels; each entry says whether it works now.
GAPS = COMMON + """
gaps = {}
# torch.randperm reaches randperm.generator_out (randperm.generator's composite kernel).
d.reset_kernel_stats()
p = torch.randperm(100, device="devx").cpu()
gaps["randperm"] = d.kernel_stats()["vendor"].get("randperm.generator_out", 0) > 0 and torch.equal(
    p.sort().values, torch.arange(100))
# The out= forms have no meta kernel, the functional forms no vendor adapter.
rm, rv = torch.zeros(3, device="devx"), torch.ones(3, device="devx")
x = torch.randn(4, 3, 5, device="devx")
d.reset_kernel_stats()
for op in ["_native_batch_norm_legit", "_batch_norm_with_update"]:
    try:
        getattr(A, op)(x, None, None, rm, rv, *((True,) if op == "_native_batch_norm_legit" else ()), 0.1, 1e-5)
        gaps[op] = d.kernel_stats()["vendor"].get(op + ".out", 0) > 0
    except RuntimeError:
        gaps[op] = False
print("RESULT", json.dumps(gaps))
"""


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    jobs = {
        "norms": (NORMS.replace("{full}", "True"), {"DEVX_SIM_KERNELS": "own-only"}),
        "norms_async": (NORMS.replace("{full}", "False"), {"DEVX_SIM_KERNELS": "own-only", "DEVX_SIM_ASYNC": "1"}),
        "random": (RANDOM, {"DEVX_SIM_KERNELS": "own-only", "DEVX_SIM_ASYNC": "1"}),
        "gaps": (GAPS, {"DEVX_SIM_KERNELS": "own-only"}),
        "abi": (ABI, {"DEVX_SIM_KERNELS": "own-only"}),
    }
    out = {}
    for name, proc in zip(jobs, run_many(jobs.values())):
        assert_child_ok(proc)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
        out[name] = json.loads(line[len("RESULT "):])
    return out


@pytest.mark.parametrize("child", ["norms", "norms_async"])
def test_norm_kernels_match_the_cpu(results, child):
    r = results[child]
    assert r["checks"] > (1500 if child == "norms" else 150), r
    assert r["ran"]["native_batch_norm_backward.out"] > 10 and r["ran"]["native_layer_norm_backward.out"] > 3, r


def test_random_and_dropout_kernels(results):
    assert all(n > 0 for n in results["random"]["ran"].values()), results["random"]


def test_randperm_kernel_through_the_abi(results):
    assert results["abi"]["ok"]


@pytest.mark.parametrize("gap", [
    "randperm",
    pytest.param("_native_batch_norm_legit", marks=pytest.mark.xfail(
        strict=True, reason="no meta kernel for the .out form; no vendor adapter for the functional form")),
    pytest.param("_batch_norm_with_update", marks=pytest.mark.xfail(
        strict=True, reason="no meta kernel for the .out form; no vendor adapter for the functional form")),
])
def test_cases_the_core_does_not_route_yet(results, gap):
    assert results["gaps"][gap]
