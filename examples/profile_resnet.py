"""Profile a ResNet-style training step on devx with torch.profiler, as DIPU's profiler walkthrough
does on its devices: a table of ops sorted by device time (conv and batch-norm rows with the
device's own kernel times) and a chrome trace with a device track per stream.

    python examples/profile_resnet.py [--out DIR] [--steps N]

The script is written as for CUDA (`.cuda()`, ProfilerActivity.CUDA); torch_devx's CUDA mocking
turns it into devx.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import torch_devx  # noqa: F401  (registers devx and the CUDA mocking)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.shortcut(x))


class SmallResNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layers = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2))
        self.head = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/profile"), help="folder for the chrome trace")
    parser.add_argument("--steps", type=int, default=5, help="training steps (the last 2 are recorded)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    model = SmallResNet().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = torch.randn(16, 3, 32, 32).cuda()
    labels = torch.randint(0, 10, (16,)).cuda()

    def step() -> None:
        with record_function("forward"):
            loss = nn.functional.cross_entropy(model(images), labels)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            optimizer.step()
            optimizer.zero_grad()

    traces: list[Path] = []

    def save_trace(prof: profile) -> None:
        path = args.out / f"trace_step{prof.step_num}.json"
        prof.export_chrome_trace(str(path))
        traces.append(path)

    active = min(2, args.steps)
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=max(0, args.steps - active - 1), warmup=1 if args.steps > active else 0,
                          active=active, repeat=1),
        on_trace_ready=save_trace,
        record_shapes=True,
        profile_memory=True,
    ) as prof:
        for _ in range(args.steps):
            step()
            prof.step()
    torch.cuda.synchronize()

    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15))
    print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cuda_time_total", row_limit=6))
    for path in traces:
        print(f"chrome trace: {path} (open in chrome://tracing or https://ui.perfetto.dev)")


if __name__ == "__main__":
    main()
