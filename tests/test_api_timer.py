"""torch_devx.tools.ApiTimer: per-API counts match a hand count, nesting, start/stop leave nothing
behind, CSV round trip, devx against CPU comparison."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules import module as nn_module


def _global_hooks() -> int:
    return len(nn_module._global_forward_pre_hooks) + len(nn_module._global_forward_hooks)


class Net(nn.Module):  # a user module: transparent unless user_modules=True
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        h = F.relu(self.fc1(x))          # Module.Linear, torch.nn.functional.relu
        h = h + torch.matmul(h, self.w)  # torch.matmul, Tensor.add
        return self.fc2(h)               # Module.Linear


def script(device: str, timer_cls):
    """Hand count: torch.matmul 3, Module.Linear 2, Tensor.add 3 (a + b twice, 1 + a once),
    torch.nn.functional.relu 1, Tensor.sum 1, Tensor.mul 1."""
    torch.manual_seed(0)
    net = Net().to(device)
    net.w = torch.randn(16, 16, device=device)
    x = torch.randn(2, 8, device=device)
    with timer_cls() as t:
        y = net(x)
        a = torch.matmul(y, y.T)          # y.T is a property: not recorded
        b = torch.matmul(a, a)
        c = a + b                         # Tensor.add
        c = 1 + c                         # Tensor.add (reflected add reaches the mode as add)
        s = (c * 2).sum()                 # Tensor.mul, Tensor.sum
        _ = (x.shape, x.device, x.dtype, repr(s))  # noise: not recorded
    return t


@pytest.fixture
def timer(devx):
    from torch_devx.tools import ApiTimer

    return ApiTimer


def test_counts_match_hand_count_on_devx(timer):
    t = script("devx", timer)
    calls = {r.api: r.calls for r in t.summary()}
    assert calls == {"torch.matmul": 3, "Module.Linear": 2, "Tensor.add": 3,
                     "torch.nn.functional.relu": 1, "Tensor.mul": 1, "Tensor.sum": 1}, calls
    rows = t.summary()
    assert [r.total_s for r in rows] == sorted((r.total_s for r in rows), reverse=True)
    for r in rows:
        assert r.min_s <= r.mean_s <= r.max_s and math.isclose(r.mean_s * r.calls, r.total_s, rel_tol=1e-9)
    assert math.isclose(sum(r.share for r in rows), 1.0, rel_tol=1e-9)  # outermost only: shares add up
    table = t.table()
    assert "Module.Linear" in table and "share" in table.splitlines()[0]


def test_hook_inside_records_nested_calls(timer):
    lin = nn.Linear(4, 4).to("devx")
    x = torch.randn(3, 4, device="devx")
    seq = nn.Sequential(lin, nn.ReLU())
    results = {}
    for inside in (False, True):
        with timer(hook_inside=inside) as t:
            seq(x)
        results[inside] = {r.api: r.calls for r in t.summary()}
    # Sequential is a container: transparent, so Linear and ReLU are outermost either way.
    assert results[False] == {"Module.Linear": 1, "Module.ReLU": 1}
    assert results[True] == {"Module.Linear": 1, "Module.ReLU": 1,
                             "torch.nn.functional.linear": 1, "torch.nn.functional.relu": 1}
    with timer(hook_inside=True) as t:
        seq(x)
    shares = {r.api: r.share for r in t.summary()}
    assert math.isclose(shares["Module.Linear"] + shares["Module.ReLU"], 1.0, rel_tol=1e-9)


def test_user_modules_enclose_their_calls(timer):
    net = Net().to("devx")
    net.w = torch.randn(16, 16, device="devx")
    x = torch.randn(2, 8, device="devx")
    with timer(user_modules=True) as t:
        net(x)
    assert {r.api: r.calls for r in t.summary()} == {"Module.Net": 1}


def test_stop_leaves_nothing_active(timer):
    assert torch.overrides._get_current_function_mode_stack() == []
    hooks_before = _global_hooks()
    t = timer(sync=True)
    x = torch.ones(4, device="devx")
    lin = nn.Linear(4, 4).to("devx")
    t.start()
    assert torch.overrides._get_current_function_mode_stack() == [t]
    assert _global_hooks() == hooks_before + 2
    x + x
    lin(x)
    t.stop()
    assert torch.overrides._get_current_function_mode_stack() == []
    assert _global_hooks() == hooks_before
    before = {r.api: r.calls for r in t.summary()}
    assert before == {"Tensor.add": 1, "Module.Linear": 1}
    x + x
    torch.add(x, x)
    lin(x)
    assert {r.api: r.calls for r in t.summary()} == before
    # A forward that raises (wrong shape) still closes its module entry: later calls are outermost.
    wrong = torch.ones(3, device="devx")
    with timer() as t:
        with pytest.raises(RuntimeError):
            lin(wrong)
        x + x
    assert t._depth == 0 and {r.api: r.calls for r in t.summary()} == {"Module.Linear": 1, "Tensor.add": 1}
    # An exception inside the block still stops the timer.
    with pytest.raises(ZeroDivisionError):
        with timer():
            1 / 0
    assert torch.overrides._get_current_function_mode_stack() == []
    assert _global_hooks() == hooks_before


def test_csv_round_trip(timer, tmp_path):
    t = script("devx", timer)
    path = tmp_path / "devx.csv"
    t.to_csv(str(path))
    assert timer.read_csv(str(path)) == t.summary()


def test_compare_devx_and_cpu(timer, tmp_path):
    on_devx = script("devx", timer)
    on_cpu = script("cpu", timer)
    rows = timer.compare_rows(on_devx, on_cpu)
    assert {r["api"] for r in rows} == {r.api for r in on_devx.summary()} == {r.api for r in on_cpu.summary()}
    assert all(r["calls_a"] == r["calls_b"] and r["ratio"] is not None and r["ratio"] > 0 for r in rows)
    on_cpu.to_csv(str(tmp_path / "cpu.csv"))
    text = timer.compare(on_devx, str(tmp_path / "cpu.csv"), labels=("devx", "cpu"))
    header = text.splitlines()[0]
    assert "total devx ms" in header and "total cpu ms" in header and "devx/cpu" in header
    assert len(text.splitlines()) == 2 + len(rows)
    assert "torch.matmul" in text
