"""cpu_sim's own kernels (DEVX_SIM_KERNELS=own-only) beyond the four models of test_own_only.py:
models that reach embedding_bag, upsampling, constant padding, GRU cells and the fused optimizer
kernels train 5 steps matching the CPU with 0 ATen compute calls and 0 fallbacks; the ops of the
table's wider set (index_add and relatives, masked_scatter, scans, reductions, order statistics,
robust losses, scatter reductions) match the CPU; the random ones draw from the devx generator,
so that seeding repeats them."""

from __future__ import annotations

import pytest

from conftest import assert_child_ok, run_python

MODELS = """
import torch, torch_devx
import torch.nn as nn
import torch.nn.functional as F
from torch_devx import diagnostics as d


class Bags(nn.Module):
    def __init__(self):
        super().__init__()
        self.mean = nn.EmbeddingBag(40, 12, mode="mean", padding_idx=3)
        self.sum = nn.EmbeddingBag(40, 12, mode="sum")
        self.max = nn.EmbeddingBag(40, 12, mode="max")
        self.scale = nn.Parameter(torch.ones(14))  # per-sample weights with a gradient
        self.fc = nn.Linear(36, 5)

    def forward(self, x):
        idx, offsets, weights = x
        return self.fc(torch.cat([self.mean(idx, offsets),
                                  self.sum(idx, offsets, per_sample_weights=weights * self.scale),
                                  self.max(idx, offsets)], 1))


class UpNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 6, 3, padding=1)
        self.c2 = nn.Conv2d(6, 4, 3)
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        x = F.interpolate(torch.relu(self.c1(x)), scale_factor=2, mode="nearest")
        x = F.interpolate(x, size=(13, 11), mode="bilinear", align_corners=False)
        x = F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True)
        x = self.c2(F.pad(x, (1, 2, 0, 1), value=0.5))
        return self.fc(x.mean((2, 3)))


class GRUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(10, 16, num_layers=2, batch_first=True)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        return self.fc(self.gru(x)[0][:, -1])


def mlp():
    return nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 5))


def bag_input():
    idx = torch.randint(0, 40, (14,))
    return idx, torch.tensor([0, 3, 3, 9]), torch.rand(14)


def make(name):
    target = lambda out: torch.arange(out.shape[0], device=out.device) % 5
    ce = lambda out, x: F.cross_entropy(out, target(out))
    if name == "bags":
        return Bags(), bag_input, ce, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)
    if name == "upsample":
        huber = lambda out, x: F.smooth_l1_loss(out, torch.ones_like(out), beta=0.5) + F.huber_loss(out, -out.detach())
        return UpNet(), lambda: torch.randn(2, 3, 5, 4), huber, lambda p: torch.optim.SGD(p, lr=0.1)
    if name == "gru":
        return GRUNet(), lambda: torch.randn(4, 6, 10), ce, lambda p: torch.optim.SGD(p, lr=0.1)
    if name == "adam":
        return mlp(), lambda: torch.randn(8, 20), ce, lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.01, fused=True)
    if name == "adamw":
        return mlp(), lambda: torch.randn(8, 20), ce, lambda p: torch.optim.AdamW(p, lr=0.01, amsgrad=True, fused=True)
    if name == "sgd":
        return mlp(), lambda: torch.randn(8, 20), ce, lambda p: torch.optim.SGD(
            p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01, fused=True)
    raise ValueError(name)


def to(x, device):
    return tuple(t.to(device) for t in x) if isinstance(x, tuple) else x.to(device)


def train(name, device, steps=5):
    torch.manual_seed(0)
    model, make_input, loss_fn, make_opt = make(name)
    model = model.to(device)
    opt = make_opt(model.parameters())
    torch.manual_seed(1)
    inputs = [make_input() for _ in range(steps)]
    losses = []
    for x in inputs:
        x = to(x, device)
        loss = loss_fn(model(x), x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses).cpu(), [p.detach().cpu() for p in model.parameters()]


for name in {models!r}:
    want = train(name, "cpu")
    d.reset_kernel_stats(); d.reset_fallback_stats()
    got = train(name, "devx")
    stats = d.kernel_stats()
    torch.testing.assert_close(got[0], want[0])
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w)
    assert stats["aten"] == 0 and not stats["declined"] and not d.fallback_stats(), (name, stats, d.fallback_stats())
    used = set(stats["vendor"])
    missing = set({expect!r}[name]) - used
    assert not missing, (name, missing, sorted(used))
    print(name, "ok", len(used), "kernels")
"""

