"""torch_devx.tools.DivergenceFinder: every devx op replayed on the CPU from the same inputs; the first
op whose kernel is deliberately corrupted (diagnostics.override_kernel) is named with its module, its
Python line and a repro test that fails while the fault is planted and passes without it."""
from __future__ import annotations

import importlib.util
import inspect
import os
import sys

import pytest
import torch
import torch.nn as nn

from conftest import run_commands


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        h = self.act(self.fc1(x))  # TANH LINE
        return self.fc2(h) * 2


def _line_of(marker: str) -> int:
    lines, start = inspect.getsourcelines(Net.forward)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def wrong_tanh(t):
    return (torch.ops.aten.sigmoid(t * 2) * 2 - 1) * 1.05


def wrong_tanh_backward(grad, y):
    return torch.ops.aten.mul.Tensor(grad, 1 - y * y) * 1.05


def wrong_add_(self, other, alpha=1):
    return torch.ops.aten.copy_.default(self, torch.ops.aten.add.Tensor(self, other, alpha=alpha) + 0.5)


# The same overrides, fixed: a repro replays the override it names, so fixing the function fixes it.
RIGHT = {"wrong_tanh": lambda t: torch.ops.aten.tanh.default(t.cpu()).to(t.device),
         "wrong_tanh_backward": lambda grad, y: torch.ops.aten.mul.Tensor(grad, 1 - y * y),
         "wrong_add_": lambda self, other, alpha=1: torch.ops.aten.copy_.default(
             self, torch.ops.aten.add.Tensor(self, other, alpha=alpha))}


def fix_override(monkeypatch, name: str) -> None:
    monkeypatch.setattr(sys.modules[__name__], name, RIGHT[name])


@pytest.fixture
def diag(devx):
    yield devx.diagnostics
    for op in ("tanh", "tanh_backward", "add_.Tensor", "mm"):
        devx.diagnostics.override_kernel(op, None)
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    assert _get_current_dispatch_mode_stack() == []


def train_step(device: str = "devx") -> float:
    torch.manual_seed(0)
    model = Net().to(device)
    x = torch.randn(3, 4).to(device)
    loss = model(x).sum()
    loss.backward()  # BACKWARD LINE
    return loss.item()


