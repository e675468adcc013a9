"""Python API of the backend's diagnostics (each mirrors an environment switch)."""
from __future__ import annotations

import os

from . import _C


def fallback_stats() -> dict[str, int]:
    """Calls per op that ran on the CPU fallback ("add.out" -> count)."""
    return dict(_C._fallback_stats())


def reset_fallback_stats() -> None:
    _C._reset_fallback_stats()


def set_force_fallback(patterns: list[str] | None) -> None:
    """Force ops matching any regex (overload names like 'add.out' or base names like 'conv2d')
    to the CPU fallback; None or [] turns it off. Same as DIPU_FORCE_FALLBACK_OPS_LIST."""
    patterns = [p.strip() for p in (patterns or []) if p.strip()]
    for p in patterns:
        if "," in p:
            raise ValueError(f"force-fallback pattern {p!r} contains ','; pass each pattern separately")
        _C._validate_pattern(p)
    os.environ["DIPU_FORCE_FALLBACK_OPS_LIST"] = ",".join(patterns)


def force_fallback() -> list[str]:
    """The force-fallback patterns in effect."""
    return list(_C._force_fallback_patterns())


def coverage() -> dict[str, str]:
    """For every aten op devx registers: 'vendor' (the vendor's own kernel), 'aten' (ATen's kernel
    of the vendor's compute device on devx memory, through a generated wrapper), 'aten-boxed' (the
    same through the one boxed kernel of the long tail) or 'fallback' (the CPU fallback)."""
    return dict(_C._coverage())
