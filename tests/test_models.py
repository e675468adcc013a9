"""Whole models on devx: seeded training runs give the CPU's losses and parameters, with nothing on
the CPU fallback; optimizers, autograd, weight tying and parameter identity across module moves."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_devx  # noqa: F401  (registers the devx device)
from torch.testing import assert_close

from conftest import describe, run_many

ATOL = 1e-5
RTOL = 1e-5


def mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(20, 32), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(32, 32), nn.ReLU(), nn.Dropout(0.1),
        nn.Linear(32, 5),
    )


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )


def make_data(kind: str, steps: int, seed: int = 100):
    g = torch.Generator().manual_seed(seed)
    if kind == "mlp":
        return [(torch.randn(16, 20, generator=g), torch.randint(0, 5, (16,), generator=g)) for _ in range(steps)]
    return [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(steps)]


def train(model: nn.Module, opt_factory, data, device: str) -> torch.Tensor:
    opt = opt_factory(model.parameters())
    model.train()
    losses = []
    for step, (x, y) in enumerate(data):
        torch.manual_seed(1000 + step)  # the same dropout masks on both devices
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach().to("cpu"))
    return torch.stack(losses)


def compare_runs(kind: str, opt_factory, fallback, steps: int = 5, device: str = "devx"):
    torch.manual_seed(0)
    model_cpu = mlp() if kind == "mlp" else cnn()
    model_devx = copy.deepcopy(model_cpu).to(device)
    data = make_data(kind, steps)
    losses_cpu = train(model_cpu, opt_factory, data, "cpu")
    fallback.reset_fallback_stats()
    losses_devx = train(model_devx, opt_factory, data, device)
    ran_on_cpu = fallback.fallback_stats()
    assert_close(losses_devx, losses_cpu, atol=ATOL, rtol=RTOL)
    for (name, p_cpu), (_, p_devx) in zip(model_cpu.state_dict().items(), model_devx.state_dict().items()):
        assert p_devx.device.type == "devx", name
        assert_close(p_devx.cpu(), p_cpu, atol=ATOL, rtol=RTOL, msg=lambda m: f"{name}: {m}")
    return ran_on_cpu


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def test_mlp_training_matches_cpu(fallback):
    ran_on_cpu = compare_runs("mlp", sgd, fallback)
    assert ran_on_cpu == {}, f"ops on the CPU fallback during training: {ran_on_cpu}"


def test_cnn_training_matches_cpu(fallback):
    ran_on_cpu = compare_runs("cnn", sgd, fallback)
    assert ran_on_cpu == {}, f"ops on the CPU fallback during training: {ran_on_cpu}"


@pytest.mark.devices(2)
def test_cnn_training_on_the_second_device(fallback):
    ran_on_cpu = compare_runs("cnn", sgd, fallback, steps=2, device="devx:1")
    assert ran_on_cpu == {}, ran_on_cpu


@pytest.mark.parametrize(
    "name, factory",
    [
        ("adam", lambda p: torch.optim.Adam(p, lr=1e-2)),
        ("adamw", lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1)),
        ("adam_no_foreach", lambda p: torch.optim.Adam(p, lr=1e-2, foreach=False)),
        ("sgd_nesterov_wd", lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    ],
)
def test_optimizers_match_cpu(fallback, name, factory):
    ran_on_cpu = compare_runs("mlp", factory, fallback, steps=3)
    assert ran_on_cpu == {}, f"{name}: ops on the CPU fallback: {ran_on_cpu}"


def test_eval_mode_batchnorm_and_no_grad(fallback):
    torch.manual_seed(0)
    m_cpu = cnn()
    for x, y in make_data("cnn", 2):
        F.cross_entropy(m_cpu(x), y).backward()
    m = copy.deepcopy(m_cpu).devx()
    m.eval()
    m_cpu.eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert_close(m(x.devx()).cpu(), m_cpu(x), atol=ATOL, rtol=RTOL)


def test_backward_matches_cpu_for_a_small_attention_block(fallback):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.ln = nn.LayerNorm(16)
            self.qkv = nn.Linear(16, 48)
            self.proj = nn.Linear(16, 16)
            self.gn = nn.GroupNorm(4, 16)
            self.out = nn.Linear(16, 50)

        def forward(self, tok):
            h = self.ln(self.emb(tok))
            q, k, v = self.qkv(h).chunk(3, dim=-1)
            att = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)
            h = h + self.proj(F.gelu(att @ v))
            h = self.gn(h.transpose(1, 2)).transpose(1, 2)
            h = torch.tanh(h) * torch.sigmoid(h) + F.silu(h)
            return F.log_softmax(self.out(h), dim=-1)

    torch.manual_seed(0)
    m_cpu = Block()
    m = copy.deepcopy(m_cpu).devx()
    tok = torch.randint(0, 50, (2, 7))
    target = torch.randint(0, 50, (2, 7))
    loss_cpu = F.nll_loss(m_cpu(tok).flatten(0, 1), target.flatten())
    loss = F.nll_loss(m(tok.devx()).flatten(0, 1), target.devx().flatten())
    loss_cpu.backward()
    loss.backward()
    assert_close(loss.cpu(), loss_cpu, atol=ATOL, rtol=RTOL)
    for (name, p_cpu), p in zip(m_cpu.named_parameters(), m.parameters()):
        assert p.grad is not None and p.grad.device.type == "devx", name
        assert_close(p.grad.cpu(), p_cpu.grad, atol=ATOL, rtol=RTOL, msg=lambda s: f"{name}: {s}")


def test_backward_of_a_leaf_created_on_devx(fallback):
    x = torch.randn(5, 3, device="devx", requires_grad=True)
    w = torch.randn(3, 2, device="devx", requires_grad=True)
    y = (x @ w).relu().pow(2).mean()
    y.backward()
    x_c = x.detach().cpu().requires_grad_()
    w_c = w.detach().cpu().requires_grad_()
    (x_c @ w_c).relu().pow(2).mean().backward()
    assert_close(x.grad.cpu(), x_c.grad)
    assert_close(w.grad.cpu(), w_c.grad)
    # a second backward accumulates
    (x @ w).sum().backward()
    (x_c @ w_c).sum().backward()
    assert_close(x.grad.cpu(), x_c.grad)


# --- mixed precision


def test_grad_scaler_step_matches_cpu(fallback):
    """torch.amp.GradScaler: the scaled backward, the unscale before the step and the scale update
    give the CPU's parameters."""
    torch.manual_seed(0)
    m_cpu = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    m = copy.deepcopy(m_cpu).devx()
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    scales = []
    for model, dev in ((m, "devx"), (m_cpu, "cpu")):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(dev, init_scale=64.0, growth_interval=1)
        for _ in range(2):
            opt.zero_grad()
            scaler.scale(F.cross_entropy(model(x.to(dev)), y.to(dev))).backward()
            scaler.step(opt)
            scaler.update()
        scales.append(scaler.get_scale())
    assert scales[0] == scales[1]
    for p, q in zip(m.parameters(), m_cpu.parameters()):
        assert_close(p.grad.cpu(), q.grad, atol=ATOL, rtol=RTOL)
        assert_close(p.detach().cpu(), q.detach(), atol=ATOL, rtol=RTOL)


