"""Dump every API call's inputs and outputs (statistics, optionally data) for comparing two runs.

    from torch_devx.tools import Dumper, seed_all
    seed_all(1234)
    dumper = Dumper("dump_devx", mode="stats", level="mix", steps=[0, 1])
    dumper.start()
    for batch in loader:
        loss = model(batch).sum(); loss.backward(); opt.step()
        dumper.step()            # writes dump_devx/stepN/{dump.json, stack.json, data/}
    dumper.stop()

Levels: "api" records torch.*, F.* and Tensor method calls (a TorchFunctionMode, names as the API
timer's); "module" records torch.nn module forwards ("Module.fc.Linear"); "mix" both; "aten" records
every aten op (a TorchDispatchMode). With backward=True (default) the backward pass is recorded too:
the aten ops the autograd engine runs ("Aten.mm.default.0.backward", with the autograd node's name)
for the api, mix and aten levels, each with "origin": the record of the forward call it differentiates
(the API call, or at the aten level the aten op, that made its autograd node; see _origins.py), and
for the module and mix levels the gradient reaching each
module's outputs ("Module.fc.Linear.0.backward", inputs "grad_output[i]"; tensor hooks on the
outputs, which, unlike full backward hooks, tolerate in-place ops on a module's output, also when
the output is a view of a whole tensor, as a Linear's on a 3-D input).

Optimizer steps: at every level, each `optimizer.step()` is one record "Optimizer.SGD.0.step" whose
inputs are the parameters it updates and their gradients ("param_groups[0].params[3]", "....grad")
and whose outputs are the parameters after the step. Optimizers on devx use the foreach kernels by
default (torch._foreach_add_, recorded as APIs, with what they wrote as outputs) while on the CPU they
loop over the parameters (Tensor.add_ per parameter): the API records inside the two steps cannot
pair, and the step record is what compares the update between such runs. API records made inside a
step carry "optimizer": the step's record name. With optimizer_steps=True each optimizer step (the
outermost, when one calls another) also ends a dump step, for scripts that cannot call step(), as
under `python -m torch_devx dump`.

Modes: "stats" (dtype, shape, max, min, mean, norm, nan and inf counts per tensor: a few hundred
bytes per tensor), "sample" (plus the first `head`, last `tail` and every `every`-th element, saved as
.pt), "full" (plus every tensor) and "stack" (names and Python stacks only).
Scopes: `apis=[regex, ...]` keeps APIs whose name matches one; `range=(start, end)` keeps the records
from `start` to `end` inclusive (record names, "torch.tanh.0" or "torch.tanh.0.forward"), again in
each step; `steps=[...]` keeps only those steps (counted by step(); None: all).

Inputs are summarised before the call (in-place ops change them). Nothing is installed before start().
"""
from __future__ import annotations

import os
import random
import sys
import threading
from typing import Any, Callable, Iterable, Optional, Sequence

import torch
import torch.nn as nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ._common import ModeTool, api_caller, api_name, call_as_caller, user_stack
from ._dump_writer import DumpWriter, busy, quiet
from ._modules import ModuleTracker
from ._origins import ForwardOrigins
from ._summary import Sampling

__all__ = ["Dumper", "LEVELS", "seed_all", "module_api", "input_pairs", "module_input_pairs", "optimizer_param_pairs",
           "output_pairs", "record_call", "watch_gradients"]

LEVELS = ("api", "module", "mix", "aten")
_CONTAINERS: tuple[type, ...] = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def seed_all(seed: int = 1234, deterministic: bool = False) -> None:
    """Seed Python's, NumPy's (when installed) and torch's generators on every device (torch.manual_seed
    seeds devx too); deterministic=True also asks torch for deterministic algorithms."""
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)


def module_api(module: nn.Module, path: str) -> str:
    return f"Module.{path}.{type(module).__name__}" if path else f"Module.{type(module).__name__}"


def input_pairs(args: tuple, kwargs: Optional[dict]) -> list[tuple[str, Any]]:
    return [(f"args[{i}]", a) for i, a in enumerate(args)] + list((kwargs or {}).items())


def module_input_pairs(module: nn.Module, args: tuple) -> list[tuple[str, Any]]:
    """A module's positional inputs and its own parameters ("param.weight"): a layer whose inputs and
    weights agree but whose output does not is the layer at fault."""
    return input_pairs(args, None) + [(f"param.{n}", p) for n, p in module.named_parameters(recurse=False)]


def output_pairs(out: Any, label: str = "output") -> list[tuple[str, Any]]:
    return [(label, out)]


_calls = threading.local()


def open_call() -> str:
    """The name of the API record whose call is running on this thread ("" when none): the call that
    made the autograd nodes of the aten ops running now."""
    names = getattr(_calls, "names", None)
    return names[-1] if names else ""


