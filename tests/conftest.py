"""Shared helpers for the torch_devx test suite.

torch and torch_devx are imported lazily (inside the helpers and fixtures), so that test files
that never touch torch (test_cpu_sim_vendor.py loads the vendor library through ctypes) keep a
torch-free pytest process when run alone.

Helpers:
  run_python(code, **env)   run `code` in a fresh interpreter with the repository on PYTHONPATH,
                            every DEVX_*/DIPU_* variable cleared, then `env` applied
                            (value None: unset). Returns subprocess.CompletedProcess.
  run_many(codes_envs)      the same for several children at once (they run in parallel).
  run_commands(cmds)        several command lines at once, in the children's environment.
  assert_child_ok(proc)     fail with the child's output unless it exited 0.
  to_cpu(obj)               tensors (in nested tuples/lists/dicts) copied to the CPU.
  assert_close_cpu(a, b)    torch.testing.assert_close after moving `a` and `b` to the CPU.
Marker:
  devices(n)                the test needs n devx devices; skipped (with the count) where the
                            vendor has fewer, as the cuda vendor on a one-GPU machine. A test
                            parametrized with a second device ("devx:1", torch.device("cuda", 1))
                            needs 2 without the marker.
Fixtures:
  devx                      the torch_devx module, with process state restored after the test:
                            no forced fallback, current device 0, CUDA mocking on, default
                            device unset.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterable, Optional

import pytest

REPO = Path(__file__).resolve().parents[1]
# Where children import torch_devx from: the source tree, or another build of it (`make tsan`'s).
PACKAGE_ROOT = Path(os.environ.get("TORCH_DEVX_PACKAGE_ROOT", REPO / "src"))

# The suite rehearses a vendor whose kernel library lacks these ops (cpu_sim can run every CPU
# kernel, so without this nothing would reach the CPU fallback on its own): they must take the
# counted fallback and still give the CPU's results. Set before any test imports torch_devx.
UNSUPPORTED_OPS = "_fft_.*,_linalg_det,take,unfold,bucketize,_cdist_forward,multinomial,eye"
os.environ.setdefault("DEVX_SIM_UNSUPPORTED_OPS", UNSUPPORTED_OPS)

# A child that dies of a Python exception exits 1; one killed by a signal (abort, segfault) has a
# negative returncode.
CHILD_TIMEOUT_S = 120


def child_env(**overrides: Optional[str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("DEVX_") or k.startswith("DIPU_"))
    }
    env["PYTHONPATH"] = str(PACKAGE_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["DEVX_VENDOR"] = "cpu_sim"
    # Keep the children light on a 2-core machine.
    env.setdefault("OMP_NUM_THREADS", "1")
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_python(code: str, timeout: float = CHILD_TIMEOUT_S, **env: Optional[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=child_env(**env),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_many(jobs: Iterable[tuple[str, dict[str, Optional[str]]]],
             timeout: float = CHILD_TIMEOUT_S) -> list[subprocess.CompletedProcess]:
    """Runs several children in parallel; returns their results in order."""
    procs = []
    for code, env in jobs:
        args = [sys.executable, "-c", textwrap.dedent(code)]
        procs.append((args, subprocess.Popen(
            args, env=child_env(**env), cwd=str(REPO),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )))
    return _collect(procs, timeout)


def _collect(procs: list[tuple[list[str], subprocess.Popen]], timeout: float) -> list[subprocess.CompletedProcess]:
    """The children's results in order; if one overruns its timeout, none is left running."""
    results = []
    try:
        for args, p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(args, p.returncode, out, err))
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return results


def run_commands(commands: Iterable[list[str]], cwd: Optional[str] = None,
                 timeout: float = CHILD_TIMEOUT_S) -> list[subprocess.CompletedProcess]:
    """Runs several command lines at once (in the children's environment); their results in order."""
    procs = [(cmd, subprocess.Popen(cmd, env=child_env(), cwd=cwd or str(REPO), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)) for cmd in commands]
    return _collect(procs, timeout)


