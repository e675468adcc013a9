"""The device a tensor is really on, whatever `Tensor.device` reports.

With DEVX_DEVICE_AS_CUDA=1, `Tensor.device` says "cuda" for devx tensors (cuda_mock), so that user
code branching on `x.device.type == "cuda"` takes its CUDA path. torch_devx's own code must still
tell devx tensors apart, and reads the C property underneath.
"""
from __future__ import annotations

import torch

_device_of = torch._C.TensorBase.device.__get__


def real_device(tensor: torch.Tensor) -> torch.device:
    return _device_of(tensor)


def is_devx(tensor: torch.Tensor) -> bool:
    return _device_of(tensor).type == "devx"
