"""torch_devx.tools.Tracer: a YAML file picks modules (by name, regex, type) and functions and steps;
its output compares like a dump, and the comparison ranks the traced layers by error."""
from __future__ import annotations

import os

import pytest
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.Tanh()

    def forward(self, x):
        return self.act(self.fc(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(8) for _ in range(3)])
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


CONFIG = r"""
mode: stats
steps: [0, 2]
backward: true
modules:
  - regex: '^blocks\.\d+$'
  - type: Linear
  - name: head
functions:
  - '^torch\.tanh$'
"""


@pytest.fixture
def tools(devx):
    import torch_devx.tools as tools

    yield tools
    devx.diagnostics.override_kernel("tanh", None)
    assert torch.overrides._get_current_function_mode_stack() == []


def run(tools, device: str, config, out: str, corrupt: bool = False, steps: int = 3):
    import torch_devx

    tools.seed_all(0)
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    x = torch.randn(4, 8).to(device)
    if corrupt:
        torch_devx.diagnostics.override_kernel(
            "tanh", lambda t: (torch.ops.aten.sigmoid(t * 2) * 2 - 1) * 1.05)
    tracer = tools.Tracer(config, model, out_dir=out)
    try:
        tracer.trace()
        for _ in range(steps):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            tracer.update_step()
    finally:
        tracer.untrace()
        torch_devx.diagnostics.override_kernel("tanh", None)
    return model


def test_yaml_selection_steps_and_format(tools, tmp_path):
    from torch_devx.tools._dump_reader import dump_steps, load_dump

    config = tmp_path / "trace.yaml"
    config.write_text(CONFIG)
    model = run(tools, "devx", str(config), str(tmp_path / "out"))
    assert dump_steps(str(tmp_path / "out")) == [0, 2]
    d = load_dump(str(tmp_path / "out"), step=2)
    forwards = [n for n in d.records if n.endswith(".forward")]
    expected_modules = {f"Module.blocks.{i}.Block.0.forward" for i in range(3)} | \
        {f"Module.blocks.{i}.fc.Linear.0.forward" for i in range(3)} | {"Module.head.Linear.0.forward"}
    assert {n for n in forwards if n.startswith("Module.")} == expected_modules
    assert {n for n in forwards if not n.startswith("Module.")} == {f"torch.tanh.{i}.forward" for i in range(3)}
    assert "Module.head.Linear.0.backward" in d.records
    assert d.records["torch.tanh.1.forward"]["module"] == "blocks.1.act (Tanh)"
    # Hooks are gone after untrace(): running again records nothing.
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_compare_of_two_traces_ranks_layers_and_names_the_op(tools, tmp_path):
    from torch_devx.tools._metrics import SEVERITY

    run(tools, "devx", CONFIG, str(tmp_path / "devx"), corrupt=True)
    run(tools, "cpu", CONFIG, str(tmp_path / "cpu"))
    result = tools.compare(str(tmp_path / "devx"), str(tmp_path / "cpu"), out_dir=str(tmp_path / "cmp"), step=0)
    assert result.first_divergence is not None and result.first_divergence.name == "torch.tanh.0.forward"
    ranking = [api.name for api in result.ranking]
    errors = {api.name: api.error for api in result.ranking}
    # The first fc sees the same inputs and weights on both sides; every block has the wrong tanh.
    assert errors["Module.blocks.0.fc.Linear.0.forward"] == 0.0
    assert errors["Module.blocks.0.Block.0.forward"] > 0.01
    assert ranking.index("Module.blocks.0.Block.0.forward") < ranking.index("Module.blocks.0.fc.Linear.0.forward")
    keys = [(SEVERITY[api.verdict], api.error) for api in result.ranking]
    assert keys == sorted(keys, reverse=True)  # by verdict, then by error
    with open(os.path.join(tmp_path, "cmp", "ranking.csv")) as f:
        lines = f.read().splitlines()
    assert lines[0] == "rank,module,error,verdict,rule" and lines[1].startswith(f"1,{ranking[0]},")


def test_dict_config_and_type_by_dotted_path(tools, tmp_path):
    from torch_devx.tools._dump_reader import load_dump

    run(tools, "devx", {"modules": [{"type": "torch.nn.Tanh"}], "steps": [0]}, str(tmp_path), steps=1)
    names = [n for n in load_dump(str(tmp_path)).records if n.endswith("forward")]
    assert names == [f"Module.blocks.{i}.act.Tanh.0.forward" for i in range(3)]


@pytest.mark.parametrize("config, message", [
    ({"modules": [{"name": "blocks.7"}]}, "no module named 'blocks.7'"),
    ({"modules": [{"regex": "^nothing$"}]}, "matches no module"),
    ({"modules": [{"name": "head", "type": "Linear"}]}, "exactly one of"),
    ({"modulez": []}, "unknown key"),
    ({"functions": ["("]}, "is not a regex"),
    ({"steps": "all"}, "steps must be a list"),
    ({"mode": "stack"}, "mode must be stats, sample or full"),
])
def test_bad_config_is_a_clear_error(tools, tmp_path, config, message):
    with pytest.raises(ValueError, match=message):
        tools.Tracer(config, Net(), out_dir=str(tmp_path))


def test_missing_config_file(tools, tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a YAML file nor YAML text"):
        tools.Tracer(str(tmp_path / "absent.yaml"), Net(), out_dir=str(tmp_path))
