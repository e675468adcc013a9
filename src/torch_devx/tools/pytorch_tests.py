"""PyTorch's own device-generic tests, run for devx: `python -m torch_devx pytorch-tests`.

PyTorch's test files instantiate each test class once per device type. Run from a source checkout
of the installed torch's version, they test devx two ways:
- as the PrivateUse1 device type (`TestCommonDEVX`; CUDA mocking off), the way PyTorch tests any
  out-of-tree backend;
- as CUDA under mocking (`TestCommonCUDA`, with `CudaNonDefaultStream` and the CUDA-only tests, and
  devx tensors reporting their device as cuda), the way DIPU runs PyTorch's CUDA cases on its device.
Each file runs in its own pytest child with a timeout, with a vendor's expectations file (skips with
reasons, widened tolerances; see _pytorch_tests_plugin.load_expectations) applied. The result is a
table of counts per file and mode, and a JSON report listing every failure.
The test files are not part of a torch wheel: this is a tool for people with a checkout, not for CI.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ._pytorch_tests_plugin import ENV_EXPECTATIONS, ENV_PROGRESS, load_expectations

# The files issue 19 names, with the keyword that selects their device-generic part.
DEFAULT_FILES = ("test_ops.py:TestCommon", "test_view_ops.py", "test_indexing.py", "test_binary_ufuncs.py",
                 "test_reductions.py")
MODES = ("privateuse1", "cuda")


@dataclass
class FileResult:
    file: str
    mode: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    skipped_by_expectations: int = 0
    seconds: float = 0.0
    # ran | collection-error (the file did not import: counts are empty) | timeout (counts are what
    # ran before the run was killed) | no-report (pytest itself failed: see output_tail)
    status: str = "ran"
    failures: list[dict] = field(default_factory=list)
    output_tail: str = ""


def _mode_env(mode: str) -> dict[str, str]:
    if mode == "privateuse1":
        import torch

        # The device type's name is the backend's ("devx"); mocking off, so that no CUDA tests exist.
        return {"PYTORCH_TESTING_DEVICE_ONLY_FOR": torch._C._get_privateuse1_backend_name(), "DEVX_MOCK_CUDA": "0"}
    if mode == "cuda":
        # CUDA's tests compare tensors' devices with "cuda" (DIPU runs them with
        # DIPU_PYTHON_DEVICE_AS_CUDA=1 for the same reason).
        return {"PYTORCH_TESTING_DEVICE_ONLY_FOR": "cuda", "DEVX_MOCK_CUDA": "1", "DEVX_DEVICE_AS_CUDA": "1"}
    raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")


def _parse_progress(path: Path, result: FileResult) -> None:
    """The plugin's line per test, complete even for a run the timeout killed."""
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:  # the line being written when the run was killed
            continue
        _count(result, entry["test"], entry["outcome"], entry.get("message", ""))


def _count(result: FileResult, test_id: str, outcome: str, message: str) -> None:
    if outcome == "passed":
        result.passed += 1
    elif outcome == "skipped":
        result.skipped += 1
        if message.startswith("expectations:"):
            result.skipped_by_expectations += 1
    else:
        if outcome == "failure":
            result.failed += 1
        else:
            result.errors += 1
        lines = message.strip().splitlines()
        result.failures.append({"test": test_id, "kind": outcome, "message": lines[0][:300] if lines else ""})


