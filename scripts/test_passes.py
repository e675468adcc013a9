"""Runs the passes of `make test` one after another, each to its end even when an earlier one
failed, then prints one summary line per pass and a total; exits 1 if any pass failed.

The first pass builds and runs the C++ unit tests of the core (CMake target devx_core_tests,
GoogleTest); the others are pytest with a progress line per test file. Counts come from the JUnit
XML each writes (under build/test-results/), so they do not depend on parsing terminal output.
"""
from __future__ import annotations

import argparse
import os
import shutil
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


# The C++ unit tests: a pass of their own, run before the Python suite.
CPP_PASS = "cpp"

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


def run_cpp_pass(build_dir: Path, results_dir: Path) -> tuple[int, Optional[Result], float]:
    """Configures the build folder again (GoogleTest may have been installed since `make build`
    configured it), builds the unit tests and runs them."""
    xml = results_dir / f"{CPP_PASS}.xml"
    xml.unlink(missing_ok=True)
    cmake = shutil.which("cmake", path=os.path.dirname(sys.executable)) or "cmake"
    binary = build_dir / "devx_core_tests"
    print(f"\n==== make test, pass {CPP_PASS}: {binary}", flush=True)
    start = time.monotonic()
    if not (build_dir / "CMakeCache.txt").exists():
        print(f"no CMake build folder at {build_dir}: run `make build` first", flush=True)
        return 1, None, time.monotonic() - start
    configure = [cmake, "-S", str(REPO), "-B", str(build_dir)]
    build = [cmake, "--build", str(build_dir), "--target", "devx_core_tests"]
    for step, quiet in ((configure, True), (build, False)):
        code = subprocess.call(step, cwd=REPO, stdout=subprocess.DEVNULL if quiet else None)
        if code != 0:
            print(f"{' '.join(step)} failed (exit code {code})", flush=True)
            return code, None, time.monotonic() - start
    code = subprocess.call([str(binary), f"--gtest_output=xml:{xml}"], cwd=REPO)
    return code, read_results(xml), time.monotonic() - start


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=[CPP_PASS] + [p.name for p in PASSES],
                        help="run this pass only (repeatable); default: all")
    parser.add_argument("--build-dir", type=Path, default=Path(os.environ.get("DEVX_BUILD_DIR", REPO / "build")),
                        help="the CMake build folder of `make build`")
    parser.add_argument("--results-dir", type=Path, default=REPO / "build" / "test-results",
                        help="where the JUnit XML of each pass goes")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    args = parser.parse_args(argv)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    chosen = [p for p in PASSES if not args.only or p.name in args.only]
    lines = []
    totals = Result(0, 0, 0)
    failed_passes = 0
    runs = []
    if not args.only or CPP_PASS in args.only:
        runs.append((CPP_PASS, "exit code", lambda: run_cpp_pass(args.build_dir, args.results_dir)))
    runs += [(p.name, "pytest exit code", lambda p=p: run_pass(p, args.results_dir, args.pytest_args)) for p in chosen]
    for name, what_failed, run in runs:
        code, result, seconds = run()
        ok = code == 0 and result is not None
        failed_passes += not ok
        if result is None:
            counts = "no results"
        else:
            counts = describe(result)
            totals = Result(*(a + b for a, b in zip(totals, result)))
        verdict = "ok" if ok else f"FAILED ({what_failed} {code})"
        lines.append(f"pass {name}: {counts} in {seconds:.0f} s: {verdict}")
    print("\n==== make test summary")
    for line in lines:
        print(line)
    print(f"{failed_passes} of {len(runs)} passes failed" if failed_passes else f"all {len(runs)} passes ok")
    # Last, alone on its line: the total in the form CI reads ("N passed, N failed").
    print(f"total: {describe(totals)}", flush=True)
    return 1 if failed_passes else 0


if __name__ == "__main__":
    sys.exit(main())
