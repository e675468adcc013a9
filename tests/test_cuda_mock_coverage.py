"""CUDA mocking covers what torch itself asks of torch.cuda.

With mocking on, torch.cuda.is_available() is true, and torch's own code (dynamo, AOT autograd,
checkpointing, amp) then calls other torch.cuda functions; left unmocked, they answer for CUDA,
which on a machine without CUDA raises (torch 2.14's dynamo asks is_current_stream_capturing()
before every frame it compiles). The compile tests run here in a child in which every torch.cuda
function that mocking leaves alone records each call made from inside torch: none may be made.
The calls differ between torch versions, so this runs under each supported one
(`make test TORCH_VERSION=...`) and finds that version's.
"""

from __future__ import annotations

import json
import os

import pytest

from conftest import assert_child_ok, run_python

# Questions about the torch build rather than the device, which mocking must leave alone.
BUILD_QUERIES = {
    # Whether torch was built with CUDA: dynamo and cpp_extension then import CUDA-only functions
    # and look for a CUDA toolkit, which a CPU build of torch does not have.
    "_is_compiled",
}

RECORDING_CHILD = r"""
import collections, functools, inspect, json, os, sys
import pytest
import torch
import torch_devx

torch_dir = os.path.dirname(torch.__file__) + os.sep
calls = collections.defaultdict(set)


def recording(name, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        caller = sys._getframe(1)
        if caller.f_code.co_filename.startswith(torch_dir):
            calls[name].add(f"torch/{caller.f_code.co_filename[len(torch_dir):]}:{caller.f_lineno}")
        return fn(*args, **kwargs)

    return wrapper


# Mocked functions are torch_devx's own; every other function torch.cuda offers is recorded.
for name, value in list(vars(torch.cuda).items()):
    mocked = getattr(value, "__module__", "").startswith("torch_devx")
    if (not name.startswith("__") and not mocked and name not in BUILD_QUERIES
            and (inspect.isfunction(value) or inspect.isbuiltin(value))):
        setattr(torch.cuda, name, recording(name, value))
code = pytest.main(["-q", "-p", "no:cacheprovider", "tests/test_compile.py"])
print("CALLS=" + json.dumps({name: sorted(sites) for name, sites in calls.items()}))
sys.exit(code)
"""


@pytest.mark.skipif(os.environ.get("DEVX_SIM_ASYNC", "0") not in ("", "0"),
                    reason="the child runs without DEVX_* switches (conftest.child_env), so under "
                           "DEVX_SIM_ASYNC it would repeat the synchronous pass's run exactly")
def test_torch_makes_no_unmocked_cuda_call_in_the_compile_tests():
    proc = run_python(f"BUILD_QUERIES = {BUILD_QUERIES!r}\n" + RECORDING_CHILD, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("CALLS=")]
    assert lines, "the child printed no record of calls:\n" + proc.stdout[-4000:] + proc.stderr[-4000:]
    calls = json.loads(lines[-1][len("CALLS="):])
    assert not calls, (
        "torch called torch.cuda functions that CUDA mocking leaves to CUDA (add them to "
        "torch_devx/cuda_mock.py's _CUDA_FUNCS with a devx answer):\n"
        + "\n".join(f"  torch.cuda.{name}: {', '.join(sites)}" for name, sites in sorted(calls.items())))
    # Exit 0: the compile tests ran (pytest exits 5 when it collects none) and passed.
    assert_child_ok(proc)
