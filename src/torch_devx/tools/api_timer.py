"""Per-API wall-clock timer: torch.*, torch.nn.functional.*, Tensor methods and operators, module forwards.

    from torch_devx.tools import ApiTimer
    with ApiTimer() as t:            # or t = ApiTimer(); t.start(); ...; t.stop()
        train_step()
    print(t.table()); t.to_csv("devx.csv")
    print(ApiTimer.compare(t_devx, t_cpu, labels=("devx", "cpu")))

How: a TorchFunctionMode sees every call of torch.*, F.* and Tensor methods (operators included), and
two global module hooks (`register_module_forward_pre_hook` / `register_module_forward_hook`,
always_call) time the forwards of torch.nn modules, named "Module.<class>". Both exist only between
start() and stop(): a timer that is not started costs nothing.

Names: "torch.add", "torch.nn.functional.relu", "Tensor.sum", "Module.Linear". PyTorch hands a
TorchFunctionMode the method behind most operators, not the dunder: `a + b` and `1 + a` are recorded
as "Tensor.add", `a * b` as "Tensor.mul", `a / b` as "Tensor.div", `a += b` as "Tensor.add_", `a @ b`
as "Tensor.matmul", `a > b` as "Tensor.gt"; a few keep theirs ("Tensor.__rsub__", "Tensor.__rtruediv__",
"Tensor.__pow__", "Tensor.__rpow__", "Tensor.__getitem__"). Under CUDA mocking `t.cuda()` is "Tensor.devx". Left out as noise: property access (`t.shape`, `t.device`,
`t.grad`, `t.T`), private names, and the metadata calls in `_common.NOISE` (`__repr__`, `size`, `dim`...).

Nesting: with hook_inside=False (default) only outermost calls are recorded; calls made inside a timed
API (F.linear inside Module.Linear, a Linear inside a timed TransformerEncoderLayer) are part of their
caller's time. hook_inside=True records those too (a row's share is then still relative to the
time of the outermost calls, so shares add up to more than 100%). A TorchFunctionMode never sees what a
Python-implemented torch function (F.layer_norm, Tensor.norm) calls inside itself: PyTorch pops the mode
while it runs, so hook_inside adds nested calls of module forwards only.

Modules: forwards of torch.nn modules are APIs. Containers (Sequential, ModuleList, ModuleDict,
DataParallel, DistributedDataParallel) and modules defined outside torch are user code: not recorded
and not an enclosing API, so what they call is recorded as outermost. `user_modules=True` records
user modules too ("Module.MyNet"), which then enclose what they call.

sync=True: after each timed call whose inputs or outputs hold devx tensors, torch.devx.synchronize()
each of their devices before reading the clock, so a row holds device time, not just launch time.
Calls with only CPU tensors are not synchronised. Times are time.perf_counter_ns() wall times.

Statistics accumulate over start()/stop() cycles; reset() clears them. Only the thread that called
start() is timed (the mode stack is per thread; the module hooks check the thread).
"""
from __future__ import annotations

import csv
import threading
import time
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable, Optional, Sequence, Union

import torch
import torch.nn as nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils._pytree import tree_leaves

from .._real_device import is_devx
from ._common import ModeTool, api_name

__all__ = ["ApiStat", "ApiTimer"]

_CONTAINERS: tuple[type, ...] = (nn.Sequential, nn.ModuleList, nn.ModuleDict, nn.DataParallel,
                                 nn.parallel.DistributedDataParallel)


@dataclass
class ApiStat:
    """One row of a summary. Times in seconds; share is a fraction of the outermost calls' time."""
    api: str
    calls: int
    total_s: float
    mean_s: float
    min_s: float
    max_s: float
    share: float


