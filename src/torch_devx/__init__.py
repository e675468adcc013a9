"""torch_devx: the `devx` PyTorch device (PrivateUse1), with a CPU simulator and porting diagnostics.

`import torch_devx` loads the runtime and the vendor chosen by DEVX_VENDOR, names the
PrivateUse1 backend `devx`, registers `torch.devx`, and (unless DEVX_MOCK_CUDA=0) lets
unchanged CUDA scripts run on devx. Every change this makes to the process outside the package
is recorded (`effects()`); `uninstall()` undoes all that can be undone.
"""
from __future__ import annotations

import os
import sys

import torch


def _check_torch_version() -> None:
    """An extension built against another torch X.Y crashes at load or, worse, later; name both."""
    try:
        from ._build_info import TORCH_VERSION as built_with
    except ImportError:  # a source tree that was never built: _C's import says so
        return
    if built_with.split("+")[0].split(".")[:2] != torch.__version__.split("+")[0].split(".")[:2]:
        raise ImportError(f"torch_devx was built against torch {built_with}, but torch {torch.__version__} is "
                          f"installed ({os.path.dirname(torch.__file__)}). Install torch "
                          f"{'.'.join(built_with.split('.')[:2])}.*, or rebuild torch_devx against this torch.")


_check_torch_version()

from . import _C, _effects, _frames, _logging, _vendors  # noqa: E402

_logging.install()
_C._set_library_dirs(list(_frames.LIBRARY_DIRS))

def _preload_openblas(vendor_paths: list[str]) -> None:
    """cpu_sim's own kernels link OpenBLAS from the scipy-openblas32 package, found through a
    runpath that holds in site-packages and in the build's venv. An editable install built under
    build isolation has neither (its runpath names a deleted build environment), so the library is
    loaded here first, from wherever the package is installed: the vendor's dependency then
    resolves by name."""
    if not any(os.path.basename(p) == "libdevx_vendor_cpu_sim.so" for p in vendor_paths):
        return
    try:
        import scipy_openblas32
    except ImportError:  # the vendor's load then names the missing library
        return
    import ctypes

    ctypes.CDLL(os.path.join(scipy_openblas32.get_lib_dir(), f"lib{scipy_openblas32.get_library()}.so"))


_vendor_candidates = _vendors.candidates(os.environ.get("DEVX_VENDOR", ""))
_preload_openblas(_vendor_candidates[0])
_C._init(*_vendor_candidates)

from . import _compute_allocator  # noqa: E402

_compute_allocator.install()

torch.utils.rename_privateuse1_backend("devx")
# The device itself stays: PyTorch can name PrivateUse1 once and cannot unregister a loaded library's
# kernels, and devx tensors may still exist after uninstall().
_DEVICE = "the devx device"
_effects.permanent(_DEVICE, "PrivateUse1 named 'devx'", "torch names the PrivateUse1 backend once per process")
_effects.permanent(_DEVICE, "the dispatcher: devx's kernels, hooks, device guard and allocator",
                   "the dispatcher cannot unregister what a loaded library registered")
_effects.permanent(_DEVICE, "aten Meta kernels of convolution_overrideable and convolution_backward_overrideable",
                   "registered by the loaded library; only PrivateUse1 backends reach these ops")
_effects.permanent(_DEVICE, "aten Conjugate and Negative fallthroughs of _copy_from and _copy_from_and_resize",
                   "registered by the loaded library; only copies between devices reach these ops")
_effects.permanent(_DEVICE, "torch.save's tensor metadata of PrivateUse1: devx's (torch._utils.set_tensor_metadata)",
                   "torch registers one pair of functions per device type, once")
_effects.permanent(_DEVICE, "c10's allocator config-parser hook: devx's applies max_split_size_mb (after a CUDA "
                   "build's own hook)", "c10 holds one hook per process, which a loaded library's code runs in")
_effects.permanent(_DEVICE, "atexit (C++): a flag that stops routing allocations while the process exits",
                   "a C++ atexit callback cannot be unregistered; it only sets a flag of devx's")
if _C._compute_device_type() == 0:
    _effects.permanent(_DEVICE, "the CPU allocator: a router in front of the original (priority 255)",
                       "devx's kernels computing on the CPU allocate their results through it; it hands "
                       "every other allocation to the original allocator unchanged")

from . import _environ, device_module  # noqa: E402  (needs the renamed backend)

torch._register_device_module("devx", device_module)
sys.modules["torch.devx.memory"] = device_module.memory
sys.modules["torch.devx.amp"] = device_module.amp
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)
_effects.permanent(_DEVICE, "torch.devx (with torch.devx.memory and torch.devx.amp) and the generated "
                   "Tensor/Module/PackedSequence/TypedStorage methods (.devx(), .is_devx)",
                   "the device's Python API; torch registers a device module once")
_environ.watch()

from . import _exit, _import_hooks, _inductor_backend, _rng_prims, cuda_mock, diagnostics, distributed  # noqa: E402

_exit.install()
distributed.register()
# Before any torch.compile, without importing dynamo (seconds) here.
_import_hooks.after_import("torch._dynamo.device_interface", _inductor_backend.register_device_interface)
_import_hooks.after_import("torch._prims.rng_prims", _rng_prims.register)
_import_hooks.after_import("torch._dynamo.backends.registry", _inductor_backend.install_default_backend)

# Bad values fail here, at import, rather than being ignored.
_C._validate_settings()
diagnostics.check_force_fallback_patterns()
_environ.add_python_listener("DIPU_FORCE_FALLBACK_OPS_LIST", diagnostics._force_fallback_changed)
for _report in (diagnostics._report_autocompare_at_exit, diagnostics._report_leaks_at_exit,
                diagnostics._report_syncs_at_exit):
    _effects.at_exit("diagnostics", _report)

# DIPU_MOCK_CUDA is DIPU's name for the same switch; DEVX_MOCK_CUDA wins where both are set.
if _environ.flag("DEVX_MOCK_CUDA", synonym="DIPU_MOCK_CUDA"):
    cuda_mock.enable()

vendor: str = _C._vendor_name()

# On cpu_sim the "device" is this CPU: a device thread for backward buys nothing and costs two
# thread hand-offs per backward (a sleep and a wake-up each, ~10% of a small model's step on two
# cores). Backward of devx tensors then runs on the thread that calls it, as the CPU's does; the
# engine still sets each node's device and stream. Only the importing thread (the switch is
# thread-local); the cuda vendor keeps PyTorch's device threads, as CUDA has them.
if vendor == "cpu_sim" and torch._C._is_multithreading_enabled():
    _effects.apply("autograd", "autograd multithreading: off on the importing thread (backward runs there)",
                   lambda: torch._C._set_multithreading_enabled(False),
                   lambda: torch._C._set_multithreading_enabled(True))


def effects() -> list[tuple[str, str, bool, str]]:
    """What torch_devx has changed in this process outside its own package: (group, what,
    undoable, why it is not) for each change, the undoable ones first."""
    return _effects.effects()


def uninstall() -> None:
    """Undoes every change of `effects()` that can be undone, newest first: CUDA mocking, the
    environment watch, the logging handler, torch.compile's default backend and rng kernels, the
    import hooks and the exit reports. The devx device stays usable (its permanent entries say
    why). Calling it again does nothing."""
    _effects.undo_group()


__all__ = ["cuda_mock", "device_module", "diagnostics", "distributed", "effects", "uninstall", "vendor"]
