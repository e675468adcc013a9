"""DEVX_SIM_SANITIZE: guard zones, poisoned and quarantined frees, bounds-checked copies, host
code touching device memory."""
from __future__ import annotations

import re
import textwrap

from conftest import assert_child_ok, describe, run_python


def output_line(proc, tag: str) -> str:
    """The child's first output line starting with `tag` (StopIteration if it printed none)."""
    return next(line for line in proc.stdout.splitlines() if line.startswith(tag))

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
    caught = output_line(proc, "CAUGHT")
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
    from torch_devx import diagnostics
    x = torch.ones(100, device="devx")                  # line 4
    stale = x.data_ptr()
    del x                                               # line 6

    def mul_through_a_dangling_pointer(a, b):
        # A buggy kernel: it reads memory freed before it ran (poison), then writes to it.
        print("POISON", ctypes.string_at(stale, 8).hex())
        ctypes.memmove(stale, b"\\x00" * 4, 4)
        return torch.zeros_like(a)

    y = torch.ones(100, device="devx")
    print("REUSED", y.data_ptr() == stale)               # quarantined: not handed out again
    diagnostics.override_kernel("mul.Tensor", mul_through_a_dangling_pointer)
    y * y
    diagnostics.override_kernel("mul.Tensor", None)
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
    caught = output_line(proc, "CAUGHT")
    assert "use after free at synchronize: 4 byte(s) at offsets 0..3 of freed allocation 0x" in caught
    assert "(400 bytes on devx:0, allocated at <string>:4, freed at <string>:6)" in caught
    assert "host code" not in proc.stdout  # a kernel's accesses are device work
    live, quarantined = map(int, re.search(r"COUNTS \((\d+), (\d+)\)", proc.stdout).groups())
    assert live >= 1 and quarantined >= 1
    # Guarded allocations still live when the sanitizer goes off are freed without a quarantine.
    assert "OFF (1, 0) 100.0" in proc.stdout and "FREED (0, 0)" in proc.stdout


