"""What devx does when the interpreter exits, before it starts finalising: nothing may then still
run on a devx thread that can touch Python or the core's state.

1. The autograd device threads. torch.autograd.backward stashes a Python object (a contextvars
   copy) in the thread-local state each GraphTask captures, and the autograd engine drops a devx
   GraphTask on its device thread, just after the backward has returned. If the interpreter is
   finalising by then, that thread's attempt to take the GIL for the decref ends it with
   pthread_exit through a noexcept frame and the process aborts ("terminate called without an
   active exception"). Any device backend with autograd device threads has this race; CUDA hides
   it behind slower kernels. We run one tiny backward through the engine directly (no stash) on
   each devx device that has had allocations, once the engine has device threads at all: each
   device thread handles tasks in order, so once it finishes ours it has dropped every earlier
   GraphTask, and ours carries no Python objects.
2. The streams' workers (asynchronous mode). Work still queued or running holds references to
   tensors; the worker drops them when an item ends, and dropping the last reference but one to a
   tensor whose Python object torch preserves takes the GIL — the same abort while the interpreter
   finalises — while dropping the last one frees into the allocator, whose state C++'s exit has
   already destroyed (a segfault). So every stream of every used device is synchronised, after the
   drain above (which issues work of its own).

It is the backend's own work, so every diagnostic is turned off first: it is never reported as the
user's ops, and a process that never used a devx device does nothing here.
"""
from __future__ import annotations

import atexit
import logging
import os

import torch

from . import _effects

# The switches whose reports would show the drain's ops and vendor calls.
# Each switch and its "off" value.
_REPORTING_SWITCHES = {"DIPU_DUMP_OP_ARGS": "0", "DIPU_AUTOCOMPARE": "0", "DIPU_AUTOCOMPARE_OPS_LIST": "",
                       "DIPU_AUTOCOMPARE_RAISE": "0", "DIPU_FORCE_FALLBACK_OPS_LIST": "", "DEVX_TRACE_RUNTIME": ""}


def _engine_has_device_threads() -> bool:
    """The engine starts its device threads ("pt_autograd_<index>") at the first backward that
    involves a device other than the CPU; without them no GraphTask can be pending."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # no procfs: assume there may be one
        return True
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().startswith("pt_autograd_"):
                    return True
        except OSError:  # the thread ended meanwhile
            continue
    return False


def _devices_used() -> list[int]:
    return [i for i in range(torch.devx.device_count())
            if torch.devx.memory_stats(i).get("allocation.all.allocated", 0) > 0]


def _silence_diagnostics() -> None:
    from . import _environ, diagnostics

    # Through the API: the environment may no longer be watched (uninstall()).
    for name, off in _REPORTING_SWITCHES.items():
        _environ.set_value(name, off)
    diagnostics.set_op_hook(None)
    diagnostics.set_runtime_hook(None)
    for op in diagnostics.overridden_kernels():
        diagnostics.override_kernel(op, None)


def _drain_device_threads(devices: list[int]) -> None:
    if not _engine_has_device_threads():
        return
    engine = torch.autograd.Variable._execution_engine
    for index in devices:
        leaf = torch.zeros(1, device=torch.device("devx", index), requires_grad=True)
        root = (leaf * 1).sum()
        engine.run_backward((root,), (torch.ones((), device=root.device),), False, False, (), True, True)


def _settle_at_exit() -> None:
    try:
        devices = _devices_used()
        if not devices:
            return
        _silence_diagnostics()
    except Exception:  # noqa: BLE001 - never turn a clean exit into a failing one
        return
    try:
        _drain_device_threads(devices)
    except Exception:  # noqa: BLE001 - the synchronisation below matters more
        pass
    for index in devices:
        try:
            torch.devx.synchronize(index)
        except Exception as error:  # noqa: BLE001 - the user's last work failed; say so, exit cleanly
            logging.getLogger("torch_devx").warning("devx:%d: work issued before exit failed: %s", index, error)


def install() -> None:
    atexit.register(_settle_at_exit)
    _effects.permanent("the devx device", f"atexit: {__name__}._settle_at_exit",
                       "devx stays usable after uninstall(), and a devx backward or unfinished asynchronous work "
                       "at a script's end would then abort the interpreter at exit; it does nothing where no devx "
                       "device was used")
