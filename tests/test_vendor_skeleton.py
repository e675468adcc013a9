"""Vendors out of tree: examples/vendor_skeleton builds against the installed headers with CMake
(find_package(torch_devx)) and runs ops through devx, found by path, by name in DEVX_VENDOR_PATH
or through a package's entry point; broken vendors are Python exceptions naming the vendor."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_child_ok, run_python

REPO = Path(__file__).resolve().parents[1]
SKELETON = REPO / "examples" / "vendor_skeleton"
BIN = Path(sys.executable).parent

RUN_OPS = """
import torch, torch_devx
from torch_devx import diagnostics as d
assert torch_devx.vendor == "skeleton", torch_devx.vendor
assert torch.devx.get_device_name() == "devx skeleton device"
a, b = torch.randn(3, 4), torch.randn(4)
x, y = a.to("devx"), b.to("devx")
d.reset_kernel_stats(); d.reset_fallback_stats()
torch.testing.assert_close((x + y).cpu(), a + b)
torch.testing.assert_close(torch.relu(x * y).cpu(), torch.relu(a * b))
torch.testing.assert_close(x.t().contiguous().cpu(), a.t().contiguous())
torch.testing.assert_close(torch.full((2, 2), 3.0, device="devx").cpu(), torch.full((2, 2), 3.0))
torch.testing.assert_close((x - y).cpu(), a - b)          # no kernel: the CPU fallback
stats = d.kernel_stats()
assert stats["vendor"] == {"add.out": 1, "mul.out": 1, "relu.out": 1, "copy.out": 1, "fill.Scalar_out": 1}, stats
assert stats["aten"] == 0 and d.fallback_stats() == {"sub.Tensor": 1}, (stats, d.fallback_stats())
assert d.coverage()["add.Tensor"] == "vendor" and d.coverage()["sub.Tensor"] == "fallback"
print("ok")
"""


def cmake() -> str:
    return str(BIN / "cmake") if (BIN / "cmake").exists() else shutil.which("cmake") or "cmake"


@pytest.fixture(scope="module")
def skeleton(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch_devx.utils

    build = tmp_path_factory.mktemp("skeleton")
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={BIN / 'ninja'}"] if (BIN / "ninja").exists() else []
    subprocess.run([cmake(), "-S", str(SKELETON), "-B", str(build), *generator,
                    f"-DCMAKE_PREFIX_PATH={torch_devx.utils.cmake_prefix_path}"],
                   check=True, capture_output=True, text=True)
    subprocess.run([cmake(), "--build", str(build)], check=True, capture_output=True, text=True)
    lib = build / "libdevx_vendor_skeleton.so"
    assert lib.is_file()
    return lib


def test_skeleton_by_path_runs_its_kernels_and_falls_back_for_the_rest(skeleton: Path) -> None:
    proc = run_python(RUN_OPS, DEVX_VENDOR=str(skeleton))
    assert_child_ok(proc)
    assert "ok" in proc.stdout


def test_skeleton_by_name_in_devx_vendor_path(skeleton: Path) -> None:
    proc = run_python(RUN_OPS, DEVX_VENDOR="skeleton", DEVX_VENDOR_PATH=f"/nonexistent:{skeleton.parent}")
    assert_child_ok(proc)


def test_skeleton_through_an_entry_point(skeleton: Path, tmp_path: Path) -> None:
    # A vendor package announces its library in the torch_devx.vendors entry point group.
    (tmp_path / "acme_vendor.py").write_text(f"def library():\n    return {str(skeleton)!r}\n")
    dist = tmp_path / "acme_vendor-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-vendor\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[torch_devx.vendors]\nacme = acme_vendor:library\n")
    proc = run_python(RUN_OPS + "from torch_devx import _vendors\nassert 'acme' in _vendors.available()\n",
                      DEVX_VENDOR="acme", PYTHONPATH=str(tmp_path))
    assert_child_ok(proc)


def test_unknown_vendor_name_lists_what_was_searched() -> None:
    proc = run_python("import torch_devx", DEVX_VENDOR="acme")
    assert proc.returncode == 1
    assert "ValueError" in proc.stderr and "'acme'" in proc.stderr and "DEVX_VENDOR_PATH" in proc.stderr
    assert "cpu_sim" in proc.stderr  # the vendors that are there


BROKEN = {
    "NO_ENTRY": "does not export devx_vendor_get_api",
    "WRONG_API_VERSION": "implements vendor API version",
    "WRONG_KERNEL_ABI": "kernel ABI version",
    "NULL_FUNCTION": "leaves NULL: memcpy_async",
    "NULL_KERNEL": "NULL function for 'add.out'",
}


@pytest.fixture(scope="module")
def compiler() -> str:
    # The project's build needs a C/C++ toolchain (README), so a C compiler is there.
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc or gcc) on PATH to build the broken vendors"
    return cc


def build_broken(cc: str, flag: str, out_dir: Path) -> Path:
    import torch_devx.utils

    lib = out_dir / f"libdevx_vendor_broken_{flag.lower()}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-std=c11", f"-D{flag}", f"-I{torch_devx.utils.get_include()}",
                    f"-I{SKELETON}", str(REPO / "tests" / "vendors" / "broken.c"), "-o", str(lib)],
                   check=True, capture_output=True, text=True)
    return lib


@pytest.mark.parametrize("flag", sorted(BROKEN))
def test_a_broken_vendor_is_an_exception_naming_it(compiler: str, tmp_path: Path, flag: str) -> None:
    lib = build_broken(compiler, flag, tmp_path)
    proc = run_python("import torch_devx", DEVX_VENDOR=str(lib))
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "Error" in last and BROKEN[flag] in proc.stderr, proc.stderr
    assert str(lib) in proc.stderr or "skeleton" in proc.stderr, proc.stderr


def test_a_kernel_error_names_the_vendor_and_the_kernel(compiler: str, tmp_path: Path) -> None:
    lib = build_broken(compiler, "FAILING_KERNEL", tmp_path)
    proc = run_python("""
        import torch, torch_devx
        x = torch.ones(3).to("devx")
        try:
            x + x
        except RuntimeError as e:
            print(e)
        else:
            raise AssertionError("no error")
        """, DEVX_VENDOR=str(lib))
    assert_child_ok(proc)
    assert "vendor skeleton kernel add.out (for add.Tensor) failed (DEVX_ERROR)" in proc.stdout
    assert "the add kernel hit a device fault" in proc.stdout


SANITIZE = """
import ctypes, torch, torch_devx
from torch_devx import diagnostics

