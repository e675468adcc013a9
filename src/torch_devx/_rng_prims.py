"""torch.compile of activation checkpointing with random ops (dropout) on devx.

AOT autograd makes the recomputation in the backward draw the same random numbers as the forward:
the forward runs each random op through the run_and_save_rng_state operator (which also returns
the generator state the op started from) and the backward through run_with_rng_state (which runs
it from that state). torch._prims.rng_prims implements both for a fixed table of device types
(cpu, cuda, hpu, xpu) in their BackendSelect kernels, and raises "Backend not supported" for any
other.

devx's implementations are registered with py_impl under DispatchKey.PrivateUse1, as CUDA's are
under DispatchKey.CUDA. The BackendSelect kernels run first and their table cannot be extended, so
they are replaced by kernels that send devx work to the PrivateUse1 ones and everything else to the
original kernels, unchanged. run_and_save_rng_state's fake-tensor implementation (what inductor
runs to learn the outputs' shapes) consults the same table and is wrapped the same way.
"""
from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Callable, Optional

import torch
from torch._C import DispatchKey

from . import _effects

_GROUP = "torch.compile"


def _draws_on(args: tuple, kwargs: dict) -> Optional[torch.device]:
    """The device a random op draws on: its device= argument, else its first tensor's device (the
    rule of torch 2.13's rng_prims.get_device; torch 2.11's knows only cpu, cuda, hpu and xpu, so
    devx work is recognised here, not by asking it)."""
    if kwargs.get("device") is not None:
        return torch.device(kwargs["device"])
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.device
    return None


def _device_of(args: tuple, kwargs: dict) -> torch.device:
    device = _draws_on(args, kwargs)
    if device is None:
        raise ValueError("run_and_save_rng_state/run_with_rng_state: the op has neither a device nor a tensor argument")
    return device


def _run_and_save_rng_state(op: Callable, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    device = _device_of(args, kwargs)
    return torch.devx.get_rng_state(device), op(*args, **kwargs)


def _run_with_rng_state(rng_state: torch.Tensor, op: Callable, *args: Any, **kwargs: Any) -> Any:
    device = _device_of(args, kwargs)
    current = torch.devx.get_rng_state(device)
    torch.devx.set_rng_state(rng_state.cpu(), device)
    try:
        return op(*args, **kwargs)
    finally:
        torch.devx.set_rng_state(current, device)


def _select_devx(original: Callable, devx_kernel: Callable, state_args: int) -> Callable:
    """A kernel that runs devx_kernel for devx work and original for the rest. The op and its
    arguments follow the first `state_args` arguments (run_with_rng_state's rng state)."""

    def devx_or_original(*args: Any, **kwargs: Any) -> Any:
        device = _draws_on(args[state_args + 1:], kwargs)
        if device is not None and device.type == "devx":
            return devx_kernel(*args, **kwargs)
        return original(*args, **kwargs)

    return devx_or_original


def register(rng_prims: ModuleType) -> None:
    for operator, kernel, state_args in ((rng_prims.run_and_save_rng_state, _run_and_save_rng_state, 0),
                                         (rng_prims.run_with_rng_state, _run_with_rng_state, 1)):
        operator.py_impl(DispatchKey.PrivateUse1)(kernel)
        original = operator.py_kernels[DispatchKey.BackendSelect]
        _effects.apply(_GROUP, f"{operator.name()}: the BackendSelect kernel sends devx work to devx's kernel",
                       functools.partial(_set_kernel, operator, _select_devx(original, kernel, state_args)),
                       functools.partial(_set_kernel, operator, original))
    fake_kernels = getattr(torch._higher_order_ops.utils, "registered_hop_fake_fns", {})
    save = rng_prims.run_and_save_rng_state
    if save in fake_kernels:
        original = fake_kernels[save]
        _effects.apply(_GROUP, f"{save.name()}: the fake-tensor kernel sends devx work to devx's kernel",
                       functools.partial(fake_kernels.__setitem__, save,
                                         _select_devx(original, _run_and_save_rng_state, 0)),
                       functools.partial(fake_kernels.__setitem__, save, original))
    else:
        _wrap_fake_mode_kernel(save)


def _wrap_fake_mode_kernel(save: Any) -> None:
    """torch 2.11 keeps run_and_save_rng_state's fake-tensor kernel in the operator's table of
    modes (py_impl(FakeTensorMode)), where it calls the BackendSelect function it closes over."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    original = save.python_key_table.get(FakeTensorMode)
    if original is None:
        return

    def devx_or_original(mode: Any, *args: Any, **kwargs: Any) -> Any:
        device = _draws_on(args[1:], kwargs)
        if device is not None and device.type == "devx":
            with mode:
                return _run_and_save_rng_state(*args, **kwargs)
        return original(mode, *args, **kwargs)

    _effects.apply(_GROUP, f"{save.name()}: the fake-tensor kernel sends devx work to devx's kernel",
                   functools.partial(_set_mode_kernel, save, FakeTensorMode, devx_or_original),
                   functools.partial(_set_mode_kernel, save, FakeTensorMode, original))


def _set_mode_kernel(operator: Any, mode: type, kernel: Callable) -> None:
    operator.python_key_table[mode] = kernel
    operator._dispatch_cache.clear()


def _set_kernel(operator: Any, kernel: Callable) -> None:
    operator.py_kernels[DispatchKey.BackendSelect] = kernel
    operator._dispatch_cache.clear()
