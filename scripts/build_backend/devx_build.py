"""The PEP 517 build backend of torch_devx: setuptools', plus the torch to build against.

A C++ extension of torch must be compiled against the torch it will run with. Under build
isolation (pip's default) the build happens in a temporary environment that sees none of the
user's packages, so a plain `torch` requirement there would take whatever release pip finds
newest. Instead, when the environment pip installs into already has torch, the build requires
exactly that release (`torch==2.13.0`): the extension matches the user's torch, and the wheel's
pin (setup.py: `torch==X.Y.*`) keeps pip from replacing it. Without torch there, it takes the
newest supported release and the wheel pins that one.

`pip install --no-build-isolation ...` skips all this and builds against the torch installed.
"""
from __future__ import annotations

import os
import subprocess
import sys

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the other hooks, unchanged)

SUPPORTED_TORCH = ">=2.11,<2.15"


def _target_torch() -> str | None:
    """The torch release in the environment pip installs into. The hooks run under that
    environment's interpreter with pip's isolated paths on PYTHONPATH; `-I` leaves those out."""
    probe = "import importlib.metadata as m; print(m.version('torch'))"
    try:
        out = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=120,
                             env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip().split("+", 1)[0] or None


def _torch_requirement() -> str:
    version = _target_torch()
    return f"torch=={version}" if version else f"torch{SUPPORTED_TORCH}"


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) + [_torch_requirement()]


def get_requires_for_build_editable(config_settings=None):
    return _setuptools.get_requires_for_build_editable(config_settings) + [_torch_requirement()]
