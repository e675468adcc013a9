"""Which Python frames are library code and which are the user's.

Every report that names "the user's line" (autocompare's "called from", the memory checker's and
sanitizer's "allocated at", the sync summary, the dump and divergence tools) asks this module. A
file is library code when it lies under the real location of an installed package that the user
does not write: torch, torch_devx, Python's standard library and the site-packages folders. Folder
*names* prove nothing: a user's project may well live in a folder called `torch` or `torch_devx`.
"""
from __future__ import annotations

import os
import site
import sys
import sysconfig
from types import FrameType
from typing import Optional

import torch


def _library_dirs() -> tuple[str, ...]:
    dirs = {os.path.dirname(os.path.abspath(torch.__file__)), os.path.dirname(os.path.abspath(__file__))}
    paths = sysconfig.get_paths()
    dirs.update(paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths)
    dirs.update(site.getsitepackages())
    if site.ENABLE_USER_SITE and site.getusersitepackages():
        dirs.add(site.getusersitepackages())
    out = set()
    for d in dirs:
        # Both spellings: a frame's file name is the path it was imported through, which may or may
        # not go through a symlink.
        for spelling in (os.path.abspath(d), os.path.realpath(d)):
            out.add(spelling.rstrip(os.sep) + os.sep)
    return tuple(sorted(out))


LIBRARY_DIRS = _library_dirs()


def is_library_file(filename: str) -> bool:
    """True for a file of torch, torch_devx, the standard library or site-packages, and for
    Python's frozen and built-in code objects ("<frozen runpy>")."""
    if filename.startswith("<frozen ") or filename.startswith("<built-in"):
        return True
    return os.path.abspath(filename).startswith(LIBRARY_DIRS)


def user_frame(start: Optional[FrameType] = None) -> Optional[FrameType]:
    """The innermost frame, from `start` (default: the caller's) outwards, whose file is the user's."""
    frame = start if start is not None else sys._getframe(1)
    while frame is not None:
        if not is_library_file(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


def user_stacklevel() -> int:
    """The `stacklevel` for warnings.warn, called from the caller of this function, that names
    the user's line (1 when no frame is the user's)."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        if not is_library_file(frame.f_code.co_filename):
            return level
        frame, level = frame.f_back, level + 1
    return 1


def _child_name(parent: torch.nn.Module, child: torch.nn.Module) -> Optional[str]:
    for name, module in parent._modules.items():
        if module is child:
            return name
    # Called through a container the parent does not call (a ModuleList's items).
    return next((name for name, module in parent.named_modules() if module is child and name), None)


def module_path(start: Optional[FrameType] = None) -> str:
    """The innermost nn.Module whose method is running on this thread's Python stack, as
    "path (Class)": the attribute path from the outermost running module ("Class" alone for that
    one); "" outside any module. For reports whose line is shared by every layer of a kind."""
    chain: list[torch.nn.Module] = []
    frame = start if start is not None else sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_argcount and code.co_varnames[0] == "self":
            owner = frame.f_locals.get("self")
            if isinstance(owner, torch.nn.Module) and (not chain or chain[-1] is not owner):
                chain.append(owner)
        frame = frame.f_back
    if not chain:
        return ""
    chain.reverse()
    names: list[str] = []
    for parent, child in zip(chain, chain[1:]):
        name = _child_name(parent, child)
        if name is None:  # not a submodule of the one that called it: a path starts again
            names = []
        else:
            names.append(name)
    path = ".".join(names)
    cls = type(chain[-1]).__name__
    return f"{path} ({cls})" if path else cls