def describe(proc: subprocess.CompletedProcess) -> str:
    return (f"returncode {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}"
            f"\n--- stderr ---\n{proc.stderr[-4000:]}")


def assert_child_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, "child failed: " + describe(proc)


def needs_cuda_alias() -> pytest.MarkDecorator:
    """Skips a test of CUDA mocking below Python on a torch with CUDA kernels of its own (a CUDA
    build, as PyPI's default wheels are): there "cuda" is a real device, which mocking redirects
    through Python wrappers only (README, CUDA mocking), and whatever reaches it below them meets
    the real CUDA runtime."""
    import torch

    return pytest.mark.skipif(
        torch._C._dispatch_has_kernel_for_dispatch_key("aten::empty.memory_format", "CUDA"),
        reason='this torch has CUDA kernels of its own: "cuda" is a real device, redirected by Python wrappers only')


def needs_profiler_device_rows() -> pytest.MarkDecorator:
    """Skips a test of torch.profiler's devx device rows on a torch without kineto's PrivateUse1
    profiler registry (torch 2.11)."""
    import torch_devx.testing

    return pytest.mark.skipif(
        not torch_devx.testing.profiler_device_rows(),
        reason="this torch has no kineto PrivateUse1 profiler registry: torch.profiler shows no devx device activities")


def to_cpu(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, list):
        return [to_cpu(o) for o in obj]
    if isinstance(obj, tuple):  # plain tuples, named tuples and torch.return_types alike
        return tuple(to_cpu(o) for o in obj)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    return obj


def assert_close_cpu(actual: Any, expected: Any, **kwargs: Any) -> None:
    from torch.testing import assert_close

    assert_close(to_cpu(actual), to_cpu(expected), **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "devices(n): the test needs n devx devices")


_LATER_DEVICE = re.compile(r"\b(devx|cuda):[1-9]")


def _names_a_later_device(value: Any) -> bool:
    if isinstance(value, str):
        return bool(_LATER_DEVICE.search(value))
    if isinstance(value, (tuple, list)):
        return any(_names_a_later_device(v) for v in value)
    # A torch.device, recognised without importing torch.
    if type(value).__module__ == "torch" and type(value).__name__ == "device":
        return value.type in ("devx", "cuda") and (value.index or 0) >= 1
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needs = []
    for item in items:
        marker = item.get_closest_marker("devices")
        count = marker.args[0] if marker else 1
        params = getattr(getattr(item, "callspec", None), "params", {})
        if any(_names_a_later_device(v) for v in params.values()):
            count = max(count, 2)
        if count > 1:
            needs.append((item, count))
    if not needs:
        return
    import torch
    import torch_devx

    present = torch.devx.device_count()
    for item, count in needs:
        if present < count:
            item.add_marker(pytest.mark.skip(
                reason=f"needs {count} devx devices; the {torch_devx.vendor} vendor has {present}"))


@pytest.fixture
def devx():
    import torch
    import torch_devx
    from torch_devx import cuda_mock, diagnostics

    diagnostics.set_force_fallback([])
    torch.devx.set_device(0)
    yield torch_devx
    os.environ.pop("DIPU_FORCE_FALLBACK_OPS_LIST", None)
    diagnostics.set_setting("DIPU_FORCE_FALLBACK_OPS_LIST", None)
    torch.devx.set_device(0)
    if not cuda_mock.enabled():
        cuda_mock.enable()
    torch.set_default_device(None)


@pytest.fixture
def fallback(devx):
    """diagnostics, with fallback stats reset before the test and no forced ops before or after."""
    from torch_devx import diagnostics

    diagnostics.reset_fallback_stats()
    yield diagnostics
    diagnostics.set_force_fallback([])
    diagnostics.reset_fallback_stats()