FRONT_SCRIPT = textwrap.dedent("""
    import ctypes, torch, torch_devx
    from torch_devx import diagnostics
    x = torch.arange(64, dtype=torch.float32, device="devx")   # line 4
    try:
        ctypes.memmove(x.data_ptr() - 16, b"\\x07" * 4, 4)      # an underrun from host code
    except RuntimeError as e:
        print("HOST", e)
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
    # The host write itself is reported as it happens, and it went through, as on cpu_sim.
    host = output_line(proc, "HOST")
    assert "host code wrote device memory directly at 0x" in host
    assert "16 bytes before the start of allocation 0x" in host
    assert "(256 bytes on devx:0, allocated at <string>:4)" in host
    caught = output_line(proc, "CAUGHT")
    assert "out-of-bounds write at sanitize_check(): 4 byte(s) changed from 16 to 13 bytes before the start" in caught
    assert "(256 bytes on devx:0, allocated at <string>:4)" in caught
    assert "CLEAN" in proc.stdout


FREE_SCRIPT = textwrap.dedent("""
    import ctypes, torch, torch_devx
    x = torch.ones(10, device="devx")                   # line 3
    try:
        ctypes.memmove(x.data_ptr() + 40, b"\\x00", 1)
    except RuntimeError as e:
        print("HOST", e)
    del x                                               # line 8: found here, raised at the next check
    try:
        torch.ones(3, device="devx").add_(1)
    except RuntimeError as e:
        print("CAUGHT", e)
""")


def test_overrun_found_at_free_is_raised_at_the_next_op():
    proc = run_python(FREE_SCRIPT, DEVX_SIM_SANITIZE="1")
    assert_child_ok(proc)
    caught = output_line(proc, "CAUGHT")
    assert "out-of-bounds write (found when it was freed): 1 byte(s) changed from 0 to 1 bytes past the end" in caught
    assert "(40 bytes on devx:0, allocated at <string>:3, freed at <string>:8)" in caught
    host = output_line(proc, "HOST")
    assert "host code wrote device memory directly" in host and "0 bytes past the end of allocation" in host


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


HOST_SCRIPT = textwrap.dedent("""
    import ctypes, struct, torch, torch_devx
    x = torch.arange(100, dtype=torch.float32, device="devx")    # line 3
    try:
        data = ctypes.string_at(x.data_ptr() + 8, 16)             # line 5
        print("READ", struct.unpack("4f", data))
    except RuntimeError as e:
        print("CAUGHT", e)
    try:
        ctypes.memmove(x.data_ptr(), struct.pack("f", 42.0), 4)   # a host write
        print("WROTE")
    except RuntimeError as e:
        print("WRITE", e)
    print("VALUES", x[0].item(), x[1].item(), x.sum().item())
""")


def test_host_read_and_write_of_device_memory_name_the_allocation():
    proc = run_python(HOST_SCRIPT, DEVX_SIM_SANITIZE="1")
    assert_child_ok(proc)
    # Raised at the line that read, before the next statement ran.
    assert "READ" not in proc.stdout
    caught = output_line(proc, "CAUGHT")
    assert "devx sanitizer: host code read device memory directly at 0x" in caught
    assert "offset 8 of allocation 0x" in caught
    assert "(400 bytes on devx:0, allocated at <string>:3)" in caught
    write = output_line(proc, "WRITE")
    assert "host code wrote device memory directly" in write and "offset 0 of allocation" in write
    assert "(400 bytes on devx:0, allocated at <string>:3)" in write
    assert "WROTE" not in proc.stdout
    # The accesses went through, as they do on cpu_sim, and ops after them raise nothing.
    assert "VALUES 42.0 1.0 4992.0" in proc.stdout


def test_host_access_goes_unseen_with_the_sanitizer_off():
    proc = run_python(HOST_SCRIPT, DEVX_SIM_SANITIZE="0")
    assert_child_ok(proc)
    # cpu_sim memory is host memory: the read returns the data, the write lands.
    assert "READ (2.0, 3.0, 4.0, 5.0)" in proc.stdout and "WROTE" in proc.stdout
    assert "CAUGHT" not in proc.stdout and "VALUES 42.0 1.0 4992.0" in proc.stdout
    # Switched off mid-run, allocations made while it was on are plain memory again.
    proc = run_python(textwrap.dedent("""
        import ctypes, torch, torch_devx
        from torch_devx import diagnostics
        x = torch.ones(4, device="devx")
        diagnostics.set_sanitize(False)
        print("READ", ctypes.string_at(x.data_ptr(), 4).hex())
        del x
    """), DEVX_SIM_SANITIZE="1")
    assert_child_ok(proc)
    assert "READ 0000803f" in proc.stdout


FREED_SCRIPT = textwrap.dedent("""
    import ctypes, torch, torch_devx
    x = torch.ones(100, device="devx")                  # line 3
    stale = x.data_ptr()
    del x                                               # line 5
    try:
        ctypes.string_at(stale + 4, 8)
        print("READ")
    except RuntimeError as e:
        print("CAUGHT", e)
    try:
        ctypes.string_at(stale + 4, 8)                  # reported again: its pages were closed again
    except RuntimeError as e:
        print("AGAIN", e)
""")


def test_host_read_of_freed_memory_is_reported_as_such():
    proc = run_python(FREED_SCRIPT, DEVX_SIM_SANITIZE="1")
    assert_child_ok(proc)
    assert "READ" not in proc.stdout
    caught = output_line(proc, "CAUGHT")
    assert "host code read freed device memory directly at 0x" in caught
    assert "offset 4 of freed allocation 0x" in caught
    assert "(400 bytes on devx:0, allocated at <string>:3, freed at <string>:5)" in caught
    assert "AGAIN devx sanitizer: host code read freed device memory" in proc.stdout


CLEAN_SCRIPT = textwrap.dedent("""
    import ctypes, threading, torch, torch_devx
    torch.manual_seed(0)
    x = torch.randn(64, 32, device="devx")
    y = (x @ x.T).relu_().sum(dim=1)
    print("ITEM", round(y[0].item(), 3) == round(y.cpu()[0].item(), 3), y.tolist()[:1] != [])
    print(x[:2, :3])
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to("devx")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    target = torch.randint(0, 4, (64,), device="devx")
    for _ in range(2):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()                                   # on the autograd engine's device thread
        opt.step()
    out = []                                              # ops on another Python thread too
    t = threading.Thread(target=lambda: out.append((x * 2).sum().item()))
    t.start()
    t.join()
    big = torch.randn(512, 512, device="devx")            # big enough for ATen's OpenMP threads
    print("BIG", torch.allclose((big * 2 + 1).cpu(), big.cpu() * 2 + 1))
    z = torch.empty(8, device="devx").fill_(3).to("devx:1").cpu()
    torch.devx.synchronize()
    torch_devx.diagnostics.sanitize_check()
    print("CLEAN", loss.item() > 0, len(out), z.sum().item())
    try:                                                  # detection was on throughout
        ctypes.string_at(model[0].weight.data_ptr(), 4)
    except RuntimeError as e:
        print("DETECTED", "host code read device memory" in str(e))
""")


def test_ops_copies_training_and_synchronize_are_not_host_accesses():
    for env in ({}, {"DEVX_SIM_ASYNC": "1"}):
        proc = run_python(CLEAN_SCRIPT, DEVX_SIM_SANITIZE="1", OMP_NUM_THREADS="2", **env)
        assert_child_ok(proc)
        assert "ITEM True True" in proc.stdout and "BIG True" in proc.stdout
        assert "CLEAN True 1 24.0" in proc.stdout
        assert "DETECTED True" in proc.stdout
        assert "sanitizer" not in proc.stderr


def test_other_faults_still_crash_and_a_later_handler_is_respected():
    # A real segfault elsewhere is passed on (here: to the default action), not retried forever.
    proc = run_python("import ctypes, torch, torch_devx\n"
                      "x = torch.ones(4, device='devx')\n"
                      "ctypes.string_at(8, 1)\n", DEVX_SIM_SANITIZE="1", PYTHONFAULTHANDLER=None)
    assert proc.returncode == -11, describe(proc)
    # A handler installed after the sanitizer's gets faults first: protection stops, with a
    # warning, and device work goes on.
    proc = run_python(textwrap.dedent("""
        import ctypes, faulthandler, torch, torch_devx
        x = torch.ones(4, device="devx")
        faulthandler.enable()
        print("SUM", (x + 1).sum().item())
        print("READ", ctypes.string_at(x.data_ptr(), 4).hex())
    """), DEVX_SIM_SANITIZE="1")
    assert_child_ok(proc)
    assert "SUM 8.0" in proc.stdout and "READ 0000803f" in proc.stdout
    assert "host accesses to device memory are no longer detected" in proc.stderr
    assert "another SIGSEGV handler replaced cpu_sim's host-access handler" in proc.stderr
