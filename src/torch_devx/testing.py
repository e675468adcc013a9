"""Helpers for testing code against asynchronous devx streams (DEVX_SIM_ASYNC=1 on cpu_sim).

`hold_stream` stops a stream at the current point of its work until the block exits: ops issued
to it meanwhile return at once and have not run, so tests can show deterministically (no timing)
that kernels are asynchronous, that another stream does not wait unless told to, and that memory
a held stream may still use is not handed out again.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import torch

from . import _C


def async_streams() -> bool:
    """Whether ops are issued to streams that run on threads of their own (DEVX_SIM_ASYNC=1)."""
    return bool(_C._async_host_streams())


def profiler_device_rows() -> bool:
    """Whether torch.profiler shows devx's kernels and copies as device activities: the installed
    torch has kineto's PrivateUse1 profiler registry (torch 2.13 has it, 2.11 does not)."""
    return bool(_C._profiler_device_rows())


@contextlib.contextmanager
def hold_stream(stream: Optional[torch.Stream] = None) -> Iterator[None]:
    """Inside the block, `stream` (default: the current devx stream) runs nothing issued after
    the block began. Waiting for the stream inside the block (synchronize, .item(), .cpu() on it)
    would never return; RuntimeError unless the streams are asynchronous."""
    if stream is None:
        stream = torch.accelerator.current_stream(torch.device("devx", torch.accelerator.current_device_index()))
    token = _C._hold_stream(stream.device_index, stream.stream_id)
    try:
        yield
    finally:
        _C._release_stream(token)