class ApiTimer(ModeTool):
    def __init__(self, hook_inside: bool = False, sync: bool = False, user_modules: bool = False) -> None:
        super().__init__()
        self.hook_inside = hook_inside
        self.sync = sync
        self.user_modules = user_modules
        self._stats: dict[str, list[int]] = {}   # api -> [calls, total_ns, min_ns, max_ns]
        self._outer_ns = 0                        # time of the outermost recorded calls
        self._depth = 0                           # timed calls in progress
        self._module_stack: list[Optional[tuple[str, int]]] = []
        self._module_names: dict[type, Optional[str]] = {}
        self._handles: list[Any] = []
        self._thread: Optional[int] = None

    # -- start/stop -------------------------------------------------------------------------------
    def _on_start(self) -> None:
        self._thread = threading.get_ident()
        self._depth = 0
        self._module_stack.clear()
        self._handles = [register_module_forward_pre_hook(self._pre_hook),
                         register_module_forward_hook(self._post_hook, always_call=True)]

    def _on_stop(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._thread = None

    def reset(self) -> None:
        self._stats.clear()
        self._outer_ns = 0

    # -- recording --------------------------------------------------------------------------------
    def _record(self, name: str, ns: int) -> None:
        entry = self._stats.get(name)
        if entry is None:
            self._stats[name] = [1, ns, ns, ns]
        else:
            entry[0] += 1
            entry[1] += ns
            if ns < entry[2]:
                entry[2] = ns
            if ns > entry[3]:
                entry[3] = ns
        if self._depth == 0:
            self._outer_ns += ns

    def _synchronize(self, *objs: Any) -> None:
        with torch._C.DisableTorchFunction():
            devices = {t.device for t in tree_leaves(objs)
                       if isinstance(t, torch.Tensor) and is_devx(t)}
        for device in devices:
            torch.devx.synchronize(device)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if not self._active or (self._depth and not self.hook_inside):
            return func(*args, **kwargs)
        name = api_name(func)
        if name is None:
            return func(*args, **kwargs)
        self._depth += 1
        start = time.perf_counter_ns()
        try:
            out = func(*args, **kwargs)
            if self.sync:
                self._synchronize(args, kwargs, out)
        finally:
            elapsed = time.perf_counter_ns() - start
            self._depth -= 1
        self._record(name, elapsed)
        return out

    def _module_name(self, module: nn.Module) -> Optional[str]:
        cls = type(module)
        try:
            return self._module_names[cls]
        except KeyError:
            pass
        is_torch = cls.__module__.startswith("torch.")
        if issubclass(cls, _CONTAINERS) and is_torch:
            name = None
        elif is_torch or self.user_modules:
            name = "Module." + cls.__name__
        else:
            name = None
        self._module_names[cls] = name
        return name

    def _pre_hook(self, module: nn.Module, args: Any) -> None:
        if threading.get_ident() != self._thread:
            return
        name = self._module_name(module)
        if name is None or (self._depth and not self.hook_inside):
            self._module_stack.append(None)
            return
        self._depth += 1
        self._module_stack.append((name, time.perf_counter_ns()))

    def _post_hook(self, module: nn.Module, args: Any, output: Any) -> None:
        if threading.get_ident() != self._thread or not self._module_stack:
            return
        entry = self._module_stack.pop()
        if entry is None:
            return
        if self.sync:
            self._synchronize(args, output)
        elapsed = time.perf_counter_ns() - entry[1]
        self._depth -= 1
        self._record(entry[0], elapsed)

    # -- reports ----------------------------------------------------------------------------------
    def summary(self) -> list[ApiStat]:
        """Rows sorted by total time, largest first."""
        outer = self._outer_ns or 1
        rows = [ApiStat(api, calls, total / 1e9, total / calls / 1e9, lo / 1e9, hi / 1e9, total / outer)
                for api, (calls, total, lo, hi) in self._stats.items()]
        rows.sort(key=lambda r: (-r.total_s, r.api))
        return rows

    def table(self) -> str:
        return format_table(self.summary())

    def to_csv(self, path: str) -> None:
        write_csv(self.summary(), path)

    @staticmethod
    def read_csv(path: str) -> list[ApiStat]:
        return read_csv(path)

    @staticmethod
    def compare_rows(a: "Summary", b: "Summary") -> list[dict[str, Any]]:
        """Per API (union of both): calls, totals and means of a and b, and total_a / total_b."""
        ra, rb = {r.api: r for r in _rows(a)}, {r.api: r for r in _rows(b)}
        out = []
        for api in list(ra) + [api for api in rb if api not in ra]:
            x, y = ra.get(api), rb.get(api)
            out.append({
                "api": api,
                "calls_a": x.calls if x else 0, "calls_b": y.calls if y else 0,
                "total_a_s": x.total_s if x else 0.0, "total_b_s": y.total_s if y else 0.0,
                "mean_a_s": x.mean_s if x else 0.0, "mean_b_s": y.mean_s if y else 0.0,
                "ratio": (x.total_s / y.total_s) if x and y and y.total_s > 0 else None,
            })
        out.sort(key=lambda r: -max(r["total_a_s"], r["total_b_s"]))
        return out

    @staticmethod
    def compare(a: "Summary", b: "Summary", labels: Sequence[str] = ("devx", "cpu")) -> str:
        """Side-by-side table of two summaries (ApiTimer, rows, or a CSV path from to_csv)."""
        la, lb = labels
        header = ["api", f"calls {la}", f"calls {lb}", f"total {la} ms", f"total {lb} ms",
                  f"mean {la} us", f"mean {lb} us", f"{la}/{lb}"]
        body = [[r["api"], str(r["calls_a"]), str(r["calls_b"]),
                 f"{r['total_a_s'] * 1e3:.3f}", f"{r['total_b_s'] * 1e3:.3f}",
                 f"{r['mean_a_s'] * 1e6:.1f}", f"{r['mean_b_s'] * 1e6:.1f}",
                 "-" if r["ratio"] is None else f"{r['ratio']:.2f}"]
                for r in ApiTimer.compare_rows(a, b)]
        return _render(header, body)


Summary = Union[ApiTimer, Iterable[ApiStat], str]


def _rows(s: Summary) -> list[ApiStat]:
    if isinstance(s, ApiTimer):
        return s.summary()
    if isinstance(s, str):
        return read_csv(s)
    return list(s)


def _render(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header] + body) for i in range(len(header))]
    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in body])


def format_table(rows: Sequence[ApiStat]) -> str:
    header = ["api", "calls", "total ms", "mean us", "min us", "max us", "share %"]
    body = [[r.api, str(r.calls), f"{r.total_s * 1e3:.3f}", f"{r.mean_s * 1e6:.1f}", f"{r.min_s * 1e6:.1f}",
             f"{r.max_s * 1e6:.1f}", f"{r.share * 100:.1f}"] for r in rows]
    return _render(header, body)


def write_csv(rows: Sequence[ApiStat], path: str) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(ApiStat)])
        writer.writeheader()
        for r in rows:
            writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in asdict(r).items()})


def read_csv(path: str) -> list[ApiStat]:
    with open(path, newline="") as f:
        return [ApiStat(api=d["api"], calls=int(d["calls"]), total_s=float(d["total_s"]),
                        mean_s=float(d["mean_s"]), min_s=float(d["min_s"]), max_s=float(d["max_s"]),
                        share=float(d["share"])) for d in csv.DictReader(f)]
