"""Trace chosen modules and functions, chosen by a YAML file, in the dump format (so `compare` works on it).

    # trace.yaml
    output: trace_devx           # dump folder (or Tracer(..., out_dir=...))
    mode: stats                  # stats | sample | full   (see Dumper)
    steps: [0, 1]                # steps to trace, counted by update_step(); omitted: all
    backward: true               # also the gradients reaching the traced modules' outputs
    modules:                     # each item one of:
      - name: fc1                #   a qualified name from model.named_modules()
      - regex: 'blocks\\.\\d+\\.attn$'   #   a regex searched in the qualified names
      - type: Linear             #   a class name, or a dotted path (torch.nn.Linear)
    functions:                   # regexes searched in API names (torch.tanh, Tensor.add, torch.nn.functional.gelu)
      - '^torch\\.tanh$'
    sampling: {head: 8, tail: 8, every: 64}   # for mode sample

    tracer = Tracer("trace.yaml", model)
    tracer.trace()
    for batch in loader:
        train_step(batch)
        tracer.update_step()
    tracer.untrace()

Modules are hooked one by one (forward pre/post hooks on the chosen modules only); functions through
a TorchFunctionMode that exists only while tracing and when `functions` is not empty. Records are
named as Dumper's ("Module.fc1.Linear.0.forward", "torch.tanh.0.forward"); comparing two traces ranks
the traced layers by error (compare.csv / ranking.csv).
"""
from __future__ import annotations

import os
import re
import sys
from typing import Any, Optional, Union

import torch.nn as nn

from ._common import ModeTool, user_stack
from ._dump_writer import DumpWriter
from ._modules import ModuleTracker
from ._summary import Sampling
from .dump import module_api, module_input_pairs, output_pairs, record_call, watch_gradients

__all__ = ["Tracer", "load_config"]

_KEYS = {"output", "mode", "steps", "backward", "modules", "functions", "sampling"}
_SELECTORS = ("name", "regex", "type")


def load_config(config: Union[str, dict[str, Any]]) -> dict[str, Any]:
    """The checked configuration from a YAML file path, YAML text or a dict."""
    if isinstance(config, dict):
        data: Any = dict(config)
    elif isinstance(config, str) and (os.path.isfile(config) or "\n" in config or ":" in config):
        import yaml  # only YAML configs need PyYAML

        if os.path.isfile(config):
            with open(config) as f:
                data = yaml.safe_load(f) or {}
        else:
            data = yaml.safe_load(config) or {}
    else:
        raise FileNotFoundError(f"tracer config {config!r} is neither a YAML file nor YAML text")
    if not isinstance(data, dict):
        raise ValueError(f"tracer config must be a mapping, got {type(data).__name__}")
    unknown = set(data) - _KEYS
    if unknown:
        raise ValueError(f"tracer config: unknown key(s) {sorted(unknown)}; known: {sorted(_KEYS)}")
    for i, item in enumerate(data.get("modules") or []):
        keys = set(item) if isinstance(item, dict) else set()
        if len(keys) != 1 or not keys <= set(_SELECTORS):
            raise ValueError(f"tracer config: modules[{i}] = {item!r} must have exactly one of {_SELECTORS}")
    functions = data.get("functions") or []
    if not isinstance(functions, list) or not all(isinstance(f, str) for f in functions):
        raise ValueError(f"tracer config: functions must be a list of regexes, got {functions!r}")
    for pattern in functions:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"tracer config: function pattern {pattern!r} is not a regex: {e}") from None
    steps = data.get("steps")
    if steps is not None and (not isinstance(steps, list) or not all(isinstance(s, int) for s in steps)):
        raise ValueError(f"tracer config: steps must be a list of integers, got {steps!r}")
    return data


def _type_matches(module: nn.Module, wanted: str) -> bool:
    cls = type(module)
    return wanted in (cls.__name__, f"{cls.__module__}.{cls.__qualname__}") or \
        (cls.__module__.startswith("torch.nn.") and wanted == f"torch.nn.{cls.__name__}")


