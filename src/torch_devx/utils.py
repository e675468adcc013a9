"""Where vendor authors find what they build against (see the README, "Writing a vendor")."""
from __future__ import annotations

import os

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

#: For CMake's CMAKE_PREFIX_PATH: `find_package(torch_devx)` then gives torch_devx::vendor_headers.
cmake_prefix_path: str = os.path.join(_PACKAGE_DIR, "share", "cmake")


def get_include() -> str:
    """The directory of vendor_api.h, devx_kernel_abi.h and devx_kernels.h."""
    return os.path.join(_PACKAGE_DIR, "include")
