"""The build's and `make test`'s helpers: cmake/torch_from_python.py (what CMake learns about torch)
and scripts/test_passes.py (the per-pass counts and verdicts)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import REPO, assert_child_ok, run_python


def torch_facts() -> dict[str, list[str]]:
    proc = subprocess.run([sys.executable, str(REPO / "cmake" / "torch_from_python.py")],
                          capture_output=True, text=True, timeout=120)
    assert_child_ok(proc)
    facts: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        facts.setdefault(key, []).append(value)
    return facts


def test_cmake_learns_the_torch_this_interpreter_imports():
    import torch
    import torch.distributed as dist

    facts = torch_facts()
    assert facts["VERSION"] == [torch.__version__]
    torch_dir = Path(torch.__file__).parent
    assert Path(facts["LIBRARY_DIR"][0]) == torch_dir / "lib"
    for lib in ("torch", "torch_cpu", "c10", "torch_python"):
        assert (torch_dir / "lib" / f"lib{lib}.so").exists()
    assert Path(facts["INCLUDE_DIRS"][0]) == torch_dir / "include"
    assert (Path(facts["INCLUDE_DIRS"][0]) / "ATen" / "ATen.h").exists()
    assert facts["CXX11_ABI"] == [str(int(torch._C._GLIBCXX_USE_CXX11_ABI))]
    assert ("USE_DISTRIBUTED" in facts.get("DEFINITIONS", [])) == dist.is_available()
    assert all(Path(p).exists() for p in facts["OP_MODEL"]) and len(facts["OP_MODEL"]) == 2


def load_test_passes():
    spec = importlib.util.spec_from_file_location("test_passes", REPO / "scripts" / "test_passes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pass_counts_come_from_pytests_junit_xml(tmp_path):
    (tmp_path / "test_mixed.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("setup fails")

        def test_a(): pass
        def test_b(): pass
        def test_c(): assert False
        def test_d(broken): pass
        @pytest.mark.skip(reason="data for the counter: one skipped test")
        def test_e(): pass
    """))
    xml = tmp_path / "out.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                           str(tmp_path / "test_mixed.py")], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 1, proc.stdout
    passes = load_test_passes()
    result = passes.read_results(xml)
    assert result == passes.Result(passed=2, failed=2, skipped=1)
    assert passes.describe(result) == "2 passed, 2 failed, 1 skipped"
    assert passes.read_results(tmp_path / "missing.xml") is None


def test_every_pass_runs_and_a_failed_one_fails_the_run(tmp_path):
    """A pass whose pytest cannot start does not stop the next; the run exits 1 and says which failed."""
    code = f"""
        import sys
        sys.argv = ["test_passes.py", "--only", "mock-off", "--only", "async",
                    "--results-dir", {str(tmp_path)!r}, "--", "--no-such-pytest-option"]
        sys.path.insert(0, {str(REPO / "scripts")!r})
        import test_passes
        sys.exit(test_passes.main())
    """
    proc = run_python(code)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = proc.stdout.splitlines()[-5:]
    assert summary[0] == "==== make test summary"
    assert summary[1].startswith("pass async: no results in ") and summary[1].endswith("FAILED (pytest exit code 4)")
    assert summary[2].startswith("pass mock-off: no results in ") and summary[2].endswith("FAILED (pytest exit code 4)")
    assert summary[3:] == ["2 of 2 passes failed", "total: 0 passed, 0 failed, 0 skipped"]


def test_the_cpp_pass_without_a_build_folder_fails_and_says_so(tmp_path):
    code = f"""
        import sys
        sys.argv = ["test_passes.py", "--only", "cpp", "--build-dir", {str(tmp_path / "no-build")!r},
                    "--results-dir", {str(tmp_path)!r}]
        sys.path.insert(0, {str(REPO / "scripts")!r})
        import test_passes
        sys.exit(test_passes.main())
    """
    proc = run_python(code)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"no CMake build folder at {tmp_path / 'no-build'}: run `make build` first" in proc.stdout
    summary = proc.stdout.splitlines()[-4:]
    assert summary[1].startswith("pass cpp: no results in ") and summary[1].endswith("FAILED (exit code 1)")
    assert summary[2:] == ["1 of 1 passes failed", "total: 0 passed, 0 failed, 0 skipped"]
