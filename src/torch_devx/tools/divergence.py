"""First-divergence finder: run on devx with every op also run on the CPU from the same inputs.

    python -m torch_devx divergence train.py --epochs 1        # or, in Python:
    from torch_devx.tools import DivergenceFinder
    with DivergenceFinder(out_dir="divergence") as finder:
        train_step()                                            # raises DivergenceError at the first bad op
    print(finder.first.describe())

A TorchDispatchMode sees every aten op, forward and backward (the autograd engine's threads inherit
the mode). For each op that has a devx tensor (or a devx device) among its arguments it copies the
arguments to the CPU, runs the op on devx, runs it again on the CPU copies, and compares the results
and the arguments the op writes (schema `(a!)`) with per-dtype tolerances (those of the backend's
DIPU_AUTOCOMPARE: float32 rtol 1.3e-6 atol 1e-5, float16 1e-3/1e-5, bfloat16 1.6e-2/1e-5, others
1e-7/1e-7; integers and bools exactly; nan equals nan). Since every op starts from the devx run's own
inputs, an op is reported only when it is itself wrong: errors that flow in from earlier ops do not
count. Random and uninitialised-output ops (tag nondeterministic_seeded, empty*, resize_, set_) are
not compared; ops the CPU cannot run are counted in `unchecked`.

A divergence names the op, forward or backward (with the autograd node), the module running it
(forward pre/post hooks: "blocks.0.attn (Attention)"; for a backward op, the module and the Python
line of the forward call it differentiates, found from the autograd node, see _origins.py), the
Python line outside torch that led to it (for a backward op: where the script waits in backward()),
the largest difference, and a repro folder: inputs.pt (the op's arguments, as they were before the
op ran) and test_repro_NN_OP.py, a pytest file that replays the op on devx and on the CPU and asserts
they agree (`python -m pytest OUT` runs every repro of a run). stop=True (default) raises
DivergenceError at the first; stop=False keeps going and collects
each op's first divergence (`divergences`, a repro for each up to max_repros).

When no single op diverges the run still may: ops each within their tolerance (or a devx kernel
that takes another algorithm than the CPU's, rounding differently) add up along the model. So the
finder also keeps a shadow run on the CPU: each devx tensor an op makes has a CPU shadow, made by
running the op on the shadows of its arguments (a devx tensor that has none gets a copy: parameters,
inputs, random and uninitialised results), and at the end of each module's forward its outputs are
compared with their shadows by compare's rules (_metrics: cosine, shares within 0.1%/1% with an
absolute floor). The first module whose output is an error there is `module_divergence`: reported
("no single op diverged, but the run did: module ...") when no op diverged.

Cost while active: every devx op runs three times (devx, the CPU from its inputs, the CPU shadow
run) plus copies to the CPU, and the shadows take as much host memory as the run's devx tensors;
nothing is installed before start().
"""
from __future__ import annotations

import linecache
import logging
import os
import re
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map
from torch.utils.weak import WeakTensorKeyDictionary

from .._real_device import is_devx
from ._common import op_name, run_as_main, user_frame
from ._metrics import compare_tensors
from ._modules import ModuleTracker
from ._origins import ForwardOrigins
from ._repro import save_repro

__all__ = ["DEFAULT_TOLERANCES", "OTHER_TOLERANCE", "Divergence", "DivergenceError", "DivergenceFinder",
           "ModuleDivergence", "op_name", "run_script"]

logger = logging.getLogger("torch_devx.tools.divergence")

# The same table as csrc/aten/autocompare.cpp, so the two agree on what "diverges" means.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5), torch.complex64: (1.3e-6, 1e-5),
}
OTHER_TOLERANCE = (1e-7, 1e-7)  # the dtypes not in the table: float64, complex128
_UNCOMPARABLE = re.compile(r"^(empty|new_empty|resize_|set_|_resize_output_|record_stream)")


