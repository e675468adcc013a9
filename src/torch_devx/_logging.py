"""One logger for C++ and Python: records of the `torch_devx` logger (and its children) go to the
backend's logger, so DEVX_LOG_LEVEL and DEVX_LOG_PATH govern both and the lines look alike."""
from __future__ import annotations

import logging

from . import _C

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


def install() -> None:
    logger = logging.getLogger("torch_devx")
    if not any(isinstance(h, _BackendHandler) for h in logger.handlers):
        logger.addHandler(_BackendHandler())
    # The backend filters by DEVX_LOG_LEVEL; let every record reach it.
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
