"""The settings registry (issue 23): one declaration and parser per setting in C++, the Python API
changing this process only, the environment configuring launch and children, last write wins."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from conftest import assert_child_ok, child_env, describe, run_python

API_VS_CHILDREN = """
import os, subprocess, sys, torch, torch_devx
from torch_devx import diagnostics as d

d.set_autocompare(True)
d.set_dump_op_args(1)
assert "DIPU_AUTOCOMPARE" not in os.environ and "DIPU_DUMP_OP_ARGS" not in os.environ
rows = {name: (value, source) for name, value, source, _ in d.settings()}
assert rows["DIPU_AUTOCOMPARE"] == ("1", "api") and rows["DIPU_DUMP_OP_ARGS"] == ("1", "api"), rows
a = torch.ones(3, device="devx")
(a * 2).sum()
assert d.autocompare_stats()["mul.Tensor"] == (1, 0)          # in effect here
child = subprocess.run([sys.executable, "-c", "import os; print('CHILD', os.environ.get('DIPU_AUTOCOMPARE'), os.environ.get('DIPU_MEM_CHECK'))"],
                       capture_output=True, text=True)
print(child.stdout.strip())
"""


def test_api_settings_stay_in_this_process_and_the_environment_reaches_children():
    proc = run_python(API_VS_CHILDREN, DIPU_MEM_CHECK="1")
    assert_child_ok(proc)
    assert "CHILD None 1" in proc.stdout, describe(proc)   # the API's switch did not leak; the user's did
    assert "[devx] op mul.Tensor" in proc.stderr or "mul.Tensor" in proc.stderr, describe(proc)


def test_the_last_write_wins_and_sources_are_reported(devx):
    from torch_devx import diagnostics as d

    def row(name):
        return {n: (v, s) for n, v, s, _ in d.settings()}[name]

    assert row("DIPU_AUTOCOMPARE_RAISE") == ("0", "default")
    try:
        d.set_setting("DIPU_AUTOCOMPARE_RAISE", "1")
        assert row("DIPU_AUTOCOMPARE_RAISE") == ("1", "api")
        os.environ["DIPU_AUTOCOMPARE_RAISE"] = "0"          # a later environment write replaces it
        assert row("DIPU_AUTOCOMPARE_RAISE") == ("0", "environment")
        d.set_setting("DIPU_AUTOCOMPARE_RAISE", "yes")
        assert row("DIPU_AUTOCOMPARE_RAISE") == ("yes", "api")
        d.set_setting("DIPU_AUTOCOMPARE_RAISE", None)       # back to what the environment says
        assert row("DIPU_AUTOCOMPARE_RAISE") == ("0", "environment")
    finally:
        os.environ.pop("DIPU_AUTOCOMPARE_RAISE", None)
        d.set_setting("DIPU_AUTOCOMPARE_RAISE", None)
    assert row("DIPU_AUTOCOMPARE_RAISE") == ("0", "default")


def test_bad_values_are_value_errors_naming_the_setting_and_change_nothing(devx):
    from torch_devx import diagnostics as d

    with pytest.raises(ValueError, match=r"DIPU_DUMP_OP_ARGS='7' is not an integer in \[0, 3\]"):
        d.set_setting("DIPU_DUMP_OP_ARGS", "7")
    with pytest.raises(ValueError, match="DIPU_MEM_CHECK='maybe' is not a boolean"):
        d.set_setting("DIPU_MEM_CHECK", "maybe")
    with pytest.raises(ValueError, match="'NOT_A_SETTING' is not a torch_devx setting"):
        d.set_setting("NOT_A_SETTING", "1")
    # A value only a listener can judge (a regular expression): rejected, the previous one kept.
    d.set_setting("DIPU_AUTOCOMPARE_OPS_LIST", "cos")
    try:
        with pytest.raises(ValueError, match="not a valid regular expression"):
            d.set_setting("DIPU_AUTOCOMPARE_OPS_LIST", "mul(")
        assert {n: v for n, v, _, _ in d.settings()}["DIPU_AUTOCOMPARE_OPS_LIST"] == "cos"
        with pytest.raises(ValueError, match="DEVX_TRACE_RUNTIME"):
            d.set_trace_runtime({"mallocc": 1})
        with pytest.raises(ValueError, match="DIPU_DUMP_OP_ARGS"):
            os.environ["DIPU_DUMP_OP_ARGS"] = "high"
    finally:
        os.environ.pop("DIPU_DUMP_OP_ARGS", None)
        d.set_setting("DIPU_AUTOCOMPARE_OPS_LIST", None)


def test_import_leaves_os_environ_a_plain_mapping_and_sees_os_putenv_writes(devx):
    from torch_devx import diagnostics as d

    assert type(os.environ) is os._Environ
    os.putenv("DIPU_DUMP_OP_ARGS", "2")  # direct writes are seen too
    try:
        assert {n: v for n, v, _, _ in d.settings()}["DIPU_DUMP_OP_ARGS"] == "2"
    finally:
        os.unsetenv("DIPU_DUMP_OP_ARGS")
    assert {n: v for n, v, _, _ in d.settings()}["DIPU_DUMP_OP_ARGS"] == "0"


MEM_AND_TRACE = """
import torch, torch_devx
from torch_devx import diagnostics as d
d.set_mem_check(True)
keep = torch.zeros(1000, device="devx")
report = d.mem_check_report()
assert "1 allocation (4000 bytes) not released" in report and "<string>:5" in report, report
d.set_mem_check(False)
d.set_trace_runtime({"malloc": 1})
torch.empty(1 << 22, device="devx")
d.set_trace_runtime(None)
print("DONE")
"""


def test_mem_check_and_runtime_tracing_have_python_setters():
    proc = run_python(MEM_AND_TRACE)
    assert_child_ok(proc)
    assert "DONE" in proc.stdout and "malloc(0, 16777216" in proc.stderr, describe(proc)


def test_the_settings_command_lists_every_setting_with_its_source():
    proc = subprocess.run([sys.executable, "-m", "torch_devx", "settings"], env=child_env(DIPU_DUMP_OP_ARGS="1"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, describe(proc)
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    assert "environment" in lines["DIPU_DUMP_OP_ARGS"] and " 1 " in lines["DIPU_DUMP_OP_ARGS"]
    assert "default" in lines["DIPU_AUTOCOMPARE"]
    for name in ("DIPU_FORCE_FALLBACK_OPS_LIST", "DIPU_MEM_CHECK", "DEVX_TRACE_RUNTIME", "DEVX_LOG_LEVEL",
                 "DEVX_MOCK_CUDA", "DEVX_DEVICE_AS_CUDA"):
        assert name in lines, proc.stdout
