"""The workloads the benchmarks time, with no torch_devx import, so that a child measuring native
torch alone (bench_cuda.py) runs them on an untouched torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "add_": lambda a, b: a.add_(b),
    "relu": lambda a, b: torch.relu(a),
    "exp": lambda a, b: torch.exp(a),
    "sum": lambda a, b: a.sum(),
    "where": lambda a, b: torch.where(a > b, a, b),
    "softmax": lambda a, b: torch.softmax(a, -1),
    "clone": lambda a, b: a.clone(),
    "mul_scalar": lambda a, b: a * 2.0,
}


def run_json_child(script: str, args: list[str], **env: str) -> Any:
    """Runs `script` with `args` in a child process with `env` added (settings read at import
    need a process of their own) and returns the JSON of its last output line."""
    cmd = [sys.executable, os.path.abspath(script), *args]
    out = subprocess.run(cmd, env=dict(os.environ, **env), check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def time_per_call(fn: Callable[[], object], sync: Callable[[], None], min_time: float) -> float:
    fn()
    sync()
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / n
        n *= 2


def op_maker(op: Callable, numel: int) -> Callable[[str], Callable[[], object]]:
    def make(device: str) -> Callable[[], object]:
        g = torch.Generator().manual_seed(0)
        cols = 16 if numel == 16 else 1024
        a = torch.randn(numel // cols, cols, generator=g).to(device)
        b = torch.randn(numel // cols, cols, generator=g).to(device)
        return lambda: op(a, b)

    return make


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc1 = nn.Linear(32 * 8 * 8, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def step_maker(device: str, autocast: bool = False) -> Callable[[], object]:
    torch.manual_seed(0)
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 3, 32, 32).to(device)
    y = torch.randint(0, 10, (32,)).to(device)

    def step() -> None:
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return step


class TinyGPT(nn.Module):
    """A GPT-2-style decoder (learned positions, pre-norm blocks, causal attention written out,
    GELU MLP, tied input/output embeddings)."""

    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2, ctx: int = 16) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(dict(ln1=nn.LayerNorm(dim), qkv=nn.Linear(dim, 3 * dim), proj=nn.Linear(dim, dim),
                               ln2=nn.LayerNorm(dim), fc=nn.Linear(dim, 4 * dim), out=nn.Linear(4 * dim, dim)))
            for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight
        self.heads = heads

    def forward(self, tok: torch.Tensor) -> torch.Tensor:
        b, t = tok.shape
        x = self.wte(tok) + self.wpe(torch.arange(t, device=tok.device))
        causal = torch.ones(t, t, device=tok.device, dtype=torch.bool).triu(1)
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["ln1"](x)).split(x.shape[-1], dim=-1)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
            y = att.masked_fill(causal, float("-inf")).softmax(-1) @ v
            x = x + blk["proj"](y.transpose(1, 2).reshape(b, t, -1))
            x = x + blk["out"](F.gelu(blk["fc"](blk["ln2"](x))))
        return self.head(self.ln(x))


class SdpaGPT(TinyGPT):
    """TinyGPT with its attention through F.scaled_dot_product_attention, as GPT-2 ports run it."""

    def forward(self, tok: torch.Tensor) -> torch.Tensor:
        b, t = tok.shape
        x = self.wte(tok) + self.wpe(torch.arange(t, device=tok.device))
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["ln1"](x)).split(x.shape[-1], dim=-1)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + blk["proj"](y.transpose(1, 2).reshape(b, t, -1))
            x = x + blk["out"](F.gelu(blk["fc"](blk["ln2"](x))))
        return self.head(self.ln(x))


class BertStyle(nn.Module):
    """A BERT-style encoder: token, position and segment embeddings, post-norm encoder layers
    (nn.TransformerEncoderLayer, GELU), a pooled classification head."""

    def __init__(self, vocab: int = 128, dim: int = 64, heads: int = 4, layers: int = 2, ctx: int = 32) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.seg = nn.Embedding(2, dim)
        self.ln = nn.LayerNorm(dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pool = nn.Linear(dim, dim)
        self.cls = nn.Linear(dim, 2)

    def forward(self, tok: torch.Tensor) -> torch.Tensor:
        b, t = tok.shape
        seg = (torch.arange(t, device=tok.device) >= t // 2).long()
        x = self.ln(self.tok(tok) + self.pos(torch.arange(t, device=tok.device)) + self.seg(seg))
        x = self.encoder(x)
        return self.cls(torch.tanh(self.pool(x[:, 0])))


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.down(x))


class SmallResNet(nn.Module):
    """A ResNet-style CNN (a stem, four basic blocks, global pooling)."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.blocks = nn.Sequential(ResBlock(16, 16, 1), ResBlock(16, 32, 2), ResBlock(32, 32, 1), ResBlock(32, 64, 2))
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


class LSTMTagger(nn.Module):
    """A sequence tagger: embeddings, a 2-layer bidirectional LSTM, a per-token classifier."""

    def __init__(self, vocab: int = 100, dim: int = 32, hidden: int = 64, tags: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, tok: torch.Tensor) -> torch.Tensor:
        return self.out(self.lstm(self.emb(tok))[0])


