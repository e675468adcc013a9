"""Overflow/NaN check: stop at the N-th torch API call whose floating outputs hold inf or nan.

    from torch_devx.tools import OverflowCheck, NonFiniteError
    with OverflowCheck(max_hits=1):        # or c = OverflowCheck(); c.start(); ...; c.stop()
        train_step()                       # raises NonFiniteError at the first API that makes inf/nan

A TorchFunctionMode sees every call of torch.*, F.* and Tensor methods (operators included) made by
the user's code and by module forwards; after each, every floating (or complex) tensor among its
outputs is tested with `torch.isfinite(t).all()`. Cost while started: one isfinite + all kernel pair
and one host synchronisation (the bool) per floating output, on whatever device the output lives
(on devx that sync waits for the device). Nothing is pushed before start(): no cost when not in use.

A call whose outputs are not all finite is a hit, kept in `hits`; hits before the max_hits-th are
logged as warnings and tolerated; the max_hits-th raises NonFiniteError naming the API, the statistics
(dtype, shape, min, max, mean, nan and inf counts) of its tensor inputs and non-finite outputs, and
the Python line that called it: the innermost frame outside torch and torch_devx.

The backward pass runs outside Python, so it is checked one level down: a TorchDispatchMode sees the
aten ops the autograd engine runs (on its own threads too) and tests their outputs the same way; a
hit names the op and its autograd node, and, as its line, the forward call whose gradient it computes
with the module that made it (see _origins.py: the mode notes each forward op's module and line, so
while started every aten op also passes through one Python call).

Limits: input statistics are taken after the call, so for in-place ops (`x.div_(0)`, `out=`) they show
the written values; inputs that already hold inf/nan are reported but are a hit again only when an
API outputs them (`x + 0`). Property results (`t.grad`) are not checked; calls inside
Python-implemented torch functions (F.layer_norm's inner torch.layer_norm) are checked as the
enclosing call.
"""
from __future__ import annotations

import linecache
import logging
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ._common import ModeTool, api_caller, api_name, call_as_caller, op_name, returns_uninitialised, user_frame
from ._modules import ModuleTracker
from ._origins import ForwardOrigins

__all__ = ["Hit", "NonFiniteError", "OverflowCheck", "tensor_stats"]

logger = logging.getLogger("torch_devx.tools.overflow")

_MAX_LISTED_INPUTS = 8


class NonFiniteError(RuntimeError):
    """An API produced inf/nan for the max_hits-th time. `.hit` holds the details."""

    def __init__(self, message: str, hit: "Hit") -> None:
        super().__init__(message)
        self.hit = hit


@dataclass
class Hit:
    api: str                   # "torch.log"; a backward op: "aten::div.Tensor"
    location: str              # "file:line" of the call (a backward op: of the forward call it differentiates)
    source: str                # that line's text; both "" when no frame outside torch was found
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    node: str = ""             # a backward op: the autograd node running it ("SqrtBackward0")
    module: str = ""           # the module running the call (a backward op: its forward call's), "" outside modules

    def describe(self) -> str:
        if self.node:
            head = (f"{self.api} (backward, autograd node {self.node}) produced inf/nan"
                    + (f", in module {self.module}" if self.module else "")
                    + f", backward of the call at {self.location or '<unknown>'}")
        else:
            head = (f"{self.api} produced inf/nan"
                    + (f" in module {self.module}" if self.module else "")
                    + f", called at {self.location or '<unknown>'}")
        lines = [head + (f": {self.source}" if self.source else "")]
        lines += [f"  input  {s}" for s in self.inputs] or ["  (no tensor inputs)"]
        lines += [f"  output {s}" for s in self.outputs]
        return "\n".join(lines)


def tensor_stats(t: torch.Tensor) -> str:
    """dtype, shape, device, min, max, mean, nan and inf counts (one line; with inf/nan present also the
    range of the finite values). Each .item() is a host sync."""
    head = f"{str(t.dtype).replace('torch.', '')} {tuple(t.shape)} {t.device}"
    if t.numel() == 0:
        return head + " empty"
    with torch.no_grad():
        if t.dtype == torch.bool:
            return head + f" true={int(t.sum().item())}"
        if t.is_complex():
            return head + f" nan={int(torch.isnan(t).sum().item())} inf={int(torch.isinf(t).sum().item())}"
        v = t.detach()
        if v.is_floating_point():
            nan, inf = int(torch.isnan(v).sum().item()), int(torch.isinf(v).sum().item())
            vf = v.float()
            line = head + (f" min={vf.min().item():.6g} max={vf.max().item():.6g} mean={vf.mean().item():.6g}"
                           f" nan={nan} inf={inf}")
            if nan or inf:
                finite = vf[torch.isfinite(vf)]
                if finite.numel():
                    line += f" finite_min={finite.min().item():.6g} finite_max={finite.max().item():.6g}"
            return line
        vd = v.double()
        return head + f" min={v.min().item()} max={v.max().item()} mean={vd.mean().item():.6g}"


