"""DEVX_SIM_SANITIZE: guard zones, poisoned and quarantined frees, bounds-checked copies."""
from __future__ import annotations

import re
import textwrap

from conftest import assert_child_ok, describe, run_python

OOB_SCRIPT = textwrap.dedent("""
    import ctypes, torch, torch_devx
    from torch_devx import diagnostics

    def mul_writing_past_its_input(a, b):
        # A buggy kernel: 8 bytes past the end of its first input, then a plausible result.
        ctypes.memmove(a.data_ptr() + a.untyped_storage().nbytes(), b"\\x01" * 8, 8)
        return torch.zeros_like(a)

    x = torch.ones(100, device="devx")                  # line 10: the allocation overrun
    diagnostics.override_kernel("mul.Tensor", mul_writing_past_its_input)
    try:
        y = x * x                                       # line 13
    except RuntimeError as e:
        print("CAUGHT", e)
    diagnostics.override_kernel("mul.Tensor", None)
    z = x * x                                           # the guard was restored: no second report
    torch.devx.synchronize()
    print("AFTER", z.sum().item())
""")


def test_out_of_bounds_write_by_a_kernel_names_the_allocation():
    proc = run_python(OOB_SCRIPT, DEVX_SIM_SANITIZE="1")
    assert_child_ok(proc)
    caught = next(line for line in proc.stdout.splitlines() if line.startswith("CAUGHT"))
    assert "out-of-bounds write after op mul.Tensor" in caught
    assert "8 byte(s) changed from 0 to 8 bytes past the end of allocation 0x" in caught
    assert "(400 bytes on devx:0, allocated at <string>:10)" in caught
    assert "AFTER 100.0" in proc.stdout
    # Off, the same planted write goes unseen (it lands in the cache's rounding slack).
    proc = run_python(OOB_SCRIPT, DEVX_SIM_SANITIZE="0")
    assert_child_ok(proc)
    assert "CAUGHT" not in proc.stdout


UAF_SCRIPT = textwrap.dedent("""
    import ctypes, os, torch, torch_devx
    x = torch.ones(100, device="devx")                  # line 3
    stale = x.data_ptr()
    del x                                               # line 5
    print("POISON", ctypes.string_at(stale, 8).hex())  # reads of freed memory give poison
    y = torch.ones(100, device="devx")
    print("REUSED", y.data_ptr() == stale)               # quarantined: not handed out again
    ctypes.memmove(stale, b"\\x00" * 4, 4)              # a write through a dangling pointer
    try:
        torch.devx.synchronize()
    except RuntimeError as e:
        print("CAUGHT", e)
    torch.devx.synchronize()                             # reported once
    print("COUNTS", torch_devx._C._sanitizer_counts())
    os.environ["DEVX_SIM_SANITIZE"] = "0"                # off: the quarantine goes back to the device
    print("OFF", torch_devx._C._sanitizer_counts(), y.sum().item())
    del y
    print("FREED", torch_devx._C._sanitizer_counts())
""")


def test_use_after_free_is_reported_with_both_lines():
    proc = run_python(UAF_SCRIPT, DEVX_SIM_SANITIZE="1")
    assert_child_ok(proc)
    assert "POISON ffffffffffffffff" in proc.stdout
    assert "REUSED False" in proc.stdout
    caught = next(line for line in proc.stdout.splitlines() if line.startswith("CAUGHT"))
    assert "use after free at synchronize: 4 byte(s) at offsets 0..3 of freed allocation 0x" in caught
    assert "(400 bytes on devx:0, allocated at <string>:3, freed at <string>:5)" in caught
    live, quarantined = map(int, re.search(r"COUNTS \((\d+), (\d+)\)", proc.stdout).groups())
    assert live >= 1 and quarantined >= 1
    # Guarded allocations still live when the sanitizer goes off are freed without a quarantine.
    assert "OFF (1, 0) 100.0" in proc.stdout and "FREED (0, 0)" in proc.stdout


FRONT_SCRIPT = textwrap.dedent("""
    import ctypes, torch, torch_devx
    from torch_devx import diagnostics
    x = torch.arange(64, dtype=torch.float32, device="devx")   # line 4
    ctypes.memmove(x.data_ptr() - 16, b"\\x07" * 4, 4)          # an underrun from host code
    try:
        diagnostics.sanitize_check()
    except RuntimeError as e:
        print("CAUGHT", e)
    diagnostics.sanitize_check()
    print("CLEAN")
""")


def test_underrun_found_by_an_explicit_check():
    proc = run_python(FRONT_SCRIPT, DEVX_SIM_SANITIZE="1")
    assert_child_ok(proc)
    caught = next(line for line in proc.stdout.splitlines() if line.startswith("CAUGHT"))
    assert "out-of-bounds write at sanitize_check(): 4 byte(s) changed from 16 to 13 bytes before the start" in caught
    assert "(256 bytes on devx:0, allocated at <string>:4)" in caught
    assert "CLEAN" in proc.stdout


FREE_SCRIPT = textwrap.dedent("""
    import ctypes, torch, torch_devx
    x = torch.ones(10, device="devx")                   # line 3
    ctypes.memmove(x.data_ptr() + 40, b"\\x00", 1)
    del x                                               # found here, raised at the next check
    try:
        torch.ones(3, device="devx").add_(1)
    except RuntimeError as e:
        print("CAUGHT", e)
""")


def test_overrun_found_at_free_is_raised_at_the_next_op():
    proc = run_python(FREE_SCRIPT, DEVX_SIM_SANITIZE="1")
    assert_child_ok(proc)
    caught = next(line for line in proc.stdout.splitlines() if line.startswith("CAUGHT"))
    assert "out-of-bounds write (found when it was freed): 1 byte(s) changed from 0 to 1 bytes past the end" in caught
    assert "(40 bytes on devx:0, allocated at <string>:3, freed at <string>:5)" in caught


TRAIN_SCRIPT = textwrap.dedent("""
    import os, torch, torch_devx
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(16, 3, 16, 16).cuda(), torch.randint(0, 10, (16,)).cuda()
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    torch.cuda.synchronize()
    torch_devx.diagnostics.sanitize_check()
    print("LOSSES", losses, "GUARDED", torch_devx._C._sanitizer_counts()[0] > 0)
""")


def test_a_training_run_is_clean_and_unchanged_under_the_sanitizer():
    on = run_python(TRAIN_SCRIPT, DEVX_SIM_SANITIZE="1")
    off = run_python(TRAIN_SCRIPT)
    assert_child_ok(on)
    assert_child_ok(off)
    losses_on = on.stdout.split("LOSSES")[1].split("GUARDED")[0]
    losses_off = off.stdout.split("LOSSES")[1].split("GUARDED")[0]
    assert losses_on == losses_off
    assert "GUARDED True" in on.stdout and "GUARDED False" in off.stdout


def test_bad_value_is_a_value_error():
    proc = run_python("import torch_devx", DEVX_SIM_SANITIZE="sometimes")
    assert proc.returncode == 1 and "DEVX_SIM_SANITIZE" in proc.stderr and "ValueError" in proc.stderr
