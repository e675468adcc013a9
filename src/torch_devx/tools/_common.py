"""Helpers shared by the tools: API names, the noise list, start/stop of a TorchFunctionMode, source lines."""
from __future__ import annotations

import inspect
import linecache
import os
import re
import runpy
import sys
from types import CodeType, FrameType, FunctionType
from typing import Any, Callable, Optional, Sequence

import torch
import torch.overrides

from .._frames import is_library_file

__all__ = ["NOISE", "api_caller", "api_name", "call_as_caller", "ModeTool", "op_name", "run_as_main", "user_frame",
           "user_stack"]

# Calls that are not "API calls" worth timing or checking. Besides these, every property access
# (`t.shape`, `t.device`, `t.grad`, `t.T`: torch reports them as `Tensor.<prop>.__get__`/`__set__`)
# and every private name (`torch._C._set_grad_enabled`, `Tensor._version`) is left out, except the
# foreach family (`torch._foreach_add_`): optimizers on devx (and CUDA) use it by default for their
# whole update, so leaving it out would hide the optimizer step.
NOISE = frozenset({
    "__repr__", "__str__", "__format__", "__hash__", "__len__", "__reduce_ex__", "__deepcopy__",
    "__getstate__", "__setstate__", "__dir__", "__array__",
    "dim", "ndimension", "size", "stride", "numel", "nelement", "storage_offset", "element_size",
    "is_floating_point", "is_complex", "is_contiguous", "data_ptr", "get_device", "has_names",
})

_names: dict[Any, Optional[str]] = {}


_FOREACH = "_foreach_"


def _compute_name(func: Callable) -> Optional[str]:
    short = getattr(func, "__name__", "") or ""
    if short.startswith(_FOREACH) and getattr(func, "__module__", None) == "torch":
        return "torch." + short
    if short in NOISE or (short.startswith("_") and not short.startswith("__")):
        return None
    try:
        name = torch.overrides.resolve_name(func)
    except Exception:  # noqa: BLE001 - resolve_name is best effort
        name = None
    if name is None:  # factories (torch.randn) and a few builtins are not in torch's table
        module = getattr(func, "__module__", None)
        qual = getattr(func, "__qualname__", short) or short
        if qual.startswith(("TensorBase.", "Tensor.")):
            name = "Tensor." + short
        elif module in ("torch", None):
            name = "torch." + short
        else:
            name = f"{module}.{short}"
    if name.startswith("torch.Tensor."):
        name = name[len("torch."):]
    if any(part.startswith("_") and not part.startswith("__") for part in name.split(".")[1:]):
        return None
    return name


def api_name(func: Callable) -> Optional[str]:
    """The public name of a function seen by a TorchFunctionMode ("torch.add", "Tensor.sum",
    "torch.nn.functional.relu", "torch._foreach_mul_"), or None for noise (see NOISE). Cached per function."""
    if getattr(func, "__name__", None) in ("__get__", "__set__", "__delete__"):
        return None  # property access; a fresh method-wrapper each time, so not worth caching
    try:
        return _names[func]
    except KeyError:
        name = _names[func] = _compute_name(func)
        return name
    except TypeError:  # unhashable callable
        return _compute_name(func)


def op_name(func: Any) -> str:
    """The name of an aten op seen by a TorchDispatchMode: "mul.Tensor", "relu" (the default overload
    is left out, as in the backend's diagnostics)."""
    base = func._schema.name.split("::")[-1]
    return base if func._overloadname == "default" else f"{base}.{func._overloadname}"


def _is_tool_frame(frame: FrameType) -> bool:
    """A frame of library code (see torch_devx._frames) or a call_as_caller stand-in."""
    return frame.f_code.co_name == _STAND_IN_NAME or is_library_file(frame.f_code.co_filename)


def user_frame(start: Optional[FrameType] = None) -> Optional[FrameType]:
    """The innermost frame of the user's code (not library code, not a stand-in): the line that
    called the API."""
    frame = start if start is not None else sys._getframe(1)
    while frame is not None:
        if not _is_tool_frame(frame):
            return frame
        frame = frame.f_back
    return None


_OVERRIDES_FILE = os.path.abspath(torch.overrides.__file__)
_STAND_IN_NAME = "<torch_devx.tools call>"