def _is_checked(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and t.numel() > 0


def _non_finite(out: Any) -> tuple[list[tuple[int, torch.Tensor]], bool]:
    """The (index, tensor) of the floating outputs holding inf/nan, and whether there are several outputs."""
    leaves, _ = tree_flatten(out)
    with torch.no_grad():
        bad = [(i, t) for i, t in enumerate(leaves) if _is_checked(t) and not bool(torch.isfinite(t).all())]
    return bad, len(leaves) > 1


class _BackwardCheck(TorchDispatchMode):
    """Checks the aten ops of the backward pass; notes where each forward op's autograd node came from."""

    def __init__(self, check: "OverflowCheck") -> None:
        super().__init__()
        self.check = check

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        node = torch._C._current_autograd_node()
        if node is None:
            if threading.get_ident() == self.check._thread:
                self.check._origins.note(self.check._tracker.path)
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        bad, multiple = _non_finite(out)
        if bad:
            origin = self.check._origins.lookup(node)
            location, source = (origin.location, origin.source) if origin is not None else ("", "")
            self.check._hit(f"aten::{op_name(func)}", location, source, args, kwargs, bad, multiple,
                            node=node.name().rsplit("::", 1)[-1], module=origin.module if origin is not None else "")
        return out


class OverflowCheck(ModeTool):
    def __init__(self, max_hits: int = 1) -> None:
        super().__init__()
        if max_hits < 1:
            raise ValueError("max_hits must be at least 1")
        self.max_hits = max_hits
        self.hits: list[Hit] = []
        self._tracker = ModuleTracker()
        self._origins = ForwardOrigins()
        self._backward: Optional[_BackwardCheck] = None
        self._thread: Optional[int] = None

    def _on_start(self) -> None:
        self._thread = threading.get_ident()
        self._tracker.start()
        self._origins.start()
        self._backward = _BackwardCheck(self)
        self._backward.__enter__()

    def _on_stop(self) -> None:
        if self._backward is not None:
            self._backward.__exit__(None, None, None)
            self._backward = None
        self._tracker.stop()
        self._origins.clear()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        caller = api_caller(sys._getframe(0), func)
        out = call_as_caller(caller, func, args, kwargs)
        if not self._active:
            return out
        name = api_name(func)
        # Module constructors call torch.empty before initialising the weights.
        if name is None or returns_uninitialised(name):
            return out
        bad, multiple = _non_finite(out)
        if bad:
            frame = user_frame(caller)
            location = source = ""
            if frame is not None:
                filename, lineno = frame.f_code.co_filename, frame.f_lineno
                location = f"{filename}:{lineno}"
                source = linecache.getline(filename, lineno).strip()
            self._hit(name, location, source, args, kwargs, bad, multiple, module=self._tracker.path)
        return out

    def _hit(self, name: str, location: str, source: str, args: tuple, kwargs: dict, bad: list, multiple: bool,
             node: str = "", module: str = "") -> None:
        inputs = []
        flat_inputs = [(f"args[{i}]", a) for i, a in enumerate(args)] + [(k, v) for k, v in kwargs.items()]
        for label, value in flat_inputs:
            tensors, _ = tree_flatten(value)
            tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
            if not tensors and not isinstance(value, (int, float, bool, complex)):
                continue
            if not tensors:
                inputs.append(f"{label}: {value!r}")
            for j, t in enumerate(tensors[:_MAX_LISTED_INPUTS]):
                suffix = f"[{j}]" if len(tensors) > 1 else ""
                inputs.append(f"{label}{suffix}: {tensor_stats(t)}")
        outputs = [f"{f'[{i}]: ' if multiple else ''}{tensor_stats(t)}" for i, t in bad]
        hit = Hit(name, location, source, inputs, outputs, node, module)
        self.hits.append(hit)
        n = len(self.hits)
        if n >= self.max_hits:
            raise NonFiniteError(f"hit {n} of max_hits={self.max_hits}: " + hit.describe(), hit)
        logger.warning("inf/nan hit %d of max_hits=%d (tolerated): %s", n, self.max_hits, hit.describe())
