"""Runs the passes of `make test` one after another, each to its end even when an earlier one
failed, then prints one summary line per pass and a total; exits 1 if any pass failed.

Each pass is pytest with a progress line per test file. Its counts come from pytest's JUnit XML
(written under build/test-results/), so they do not depend on parsing pytest's terminal output.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple, Optional

REPO = Path(__file__).resolve().parents[1]


class Pass(NamedTuple):
    name: str
    env: dict[str, str]
    paths: list[str]


# The suite runs with synchronous streams, then with asynchronous ones (ops return before their
# kernels run), where missing synchronisation would show as wrong data; then the tensor tests
# with CUDA mocking off.
PASSES = [
    Pass("sync", {}, ["tests"]),
    Pass("async", {"DEVX_SIM_ASYNC": "1"}, ["tests"]),
    Pass("mock-off", {"DEVX_MOCK_CUDA": "0"}, ["tests/test_tensors.py"]),
]


class Result(NamedTuple):
    passed: int
    failed: int  # failures and errors (in setup or teardown) alike
    skipped: int


def read_results(path: Path) -> Optional[Result]:
    """The counts in a JUnit XML file pytest wrote; None when it wrote none (pytest crashed or
    could not start)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = failed = errors = skipped = 0
    for suite in suites:
        total += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0))
        errors += int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return Result(total - failed - errors - skipped, failed + errors, skipped)


def describe(result: Result) -> str:
    return f"{result.passed} passed, {result.failed} failed, {result.skipped} skipped"


def run_pass(test_pass: Pass, results_dir: Path, pytest_args: list[str]) -> tuple[int, Optional[Result], float]:
    xml = results_dir / f"{test_pass.name}.xml"
    xml.unlink(missing_ok=True)
    env = dict(os.environ, **test_pass.env)
    shown_env = " ".join(f"{k}={v}" for k, v in test_pass.env.items())
    print(f"\n==== make test, pass {test_pass.name}: {shown_env} pytest {' '.join(test_pass.paths)}", flush=True)
    start = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "pytest", f"--junitxml={xml}", *pytest_args, *test_pass.paths],
                           cwd=REPO, env=env)
    return code, read_results(xml), time.monotonic() - start


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=[p.name for p in PASSES],
                        help="run this pass only (repeatable); default: all")
    parser.add_argument("--results-dir", type=Path, default=REPO / "build" / "test-results",
                        help="where the JUnit XML of each pass goes")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    args = parser.parse_args(argv)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    chosen = [p for p in PASSES if not args.only or p.name in args.only]
    lines = []
    totals = Result(0, 0, 0)
    failed_passes = 0
    for test_pass in chosen:
        code, result, seconds = run_pass(test_pass, args.results_dir, args.pytest_args)
        ok = code == 0 and result is not None
        failed_passes += not ok
        if result is None:
            counts = "no results"
        else:
            counts = describe(result)
            totals = Result(*(a + b for a, b in zip(totals, result)))
        verdict = "ok" if ok else f"FAILED (pytest exit code {code})"
        lines.append(f"pass {test_pass.name}: {counts} in {seconds:.0f} s: {verdict}")
    print("\n==== make test summary")
    for line in lines:
        print(line)
    print(f"{failed_passes} of {len(chosen)} passes failed" if failed_passes else f"all {len(chosen)} passes ok")
    # Last, alone on its line: the total in the form CI reads ("N passed, N failed").
    print(f"total: {describe(totals)}", flush=True)
    return 1 if failed_passes else 0


if __name__ == "__main__":
    sys.exit(main())
