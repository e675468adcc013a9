"""The vendor conformance kit, `python -m torch_devx vendor-test`, on cpu_sim's own kernels and
nothing of ATen (DEVX_SIM_KERNELS=own-only): right kernels pass; a kernel made wrong on purpose
(DEVX_SIM_FAULTY_KERNELS: the last element of its output off by one) is a mismatch, with its
numbers, and fails the run; a kernel that kills its process is a crash, and the OpInfos after it
still run. Each run is a few kernels, a few OpInfos, 2 samples per dtype."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Optional

from conftest import REPO, child_env, describe

KERNELS = r"^(add\.out|mul\.out|_softmax\.out|relu\.out)$"
SMALL = ["--samples", "2", "--dtypes", "float32,int64"]
KIT_TIMEOUT_S = 240


def run_kit(cwd: Path, args: list[str], **env: Optional[str]) -> tuple[subprocess.CompletedProcess, dict[str, Any]]:
    report = cwd / "report.json"
    proc = subprocess.run([sys.executable, "-m", "torch_devx", "vendor-test", *args, "--json", str(report)],
                          env=child_env(DEVX_SIM_KERNELS="own-only", **env), cwd=cwd, capture_output=True,
                          text=True, timeout=KIT_TIMEOUT_S)
    assert report.exists(), describe(proc)
    return proc, json.loads(report.read_text())


def table_status(stdout: str, kernel: str) -> Optional[str]:
    m = re.search(rf"^{re.escape(kernel)}\s+(\w+)\s", stdout, re.M)
    return m.group(1) if m else None


def test_right_kernels_pass(tmp_path):
    proc, report = run_kit(tmp_path, ["--ops", KERNELS, *SMALL])
    assert proc.returncode == 0, describe(proc)
    assert set(report["kernels"]) == {"add.out", "mul.out", "_softmax.out", "relu.out"}
    for kernel, r in report["kernels"].items():
        assert r["status"] == "pass", (kernel, r)
        assert r["samples_passed"] > 0 and r["samples_failed"] == 0 and r["calls"] > 0, (kernel, r)
        assert table_status(proc.stdout, kernel) == "pass", proc.stdout
    assert "add.Tensor" in report["kernels"]["add.out"]["serves"]
    # The OpInfos chosen are those named like the ops served (mul -> __rmul__, addcmul...).
    assert {"add", "mul", "softmax", "nn.functional.relu", "__rmul__"} <= set(report["opinfos"])
    assert report["exit_status"] == 0 and not report["crashes"]
    assert os.listdir(tmp_path) == ["report.json"]  # nothing else written


def test_faulty_kernel_is_a_mismatch(tmp_path):
    proc, report = run_kit(tmp_path, ["--ops", KERNELS, *SMALL], DEVX_SIM_FAULTY_KERNELS=r"mul\.out")
    assert proc.returncode == 1, describe(proc)
    mul = report["kernels"]["mul.out"]
    assert mul["status"] == "mismatch" and mul["samples_failed"] > 0, mul
    first = mul["failures"][0]
    assert first["kind"] == "mismatch" and first["kernels"] == ["mul.out"] and not first["joint"], first
    details = first["details"]
    # The fault: one element, the last, off by one.
    assert details["mismatched"] == 1, details
    assert abs(details["max_abs"] - 1) < 1e-3, details
    assert abs(abs(details["got"] - details["expected"]) - 1) < 1e-3, details
    assert isinstance(details["first_bad_index"], list) and isinstance(details["max_rel"], float), details
    assert first["opinfo"] and re.match(r"\w+ sample \d+$", first["sample"]) and first["description"], first
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("mul.out"))
    assert re.search(r"mismatch .*max abs 1 rel \S+, first bad at \[.*\] got .* expected ", line), proc.stdout
    # Samples that went wrong through mul.out do not count against the kernels beside it.
    for kernel in ("add.out", "_softmax.out", "relu.out"):
        assert report["kernels"][kernel]["status"] == "pass", (kernel, report["kernels"][kernel])


SITECUSTOMIZE = """
    import os

    if os.environ.get("VENDOR_TEST_ABORT_OP"):
        import torch_devx

        torch_devx.diagnostics.override_kernel(os.environ["VENDOR_TEST_ABORT_OP"], lambda *args: os.abort())
"""


def test_crash_is_isolated_and_attributed(tmp_path):
    # relu aborts its process (a Python override of the op standing in for a kernel that
    # segfaults); the nn.functional.relu OpInfo is the second of three a single child runs.
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    proc, report = run_kit(tmp_path, ["--ops", r"^(relu|_softmax|mul)\.out$",
                                      "--opinfos", r"^(softmax|nn\.functional\.relu|__rmul__)$",
                                      "--jobs", "1", "--samples", "1", "--dtypes", "float32"],
                           VENDOR_TEST_ABORT_OP="relu", PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO / 'src'}")
    assert proc.returncode == 1, describe(proc)
    [crash] = report["crashes"]
    assert crash["opinfo"] == "nn.functional.relu" and crash["sample"] == "float32 sample 0", crash
    assert crash["reason"] == "killed by SIGABRT" and crash["reproduced"], crash
    assert crash["op"] == "relu" and crash["kernel"] == "relu.out", crash
    assert report["kernels"]["relu.out"]["status"] == "crash"
    assert table_status(proc.stdout, "relu.out") == "crash", proc.stdout
    # The OpInfos before and after the crash ran.
    assert set(report["opinfos"]) == {"softmax", "__rmul__"}
    assert report["kernels"]["_softmax.out"]["status"] == "pass"
    assert report["kernels"]["mul.out"]["status"] == "pass"


def test_bad_options(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torch_devx", "vendor-test", "--ops", "no_such_kernel"],
                          env=child_env(DEVX_SIM_KERNELS="own-only"), cwd=tmp_path, capture_output=True, text=True,
                          timeout=KIT_TIMEOUT_S)
    assert proc.returncode == 2 and "matches none of the" in proc.stderr, describe(proc)
    assert not os.listdir(tmp_path)
