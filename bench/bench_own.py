"""cpu_sim's own kernel library against native CPU in the same run, on one thread.

    python bench/bench_own.py [--quick] [--json out.json]

Each DEVX_SIM_KERNELS setting is read at import, so each runs in a child process that times
devx against the CPU on the same workloads (bench/workloads.py) and prints its ratios:
  * own-only: the CNN train step of bench.py (batch 32, 32x32, SGD) and a GPT-2-style LM step;
  * own-only and aten: small ops (16 elements) through the vendor's kernels against ATen's
    kernels on aliases, each as devx time / CPU time, and their quotient.
The own kernels run on one thread too (DEVX_SIM_THREADS=1), as torch does here.
"""
from __future__ import annotations

import argparse
import json
import statistics
from typing import Callable

import torch

from workloads import OPS, op_maker, run_json_child, small_model, step_maker, time_per_call, train_step


def ratio(make: Callable[[str], Callable[[], object]], repeats: int, min_time: float) -> float:
    """Median devx/cpu ratio over `repeats` interleaved timings."""
    cpu_fn, devx_fn = make("cpu"), make("devx")
    cpu_t, devx_t = [], []
    for _ in range(repeats):
        cpu_t.append(time_per_call(cpu_fn, lambda: None, min_time))
        devx_t.append(time_per_call(devx_fn, torch.devx.synchronize, min_time))
    return statistics.median(devx_t) / statistics.median(cpu_t)


def lm_step_maker(device: str) -> Callable[[], object]:
    torch.manual_seed(0)
    model, make_input, loss_fn = small_model("gpt")
    model = model.to(device)
    return train_step(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), make_input().to(device),
                      loss_fn)


def child(what: str, quick: bool) -> dict[str, float]:
    import torch_devx  # noqa: F401  (the device, with this process's DEVX_SIM_KERNELS)

    torch.set_num_threads(1)
    repeats, min_time = (3, 0.05) if quick else (7, 0.2)
    if what == "steps":
        return {"cnn_step": ratio(step_maker, repeats, min_time * 2),
                "lm_step": ratio(lm_step_maker, repeats, min_time * 2)}
    return {name: ratio(op_maker(op, 16), repeats, min_time) for name, op in OPS.items()}


def run_child(kernels: str, what: str, quick: bool) -> dict[str, float]:
    return run_json_child(__file__, ["--child", what] + (["--quick"] if quick else []),
                          DEVX_SIM_KERNELS=kernels, DEVX_SIM_THREADS="1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (noisier)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--child", choices=["steps", "small"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.quick)))
        return
    steps = run_child("own-only", "steps", args.quick)
    own = run_child("own-only", "small", args.quick)
    aten = run_child("aten", "small", args.quick)
    print(f"own-only CNN train step       devx/CPU {steps['cnn_step']:.2f}")
    print(f"own-only GPT-2-style LM step  devx/CPU {steps['lm_step']:.2f}")
    print(f"{'small op (16 elements)':24s} {'own/CPU':>8s} {'aten/CPU':>9s} {'own/aten':>9s}")
    for name in OPS:
        print(f"{name:24s} {own[name]:8.2f} {aten[name]:9.2f} {own[name] / aten[name]:9.2f}")
    quotients = sorted(own[n] / aten[n] for n in OPS)
    print(f"median own/aten over the small ops: {statistics.median(quotients):.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"steps": steps, "own": own, "aten": aten}, f, indent=1)


if __name__ == "__main__":
    main()
