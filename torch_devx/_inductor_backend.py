"""torch.compile on devx: the dynamo device interface and inductor's code generators for devx.

Dynamo gets the interface when it is imported (an import hook, see __init__). Inductor looks the
code generators up on the device module (torch.devx.Scheduling, .PythonWrapperCodegen,
.CppWrapperCodegen, .WrapperFxCodegen) the first time it compiles for devx; device_module's
__getattr__ lands here, so importing torch_devx does not import dynamo or inductor.

A vendor that computes with CUDA kernels gets the Triton generator: its kernels take the devx
buffers' device pointers and run on the current devx stream (get_raw_stream), and the wrapper code
allocates buffers with device="devx", from the devx caching allocator. A vendor computing with CPU
kernels (cpu_sim) gets a clear error pointing at backend="aot_eager" (see codegen_class).
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from . import _C

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
