"""Reports name the user's line even when the user's project lives in a folder called `torch` or
`torch_devx`: library code is recognised by the installed packages' real locations, not by folder
names (torch_devx._frames)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import assert_child_ok, child_env

SCRIPT = textwrap.dedent("""
    import torch, torch_devx
    from torch_devx import diagnostics as diag
    keep = []
    keep.append(torch.zeros(1000, device="devx"))  # line 5: the leak
    a = torch.randn(3, device="devx")
    diag.override_kernel("mul.Tensor", lambda x, y: torch.ops.aten.add.Tensor(x, y))
    diag.set_autocompare(["mul.*"], raise_on_mismatch=True)
    try:
        a * a  # line 10: the wrong kernel
    except RuntimeError as e:
        print("AUTOCOMPARE", e)
""")


@pytest.mark.parametrize("folder", ["torch", "torch_devx", "site-packages-of-mine"])
def test_reports_name_the_users_line_in_a_folder_of_any_name(tmp_path: Path, folder: str) -> None:
    script = tmp_path / folder / "tests" / "job.py"
    script.parent.mkdir(parents=True)
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], env=child_env(DIPU_MEM_CHECK="1"), cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert_child_ok(proc)
    assert f"called from {script}:10" in proc.stdout
    leak = next(l for l in proc.stderr.splitlines() if f"{script}:5" in l)
    assert leak.split()[:5] == ["3.9", "KiB", "1x", "devx:0", f"{script}:5"], leak


def test_library_files_are_those_of_the_installed_packages() -> None:
    import torch
    import torch_devx
    from torch_devx._frames import is_library_file

    assert is_library_file(torch.__file__) and is_library_file(torch_devx.__file__)
    assert is_library_file(subprocess.__file__) and is_library_file("<frozen runpy>")
    assert is_library_file(pytest.__file__)  # site-packages
    assert not is_library_file(__file__)
    assert not is_library_file("/home/me/torch/train.py") and not is_library_file("/work/torch_devx/tests/t.py")
    assert not is_library_file("<string>")  # python -c: the user's code
