"""An unchanged CUDA-style training script, run on devx by adding one import.

    python examples/train_cuda_style.py

Trains a small CNN on synthetic data, then repeats the run on the CPU with the same seed and
checks that both give the same losses: the simulated device computes exactly what the CPU does.
"""
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_devx  # noqa: F401  (the only line a CUDA script needs)


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def train(device: torch.device, steps: int = 20) -> list[float]:
    torch.manual_seed(0)
    model = SmallNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # A fixed synthetic dataset: 10 classes, each a noisy pattern.
    generator = torch.Generator().manual_seed(1)
    prototypes = torch.randn(10, 3, 16, 16, generator=generator)
    labels = torch.randint(0, 10, (256,), generator=generator)
    images = prototypes[labels] + 0.5 * torch.randn(256, 3, 16, 16, generator=generator)
    # Dropout draws from the default generator of the device it runs on (as on CUDA), and building
    # the model on the CPU advanced only the CPU's: seed every device's generator alike here.
    torch.manual_seed(2)
    losses = []
    for step in range(steps):
        idx = torch.arange(step * 32, step * 32 + 32) % 256
        x, y = images[idx].to(device), labels[idx].to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if device.type == "cuda":
        torch.cuda.synchronize()
    return losses


def main() -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"torch.cuda.is_available() = {torch.cuda.is_available()}; running on "
          f"{torch.cuda.get_device_name()} (vendor {torch_devx.vendor})")
    start = time.perf_counter()
    losses = train(device)
    elapsed = time.perf_counter() - start
    for step in range(0, len(losses), 5):
        print(f"step {step:3d}  loss {losses[step]:.4f}")
    print(f"step {len(losses) - 1:3d}  loss {losses[-1]:.4f}   ({elapsed:.2f} s)")
    reference = train(torch.device("cpu"))
    worst = max(abs(a - b) for a, b in zip(losses, reference))
    print(f"largest loss difference against the same run on the CPU: {worst:.2e}")
    fallbacks = torch_devx.diagnostics.fallback_stats()
    print(f"ops that ran on the CPU fallback: {fallbacks or 'none'}")
    if worst > 1e-4:
        raise SystemExit("devx and CPU runs disagree")


if __name__ == "__main__":
    main()
