"""all_reduce throughput: the devx process group on devx tensors against gloo on CPU tensors.

    python bench/bench_allreduce.py [--quick] [--json out.json]

Starts two ranks (each on its own simulated device) that make, in the same run, a `devx` group
(its call check on, the default), a `devx` group with DEVX_DIST_CHECK=0 semantics (check off)
and a plain gloo group on CPU tensors. For each size from 1 KB to 64 MB the three take turns,
one call each, many turns; times are medians of one all_reduce, ratios the median over turns of
gloo time / devx time in the same turn (devx throughput relative to gloo's: 1.00 = as fast).
The checked group's repeated calls run on their prediction (no check round) after the first
few of each size; the last line says how many of each it made.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import time

import torch.multiprocessing as mp

SIZES = [1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def _once(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _worker(rank: int, port: int, quick: bool, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    import torch
    import torch.distributed as dist

    import torch_devx

    torch.set_num_threads(1)
    torch.devx.set_device(rank)
    dist.init_process_group("devx", timeout=datetime.timedelta(seconds=120))
    os.environ["DEVX_DIST_CHECK"] = "0"
    unchecked = dist.new_group(backend="devx")
    gloo = dist.new_group(backend="gloo")
    rows = []
    for size in SIZES:
        n = size // 4
        devx_t = torch.ones(n, device=f"devx:{rank}")
        cpu_t = torch.ones(n)
        calls = {
            "gloo": lambda: dist.all_reduce(cpu_t, group=gloo),
            "devx": lambda: dist.all_reduce(devx_t),
            "devx_nocheck": lambda: dist.all_reduce(devx_t, group=unchecked),
        }
        # One call of each in turn, many turns: a busy machine slows all three alike.
        # Many turns: on a small VM a call's time is bimodal (a woken core or a halted one).
        turns = (300 if size <= 1 << 20 else 100 if size <= 4 << 20 else 40) // (5 if quick else 1)
        times: dict[str, list[float]] = {k: [] for k in calls}
        for fn in calls.values():
            fn()
        names = list(calls)
        for turn in range(turns):
            for name in names[turn % 3:] + names[:turn % 3]:  # rotated: no variant always goes first
                times[name].append(_once(calls[name]))
        med = {k: statistics.median(v) for k, v in times.items()}
        # Ratios of calls made in the same turn, then their median: load that comes and goes
        # during the run (a shared machine) hits both sides of each ratio alike.
        ratio = statistics.median(g / d for g, d in zip(times["gloo"], times["devx"]))
        ratio_nocheck = statistics.median(g / d for g, d in zip(times["gloo"], times["devx_nocheck"]))
        rows.append({"bytes": size, **{f"{k}_s": v for k, v in med.items()},
                     "ratio": ratio, "ratio_nocheck": ratio_nocheck})
    if rank == 0:
        queue.put((rows, torch_devx.distributed.call_check_counts()))
    dist.destroy_process_group()


def _human(n: int) -> str:
    return f"{n >> 20} MB" if n >= 1 << 20 else f"{n >> 10} KB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (noisier)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(port, args.quick, queue), nprocs=2, start_method="spawn")
    rows, counts = queue.get()
    print(f"{'size':>8} {'gloo CPU':>10} {'devx':>10} {'ratio':>6} {'devx, no check':>15} {'ratio':>6}")
    for r in rows:
        print(f"{_human(r['bytes']):>8} {r['gloo_s'] * 1e3:>8.3f}ms {r['devx_s'] * 1e3:>8.3f}ms {r['ratio']:>6.2f} "
              f"{r['devx_nocheck_s'] * 1e3:>13.3f}ms {r['ratio_nocheck']:>6.2f}")
    print("ratio = gloo time / devx time: devx all_reduce throughput relative to gloo on CPU tensors")
    print(f"checked devx group: {counts['check_rounds']} calls checked by a round, {counts['predicted']} run on "
          f"their prediction, {counts['confirmations']} confirmations")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
