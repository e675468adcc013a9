"""The README's snippets work: every Python block runs (each in a fresh process, in an empty
folder), and every `python -m torch_devx ...` command line in its shell blocks is one the CLI
accepts. Commands that need a GPU, torchrun or a script of the reader's are parsed, not run."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import REPO, assert_child_ok, run_python

README = (REPO / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", README, flags=re.S | re.M)
PYTHON_BLOCKS = [code for lang, code in BLOCKS if lang == "python"]
CLI_LINES = [line.split("#", 1)[0].strip() for lang, code in BLOCKS if lang == "sh"
             for line in code.splitlines() if line.strip().startswith("python -m torch_devx")]


def test_the_readme_has_snippets() -> None:
    assert len(PYTHON_BLOCKS) >= 4 and len(CLI_LINES) >= 4


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_snippet_runs(index: int, tmp_path: Path) -> None:
    code = f"import os\nos.chdir({str(tmp_path)!r})\n" + PYTHON_BLOCKS[index]
    proc = run_python(code, timeout=300)
    assert_child_ok(proc)


@pytest.mark.parametrize("line", CLI_LINES)
def test_cli_line_is_accepted(line: str) -> None:
    from torch_devx.__main__ import build_parser

    argv = shlex.split(line)[3:]  # after "python -m torch_devx"
    args = build_parser().parse_args(argv)
    if "script" in vars(args):
        assert args.script.endswith(".py")  # the options before it did not swallow it
