"""The cost of each diagnostics switch, on and off, as ratios against everything off in the same run.

    python bench/bench_switches.py [--quick] [--only REGEX] [--json out.json]

For every switch: a small op (16-element add) and a CNN train step (batch 8, 32x32), timed with
the switch on and with everything off, interleaved and repeated; the figure is the median on/off
ratio. "off again / off" times the same work after the switch was turned on and off again
against the first off timings: what a switch costs once it is off (1.00 = nothing). Logs go to a
temporary DEVX_LOG_PATH so that dumping and tracing pay for writing a file, not a terminal.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from typing import Callable

os.environ.setdefault("DEVX_LOG_PATH", tempfile.mkdtemp(prefix="devx_bench_logs_"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_devx  # noqa: E402
from torch_devx import diagnostics  # noqa: E402


def _env(**values: str) -> tuple[Callable[[], None], Callable[[], None]]:
    def on() -> None:
        for k, v in values.items():
            os.environ[k] = v

    def off() -> None:
        for k in values:
            os.environ[k] = "0"

    return on, off


def _history(stacks: str) -> tuple[Callable[[], None], Callable[[], None]]:
    def on() -> None:
        torch.devx.memory._record_memory_history("all", stacks=stacks, max_entries=100_000, clear_history=True)

    def off() -> None:
        torch.devx.memory._record_memory_history(None, clear_history=True)

    return on, off


def _op_hook() -> tuple[Callable[[], None], Callable[[], None]]:
    return (lambda: diagnostics.set_op_hook(lambda name, args, results: None),
            lambda: diagnostics.set_op_hook(None))


SWITCHES: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {
    "DIPU_DUMP_OP_ARGS=1": _env(DIPU_DUMP_OP_ARGS="1"),
    "DIPU_DUMP_OP_ARGS=2": _env(DIPU_DUMP_OP_ARGS="2"),
    "DIPU_DUMP_OP_ARGS=3": _env(DIPU_DUMP_OP_ARGS="3"),
    "DIPU_AUTOCOMPARE=1": _env(DIPU_AUTOCOMPARE="1"),
    "DIPU_MEM_CHECK=1": _env(DIPU_MEM_CHECK="1"),
    "DIPU_MEM_CHECK=1 +BACKTRACE": _env(DIPU_MEM_CHECK="1", DIPU_MEM_CHECK_ENABLE_BACKTRACE="1"),
    "DEVX_TRACE_RUNTIME=all=1": _env(DEVX_TRACE_RUNTIME="all=1"),
    "memory history (python stacks)": _history("python"),
    "memory history (python+C++ stacks)": _history("all"),
    "DEVX_SIM_SANITIZE=1": _env(DEVX_SIM_SANITIZE="1"),
    "op hook (no-op Python hook, every op)": _op_hook(),
}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def small_op() -> Callable[[], object]:
    a = torch.randn(4, 4, device="devx")
    return lambda: a + a


def train_step() -> Callable[[], object]:
    torch.manual_seed(0)
    model = Net().to("devx")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(8, 3, 32, 32, device="devx")
    y = torch.randint(0, 10, (8,), device="devx")

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def time_per_call(fn: Callable[[], object], min_time: float) -> float:
    fn()
    torch.devx.synchronize()
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        torch.devx.synchronize()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / n
        n *= 2


def measure(make: Callable[[], Callable[[], object]], on: Callable[[], None], off: Callable[[], None],
            repeats: int, min_time: float) -> dict[str, float]:
    off_t, on_t, again_t = [], [], []
    for _ in range(repeats):
        # A fresh closure per timing: tensors made while a switch is on (guard zones, recorded
        # stacks) must not be timed with it off.
        off_t.append(time_per_call(make(), min_time))
        on()
        try:
            on_t.append(time_per_call(make(), min_time))
        finally:
            off()
        again_t.append(time_per_call(make(), min_time))
    o, n, a = statistics.median(off_t), statistics.median(on_t), statistics.median(again_t)
    return {"off_us": o * 1e6, "on_us": n * 1e6, "on_over_off": n / o, "off_again_over_off": a / o}


def environment_write_cost(repeats: int, min_time: float) -> dict[str, float]:
    """What an os.environ write to a variable that is no setting costs the op after it: that op's
    time (write-and-op minus the write alone) with torch_devx watching the environment against the
    same without the watch (which measures what any environment write costs the next op, devx or
    not), interleaved. Also the write itself, watched and not."""
    from torch_devx import _environ

    a = torch.randn(4, 4, device="devx")
    counter = iter(range(1 << 62))

    def write() -> None:
        os.environ["DEVX_BENCH_UNRELATED"] = str(next(counter))

    def write_and_op() -> object:
        write()
        return a + a

    times: dict[str, list[float]] = {k: [] for k in ("write", "both", "write_unwatched", "both_unwatched")}
    for _ in range(repeats):
        times["write"].append(time_per_call(write, min_time))
        times["both"].append(time_per_call(write_and_op, min_time))
        _environ.unwatch()
        try:
            times["write_unwatched"].append(time_per_call(write, min_time))
            times["both_unwatched"].append(time_per_call(write_and_op, min_time))
        finally:
            _environ.watch()
    m = {k: statistics.median(v) for k, v in times.items()}
    op_after = m["both"] - m["write"]
    op_after_unwatched = m["both_unwatched"] - m["write_unwatched"]
    return {"op_after_write_us": op_after * 1e6, "op_after_write_unwatched_us": op_after_unwatched * 1e6,
            "watched_over_unwatched": op_after / op_after_unwatched,
            "write_us": m["write"] * 1e6, "write_unwatched_us": m["write_unwatched"] * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (noisier)")
    parser.add_argument("--only", help="only the switches whose name matches this regular expression")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    repeats, min_time = (3, 0.05) if args.quick else (5, 0.15)
    print(f"torch {torch.__version__}, devx vendor {torch_devx.vendor}, 1 thread; logs in {os.environ['DEVX_LOG_PATH']}")
    print(f"{'switch':40s} {'small op on/off':>16s} {'off again/off':>14s} {'step on/off':>12s} {'off again/off':>14s}")
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name, (on, off) in SWITCHES.items():
        if args.only and not re.search(args.only, name):
            continue
        small = measure(small_op, on, off, repeats, min_time)
        step = measure(train_step, on, off, repeats, min_time * 2)
        results[name] = {"small_op": small, "train_step": step}
        print(f"{name:40s} {small['on_over_off']:16.2f} {small['off_again_over_off']:14.2f} "
              f"{step['on_over_off']:12.2f} {step['off_again_over_off']:14.2f}")
    if not args.only:
        env = environment_write_cost(repeats, min_time)
        results["unrelated os.environ write"] = {"small_op": env}
        print(f"a small op after an unrelated os.environ write, devx watching the environment / not: "
              f"{env['watched_over_unwatched']:.2f} ({env['op_after_write_us']:.2f} / "
              f"{env['op_after_write_unwatched_us']:.2f} us); the write itself {env['write_us']:.2f} / "
              f"{env['write_unwatched_us']:.2f} us")
    first = next(iter(results.values()))
    print(f"off: small op {first['small_op']['off_us']:.2f} us, train step {first['train_step']['off_us'] / 1e3:.2f} ms")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
