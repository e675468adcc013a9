"""DistributedDataParallel on devx: a CUDA-style DDP script, unchanged but for one import.

    torchrun --nproc_per_node=2 examples/ddp_train.py

Each rank trains on its own simulated device (devx:0, devx:1) with its half of every batch;
gradients are averaged by the `devx` process group (the script asks for "nccl", which CUDA
mocking maps to devx; gloo moves the bytes). Rank 0 then repeats the training in one process on
the full batches and checks that both runs end with the same parameters (to 1e-5).
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_devx  # noqa: F401  (the only line a CUDA script needs)

TOLERANCE = 1e-5


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))


def batches(steps: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(batch, 32, generator=g), torch.randint(0, 4, (batch,), generator=g)) for _ in range(steps)]


def train(model: nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=16, help="global batch, split across ranks")
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank)
    if rank == 0:
        print(f"backend {dist.get_backend()} (engine {torch_devx.distributed.engine_name()}), "
              f"{world} ranks, devices {[f'devx:{r}' for r in range(world)]}")

    data = batches(args.steps, args.batch)
    shard = args.batch // world
    local = [(x[rank * shard:(rank + 1) * shard], y[rank * shard:(rank + 1) * shard]) for x, y in data]
    ddp = DDP(make_model().cuda(), device_ids=[local_rank])
    train(ddp, local, device)

    status = 0
    if rank == 0:
        reference = make_model().cuda()
        train(reference, data, device)
        diff = max((a - b).abs().max().item() for a, b in zip(ddp.module.parameters(), reference.parameters()))
        ok = diff <= TOLERANCE
        print(f"max |DDP - single process| over parameters: {diff:.3g} ({'OK' if ok else 'MISMATCH'}, "
              f"tolerance {TOLERANCE:g})")
        status = 0 if ok else 1
        counts = torch_devx.distributed.call_check_counts()
        print(f"cross-rank call checks: {counts['check_rounds']} by a round, {counts['predicted']} all_reduces "
              f"run on their prediction, {counts['confirmations']} confirmations")
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