def api_caller(mode_frame: FrameType, func: Callable) -> Optional[FrameType]:
    """The frame that called `func`, seen from the __torch_function__ frame of a mode: past torch's
    handle_torch_function and, for an API written in Python (F.softmax), past the API's own frame."""
    code = getattr(inspect.unwrap(func), "__code__", None)
    frame = mode_frame.f_back
    while frame is not None and (os.path.abspath(frame.f_code.co_filename) == _OVERRIDES_FILE or frame.f_code is code):
        frame = frame.f_back
    return frame


def _stand_in(func: Callable, args: tuple, kwargs: dict) -> Any:
    return func(*args, **kwargs)


_STAND_IN_LINE = max(line for _, _, line in _stand_in.__code__.co_lines() if line is not None) \
    - _stand_in.__code__.co_firstlineno
_stand_ins: dict[tuple[CodeType, int], Callable] = {}


def call_as_caller(caller: Optional[FrameType], func: Callable, args: tuple, kwargs: dict) -> Any:
    """func(*args, **kwargs), called from a stand-in frame that has `caller`'s file, line and globals.

    A warning names the frame that made the call it comes from (warnings.warn(stacklevel=2), and every
    C++ TORCH_WARN, which names the innermost Python frame). A tool's __torch_function__ calls the API
    itself, so without this the user's warnings would name the tool's line. The stand-in (a copy of
    _stand_in's code with the caller's position, named "<torch_devx.tools call>" in tracebacks) makes
    them name the line they name without the tool, and the caller's module for warning filters; frame
    walks of the tools skip it."""
    if caller is None or caller.f_lineno <= _STAND_IN_LINE:
        return func(*args, **kwargs)
    key = (caller.f_code, caller.f_lineno)
    stand_in = _stand_ins.get(key)
    if stand_in is None:
        names = {"co_name": _STAND_IN_NAME}
        if sys.version_info >= (3, 11):  # Python 3.10's code objects have no co_qualname
            names["co_qualname"] = _STAND_IN_NAME
        code = _stand_in.__code__.replace(co_filename=caller.f_code.co_filename,
                                          co_firstlineno=caller.f_lineno - _STAND_IN_LINE, **names)
        stand_in = _stand_ins[key] = FunctionType(code, caller.f_globals)
    return stand_in(func, args, kwargs)


def user_stack(start: Optional[FrameType] = None, limit: int = 16) -> list[str]:
    """The user's frames from the calling line outwards, innermost first,
    as 'file:line in function: source' (at most `limit`)."""
    frames = []
    frame = user_frame(start if start is not None else sys._getframe(1))
    while frame is not None and len(frames) < limit:
        code = frame.f_code
        if not _is_tool_frame(frame):
            source = linecache.getline(code.co_filename, frame.f_lineno).strip()
            frames.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}: {source}")
        frame = frame.f_back
    return frames


class ModeTool(torch.overrides.TorchFunctionMode):
    """A TorchFunctionMode with start()/stop() besides `with`. Nothing is pushed before start()."""

    def __init__(self) -> None:
        super().__init__()
        self._active = False

    @property
    def active(self) -> bool:
        return self._active

    def _on_start(self) -> None:  # for subclasses: install hooks
        pass

    def _on_stop(self) -> None:  # for subclasses: remove hooks
        pass

    def start(self) -> "ModeTool":
        if self._active:
            raise RuntimeError(f"{type(self).__name__} is already started")
        self._on_start()
        torch.overrides._push_mode(self)
        self._active = True
        return self

    def stop(self) -> "ModeTool":
        if not self._active:
            return self
        top = torch.overrides._get_current_function_mode()
        if top is not self:
            raise RuntimeError(f"{type(self).__name__}.stop(): another TorchFunctionMode ({type(top).__name__}) "
                               "was pushed after this one and is still active; leave it first")
        torch.overrides._pop_mode()
        self._active = False
        self._on_stop()
        return self

    def __enter__(self) -> "ModeTool":
        return self.start()

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        self.stop()


def run_as_main(path: str, argv: Sequence[str] = ()) -> None:
    """Run a Python script as __main__, with sys.argv = [path, *argv] and its folder first on sys.path
    (as `python path argv...` would); both are restored afterwards. SystemExit(0/None) is a normal end."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"script {path!r} does not exist")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


_UNINITIALISED = re.compile(
    r"(^|\.)(empty|empty_like|empty_strided|empty_permuted|new_empty|new_empty_strided)(\.|$)")


def returns_uninitialised(api: str) -> bool:
    """Whether the API (as api_name spells it) returns memory not yet written: whatever it held
    before, NaN bit patterns included, is no result of the user's, so no tool judges its values."""
    return _UNINITIALISED.search(api) is not None