@dataclass
class Divergence:
    op: str                        # "mul.Tensor"
    direction: str                 # "forward" or "backward"
    node: str                      # the autograd node running a backward op, else ""
    module: str                    # "fc1 (Linear)"; for a backward op the module of its forward call
    location: str                  # "file:line" of the Python line outside torch
    source: str
    detail: str                    # how the results differ
    index: int                     # how many devx ops were compared before this one
    repro_dir: str = ""
    repro_test: str = ""           # the repro's pytest file, in repro_dir
    occurrences: int = 1
    forward_location: str = ""     # a backward op: "file:line" of the forward call it differentiates
    forward_source: str = ""

    def describe(self) -> str:
        where = f"in module {self.module}" if self.module else \
            ("in the backward pass" if self.direction == "backward" else "outside any module")
        if self.forward_location:
            where += f", backward of the call at {self.forward_location}" + \
                (f": {self.forward_source}" if self.forward_source else "")
        lines = [f"first divergence: aten::{self.op} ({self.direction}"
                 + (f", autograd node {self.node}" if self.node else "") + f"), {where}",
                 ("  in the backward pass started at " if self.direction == "backward" else "  at ")
                 + (self.location or "<unknown line>") + (f": {self.source}" if self.source else ""),
                 f"  {self.detail}", f"  after {self.index} ops that matched the CPU"]
        if self.repro_test:
            lines.append(f"  repro: {self.repro_test} (python -m pytest {self.repro_test})")
        return "\n".join(lines)


@dataclass
class ModuleDivergence:
    module: str                    # "blocks.0.attn (Attention)"
    output: str                    # which output: "output", "output[1]"
    detail: str                    # compare's rule that found the difference
    max_abs: float
    index: int                     # how many devx ops were compared before the module returned

    def describe(self) -> str:
        return (f"no single op diverged from the CPU, but the run did: the output of module {self.module} is the "
                f"first to differ from the CPU's shadow run of the same ops ({self.output}: {self.detail}; max abs "
                f"diff {self.max_abs:.6g}), after {self.index} ops that matched the CPU one by one. Small differences "
                "of its ops (another algorithm, another rounding) add up there; a looser --rtol/--atol shows which "
                "ops are close to their tolerance")


class DivergenceError(RuntimeError):
    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.describe())
        self.divergence = divergence


def _is_devx(x: Any) -> bool:
    return (isinstance(x, torch.Tensor) and is_devx(x)) or \
        (isinstance(x, torch.device) and x.type == "devx")


