"""Settings: the environment configures a process at launch and its children; the Python API
(`diagnostics.set_*`, `set`) changes this process only.

Every setting is declared once, in C++ (csrc/runtime/settings_table.h), and parsed there. Writes
to the environment made from Python reach the backend through `os.putenv`/`os.unsetenv`, which
`os.environ` calls for every change: a write to a setting validates it (a ValueError at the
assignment) and runs only its listeners, so it takes effect at the next op; a write to any other
variable costs one dictionary lookup. `os.environ` itself stays the standard mapping.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional

from . import _C, _effects

# Python-side listeners run after the backend took a new value.
_PYTHON_LISTENERS: dict[str, list[Callable[[], None]]] = {}

_original_putenv = os.putenv
_original_unsetenv = os.unsetenv


def _name(key: Any) -> str:
    return os.fsdecode(key) if isinstance(key, (bytes, str)) else str(key)


def _putenv(key: Any, value: Any) -> None:
    name = _name(key)
    previous = os.environ.get(name)  # os.environ updates its mapping after this call returns
    _original_putenv(key, value)
    try:
        _changed(name)
    except BaseException:
        # A rejected value does not stay in the environment (nor, as this raises before it
        # updates its mapping, in os.environ), where children and later reads would meet it.
        if previous is None:
            _original_unsetenv(key)
        else:
            _original_putenv(key, previous)
        _C._env_changed(name)
        raise


def _unsetenv(key: Any) -> None:
    _original_unsetenv(key)
    _changed(_name(key))


def _run_python_listeners(name: str) -> None:
    for listener in list(_PYTHON_LISTENERS.get(name, ())):
        listener()


def _changed(name: str) -> None:
    _C._env_changed(name)
    _run_python_listeners(name)


def watch() -> None:
    """Start reporting environment writes to the backend (at import; undone by uninstall())."""
    _effects.replace("settings", os, "putenv", _putenv)
    _effects.replace("settings", os, "unsetenv", _unsetenv)


def add_python_listener(name: str, listener: Callable[[], None]) -> None:
    _PYTHON_LISTENERS.setdefault(name, []).append(listener)


def remove_python_listener(name: str, listener: Callable[[], None]) -> None:
    _PYTHON_LISTENERS.get(name, []).remove(listener)


def entries() -> list[tuple[str, str, str, str]]:
    """(name, value, source, help) of every setting; source is "default", "environment" or "api"."""
    return [tuple(entry) for entry in _C._settings()]


def source(name: str) -> str:
    for entry in _C._settings():
        if entry[0] == name:
            return entry[2]
    raise ValueError(f"{name!r} is not a torch_devx setting")


def flag(name: str, synonym: Optional[str] = None) -> bool:
    """A boolean setting's value (a ValueError naming it when its text is no boolean). `synonym`
    (DIPU's name of the same switch) decides where `name` itself was not set."""
    if synonym is not None and source(name) == "default" and source(synonym) != "default":
        return _C._setting_bool(synonym)
    return _C._setting_bool(name)


def set_value(name: str, text: Optional[str]) -> None:
    """Set a setting for this process only (None: back to the environment or the default)."""
    _C._set_setting(name, text)
    _run_python_listeners(name)
