"""Streams and events of torch.devx, shaped like torch.cuda's, on PyTorch's generic torch.Stream
and torch.Event (which reach the devx runtime through its device guard)."""
from __future__ import annotations

import ctypes
from typing import Any, Optional

import torch

_STREAMS_PER_POOL = 8  # csrc/runtime/stream.h: stream id = 1 + priority level * 8 + slot
_PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, what torch.Stream(device_type=...) wants


def _devx(device: Any) -> torch.device:
    from .device_module import _index

    return torch.device("devx", _index(device))


class Stream(torch.Stream):
    """A devx stream from the device's pool; lower priority numbers run first (0, -1, -2)."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=_devx(device), priority=priority)

    @property
    def priority(self) -> int:
        return 0 if self.stream_id == 0 else -((self.stream_id - 1) // _STREAMS_PER_POOL)

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """(least, greatest) priority, as torch.cuda.Stream.priority_range()."""
        from . import _C

        return tuple(_C._stream_priority_range())

    @property
    def cuda_stream(self) -> int:
        """The vendor's handle of this stream as an integer (a cudaStream_t on the cuda vendor),
        for libraries that take a raw stream; the name is torch.cuda.Stream's."""
        from . import _C

        return _C._stream_handle(self.device_index, self.stream_id)

    @property
    def _as_parameter_(self) -> ctypes.c_void_p:
        return ctypes.c_void_p(self.cuda_stream)

    def __repr__(self) -> str:
        return f"<torch.devx.Stream device={self.device} stream_id={self.stream_id} priority={self.priority}>"


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:  # noqa: N802
    """A devx event; elapsed_time needs enable_timing=True on both events. A plain torch.Event:
    torch.Event's methods accept no subclass as their `other` event."""
    return torch.Event(device="devx", enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def _wrap(stream: torch.Stream) -> Stream:
    return Stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=_PRIVATEUSE1)


def current_stream(device: Any = None) -> Stream:
    return _wrap(torch.accelerator.current_stream(_devx(device)))


def default_stream(device: Any = None) -> Stream:
    return Stream(stream_id=0, device_index=_devx(device).index, device_type=_PRIVATEUSE1)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes `stream` current (on its device, which becomes current too) inside the block."""

    def __init__(self, stream: Optional[torch.Stream]) -> None:
        self.stream = stream
        self.prev_device = -1
        self.prev_stream: Optional[torch.Stream] = None

    def __enter__(self) -> None:
        if self.stream is None:
            return
        from .device_module import current_device, set_device

        self.prev_device = current_device()
        if self.stream.device_index != self.prev_device:
            set_device(self.stream.device_index)
        try:
            self.prev_stream = torch.accelerator.current_stream(self.stream.device_index)
            torch.accelerator.set_stream(self.stream)
        except BaseException:
            # A stream that cannot be made current leaves the current device as it was.
            set_device(self.prev_device)
            raise

    def __exit__(self, *exc: object) -> None:
        if self.stream is None or self.prev_stream is None:
            return
        from .device_module import set_device

        torch.accelerator.set_stream(self.prev_stream)
        set_device(self.prev_device)


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    return StreamContext(stream)
