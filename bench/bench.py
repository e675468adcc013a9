"""devx against native CPU in the same run, on one thread: small ops, large ops, train steps.

    python bench/bench.py [--quick] [--small-only | --models-only] [--json out.json]

Every figure is a ratio devx time / CPU time (1.00 = as fast as native), the median over
repeated timings. Small ops have 16 elements (what the backend's per-op overhead dominates),
large ops 1M elements (what its kernels and memory dominate).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Callable

import torch

import torch_devx
import cpp_loops
from workloads import OPS, REAL_MODELS, op_maker, real_model_step_maker, run_json_child, step_maker, time_per_call


def ratio(make: Callable[[str], Callable[[], object]], repeats: int, min_time: float) -> tuple[float, float, float]:
    """Median devx/cpu ratio over `repeats` interleaved timings, and the two median times."""
    cpu_fn, devx_fn = make("cpu"), make("devx")
    cpu_t, devx_t = [], []
    for _ in range(repeats):
        cpu_t.append(time_per_call(cpu_fn, lambda: None, min_time))
        devx_t.append(time_per_call(devx_fn, torch.devx.synchronize, min_time))
    c, d = statistics.median(cpu_t), statistics.median(devx_t)
    return d / c, c, d


def autocast_step_maker(device: str) -> Callable[[], object]:
    return step_maker(device, autocast=True)


def async_train_step(quick: bool) -> dict[str, float]:
    """The train step with asynchronous streams (DEVX_SIM_ASYNC=1 is read at import, so in a
    child process)."""
    return run_json_child(__file__, ["--train-step-only"] + (["--quick"] if quick else []), DEVX_SIM_ASYNC="1")


def real_model_steps(repeats: int, min_time: float) -> dict[str, dict[str, float]]:
    """The real models' train steps (workloads.REAL_MODELS), each against the CPU."""
    results = {}
    for name in REAL_MODELS:
        r, c, d = ratio(real_model_step_maker(name), repeats, min_time * 2)
        results[name] = {"ratio": r, "cpu_us": c * 1e6, "devx_us": d * 1e6}
    return results


def async_real_model_steps(quick: bool) -> dict[str, dict[str, float]]:
    return run_json_child(__file__, ["--real-models-only"] + (["--quick"] if quick else []), DEVX_SIM_ASYNC="1")


def print_model_rows(results: dict[str, dict[str, float]], mode: str) -> None:
    for name, v in results.items():
        print(f"  {name:10s} train step{mode}  cpu {v['cpu_us'] / 1e3:7.2f} ms  devx {v['devx_us'] / 1e3:7.2f} ms  "
              f"ratio {v['ratio']:5.2f}")


