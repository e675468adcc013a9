"""torch.devx.nvtx, and torch.cuda.nvtx under CUDA mocking: NVTX-style annotations that reach
torch.profiler as ranges, as `record_function` does (devx has no NVTX library; a profile is where
such ranges are read). Ranges nest per thread; `range_start`/`range_end` may cross threads."""
from __future__ import annotations

import contextlib
import itertools
import threading
from typing import Any, Iterator

import torch

_local = threading.local()
_started: dict[int, Any] = {}
_ids = itertools.count(1)
_lock = threading.Lock()


def _stack() -> list[Any]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def range_push(msg: str) -> int:
    """Opens a range named `msg` on this thread; returns the depth of the range (0-based)."""
    _stack().append(torch.ops.profiler._record_function_enter_new(msg, None))
    return len(_stack()) - 1


def range_pop() -> int:
    """Closes this thread's innermost range; returns its depth, or -1 if none was open."""
    stack = _stack()
    if not stack:
        return -1
    torch.ops.profiler._record_function_exit._RecordFunction(stack.pop())
    return len(stack)


def range_start(msg: str) -> int:
    """Opens a range that any thread may close with range_end(the returned id)."""
    handle = torch.ops.profiler._record_function_enter_new(msg, None)
    with _lock:
        range_id = next(_ids)
        _started[range_id] = handle
    return range_id


def range_end(range_id: int) -> None:
    with _lock:
        handle = _started.pop(range_id, None)
    if handle is None:
        raise ValueError(f"torch.devx.nvtx.range_end: no range {range_id} is open")
    torch.ops.profiler._record_function_exit._RecordFunction(handle)


def mark(msg: str) -> None:
    """An instant event: a range that opens and closes at once."""
    torch.ops.profiler._record_function_exit._RecordFunction(torch.ops.profiler._record_function_enter_new(msg, None))


@contextlib.contextmanager
def range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:  # noqa: A001  (torch.cuda.nvtx's name)
    """Context manager and decorator: a range named msg.format(*args, **kwargs) around its scope."""
    range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
