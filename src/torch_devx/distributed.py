"""torch.distributed on devx: the `devx` process-group backend.

`dist.init_process_group("devx")` (or, under CUDA mocking, an unchanged `"nccl"`) gives a process
group whose collectives on devx tensors run in the engine the vendor names in its table (gloo,
NCCL, or a backend the vendor registers) on aliases of the devx memory, with no copies. CPU
tensors go to gloo.
`dist.get_backend()` says "devx"; `engine_name()` says which engine moves the bytes.

Every collective is checked across ranks, so that mismatched sizes, dtypes, ops or collectives
are a DistBackendError (a RuntimeError) naming every rank's call rather than an aborted process
(gloo) or a hang. A call the group has not been repeating is checked by a round of its own (one
small all-reduce of a hash of each rank's call); an all_reduce that has followed the previous
call twice in a row runs on that prediction with no round, and a rank that called something else
marks the result so that all ranks confirm (csrc/distributed/call_ledger.h). all_gather with
per-rank sizes and all_to_all with per-pair sizes work, as on NCCL. `call_check_counts()` says how many
of each a group made. DEVX_DIST_CHECK=0 (read when a group is made) turns the check off.
"""
from __future__ import annotations

import atexit
import datetime
import logging
from typing import Any, Optional

import torch
import torch.distributed as dist

from . import _C, _effects, _environ

BACKEND = "devx"

_logger = logging.getLogger(__name__)


def _engines(store: Any, rank: int, size: int, timeout: datetime.timedelta) -> tuple[Any, Any, str]:
    """The engine for devx tensors (the vendor's collective engine), the one for CPU tensors
    (gloo), and the former's name."""
    from torch.distributed import ProcessGroupGloo

    name = _C._collective_engine()
    if not name:
        raise RuntimeError(f"devx process group: vendor {_C._vendor_name()} names no collective engine")
    if name == "gloo":
        gloo = ProcessGroupGloo(store, rank, size, timeout)
        return gloo, gloo, name
    gloo = ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size, timeout)
    if name == "nccl":
        if not dist.is_nccl_available():
            raise RuntimeError(f"devx process group: vendor {_C._vendor_name()} moves collectives with NCCL, "
                               "which this torch lacks")
        from torch.distributed import ProcessGroupNCCL

        options = ProcessGroupNCCL.Options()
        options._timeout = timeout
        return ProcessGroupNCCL(dist.PrefixStore("nccl/", store), rank, size, options), gloo, name
    # A backend the vendor registered with torch.distributed (Backend.register_backend).
    plugin = dist.Backend._plugins.get(name.upper())
    if plugin is None:
        raise RuntimeError(f"devx process group: vendor {_C._vendor_name()} names the collective engine "
                           f"{name!r}, which is not a torch.distributed backend here (registered: "
                           f"{', '.join(sorted(dist.Backend._plugins)) or 'none'})")
    creator = plugin.creator_fn
    engine = creator(dist.PrefixStore(f"{name}/", store), rank, size, timeout)
    return engine, gloo, name


_exit_wait_registered = False


def _create(store: Any, rank: int, size: int, timeout: datetime.timedelta) -> Any:
    global _exit_wait_registered
    check_calls = _environ.flag("DEVX_DIST_CHECK")
    if check_calls and not _exit_wait_registered:
        # A group that is never destroyed may still be settling a call on a thread of its own
        # (csrc/distributed/call_ledger.cpp): it must end before the interpreter does.
        atexit.register(_C._wait_for_settle_threads)
        _effects.permanent("the devx device", "atexit: torch_devx._C._wait_for_settle_threads",
                           "a devx process group may outlive uninstall(); its threads must end before the interpreter")
        _exit_wait_registered = True
    engine, host_engine, name = _engines(store, rank, size, timeout)
    _logger.info("rank %d/%d: devx process group over %s (call check %s)", rank, size, name,
                 "on" if check_calls else "off")
    return _C.ProcessGroupDevx(engine, host_engine, name, check_calls)


def register() -> None:
    """Registers the `devx` backend with torch.distributed for devx (and CPU) tensors."""
    if not dist.is_available():
        return
    _C._bind_distributed()
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, devices=["devx", "cpu"])
        _effects.permanent("the devx device", "torch.distributed: the 'devx' backend (devx and CPU tensors)",
                           "torch.distributed has no way to unregister a backend; only groups asking for it use it")


def _devx_backend(group: Optional[dist.ProcessGroup]) -> Any:
    """The devx process group behind `group` (default: the world)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return pg._get_backend(torch.device(BACKEND))


def engine_name(group: Optional[dist.ProcessGroup] = None) -> str:
    """Which engine moves the bytes of devx tensors in `group` (default: the world): gloo or nccl."""
    return _devx_backend(group).engine_name


def call_check_counts(group: Optional[dist.ProcessGroup] = None) -> dict[str, int]:
    """How `group`'s (default: the world's) collectives were checked across ranks so far.

    `check_rounds`: calls checked by a round of their own; `predicted`: all_reduces run on their
    prediction, with no round; `confirmations`: rounds taken because a prediction was in doubt
    (a rank called something else, or a result held the value that marks that). All zero when
    the check is off or the group has one rank.
    """
    return _devx_backend(group).call_check_counts


def map_backend(backend: Any) -> Any:
    """Under CUDA mocking: "nccl" means devx, and so does "cuda:nccl" in a device:backend list."""
    if not isinstance(backend, str):
        return backend
    if backend.lower() == "nccl":
        return BACKEND
    if ":" not in backend:
        return backend
    pairs = []
    for pair in backend.split(","):
        device, _, name = pair.partition(":")
        if device.strip() == "cuda":
            device = BACKEND
        if name.strip().lower() == "nccl":
            name = BACKEND
        pairs.append(f"{device}:{name}")
    return ",".join(pairs)