class SparseRecommender(nn.Module):
    """A recommendation model as DLRM-style code writes it: sparse embedding bags (trained with
    SparseAdam on sparse gradients) feeding an MLP."""

    def __init__(self, rows: int = 1000, dim: int = 16, tables: int = 4) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum", sparse=True) for _ in range(tables))
        self.mlp = nn.Sequential(nn.Linear(dim * tables, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (tables, batch, bag) indices.
        return self.mlp(torch.cat([t(x[i]) for i, t in enumerate(self.tables)], 1)).squeeze(1)


# name -> (model maker, input maker, loss(output, input)): the real-model train steps the bench times.
REAL_MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor],
                             Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = {
    "lstm": (LSTMTagger, lambda: torch.randint(0, 100, (16, 32)),
             lambda out, x: F.cross_entropy(out.reshape(-1, out.shape[-1]), x.reshape(-1) % 8)),
    "gpt2_sdpa": (lambda: SdpaGPT(vocab=128, dim=64, heads=4, layers=2, ctx=32), lambda: torch.randint(0, 128, (8, 32)),
                  lambda out, x: F.cross_entropy(out[:, :-1].reshape(-1, out.shape[-1]), x[:, 1:].reshape(-1))),
    "bert": (BertStyle, lambda: torch.randint(0, 128, (8, 32)),
             lambda out, x: F.cross_entropy(out, x[:, 0] % 2)),
    "recsys_sparse": (SparseRecommender, lambda: torch.randint(0, 1000, (4, 64, 8)),
                      lambda out, x: F.mse_loss(out, (x[0, :, 0] % 2).float())),
    "resnet_cl": (SmallResNet, lambda: torch.randn(16, 3, 32, 32).contiguous(memory_format=torch.channels_last),
                  lambda out, x: F.cross_entropy(out, torch.arange(out.shape[0], device=out.device) % 10)),
}


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[], None]:
    """One training step of `model` on the input `x` as a closure: forward, loss, backward, step."""
    def step() -> None:
        opt.zero_grad()
        loss_fn(model(x), x).backward()
        opt.step()

    return step


class _Optimizers:
    """Several optimizers stepped as one."""

    def __init__(self, *optimizers: torch.optim.Optimizer) -> None:
        self.optimizers = optimizers

    def zero_grad(self) -> None:
        for o in self.optimizers:
            o.zero_grad()

    def step(self) -> None:
        for o in self.optimizers:
            o.step()


def optimizer_for(model: nn.Module) -> Any:
    """AdamW, with SparseAdam for the parameters of sparse embeddings (AdamW refuses sparse gradients)."""
    sparse = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse}
    dense_params = [p for p in model.parameters() if id(p) not in sparse]
    sparse_params = [p for p in model.parameters() if id(p) in sparse]
    if not sparse_params:
        return torch.optim.AdamW(dense_params, lr=1e-3)
    return _Optimizers(torch.optim.AdamW(dense_params, lr=1e-3), torch.optim.SparseAdam(sparse_params, lr=1e-3))


def real_model_step_maker(name: str) -> Callable[[str], Callable[[], object]]:
    """A maker of `name`'s train step (forward, loss, backward, AdamW step) on a device; the
    channels_last model keeps its weights and inputs channels_last."""
    make_model, make_input, loss_fn = REAL_MODELS[name]

    def make(device: str) -> Callable[[], object]:
        torch.manual_seed(0)
        model = make_model()
        if name.endswith("_cl"):
            model = model.to(memory_format=torch.channels_last)
        model = model.to(device).train()
        return train_step(model, optimizer_for(model), make_input().to(device), loss_fn)

    return make


class LSTMNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(10, 16, num_layers=2, batch_first=True)
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.lstm(x)[0][:, -1])


def small_model(name: str) -> tuple[nn.Module, Callable[[], torch.Tensor], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """(model, input maker, loss(output, input)) of the small models devx is checked and timed
    on: an MLP, a CNN with batch norm, an LSTM and a GPT-2-style language model. Convolutions
    before batch norm have no bias, as in ResNets: its gradient is rounding noise."""
    if name == "mlp":
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 5))
        return model, lambda: torch.randn(8, 20), lambda out, x: F.cross_entropy(out, torch.arange(8, device=out.device) % 5)
    if name == "cnn":
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                              nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5))
        return model, lambda: torch.randn(4, 3, 16, 16), lambda out, x: F.cross_entropy(out, torch.arange(4, device=out.device) % 5)
    if name == "lstm":
        return LSTMNet(), lambda: torch.randn(4, 7, 10), lambda out, x: F.cross_entropy(out, torch.arange(4, device=out.device) % 5)
    if name == "gpt":
        def lm_loss(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(out[:, :-1].reshape(-1, out.shape[-1]), x[:, 1:].reshape(-1))

        return TinyGPT(), lambda: torch.randint(0, 64, (2, 16)), lm_loss
    raise ValueError(f"no small model {name!r}")


def train_small(name: str, device: str, steps: int = 5) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Losses and final parameters of `steps` SGD steps of small_model(name) on `device`, from the
    same seed and data whatever the device."""
    torch.manual_seed(0)
    model, make_input, loss_fn = small_model(name)
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(1)
    inputs = [make_input() for _ in range(steps)]
    losses = []
    for x in inputs:
        x = x.to(device)
        loss = loss_fn(model(x), x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses).cpu(), [p.detach().cpu() for p in model.parameters()]
