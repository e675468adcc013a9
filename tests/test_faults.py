"""Injected vendor faults (cpu_sim's DEVX_SIM_FAULTS): every failed vendor call surfaces as a Python
exception naming the call, and the process, the allocator's statistics and the device memory stay
consistent afterwards. Each case runs in a child, since the setting is read when the vendor loads."""
from __future__ import annotations

import pytest

from conftest import assert_child_ok, describe, run_python

TRAINING = """
import gc, sys
import torch, torch.nn.functional as F
import torch_devx
from torch_devx import diagnostics

failed = []   # the vendor calls that failed, as the runtime saw them
diagnostics.set_runtime_hook(lambda kind, call, args, status, us: failed.append(call) if status else None,
                             ["malloc", "memcpy"])
free_at_start = torch.devx.mem_get_info(0)[0]
torch.manual_seed(0)
# Activations of 2 MiB: each is a segment of its own, which empty_cache gives back every step.
data = [(torch.randn(256, 32), torch.randn(256, 4)) for _ in range(4)]
errors, losses = [], []
model = opt = None
for step in range(200):
    try:
        if model is None:   # set-up copies can fail too
            model = torch.nn.Sequential(torch.nn.Linear(32, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 4)).to("devx")
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = (t.to("devx") for t in data[step % 4])
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    except RuntimeError as e:
        errors.append(str(e))
    # Compared once the stream is idle: in asynchronous mode its worker may still be finishing the
    # step and releasing what it kept alive, and the two figures are read one after the other. A
    # fault in work issued before a step's own error surfaces here, as a CUDA error would.
    try:
        torch.devx.synchronize()
    except RuntimeError as e:
        errors.append(str(e))
    # Every step's memory goes back to the device, so that allocations reach the vendor.
    torch.devx.empty_cache()
    free, total = torch.devx.mem_get_info(0)
    assert torch.devx.memory_reserved() == total - free, (step, torch.devx.memory_reserved(), total - free)
diagnostics.set_runtime_hook(None)
print("faults", len(failed), "errors", len(errors), "steps", len(losses))
assert len(errors) == len(failed), (failed, errors)
# Compared as multisets: asynchronously, a fault in issued work surfaces after later host-side ones.
def kind(text):
    return "malloc" if "malloc" in text else "memcpy"
assert all("injected fault" in error for error in errors), errors
assert sorted(map(kind, failed)) == sorted(map(kind, errors)), (failed, errors)
assert {"malloc", "memcpy"} <= set(map(kind, failed)), failed
assert len(losses) > 150 and losses[-1] == losses[-1], losses[-5:]
del model, opt, x, y, loss
gc.collect()
torch.devx.synchronize()
torch.devx.empty_cache()
assert torch.devx.memory_allocated() == 0 and torch.devx.memory_reserved() == 0
assert torch.devx.mem_get_info(0)[0] == free_at_start
print("consistent")
"""


@pytest.mark.parametrize("mode", ["0", "1"])
def test_training_under_injected_faults_reports_each_and_leaks_nothing(mode):
    proc = run_python(TRAINING, DEVX_SIM_FAULTS="malloc:0.01,memcpy:0.01", DEVX_SIM_ASYNC=mode)
    assert_child_ok(proc)
    assert "consistent" in proc.stdout, describe(proc)


def test_the_nth_call_fails_exactly():
    proc = run_python("""
import torch, torch_devx
x = torch.ones(4)
results = []
for i in range(5):
    try:
        x.to("devx")
        results.append("ok")
    except RuntimeError as e:
        results.append("injected fault (call 3" in str(e) and "memcpy" in str(e))
print(results)
""", DEVX_SIM_FAULTS="memcpy:#3")
    assert_child_ok(proc)
    assert "['ok', 'ok', True, 'ok', 'ok']" in proc.stdout, describe(proc)


@pytest.mark.parametrize("value", ["kernels:0.1", "kernel:0.1", "malloc:2", "malloc:0", "memcpy:#0", "malloc", "malloc:x"])
def test_bad_fault_settings_are_value_errors(value):
    proc = run_python("import torch_devx", DEVX_SIM_FAULTS=value)
    assert proc.returncode == 1, describe(proc)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError") and "DEVX_SIM_FAULTS" in last and value in last, describe(proc)


KERNEL_TRAINING = """
import re
import torch, torch.nn.functional as F
import torch_devx

def injected(n, rate=0.01, salt=2):
    # cpu_sim's choice of the failing calls (faults.cpp): splitmix64 of the call's number.
    mask = (1 << 64) - 1
    z = (n * 0x9E3779B97F4A7C15 + salt) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    z ^= z >> 31
    return (z >> 11) * 2.0 ** -53 < rate

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
model = model.to("devx")
opt = torch.optim.SGD(model.parameters(), lr=0.05)
data = [(torch.randn(32, 16).to("devx"), torch.randn(32, 4).to("devx")) for _ in range(4)]
numbers, losses = [], []
for step in range(200):
    x, y = data[step % 4]
    try:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    except RuntimeError as e:
        m = re.search(r"devx: vendor cpu_sim kernel (\\S+) \\(for \\S+\\) failed \\(DEVX_ERROR\\): "
                      r"cpu_sim kernel: injected fault \\(call (\\d+), DEVX_SIM_FAULTS\\)", str(e))
        assert m, str(e)
        numbers.append(int(m.group(2)))
assert len(numbers) > 5, numbers
# Every call the setting made fail, up to the last one seen, reached Python, each once.
assert sorted(numbers) == [n for n in range(1, max(numbers) + 1) if injected(n)], numbers
assert len(losses) > 150 and all(l == l for l in losses), losses[-5:]
del model, opt, data, x, y
loss = None
torch.devx.synchronize()
torch.devx.empty_cache()
assert torch.devx.memory_allocated() == 0 and torch.devx.memory_reserved() == 0
print("consistent", len(numbers))
"""


@pytest.mark.parametrize("mode", ["0", "1"])
def test_kernel_faults_surface_as_errors_naming_the_kernel(mode):
    proc = run_python(KERNEL_TRAINING, DEVX_SIM_FAULTS="kernel:0.01", DEVX_SIM_KERNELS="own", DEVX_SIM_ASYNC=mode)
    assert_child_ok(proc)
    assert "consistent" in proc.stdout, describe(proc)
