"""torch.devx: the device module, shaped like torch.cuda."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import _C
from ._real_device import is_devx
from .streams import Event, Stream, StreamContext, current_stream, default_stream, set_stream, stream  # noqa: F401

_DeviceLike = Any  # int, str, torch.device or None


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int
    is_integrated: bool

    @property
    def gcnArchName(self) -> str:  # noqa: N802
        # torch.cuda's name for the device architecture (on wheels without CUDA, PyTorch reads this
        # one rather than `name`, e.g. inductor's cache key); under CUDA mocking it is devx's.
        return self.name

    def __repr__(self) -> str:
        return (
            f"_DevxDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count})"
        )


def _index(device: _DeviceLike, optional: bool = True) -> int:
    """The devx device index named by `device` (None: the current device); an index with no device
    behind it is a RuntimeError naming it."""
    if device is None:
        if not optional:
            raise ValueError("a device is required")
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type not in ("devx", "cuda"):
            raise ValueError(f"expected a devx device, got {device}")
        if device.index is None:
            return current_device()
        index = device.index
    elif isinstance(device, int):
        index = device
    else:
        raise TypeError(f"expected a device index, string or torch.device, got {type(device).__name__}")
    _C._check_device_index(index)
    return index


def is_available() -> bool:
    return device_count() > 0


def is_initialized() -> bool:
    return True


# torch.utils.checkpoint saves and restores a device's RNG state (so that recomputed dropout draws
# the same mask) only when the device module's `_initialized` says so, as torch.cuda's does.
_initialized = True


def _lazy_init() -> None:
    """Initialisation happens at import; kept for code written against torch.cuda."""


def init() -> None:
    """As torch.cuda.init(): devx initialises at import, so this only checks that this process
    may use it (a child forked after devx was used may not)."""
    if _is_in_bad_fork():
        raise RuntimeError("Cannot re-initialize devx in forked subprocess. To use devx with multiprocessing, "
                           "you must use the 'spawn' start method")


def _is_in_bad_fork() -> bool:
    """True in a process forked after devx was initialised: it cannot use the device (as CUDA)."""
    return _C._in_bad_fork()


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    _C._set_device(_index(device))


class device:
    """Context manager that makes `idx` the current devx device."""

    def __init__(self, idx: _DeviceLike) -> None:
        # As torch.cuda.device: None or a negative index changes nothing.
        self.idx = -1 if idx is None or (isinstance(idx, int) and idx < 0) else _index(idx)
        self.prev = -1

    def __enter__(self) -> None:
        if self.idx >= 0:
            self.prev = current_device()
            if self.prev != self.idx:
                set_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        if self.idx >= 0 and self.prev != self.idx:
            set_device(self.prev)


class device_of(device):
    """Context manager that makes the device of tensor `obj` current (no-op for CPU tensors)."""

    def __init__(self, obj: torch.Tensor) -> None:
        super().__init__(obj.get_device() if is_devx(obj) else -1)


def synchronize(device: _DeviceLike = None) -> None:
    _C._synchronize(_index(device))


def get_device_properties(device: _DeviceLike = None) -> DeviceProperties:
    return DeviceProperties(**_C._device_properties(_index(device)))


def get_device_name(device: _DeviceLike = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: _DeviceLike = None) -> tuple[int, int]:
    p = get_device_properties(device)
    return p.major, p.minor


def mem_get_info(device: _DeviceLike = None) -> tuple[int, int]:
    return tuple(_C._mem_get_info(_index(device)))  # type: ignore[return-value]


def memory_stats(device: _DeviceLike = None) -> dict[str, Any]:
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device: _DeviceLike = None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: _DeviceLike = None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def memory_summary(device: _DeviceLike = None, abbreviated: bool = False) -> str:
    """The memory statistics as a table, like torch.cuda.memory_summary."""
    stats = memory_stats(device)
    rows = [
        ("Allocated memory", "allocated_bytes"), ("Active memory", "active_bytes"),
        ("Requested memory", "requested_bytes"), ("Reserved memory", "reserved_bytes"),
        ("Allocations", "allocation"), ("Active allocs", "active"), ("Device reserved segments", "segment"),
    ]
    pools = ("all",) if abbreviated else ("all", "large_pool", "small_pool")

    def fmt(key: str, value: int) -> str:
        if not key.endswith("_bytes"):
            return str(value)
        for unit in ("B", "KiB", "MiB", "GiB"):
            if abs(value) < 1024 or unit == "GiB":
                return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
            value /= 1024
        return str(value)

    lines = [f"devx memory summary, device {_index(device)} ({get_device_name(device)})",
             f"{'metric':<40}{'current':>14}{'peak':>14}{'allocated':>14}{'freed':>14}"]
    for label, key in rows:
        for pool in pools:
            cells = [fmt(key, stats.get(f"{key}.{pool}.{kind}", 0)) for kind in ("current", "peak", "allocated", "freed")]
            lines.append(f"{label + ('' if pool == 'all' else ' (' + pool + ')'):<40}" + "".join(f"{c:>14}" for c in cells))
    lines.append(f"{'OOMs':<40}{stats.get('num_ooms', 0):>14}    alloc retries {stats.get('num_alloc_retries', 0)}")
    return "\n".join(lines)


def empty_cache() -> None:
    _C._empty_cache()


def set_per_process_memory_fraction(fraction: float, device: _DeviceLike = None) -> None:
    """The caching allocator reserves at most `fraction` (0 to 1) of the device's total memory; a
    request beyond it is out of memory, as on CUDA."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _C._set_memory_fraction(_index(device), fraction)