EXPECT = {
    "bags": ["_embedding_bag.out", "_embedding_bag_dense_backward.out", "_embedding_bag_per_sample_weights_backward.out"],
    "upsample": ["upsample_nearest2d.out", "upsample_nearest2d_backward.grad_input", "upsample_bilinear2d.out",
                 "upsample_bilinear2d_backward.grad_input", "constant_pad_nd.out", "smooth_l1_loss.out",
                 "smooth_l1_loss_backward.grad_input", "huber_loss.out", "huber_loss_backward.out"],
    "gru": ["sigmoid.out", "tanh.out", "addmm.out"],
    "adam": ["_fused_adam.out"],
    "adamw": ["_fused_adamw.out"],
    "sgd": ["_fused_sgd.out"],
}


@pytest.mark.parametrize("models", [("bags", "upsample"), ("gru",), ("adam", "adamw", "sgd")])
def test_models_train_on_own_kernels_alone(models):
    proc = run_python(MODELS.format(models=list(models), expect=EXPECT), DEVX_SIM_KERNELS="own-only")
    assert_child_ok(proc)
    assert proc.stdout.count(" ok ") == len(models), proc.stdout


def test_more_ops_match_the_cpu_on_own_kernels():
    proc = run_python("""
        import torch, torch_devx
        from torch_devx import diagnostics as d

        torch.manual_seed(0)
        x = torch.randn(5, 6)
        x[1, 2] = float("nan")
        ints = torch.randint(-3, 4, (4, 7))
        cases = {
            "index_add": lambda t: t["x"].index_add(1, t["i"], t["s"], alpha=2.0),
            "index_add_": lambda t: t["x"].clone().index_add_(0, t["j"], t["r"]),
            "index_copy": lambda t: t["x"].index_copy(1, t["k"], t["s"]),
            "index_fill": lambda t: t["x"].index_fill(1, t["i"], -7.5),
            "index_fill_t": lambda t: t["x"].index_fill(0, t["j"], torch.tensor(2.0, device=t["x"].device)),
            "masked_scatter": lambda t: t["x"].masked_scatter(t["x"] > 0, torch.cat([t["s"].flatten()] * 2)),
            "cumprod": lambda t: torch.cumprod(t["x"] * 0.5, 1),
            "nansum": lambda t: (torch.nansum(t["x"]), torch.nansum(t["x"], 1, keepdim=True)),
            "aminmax": lambda t: (torch.aminmax(t["n"]), torch.aminmax(t["n"], dim=0, keepdim=True)),
            "var_mean": lambda t: (torch.var_mean(t["y"], 1), torch.var_mean(t["y"], correction=0)),
            "median": lambda t: (torch.median(t["y"]), torch.median(t["x"], 1), torch.median(t["y"], 0)),
            "mode": lambda t: torch.mode(t["n"], 1),
            "isinf": lambda t: (torch.isposinf(t["inf"]), torch.isneginf(t["inf"])),
            "scatter_reduce": lambda t: (t["x"].scatter(1, t["g"], t["x"], reduce="multiply"),
                                         t["x"].scatter(1, t["g"], 1.5, reduce="add"),
                                         *(t["y"].scatter_reduce(1, t["g"], t["y"], r, include_self=s)
                                           for r in ("sum", "prod", "mean", "amax", "amin") for s in (True, False)),
                                         t["n"].scatter_reduce(1, t["g"][:4], t["n"], "mean")),
            "linspace": lambda t: (torch.linspace(-2, 3, 7, device=t["x"].device),
                                   torch.linspace(0, 10, 5, dtype=torch.int64, device=t["x"].device)),
            "pad": lambda t: torch.nn.functional.pad(t["x"], (2, -1, 1, 0), value=3.0),
            "batch_norm_backward": lambda t: torch.ops.aten.batch_norm_backward(
                t["bg"], t["bx"], t["bw"], None, None,
                *torch.native_batch_norm(t["bx"], t["bw"], None, None, None, True, 0.1, 1e-5)[1:],
                True, 1e-5, [True, True, True], t["bx"].new_empty(0)),
        }
        tensors = {
            "x": x, "y": torch.randn(5, 6).round(), "n": ints, "s": torch.randn(5, 3), "r": torch.randn(3, 6),
            "i": torch.tensor([4, 0, 4]), "j": torch.tensor([1, 1, 3]), "k": torch.tensor([5, 0, 2]),
            "g": torch.randint(0, 6, (5, 6)), "inf": torch.tensor([1.0, float("inf"), -float("inf"), float("nan")]),
            "bx": torch.randn(4, 3, 5), "bg": torch.randn(4, 3, 5), "bw": torch.rand(3) + 0.5,
        }
        dev = {k: v.to("devx") for k, v in tensors.items()}

        def plain(o):
            return o.cpu() if isinstance(o, torch.Tensor) else tuple(plain(v) for v in o)

        for name, f in cases.items():
            want = f(tensors)
            d.reset_kernel_stats(); d.reset_fallback_stats()
            got = f(dev)
            stats = d.kernel_stats()
            assert stats["aten"] == 0 and not stats["declined"] and not d.fallback_stats(), (name, stats, d.fallback_stats())
            torch.testing.assert_close(plain(got), plain(want), equal_nan=True, msg=lambda m: name + ": " + m)
            print(name, "ok")
        """, DEVX_SIM_KERNELS="own-only")
    assert_child_ok(proc)
    assert proc.stdout.count(" ok") == 17, proc.stdout


