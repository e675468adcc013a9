"""devx's answers to the `torch._C._cuda_*` functions that PyTorch's own Python calls directly.

torch.cuda's public functions are mocked by name (cuda_mock._CUDA_FUNCS), but PyTorch's test
framework and parts of torch.cuda skip them and call the C bindings: `CudaNonDefaultStream` (every
CUDA-instantiated device-generic test) sets streams with `torch._C._cuda_setStream`, the memory-leak
check clears cuBLAS workspaces. A torch built without CUDA has none of these bindings, so under
mocking they are added to `torch._C` (and removed again by `cuda_mock.disable()`); a torch built with
CUDA has them, acting on CUDA's streams, which mocking replaced by devx's: there they are replaced.
`_cuda_getDeviceCount` is left out on purpose: torch takes its presence to mean "built with CUDA"
(`torch.cuda._is_compiled()`), and dynamo and inductor would then import CUDA-only bindings.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _environ, device_module, streams


def _cuda_setStream(stream_id: int, device_index: int, device_type: int) -> None:  # noqa: N802
    streams.set_stream(streams.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))


def _cuda_getCurrentStream(device_index: Optional[int]) -> tuple[int, int, int]:  # noqa: N802
    stream = streams.current_stream(device_index)
    return stream.stream_id, stream.device_index, stream.device_type


def _cuda_getDefaultStream(device_index: Optional[int]) -> tuple[int, int, int]:  # noqa: N802
    stream = streams.default_stream(device_index)
    return stream.stream_id, stream.device_index, stream.device_type


def _cuda_setDevice(device: int) -> None:  # noqa: N802
    # As CUDA's binding: a negative index changes nothing.
    if device >= 0:
        device_module.set_device(device)


def _cuda_getDevice() -> int:  # noqa: N802
    return device_module.current_device()


def _cuda_exchangeDevice(device: int) -> int:  # noqa: N802
    """Make `device` current and return the previous one (-1 changes nothing), as torch.cuda's
    device context manager expects."""
    previous = device_module.current_device()
    if device >= 0 and device != previous:
        device_module.set_device(device)
    return previous


def _cuda_synchronize() -> None:  # noqa: N802
    device_module.synchronize()


def _cuda_clearCublasWorkspaces() -> None:  # noqa: N802
    """devx keeps no per-stream library workspaces outside its caching allocator: nothing to clear."""


def _cuda_cudaCachingAllocator_is_enabled() -> bool:  # noqa: N802
    # The sanitizer is the one setting under which devx allocations bypass the cache.
    return not _environ.flag("DEVX_SIM_SANITIZE")


BINDINGS = {
    "_cuda_setStream": _cuda_setStream,
    "_cuda_getCurrentStream": _cuda_getCurrentStream,
    "_cuda_getDefaultStream": _cuda_getDefaultStream,
    "_cuda_setDevice": _cuda_setDevice,
    "_cuda_getDevice": _cuda_getDevice,
    "_cuda_exchangeDevice": _cuda_exchangeDevice,
    "_cuda_maybeExchangeDevice": _cuda_exchangeDevice,
    "_cuda_synchronize": _cuda_synchronize,
    "_cuda_clearCublasWorkspaces": _cuda_clearCublasWorkspaces,
    "_cuda_cudaCachingAllocator_is_enabled": _cuda_cudaCachingAllocator_is_enabled,
}