def record_call(writer: DumpWriter, func: Any, args: tuple, kwargs: dict, module_path: str,
                patterns: Optional[Sequence[Any]] = None, optimizer: Optional[str] = None) -> Any:
    """Call an API seen by a TorchFunctionMode, recording it when the writer (and `patterns`, compiled
    regexes on the API name, when given) want it. `optimizer` names the optimizer step record the call
    is part of."""
    caller = api_caller(sys._getframe(1), func)
    api = api_name(func)
    if api is None or not writer.wants(api) or (patterns is not None and not any(p.search(api) for p in patterns)):
        return call_as_caller(caller, func, args, kwargs)
    name = writer.begin(api, "forward", "api", input_pairs(args, kwargs), user_stack(caller),
                        module=module_path, optimizer=optimizer)
    if name is None:
        return call_as_caller(caller, func, args, kwargs)
    names = getattr(_calls, "names", None)
    if names is None:
        names = _calls.names = []
    names.append(name)
    try:
        out = call_as_caller(caller, func, args, kwargs)
    except Exception as e:
        writer.fail(name, e)
        raise
    finally:
        names.pop()
    # In-place foreach ops (torch._foreach_add_) return nothing: their result is what they wrote, as an
    # in-place method's result is the tensor it returns.
    written = args[0] if out is None and api.endswith("_") and args else out
    writer.end(name, output_pairs(written))
    return out


class _AtenRecorder(TorchDispatchMode):
    """Records aten ops: those of the backward pass, and with `forward` also those of the forward.
    Every forward op of `thread` notes in `origins` the record it belongs to (`scope()`, or its own
    record), which a backward op's record names as its "origin"."""

    def __init__(self, writer: DumpWriter, forward: bool, backward: bool, origins: ForwardOrigins,
                 scope: Callable[[], str]) -> None:
        super().__init__()
        self.writer, self.forward, self.backward = writer, forward, backward
        self._origins, self._scope, self._thread = origins, scope, threading.get_ident()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        node = torch._C._current_autograd_node()
        wanted = self.backward if node is not None else self.forward
        noting = node is None and threading.get_ident() == self._thread and not busy()
        if not wanted or busy() or not self.writer.selected:
            if noting:  # every forward op, so that nodes are not given to a later op's record
                self._origins.note("", self._scope())
            return func(*args, **kwargs)
        direction = "forward" if node is None else "backward"
        node_name = node.name().rsplit("::", 1)[-1] if node is not None else None
        origin = self._origins.lookup(node)
        name = self.writer.begin(f"Aten.{func._schema.name.split('::')[-1]}.{func._overloadname}", direction,
                                 "aten", input_pairs(args, kwargs), user_stack(sys._getframe(1)), node=node_name,
                                 origin=origin.record if origin is not None else None)
        if noting:
            self._origins.note("", name or self._scope())
        if name is None:
            return func(*args, **kwargs)
        try:
            out = func(*args, **kwargs)
        except Exception as e:
            self.writer.fail(name, e)
            raise
        self.writer.end(name, output_pairs(out))
        return out