def test_autocast_on_devx(fallback):
    """torch.autocast("devx") (bf16 is in torch.devx.get_amp_supported_dtype()) runs a linear layer
    in bfloat16 as CPU autocast does."""
    assert torch.bfloat16 in torch.devx.get_amp_supported_dtype()
    torch.manual_seed(0)
    lin = nn.Linear(8, 4)
    x = torch.randn(3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = lin(x)
    lin_d = copy.deepcopy(lin).devx()
    with torch.autocast("devx", dtype=torch.bfloat16):
        got = lin_d(x.devx())
        s = got.float().sum()
    assert got.dtype == want.dtype == torch.bfloat16
    assert_close(got.cpu(), want)
    assert s.dtype == torch.float32


def test_bf16_autocast_training_run_matches_cpu_autocast(fallback):
    """Five SGD steps of a CNN under bf16 autocast on devx follow the same run under CPU autocast
    (losses and final parameters within bf16 tolerances)."""
    torch.manual_seed(0)
    m_cpu = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(),
                          nn.Linear(6 * 8 * 8, 5))
    m = copy.deepcopy(m_cpu).devx()
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 5, (8,))
    losses = {}
    for model, dev in ((m, "devx"), (m_cpu, "cpu")):
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        losses[dev] = []
        for _ in range(5):
            opt.zero_grad()
            with torch.autocast(dev, dtype=torch.bfloat16):
                logits = model(x.to(dev))
                loss = F.cross_entropy(logits, y.to(dev))
            assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
            loss.backward()
            opt.step()
            losses[dev].append(loss.item())
    assert losses["devx"] == pytest.approx(losses["cpu"], rel=1.6e-2, abs=1e-2)
    assert losses["cpu"][-1] < losses["cpu"][0]
    for p, q in zip(m.parameters(), m_cpu.parameters()):
        assert_close(p.detach().cpu(), q.detach(), atol=1e-2, rtol=1.6e-2)


