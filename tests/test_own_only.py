"""cpu_sim's own kernel library as a young accelerator (DEVX_SIM_KERNELS=own-only): no ATen
kernel computes anything, so whatever the library lacks goes to the CPU fallback. Four small
models (bench/workloads.py: an MLP, a CNN with batch norm, an LSTM, a GPT-2-style LM) train 5
steps matching the CPU, with 0 ATen compute calls and 0 fallbacks; autocompare judges every op
of such a step and reports its measured error; a planted wrong kernel is named by autocompare
and by the divergence finder."""

from __future__ import annotations

import pytest

from conftest import assert_child_ok, run_python

TRAIN = """
import sys
sys.path.insert(0, "bench")
import torch, torch_devx
from torch_devx import diagnostics as d
from workloads import train_small
for name in {models!r}:
    want = train_small(name, "cpu")
    d.reset_kernel_stats(); d.reset_fallback_stats()
    got = train_small(name, "devx")
    stats = d.kernel_stats()
    torch.testing.assert_close(got[0], want[0])
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w)
    assert stats["aten"] == 0 and not stats["declined"] and not d.fallback_stats(), (name, stats, d.fallback_stats())
    assert len(stats["vendor"]) >= 15, stats
    print(name, "ok", len(stats["vendor"]), "kernels")
"""


@pytest.mark.parametrize("models", [("mlp", "cnn"), ("lstm", "gpt")])
def test_models_train_on_own_kernels_alone(models):
    proc = run_python(TRAIN.format(models=list(models)), DEVX_SIM_KERNELS="own-only")
    assert_child_ok(proc)
    assert proc.stdout.count(" ok ") == len(models)


def test_autocompare_judges_a_step_and_reports_each_ops_error():
    proc = run_python("""
        import sys
        sys.path.insert(0, "bench")
        import torch, torch_devx
        from torch_devx import diagnostics as d
        from workloads import train_small
        d.set_autocompare(True)
        train_small("gpt", "devx", steps=1)
        d.set_autocompare(False)
        stats = d.autocompare_stats()
        bad = {op: n for op, n in stats.items() if n[1]}
        assert not bad, bad
        assert sum(ok for ok, _ in stats.values()) > 50, stats
        print(sorted(stats))
        """, DEVX_SIM_KERNELS="own-only", DEVX_LOG_LEVEL="WARN,OPS=DEBUG")
    assert_child_ok(proc)
    lines = [line for line in proc.stderr.splitlines() if "autocompare: addmm result: allclose" in line]
    assert lines and "max abs" in lines[0] and "max rel" in lines[0], proc.stderr[-2000:]


FAULTY = """
import sys
sys.path.insert(0, "bench")
import torch, torch_devx
from workloads import train_small
train_small("mlp", "devx", steps=1)
"""


def test_a_planted_wrong_kernel_is_named_by_autocompare():
    proc = run_python(FAULTY, DEVX_SIM_KERNELS="own-only", DEVX_SIM_FAULTY_KERNELS=r"tanh\.out",
                      DIPU_AUTOCOMPARE="1", DIPU_AUTOCOMPARE_RAISE="1")
    assert proc.returncode != 0
    assert "tanh" in proc.stderr and "workloads.py" in proc.stderr, proc.stderr[-3000:]


def test_a_planted_wrong_kernel_is_named_by_the_divergence_finder(tmp_path):
    import subprocess
    import sys

    from conftest import REPO, child_env

    script = tmp_path / "train.py"
    script.write_text(FAULTY.replace('"bench"', repr(str(REPO / "bench"))))
    out = tmp_path / "div"
    proc = subprocess.run([sys.executable, "-m", "torch_devx", "divergence", "--out", str(out), str(script)],
                          env=child_env(DEVX_SIM_KERNELS="own-only", DEVX_SIM_FAULTY_KERNELS=r"tanh\.out"),
                          cwd=str(REPO), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = proc.stdout + proc.stderr
    assert "first divergence: aten::tanh (forward), in module 3 (Tanh)" in report, report[-3000:]
    assert "workloads.py" in report, report[-3000:]
    (repro,) = out.glob("*/test_repro_*tanh*.py")

    def run_repro(**env):
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(repro)],
                              env=child_env(DEVX_SIM_KERNELS="own-only", **env), cwd=str(tmp_path),
                              capture_output=True, text=True, timeout=300)

    assert run_repro(DEVX_SIM_FAULTY_KERNELS=r"tanh\.out").returncode == 1   # the wrong kernel fails it
    fixed = run_repro()
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr               # the right one passes
