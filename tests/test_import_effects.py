"""torch_devx.uninstall(): every change `import torch_devx` makes outside the package is in the
registry, and after uninstall() each undoable one is as it was before the import."""
from __future__ import annotations

import json

import pytest

from conftest import assert_child_ok, run_python

# Imported before the snapshot, so that their own import-time effects are not counted as ours.
_PRELUDE = """
import atexit, importlib, json, logging, os, sys
import torch, torch._dynamo, torch._dynamo.backends.registry, torch._prims.rng_prims, torch.distributed
import torch.cuda.nvtx
"""

LIST_EFFECTS = _PRELUDE + """
import torch_devx
from torch_devx import _effects
print(json.dumps([{"group": e.group, "what": e.what, "attr": e.attr,
                   "owner": _effects._owner_name(e.owner) if e.owner is not None else None}
                  for e in _effects._applied]))
"""

# Probes of the effects that are not a replaced attribute, keyed by how their description starts.
CHECK_AFTER_UNINSTALL = _PRELUDE + """
from torch._C import DispatchKey
rng = torch._prims.rng_prims
fake = torch._higher_order_ops.utils.registered_hop_fake_fns
MISSING = object()

def resolve(path):
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise LookupError(path)

def cuda_factory():
    results = []
    for make in (lambda: torch.zeros(1, device="cuda"), lambda: torch.empty(1, dtype=torch.qint8, device="cuda"),
                 lambda: torch.zeros((1, 1), layout=torch.sparse_coo, device="cuda")):
        try:
            make()
            results.append("ok")
        except Exception as e:
            results.append(type(e).__name__ + ": " + str(e).splitlines()[0])
    return results

# atexit cannot list its callbacks (and _ncallbacks() does not count unregistrations): watch them.
live_exit_callbacks = []
_register, _unregister = atexit.register, atexit.unregister

def register(fn, *args, **kwargs):
    live_exit_callbacks.append(fn)
    return _register(fn, *args, **kwargs)

def unregister(fn):
    live_exit_callbacks[:] = [f for f in live_exit_callbacks if f != fn]
    return _unregister(fn)

atexit.register, atexit.unregister = register, unregister

def exit_callbacks():
    names = [f"{f.__module__}.{f.__qualname__}" for f in live_exit_callbacks]
    permanent = ([what for _, what, undoable, _ in sys.modules["torch_devx"].effects() if not undoable]
                 if "torch_devx" in sys.modules else [])
    return [name for name in names if f"atexit: {name}" not in permanent]

logger = logging.getLogger("torch_devx")
PROBES = {
    "logging:": lambda: (list(logger.handlers), logger.level, logger.propagate),
    "sys.meta_path:": lambda: list(sys.meta_path),
    "run_and_save_rng_state:": lambda: (rng.run_and_save_rng_state.py_kernels[DispatchKey.BackendSelect],
                                        fake.get(rng.run_and_save_rng_state)),
    "run_with_rng_state:": lambda: rng.run_with_rng_state.py_kernels[DispatchKey.BackendSelect],
    "atexit:": exit_callbacks,
    "ATen's CUDA dispatch key": lambda: (cuda_factory(), torch.cuda.is_available()),
    # torch before 2.12 has no default-backend hook (torch_devx then changes nothing there).
    "torch.compiler's default backend": getattr(torch.compiler, "get_default_backend", lambda: None),
    "environment:": lambda: dict(os.environ),
    "autograd multithreading:": torch._C._is_multithreading_enabled,
}
listed = json.loads(os.environ["EFFECTS"])
attributes = [(resolve(e["owner"]), e["attr"]) for e in listed if e["attr"]]
before_attrs = [owner.__dict__.get(attr, MISSING) for owner, attr in attributes]
before_probes = {key: probe() for key, probe in PROBES.items()}

import torch_devx
torch.zeros(1, device="cuda" if torch_devx.cuda_mock.enabled() else "devx")
after_import = {key: probe() for key, probe in PROBES.items()}
torch_devx.uninstall()

report = {"unprobed": [], "changed": [], "unchanged_by_import": []}
for e in listed:
    if not e["attr"] and not any(e["what"].startswith(key) for key in PROBES):
        report["unprobed"].append(e["what"])
for (owner, attr), before in zip(attributes, before_attrs):
    if owner.__dict__.get(attr, MISSING) is not before:
        report["changed"].append(f"{owner}.{attr}")
for key, probe in PROBES.items():
    if probe() != before_probes[key]:
        report["changed"].append(key)
    if any(e["what"].startswith(key) for e in listed) and after_import[key] == before_probes[key]:
        report["unchanged_by_import"].append(key)
report["left"] = [what for _, what, undoable, _ in torch_devx.effects() if undoable]
report["permanent_without_reason"] = [what for _, what, undoable, why in torch_devx.effects()
                                      if not undoable and not why]
print(json.dumps(report))
"""