def test_autocast_policy_follows_cuda_lists(fallback):
    """Lower-precision ops (mm), fp32 ops (softmax, layer_norm) and promote ops (cat) as on CUDA."""
    a = torch.randn(4, 4, device="devx")
    with torch.autocast("devx", dtype=torch.float16):
        low = a @ a
        assert low.dtype == torch.float16
        assert torch.softmax(low, dim=-1).dtype == torch.float32
        assert F.layer_norm(low, (4,)).dtype == torch.float32
        assert torch.cat([low, a]).dtype == torch.float32
        assert (a + a).dtype == torch.float32  # not on any list: runs as given


# --- weight tying and parameter identity


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(30, 12)
        self.mix = nn.Linear(12, 12)
        self.lm_head = nn.Linear(12, 30, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, tok):
        return self.lm_head(torch.tanh(self.mix(self.wte(tok))))


@pytest.mark.parametrize("move", ["cuda", "to_devx", pytest.param("to_devx1", marks=pytest.mark.devices(2)),
                                  "devx_method", "to_cuda_device"])
def test_weight_tying_survives_the_move_and_gets_both_gradients(fallback, move):
    torch.manual_seed(0)
    m = TiedLM()
    m_cpu = copy.deepcopy(m)
    assert m_cpu.lm_head.weight is m_cpu.wte.weight
    tied = m.wte.weight
    params = list(m.parameters())
    moved = {
        "cuda": lambda: m.cuda(),
        "to_devx": lambda: m.to("devx"),
        "to_devx1": lambda: m.to("devx:1"),
        "devx_method": lambda: m.devx(),
        "to_cuda_device": lambda: m.to(torch.device("cuda")),
    }[move]()
    assert moved is m
    assert m.wte.weight.device.type == "devx"
    assert m.lm_head.weight is m.wte.weight, "tied weights were untied by the move"
    assert m.wte.weight is tied, "the Parameter object changed"
    assert [id(p) for p in m.parameters()] == [id(p) for p in params]
    assert len(list(m.parameters())) == 3 + 0  # wte, mix.weight, mix.bias (head shares wte)

    dev = m.wte.weight.device
    tok = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 29]])
    m(tok.to(dev)).logsumexp(-1).sum().backward()
    m_cpu(tok).logsumexp(-1).sum().backward()
    assert_close(m.wte.weight.grad.cpu(), m_cpu.wte.weight.grad, atol=ATOL, rtol=RTOL)
    # the same as an untied copy's two gradients added together (and unlike either alone)
    untied = copy.deepcopy(m_cpu)
    untied.lm_head.weight = nn.Parameter(untied.wte.weight.detach().clone())
    untied.zero_grad()
    untied(tok).logsumexp(-1).sum().backward()
    g_emb, g_head = untied.wte.weight.grad, untied.lm_head.weight.grad
    assert_close(m.wte.weight.grad.cpu(), g_emb + g_head, atol=ATOL, rtol=RTOL)
    assert not torch.allclose(g_emb + g_head, g_head, atol=1e-4)
    assert not torch.allclose(g_emb + g_head, g_emb, atol=1e-4)