def select_modules(model: nn.Module, selectors: list[dict[str, str]]) -> dict[str, nn.Module]:
    """Qualified name -> module for every module of `model` that one of the selectors picks."""
    named = dict(model.named_modules())
    chosen: dict[str, nn.Module] = {}
    for item in selectors:
        kind, value = next(iter(item.items()))
        if kind == "name":
            if value not in named:
                raise ValueError(f"tracer config: no module named {value!r} in {type(model).__name__} "
                                 f"(names: {', '.join(n for n in list(named)[:20] if n)}...)")
            hits = {value: named[value]}
        elif kind == "regex":
            pattern = re.compile(value)
            hits = {n: m for n, m in named.items() if pattern.search(n)}
        else:
            hits = {n: m for n, m in named.items() if _type_matches(m, value)}
        if not hits:
            raise ValueError(f"tracer config: modules item {item!r} matches no module of {type(model).__name__}")
        chosen.update(hits)
    return chosen


class _FunctionRecorder(ModeTool):
    def __init__(self, writer: DumpWriter, patterns: list[re.Pattern], tracker: ModuleTracker) -> None:
        super().__init__()
        self.writer, self.patterns, self.tracker = writer, patterns, tracker

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return record_call(self.writer, func, args, kwargs or {}, self.tracker.path, self.patterns)


class Tracer:
    def __init__(self, config: Union[str, dict[str, Any]], model: nn.Module, out_dir: Optional[str] = None) -> None:
        self.config = load_config(config)
        out = out_dir or self.config.get("output")
        if not out:
            raise ValueError("tracer config has no 'output' folder and no out_dir was given")
        mode = self.config.get("mode", "stats")
        if mode == "stack":
            raise ValueError("tracer mode must be stats, sample or full")
        self.model = model
        self.backward = bool(self.config.get("backward", True))
        self.modules = select_modules(model, self.config.get("modules") or [])
        self.writer = DumpWriter(out, mode, steps=self.config.get("steps"),
                                 sampling=Sampling(**(self.config.get("sampling") or {})),
                                 meta={"level": "trace", "backward": self.backward})
        patterns = [re.compile(p) for p in self.config.get("functions") or []]
        self._tracker = ModuleTracker()
        self._functions = _FunctionRecorder(self.writer, patterns, self._tracker) if patterns else None
        self._handles: list[Any] = []
        self._open: dict[int, list[Optional[str]]] = {}

    @property
    def out_dir(self) -> str:
        return self.writer.out_dir

    @property
    def tracing(self) -> bool:
        return bool(self._handles) or (self._functions is not None and self._functions.active)

    def trace(self) -> "Tracer":
        if self.tracing:
            raise RuntimeError("Tracer.trace(): already tracing")
        for path, module in self.modules.items():
            self._handles.append(module.register_forward_pre_hook(self._pre_hook(path)))
            self._handles.append(module.register_forward_hook(self._post_hook(path), always_call=True))
        if self._functions is not None:
            self._tracker.start()
            self._functions.start()
        return self

    def untrace(self) -> "Tracer":
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._functions is not None and self._functions.active:
            self._functions.stop()
            self._tracker.stop()
        self._open.clear()
        self.writer.flush()
        return self

    def update_step(self) -> None:
        """End the current step (write its folder when it was traced) and count the next."""
        self.writer.next_step()

    def __enter__(self) -> "Tracer":
        return self.trace()

    def __exit__(self, *exc: Any) -> None:
        self.untrace()

    def _pre_hook(self, path: str):
        def hook(module: nn.Module, args: Any) -> None:
            name = self.writer.begin(module_api(module, path), "forward", "module",
                                     module_input_pairs(module, args), user_stack(sys._getframe(1)))
            self._open.setdefault(id(module), []).append(name)
        return hook

    def _post_hook(self, path: str):
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            names = self._open.get(id(module))
            name = names.pop() if names else None
            if name is None:
                return
            self.writer.end(name, output_pairs(output))
            if self.backward:
                api, index, _ = name.rsplit(".", 2)
                watch_gradients(self.writer, api, int(index), output, self.writer.step)
        return hook