def test_random_kernels_draw_from_the_devx_generator():
    proc = run_python("""
        import torch, torch_devx
        from torch_devx import diagnostics as d

        def draw():
            torch.manual_seed(7)
            g = torch.Generator(device="devx").manual_seed(3)
            p = torch.tensor([[0.1, 0.0, 0.5, 0.4], [1.0, 2.0, 0.0, 3.0]], device="devx")
            return (torch.randperm(50, device="devx"), torch.randperm(9, generator=g, device="devx"),
                    torch.multinomial(p, 3), torch.multinomial(p, 200, replacement=True),
                    torch.multinomial(p[0], 2, generator=g))

        d.reset_kernel_stats(); d.reset_fallback_stats()
        a, b = draw(), draw()
        stats = d.kernel_stats()
        assert stats["aten"] == 0 and not stats["declined"] and not d.fallback_stats(), (stats, d.fallback_stats())
        assert any("randperm.generator_out" in k for k in stats["vendor"]), stats
        assert any("multinomial" in k for k in stats["vendor"]), stats
        for x, y in zip(a, b):
            assert torch.equal(x.cpu(), y.cpu())          # seeding repeats the draws
        perm, perm_g, without, with_r, one_row = (t.cpu() for t in a)
        assert sorted(perm.tolist()) == list(range(50)) and perm.tolist() != list(range(50))
        assert sorted(perm_g.tolist()) == list(range(9))
        for row in without.tolist():
            assert len(set(row)) == 3                      # without replacement: distinct
        assert 1 not in without[0].tolist() and 2 not in without[1].tolist()   # probability 0: never
        assert 1 not in with_r[0].tolist() and 2 not in with_r[1].tolist()
        counts = torch.bincount(with_r[1], minlength=4).tolist()
        assert counts[3] > counts[0], counts               # 3.0 outweighs 1.0
        assert one_row.shape == (2,) and len(set(one_row.tolist())) == 2
        try:
            torch.multinomial(torch.tensor([0.5, -1.0], device="devx"), 1)
        except RuntimeError as e:
            assert "probability tensor contains either `inf`, `nan` or element < 0" in str(e), e
        else:
            raise AssertionError("a negative probability was accepted")
        print("ok")
        """, DEVX_SIM_KERNELS="own-only")
    assert_child_ok(proc)
    assert proc.stdout.strip().endswith("ok"), proc.stdout