def model_rows(quick: bool, repeats: int, min_time: float) -> dict[str, dict[str, float]]:
    """The real-model rows, synchronous and (cpu_sim) with DEVX_SIM_ASYNC=1, printed as they come."""
    results = {}
    sync = real_model_steps(repeats, min_time)
    print_model_rows(sync, "")
    results.update({f"model/{name}_train_step": v for name, v in sync.items()})
    if torch_devx.vendor == "cpu_sim":
        asynchronous = async_real_model_steps(quick)
        print_model_rows(asynchronous, ", DEVX_SIM_ASYNC=1")
        results.update({f"model/{name}_train_step_async": v for name, v in asynchronous.items()})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (noisier)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--small-only", action="store_true",
                        help="only the small ops (the per-op overhead), with their median")
    parser.add_argument("--models-only", action="store_true",
                        help="only the real-model train steps (workloads.REAL_MODELS), synchronous and asynchronous")
    parser.add_argument("--train-step-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--real-models-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    repeats, min_time = (3, 0.05) if args.quick else (7, 0.2)
    if args.train_step_only:
        r, c, d = ratio(step_maker, repeats, min_time * 2)
        print(json.dumps({"ratio": r, "cpu_us": c * 1e6, "devx_us": d * 1e6}))
        return
    if args.real_models_only:
        print(json.dumps(real_model_steps(repeats, min_time)))
        return

    results: dict[str, dict[str, float]] = {}
    print(f"torch {torch.__version__}, devx vendor {torch_devx.vendor}, 1 thread; ratio = devx / cpu")
    if args.models_only:
        results = model_rows(args.quick, repeats, min_time)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"results": results}, fh, indent=2)
        return
    for label, numel in (("small", 16),) if args.small_only else (("small", 16), ("large", 1 << 20)):
        for name, op in OPS.items():
            r, c, d = ratio(op_maker(op, numel), repeats, min_time)
            results[f"{label}/{name}"] = {"ratio": r, "cpu_us": c * 1e6, "devx_us": d * 1e6}
            print(f"  {label:5s} {name:10s} cpu {c * 1e6:9.2f} us  devx {d * 1e6:9.2f} us  ratio {r:5.2f}")
    if args.small_only:
        median = statistics.median(v["ratio"] for v in results.values())
        print(f"summary: small_ops_median_ratio {median:.2f}")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"results": results, "summary": {"small_ops_median_ratio": median}}, fh, indent=2)
        return
    r, c, d = ratio(step_maker, repeats, min_time * 2)
    results["model/train_step"] = {"ratio": r, "cpu_us": c * 1e6, "devx_us": d * 1e6}
    print(f"  model train step  cpu {c * 1e3:7.2f} ms  devx {d * 1e3:7.2f} ms  ratio {r:5.2f}")
    r, c, d = ratio(autocast_step_maker, repeats, min_time * 2)
    results["model/autocast_bf16_train_step"] = {"ratio": r, "cpu_us": c * 1e6, "devx_us": d * 1e6}
    print(f"  bf16 autocast step cpu {c * 1e3:7.2f} ms  devx {d * 1e3:7.2f} ms  ratio {r:5.2f}")
    if torch_devx.vendor == "cpu_sim":
        results["model/train_step_async"] = a = async_train_step(args.quick)
        print(f"  model train step, DEVX_SIM_ASYNC=1  cpu {a['cpu_us'] / 1e3:7.2f} ms  "
              f"devx {a['devx_us'] / 1e3:7.2f} ms  ratio {a['ratio']:5.2f}")
    results.update(model_rows(args.quick, repeats, min_time))

    # Runtime figures: the cost of one cached allocate/free pair (C++, no Python in the loop) and
    # how much memory a train step reserves beyond what it uses at its peak.
    loops = cpp_loops.load()
    alloc_ns = statistics.median(loops.time_alloc_free_ns(0, 4096, 200000) for _ in range(repeats))
    results["runtime/alloc_free_pair_ns"] = {"value": alloc_ns}
    step = step_maker("devx")
    step()
    torch.devx.synchronize()
    # What the step itself reserves: not the blocks the benchmarks before it left in the cache.
    torch.devx.empty_cache()
    torch.devx.reset_peak_memory_stats()
    for _ in range(3):
        step()
    peak_ratio = torch.devx.max_memory_reserved() / torch.devx.max_memory_allocated()
    results["runtime/peak_reserved_over_allocated"] = {"value": peak_ratio}
    print(f"  cached alloc/free pair {alloc_ns:.0f} ns; train step peak reserved / peak allocated {peak_ratio:.3f}")

    # Diagnostics: small ops with every switch off against the same ops with the diagnostics gate
    # open (a force-fallback pattern that matches no op), which is what "off" saves.
    def small_add(gate_open: bool) -> Callable[[str], Callable[[], object]]:
        def make(device: str) -> Callable[[], object]:
            a = torch.randn(4, 4).to(device)
            if device == "devx":
                os.environ["DIPU_FORCE_FALLBACK_OPS_LIST"] = "no_such_op" if gate_open else ""
            return lambda: a + a
        return make

    # The generated wrapper against the same wrapper generated without the diagnostics gate (both
    # generated with this build's wrappers, into bench/'s extension; C++ loop, no dispatcher, no
    # Python), on small tensors.
    a = torch.randn(16, device="devx")
    compiled = {op: loops.time_wrapper_pair_ns(op, a, a, 20000, 3 if args.quick else 9)
                for op in ("add.Tensor", "sub.Tensor")}
    for op, (with_gate, without) in compiled.items():
        results[f"diagnostics/wrapper_{op}_over_compiled_out"] = {"value": with_gate / without}
        print(f"  {op} wrapper: diagnostics off {with_gate:.0f} ns, compiled out {without:.0f} ns, "
              f"ratio {with_gate / without:.3f}")

    off = ratio(small_add(False), repeats, min_time)[2]
    opened = ratio(small_add(True), repeats, min_time)[2]
    os.environ["DIPU_FORCE_FALLBACK_OPS_LIST"] = ""
    results["diagnostics/gate_open_over_off"] = {"value": opened / off}
    print(f"  small add: diagnostics off {off * 1e6:.2f} us, gate open (nothing matched) {opened * 1e6:.2f} us")

    # Profiler: train steps recorded by torch.profiler (CPU and device activities) against the same
    # steps unrecorded. Off, nothing of the profiler is left on the op path but the gate's load.
    from torch.profiler import ProfilerActivity, profile

    def steps_seconds(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            step()
        torch.devx.synchronize()
        return time.perf_counter() - start

    n_steps = 3 if args.quick else 10
    unprofiled = min(steps_seconds(n_steps) for _ in range(3))
    profiled = []
    for _ in range(3):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
            profiled.append(steps_seconds(n_steps))
    profiler_ratio = min(profiled) / unprofiled
    results["profiler/profiled_over_unprofiled_step"] = {"value": profiler_ratio}
    print(f"  train step under torch.profiler (CPU + devx activities) / without: {profiler_ratio:.2f}")

    summary = {
        "small_ops_median_ratio": statistics.median(v["ratio"] for k, v in results.items() if k.startswith("small/")),
        "large_ops_median_ratio": statistics.median(v["ratio"] for k, v in results.items() if k.startswith("large/")),
        "train_step_ratio": results["model/train_step"]["ratio"],
        "autocast_train_step_ratio": results["model/autocast_bf16_train_step"]["ratio"],
        **({"train_step_async_ratio": results["model/train_step_async"]["ratio"]}
           if "model/train_step_async" in results else {}),
        **{f"{k[len('model/'):]}_ratio": v["ratio"] for k, v in results.items()
           if k.startswith("model/") and k.split("/")[1].split("_train_step")[0] in REAL_MODELS},
        "alloc_free_pair_ns": alloc_ns,
        "peak_reserved_over_allocated": peak_ratio,
        "profiled_step_ratio": profiler_ratio,
        "diagnostics_off_over_compiled_out": statistics.mean(w / wo for w, wo in compiled.values()),
    }
    print("summary: " + ", ".join(f"{k} {v:.2f}" for k, v in summary.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"results": results, "summary": summary}, fh, indent=2)


if __name__ == "__main__":
    main()
