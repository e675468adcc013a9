"""Makes every switch a run-time switch: writes to os.environ are reported to the backend.

The C++ side caches parsed settings and re-reads them when told the environment changed, so
`os.environ["DIPU_FORCE_FALLBACK_OPS_LIST"] = "add.*"` takes effect at the next op. Only
os.environ is watched; os.putenv() bypasses Python's mapping and is not seen.
"""
from __future__ import annotations

import os

from . import _C

# Settings whose bad values should fail at the assignment, not at the next op.
_VALIDATORS = {
    "DEVX_LOG_LEVEL": _C._reload_log_levels,
    "DEVX_LOG_PATH": _C._reload_log_levels,
    "DIPU_FORCE_FALLBACK_OPS_LIST": lambda: _check_force_fallback_patterns(),
    "DIPU_DUMP_OP_ARGS": _C._refresh_diagnostics,
    "DEVX_DUMP_OP_ARGS_MAX_ELEMENTS": _C._refresh_diagnostics,
    "DIPU_AUTOCOMPARE": _C._refresh_diagnostics,
    "DIPU_AUTOCOMPARE_OPS_LIST": _C._refresh_diagnostics,
    "DIPU_AUTOCOMPARE_RAISE": _C._refresh_diagnostics,
    "DEVX_TRACE_RUNTIME": _C._trace_reload,
    "DIPU_MEM_CHECK": lambda: flag("DIPU_MEM_CHECK", default=False),
    "DIPU_MEM_CHECK_ENABLE_BACKTRACE": lambda: flag("DIPU_MEM_CHECK_ENABLE_BACKTRACE", default=False),
    "DIPU_MEM_CHECK_LOG_INTERVAL": lambda: count("DIPU_MEM_CHECK_LOG_INTERVAL", default=0),
    "DEVX_SIM_SANITIZE": lambda: flag("DEVX_SIM_SANITIZE", default=False),
}


def _check_force_fallback_patterns() -> None:
    from . import diagnostics  # imported after this module

    _C._refresh_diagnostics()
    diagnostics.check_force_fallback_patterns()


class _WatchedEnviron(os._Environ):  # type: ignore[name-defined]
    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key, value)
        _changed(key)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        _changed(key)


def _changed(key: str) -> None:
    _C._env_changed()
    validate = _VALIDATORS.get(key)
    if validate is not None:
        validate()


def watch() -> None:
    if not isinstance(os.environ, _WatchedEnviron):
        os.environ.__class__ = _WatchedEnviron


def flag(name: str, default: bool) -> bool:
    """A boolean switch: 1/0, true/false, on/off, yes/no; anything else is a ValueError."""
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "on", "yes"):
        return True
    if raw in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean; use 1/0, true/false, on/off or yes/no")


def count(name: str, default: int) -> int:
    """A non-negative integer setting; anything else is a ValueError."""
    raw = os.environ.get(name, "").strip()
    if raw == "":
        return default
    if not raw.isdigit():
        raise ValueError(f"{name}={raw!r} is not a non-negative integer")
    return int(raw)
