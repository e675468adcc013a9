"""The benchmarks' timing loops in C++ (bench/ext: no Python in the loop), built on demand.

The extension is not part of the package: it is the CMake target torch_devx_bench of the build
folder `make build` made (DEVX_BUILD_DIR, default build/), built here when first needed and loaded
against the libdevx_core.so that `import torch_devx` loaded.
"""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import torch_devx  # noqa: F401  (the core is loaded and initialised before the extension)

REPO = Path(__file__).resolve().parents[1]


def load() -> ModuleType:
    build = Path(os.environ.get("DEVX_BUILD_DIR", REPO / "build"))
    if not (build / "CMakeCache.txt").exists():
        raise RuntimeError(f"bench: no CMake build folder at {build}; run `make build` first")
    cmake = shutil.which("cmake", path=os.path.dirname(sys.executable)) or "cmake"
    subprocess.run([cmake, "--build", str(build), "--target", "torch_devx_bench"], check=True,
                   stdout=subprocess.DEVNULL)
    sys.path.insert(0, str(build / "bench"))
    return importlib.import_module("torch_devx_bench")
