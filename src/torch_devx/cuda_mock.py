"""CUDA mocking: unchanged CUDA scripts run on devx.

`.cuda()`, `is_cuda`, `torch.cuda.*` device queries, torch.cuda.memory's history and snapshots
(`_record_memory_history`, `_snapshot`, `_dump_snapshot`), autocast("cuda") and the autocast state
queries (`torch.is_autocast_enabled("cuda")`, ...), and "cuda"/"cuda:N"/torch.device("cuda")
given to factories, `.to()`, `new_*` and `nn.Module.to()` all mean devx; the "nccl" backend of
`torch.distributed.init_process_group`/`new_group` means the devx process group.

Where torch has no CUDA of its own, factories and `new_*` are not wrapped: a "cuda" device reaches
ATen's CUDA dispatch key, where a fallback runs the op again on devx (csrc/python/cuda_alias.h), so
they stay the builtins TorchScript, torch._refs, functorch and torch.device contexts recognise, and
entry points nobody listed (window functions, fft frequencies, torch.asarray) are covered too. The
Python functions wrapped (once each) are entry points that take a device or a device type; ops
themselves pay nothing. `disable()` restores every original and removes the fallback;
DEVX_MOCK_CUDA=0 keeps mocking off from the start.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable

import torch
from torch.utils._device import _device_constructors

from . import _C, _cuda_c_api, _effects, _environ, device_module, legacy_types, nvtx
from ._real_device import is_devx, real_device

logger = logging.getLogger(__name__)

# torch.* functions that take a `device=` keyword.
_FACTORIES = (
    "arange", "as_tensor", "empty", "empty_like", "empty_strided", "eye", "full", "full_like",
    "linspace", "logspace", "ones", "ones_like", "rand", "rand_like", "randint", "randint_like",
    "randn", "randn_like", "randperm", "range", "scalar_tensor", "tensor", "tril_indices",
    "triu_indices", "zeros", "zeros_like",
)
# Other entry points that take a device (window functions, fft frequencies, sparse and nested
# constructors): on a torch built with CUDA they are wrapped as the factories are.
_MORE_FACTORIES = (
    ("", ("asarray", "empty_permuted", "normal", "hann_window", "hamming_window", "bartlett_window",
          "blackman_window", "kaiser_window", "sparse_coo_tensor", "sparse_csr_tensor", "sparse_csc_tensor",
          "sparse_bsr_tensor", "sparse_bsc_tensor", "sparse_compressed_tensor")),
    ("fft", ("fftfreq", "rfftfreq")),
    ("nested", ("nested_tensor", "as_nested_tensor", "nested_tensor_from_jagged")),
)
_TENSOR_NEW = ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros")
_CUDA_FUNCS = (
    "_is_in_bad_fork", "current_device", "device", "device_count", "device_of", "empty_cache", "get_device_capability",
    "get_device_name", "get_device_properties", "get_rng_state", "get_rng_state_all", "initial_seed",
    "is_available", "is_bf16_supported", "is_current_stream_capturing", "is_initialized", "manual_seed",
    "manual_seed_all", "max_memory_allocated", "max_memory_reserved", "mem_get_info", "memory_allocated",
    "memory_reserved", "memory_stats", "memory_summary", "reset_accumulated_memory_stats",
    "reset_peak_memory_stats", "seed", "seed_all",
    "set_device", "set_rng_state", "set_rng_state_all", "synchronize", "init",
    "set_per_process_memory_fraction", "can_device_access_peer", "set_sync_debug_mode", "get_sync_debug_mode",
    "default_generators",
    "Stream", "Event", "StreamContext", "current_stream", "default_stream", "set_stream", "stream",
)
# torch.* autocast state queries and setters that take a device type.
_AUTOCAST_STATE = ("is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled", "set_autocast_dtype")
# torch.cuda.memory's history and snapshot functions (memory_snapshot is torch.cuda's too).
_CUDA_MEMORY_FUNCS = ("_record_memory_history", "_snapshot", "_dump_snapshot", "memory_snapshot")

# torch.cuda.nvtx's functions: without an NVTX library (a CPU build of torch) they raise; under
# mocking they open and close profiler ranges instead. Where NVTX exists they are left to it.
_NVTX_FUNCS = ("range_push", "range_pop", "range_start", "range_end", "mark", "range")

_GROUP = "cuda_mock"
_factories_wrapped = False


def map_device(device: Any) -> Any:
    """cuda -> devx for strings and torch.device; everything else unchanged."""
    if isinstance(device, str):
        if device == "cuda" or device.startswith("cuda:"):
            return "devx" + device[4:]
        return device
    if isinstance(device, torch.device) and device.type == "cuda":
        return torch.device("devx", device.index)
    return device


def _map_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if "device" in kwargs:
        kwargs["device"] = map_device(kwargs["device"])
    if args and isinstance(args[0], (str, torch.device)):
        args = (map_device(args[0]),) + args[1:]
    return args, kwargs


def _device_kwarg(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = map_device(kwargs["device"])
        return fn(*args, **kwargs)

    return wrapper


def _device_first(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = _map_args(args, kwargs)
        return fn(*args, **kwargs)

    return wrapper


def _to(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = _map_args(args, kwargs)
        return fn(self, *args, **kwargs)

    return wrapper


def _map_location(value: Any) -> Any:
    if isinstance(value, dict):
        return {map_device(k): map_device(v) for k, v in value.items()}
    return map_device(value)


def _load(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "map_location" in kwargs:
            kwargs["map_location"] = _map_location(kwargs["map_location"])
        elif len(args) > 1:
            args = (args[0], _map_location(args[1])) + args[2:]
        return fn(*args, **kwargs)

    return wrapper


def _autocast_init(original: Callable) -> Callable:
    @functools.wraps(original)
    def __init__(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        original(self, "devx" if device_type == "cuda" else device_type, *args, **kwargs)

    return __init__


def _autocast_state(original: Callable) -> Callable:
    """torch.is_autocast_enabled / get_autocast_dtype / set_autocast_enabled / set_autocast_dtype:
    "cuda" is devx, and so is no device at all (is_autocast_enabled(), set_autocast_enabled(bool)),
    which means CUDA there. torch.amp.custom_fwd/custom_bwd(device_type="cuda") ask these."""

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "device_type" in kwargs:
            kwargs["device_type"] = map_device(kwargs["device_type"])
        elif args and isinstance(args[0], str):
            args = (map_device(args[0]),) + args[1:]
        else:
            args = ("devx",) + args
        return original(*args, **kwargs)

    return wrapper


def _get_autocast_gpu_dtype(original: Callable) -> Callable:
    """torch.get_autocast_gpu_dtype(), CUDA's autocast dtype: devx's."""
    return functools.wraps(original)(lambda: torch.get_autocast_dtype("devx"))


def _set_autocast_gpu_dtype(original: Callable) -> Callable:
    return functools.wraps(original)(lambda dtype: torch.set_autocast_dtype("devx", dtype))


def _amp_cast(original: Callable) -> Callable:
    """custom_fwd(device_type="cuda", cast_inputs=...) casts the inputs whose device type is the
    one given: devx tensors are CUDA's."""

    @functools.wraps(original)
    def _cast(value: Any, device_type: str, dtype: torch.dtype) -> Any:
        return original(value, map_device(device_type), dtype)

    return _cast