def pytest_as_saved_and_fixed(target, fix: str, cwd):
    """Saved repros run by pytest (a file or a folder of them) in a fresh process, which installs no
    override itself: as saved, and after `fix` (code run first) fixed the overrides they import."""
    fixed = ("import sys, torch, torch_devx, pytest\n" + fix +
             f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', {str(target)!r}]))\n")
    return run_commands([[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(target)],
                         [sys.executable, "-c", fixed]], cwd=str(cwd))


def _import_repro(test_file: str):
    spec = importlib.util.spec_from_file_location(os.path.basename(test_file)[:-3], test_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [getattr(module, n) for n in dir(module) if n.startswith("test_")]


def test_finds_the_corrupted_forward_op_with_module_line_and_repro(diag, tmp_path, monkeypatch):
    from torch_devx.tools import DivergenceError, DivergenceFinder

    diag.override_kernel("tanh", wrong_tanh)
    finder = DivergenceFinder(out_dir=str(tmp_path))
    with pytest.raises(DivergenceError) as info:
        with finder:
            train_step()
    d = info.value.divergence
    assert d is finder.first
    assert (d.op, d.direction, d.module) == ("tanh", "forward", "act (Tanh)")
    assert d.location == f"{__file__}:{_line_of('TANH LINE')}" and "self.act(self.fc1(x))" in d.source
    assert "24 of 24 elements differ" in d.detail
    assert d.index == finder.checked > 0  # fc1's ops matched before
    message = str(info.value)
    assert "aten::tanh (forward), in module act (Tanh)" in message and "test_repro_00_tanh.py" in message

    (test,) = _import_repro(d.repro_test)
    with pytest.raises(AssertionError):  # the planted fault is still there
        test()
    # The repro replays the kernel that ran, the override: removing it from this process changes
    # nothing, and the override in place before the repro ran is back after it.
    diag.override_kernel("tanh", None)
    with pytest.raises(AssertionError):
        test()
    assert diag.kernel_override("tanh") is None and "tanh" not in diag.overridden_kernels()
    assert "kernel: the Python override test_divergence.wrong_tanh" in open(d.repro_test).read()
    fix_override(monkeypatch, "wrong_tanh")
    test()  # the override is right now: the repro passes


def test_finds_a_corrupted_backward_op(diag, tmp_path, monkeypatch):
    from torch_devx.tools import DivergenceFinder

    diag.override_kernel("tanh_backward", wrong_tanh_backward)
    with DivergenceFinder(out_dir=str(tmp_path), stop=False) as finder:
        train_step()
    assert list(finder.divergences) == ["tanh_backward"]
    d = finder.first
    assert (d.direction, d.node, d.module) == ("backward", "TanhBackward0", "act (Tanh)")
    # The forward call whose gradient the op computes.
    assert d.forward_location == f"{__file__}:{_line_of('TANH LINE')}" and "self.act(self.fc1(x))" in d.forward_source
    assert f"in module act (Tanh), backward of the call at {d.forward_location}" in d.describe()
    # The engine runs the op on its own thread; the line is where the script waits in backward().
    lines, start = inspect.getsourcelines(train_step)
    backward_line = start + next(i for i, t in enumerate(lines) if "BACKWARD LINE" in t)
    assert d.location == f"{__file__}:{backward_line}"
    (test,) = _import_repro(d.repro_test)
    diag.override_kernel("tanh_backward", None)
    with pytest.raises(AssertionError):
        test()
    fix_override(monkeypatch, "wrong_tanh_backward")
    test()


def test_backward_ops_are_named_after_their_forward_module(diag, tmp_path):
    from torch_devx.tools import DivergenceFinder

    # mm runs only in the backward pass here (Linear's forward is addmm): once per Linear's weight
    # gradient and once for fc2's input gradient. The first is fc2's, whose forward is the last line.
    diag.override_kernel("mm", lambda a, b: torch.ops.aten.mm.default(a.cpu(), b.cpu()).to(a.device) * 1.05)
    try:
        with DivergenceFinder(out_dir=str(tmp_path), stop=False, ops=[r"^mm$"]) as finder:
            train_step()
    finally:
        diag.override_kernel("mm", None)
    d = finder.first
    assert (d.op, d.direction, d.node, d.module) == ("mm", "backward", "AddmmBackward0", "fc2 (Linear)")
    assert d.forward_location == f"{__file__}:{_line_of('* 2')}" and "self.fc2(h) * 2" in d.forward_source
    assert finder.divergences["mm"].occurrences == 3


def test_keep_going_lists_each_wrong_op_once(diag, tmp_path):
    from torch_devx.tools import DivergenceFinder

    diag.override_kernel("tanh", wrong_tanh)
    diag.override_kernel("tanh_backward", wrong_tanh_backward)
    with DivergenceFinder(out_dir=str(tmp_path), stop=False) as finder:
        train_step()
        train_step()
    assert list(finder.divergences) == ["tanh", "tanh_backward"]
    assert finder.divergences["tanh"].occurrences == 2
    assert sorted(os.listdir(tmp_path)) == ["00_tanh", "01_tanh_backward"]
    assert os.path.basename(finder.divergences["tanh_backward"].repro_test) == "test_repro_01_tanh_backward.py"
    # One pytest run collects every repro of the folder. In a fresh process each imports the override
    # that ran and fails; once the overrides are fixed they pass.
    fix = ("sys.path.insert(0, %r)\nimport test_divergence as t\n"
           "t.wrong_tanh, t.wrong_tanh_backward = t.RIGHT['wrong_tanh'], t.RIGHT['wrong_tanh_backward']\n"
           % os.path.dirname(__file__))
    wrong, right = pytest_as_saved_and_fixed(tmp_path, fix, tmp_path)
    assert wrong.returncode == 1 and "2 failed" in wrong.stdout, wrong.stdout + wrong.stderr
    assert right.returncode == 0 and "2 passed" in right.stdout, right.stdout + right.stderr


def test_in_place_op_repro_replays_the_inputs_before_the_write(diag, tmp_path, monkeypatch):
    from torch_devx.tools import DivergenceFinder

    diag.override_kernel("add_.Tensor", wrong_add_)
    a = torch.arange(4.0, device="devx")
    b = torch.ones(4, device="devx")
    with DivergenceFinder(out_dir=str(tmp_path), stop=False, ops=[r"^add_"]) as finder:
        a.add_(b)
    d = finder.first
    assert d.op == "add_.Tensor" and "max abs diff 0.5" in d.detail
    from torch_devx.tools._repro import load_case

    op, args, _ = load_case(os.path.join(d.repro_dir, "inputs.pt"), "devx")
    assert op is torch.ops.aten.add_.Tensor and args[0].device.type == "devx"
    torch.testing.assert_close(args[0].cpu(), torch.arange(4.0))  # as before the op wrote it
    (test,) = _import_repro(d.repro_test)
    with pytest.raises(AssertionError):
        test()
    fix_override(monkeypatch, "wrong_add_")
    test()


def test_an_override_the_repro_cannot_import_fails_it_with_the_reason(diag, tmp_path):
    """A repro of an op whose kernel was a lambda cannot replay it: it fails, saying so, instead of
    testing the built-in kernel (which would pass, as in a fresh process)."""
    from torch_devx.tools import DivergenceFinder

    diag.override_kernel("tanh", lambda t: (torch.ops.aten.sigmoid(t * 2) * 2 - 1) * 1.05)
    with DivergenceFinder(out_dir=str(tmp_path), stop=False) as finder:
        train_step()
    diag.override_kernel("tanh", None)
    (test,) = _import_repro(finder.first.repro_test)
    with pytest.raises(pytest.fail.Exception, match=r"the devx kernel of tanh that diverged was a Python override, "
                                                    r"a lambda \(.*test_divergence.py:\d+\), which this repro "
                                                    r"cannot import"):
        test()
    assert "kernel: a Python override that cannot be imported" in open(finder.first.repro_test).read()


def test_clean_run_has_no_divergence(diag, tmp_path):
    from torch_devx.tools import DivergenceFinder

    with DivergenceFinder(out_dir=str(tmp_path)) as finder:
        train_step()
        torch.randn(3, device="devx")  # random ops are not compared
    assert finder.first is None and finder.checked > 20
    assert not os.path.exists(tmp_path / "00_tanh")


def test_a_run_that_diverges_without_a_wrong_op_names_the_first_module_that_differs(diag, tmp_path):
    """Every op within its tolerance (here a loose one), the run still off: the shadow run names the
    module whose output first differs."""
    from torch_devx.tools import DivergenceFinder

    diag.override_kernel("tanh", wrong_tanh)  # 5% off, within rtol 0.1
    loose = {torch.float32: (0.1, 1e-5)}
    with DivergenceFinder(out_dir=str(tmp_path), tolerances=loose) as finder:
        train_step()
    assert finder.first is None and finder.checked > 20
    m = finder.module_divergence
    assert m is not None and m.module == "act (Tanh)" and m.output == "output" and 0.01 < m.max_abs < 0.05
    assert "within 1%" in m.detail and 0 < m.index < finder.checked
    assert m.describe().startswith("no single op diverged from the CPU, but the run did: the output of module "
                                   "act (Tanh) is the first to differ")
    assert not os.listdir(tmp_path)  # no op to write a repro for
    # With the kernel right, the shadow run agrees module by module.
    diag.override_kernel("tanh", None)
    with DivergenceFinder(out_dir=str(tmp_path), tolerances=loose) as finder:
        train_step()
        train_step()
    assert finder.first is None and finder.module_divergence is None


def test_cli_reports_a_run_that_diverges_without_a_wrong_op(diag, tmp_path, capsys):
    from torch_devx.__main__ import main

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    (tmp_path / "kernels.py").write_text(WRONG_KERNEL)
    assert main(["divergence", "--rtol", "0.1", "--out", str(tmp_path / "d"), str(script), "--corrupt"]) == 1
    out = capsys.readouterr().out
    assert "script finished" in out and "no op diverged from the CPU\n" not in out
    assert "no single op diverged from the CPU, but the run did: the output of module 1 (Tanh)" in out
    sys.modules.pop("kernels", None)  # the script's module, imported in this process


SCRIPT = """
import argparse
import torch
import torch.nn as nn
import torch_devx

parser = argparse.ArgumentParser()
parser.add_argument("--corrupt", action="store_true")
if parser.parse_args().corrupt:
    from kernels import my_tanh  # a kernel prototyped in Python, next to the script
    torch_devx.diagnostics.override_kernel("tanh", my_tanh)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).cuda()
x = torch.randn(3, 4, device="cuda")
model(x).sum().backward()
print("script finished")
"""


WRONG_KERNEL = "import torch\ndef my_tanh(t):\n    return (torch.ops.aten.sigmoid(t * 2) * 2 - 1) * 1.05\n"


def test_cli_names_the_op_and_writes_a_repro(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    (tmp_path / "kernels.py").write_text(WRONG_KERNEL)
    cli = [sys.executable, "-m", "torch_devx", "divergence"]
    clean, proc = run_commands([cli + ["--out", str(tmp_path / "clean"), str(script)],
                                cli + ["--out", str(tmp_path / "div"), str(script), "--corrupt"]], cwd=str(tmp_path))
    assert clean.returncode == 0, clean.stderr
    assert "script finished" in clean.stdout and "no op diverged from the CPU" in clean.stdout
    assert proc.returncode == 1, proc.stderr
    assert "script finished" not in proc.stdout  # stopped at the first divergence
    assert "first divergence: aten::tanh (forward), in module 1 (Tanh)" in proc.stdout
    assert (proc.stdout + proc.stderr).count("aten::tanh (forward)") == 1  # the report, once
    assert f"at {script}:15: model(x).sum().backward()" in proc.stdout
    repro = tmp_path / "div" / "00_tanh" / "test_repro_00_tanh.py"
    assert repro.is_file() and (tmp_path / "div" / "00_tanh" / "inputs.pt").is_file()
    # The saved repro is a unit test of the kernel that ran, the override: run from anywhere, it fails
    # while kernels.my_tanh is wrong, and passes once it is fixed.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (wrong,) = run_commands([[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(repro)]],
                            cwd=str(elsewhere))
    assert wrong.returncode == 1 and "1 failed" in wrong.stdout, wrong.stdout + wrong.stderr
    (tmp_path / "kernels.py").write_text(WRONG_KERNEL.replace(" * 1.05", ""))
    (right,) = run_commands([[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(repro)]],
                            cwd=str(elsewhere))
    assert right.returncode == 0 and "1 passed" in right.stdout, right.stdout + right.stderr


def test_cli_exit_status_tells_a_failing_script_from_a_divergence(tmp_path, capsys):
    from torch_devx.__main__ import main

    script = tmp_path / "crash.py"
    script.write_text("import torch\n"
                      "x = torch.ones(3, device='devx')\n"
                      "torch.tanh(x)\n"
                      "raise KeyError('the script broke')\n")
    # `--ops` takes one comma-separated value: the script after it is not swallowed.
    assert main(["divergence", "--ops", "tanh,add", "--out", str(tmp_path / "d"), str(script)]) == 2
    out, err = capsys.readouterr()
    assert "1 devx ops matched the CPU" in out and "no op diverged" not in out
    assert "KeyError: 'the script broke'" in err and "the script failed (KeyError)" in err
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\nsys.exit(3)\n")
    assert main(["divergence", "--out", str(tmp_path / "e"), str(exits)]) == 2
    assert "the script failed (SystemExit)" in capsys.readouterr().err


def test_missing_script_is_a_clear_error(tmp_path, capsys):
    from torch_devx.__main__ import main

    assert main(["divergence", str(tmp_path / "absent.py")]) == 2
    assert "script" in capsys.readouterr().err


def test_cli_tolerance_options(diag, tmp_path, capsys):
    from torch_devx.__main__ import main

    script = tmp_path / "scaled.py"
    script.write_text("import torch\n"
                      "x = torch.linspace(0.1, 1, 8, device='devx')\n"
                      "torch.tanh(x)\n")
    diag.override_kernel("tanh", lambda t: torch.ops.aten.tanh.default(t.cpu()).to(t.device) * 1.001)
    # 0.1% off: beyond float32's default rtol, within --rtol 1e-2 (atol stays 1e-5).
    assert main(["divergence", "--out", str(tmp_path / "strict"), str(script)]) == 1
    assert "first divergence: aten::tanh (forward)" in capsys.readouterr().out
    assert main(["divergence", "--rtol", "1e-2", "--out", str(tmp_path / "loose"), str(script)]) == 0
    assert "no op diverged from the CPU" in capsys.readouterr().out
    assert main(["divergence", "--atol", "-1", str(script)]) == 2
    assert "--atol must be a number >= 0" in capsys.readouterr().err



# --- repro files are data: they choose no code to run and are not written through links


def _save_case(path, case):
    torch.save(case, str(path))
    return str(path)


@pytest.mark.parametrize("op", ["os::system", "builtins::eval.default", "aten::no_such_op.Tensor",
                                "aten::add.Tensor; import os", 42])
def test_a_repro_case_names_only_aten_overloads(tmp_path, op):
    from torch.utils._pytree import tree_flatten, treespec_dumps

    from torch_devx.tools._repro import load_case

    _, spec = tree_flatten(((1, 2), {}))
    path = _save_case(tmp_path / "inputs.pt", {"op": op, "leaves": [1, 2], "spec": treespec_dumps(spec),
                                               "devices": {}})
    with pytest.raises(ValueError, match="is not an aten overload"):
        load_case(path)


def test_a_repro_case_decodes_only_dtypes_and_layouts(tmp_path):
    from torch.utils._pytree import tree_flatten, treespec_dumps

    from torch_devx.tools._repro import load_case

    leaves, spec = tree_flatten(((torch.ones(2), torch.float32), {}))
    good = {"op": "aten::to.dtype", "leaves": [leaves[0], {"kind": "dtype", "value": "torch.float64"}],
            "spec": treespec_dumps(spec), "devices": {}}
    op, args, _ = load_case(_save_case(tmp_path / "good.pt", good))
    assert op is torch.ops.aten.to.dtype and args[1] is torch.float64
    bad = dict(good, leaves=[leaves[0], {"kind": "dtype", "value": "load"}])
    with pytest.raises(ValueError, match="is not a dtype"):
        load_case(_save_case(tmp_path / "bad.pt", bad))


def test_a_repro_case_that_is_not_plain_data_is_refused(tmp_path):
    import pickle

    from torch_devx.tools._repro import load_case

    class Payload:
        def __reduce__(self):
            return (print, ("pickled code ran",))

    path = tmp_path / "inputs.pt"
    with open(path, "wb") as f:
        pickle.dump({"op": Payload()}, f, protocol=2)
    with pytest.raises(pickle.UnpicklingError):
        load_case(str(path))


def test_repro_files_replace_planted_links_and_leave_their_targets(diag, tmp_path):
    from torch_devx.tools import DivergenceError, DivergenceFinder

    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    folder = tmp_path / "div" / "00_tanh"
    folder.mkdir(parents=True)
    for name in ("inputs.pt", "test_repro_00_tanh.py"):
        (folder / name).symlink_to(precious)
    diag.override_kernel("tanh", wrong_tanh)
    with pytest.raises(DivergenceError):
        with DivergenceFinder(out_dir=str(tmp_path / "div")):
            train_step()
    assert precious.read_text() == "keep me"
    for name in ("inputs.pt", "test_repro_00_tanh.py"):
        assert not (folder / name).is_symlink() and (folder / name).stat().st_size > 0


def test_a_link_planted_as_the_repro_folder_is_refused(diag, tmp_path):
    from torch_devx.tools import DivergenceError, DivergenceFinder

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "div").mkdir()
    (tmp_path / "div" / "00_tanh").symlink_to(elsewhere)
    diag.override_kernel("tanh", wrong_tanh)
    with pytest.raises((DivergenceError, ValueError), match="symbolic link"):
        with DivergenceFinder(out_dir=str(tmp_path / "div")):
            train_step()
    assert list(elsewhere.iterdir()) == []
