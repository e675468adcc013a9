"""devx on the cuda vendor against native torch.cuda, on one GPU: small-op latency, large ops, a
train step.

    python bench/bench_cuda.py [--rounds 5] [--json out.json]

Once torch_devx is imported, CUDA's allocator in that process is devx's (see
torch_devx/_compute_allocator.py), so native CUDA is timed in a process of its own that never
imports torch_devx. The two kinds of child alternate, `--rounds` times each; every figure is the
median over rounds of devx time / native time (1.00 = as fast as native CUDA).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Callable

import torch

from workloads import OPS, op_maker, step_maker, time_per_call

SMALL, LARGE = 16, 1 << 22


def measure(device: str, min_time: float) -> dict[str, float]:
    """Seconds per call of every workload on `device` ("cuda" natively, "devx" on the vendor)."""
    sync: Callable[[], None] = torch.cuda.synchronize if device == "cuda" else torch.devx.synchronize
    times: dict[str, float] = {}
    for label, numel in (("small", SMALL), ("large", LARGE)):
        for name, op in OPS.items():
            times[f"{label}/{name}"] = time_per_call(op_maker(op, numel)(device), sync, min_time)
    times["train_step"] = time_per_call(step_maker(device), sync, min_time * 2)
    times["train_step_bf16_autocast"] = time_per_call(step_maker(device, autocast=True), sync, min_time * 2)
    return times


def child(kind: str, min_time: float) -> None:
    if kind == "devx":
        import torch_devx

        if torch_devx.vendor != "cuda":
            sys.exit(f"devx runs on the {torch_devx.vendor!r} vendor here, not cuda (DEVX_VENDOR=cuda, and a GPU)")
        if not torch_devx._C._compute_allocations_routed():
            sys.exit("devx's allocator is not CUDA's here, so every result would be copied: not what is measured")
        device = "devx"
    else:
        if not torch.cuda.is_available():
            sys.exit("no CUDA device")
        device = "cuda"
    times = measure(device, min_time)
    times["_device"] = torch.cuda.get_device_name() if device == "cuda" else torch.devx.get_device_name()
    print(json.dumps(times))


def run_child(kind: str, min_time: float) -> dict:
    env = dict(os.environ, DEVX_VENDOR="cuda", DEVX_MOCK_CUDA="0")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--min-time", str(min_time)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the {kind} child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds each timing runs at least")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--child", choices=("native", "devx"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.min_time)
        return

    ratios: dict[str, list[float]] = {}
    native_runs: list[dict[str, float]] = []
    devx_runs: list[dict[str, float]] = []
    for _ in range(args.rounds):
        native, devx = run_child("native", args.min_time), run_child("devx", args.min_time)
        native_runs.append(native)
        devx_runs.append(devx)
        device_name = native.pop("_device")
        devx.pop("_device")
        for key in native:
            ratios.setdefault(key, []).append(devx[key] / native[key])

    print(f"torch {torch.__version__}, {device_name}; ratio = devx(cuda) / native cuda, "
          f"median of {args.rounds} rounds")
    results: dict[str, float] = {}
    for key, values in ratios.items():
        results[key] = statistics.median(values)
        native_us = statistics.median(run[key] for run in native_runs) * 1e6
        devx_us = statistics.median(run[key] for run in devx_runs) * 1e6
        print(f"  {key:32s} {results[key]:5.2f}   native {native_us:9.1f} us   devx {devx_us:9.1f} us")
    for label in ("small", "large"):
        results[f"{label}_ops_median_ratio"] = statistics.median(
            v for k, v in results.items() if k.startswith(f"{label}/"))
    print("summary: " + ", ".join(f"{k} {results[k]:.2f}" for k in results if "/" not in k))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
