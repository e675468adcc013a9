"""bench/'s C++ timing loops: an extension outside the package, built on demand against the core
the package loaded, timing the generated wrappers with and without the diagnostics gate."""
from __future__ import annotations

from conftest import run_python


def test_the_benchmark_loops_are_built_on_demand_outside_the_package() -> None:
    proc = run_python("""
        import sys
        sys.path.insert(0, "bench")
        import torch, torch_devx, cpp_loops
        assert not [name for name in dir(torch_devx._C) if name.startswith("_time")]
        loops = cpp_loops.load()
        assert "torch_devx/" not in loops.__file__
        a = torch.randn(16, device="devx")
        with_gate, without = loops.time_wrapper_pair_ns("add.Tensor", a, a, 200, 2)
        assert with_gate > 0 and without > 0, (with_gate, without)
        assert loops.time_alloc_free_ns(0, 4096, 1000) > 0
        try:
            loops.time_wrapper_pair_ns("mul.Tensor", a, a, 1, 1)
        except ValueError as e:
            print("error:", e)
    """, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "error: no benchmark wrapper pair for 'mul.Tensor'" in proc.stdout