def _listed(**env):
    proc = run_python(LIST_EFFECTS, **env)
    assert_child_ok(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check(listed, **env):
    proc = run_python(CHECK_AFTER_UNINSTALL, EFFECTS=json.dumps(listed), **env)
    assert_child_ok(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_effect_is_undone_by_uninstall():
    listed = _listed()
    groups = {e["group"] for e in listed}
    assert {"cuda_mock", "settings", "logging", "diagnostics", "torch.compile"} <= groups, groups
    assert any(e["owner"] == "os" and e["attr"] == "putenv" for e in listed)
    report = _check(listed)
    assert report["unprobed"] == [], "effects the test does not know how to check"
    assert report["changed"] == []
    assert report["unchanged_by_import"] == [], "a probe that sees no change cannot see the undo either"
    assert report["left"] == []
    assert report["permanent_without_reason"] == []


def test_uninstall_with_mocking_off_and_a_log_level():
    env = {"DEVX_MOCK_CUDA": "0", "DEVX_LOG_LEVEL": "WARN,PYTHON=DEBUG"}
    listed = _listed(**env)
    assert not any(e["group"] == "cuda_mock" for e in listed)
    report = _check(listed, **env)
    assert report["changed"] == [] and report["unprobed"] == [] and report["left"] == []


def test_the_logger_is_not_reconfigured():
    proc = run_python("""
        import logging
        logger = logging.getLogger("torch_devx")
        logger.setLevel(logging.ERROR)
        import os, torch, torch_devx
        print(logger.level == logging.ERROR, logger.propagate)
        os.environ["DEVX_LOG_LEVEL"] = "WARN,PYTHON=INFO"
        print(logger.level == logging.INFO)
        del os.environ["DEVX_LOG_LEVEL"]
        print(logger.level == logging.ERROR)
        torch_devx.uninstall()
        print(logger.level == logging.ERROR, [type(h).__name__ for h in logger.handlers])
    """)
    assert_child_ok(proc)
    assert proc.stdout.split("\n")[:4] == ["True True", "True", "True", "True []"], proc.stdout


def test_after_uninstall_cuda_means_cuda_and_the_environment_is_not_watched():
    proc = run_python("""
        import os, torch
        legacy = torch.cuda.FloatTensor
        import torch_devx
        torch_devx.uninstall()
        torch_devx.uninstall()
        try:
            torch.zeros(1, device="cuda")
        except Exception as e:
            print("cuda:", type(e).__name__)
        os.environ["DIPU_AUTOCOMPARE"] = "not a boolean"
        print("env write accepted")
        print(torch.cuda.is_available(), torch.cuda.FloatTensor is legacy)
        print((torch.ones(2, device="devx") * 2).cpu().tolist())
    """)
    assert_child_ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[0] in ("cuda: RuntimeError", "cuda: AssertionError"), lines
    assert lines[1:] == ["env write accepted", "False True", "[2.0, 2.0]"], lines


def test_cuda_mock_disable_undoes_only_its_group():
    proc = run_python("""
        import os, torch, torch_devx
        torch_devx.cuda_mock.disable()
        groups = {g for g, _, undoable, _ in torch_devx.effects() if undoable}
        print(sorted(groups))
        print(torch_devx.cuda_mock.enabled())
        torch_devx.cuda_mock.enable()
        print(torch_devx.cuda_mock.enabled(), torch.zeros(1, device="cuda").device)
    """)
    assert_child_ok(proc)
    lines = proc.stdout.splitlines()
    assert "cuda_mock" not in lines[0] and "settings" in lines[0], lines
    assert lines[1:] == ["False", "True devx:0"], lines


def test_effects_cli_lists_undoable_and_permanent():
    proc = run_python("import runpy, sys; sys.argv = ['torch_devx', 'effects']; "
                      "runpy.run_module('torch_devx', run_name='__main__')")
    assert_child_ok(proc)
    assert "os.putenv" in proc.stdout and "undone by torch_devx.uninstall()" in proc.stdout
    assert "PrivateUse1 named 'devx'" in proc.stdout and "torch names the PrivateUse1 backend once" in proc.stdout


@pytest.mark.devices(2)
def test_backward_of_devx_tensors_runs_on_the_calling_thread_on_each_nodes_device():
    """On cpu_sim, import turns autograd's device threads off for the importing thread: backward
    runs where it is called, as for CPU tensors, and each node still runs on its tensor's device
    and stream (what a CUDA device thread would give it)."""
    proc = run_python("""
import threading
import torch
import torch_devx

seen = []

class Probe(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        seen.append((threading.get_ident(), torch.devx.current_device(), torch.devx.current_stream() == side))
        return g * 2

torch.devx.set_device(0)
side = torch.devx.Stream(device="devx:1")
x = torch.ones(3, device="devx:1", requires_grad=True)
with torch.devx.stream(side):
    y = Probe.apply(x).sum()
y.backward()
assert seen == [(threading.get_ident(), 1, True)], seen
assert torch.equal(x.grad.cpu(), torch.full((3,), 2.0))
assert torch.devx.current_device() == 0
assert not torch._C._is_multithreading_enabled()
torch_devx.uninstall()
assert torch._C._is_multithreading_enabled()
""")
    assert_child_ok(proc)