def get_per_process_memory_fraction(device: _DeviceLike = None) -> float:
    return _C._memory_fraction(_index(device))


def can_device_access_peer(device: _DeviceLike, peer_device: _DeviceLike) -> bool:
    """Whether `device` can read `peer_device`'s memory directly: any two different devx devices
    (copies between them need no staging through the host); a device is not its own peer, as on
    CUDA."""
    return _index(device, optional=False) != _index(peer_device, optional=False)


_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """"warn" (1) or "error" (2): a warning or a RuntimeError, naming the Python line, whenever an
    operation makes the host wait for the device (a copy to or from host memory, `.item()`, a
    stream's synchronize, an op that needs its data on the host); "default" (0) turns it off.
    Device-wide synchronize() is not reported, as on CUDA."""
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    return _C._sync_debug_mode()


# Random numbers: one default generator per device (torch.manual_seed seeds them all through
# manual_seed_all, so a seeded devx run draws exactly the numbers a seeded CPU run draws).
def _generator(device: _DeviceLike = None) -> torch.Generator:
    return _C._get_default_generator(_index(device))


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    s = _generator(0).seed()
    for i in range(1, device_count()):
        _generator(i).manual_seed(s)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: _DeviceLike = "devx") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "devx") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True


def is_current_stream_capturing() -> bool:
    """devx has no graph capture (torch.cuda.graph's): no stream is ever capturing."""
    return False


def __getattr__(name: str) -> Any:
    if name == "default_generators":
        # As torch.cuda.default_generators: each device's default generator, by index.
        return tuple(_generator(i) for i in range(device_count()))
    # Inductor's code generators, looked up by torch.compile on first use (see _inductor_backend).
    from . import _inductor_backend

    if name in _inductor_backend._CODEGEN_NAMES:
        return _inductor_backend.codegen_class(name)
    raise AttributeError(f"module 'torch.devx' has no attribute {name!r}")


from .legacy_types import TYPES as _LEGACY_TYPES  # noqa: E402

globals().update(_LEGACY_TYPES)  # torch.devx.FloatTensor, ... (legacy_types.py)

from . import amp, memory, nvtx  # noqa: E402,F401  (torch.devx.amp and .memory; they read the functions above)
