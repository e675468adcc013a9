"""Packaging: the sdist holds every source file and no build product; the package refuses a torch
of another release than the one it was built against, by name, instead of crashing."""
from __future__ import annotations

import subprocess
import sys
import tarfile
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
    needed = [f for f in tracked if f.startswith(("csrc/", "scripts/", "src/", "cmake/")) or
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
