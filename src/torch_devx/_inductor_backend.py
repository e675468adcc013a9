"""torch.compile on devx: the dynamo device interface and inductor's code generators for devx.

Dynamo gets the interface when it is imported (an import hook, see __init__). Inductor looks the
code generators up on the device module (torch.devx.Scheduling, .PythonWrapperCodegen,
.CppWrapperCodegen, .WrapperFxCodegen) the first time it compiles for devx; device_module's
__getattr__ lands here, so importing torch_devx does not import dynamo or inductor.

A vendor that computes with CUDA kernels gets the Triton generator: its kernels take the devx
buffers' device pointers and run on the current devx stream (get_raw_stream), and the wrapper code
allocates buffers with device="devx", from the devx caching allocator. A vendor computing with CPU
kernels (cpu_sim) gets a clear error pointing at backend="aot_eager" (see codegen_class), and a
default backend that runs devx graphs with aot_eager (see install_default_backend).
"""
from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any, Optional

import torch
import torch.utils._pytree as pytree

from . import _C, _effects
from ._real_device import is_devx

_CODEGEN_NAMES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")
_CPU, _CUDA = 0, 1  # c10::DeviceType values of the vendor's compute device


def codegen_class(name: str) -> Any:
    _register_device_op_overrides()
    if _C._compute_device_type() != _CUDA:
        return _Unsupported
    from torch._inductor.codegen.cpp_wrapper_gpu import CppWrapperGpu
    from torch._inductor.codegen.triton import TritonScheduling
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    classes = {"Scheduling": TritonScheduling, "PythonWrapperCodegen": PythonWrapperCodegen,
               "CppWrapperCodegen": CppWrapperGpu, "WrapperFxCodegen": WrapperFxCodegen}
    return classes[name]


class _RaiseOnUse(type):
    # Inductor reads class attributes (supports_caching, ...) before it builds anything.
    def __getattr__(cls, name: str) -> Any:
        raise RuntimeError(_Unsupported.message())


