"""cpu_sim's own indexing, gathering, concatenation and shape-like kernels (kernels/index.cpp,
scatter.cpp, masked.cpp, shape.cpp) against the CPU, with DEVX_SIM_KERNELS=own-only: every
kernel over broadcast, non-contiguous, empty and 0-dim operands, several dtypes, and the
functional, in-place and out= variants; kernel_stats() proves the kernels ran and none of these
ops declined or fell back. Bad indices must fail as ATen's do."""

from __future__ import annotations

from conftest import assert_child_ok, run_many

CHECK = r"""
import torch, torch_devx
from torch_devx import diagnostics as d

D = "devx"
torch.manual_seed(0)
OURS = {"index", "index_put_", "_index_put_impl_", "index_select", "gather", "scatter", "scatter_add",
        "masked_fill_", "masked_select", "nonzero", "embedding_dense_backward", "cat", "arange", "tril", "triu",
        "kaiser_window"}
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
checked = 0

def dev(o):
    if isinstance(o, torch.Tensor):
        return o.to(D)
    if isinstance(o, (list, tuple)):
        return type(o)(dev(x) for x in o)
    return o

def same(f, *args, **kw):
    # f on devx copies of the arguments against f on the CPU ones; args are left untouched.
    global checked
    cpu_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    expected = f(*cpu_args, **kw)
    got = f(*dev(args), **dev(kw))
    if isinstance(got, torch.Tensor):
        torch.testing.assert_close(got.cpu(), expected)
    else:
        torch.testing.assert_close([g.cpu() for g in got], list(expected))
    checked += 1

def inplace(f, x, *args):
    # f mutates its first argument: compare the mutated tensors.
    global checked
    xc, xd = x.clone(), dev(x.clone())
    f(xc, *args)
    f(xd, *dev(args))
    torch.testing.assert_close(xd.cpu(), xc)
    checked += 1

def rand(shape, dtype=torch.float32):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, dtype=dtype)
    return torch.randint(0 if dtype == torch.uint8 else -50, 50, shape, dtype=dtype)

def raises(f, text):
    try:
        r = f()
        (r[0] if isinstance(r, tuple) else r).cpu()
        torch.devx.synchronize()
    except Exception as e:
        assert text in str(e), (text, str(e))
    else:
        raise AssertionError("no error, expected " + text)

d.reset_kernel_stats(); d.reset_fallback_stats()

# ---- index.Tensor
x = rand((5, 6, 7))
xt = rand((7, 6, 5)).permute(2, 1, 0)  # non-contiguous
i = torch.tensor([0, 4, -1, 2]); j = torch.tensor([[1], [3]]); m = rand((5, 6), torch.bool)
for t in [x, xt]:
    same(lambda t, i: t[i], t, i)
    same(lambda t, i: t[:, i], t, i)
    same(lambda t, i: t[i, :, i], t, i)                 # non-adjacent: broadcast dims go first
    same(lambda t, i, j: t[j, i], t, i, j)              # broadcast index tensors
    same(lambda t, i, j: t[:, j, i], t, i, j)
    same(lambda t, i: t[i.int(), 1:3, i.int()], t, i)   # int32 indices
    same(lambda t, m: t[m], t, m)                       # mask: through nonzero
    same(lambda t: t[torch.tensor(3, device=t.device)], t)  # 0-dim index
    same(lambda t: t[:, torch.tensor([], dtype=torch.long, device=t.device)], t)
for dt in FLOATS + [torch.int64, torch.int8, torch.bool, torch.complex64]:
    same(lambda t, i, j: t[j, :, i], rand((4, 3, 5), dt), i.clamp(max=3), j)
same(lambda t, i: torch.ops.aten.index.Tensor_out(t, [None, i], out=torch.empty(0, device=t.device)), x, i)
big = rand((400, 300))
bi = torch.randint(-400, 400, (50000,))
same(lambda t, i: t[i, 7], big, bi)
same(lambda t, i: t[i], big, bi[:3000])

# ---- index_put_ / _index_put_impl_
dup = torch.tensor([1, 1, 3, 1, -5])
for dt in FLOATS + [torch.int64, torch.int32, torch.bool, torch.complex128]:
    base = rand((5, 4), dt)
    inplace(lambda t, i, v: t.__setitem__(i, v), base, dup[2:], rand((3, 4), dt))
    inplace(lambda t, i, v: t.index_put_((i,), v, accumulate=True), base, dup, rand((5, 4), dt))
    inplace(lambda t, i, v: t.index_put_((i,), v, accumulate=True), base, dup, rand((4,), dt))  # broadcast
inplace(lambda t, i, v: t.__setitem__((slice(None), i), v), xt, i, rand((5, 4, 1)))
inplace(lambda t, i, j, v: t.__setitem__((j, slice(None), i), v), x, i, j, rand((2, 4, 6)))
inplace(lambda t, m: t.__setitem__(m, 0.5), x, m)
inplace(lambda t, i, v: torch.ops.aten.index_put_(t, [None, i], v, True), xt, torch.tensor([2, 2, 2]), rand((5, 3, 7)))
inplace(lambda t, i, v: torch.ops.aten._index_put_impl_(t, (i,), v, True, False), x, dup, rand((6, 7)))
same(lambda t, i, v: torch.index_put(t, (i,), v, True), x, dup, rand((5, 6, 7)))
same(lambda t, i, v: torch.ops.aten.index_put.out(t, [i], v, True, out=torch.empty(0, device=t.device)), x, dup,
     rand((7,)))
bigv = rand((50000,))
inplace(lambda t, i, v: t.index_put_((i, torch.full_like(i, 3)), v, accumulate=True), big, bi, bigv)

# ---- index_select
for dim in range(3):
    same(lambda t, i: t.index_select(dim, i), xt, i.abs())
    same(lambda t, i: t.index_select(dim, i.int()), x, i.abs())
for dt in [torch.float16, torch.int64, torch.bool, torch.complex64]:
    same(lambda t, i: t.index_select(1, i), rand((3, 8), dt), torch.tensor([7, 0, 7]))
same(lambda t, i: t.index_select(0, i), torch.tensor(2.5), torch.tensor([0]))          # 0-dim self
same(lambda t, i: t.index_select(1, i), x, torch.tensor(4))                            # 0-dim index
same(lambda t, i: t.index_select(2, i), x, torch.tensor([], dtype=torch.long))
same(lambda t, i: torch.index_select(t, -1, i, out=torch.empty(0, device=t.device)), x, torch.tensor([6, 1]))
same(lambda t, i: t.index_select(0, i), big, bi.abs() % 400)

# ---- gather / scatter / scatter_add
for dim in range(3):
    idx = torch.randint(0, x.shape[dim], (4, 5, 6))
    for t in [x, xt]:
        same(lambda t, i: t.gather(dim, i), t, idx)
        same(lambda t, i, s: t.scatter(dim, i, s), t, idx, rand((5, 6, 7)))
        same(lambda t, i, s: t.scatter_add(dim, i, s), t, idx, rand((4, 5, 6)))
        inplace(lambda t, i, s: t.scatter_add_(dim, i, s), t, idx, rand((4, 5, 6)))
        inplace(lambda t, i: t.scatter_(dim, i, -2.25), t, idx)
    same(lambda t, i: t.gather(dim, i), x, idx.permute(2, 0, 1).contiguous().permute(1, 2, 0))
for dt in [torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int16, torch.bool, torch.complex64]:
    t = rand((6, 5), dt)
    idx = torch.randint(0, 6, (9, 5))
    same(lambda t, i: t.gather(0, i), t, idx)
    same(lambda t, i, s: t.scatter_add(0, i, s), t, idx, rand((9, 5), dt))  # many repeated indices
    same(lambda t, i, s: t.scatter(1, i % 5, s), t, idx[:6], rand((6, 5), dt))
    same(lambda t, i: t.scatter(1, i % 5, 1), t, idx[:6])
same(lambda t, i: t.gather(0, i), torch.tensor(1.5), torch.tensor(0))
same(lambda t, i: t.gather(1, i), x, torch.empty(5, 0, 7, dtype=torch.long))
# An empty index may have any dtype and rank.
same(lambda t, i: t.gather(0, i), rand((5,)), torch.empty(2, 0, dtype=torch.uint8))
same(lambda t, i, s: t.scatter_add(0, i, s), rand((5,)), torch.empty(2, 0, dtype=torch.long), rand((3,)))
same(lambda t, i: t.scatter(0, i, 1.0), rand((5,)), torch.empty(0, dtype=torch.uint8))
same(lambda t, i: torch.gather(t, 2, i, out=torch.empty(0, device=t.device)), x, torch.randint(0, 7, (5, 6, 2)))
same(lambda t, i, s: torch.scatter(t, 0, i, s, out=torch.empty(0, device=t.device)), x, torch.randint(0, 5, (2, 6, 7)),
     rand((2, 6, 7)))
same(lambda t, i, s: torch.scatter_add(t, 1, i, s, out=torch.empty(0, device=t.device)), x,
     torch.randint(0, 6, (5, 9, 7)), rand((5, 9, 7)))
same(lambda t, i, s: t.scatter_add(0, i, s), torch.zeros(300), torch.randint(0, 300, (60000,)), rand((60000,)))
same(lambda t, i: t.gather(1, i), big, torch.randint(0, 300, (400, 200)))

# ---- masked_fill
for dt in FLOATS + [torch.int64, torch.uint8, torch.bool, torch.complex64]:
    t = rand((4, 6), dt)
    mk = rand((6,), torch.bool)                      # broadcast mask
    same(lambda t, mk: t.masked_fill(mk, 1), t, mk)
    inplace(lambda t, mk, v: t.masked_fill_(mk, v), t, mk, torch.tensor(3, dtype=dt))  # a devx 0-dim value
same(lambda t, mk: t.masked_fill(mk, -1e4), xt, rand((5, 1, 7), torch.bool))
same(lambda t, mk: torch.ops.aten.masked_fill.Scalar_out(t, mk, 2.0, out=torch.empty(0, device=t.device)), x,
     m[..., None])
same(lambda t, mk, v: torch.ops.aten.masked_fill.Tensor_out(t, mk, v, out=torch.empty(0, device=t.device)), x,
     m[..., None], torch.tensor(-3.0))
same(lambda t, mk: t.masked_fill(mk, 0.0), big, rand((400, 300), torch.bool))

# ---- nonzero / masked_select
for t in [x, xt, x > 0.5, torch.tensor(0.0), torch.tensor(2), torch.empty(3, 0),
          torch.tensor([0.0, float("nan"), -0.0, 1e-30]), torch.tensor([0j, 1j, 2 + 0j]),
          rand((4, 5), torch.bfloat16), rand((2, 3, 4, 5), torch.int8).clamp(-1, 1)]:
    same(torch.nonzero, t)
same(lambda t: torch.nonzero(t, as_tuple=True), x > 0)
same(lambda t: torch.nonzero(t, out=torch.empty(0, dtype=torch.long, device=t.device)), x > 0)
same(torch.nonzero, big > 1.0)
for t, mk in [(x, m[..., None]), (xt, x > 0), (x[0], rand((5, 6, 7), torch.bool)),
              (rand((3, 4), torch.int32), rand((3, 4), torch.bool)), (torch.tensor(1.5), torch.tensor(True)),
              (x, torch.zeros(7, dtype=torch.bool))]:
    same(torch.masked_select, t, mk)
same(lambda t, mk: torch.masked_select(t, mk, out=torch.empty(0, device=t.device)), x, m[..., None])
same(torch.masked_select, big, big > 0)

# ---- embedding backward
for dt in [torch.float32, torch.float64]:
    for padding_idx, scale in [(None, False), (2, False), (2, True), (None, True)]:
        ids = torch.randint(0, 10, (6, 7))
        ids[0, :3] = 2
        w = rand((10, 4), dt)
        g = rand((6, 7, 4), dt)
        def grad(w, ids, g):
            w = w.clone().requires_grad_()
            torch.nn.functional.embedding(ids, w, padding_idx=padding_idx, scale_grad_by_freq=scale).backward(g)
            return w.grad
        same(grad, w, ids, g)
same(lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 12, -1, False), rand((5, 3)).t(),
     torch.randint(0, 12, (3,)))
same(lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 50, 3, True), rand((4, 5, 6), torch.float16),
     torch.randint(0, 50, (4, 5)))
same(lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 8, -1, False), rand((9, 3)),
     torch.randint(0, 8, (9,)).int())
emb = torch.nn.Embedding(100, 16)
embd = torch.nn.Embedding(100, 16).to(D)
embd.load_state_dict(emb.state_dict())
ids = torch.randint(0, 100, (8, 512))
(emb(ids) * 2).sum().backward()
(embd(ids.to(D)) * 2).sum().backward()
torch.testing.assert_close(embd.weight.grad.cpu(), emb.weight.grad)

# ---- cat
for dt in FLOATS + [torch.int64, torch.bool, torch.complex64]:
    a, b = rand((2, 3, 4), dt), rand((2, 5, 4), dt)
    same(lambda a, b: torch.cat([a, b, a], 1), a, b)
    same(lambda a, b: torch.cat([a, a.transpose(0, 2).contiguous().transpose(0, 2)], -1), a, b)
same(lambda a, b, c: torch.cat([a, b, c]), rand((2, 3)), rand((4, 3)).t().contiguous().t(), rand((3, 3))[::2])
same(lambda a, b: torch.cat([a, b], 0), rand((2, 3), torch.int32), rand((1, 3)))                  # promoted
same(lambda a, b: torch.cat([a, b], 1), rand((2, 3), torch.float16), rand((2, 2), torch.bool))
# A legacy 1-d empty input is skipped whatever its shape (its dtype still promotes).
same(lambda a, e, b: torch.cat([a, e, b]), rand((2, 3)), torch.empty(0, dtype=torch.float64), rand((1, 3)))
same(lambda a, b: torch.cat([a, b], 1), rand((0, 3)), rand((0, 2)))
same(lambda a, b: torch.cat([a, b], 0, out=torch.empty(0, device=a.device)), rand((2, 3)), rand((2, 3)))
same(lambda a, b: torch.stack([a, b], 1), rand((4, 5)), rand((4, 5)))
same(lambda a, b: torch.cat([a, b], 1), big, big[:, :7])

# ---- arange
for args, kw in [((0, 5, 0.3), {}), ((5, -3, -0.7), {}), ((10,), {}), ((-3, 17, 4), {}), ((0, 0), {}),
                 ((0, 1, 0.1), {"dtype": torch.float16}), ((1, 2.5, 0.25), {"dtype": torch.float64}),
                 ((0, 3, 0.5), {"dtype": torch.bfloat16}), ((2, 40, 3), {"dtype": torch.int8}),
                 ((0, 100000), {"dtype": torch.float32})]:
    torch.testing.assert_close(torch.arange(*args, device=D, **kw).cpu(), torch.arange(*args, **kw))
    checked += 1
o = torch.empty(0, device=D)
torch.arange(0, 1, 0.25, out=o)
torch.testing.assert_close(o.cpu(), torch.arange(0, 1, 0.25))

# ---- tril / triu
for t in [rand((5, 7)), rand((3, 6, 4)).transpose(1, 2), rand((2, 2, 3, 3), torch.float64), rand((4, 4), torch.bool),
          rand((3, 5), torch.int32), rand((6, 6), torch.float16), rand((0, 3)), rand((3, 4), torch.complex64),
          rand((40, 300, 9)).transpose(0, 2)]:
    for k in [0, 1, -2, 9, -9]:
        same(lambda t: torch.tril(t, k), t)
        same(lambda t: torch.triu(t, k), t)
    inplace(lambda t: t.tril_(1), t)
    inplace(lambda t: t.triu_(-1), t)
same(lambda t: torch.tril(t, out=torch.empty(0, device=t.device)), rand((4, 4)))
same(lambda t: torch.triu(t, 1, out=torch.empty(0, device=t.device)), rand((4, 4)))

# ---- kaiser_window
for n in [0, 1, 2, 7, 64]:
    torch.testing.assert_close(torch.kaiser_window(n, device=D).cpu(), torch.kaiser_window(n))
    for periodic in [True, False]:
        torch.testing.assert_close(torch.kaiser_window(n, periodic, device=D).cpu(), torch.kaiser_window(n, periodic))
        for beta, dt in [(3.0, torch.float64), (8.5, torch.float16), (0.0, torch.float32), (30.0, torch.bfloat16)]:
            torch.testing.assert_close(torch.kaiser_window(n, periodic, beta, dtype=dt, device=D).cpu(),
                                       torch.kaiser_window(n, periodic, beta, dtype=dt))
            checked += 1

# ---- every kernel ran, nothing of ours declined or fell back
stats = d.kernel_stats()
ran = stats["vendor"]
for k in ["index.Tensor_out", "index_put.out", "_index_put_impl.out", "index_select.out", "gather.out",
          "scatter.src_out", "scatter.value_out", "scatter_add.out", "masked_fill.Scalar_out", "masked_fill.Tensor_out",
          "masked_select.out", "nonzero.out", "embedding_dense_backward.out", "cat.out", "arange.start_out", "tril.out",
          "triu.out", "kaiser_window.out", "kaiser_window.periodic_out", "kaiser_window.beta_out"]:
    assert ran.get(k, 0) > 0, (k, ran)
declined = {k: n for k, n in stats["declined"].items() if k[0].split(".")[0] in OURS}
assert not declined and stats["aten"] == 0, stats
fallen = {op for op in d.fallback_stats() if op.split(".")[0] in OURS}
assert not fallen, (fallen, d.fallback_stats())

# ---- bad indices fail as ATen's do (in async mode at the next synchronisation)
x5 = dev(rand((5, 3)))
raises(lambda: x5[dev(torch.tensor([1, 7]))], "index 7 is out of bounds for dimension 0 with size 5")
raises(lambda: x5[:, dev(torch.tensor([-4]))], "index -4 is out of bounds for dimension 1 with size 3")
raises(lambda: x5.index_put_((dev(torch.tensor([5])),), dev(torch.tensor(1.0)), accumulate=True),
       "index 5 is out of bounds for dimension 0 with size 5")
raises(lambda: x5.index_select(0, dev(torch.tensor([-1]))), "index out of range in self")
raises(lambda: x5.gather(1, dev(torch.tensor([[3]]))), "index 3 is out of bounds for dimension 1 with size 3")
raises(lambda: x5.scatter_add(0, dev(torch.tensor([[9]])), x5), "index 9 is out of bounds for dimension 0 with size 5")
raises(lambda: torch.ops.aten.embedding_dense_backward(x5, dev(torch.tensor([0, 4, 2, 1, 6])), 5, -1, False),
       "index 6 is out of bounds for dimension 0 with size 5")
# The device still works after an error.
torch.testing.assert_close(x5[dev(torch.tensor([4]))].cpu(), x5.cpu()[[4]])
print("ok", checked)
"""


def test_own_index_kernels_match_the_cpu_sync_and_async():
    jobs = [(CHECK, {"DEVX_SIM_KERNELS": "own-only"}),
            (CHECK, {"DEVX_SIM_KERNELS": "own-only", "DEVX_SIM_ASYNC": "1", "DEVX_SIM_THREADS": "3"})]
    for proc in run_many(jobs):
        assert_child_ok(proc)
        assert "ok" in proc.stdout
        assert int(proc.stdout.split()[-1]) > 300
