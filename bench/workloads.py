"""The workloads the benchmarks time, with no torch_devx import, so that a child measuring native
torch alone (bench_cuda.py) runs them on an untouched torch."""
from __future__ import annotations

import time
from typing import Callable

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
