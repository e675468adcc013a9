"""`python -m torch_devx pytorch-tests`: PyTorch's device-generic test machinery run for devx.

No PyTorch checkout is available here (the test files are not in the wheel), so a checkout-shaped
folder holds one test file written the way PyTorch's are: `instantiate_device_type_tests` over a
`TestCase`, run by the real runner with PyTorch's real test framework, as the PrivateUse1 device
and CUDA-instantiated under mocking (CudaNonDefaultStream and all).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from torch_devx.tools._pytorch_tests_plugin import load_expectations

PROBE = textwrap.dedent('''
    import torch
    from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
    from torch.testing._internal.common_utils import TestCase, run_tests
    from torch_devx._real_device import real_device


    class TestProbe(TestCase):
        def test_lands_on_devx(self, device):
            x = torch.ones(2, device=device)
            # CUDA-instantiated, devx tensors report their device as cuda, as CUDA's tests expect.
            self.assertEqual(x.device.type, "cuda" if device.startswith("cuda") else "devx")
            self.assertEqual(real_device(x).type, "devx")
            self.assertEqual((x + x).cpu(), torch.full((2,), 2.0))
            if device.startswith("cuda"):
                # PyTorch runs CUDA tests on a side stream (CudaNonDefaultStream): here a devx one.
                self.assertNotEqual(torch.cuda.current_stream().stream_id, 0)

        def test_close(self, device):
            self.assertEqual(torch.tensor([1.0], device=device).cpu(), torch.tensor([1.0005]))

        def test_broken(self, device):
            raise AssertionError("planted failure")

        @dtypes(torch.float32, torch.int64)
        def test_sum(self, device, dtype):
            self.assertEqual(torch.arange(5, device=device, dtype=dtype).sum().item(), 10)


    instantiate_device_type_tests(TestProbe, globals())

    if __name__ == "__main__":
        run_tests()
''')


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "pytorch"
    (root / "test").mkdir(parents=True)  # only test/: a checkout of just the test files will do
    (root / "version.txt").write_text(torch.__version__.split("+")[0] + "a0\n")
    (root / "test" / "test_probe.py").write_text(PROBE)
    return root


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch_devx", "pytorch-tests", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_both_modes_run_pytorchs_framework_on_devx_and_count_failures(checkout: Path, tmp_path: Path) -> None:
    # PyTorch's CUDA test framework asks cuDNN's version; a torch with cuDNN (a CUDA build) then
    # checks it against torch.cuda's device capability, which mocking answers with devx's.
    try:
        torch.backends.cudnn.version()
    except RuntimeError as e:
        pytest.skip(f"this torch's cuDNN refuses devx's device capability under CUDA mocking: {e}")
    report = tmp_path / "report.json"
    result = run_cli("--source", str(checkout), "--files", "test_probe.py", "--out", str(tmp_path / "out"),
                     "--json", str(report), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {row["mode"]: row for row in json.loads(report.read_text())}
    assert set(rows) == {"privateuse1", "cuda"}
    for mode, row in rows.items():
        assert row["status"] == "ran", row["output_tail"]
        assert (row["passed"], row["failed"], row["errors"]) == (3, 2, 0), row
        failed = sorted(f["test"].rsplit("::", 1)[1] for f in row["failures"])
        suffix = "devx" if mode == "privateuse1" else "cuda"
        assert failed == [f"test_broken_{suffix}", f"test_close_{suffix}"]
        assert all(f"TestProbe{mode.upper()}::" in f["test"] for f in row["failures"])
    assert "| test_probe.py | cuda | 3 | 2 | 0 |" in result.stdout


def test_expectations_skip_with_reason_and_widen_tolerances(checkout: Path, tmp_path: Path) -> None:
    expectations = tmp_path / "vendor.yaml"
    expectations.write_text(textwrap.dedent('''
        skip:
          - {test: "test_broken", reason: "planted"}
        tolerance:
          - {test: "test_close", atol: 1.0e-3, rtol: 0}
    '''))
    report = tmp_path / "report.json"
    result = run_cli("--source", str(checkout), "--files", "test_probe.py", "--as", "privateuse1",
                     "--expectations", str(expectations), "--out", str(tmp_path / "out"), "--json", str(report),
                     cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    [row] = json.loads(report.read_text())
    assert (row["passed"], row["failed"], row["skipped"], row["skipped_by_expectations"]) == (4, 0, 1, 1)


def test_bad_checkout_and_bad_expectations_are_clear_errors(checkout: Path, tmp_path: Path) -> None:
    result = run_cli("--source", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 2 and "is not a PyTorch source checkout" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("skip:\n  - {test: 'x('}\n")
    with pytest.raises(ValueError, match="skip entry 0 needs 'test'"):
        load_expectations(str(bad))
    bad.write_text("skip:\n  - {test: 'x(', reason: r}\n")
    result = run_cli("--source", str(checkout), "--expectations", str(bad), cwd=tmp_path)
    assert result.returncode == 2 and "bad test pattern 'x('" in result.stderr


STUCK = textwrap.dedent('''
    import time
    from torch.testing._internal.common_device_type import instantiate_device_type_tests
    from torch.testing._internal.common_utils import TestCase


    class TestStuck(TestCase):
        def test_a_quick(self, device):
            pass

        def test_b_stuck(self, device):
            time.sleep(3600)


    instantiate_device_type_tests(TestStuck, globals())
''')


def test_a_file_that_does_not_import_and_one_that_times_out_say_so(checkout: Path, tmp_path: Path) -> None:
    # A checkout newer than the installed torch: its helpers moved.
    (checkout / "test" / "test_moved_helper.py").write_text("from torch.testing._internal.no_such_helper import x\n")
    (checkout / "test" / "test_stuck.py").write_text(STUCK)
    report = tmp_path / "report.json"
    result = run_cli("--source", str(checkout), "--files", "test_moved_helper.py,test_stuck.py", "--as", "privateuse1",
                     "--timeout", "45", "--out", str(tmp_path / "out"), "--json", str(report), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {row["file"]: row for row in json.loads(report.read_text())}
    moved, stuck = rows["test_moved_helper.py"], rows["test_stuck.py"]
    assert moved["status"] == "collection-error", moved
    assert "no_such_helper" in moved["failures"][0]["message"], moved["failures"]
    # Killed by the timeout, it wrote no JUnit report: what ran before is still counted.
    assert stuck["status"] == "timeout" and stuck["passed"] == 1, stuck
    assert "| test_moved_helper.py | privateuse1 | did not import: ModuleNotFoundError" in result.stdout, result.stdout
    assert "| test_stuck.py | privateuse1 | 1 (then timeout) |" in result.stdout, result.stdout
