"""Which module is running: global forward pre/post hooks keep a stack of module paths.

A module's path is its attribute path from the outermost running module ("layers.0.fc"), found by
looking the module up among its caller's children (then descendants, for modules held in a
ModuleList the caller iterates), the name `model.named_modules()` gives; the outermost module is "" and is shown by its class name. Modules
called from outside their parent get their class name. Only the thread that started the tracker is
followed (module hooks are global).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional

import torch.nn as nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

__all__ = ["ModuleTracker"]

Callback = Callable[[nn.Module, str, Any, Any], None]


class ModuleTracker:
    """`on_enter(module, path, args, None)` / `on_exit(module, path, args, output)` are called around
    every module forward of the tracking thread; `stack` holds the (module, path) pairs running now."""

    def __init__(self, on_enter: Optional[Callback] = None, on_exit: Optional[Callback] = None) -> None:
        self.stack: list[tuple[nn.Module, str]] = []
        self._descendants: dict[int, dict[int, str]] = {}
        self._on_enter = on_enter
        self._on_exit = on_exit
        self._handles: list[Any] = []
        self._thread: Optional[int] = None

    @property
    def path(self) -> str:
        """The innermost running module as "path (Class)", or "" outside any module."""
        if not self.stack:
            return ""
        module, path = self.stack[-1]
        return f"{path} ({type(module).__name__})" if path else type(module).__name__

    def start(self) -> None:
        self._thread = threading.get_ident()
        self.stack.clear()
        self._handles = [register_module_forward_pre_hook(self._pre),
                         register_module_forward_hook(self._post, always_call=True)]

    def stop(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._thread = None
        self.stack.clear()
        self._descendants.clear()

    def _child_path(self, module: nn.Module) -> str:
        if not self.stack:
            return ""
        parent, parent_path = self.stack[-1]
        name = next((k for k, child in parent._modules.items() if child is module), None)
        if not name:
            # Called through a container the parent never calls (a ModuleList): search its descendants once.
            names = self._descendants.get(id(parent))
            if names is None:
                names = self._descendants[id(parent)] = {id(m): n for n, m in parent.named_modules() if n}
            name = names.get(id(module))
        if not name:
            return type(module).__name__
        return f"{parent_path}.{name}" if parent_path else name

    def _pre(self, module: nn.Module, args: Any) -> None:
        if threading.get_ident() != self._thread:
            return
        path = self._child_path(module)
        self.stack.append((module, path))
        if self._on_enter is not None:
            self._on_enter(module, path, args, None)

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        if threading.get_ident() != self._thread or not self.stack or self.stack[-1][0] is not module:
            return
        _, path = self.stack.pop()
        if self._on_exit is not None:
            self._on_exit(module, path, args, output)
