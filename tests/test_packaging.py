"""Packaging: the sdist holds every source file and no build product; a wheel holds the core
library beside the bindings, which find it there; the package refuses a torch of another release
than the one it was built against, by name, instead of crashing."""
from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from conftest import REPO, run_python


def test_sdist_has_the_sources_and_no_build_products(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path)], cwd=str(REPO),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    [archive] = tmp_path.glob("torch_devx-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    tracked = subprocess.run(["git", "ls-files"], cwd=str(REPO), capture_output=True, text=True).stdout.split()
    # What CMakeLists.txt builds from, the unit tests' and the benchmarks' C++ included.
    needed = [f for f in tracked if f.startswith(("csrc/", "scripts/", "src/", "cmake/", "tests/cpp/", "bench/ext/")) or
              f in ("CMakeLists.txt", "setup.py", "pyproject.toml", "README.md")]
    assert needed and not [f for f in needed if f not in names]
    assert not [n for n in names if n.endswith((".so", ".pyc")) or n.startswith(("build/", "src/torch_devx/include/"))
                or n.endswith("_build_info.py")]


def test_import_names_both_torch_releases_when_they_differ(tmp_path: Path) -> None:
    # A copy of the package whose build record names another torch release.
    import shutil

    import torch

    package = tmp_path / "torch_devx"
    shutil.copytree(REPO / "src" / "torch_devx", package, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    major, minor = torch.__version__.split(".")[:2]
    other = f"{major}.{int(minor) + 1}.0"
    (package / "_build_info.py").write_text(f"TORCH_VERSION = {other!r}\n")
    proc = run_python("import torch_devx", PYTHONPATH=str(tmp_path))
    assert proc.returncode == 1
    assert f"torch_devx was built against torch {other}, but torch {torch.__version__} is installed" in proc.stderr
    assert "ImportError" in proc.stderr


def dynamic_section(library: Path) -> dict[str, list[str]]:
    """NEEDED and RUNPATH entries of a shared library, as readelf prints them."""
    out = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    entries: dict[str, list[str]] = {"NEEDED": [], "RUNPATH": []}
    for line in out.splitlines():
        for tag in entries:
            if f"({tag})" in line:
                entries[tag].append(line.split("[", 1)[1].rsplit("]", 1)[0])
    return entries


def test_the_core_library_needs_no_python_and_the_bindings_find_it_beside_them() -> None:
    package = REPO / "src" / "torch_devx"
    core = dynamic_section(package / "libdevx_core.so")
    assert not [n for n in core["NEEDED"] if "python" in n], core["NEEDED"]
    assert "libtorch_cpu.so" in core["NEEDED"]
    [bindings] = package.glob("_C.*.so")
    c = dynamic_section(bindings)
    assert "libdevx_core.so" in c["NEEDED"] and "libtorch_python.so" in c["NEEDED"]
    assert "$ORIGIN" in c["RUNPATH"][0].split(":")
    # Benchmark-only code is not in the product (its whole symbol table, local symbols too).
    for library in (package / "libdevx_core.so", bindings):
        symbols = subprocess.run(["nm", "-C", str(library)], capture_output=True, text=True, check=True).stdout
        assert "wrap_nodiag_" not in symbols and "bench_wrappers" not in symbols and "_time_" not in symbols


def test_a_wheel_ships_the_core_library_and_runs_from_where_it_is_installed(tmp_path: Path) -> None:
    # Built from the build folder `make build` keeps up to date: configured and checked, not rebuilt.
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                           "-w", str(tmp_path / "dist"), str(REPO)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("torch_devx-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(site)
    assert "torch_devx/libdevx_core.so" in names
    assert [n for n in names if n.startswith("torch_devx/_C.") and n.endswith(".so")]
    assert "torch_devx/libdevx_vendor_cpu_sim.so" in names
    child = run_python("""
        import torch, torch_devx
        y = torch.ones(3, device="devx") + 1
        assert y.cpu().tolist() == [2.0, 2.0, 2.0]
        maps = open("/proc/self/maps").read()
        print(torch_devx.__file__)
        print(sorted({line.split()[-1] for line in maps.splitlines() if line.endswith("libdevx_core.so")}))
    """, PYTHONPATH=str(site))
    assert child.returncode == 0, child.stderr
    module_file, core_paths = child.stdout.splitlines()[-2:]
    assert module_file == str(site / "torch_devx" / "__init__.py")
    assert core_paths == str([str(site / "torch_devx" / "libdevx_core.so")])
