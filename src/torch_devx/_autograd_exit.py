"""Lets a script whose last statement is a devx backward exit cleanly.

torch.autograd.backward stashes a Python object (a contextvars copy) in the thread-local state
each GraphTask captures, and the autograd engine drops a devx GraphTask on its device thread,
just after the backward has returned. If the interpreter is finalising by then, that thread's
attempt to take the GIL for the decref ends it with pthread_exit through a noexcept frame and the
process aborts ("terminate called without an active exception"). Any device backend with
autograd device threads has this race; CUDA hides it behind slower kernels.

At exit we run one tiny backward through the engine directly (no stash) on each devx device that
has had allocations, once the engine has device threads at all: each device thread handles tasks
in order, so once it finishes ours it has dropped every earlier GraphTask, and ours carries no
Python objects. It is the backend's own work, so every diagnostic is turned off first: it is
never reported as the user's ops, and a process that never ran a devx backward does nothing here.
"""
from __future__ import annotations

import atexit
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


def _drain_device_threads() -> None:
    try:
        if not _engine_has_device_threads():
            return
        devices = _devices_used()
        if not devices:
            return
        _silence_diagnostics()
        engine = torch.autograd.Variable._execution_engine
        for index in devices:
            leaf = torch.zeros(1, device=torch.device("devx", index), requires_grad=True)
            root = (leaf * 1).sum()
            engine.run_backward((root,), (torch.ones((), device=root.device),), False, False, (), True, True)
    except Exception:  # noqa: BLE001 - never turn a clean exit into a failing one
        pass


def install() -> None:
    atexit.register(_drain_device_threads)
    _effects.permanent("the devx device", f"atexit: {__name__}._drain_device_threads",
                       "devx stays usable after uninstall(), and a devx backward as a script's last statement "
                       "would then abort the interpreter at exit; it does nothing where no devx backward ran")
