"""Prints what the build needs to know about the torch that this interpreter imports, as
`KEY=value` lines (a key with several values has one line per value).

CMakeLists.txt reads it instead of TorchConfig.cmake: the CUDA builds of torch ship a TorchConfig
that requires a CUDA toolkit, which devx's core never uses (it links torch's CPU side only), and a
CMake cache would keep the first torch it found.
"""
import os

import torch
import torch.distributed as dist
import torchgen
from torch.utils.cpp_extension import include_paths, library_paths

lines = [("VERSION", torch.__version__), ("LIBRARY_DIR", library_paths()[0]),
         ("CXX11_ABI", str(int(torch._C._GLIBCXX_USE_CXX11_ABI)))]
lines += [("INCLUDE_DIRS", path) for path in include_paths()]
# TorchConfig passes these on from torch_cpu's build options; torch's headers (Exceptions.h, the
# pickler, c10d) change with them, so an extension must see the same ones.
if dist.is_available():
    lines.append(("DEFINITIONS", "USE_DISTRIBUTED"))
    if dist.is_gloo_available():
        lines.append(("DEFINITIONS", "USE_C10D_GLOO"))
    from torch.distributed import rpc

    if rpc.is_available():
        lines.append(("DEFINITIONS", "USE_RPC"))
        if hasattr(torch._C._distributed_rpc, "TensorPipeAgent"):
            lines.append(("DEFINITIONS", "USE_TENSORPIPE"))
# The op model the generated wrappers are made from.
packaged = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native")
lines += [("OP_MODEL", os.path.join(packaged, name)) for name in ("native_functions.yaml", "tags.yaml")]
for key, value in lines:
    print(f"{key}={value}")
