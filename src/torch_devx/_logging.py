"""One logger for C++ and Python: records of the `torch_devx` logger (and its children) go to the
backend's logger, so DEVX_LOG_LEVEL and DEVX_LOG_PATH govern both and the lines look alike.

The logger is not otherwise reconfigured: it still propagates to the user's handlers, and its level
is the user's unless DEVX_LOG_LEVEL sets the PYTHON module's level (from the environment or the
API), which the logger then follows so that the records asked for reach the backend."""
from __future__ import annotations

import logging

from . import _C, _effects, _environ

_GROUP = "logging"
_LOGGER = "torch_devx"

# logging's levels -> the backend's (TRACE=0, DEBUG=1, INFO=2, WARN=3, ERROR=4).
_LEVELS = ((logging.ERROR, 4), (logging.WARNING, 3), (logging.INFO, 2), (logging.DEBUG, 1))


def _backend_level(levelno: int) -> int:
    for threshold, level in _LEVELS:
        if levelno >= threshold:
            return level
    return 0


class _BackendHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        level = _backend_level(record.levelno)
        if _C._log_enabled("PYTHON", level):
            _C._log("PYTHON", level, f"{record.name}: {self.format(record)}")


def _python_level() -> int:
    """The logging level matching the lowest backend level enabled for the PYTHON module."""
    for level, levelno in enumerate((logging.DEBUG, logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)):
        if _C._log_enabled("PYTHON", level):
            return levelno
    return logging.CRITICAL


def install() -> None:
    logger = logging.getLogger(_LOGGER)
    handler = _BackendHandler()
    _effects.apply(_GROUP, f"logging: a handler on the {_LOGGER!r} logger that writes to the backend's log",
                   lambda: logger.addHandler(handler), lambda: logger.removeHandler(handler))
    users_level = logger.level

    def follow_log_level() -> None:
        from_settings = _environ.source("DEVX_LOG_LEVEL") != "default"
        logger.setLevel(_python_level() if from_settings else users_level)

    def stop_following() -> None:
        _environ.remove_python_listener("DEVX_LOG_LEVEL", follow_log_level)
        logger.setLevel(users_level)

    def start_following() -> None:
        follow_log_level()
        _environ.add_python_listener("DEVX_LOG_LEVEL", follow_log_level)

    _effects.apply(_GROUP, f"logging: the {_LOGGER!r} logger's level follows DEVX_LOG_LEVEL's PYTHON level where set",
                   start_following, stop_following)