def _to_cpu(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", copy=True)
    if isinstance(x, torch.device) and x.type == "devx":
        return torch.device("cpu")
    return x


def _written(func: Any, args: tuple, kwargs: dict) -> list[Any]:
    out = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            out.append(args[i] if i < len(args) else kwargs.get(arg.name))
    return out


class DivergenceFinder(TorchDispatchMode):
    def __init__(self, out_dir: str = "divergence", stop: bool = True, ops: Optional[Sequence[str]] = None,
                 tolerances: Optional[dict[torch.dtype, tuple[float, float]]] = None, max_repros: int = 10,
                 log: bool = True) -> None:
        super().__init__()
        self._log = log
        self.out_dir = os.path.abspath(out_dir)
        self.stop_at_first = stop
        self._ops = [re.compile(p) for p in ops] if ops else None
        self.tolerances = {**DEFAULT_TOLERANCES, **(tolerances or {})}
        self.max_repros = max_repros
        self.divergences: dict[str, Divergence] = {}
        self.script_error: Optional[BaseException] = None
        self.script_traceback = ""
        self.checked = 0
        self.unchecked: dict[str, int] = {}
        self._tracker = ModuleTracker(on_exit=self._module_exit)
        self._origins = ForwardOrigins()
        self._active = False
        self._thread: Optional[int] = None
        self.module_divergence: Optional[ModuleDivergence] = None
        self._shadows = WeakTensorKeyDictionary()   # devx tensor -> its CPU shadow
        self._own = threading.local()               # .busy: the finder's own ops (module checks)

    @property
    def first(self) -> Optional[Divergence]:
        return next(iter(self.divergences.values()), None)

    def start(self) -> "DivergenceFinder":
        if self._active:
            raise RuntimeError("DivergenceFinder is already started")
        self._thread = threading.get_ident()
        self._tracker.start()
        self._origins.start()
        super().__enter__()
        self._active = True
        return self

    def stop(self) -> "DivergenceFinder":
        if self._active:
            super().__exit__(None, None, None)
            self._tracker.stop()
            self._origins.clear()
            self._shadows = WeakTensorKeyDictionary()
            self._active = False
        return self

    def __enter__(self) -> "DivergenceFinder":
        return self.start()

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        self.stop()

    # -- per op -----------------------------------------------------------------------------------
    def _wanted(self, func: Any, name: str, leaves: list[Any]) -> bool:
        if torch.Tag.nondeterministic_seeded in func.tags or _UNCOMPARABLE.match(name):
            return False
        if self._ops is not None and not any(p.search(name) for p in self._ops):
            return False
        if self.stop_at_first and self.divergences:
            return False
        return any(_is_devx(x) for x in leaves)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(self._own, "busy", False):
            return func(*args, **kwargs)
        if threading.get_ident() == self._thread and torch._C._current_autograd_node() is None:
            self._origins.note(self._tracker.path)
        name = op_name(func)
        leaves, _ = tree_flatten((args, kwargs))
        if not self._wanted(func, name, leaves):
            out = func(*args, **kwargs)
            self._forget((out, _written(func, args, kwargs)))
            return out
        with torch.no_grad():
            cpu_args, cpu_kwargs = tree_map(_to_cpu, (args, kwargs))
            pristine = tree_map(_to_cpu, (cpu_args, cpu_kwargs)) if _written(func, args, kwargs) else None
            shadow_args, shadow_kwargs = tree_map(self._shadow, (args, kwargs))
        out = func(*args, **kwargs)
        try:
            with torch.no_grad():
                cpu_out = func(*cpu_args, **cpu_kwargs)
                shadow_out = func(*shadow_args, **shadow_kwargs)
        except Exception as e:  # noqa: BLE001 - an op the CPU cannot run is not a divergence
            self.unchecked[name] = self.unchecked.get(name, 0) + 1
            logger.debug("%s could not be replayed on the CPU: %s", name, e)
            self._forget((out, _written(func, args, kwargs)))
            return out
        for got, shadow in zip(tree_leaves(out), tree_leaves(shadow_out)):
            if _is_devx(got) and isinstance(shadow, torch.Tensor) and shadow.shape == got.shape:
                self._shadows[got] = shadow
        with torch.no_grad():
            detail = self._difference((out, _written(func, args, kwargs)),
                                      (cpu_out, _written(func, cpu_args, cpu_kwargs)))
        if detail is None:
            self.checked += 1
            return out
        self._report(func, name, detail, pristine or (cpu_args, cpu_kwargs), leaves)
        return out

    # -- the shadow run ---------------------------------------------------------------------------
    def _shadow(self, x: Any) -> Any:
        """x's CPU shadow (a devx tensor's, made from its value when it has none), else _to_cpu(x)."""
        if not (isinstance(x, torch.Tensor) and is_devx(x)):
            return _to_cpu(x)
        shadow = self._shadows.get(x)
        if shadow is None:
            shadow = self._shadows[x] = x.detach().to("cpu", copy=True)
        return shadow

    def _forget(self, tree: Any) -> None:
        """Drop the shadows of devx tensors made or written by an op the shadow run did not run."""
        for x in tree_leaves(tree):
            if _is_devx(x):
                self._shadows.pop(x, None)

    def _module_exit(self, module: Any, path: str, args: Any, output: Any) -> None:
        if self.module_divergence is not None or threading.get_ident() != self._thread:
            return
        self._own.busy = True
        try:
            outputs = [x for x in tree_leaves(output) if _is_devx(x)]
            for i, got in enumerate(outputs):
                shadow = self._shadows.get(got)
                if shadow is None or shadow.shape != got.shape or shadow.dtype != got.dtype:
                    continue
                with torch.no_grad():
                    m = compare_tensors(got.detach().cpu(), shadow)
                if m.verdict == "error":
                    label = f"{path} ({type(module).__name__})" if path else type(module).__name__
                    self.module_divergence = ModuleDivergence(
                        label, "output" if len(outputs) == 1 else f"output[{i}]", m.rule, m.max_abs or 0.0,
                        self.checked)
                    if self._log and not self.divergences:
                        logger.warning("%s", self.module_divergence.describe())
                    return
        finally:
            self._own.busy = False

    def _difference(self, devx_side: Any, cpu_side: Any) -> Optional[str]:
        got, _ = tree_flatten(devx_side)
        want, _ = tree_flatten(cpu_side)
        if len(got) != len(want):
            return f"{len(got)} results on devx, {len(want)} on the CPU"
        for i, (g, w) in enumerate(zip(got, want)):
            if not isinstance(w, torch.Tensor):
                continue
            if not isinstance(g, torch.Tensor):
                return f"result {i}: {type(g).__name__} on devx, a tensor on the CPU"
            g = g.detach().cpu()
            if g.shape != w.shape or g.dtype != w.dtype:
                return f"result {i}: {g.dtype} {tuple(g.shape)} on devx, {w.dtype} {tuple(w.shape)} on the CPU"
            if w.is_floating_point() or w.is_complex():
                rtol, atol = self.tolerances.get(w.dtype, OTHER_TOLERANCE)
                close = torch.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
                if not bool(close.all()):
                    diff = (g - w).abs().nan_to_num(nan=float("inf")).max().item()
                    bad = int((~close).sum())
                    return (f"result {i} ({w.dtype}, {tuple(w.shape)}): {bad} of {w.numel()} elements differ, "
                            f"max abs diff {diff:.6g} (rtol {rtol:g}, atol {atol:g})")
            elif not torch.equal(g, w):
                return f"result {i} ({w.dtype}, {tuple(w.shape)}): {int((g != w).sum())} of {w.numel()} values differ"
        return None

    def _report(self, func: Any, name: str, detail: str, inputs: tuple, leaves: list[Any]) -> None:
        if name in self.divergences:
            self.divergences[name].occurrences += 1
            return
        node = torch._C._current_autograd_node()
        frame = user_frame(sys._getframe(2))
        if frame is None and self._thread is not None:
            # Backward ops run on autograd engine threads: the line is where the starting thread waits.
            frame = user_frame(sys._current_frames().get(self._thread))
        location = source = ""
        if frame is not None:
            location = f"{frame.f_code.co_filename}:{frame.f_lineno}"
            source = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        origin = self._origins.lookup(node)
        d = Divergence(name, "backward" if node is not None else "forward",
                       node.name().rsplit("::", 1)[-1] if node is not None else "",
                       self._tracker.path if node is None else (origin.module if origin else ""),
                       location, source, detail, self.checked)
        if origin is not None:
            d.forward_location, d.forward_source = origin.location, origin.source
        if len(self.divergences) < self.max_repros:
            folder = os.path.join(self.out_dir, f"{len(self.divergences):02d}_{re.sub(r'[^A-Za-z0-9_.]', '_', name)}")
            devices = {i: str(x.device if isinstance(x, torch.Tensor) else x) for i, x in enumerate(leaves) if _is_devx(x)}
            d.repro_dir = folder
            from .. import diagnostics

            d.repro_test = save_repro(folder, func, inputs, devices, self.tolerances, d,
                                      override=diagnostics.kernel_override(name))
        self.divergences[name] = d
        if self._log:
            logger.warning("%s", d.describe())
        if self.stop_at_first:
            raise DivergenceError(d)


def run_script(path: str, argv: Sequence[str] = (), raise_script_errors: bool = True,
               **options: Any) -> DivergenceFinder:
    """Run a Python script as __main__ (with sys.argv = [path, *argv]) under a DivergenceFinder;
    returns the finder (its `first`, `divergences`, `checked`). A DivergenceError the script raises
    through is caught here. Any other exception of the script (and a nonzero sys.exit) is raised,
    or, with raise_script_errors=False, kept in the finder's `script_error` with its traceback in
    `script_traceback`."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"script {path!r} does not exist")
    finder = DivergenceFinder(**options)
    try:
        with finder:
            run_as_main(path, argv)
    except DivergenceError:
        pass
    except (Exception, SystemExit) as e:
        # A divergence raised on an autograd engine thread may come back wrapped by the engine.
        if isinstance(e, RuntimeError) and finder.first is not None and finder.stop_at_first:
            logger.debug("script stopped by the divergence: %s", e)
        elif raise_script_errors:
            raise
        else:
            finder.script_error = e
            finder.script_traceback = traceback.format_exc()
    return finder