def _profile_init(original: Callable) -> Callable:
    """torch.profiler.profile: ProfilerActivity.CUDA asks for the device's activities, as on CUDA."""
    from torch.profiler import ProfilerActivity

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, activities: Any = None, **kwargs: Any) -> None:
        if activities is not None:
            activities = [ProfilerActivity.PrivateUse1 if a == ProfilerActivity.CUDA else a for a in activities]
        original(self, *args, activities=activities, **kwargs)

    return __init__


def _supported_activities(original: Callable) -> Callable:
    from torch.profiler import ProfilerActivity

    @functools.wraps(original)
    def supported_activities() -> set:
        found = set(original())
        if ProfilerActivity.PrivateUse1 in found:
            found.add(ProfilerActivity.CUDA)
        return found

    return supported_activities


def _legacy_profile_init(original: Callable) -> Callable:
    """torch.autograd.profiler.profile(use_device="cuda") times devx ops."""

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("use_device") == "cuda":
            kwargs["use_device"] = "devx"
        original(self, *args, **kwargs)

    return __init__


def _process_group_backend(fn: Callable) -> Callable:
    """init_process_group / new_group: backend "nccl" (or none) runs the devx backend, device_id "cuda" is devx."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from . import distributed

        at = 0 if fn.__name__ == "init_process_group" else 2  # new_group(ranks, timeout, backend)
        if len(args) > at:
            args = args[:at] + (distributed.map_backend(args[at]),) + args[at + 1:]
        elif kwargs.get("backend") is not None:
            kwargs["backend"] = distributed.map_backend(kwargs["backend"])
        elif at == 0:
            # torch would pick the accelerator's backend for devx tensors only; devx serves both.
            kwargs["backend"] = distributed.BACKEND
        if "device_id" in kwargs:
            kwargs["device_id"] = map_device(kwargs["device_id"])
        logger.info("CUDA mocking: %s runs the devx process-group backend", fn.__name__)
        return fn(*args, **kwargs)

    return wrapper


def _tensor_cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> torch.Tensor:
    if isinstance(device, (str, torch.device)):
        device = map_device(device)
    return self.devx(device, non_blocking=non_blocking, **kwargs)


def _tensor_type(original: Callable) -> Callable:
    # The C method accepts only PyTorch's own typed-tensor classes and names; devx's (which mocking
    # puts in torch.cuda's place) are converted here, everything else goes to the original.
    @functools.wraps(original)
    def type_(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        target = args[0] if args else kwargs.get("dtype")
        cls = legacy_types.legacy_type(target)
        if cls is None:
            return original(self, *args, **kwargs)
        return legacy_types.convert(self, cls, non_blocking=kwargs.get("non_blocking", args[1] if len(args) > 1 else False))

    return type_


def _device_as_cuda(original: Any) -> property:
    def device(self: torch.Tensor) -> torch.device:
        real = real_device(self)
        return torch.device("cuda", real.index) if real.type == "devx" else real

    return property(device, doc="The tensor's device; a devx one reported as cuda (DEVX_DEVICE_AS_CUDA=1).")


def _pass_through_torch_refs(getter: Any) -> None:
    """TorchRefsMode(strict=True) lets through only the functions in torch_function_passthrough,
    which holds torch's own `Tensor.device` getter: devx's property getter joins it."""
    import torch._prims_common as prims_common

    passthrough = prims_common.torch_function_passthrough
    if getter not in passthrough:
        _effects.apply(_GROUP, "torch._prims_common.torch_function_passthrough: devx's Tensor.device getter",
                       lambda: passthrough.add(getter), lambda: passthrough.discard(getter))


def device_as_cuda_requested() -> bool:
    """DEVX_DEVICE_AS_CUDA (DIPU's DIPU_PYTHON_DEVICE_AS_CUDA accepted): report devx tensors' device as cuda."""
    return _environ.flag("DEVX_DEVICE_AS_CUDA", synonym="DIPU_PYTHON_DEVICE_AS_CUDA")


def _is_cuda(original: property) -> property:
    return property(lambda self: is_devx(self) or original.__get__(self))


def _generator_class(original: type) -> type:
    """torch.Generator with "cuda" meaning devx. torch makes a CUDA generator through its CUDA
    hooks, which `import torch` fixes (a CPU build's raise), so nothing below Python can take
    "cuda" here. The class only maps the device: what it makes is torch's own Generator, and
    isinstance/issubclass answer as for torch's, so TorchScript (which compares an annotation with
    `torch.Generator` when scripting), dynamo (which tests `type(g) is torch._C.Generator`) and
    C++ argument parsing see what they expect."""

    class _GeneratorMeta(type(original)):  # type: ignore[misc]
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, original)

        def __subclasscheck__(cls, sub: type) -> bool:
            return issubclass(sub, original)

    class Generator(original, metaclass=_GeneratorMeta):  # type: ignore[misc, valid-type]
        def __new__(cls, device: Any = "cpu") -> Any:
            return original(map_device(device))

    Generator.__module__ = original.__module__
    Generator.__name__ = Generator.__qualname__ = original.__name__
    Generator.__doc__ = original.__doc__
    return Generator


# Wrappers are made once, so that disable() then enable() puts back the very same objects.
_wrappers: dict[tuple[int, str], Any] = {}


def _patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    key = (id(owner), name)
    if key not in _wrappers:
        _wrappers[key] = make(getattr(owner, name))
    _effects.replace(_GROUP, owner, name, _wrappers[key])


def _has_nvtx() -> bool:
    stub = getattr(torch.cuda.nvtx, "_NVTXStub", None)
    return not (stub is not None and isinstance(torch.cuda.nvtx._nvtx, stub))


def enable() -> None:
    if enabled():
        return
    # Below Python where torch has no CUDA of its own (cuda_alias.h): factories and new_* stay
    # torch's builtins. Where it has (a CUDA build), "cuda" is a real device, and only wrappers
    # can redirect it.
    global _factories_wrapped
    _factories_wrapped = not _effects.apply(_GROUP, "ATen's CUDA dispatch key: a fallback that reruns on devx",
                                            _C._install_cuda_alias, _C._uninstall_cuda_alias)
    if _factories_wrapped:
        # torch.set_default_device's mode recognises factories by identity, from a set it builds
        # on first use: build it now, from the real functions, before they are wrapped.
        _device_constructors()
        for name in _FACTORIES:
            if hasattr(torch, name):
                _patch(torch, name, _device_kwarg)
        for module, names in _MORE_FACTORIES:
            owner = getattr(torch, module) if module else torch
            for name in names:
                if hasattr(owner, name):
                    _patch(owner, name, _device_kwarg)
        for name in _TENSOR_NEW:
            _patch(torch.Tensor, name, _device_kwarg)
    _patch(torch, "set_default_device", _device_first)
    _patch(torch, "Generator", _generator_class)
    _patch(torch, "load", _load)
    _patch(torch.autocast, "__init__", _autocast_init)
    for name in _AUTOCAST_STATE:
        _patch(torch, name, _autocast_state)
    # CUDA-only spellings deprecated by PyTorch, and custom_fwd's helper: patched where they exist.
    for owner, name, make in ((torch, "get_autocast_gpu_dtype", _get_autocast_gpu_dtype),
                              (torch, "set_autocast_gpu_dtype", _set_autocast_gpu_dtype),
                              (torch.amp.autocast_mode, "_cast", _amp_cast)):
        if hasattr(owner, name):
            _patch(owner, name, make)
    _patch(torch.profiler.profile, "__init__", _profile_init)
    _patch(torch.profiler, "supported_activities", _supported_activities)
    _patch(torch.autograd.profiler.profile, "__init__", _legacy_profile_init)
    _patch(torch.Tensor, "to", _to)
    _patch(torch.Tensor, "cuda", lambda original: _tensor_cuda)
    _patch(torch.Tensor, "is_cuda", _is_cuda)
    _patch(torch.Tensor, "type", _tensor_type)
    if device_as_cuda_requested():
        _patch(torch.Tensor, "device", _device_as_cuda)
        _pass_through_torch_refs(torch.Tensor.device.__get__)
    for name, cls in legacy_types.TYPES.items():
        _patch(torch.cuda, name, lambda original, cls=cls: cls)
    for name, binding in _cuda_c_api.BINDINGS.items():
        _effects.replace(_GROUP, torch._C, name, binding)
    _patch(torch.nn.Module, "to", _to)
    for name in _CUDA_FUNCS:
        _patch(torch.cuda, name, lambda original, name=name: getattr(device_module, name))
    if not _has_nvtx():
        for name in _NVTX_FUNCS:
            _patch(torch.cuda.nvtx, name, lambda original, name=name: getattr(nvtx, name))
    for name in _CUDA_MEMORY_FUNCS:
        _patch(torch.cuda.memory, name, lambda original, name=name: getattr(device_module.memory, name))
    _patch(torch.cuda, "memory_snapshot", lambda original: device_module.memory.memory_snapshot)
    if torch.distributed.is_available():
        _patch(torch.distributed, "init_process_group", _process_group_backend)
        _patch(torch.distributed, "new_group", _process_group_backend)


def disable() -> None:
    _effects.undo_group(_GROUP)


def enabled() -> bool:
    return _effects.active(_GROUP)


def reports_devx_as_cuda() -> bool:
    """Whether `Tensor.device` says "cuda" for devx tensors (DEVX_DEVICE_AS_CUDA=1 at enable())."""
    return enabled() and "device" in torch.Tensor.__dict__


def wraps_factories() -> bool:
    """Whether factories are Python wrappers (a torch built with CUDA) rather than torch's own
    builtins with "cuda" mapped below Python."""
    return enabled() and _factories_wrapped
