"""Legacy typed-tensor classes of devx (`torch.devx.FloatTensor`, ...), shaped like torch.cuda's.

PyTorch makes its `torch.cuda.FloatTensor`-style classes in C++ for the CPU and CUDA only, and a
torch built without CUDA refuses to construct its CUDA ones. These classes give devx the three
things old scripts do with them: construct (`torch.devx.FloatTensor([1.0])`, `...FloatTensor(2, 3)`),
test (`isinstance(x, torch.devx.FloatTensor)`) and convert (`x.type(torch.devx.FloatTensor)`, which
needs cuda_mock's `Tensor.type` wrapper because the C method accepts only its own classes). Under
CUDA mocking, `torch.cuda.FloatTensor` and its siblings are these classes.
"""
from __future__ import annotations

from typing import Any

import torch

from ._real_device import is_devx

_DTYPES = {
    "DoubleTensor": torch.float64,
    "FloatTensor": torch.float32,
    "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16,
    "ByteTensor": torch.uint8,
    "CharTensor": torch.int8,
    "ShortTensor": torch.int16,
    "IntTensor": torch.int32,
    "LongTensor": torch.int64,
    "BoolTensor": torch.bool,
}


class _LegacyTensorType(type):
    dtype: torch.dtype
    layout = torch.strided
    is_sparse = False
    is_cuda = True  # torch.cuda's classes say so, and mocking puts these in their place

    def __instancecheck__(cls, obj: Any) -> bool:
        return (isinstance(obj, torch.Tensor) and is_devx(obj) and obj.dtype == cls.dtype
                and obj.layout == torch.strided)

    def __call__(cls, *args: Any, device: Any = None) -> torch.Tensor:
        from .device_module import _index

        target = torch.device("devx", _index(device))
        if len(args) == 1 and isinstance(args[0], torch.Tensor):
            # As the CPU's classes: a tensor of this very type is returned as it is, another raises.
            if not isinstance(args[0], cls):
                raise TypeError(f"expected {cls.__module__}.{cls.__name__} (got {args[0].type()})")
            return args[0]
        if not args or all(isinstance(a, int) and not isinstance(a, bool) for a in args) or (
                len(args) == 1 and isinstance(args[0], torch.Size)):
            sizes = args[0] if len(args) == 1 and isinstance(args[0], torch.Size) else args or (0,)
            return torch.empty(sizes, dtype=cls.dtype, device=target)
        if len(args) == 1:
            return torch.tensor(args[0], dtype=cls.dtype, device=target)
        raise TypeError(f"{cls.__module__}.{cls.__name__}() takes sizes, a sequence of data or a tensor "
                        f"of its type, got {tuple(type(a).__name__ for a in args)}")

    def __repr__(cls) -> str:
        return f"<class '{cls.__module__}.{cls.__name__}'>"


def _make(name: str, dtype: torch.dtype) -> type:
    return _LegacyTensorType(name, (), {"dtype": dtype, "__module__": "torch.devx"})


TYPES: dict[str, type] = {name: _make(name, dtype) for name, dtype in _DTYPES.items()}
_BY_STRING = {f"torch.{prefix}.{name}": cls for name, cls in TYPES.items() for prefix in ("devx", "cuda")}


def legacy_type(arg: Any) -> Any:
    """The devx class that `arg` (one of these classes, or a "torch.cuda.XTensor"/"torch.devx.XTensor"
    name) stands for, or None."""
    if isinstance(arg, _LegacyTensorType):
        return arg
    if isinstance(arg, str):
        return _BY_STRING.get(arg)
    return None


def convert(tensor: torch.Tensor, cls: _LegacyTensorType, non_blocking: bool = False) -> torch.Tensor:
    """`tensor.type(cls)`: a devx tensor keeps its device (as a CUDA tensor keeps its GPU), any
    other moves to the current devx device; the result is `tensor` itself when nothing changes."""
    if is_devx(tensor):
        return tensor.to(dtype=cls.dtype, non_blocking=non_blocking)
    from .device_module import current_device

    return tensor.to(device=torch.device("devx", current_device()), dtype=cls.dtype, non_blocking=non_blocking)