def run_file(source: Path, spec: str, mode: str, expectations: str | None, timeout: float, out_dir: Path,
             keyword: str | None = None) -> FileResult:
    name, _, file_keyword = spec.partition(":")
    result = FileResult(file=spec, mode=mode)
    report = out_dir / f"{Path(name).stem}.{mode}.xml"
    progress = report.with_suffix(".jsonl")
    report.unlink(missing_ok=True)
    progress.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", str(source / "test" / name), "-q", "-p", "no:cacheprovider",
               "-p", "torch_devx.tools._pytorch_tests_plugin", f"--junitxml={report}"]
    selection = " and ".join(f"({k})" for k in (file_keyword, keyword) if k)
    if selection:
        command += ["-k", selection]
    env = dict(os.environ, **_mode_env(mode), **{ENV_PROGRESS: str(progress)})
    if expectations:
        env[ENV_EXPECTATIONS] = str(Path(expectations).resolve())
    start = time.monotonic()
    try:
        # PyTorch's tests import their helpers relative to test/.
        child = subprocess.run(command, cwd=source / "test", env=env, capture_output=True, text=True, timeout=timeout)
        result.output_tail = (child.stdout + child.stderr)[-2000:]
    except subprocess.TimeoutExpired as e:
        result.status = "timeout"
        result.output_tail = ((e.stdout or b"")[-2000:]).decode(errors="replace") if isinstance(e.stdout, bytes) else ""
    result.seconds = round(time.monotonic() - start, 1)
    # The plugin's record is complete whether or not the run ended, and names a collection error's
    # cause (JUnit only says "collection failure"); the JUnit report stays for other tools. With
    # neither, pytest itself failed; with a report and no record, no test was selected.
    if progress.exists():
        _parse_progress(progress, result)
    elif result.status == "ran" and not report.exists():
        result.status = "no-report"
    if result.status == "ran" and any(f["kind"] == "collection-error" for f in result.failures):
        result.status = "collection-error"
    return result


def check_source(source: Path) -> str | None:
    """Raise ValueError unless `source` is a PyTorch checkout; return a warning when its version is
    not the installed torch's (its tests may then use testing helpers this torch lacks)."""
    # Only test/ is read: a checkout of just the test files will do.
    if not (source / "test").is_dir():
        raise ValueError(f"{source} is not a PyTorch source checkout (it needs a test/ folder)")
    import torch

    version_file = source / "version.txt"
    checkout = version_file.read_text().strip() if version_file.exists() else "unknown"
    installed = torch.__version__.split("+")[0]
    if checkout.split("a")[0].rsplit(".", 1)[0] != installed.rsplit(".", 1)[0]:
        return f"the checkout is PyTorch {checkout}, the installed torch is {installed}: expect import errors"
    return None


def table(results: list[FileResult]) -> str:
    lines = ["| file | as | passed | failed | errors | skipped (by expectations) | time |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        counts = f"{r.passed} | {r.failed} | {r.errors} | {r.skipped} ({r.skipped_by_expectations})"
        if r.status == "collection-error":
            counts = f"did not import: {r.failures[0]['message'] if r.failures else ''} | | | "
        elif r.status == "no-report":
            counts = "no report (see the JSON's output_tail) | | | "
        elif r.status != "ran":
            counts = f"{r.passed} (then {r.status}) | {r.failed} | {r.errors} | {r.skipped} ({r.skipped_by_expectations})"
        lines.append(f"| {r.file} | {r.mode} | {counts} | {r.seconds:.0f} s |")
    return "\n".join(lines)


def main(source: str, files: list[str] | None, modes: list[str] | None, expectations: str | None,
         timeout: float, out: str, keyword: str | None, json_path: str | None) -> int:
    root = Path(source).resolve()
    warning = check_source(root)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    for mode in modes or MODES:
        _mode_env(mode)
    load_expectations(expectations)  # a malformed file stops here, not in every child
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for spec in files or DEFAULT_FILES:
        for mode in modes or MODES:
            result = run_file(root, spec, mode, expectations, timeout, out_dir, keyword)
            print(f"{spec} as {mode}: {result.status}, {result.passed} passed, {result.failed} failed, "
                  f"{result.errors} errors, {result.skipped} skipped ({result.seconds:.0f} s)", flush=True)
            results.append(result)
    print(table(results))
    if json_path:
        Path(json_path).write_text(json.dumps([asdict(r) for r in results], indent=1))
    bad = any(r.status != "ran" or r.failed or r.errors for r in results)
    return 1 if bad else 0
