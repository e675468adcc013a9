"""torch_devx.tools.OverflowCheck: stops at a planted inf naming the API and the calling line;
quiet on a clean run; max_hits tolerates earlier hits; nothing left active after stop."""
from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, plant: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.plant = plant

    def forward(self, x):
        h = torch.relu(self.fc(x))
        if self.plant:
            h = h / 0  # PLANTED
        return h.sum()


def _line_of(marker: str) -> int:
    lines, start = inspect.getsourcelines(Model.forward)
    return start + next(i for i, text in enumerate(lines) if marker in text)


@pytest.fixture
def tools(devx):
    import torch_devx.tools as tools

    yield tools
    assert torch.overrides._get_current_function_mode_stack() == []


def test_stops_at_planted_inf_in_model(tools):
    torch.manual_seed(0)
    model = Model(plant=True).to("devx")
    x = torch.rand(2, 4, device="devx") + 1
    with pytest.raises(tools.NonFiniteError) as info:
        with tools.OverflowCheck():
            model(x)
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.hit.api == "Tensor.div"
    assert err.hit.location == f"{__file__}:{_line_of('PLANTED')}"
    message = str(err)
    assert "Tensor.div" in message and f"test_overflow.py:{_line_of('PLANTED')}" in message
    assert "h / 0" in message
    # Input statistics: the relu output (finite) and the scalar divisor; the output's inf count.
    assert "float32 (2, 4) devx:0" in message and "nan=0 inf=0" in message
    assert "args[1]: 0" in message
    assert "nan=0 inf=0" not in err.hit.outputs[0]  # x > 0 / 0 is inf, relu's zeros / 0 are nan


def test_a_forward_hit_names_the_module_path(tools):
    # A line shared by every layer says little; the module path says which layer.
    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([Model(plant=False), Model(plant=True)])

        def forward(self, x):
            return sum(block(x) for block in self.blocks)

    x = torch.rand(2, 4, device="devx") + 1
    with pytest.raises(tools.NonFiniteError) as info:
        with tools.OverflowCheck():
            Outer().to("devx")(x)
    assert info.value.hit.module == "blocks.1 (Model)", info.value.hit
    assert "produced inf/nan in module blocks.1 (Model), called at" in str(info.value)


def test_log_of_zero_names_torch_log(tools):
    x = torch.tensor([1.0, 0.0, 2.0], device="devx")
    with pytest.raises(tools.NonFiniteError) as info:
        with tools.OverflowCheck():
            y = x * 2
            torch.log(y)  # LOG
    hit = info.value.hit
    assert hit.api == "torch.log"
    assert hit.source == "torch.log(y)  # LOG"
    assert "min=0 max=4 mean=2 nan=0 inf=0" in hit.inputs[0]
    assert "inf=1" in hit.outputs[0]


def test_clean_run_does_not_fire(tools):
    model = Model(plant=False).to("devx")
    with tools.OverflowCheck() as check:
        for _ in range(3):
            loss = model(torch.rand(2, 4, device="devx"))
            loss.backward()
    assert check.hits == []


class Norm(nn.Module):
    def forward(self, x):
        return torch.sqrt(x)  # SQRT


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = Norm()

    def forward(self, x):
        return self.norm(x).sum()


def test_backward_inf_names_the_op_and_the_forward_line(tools):
    x = torch.tensor([0.0, 1.0, 4.0], device="devx", requires_grad=True)
    check = tools.OverflowCheck()
    with pytest.raises(tools.NonFiniteError) as info:
        with check:
            loss = Outer()(x)     # finite: sqrt(0) is 0
            loss.backward()       # d sqrt(x)/dx at 0 is inf
    hit = info.value.hit
    assert hit.api.startswith("aten::") and hit.node == "SqrtBackward0" and hit.module == "norm (Norm)"
    lines, start = inspect.getsourcelines(Norm.forward)
    sqrt_line = start + next(i for i, text in enumerate(lines) if "SQRT" in text)
    assert hit.location == f"{__file__}:{sqrt_line}" and hit.source == "return torch.sqrt(x)  # SQRT"
    message = str(info.value)
    assert f"(backward, autograd node SqrtBackward0) produced inf/nan, in module norm (Norm), backward of the call " \
           f"at {__file__}:{sqrt_line}" in message
    assert "inf=1" in hit.outputs[0]
    assert [h.node for h in check.hits] == ["SqrtBackward0"]  # the forward had no hit
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    assert _get_current_dispatch_mode_stack() == []


def test_max_hits_tolerates_earlier_hits(tools):
    x = torch.tensor([0.0, 1.0], device="devx")
    check = tools.OverflowCheck(max_hits=2)
    check.start()
    try:
        a = torch.log(x)          # hit 1: tolerated
        b = x.exp()               # finite: not a hit
        with pytest.raises(tools.NonFiniteError) as info:
            1.0 / x               # hit 2: raises
    finally:
        check.stop()
    assert [h.api for h in check.hits] == ["torch.log", "Tensor.__rtruediv__"]
    assert "hit 2 of max_hits=2" in str(info.value)
    assert torch.isinf(a).any() and torch.isfinite(b).all()
    # Stopped: nothing checked any more.
    torch.log(x)
    assert len(check.hits) == 2