def mul_writing_past_its_input(a, b):
    ctypes.memmove(a.data_ptr() + a.untyped_storage().nbytes(), b"\\x01" * 8, 8)
    return torch.zeros_like(a)

x = torch.ones(100).to("devx")
diagnostics.override_kernel("mul.Tensor", mul_writing_past_its_input)
try:
    x * x
except RuntimeError as e:
    print("CAUGHT", e)
diagnostics.override_kernel("mul.Tensor", None)
print("READ", ctypes.string_at(x.data_ptr(), 4).hex())
print("SUM", x.cpu().sum().item())
"""


def check_sanitizer_without_host_access(proc, vendor: str) -> None:
    assert_child_ok(proc)
    # Guard zones are the runtime's: they work on any vendor.
    assert "out-of-bounds write after op mul.Tensor" in proc.stdout, proc.stdout
    # Host-access detection is the vendor's, and this one has none: said, not silently skipped.
    assert "READ 0000803f" in proc.stdout and "SUM 100.0" in proc.stdout
    assert f"vendor '{vendor}' cannot watch its memory" in proc.stderr, proc.stderr
    assert "host accesses to device memory are not detected" in proc.stderr


def test_sanitizer_on_a_vendor_without_host_access(skeleton: Path) -> None:
    proc = run_python(SANITIZE, DEVX_VENDOR=str(skeleton), DEVX_SIM_SANITIZE="1")
    check_sanitizer_without_host_access(proc, "skeleton")


def test_a_version_4_table_loads_and_its_missing_entries_are_null(compiler: str, tmp_path: Path) -> None:
    # Its host_access slot lies past the end of a version-4 table (garbage here): never read.
    lib = build_broken(compiler, "VERSION_4_TABLE", tmp_path)
    proc = run_python(SANITIZE, DEVX_VENDOR=str(lib), DEVX_SIM_SANITIZE="1")
    check_sanitizer_without_host_access(proc, "skeleton")
