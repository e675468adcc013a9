"""On a vendor that computes with ATen's CUDA kernels (the cuda vendor), those kernels allocate
their results and workspaces from devx memory.

ATen's CUDA kernels allocate through CUDA's caching allocator, which torch lets a process replace
by two C functions (``torch.cuda.memory.CUDAPluggableAllocator``). Installing devx's there means
one pool per GPU (the devx caching allocator, whose statistics ``torch.cuda.memory_allocated``
reports under mocking) and no copy of each op's result into devx memory.

It has to happen before CUDA's own allocator serves its first allocation. When something used
CUDA before ``import torch_devx``, it cannot: devx then copies each op's result into devx memory,
correct but slower, and says so once.

Torch's pluggable allocator has no record_stream, which ProcessGroupNCCL uses to keep its own
buffers from being reused while its stream still reads them; TORCH_NCCL_AVOID_RECORD_STREAMS=1
(unless set otherwise) makes it keep them alive until the collective is waited on instead.
"""
from __future__ import annotations

import os
import warnings

import torch

from . import _C, _effects

# c10::DeviceType::CUDA
_CUDA = 1


def install() -> bool:
    """Routes the compute device's allocations to devx; False (with a warning) where it cannot."""
    if _C._compute_device_type() != _CUDA or not torch.backends.cuda.is_built():
        return False
    from torch.cuda import memory

    allocator = memory.CUDAPluggableAllocator(_C.__file__, "devx_compute_malloc", "devx_compute_free")
    try:
        memory.change_current_allocator(allocator)
    except RuntimeError as error:
        warnings.warn(
            f"torch_devx: CUDA's caching allocator was already in use before `import torch_devx` ({error}); "
            "each devx op's result is copied from it into devx memory, which is slower. Import torch_devx "
            "before anything uses CUDA.",
            stacklevel=2,
        )
        return False
    _effects.permanent("allocator", "CUDA's allocator: devx's caching allocator (CUDAPluggableAllocator)",
                       "torch allows one change of CUDA's allocator, before its first allocation")
    _C._route_compute_allocations()
    if "TORCH_NCCL_AVOID_RECORD_STREAMS" not in os.environ:
        _effects.apply("allocator", "environment: TORCH_NCCL_AVOID_RECORD_STREAMS=1",
                       lambda: os.environ.__setitem__("TORCH_NCCL_AVOID_RECORD_STREAMS", "1"),
                       lambda: os.environ.pop("TORCH_NCCL_AVOID_RECORD_STREAMS", None))
    return True
