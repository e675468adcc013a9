"""Run a function right after a module is imported, without importing it first.

devx must be registered with parts of PyTorch that are costly to import (torch._dynamo takes
seconds) before they are used, and PyTorch has no hook for it. A finder at the front of
sys.meta_path notices the import of a watched module, lets the usual finder and loader do the
work, and runs the module's callbacks once its code has run. The finder leaves sys.meta_path when
nothing is left to watch; until then it costs one dict lookup per import. Undoing it (uninstall())
drops the callbacks not yet run.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Callable, Optional, Sequence

from . import _effects

_Callback = Callable[[ModuleType], None]
_pending: dict[str, list[_Callback]] = {}


def after_import(name: str, callback: _Callback) -> None:
    """callback(module) now if module `name` is imported, else right after its first import."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    _pending.setdefault(name, []).append(callback)
    if _finder not in sys.meta_path:
        _effects.apply("import hooks", "sys.meta_path: a finder that registers devx with modules as they are imported",
                       lambda: sys.meta_path.insert(0, _finder), _stop_watching)


def _stop_watching() -> None:
    _pending.clear()
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Optional[Sequence[str]],
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenRunCallbacks(spec.loader)
                return spec
        return None


class _ThenRunCallbacks(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The module keeps its own loader (tracebacks and inspect read source through it).
        module.__spec__.loader = module.__loader__ = self.loader
        self.loader.exec_module(module)
        callbacks = _pending.pop(module.__name__, [])
        if not _pending and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
        for callback in callbacks:
            callback(module)


_finder = _Finder()
