"""Instructions per small op (bench/workloads.OPS, 16 elements) under valgrind's callgrind, for
native CPU, devx on ATen's kernels on aliases and devx on cpu_sim's own kernels, one thread.

    python bench/instructions.py [--ops add,mul] [--calls 1000]

Instruction counts barely move when other processes load the machine, unlike times: use them to
decide, and bench.py / bench_own.py for the times. Each setting runs in a child process under
callgrind with collection off; the child turns it on, then per op zeroes the counters, calls the
op `--calls` times and dumps them. A call of an empty Python function is timed the same way and
subtracted, so what remains is the op itself.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

SETTINGS = {"cpu": ("cpu", "aten"), "aten": ("devx", "aten"), "own": ("devx", "own-only")}


def child(device: str, ops: list[str], calls: int) -> None:
    import torch

    if device == "devx":
        import torch_devx  # noqa: F401
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from workloads import OPS, op_maker

    torch.set_num_threads(1)
    fns = {"noop": lambda: None, **{name: op_maker(OPS[name], 16)(device) for name in ops}}
    for fn in fns.values():
        for _ in range(300):
            fn()
    if device == "devx":
        torch.devx.synchronize()
    pid = str(os.getpid())

    def control(*args: str) -> None:
        subprocess.run(["callgrind_control", *args, pid], check=True, capture_output=True)

    control("-i", "on")
    for name, fn in fns.items():
        control("-z")
        for _ in range(calls):
            fn()
        control("-d", name)


def count(setting: str, ops: list[str], calls: int) -> dict[str, float]:
    device, kernels = SETTINGS[setting]
    with tempfile.TemporaryDirectory() as out:
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}/cg.%p",
               sys.executable, os.path.abspath(__file__), "--child", device, "--ops", ",".join(ops),
               "--calls", str(calls)]
        # A fixed hash seed: with a random one, Python's dict lookups alone move a count by hundreds.
        env = dict(os.environ, DEVX_SIM_KERNELS=kernels, DEVX_SIM_THREADS="1", PYTHONHASHSEED="0")
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        totals = {}
        for path in glob.glob(f"{out}/cg.*"):
            text = open(path, errors="replace").read()
            trigger = re.search(r"^desc: Trigger: .*dump (\S+)$", text, re.M)
            if trigger:
                totals[trigger.group(1)] = int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))
    return {name: (totals[name] - totals["noop"]) / calls for name in ops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", help="comma list of bench/workloads.OPS names (default: all)")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--child", choices=["cpu", "devx"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.ops.split(","), args.calls)
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from workloads import OPS

    ops = args.ops.split(",") if args.ops else list(OPS)
    unknown = [name for name in ops if name not in OPS]
    if unknown:
        parser.error(f"unknown ops {unknown}; choose from {list(OPS)}")
    counts = {setting: count(setting, ops, args.calls) for setting in SETTINGS}
    print(f"{'small op (16 elements)':24s} {'cpu':>8s} {'aten':>8s} {'own':>8s} {'aten/cpu':>9s} {'own/aten':>9s}")
    for name in ops:
        c, a, o = (counts[s][name] for s in SETTINGS)
        print(f"{name:24s} {c:8.0f} {a:8.0f} {o:8.0f} {a / c:9.2f} {o / a:9.2f}")


if __name__ == "__main__":
    main()
