"""pytest plugin loaded by `python -m torch_devx pytorch-tests` into each run of a PyTorch test file.

It imports torch_devx before the test file is collected (so that `instantiate_device_type_tests`
sees devx, or under mocking a CUDA that is devx), and applies the vendor's expectations file: tests
to skip, with the reason, and tolerances to widen for tests whose numbers a vendor's kernels
legitimately round differently. The file's path comes in DEVX_PYTORCH_TESTS_EXPECTATIONS.
It also writes each test's outcome, as it happens, to the JSON-lines file named by
DEVX_PYTORCH_TESTS_PROGRESS: a run killed by the runner's timeout writes no JUnit report, and this
keeps what it had done.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

import pytest

ENV_EXPECTATIONS = "DEVX_PYTORCH_TESTS_EXPECTATIONS"
ENV_PROGRESS = "DEVX_PYTORCH_TESTS_PROGRESS"


@dataclass(frozen=True)
class Expectations:
    skips: tuple[tuple[re.Pattern, str], ...]
    tolerances: tuple[tuple[re.Pattern, float, float], ...]

    def skip_reason(self, test_id: str) -> str | None:
        return next((reason for pattern, reason in self.skips if pattern.search(test_id)), None)

    def tolerance(self, test_id: str) -> tuple[float, float] | None:
        return next(((atol, rtol) for pattern, atol, rtol in self.tolerances if pattern.search(test_id)), None)


def load_expectations(path: str | None) -> Expectations:
    """Read an expectations YAML file:

        skip:
          - {test: "TestCommonDEVX.test_out_warning_.*", reason: "why"}
        tolerance:
          - {test: "test_reductions.py::.*_float16", atol: 1e-3, rtol: 1e-3}

    `test` is a regular expression searched in the test id ("test_x.py::Class::test"). A malformed
    file is a ValueError naming it and the entry."""
    if not path:
        return Expectations((), ())
    import yaml

    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict) or set(data) - {"skip", "tolerance"}:
        raise ValueError(f"{path}: expected a mapping with 'skip' and/or 'tolerance' lists")
    skips, tolerances = [], []
    for index, entry in enumerate(data.get("skip") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("test"), str) or not entry.get("reason"):
            raise ValueError(f"{path}: skip entry {index} needs 'test' (a regex) and 'reason'")
        skips.append((_compile(path, entry["test"]), str(entry["reason"])))
    for index, entry in enumerate(data.get("tolerance") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("test"), str):
            raise ValueError(f"{path}: tolerance entry {index} needs 'test' (a regex)")
        try:
            atol, rtol = float(entry.get("atol", 0.0)), float(entry.get("rtol", 0.0))
        except (TypeError, ValueError):
            raise ValueError(f"{path}: tolerance entry {index}: atol and rtol must be numbers") from None
        tolerances.append((_compile(path, entry["test"]), atol, rtol))
    return Expectations(tuple(skips), tuple(tolerances))


def _compile(path: str, pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ValueError(f"{path}: bad test pattern {pattern!r}: {e}") from None


_expectations = Expectations((), ())


def pytest_configure(config: Any) -> None:
    global _expectations
    import torch_devx  # noqa: F401  (devx exists before the test file instantiates its device tests)

    _expectations = load_expectations(os.environ.get(ENV_EXPECTATIONS))


def pytest_collection_modifyitems(config: Any, items: list) -> None:
    for item in items:
        reason = _expectations.skip_reason(item.nodeid)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"expectations: {reason}"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: Any) -> Any:
    yield
    tolerance = _expectations.tolerance(item.nodeid)
    instance = getattr(item, "instance", None)
    if tolerance is not None and instance is not None:
        # PyTorch's TestCase keeps these per instance; its device-type tests start from them and
        # only raise them further with @precisionOverride / @toleranceOverride.
        atol, rtol = tolerance
        instance.precision = max(instance.precision, atol)
        instance.rel_tol = max(instance.rel_tol, rtol)


def _first_line(report: Any) -> str:
    if isinstance(report.longrepr, tuple):  # a skip: (file, line, "Skipped: reason")
        return str(report.longrepr[2]).removeprefix("Skipped: ")[:300]
    text = str(report.longrepr or "").strip()
    lines = [line for line in text.splitlines() if line.strip()]
    # pytest's long form ends with the exception ("E   ModuleNotFoundError: ..."): that line says most.
    errors = [line for line in lines if line.startswith("E ")]
    return (errors[-1][1:].strip() if errors else lines[-1] if lines else "")[:300]


def _record(entry: dict) -> None:
    path = os.environ.get(ENV_PROGRESS)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


def pytest_runtest_logreport(report: Any) -> None:
    # One line per test: its call, or the setup or teardown phase that decided its outcome.
    if report.when == "call" or (report.when == "setup" and not report.passed) or \
            (report.when == "teardown" and report.failed):
        # JUnit's words: passed, skipped, failure (the test's assertion), error (its setup or teardown).
        outcome = ("failure" if report.when == "call" else "error") if report.failed else report.outcome
        entry = {"test": report.nodeid, "outcome": outcome}
        if not report.passed:
            entry["message"] = _first_line(report)
        _record(entry)


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _record({"test": report.nodeid, "outcome": "collection-error", "message": _first_line(report)})