def optimizer_param_pairs(optimizer: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
    """The parameters an optimizer step updates (those with a gradient), labelled "param_groups[0].params[3]"."""
    return [(f"param_groups[{g}].params[{i}]", p) for g, group in enumerate(optimizer.param_groups)
            for i, p in enumerate(group["params"]) if p.grad is not None]


class Dumper(ModeTool):
    def __init__(self, out_dir: str, mode: str = "stats", level: str = "api", backward: bool = True,
                 apis: Optional[Sequence[str]] = None, range: Optional[tuple[str, str]] = None,
                 steps: Optional[Iterable[int]] = None, sampling: Sampling = Sampling(),
                 optimizer_steps: bool = False) -> None:
        super().__init__()
        if level not in LEVELS:
            raise ValueError(f"dump level {level!r} is not one of {', '.join(LEVELS)}")
        self.level = level
        self.backward = backward
        self.optimizer_steps = optimizer_steps
        self.writer = DumpWriter(out_dir, mode, apis, range, steps, sampling,
                                 meta={"level": level, "backward": backward})
        self._record_apis = level in ("api", "mix")
        self._record_modules = level in ("module", "mix")
        self._tracker = ModuleTracker(self._enter_module, self._exit_module)
        self._module_records: list[Optional[str]] = []
        self._aten: Optional[_AtenRecorder] = None
        self._origins = ForwardOrigins()
        # Open optimizer step records (name, the parameters recorded as its inputs), innermost last.
        self._optimizer_records: list[tuple[Optional[str], list[tuple[str, torch.Tensor]]]] = []
        self._optimizer_hooks: list[Any] = []
        self._thread: Optional[int] = None

    @property
    def out_dir(self) -> str:
        return self.writer.out_dir

    def _on_start(self) -> None:
        self._thread = threading.get_ident()
        self._tracker.start()
        self._module_records.clear()
        self._optimizer_records.clear()
        self._optimizer_hooks = [register_optimizer_step_pre_hook(self._optimizer_pre),
                                 register_optimizer_step_post_hook(self._optimizer_post)]
        if self.level == "aten" or (self.backward and self._record_apis):
            self._origins.start()
            self._aten = _AtenRecorder(self.writer, forward=self.level == "aten", backward=self.backward,
                                       origins=self._origins, scope=self._scope)
            self._aten.__enter__()

    def _on_stop(self) -> None:
        if self._aten is not None:
            self._aten.__exit__(None, None, None)
            self._aten = None
            self._origins.clear()
        for handle in self._optimizer_hooks:
            handle.remove()
        self._optimizer_hooks = []
        self._tracker.stop()
        self.writer.flush()

    def step(self) -> None:
        """End the current step: write its folder, count the next one."""
        self.writer.next_step()

    def _scope(self) -> str:
        """The record a forward aten op belongs to: the API call running, else the innermost module."""
        return open_call() or next((name for name in reversed(self._module_records) if name), "")

    # -- API calls --------------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if busy():
            return func(*args, **kwargs)
        if not self._record_apis:
            return call_as_caller(api_caller(sys._getframe(0), func), func, args, kwargs)
        optimizer = self._optimizer_records[-1][0] if self._optimizer_records else None
        return record_call(self.writer, func, args, kwargs, self._tracker.path, optimizer=optimizer)

    # -- optimizer steps --------------------------------------------------------------------------
    def _optimizer_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != self._thread or busy():
            return
        params = optimizer_param_pairs(optimizer)
        inputs = [pair for label, p in params for pair in ((label, p), (f"{label}.grad", p.grad))]
        name = self.writer.begin(f"Optimizer.{type(optimizer).__name__}", "step", "optimizer", inputs,
                                 user_stack(sys._getframe(1)))
        self._optimizer_records.append((name, params))

    def _optimizer_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != self._thread or not self._optimizer_records:
            return
        name, params = self._optimizer_records.pop()
        if name is not None:
            self.writer.end(name, params)
        if self.optimizer_steps and not self._optimizer_records:
            self.step()

    # -- modules ----------------------------------------------------------------------------------
    def _enter_module(self, module: nn.Module, path: str, args: Any, _: Any) -> None:
        name = None
        if self._record_modules and not isinstance(module, _CONTAINERS) and not busy():
            name = self.writer.begin(module_api(module, path), "forward", "module", module_input_pairs(module, args),
                                     user_stack(sys._getframe(2)))
        self._module_records.append(name)

    def _exit_module(self, module: nn.Module, path: str, args: Any, output: Any) -> None:
        if not self._module_records:
            return
        name = self._module_records.pop()
        if name is None:
            return
        self.writer.end(name, output_pairs(output))
        if self.backward and torch.is_grad_enabled():
            record = name.rsplit(".", 2)
            watch_gradients(self.writer, record[0], int(record[1]), output, self.writer.step)


def watch_gradients(writer: DumpWriter, api: str, index: int, output: Any, step: int) -> None:
    """Record the gradients reaching `output`'s tensors as "API.INDEX.backward" inputs "grad_output[i]"."""
    tensors = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not tensors:
        return
    name = f"{api}.{index}.backward"
    stack = [f"(backward of {api}.{index}.forward)"]

    def make_hook(i: int):
        def hook(grad: torch.Tensor) -> None:
            if writer.step != step or not writer.wants(api):
                return
            if not writer.has(name):
                writer.begin(api, "backward", "module", [], stack, index=index)
            writer.add(name, "input", [(f"grad_output[{i}]", grad)])
        return hook

    with quiet():
        for i, t in enumerate(tensors):
            hook, base = make_hook(i), _whole_base(t)
            t.register_hook(hook if base is None else _first_of_two(hook, base, t.shape))


def _whole_base(t: torch.Tensor) -> Optional[torch.Tensor]:
    """The base of `t` when `t` is a view of all of it, laid out the same way (a Linear on a 3-D input
    returns such a view of a 2-D matmul), else None."""
    base = t._base if t._is_view() else None
    if base is not None and base.requires_grad and base.numel() == t.numel() and t.is_contiguous() \
            and base.is_contiguous() and t.storage_offset() == base.storage_offset():
        return base
    return None


def _first_of_two(hook: Callable[[torch.Tensor], None], base: torch.Tensor, shape: torch.Size) -> Callable:
    """A hook for a view of all of `base` that gets the view's gradient even after an in-place op on
    the view. A tensor hook stays with the autograd node the tensor had when it was registered, and an
    in-place op on a view (ReLU(inplace=True) after that Linear) takes the view's old node out of the
    graph: its hook would never run. The base's node stays, and runs after the view's, with the
    base's gradient, which is the view's reshaped. So `hook` is called from the view's hook and,
    when that did not run, from one on the base."""
    seen = [False]

    def on_base(grad: torch.Tensor) -> None:
        if not seen[0]:
            hook(grad.reshape(shape))

    def on_view(grad: torch.Tensor) -> None:
        seen[0] = True
        hook(grad)

    base.register_hook(on_base)
    return on_view
