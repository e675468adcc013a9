"""Finding vendor libraries: nothing here names a vendor.

A vendor is a shared library `libdevx_vendor_<name>.so` exporting `devx_vendor_get_api`
(csrc/runtime/vendor_api.h). `DEVX_VENDOR` picks one:
  * a path (`/opt/acme/libdevx_vendor_acme.so`): that file;
  * a name (`acme`): the first `libdevx_vendor_acme.so` in the directories of `DEVX_VENDOR_PATH`
    (separated by `os.pathsep`), then a vendor package's entry point `acme` in the group
    `torch_devx.vendors` (its value: a string path, or a function returning one), then this package;
  * unset: every vendor found in those places; the core initialises them in the order of the
    priority each declares (hardware before simulators) and keeps the first that works.
"""
from __future__ import annotations

import glob
import importlib.metadata
import os
from typing import Callable

ENTRY_POINT_GROUP = "torch_devx.vendors"
_PREFIX, _SUFFIX = "libdevx_vendor_", ".so"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _search_dirs() -> list[str]:
    return [d for d in os.environ.get("DEVX_VENDOR_PATH", "").split(os.pathsep) if d.strip()]


def _entry_points() -> dict[str, Callable[[], str]]:
    found = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        def load(ep: importlib.metadata.EntryPoint = ep) -> str:
            target = ep.load()
            path = target() if callable(target) else target
            if not isinstance(path, (str, os.PathLike)):
                raise ValueError(f"entry point {ep.name!r} of {ENTRY_POINT_GROUP} ({ep.value}) gave {path!r}, "
                                 "not the path of a vendor library")
            return os.fspath(path)
        found.setdefault(ep.name, load)
    return found


def _in_dir(directory: str, name: str) -> str | None:
    path = os.path.join(directory, f"{_PREFIX}{name}{_SUFFIX}")
    return path if os.path.isfile(path) else None


def _all_in_dir(directory: str) -> dict[str, str]:
    found = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(directory), f"{_PREFIX}*{_SUFFIX}"))):
        found[os.path.basename(path)[len(_PREFIX):-len(_SUFFIX)]] = path
    return found


def candidates(requested: str) -> tuple[list[str], bool]:
    """The vendor libraries to try for DEVX_VENDOR=`requested`, and whether one was asked for by
    name or path (then it must load; otherwise the first that initialises wins)."""
    requested = requested.strip()
    if requested:
        if os.sep in requested or requested.endswith(_SUFFIX):
            if not os.path.isfile(requested):
                raise ValueError(f"DEVX_VENDOR={requested!r}: no such vendor library")
            return [os.path.abspath(requested)], True
        for directory in _search_dirs():
            if path := _in_dir(directory, requested):
                return [path], True
        if load := _entry_points().get(requested):
            return [load()], True
        if path := _in_dir(_PACKAGE_DIR, requested):
            return [path], True
        known = sorted(available())
        raise ValueError(
            f"DEVX_VENDOR={requested!r} is not a vendor found here (known: {', '.join(known) or 'none'}); "
            f"looked for {_PREFIX}{requested}{_SUFFIX} in DEVX_VENDOR_PATH ({os.environ.get('DEVX_VENDOR_PATH', '')!r}), "
            f"the entry points of {ENTRY_POINT_GROUP!r} and {_PACKAGE_DIR}; DEVX_VENDOR also takes a library's path")
    return list(available().values()), False


def available() -> dict[str, str]:
    """Every vendor found, by name (earlier places first, as for DEVX_VENDOR=name)."""
    found: dict[str, str] = {}
    for directory in _search_dirs():
        for name, path in _all_in_dir(directory).items():
            found.setdefault(name, path)
    for name, load in _entry_points().items():
        if name not in found:
            try:
                found[name] = load()
            except Exception:  # a broken vendor package must not hide the others
                continue
    for name, path in _all_in_dir(_PACKAGE_DIR).items():
        found.setdefault(name, path)
    return found