class _Unsupported(metaclass=_RaiseOnUse):
    """What inductor gets for devx on a vendor computing with CPU kernels (cpu_sim).

    Inductor's C++ generator could run on cpu_sim's host-addressable memory, but inductor decides
    fusion and loop reindexing by `device.type == "cpu"` in dozens of places, so a devx graph gets
    GPU-only rewrites its C++ kernels cannot take (seen failing on reductions and dynamic shapes).
    Say so at the first thing inductor builds, instead of failing deep inside its scheduler.
    (Raised from here, not from device_module.__getattr__: inductor swallows RuntimeError there.)
    """

    @staticmethod
    def message() -> str:
        return (
            f"torch.compile: inductor cannot generate kernels for devx on the {_C._vendor_name()!r} vendor "
            "(it computes with CPU kernels, and inductor generates C++ kernels only for device 'cpu'). "
            "Use torch.compile(model, backend='aot_eager'): the graph is captured, autograd is traced "
            "ahead of time, and devx runs every op."
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(self.message())

    @staticmethod
    def create(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(_Unsupported.message())


def install_default_backend(_registry: ModuleType) -> None:
    """On a vendor computing with CPU kernels, makes devx_default_backend torch.compile's default
    (the backend used when none is given), as torch._dynamo.backends.registry, which holds the
    default, is imported. Through torch.compiler.set_default_backend, PyTorch's hook for this
    (a PyTorch without it keeps inductor as the default, and its clear error for devx graphs);
    a default chosen before is left alone, and set_default_backend(None) gives inductor back."""
    if _C._compute_device_type() == _CUDA or not hasattr(torch.compiler, "set_default_backend"):
        return
    if torch.compiler.get_default_backend() == "inductor":
        _effects.apply("torch.compile", "torch.compiler's default backend: devx_default_backend (aot_eager for devx graphs)",
                       lambda: torch.compiler.set_default_backend(devx_default_backend), _give_inductor_back)


def _give_inductor_back() -> None:
    """Only where the default is still ours: a default the user chose since stays."""
    if torch.compiler.get_default_backend() is devx_default_backend:
        torch.compiler.set_default_backend(None)


def devx_default_backend(gm: torch.fx.GraphModule, example_inputs: list, mode: Optional[str] = None,
                         options: Optional[dict] = None) -> Any:
    """Graphs holding devx tensors run with aot_eager (inductor has no code generator for them;
    a warning says so once); every other graph compiles with inductor, its mode and options, as
    with inductor as the default."""
    from . import cuda_mock

    if cuda_mock.reports_devx_as_cuda() and _holds_tensors_of(gm, example_inputs, "cuda"):
        # Dynamo reads devices through Tensor.device, so it traced devx tensors as CUDA ones.
        raise RuntimeError("torch.compile cannot compile graphs of devx tensors while DEVX_DEVICE_AS_CUDA=1 "
                           "reports them as cuda tensors (dynamo traced them as CUDA); use backend='eager' or "
                           "unset DEVX_DEVICE_AS_CUDA")
    if not _holds_devx_tensors(gm, example_inputs):
        return torch._TorchCompileInductorWrapper(mode, options, None)(gm, example_inputs)
    _warn_once_about_aot_eager(mode, options)
    from torch._dynamo.backends.registry import lookup_backend

    return lookup_backend("aot_eager")(gm, example_inputs)


def _graph_values(gm: torch.fx.GraphModule, example_inputs: list) -> list:
    # Inputs, and the values dynamo recorded for every node (a factory may make a devx tensor).
    values = [node.meta.get("example_value") for node in gm.graph.nodes] + list(example_inputs)
    return [v for v in pytree.tree_leaves(values) if isinstance(v, torch.Tensor)]


def _holds_devx_tensors(gm: torch.fx.GraphModule, example_inputs: list) -> bool:
    return any(is_devx(v) for v in _graph_values(gm, example_inputs))


def _holds_tensors_of(gm: torch.fx.GraphModule, example_inputs: list, device_type: str) -> bool:
    return any(v.device.type == device_type for v in _graph_values(gm, example_inputs))


_warned_about_aot_eager = False


def _warn_once_about_aot_eager(mode: Optional[str], options: Optional[dict]) -> None:
    global _warned_about_aot_eager
    if _warned_about_aot_eager:
        return
    _warned_about_aot_eager = True
    ignored = " (the mode and options given are inductor's and do not apply)" if mode or options else ""
    warnings.warn(
        f"torch.compile: the default backend, inductor, has no code generator for devx on the "
        f"{_C._vendor_name()!r} vendor (it computes with CPU kernels, and inductor generates C++ kernels "
        f"only for device 'cpu'), so graphs with devx tensors run with backend='aot_eager'{ignored}: "
        "the graph is captured, autograd is traced ahead of time, and devx runs every op. "
        "Pass backend='aot_eager' (or 'eager') to torch.compile to choose a backend and silence this warning.",
        UserWarning,
    )


_op_overrides_registered = False


def _register_device_op_overrides() -> None:
    """The lines inductor's wrapper code writes to pick a device, wait for it, or get its stream."""
    global _op_overrides_registered
    if _op_overrides_registered:
        return
    from torch._inductor.codegen.common import register_device_op_overrides
    from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides

    class DevxDeviceOpOverrides(CpuDeviceOpOverrides):
        def import_get_raw_stream_as(self, name: str) -> str:
            return f"from torch_devx._C import _raw_stream as {name}"

        def set_device(self, device_idx: int) -> str:
            return f"torch.devx.set_device({device_idx})"

        def synchronize(self) -> str:
            return "torch.devx.synchronize()"

        def device_guard(self, device_idx: int) -> str:
            return f"torch.devx.device({device_idx})"

    register_device_op_overrides("devx", DevxDeviceOpOverrides())
    _op_overrides_registered = True


def register_device_interface(device_interface: ModuleType) -> None:
    """Dynamo's interface to the devx device, registered as torch._dynamo.device_interface is
    imported (see __init__): dynamo asks for it while it compiles a graph with devx tensors."""
    devx = torch.devx

    class DevxInterface(device_interface.DeviceInterface):
        device = devx.device
        Event = devx.Event  # type: ignore[assignment]
        Stream = devx.Stream  # type: ignore[assignment]

        class Worker:
            set_device = staticmethod(devx.set_device)
            current_device = staticmethod(devx.current_device)
            get_device_properties = staticmethod(devx.get_device_properties)

        current_device = staticmethod(devx.current_device)
        set_device = staticmethod(devx.set_device)
        device_count = staticmethod(devx.device_count)
        is_available = staticmethod(devx.is_available)
        stream = staticmethod(devx.stream)
        current_stream = staticmethod(devx.current_stream)
        set_stream = staticmethod(devx.set_stream)
        synchronize = staticmethod(devx.synchronize)
        get_device_properties = staticmethod(devx.get_device_properties)
        memory_allocated = staticmethod(devx.memory_allocated)
        is_bf16_supported = staticmethod(lambda including_emulation=False: devx.is_bf16_supported())

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            return DevxInterface.exchange_device(device)

        @staticmethod
        def exchange_device(device: int) -> int:
            previous = devx.current_device()
            if device >= 0 and device != previous:
                devx.set_device(device)
            return previous

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
            devx.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return _C._raw_stream(device_idx)

        @staticmethod
        def get_compute_capability(device: Any = None) -> str:
            props = devx.get_device_properties(device)
            return f"{props.major}{props.minor}"

        @staticmethod
        def is_triton_capable(device: Any = None) -> bool:
            return _C._compute_device_type() == _CUDA

    device_interface.register_interface_for_device("devx", DevxInterface)
    for index in range(devx.device_count()):
        device_interface.register_interface_for_device(f"devx:{index}", DevxInterface)
    _effects.permanent("the devx device", "torch._dynamo: the devx device interface",
                       "dynamo has no way to unregister a device interface; only devx graphs use it")
