"""Lets a script whose last statement is a devx backward exit cleanly.

torch.autograd.backward stashes a Python object (a contextvars copy) in the thread-local state
each GraphTask captures, and the autograd engine drops a devx GraphTask on its device thread,
just after the backward has returned. If the interpreter is finalising by then, that thread's
attempt to take the GIL for the decref ends it with pthread_exit through a noexcept frame and the
process aborts ("terminate called without an active exception"). Any device backend with
autograd device threads has this race; CUDA hides it behind slower kernels.

At exit we run one tiny backward per devx device through the engine directly (no stash): each
device thread handles tasks in order, so once it finishes ours it has dropped every earlier
GraphTask, and ours carries no Python objects.
"""
from __future__ import annotations

import atexit

import torch


def _drain_device_threads() -> None:
    try:
        engine = torch.autograd.Variable._execution_engine
        for index in range(torch.devx.device_count()):
            leaf = torch.zeros(1, device=torch.device("devx", index), requires_grad=True)
            root = (leaf * 1).sum()
            engine.run_backward((root,), (torch.ones((), device=root.device),), False, False, (), True, True)
    except Exception:  # noqa: BLE001 - never turn a clean exit into a failing one
        pass


def install() -> None:
    atexit.register(_drain_device_threads)
