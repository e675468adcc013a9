"""Files the diagnostics tools write and read, safe against links planted in their place.

Dump folders, reports and repro folders are often written under shared or world-writable places
(/tmp, a team's scratch space). A symlink planted where a report or a step folder will be written
must not redirect the write to the link's target, and a dump.json read by compare must not name
data outside its own dump. Files are written to a fresh temporary name in their folder and renamed
into place (a rename replaces a link, it never follows it); folders the tools create or reuse are
refused when they are links.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from typing import IO, Iterator

__all__ = ["inside", "make_dir", "write_file"]

# Temporary files are created private (0600); the files they become get the usual permissions.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def make_dir(path: str) -> str:
    """Creates folder `path` (and missing parents) or reuses it; a link in its place is a ValueError."""
    if not os.path.islink(path):
        os.makedirs(path, exist_ok=True)
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        raise ValueError(f"{path!r} is a symbolic link or a file, not a folder: refusing to write through it")
    return path


@contextlib.contextmanager
def write_file(path: str, mode: str = "w", **open_args) -> Iterator[IO]:
    """Opens a fresh temporary file next to `path` for writing; on success it replaces `path`
    (which may be a link planted there: the link is replaced, its target untouched)."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, mode, **open_args) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def inside(folder: str, rel: str, what: str) -> str:
    """The path of `rel` (named by a file of `folder`, described by `what`) if it stays inside
    `folder` once links are resolved; otherwise a ValueError."""
    root = os.path.realpath(folder)
    path = os.path.realpath(os.path.join(folder, rel))
    if os.path.isabs(rel) or os.path.commonpath([root, path]) != root:
        raise ValueError(f"{what} names {rel!r}, which is outside {folder}: refusing to read it")
    return path
