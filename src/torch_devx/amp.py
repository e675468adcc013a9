"""torch.devx.amp: mixed-precision helpers bound to devx, as torch.cuda.amp is bound to CUDA.

torch.autocast("devx") and torch.amp.GradScaler("devx") are the primary API; these are the
torch.cuda.amp spellings for code written against that namespace.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from .device_module import get_amp_supported_dtype

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd", "get_amp_supported_dtype", "is_autocast_available"]


def is_autocast_available() -> bool:
    return torch.amp.is_autocast_available("devx")


class autocast(torch.amp.autocast_mode.autocast):  # noqa: N801  (torch.cuda.amp's name)
    """torch.autocast("devx", ...).

    What it makes is a torch.autocast itself: torch.compile traces only PyTorch's own autocast
    classes (it names them), and treats a subclass's object as an unknown context manager.
    """

    def __new__(cls, enabled: bool = True, dtype: torch.dtype = torch.float16,
                cache_enabled: bool = True) -> torch.amp.autocast_mode.autocast:
        return torch.amp.autocast_mode.autocast("devx", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler("devx", ...)."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        super().__init__("devx", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)


def custom_fwd(fwd: Optional[Callable] = None, *, cast_inputs: Optional[torch.dtype] = None) -> Any:
    """torch.amp.custom_fwd(device_type="devx", ...)."""
    return torch.amp.custom_fwd(fwd, device_type="devx", cast_inputs=cast_inputs)


def custom_bwd(bwd: Callable) -> Callable:
    """torch.amp.custom_bwd(device_type="devx")."""
    return torch.amp.custom_bwd(bwd, device_type="devx")
