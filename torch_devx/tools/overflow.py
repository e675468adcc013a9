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

Limits: input statistics are taken after the call, so for in-place ops (`x.div_(0)`, `out=`) they show
the written values; inputs that already hold inf/nan are reported but are a hit again only when an
API outputs them (`x + 0`). The backward pass is not checked (autograd runs outside Python), nor are
property results (`t.grad`); calls inside Python-implemented torch functions (F.layer_norm's inner
torch.layer_norm) are checked as the enclosing call.
"""
from __future__ import annotations

import linecache
import logging
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from ._common import ModeTool, api_name, user_frame

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
    api: str
    location: str              # "file:line", or "" when no frame outside torch was found
    source: str                # that line's text
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"{self.api} produced inf/nan, called at {self.location or '<unknown>'}"
                 + (f": {self.source}" if self.source else "")]
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


class OverflowCheck(ModeTool):
    def __init__(self, max_hits: int = 1) -> None:
        super().__init__()
        if max_hits < 1:
            raise ValueError("max_hits must be at least 1")
        self.max_hits = max_hits
        self.hits: list[Hit] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        out = func(*args, **kwargs)
        if not self._active:
            return out
        name = api_name(func)
        if name is None:
            return out
        leaves, _ = tree_flatten(out)
        bad = []
        with torch.no_grad():
            for i, t in enumerate(leaves):
                if _is_checked(t) and not bool(torch.isfinite(t).all()):
                    bad.append((i, t))
        if bad:
            self._hit(name, args, kwargs, bad, multiple=len(leaves) > 1)
        return out

    def _hit(self, name: str, args: tuple, kwargs: dict, bad: list, multiple: bool) -> None:
        frame = user_frame(sys._getframe(2))
        location = source = ""
        if frame is not None:
            filename, lineno = frame.f_code.co_filename, frame.f_lineno
            location = f"{filename}:{lineno}"
            source = linecache.getline(filename, lineno).strip()
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
        hit = Hit(name, location, source, inputs, outputs)
        self.hits.append(hit)
        n = len(self.hits)
        if n >= self.max_hits:
            raise NonFiniteError(f"hit {n} of max_hits={self.max_hits}: " + hit.describe(), hit)
        logger.warning("inf/nan hit %d of max_hits=%d (tolerated): %s", n, self.max_hits, hit.describe())