def test_parameter_identity_lets_an_earlier_optimizer_train_the_moved_model(fallback):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    m_cpu = copy.deepcopy(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)  # created before the move, as many scripts do
    opt_cpu = torch.optim.SGD(m_cpu.parameters(), lr=0.1)
    before = [id(p) for p in m.parameters()]
    m.cuda()
    assert [id(p) for p in m.parameters()] == before
    assert all(p.device.type == "devx" for p in opt.param_groups[0]["params"])
    x, y = torch.randn(6, 4), torch.randint(0, 2, (6,))
    for model, o, dev in ((m, opt, "devx"), (m_cpu, opt_cpu, "cpu")):
        o.zero_grad()
        F.cross_entropy(model(x.to(dev)), y.to(dev)).backward()
        o.step()
    for p, q in zip(m.parameters(), m_cpu.parameters()):
        assert_close(p.detach().cpu(), q.detach(), atol=ATOL, rtol=RTOL)


@pytest.mark.devices(2)
def test_module_round_trip_keeps_identity_and_values(fallback):
    m = nn.Linear(3, 3)
    w = m.weight
    value = w.detach().clone()
    m.to("devx:1")
    m.to("devx:0")
    m.cpu()
    assert m.weight is w and w.device.type == "cpu"
    assert torch.equal(w.detach(), value)
    m.to(torch.float64).devx()
    assert m.weight is w and w.dtype == torch.float64 and w.device.type == "devx"


# --- a training script ends cleanly

EXIT_SCRIPT = """
import sys, torch, torch_devx
# A longer GIL switch interval (as busy programs set) widens the window in which the autograd
# device thread can still be finishing the backward while the interpreter shuts down; a script
# must exit 0 whatever the interval.
sys.setswitchinterval(0.1)
m = torch.nn.Linear(8, 2).cuda()
loss = m(torch.randn(4, 8).cuda()).pow(2).sum()
print("trained", loss.item(), flush=True)
loss.backward()
"""


def test_training_script_exits_cleanly():
    """A script whose last statement is a devx backward must exit with status 0, not abort
    ("terminate called without an active exception") while the interpreter finalises."""
    results = run_many([(EXIT_SCRIPT, {})] * 3)
    bad = [describe(p) for p in results if p.returncode != 0 or "trained" not in p.stdout]
    assert not bad, f"{len(bad)} of {len(results)} runs did not exit cleanly; first:\n{bad[0] if bad else ''}"


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN, torch.nn.LSTMCell, torch.nn.GRUCell])
def test_recurrent_layers_match_cpu(cls):
    """nn.LSTM/GRU/RNN (the CPU's whole-sequence path on devx memory) and nn.LSTMCell/GRUCell (the
    fused cells, _thnn_fused_*_cell, which have no CPU kernel) train as on the CPU."""
    import torch_devx

    cell = cls.__name__.endswith("Cell")
    torch.manual_seed(0)
    cpu = cls(4, 8) if cell else cls(4, 8, num_layers=2)
    dev = copy.deepcopy(cpu).devx()
    x = torch.randn(3, 4) if cell else torch.randn(5, 3, 4)
    torch_devx.diagnostics.reset_fallback_stats()
    outs = []
    for model, inp in ((cpu, x), (dev, x.devx())):
        out = model(inp)
        y = out[0] if isinstance(out, tuple) else out
        y.pow(2).sum().backward()
        outs.append((y.detach().cpu(), [p.grad.cpu() for p in model.parameters()]))
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=1e-5, rtol=1e-5)
    for got, want in zip(outs[1][1], outs[0][1]):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert torch_devx.diagnostics.fallback_stats() == {}


def test_demo_script_matches_the_cpu():
    """`make demo`'s script: an unchanged CUDA-style training run on devx equals the CPU run."""
    import subprocess
    import sys
    from pathlib import Path

    from conftest import child_env

    script = Path(__file__).resolve().parents[1] / "examples" / "train_cuda_style.py"
    proc = subprocess.run([sys.executable, str(script)], env=child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "largest loss difference against the same run on the CPU: 0.00e+00" in proc.stdout
    assert "ops that ran on the CPU fallback: none" in proc.stdout
