"""torch_devx.tools Dumper / compare / parse on real runs: a small model on devx with one op's kernel
deliberately corrupted (diagnostics.override_kernel) against the same model on the CPU."""
from __future__ import annotations

import csv
import html.parser
import inspect
import json
import os
import sys
import warnings
from typing import Optional

import pytest
import torch
import torch.nn as nn

from conftest import assert_child_ok, run_commands


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 12)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(12, 3)

    def forward(self, x):
        h = self.act(self.fc1(x))  # TANH LINE
        return self.fc2(h) * 2


def _line_of(marker: str) -> int:
    lines, start = inspect.getsourcelines(Net.forward)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def wrong_tanh(t):
    """A planted fault: tanh 5% too large (2 * sigmoid(2t) - 1 is tanh)."""
    return (torch.ops.aten.sigmoid(t * 2) * 2 - 1) * 1.05


@pytest.fixture
def tools(devx):
    import torch_devx.tools as tools

    yield tools
    devx.diagnostics.override_kernel("tanh", None)
    assert torch.overrides._get_current_function_mode_stack() == []
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    assert _get_current_dispatch_mode_stack() == []
    # Stopped tools leave no global hooks behind (optimizer steps, module calls).
    from torch.nn.modules import module
    from torch.optim import optimizer
    assert not optimizer._global_optimizer_pre_hooks and not optimizer._global_optimizer_post_hooks
    assert not module._global_forward_pre_hooks and not module._global_forward_hooks


def run_model(tools, device: str, out: str, corrupt: bool = False, steps: int = 1,
              foreach: Optional[bool] = False, faults: Optional[dict] = None, **options) -> None:
    """One SGD training step per dump step. foreach=None leaves SGD's default: the foreach kernels on
    devx, a per-parameter loop on the CPU. corrupt=True plants wrong_tanh; `faults` other kernels."""
    import torch_devx

    tools.seed_all(0)
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=foreach)
    x = torch.randn(4, 6).to(device)
    planted = {**({"tanh": wrong_tanh} if corrupt else {}), **(faults or {})}
    for op, kernel in planted.items():
        torch_devx.diagnostics.override_kernel(op, kernel)
    try:
        with tools.Dumper(out, **options) as dumper:
            for _ in range(steps):
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
                dumper.step()
    finally:
        for op in planted:
            torch_devx.diagnostics.override_kernel(op, None)


def test_dump_round_trip(tools, tmp_path):
    from torch_devx.tools._dump_reader import load_dump

    run_model(tools, "devx", str(tmp_path / "d"), mode="full", level="mix")
    d = load_dump(str(tmp_path / "d"))
    assert d.meta["mode"] == "full" and d.meta["step"] == 0
    names = list(d.records)
    # Call order: the module starts before the API it calls.
    assert names.index("Module.fc1.Linear.0.forward") < names.index("torch.nn.functional.linear.0.forward")
    assert names.index("torch.nn.functional.linear.0.forward") < names.index("torch.tanh.0.forward")
    tanh = d.records["torch.tanh.0.forward"]
    assert tanh["kind"] == "api" and tanh["module"] == "act (Tanh)"
    (inp,), (out,) = tanh["inputs"], tanh["outputs"]
    assert inp["dtype"] == "float32" and inp["shape"] == [4, 12] and inp["device"] == "devx:0"
    x, y = d.data(inp), d.data(out)
    torch.testing.assert_close(y, torch.tanh(x))
    assert out["max"] == pytest.approx(y.max().item()) and out["min"] == pytest.approx(y.min().item())
    assert out["mean"] == pytest.approx(y.mean().item()) and out["norm"] == pytest.approx(y.norm().item())
    assert out["nan"] == 0 and out["inf"] == 0
    # Module records carry the module's own parameters; backward records exist at both levels.
    fc1 = d.records["Module.fc1.Linear.0.forward"]
    assert [e["name"] for e in fc1["inputs"]] == ["args[0]", "param.weight", "param.bias"]
    assert d.records["Module.act.Tanh.0.backward"]["inputs"][0]["name"] == "grad_output[0]"
    assert d.records["Aten.tanh_backward.default.0.backward"]["node"] == "TanhBackward0"
    assert f"{__file__}:{_line_of('TANH LINE')} in forward" in d.stack("torch.tanh.0.forward")[0]


def test_sampled_data_keeps_head_tail_and_every_kth(tools, tmp_path):
    from torch_devx.tools._dump_reader import load_dump
    from torch_devx.tools._summary import Sampling

    t = torch.arange(1000, dtype=torch.float32, device="devx")
    with tools.Dumper(str(tmp_path), mode="sample", sampling=Sampling(head=3, tail=2, every=100)):
        torch.neg(t)
    d = load_dump(str(tmp_path))
    entry = d.records["torch.neg.0.forward"]["outputs"][0]
    assert entry["sampling"] == [3, 2, 100]
    expected = -torch.tensor([0, 1, 2] + list(range(3, 998, 100)) + [998, 999], dtype=torch.float32)
    torch.testing.assert_close(d.data(entry), expected)
    assert entry["shape"] == [1000] and entry["min"] == -999.0  # statistics are of the whole tensor


def test_scopes_apis_range_stack_and_steps(tools, tmp_path):
    from torch_devx.tools._dump_reader import dump_steps, load_dump

    x = torch.randn(5, device="devx")

    def work():
        a = torch.relu(x)
        b = torch.sigmoid(a)
        c = torch.exp(b)
        return torch.relu(c)

    with tools.Dumper(str(tmp_path / "apis"), apis=[r"^torch\.relu$"], backward=False):
        work()
    assert list(load_dump(str(tmp_path / "apis")).records) == ["torch.relu.0.forward", "torch.relu.1.forward"]

    with tools.Dumper(str(tmp_path / "range"), range=("torch.sigmoid.0", "torch.exp.0.forward"), backward=False):
        work()
    assert list(load_dump(str(tmp_path / "range")).records) == ["torch.sigmoid.0.forward", "torch.exp.0.forward"]

    with tools.Dumper(str(tmp_path / "stack"), mode="stack", backward=False):
        work()
    d = load_dump(str(tmp_path / "stack"))
    assert all(r["inputs"] == [] and r["outputs"] == [] for r in d.records.values())
    assert "in work: a = torch.relu(x)" in d.stack("torch.relu.0.forward")[0]

    with tools.Dumper(str(tmp_path / "steps"), steps=[1, 3], backward=False) as dumper:
        for _ in range(4):
            work()
            dumper.step()
    assert dump_steps(str(tmp_path / "steps")) == [1, 3]


@pytest.mark.parametrize("shape", [(2, 4), (2, 5, 4)])
def test_module_gradient_after_an_in_place_op_on_its_output(tools, tmp_path, shape):
    from torch_devx.tools._dump_reader import load_dump

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 2)).to("devx")
    x = torch.randn(*shape, device="devx")
    with tools.Dumper(str(tmp_path), level="module", mode="full"):
        model(x).sum().backward()
    # The same gradients, without the in-place op and without the dumper.
    h = model[0](x).detach().requires_grad_()
    r = torch.relu(h)
    r.retain_grad()
    model[2](r).sum().backward()
    d = load_dump(str(tmp_path))
    for record, want in (("Module.0.Linear.0.backward", h.grad), ("Module.1.ReLU.0.backward", r.grad)):
        (entry,) = d.records[record]["inputs"]
        assert entry["name"] == "grad_output[0]" and entry["shape"] == list(shape)
        torch.testing.assert_close(d.data(entry), want.cpu())


def test_statistics_dump_of_100_steps_stays_small(tools, tmp_path):
    run_model(tools, "devx", str(tmp_path), steps=100, level="mix")
    folders = sorted(os.listdir(tmp_path))
    assert len(folders) == 100
    total = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(tmp_path) for f in files)
    assert not any(os.path.isdir(tmp_path / f / "data") for f in folders)
    assert total / 100 < 48 * 1024, f"{total / 100:.0f} bytes per step"


@pytest.mark.parametrize("mode", ["stats", "full"])
def test_compare_names_the_corrupted_op(tools, tmp_path, mode):
    from torch_devx.tools._metrics import SEVERITY

    run_model(tools, "devx", str(tmp_path / "devx"), corrupt=True, mode=mode, level="mix")
    run_model(tools, "cpu", str(tmp_path / "cpu"), mode=mode, level="mix")
    result = tools.compare(str(tmp_path / "devx"), str(tmp_path / "cpu"), out_dir=str(tmp_path / "cmp"))
    fd = result.first_divergence
    assert fd is not None and fd.name == "torch.tanh.0.forward"
    assert fd.verdict == "error"
    assert f"test_dump_compare.py:{_line_of('TANH LINE')}" in fd.stack[0]
    if mode == "stats":
        assert result.basis == "stats" and fd.rule.startswith("statistics only")
    else:
        assert result.basis == "data" and "within 1%" in fd.rule
        (out,) = [t for t in fd.tensors if t.io == "output"]
        assert 0.04 < out.metrics.max_rel < 0.06 and out.metrics.within_01 == 0.0
    by_name = {api.name: api for api in result.apis}
    assert by_name["torch.nn.functional.linear.0.forward"].verdict == "pass"   # before the fault
    assert by_name["torch.nn.functional.linear.1.forward"].verdict == "error"  # after it
    assert result.summary().splitlines()[1].startswith("first divergence: torch.tanh.0.forward")
    # The layer ranking puts a layer after the fault above fc1 (which sees the same inputs and weights),
    # errors before warnings before passes.
    ranking = [api.name for api in result.ranking]
    assert ranking.index("Module.fc1.Linear.0.forward") > ranking.index("Module.act.Tanh.0.forward")
    severities = [SEVERITY[api.verdict] for api in result.ranking]
    assert severities == sorted(severities, reverse=True) and severities[0] == SEVERITY["error"]
    if mode == "full":
        # A tanh 5% too large everywhere has cosine 1: the error that ranks it must see the scale.
        act = next(api for api in result.ranking if api.name == "Module.act.Tanh.0.forward")
        assert act.verdict == "error" and 0.04 < act.error < 0.06
        keys = [(SEVERITY[api.verdict], api.error) for api in result.ranking]
        assert keys == sorted(keys, reverse=True)

    with open(result.files["csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    tanh_rows = [r for r in rows if r["api_a"] == "torch.tanh.0.forward"]
    assert {r["io"] for r in tanh_rows} == {"input", "output"}
    assert [r["verdict"] for r in tanh_rows if r["io"] == "output"] == ["error"]
    assert float(next(r for r in tanh_rows if r["io"] == "output")["max_b"]) < 1.0

    class Collect(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.ids, self.text = set(), []

        def handle_starttag(self, tag, attrs):
            self.ids.update(v for k, v in attrs if k == "id")

        def handle_data(self, data):
            self.text.append(data)

    page = Collect()
    with open(result.files["html"]) as f:
        text = f.read()
    page.feed(text)
    assert {"first-divergence", "apis", "ranking"} <= page.ids
    ranking_table = text[text.index("id='ranking'"):text.index("id='apis'")]
    positions = [ranking_table.index(f"<td>{name}</td>") for name in ranking]
    assert positions == sorted(positions)  # the page lists the layers in the ranking's order
    assert "torch.tanh.0.forward" in "".join(page.text)
    with open(result.files["ranking"], newline="") as f:
        assert next(csv.reader(f)) == ["rank", "module", "error", "verdict", "rule"]


def test_clean_runs_agree(tools, tmp_path):
    run_model(tools, "devx", str(tmp_path / "devx"), mode="full", level="mix")
    run_model(tools, "cpu", str(tmp_path / "cpu"), mode="full", level="mix")
    result = tools.compare(str(tmp_path / "devx"), str(tmp_path / "cpu"))
    assert result.first_divergence is None
    counts = result.counts()
    assert counts["error"] == 0 and counts["warning"] == 0 and counts["unpaired"] == 0 and counts["pass"] > 20


class TinyBert(nn.Module):
    """A BERT-style encoder: embeddings, post-norm layers with separate query/key/value projections,
    F.scaled_dot_product_attention, a GELU MLP and a classifier on the first token."""

    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2, ctx: int = 16) -> None:
        super().__init__()
        self.tok, self.pos, self.ln = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim), nn.LayerNorm(dim)
        self.layers = nn.ModuleList(nn.ModuleDict(dict(
            query=nn.Linear(dim, dim), key=nn.Linear(dim, dim), value=nn.Linear(dim, dim), out=nn.Linear(dim, dim),
            ln1=nn.LayerNorm(dim), fc=nn.Linear(dim, 4 * dim), fc2=nn.Linear(4 * dim, dim), ln2=nn.LayerNorm(dim)))
            for _ in range(layers))
        self.heads, self.cls = heads, nn.Linear(dim, 3)

    def forward(self, tok):
        b, t = tok.shape
        x = self.ln(self.tok(tok) + self.pos(torch.arange(t, device=tok.device)))
        for layer in self.layers:
            q, k, v = (layer[n](x).view(b, t, self.heads, -1).transpose(1, 2) for n in ("query", "key", "value"))
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            x = layer["ln1"](x + layer["out"](y.transpose(1, 2).reshape(b, t, -1)))
            x = layer["ln2"](x + layer["fc2"](torch.nn.functional.gelu(layer["fc"](x))))
        return self.cls(x[:, 0])


def run_bert(tools, device: str, out: str, attention: str = "default", **options) -> None:
    """One SGD step of TinyBert. attention="math" makes SDPA take its decomposed math path, as a
    reference run on a machine without the fused kernel does: the same results within rounding,
    through other aten ops forward and backward."""
    import contextlib

    from torch.nn.attention import SDPBackend, sdpa_kernel

    tools.seed_all(0)
    model = TinyBert().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    tok = torch.randint(0, 64, (2, 16)).to(device)
    with tools.Dumper(out, level="mix", **options), \
            (sdpa_kernel(SDPBackend.MATH) if attention == "math" else contextlib.nullcontext()):
        opt.zero_grad()
        model(tok).square().sum().backward()
        opt.step()


@pytest.mark.parametrize("attention,mode", [("default", "full"), ("math", "full"), ("math", "stats")])
def test_bert_on_devx_agrees_with_the_cpu(tools, tmp_path, attention, mode):
    from torch_devx.tools._dump_reader import load_dump

    run_bert(tools, "devx", str(tmp_path / "devx"), mode=mode)
    run_bert(tools, "cpu", str(tmp_path / "cpu"), attention=attention, mode=mode)
    result = tools.compare(str(tmp_path / "devx"), str(tmp_path / "cpu"))
    bad = [(api.name_a, api.name_b, api.rule) for api in result.apis if api.paired and api.verdict != "pass"]
    assert bad == [] and result.first_divergence is None
    counts = result.counts()
    assert counts["error"] == counts["warning"] == 0 and counts["pass"] > 300
    # The forward calls all pair; what does not is backward work the two runs do with different ops.
    unpaired = [api for api in result.apis if not api.paired]
    assert unpaired and all(", in the backward of " in api.rule for api in unpaired)
    if attention == "default":
        # devx's fused attention is the CPU's flash kernel under another name (the overrideable op).
        assert {api.name.split(".")[1] for api in unpaired} == {
            "_scaled_dot_product_fused_attention_overrideable_backward",
            "_scaled_dot_product_flash_attention_for_cpu_backward", "detach"}
        return
    # The key projections' bias gradients are mathematically zero (softmax ignores what is added to
    # every score of a row): rounding noise on both sides, which only the absolute floor tells apart.
    grad = next(t for api in result.apis if api.name == "Module.layers.0.key.Linear.0.backward"
                for t in api.tensors)
    assert grad.metrics.verdict == "pass"
    a, b = load_dump(str(tmp_path / "devx")), load_dump(str(tmp_path / "cpu"))
    # Backward records are paired only within the backward of paired forward calls, and with the
    # same autograd node: never a fused kernel's op with one of the decomposition's.
    partner = {na: nb for na, nb in ((api.name_a, api.name_b) for api in result.apis) if na and nb}
    for api in result.apis:
        if api.paired and a.records[api.name_a].get("origin"):
            rec_a, rec_b = a.records[api.name_a], b.records[api.name_b]
            assert partner[rec_a["origin"]] == rec_b["origin"] and rec_a["node"] == rec_b["node"]
    fused = [api for api in result.apis if api.name_a and "fused_attention_overrideable_backward" in api.name_a]
    assert len(fused) == 2 and not any(api.paired for api in fused)
    assert all(api.rule.startswith("only in A, in the backward of torch.nn.functional.scaled_dot_product_attention.")
               and "the two runs differentiate that call with different aten ops" in api.rule for api in fused)


def test_an_absolute_floor_keeps_rounding_noise_from_being_an_error(tools, tmp_path, capsys):
    """Two runs whose only difference is noise around zero (1e-12): a pass, on data and on statistics,
    with the floor reported; --atol 0 takes the floor away."""
    from torch_devx.__main__ import main

    for seed in (1, 2):
        torch.manual_seed(seed)
        noise = (torch.randn(64) * 1e-12).to("devx")
        for mode in ("full", "stats"):
            with tools.Dumper(str(tmp_path / f"{mode}{seed}"), mode=mode, backward=False):
                torch.neg(noise)
    for mode, basis in (("full", "data"), ("stats", "stats")):
        result = tools.compare(str(tmp_path / f"{mode}1"), str(tmp_path / f"{mode}2"), out_dir=str(tmp_path / mode))
        (out,) = [t for t in result.apis[0].tensors if t.io == "output"]
        assert result.basis == basis and out.metrics.verdict == "pass" and out.metrics.atol == 1e-5
        assert "atol 1e-05" in out.metrics.rule
        with open(result.files["csv"], newline="") as f:
            assert {row["atol"] for row in csv.DictReader(f)} == {"1e-05"}
        assert main(["compare", str(tmp_path / f"{mode}1"), str(tmp_path / f"{mode}2"), "--atol", "0"]) == 0
        assert "0 pass, 0 warning, 1 error" in capsys.readouterr().out
    # The floor is absolute: a difference above it is still judged on its relative error.
    big = tools.compare(str(tmp_path / "full1"), str(tmp_path / "full2"), atol=1e-13)
    assert big.counts()["error"] == 1 and "> atol 1e-13" in big.apis[0].rule
    assert main(["compare", str(tmp_path / "full1"), str(tmp_path / "full2"), "--atol", "-1"]) == 2
    assert "atol must be a number >= 0" in capsys.readouterr().err


def wrong_foreach_add_(tensors, others, alpha=1):
    """A planted fault: the foreach update steps 50% too far."""
    for t, o in zip(tensors, others):
        torch.ops.aten.add_.Tensor(t, o, alpha=alpha * 1.5)


def test_default_optimizer_foreach_fault_is_caught(tools, tmp_path):
    from torch_devx.tools._dump_reader import load_dump

    # SGD's defaults: torch._foreach_add_ on devx, Tensor.add_ per parameter on the CPU.
    run_model(tools, "devx", str(tmp_path / "devx"), foreach=None, level="mix",
              faults={"_foreach_add_.List": wrong_foreach_add_})
    run_model(tools, "cpu", str(tmp_path / "cpu"), foreach=None, level="mix")
    devx_dump = load_dump(str(tmp_path / "devx"))
    foreach = devx_dump.records["torch._foreach_add_.0.forward"]
    assert foreach["optimizer"] == "Optimizer.SGD.0.step"
    assert [e["name"] for e in foreach["outputs"]] == [f"output[{i}]" for i in range(4)]  # what it wrote
    step = devx_dump.records["Optimizer.SGD.0.step"]
    assert [e["name"] for e in step["inputs"][:2]] == ["param_groups[0].params[0]", "param_groups[0].params[0].grad"]

    result = tools.compare(str(tmp_path / "devx"), str(tmp_path / "cpu"), out_dir=str(tmp_path / "cmp"))
    fd = result.first_divergence
    assert fd is not None and fd.name == "Optimizer.SGD.0.step" and fd.verdict == "error"
    assert "opt.step()" in fd.stack[0]
    unpaired = [api for api in result.apis if not api.paired]
    assert sorted(api.name for api in unpaired) == ["Tensor.add_.0.forward", "Tensor.add_.1.forward",
                                                    "Tensor.add_.2.forward", "Tensor.add_.3.forward",
                                                    "torch._foreach_add_.0.forward"]
    assert all("inside Optimizer.SGD.0.step" in api.rule for api in unpaired)
    # Everything before the step still pairs and agrees.
    counts = result.counts()
    assert counts["error"] == 1 and counts["warning"] == 0 and counts["pass"] > 20

    # Without the fault the step agrees too.
    run_model(tools, "devx", str(tmp_path / "clean"), foreach=None, level="mix")
    clean = tools.compare(str(tmp_path / "clean"), str(tmp_path / "cpu"))
    assert clean.first_divergence is None and clean.counts()["error"] == 0


def test_pairing_tolerates_an_extra_call(tools, tmp_path):
    x = torch.randn(8, device="devx")
    for name, extra in (("a", False), ("b", True)):
        with tools.Dumper(str(tmp_path / name), backward=False):
            y = torch.sin(x)
            if extra:
                y = y.clone()
            z = torch.cos(y) * (1.01 if name == "a" else 1.0)
            torch.exp(z)
    result = tools.compare(str(tmp_path / "a"), str(tmp_path / "b"))
    by_name = {api.name: api for api in result.apis}
    assert not by_name["Tensor.clone.0.forward"].paired
    assert by_name["torch.exp.0.forward"].paired and by_name["torch.exp.0.forward"].input_verdict != "pass"
    assert result.first_divergence.name == "Tensor.mul.0.forward"
    assert result.counts()["unpaired"] == 1


def test_compare_defaults_to_the_first_shared_step(tools, tmp_path):
    x = torch.randn(8, device="devx")
    for name, steps in (("a", [1, 2]), ("b", [0, 2]), ("c", [0])):
        with tools.Dumper(str(tmp_path / name), steps=steps, backward=False) as dumper:
            for step in range(3):
                torch.sin(x * (step + 1))
                dumper.step()
    result = tools.compare(str(tmp_path / "a"), str(tmp_path / "b"))
    assert result.dump_a.endswith("step2") and result.dump_b.endswith("step2")
    assert result.first_divergence is None and result.counts()["pass"] == 2
    with pytest.raises(ValueError, match=r"\(steps \[1, 2\]\) and .* \(steps \[0\]\) share no step"):
        tools.compare(str(tmp_path / "a"), str(tmp_path / "c"))
    # An explicit step, or two step folders, compare what was asked for.
    assert tools.compare(str(tmp_path / "b"), str(tmp_path / "c"), step=0).dump_a.endswith("step0")
    assert tools.compare(str(tmp_path / "a" / "step1"), str(tmp_path / "c" / "step0")).dump_a.endswith("step1")


def _warn_twice(x):
    torch.nn.functional.softmax(x)  # PYTHON WARNING: warnings.warn(stacklevel=2) in torch
    torch.add(x, x, out=torch.empty(1, device="devx"))  # C++ WARNING: an out= tensor resized


@pytest.mark.parametrize("tool", ["api", "module", "overflow"])
def test_warnings_name_the_users_line(tools, tmp_path, tool):
    lines, start = inspect.getsourcelines(_warn_twice)
    expected = [(__file__, start + next(i for i, text in enumerate(lines) if marker in text))
                for marker in ("PYTHON WARNING", "C++ WARNING")]
    x = torch.randn(2, 3, device="devx")
    # With DEVX_SIM_ASYNC=1 the first call also runs torch's meta function, which warns too; its
    # answer is then cached, so both calls compared below see the same warnings.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _warn_twice(x)
    with warnings.catch_warnings(record=True) as plain:
        warnings.simplefilter("always")
        _warn_twice(x)
    started = tools.OverflowCheck() if tool == "overflow" else tools.Dumper(str(tmp_path), level=tool)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with started:
            _warn_twice(x)
    # The same places as without the tool.
    assert [(w.filename, w.lineno) for w in caught] == [(w.filename, w.lineno) for w in plain]
    assert set(expected) <= {(w.filename, w.lineno) for w in caught}
    if tool == "api":  # the records' stacks are unchanged by the stand-in frame
        from torch_devx.tools._dump_reader import load_dump

        stack = load_dump(str(tmp_path)).stack("torch.nn.functional.softmax.0.forward")
        assert stack[0].startswith(f"{__file__}:{expected[0][1]} in _warn_twice:") and "tools call" not in stack[1]


def test_parse_prints_stack_and_statistics(tools, tmp_path, capsys):
    run_model(tools, "devx", str(tmp_path))
    text = tools.parse(str(tmp_path), "torch.tanh.0")
    assert capsys.readouterr().out.strip() == text
    assert text.startswith("torch.tanh.0.forward  (api, in act (Tanh))")
    assert f"test_dump_compare.py:{_line_of('TANH LINE')} in forward" in text
    assert "output: float32 (4, 12) devx:0 max=" in text and "nan=0 inf=0" in text
    with pytest.raises(KeyError, match="close: torch.tanh.0.forward"):
        tools.parse(str(tmp_path), "torch.tanh.0.forwrd")


def test_bad_input_is_a_clear_error(tools, tmp_path):
    with pytest.raises(ValueError, match="dump mode 'everything'"):
        tools.Dumper(str(tmp_path), mode="everything")
    with pytest.raises(ValueError, match="dump level"):
        tools.Dumper(str(tmp_path), level="kernel")
    with pytest.raises(ValueError, match="range must be two record names"):
        tools.Dumper(str(tmp_path), range=("torch.relu.0",))
    with pytest.raises(FileNotFoundError, match="not a dump folder"):
        tools.compare(str(tmp_path), str(tmp_path))
    (tmp_path / "step0").mkdir()
    (tmp_path / "step0" / "dump.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        tools.parse(str(tmp_path), "torch.relu.0")


def test_nothing_is_installed_at_import():
    code = """
    import sys, torch, torch_devx
    from torch.nn.modules import module
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    assert not [m for m in sys.modules if m.startswith("torch_devx.tools")]
    import torch_devx.tools
    assert torch.overrides._get_current_function_mode_stack() == []
    assert _get_current_dispatch_mode_stack() == []
    assert not module._global_forward_hooks and not module._global_forward_pre_hooks
    print("clean")
    """
    from conftest import run_python

    proc = run_python(code)
    assert_child_ok(proc)
    assert "clean" in proc.stdout


SCRIPT = """
import sys
import torch
import torch.nn as nn
import torch_devx

if sys.argv[1] == "corrupt":
    torch_devx.diagnostics.override_kernel("tanh", lambda t: (torch.ops.aten.sigmoid(t * 2) * 2 - 1) * 1.05)
device = sys.argv[2]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).to(device)
x = torch.randn(3, 4).to(device)
model(x).sum().backward()
"""


def test_cli_dump_compare_parse(tmp_path, capsys):
    from torch_devx.__main__ import main

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    cli = [sys.executable, "-m", "torch_devx"]
    dumps = run_commands([cli + ["dump", "--out", str(tmp_path / "devx"), "--level", "mix", str(script), "corrupt",
                                 "devx"],
                          cli + ["dump", "--out", str(tmp_path / "cpu"), "--level", "mix", str(script), "clean",
                                 "cpu"]])
    for name, proc in zip(("devx", "cpu"), dumps):
        assert_child_ok(proc)
        assert f"dump written to {tmp_path / name / 'step0'}" in proc.stdout
    (proc,) = run_commands([cli + ["compare", str(tmp_path / "devx"), str(tmp_path / "cpu"),
                                   "--out", str(tmp_path / "cmp")]])
    assert_child_ok(proc)
    assert "first divergence: torch.tanh.0.forward" in proc.stdout
    assert "train.py:13 in <module>: model(x).sum().backward()" in proc.stdout
    assert os.path.isfile(tmp_path / "cmp" / "compare.html") and os.path.isfile(tmp_path / "cmp" / "compare.csv")
    with open(tmp_path / "devx" / "step0" / "dump.json") as f:
        assert json.load(f)["meta"]["level"] == "mix"
    # parse through the same entry point, in this process.
    assert main(["parse", str(tmp_path / "devx"), "torch.tanh.0.forward"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("torch.tanh.0.forward  (api, in 1 (Tanh))") and "max=" in out
    assert main(["parse", str(tmp_path / "devx"), "torch.nothing.0"]) == 2
    assert "no record 'torch.nothing.0'" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "absent"), str(tmp_path / "cpu")]) == 2
    assert "does not exist" in capsys.readouterr().err


TRAIN_SCRIPT = """
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).to("devx")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(3, 4, device="devx")
for _ in range(3):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
"""


def test_cli_dump_steps_end_at_optimizer_steps(tools, tmp_path, capsys):
    from torch_devx.__main__ import main
    from torch_devx.tools._dump_reader import dump_steps, load_dump

    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    out = tmp_path / "dump"
    # A list option takes one comma-separated value, so the script after it stays the script.
    assert main(["dump", "--out", str(out), "--level", "mix", "--steps", "1,2",
                 "--range", "torch.tanh.0", "Optimizer.SGD.0.step", str(script)]) == 0
    assert f"dump written to {out / 'step1'}, {out / 'step2'}" in capsys.readouterr().out
    assert dump_steps(str(out)) == [1, 2]
    names = list(load_dump(str(out), step=2).records)
    assert names[0] == "torch.tanh.0.forward" and names[-1] == "Optimizer.SGD.0.step"
    assert "Module.0.Linear.0.forward" not in names and "Module.2.Linear.0.forward" in names
    out2 = tmp_path / "dump2"
    assert main(["dump", "--out", str(out2), "--steps", "0", "--steps", "2", str(script)]) == 0
    assert dump_steps(str(out2)) == [0, 2]


def test_cli_list_options_reject_bad_items(capsys):
    from torch_devx.__main__ import main

    with pytest.raises(SystemExit) as info:
        main(["dump", "--steps", "0,x", "train.py"])
    assert info.value.code == 2 and "invalid item in '0,x'" in capsys.readouterr().err



# --- dumps are untrusted input; reports and dumps are not written through planted links


def _tensor_entry(name: str, value: float, data: Optional[str] = None) -> dict:
    entry = {"name": name, "type": "tensor", "dtype": "float32", "shape": [2], "device": "cpu",
             "requires_grad": False, "max": value, "min": value, "mean": value, "norm": value * 1.4142135,
             "nan": 0, "inf": 0}
    if data is not None:
        entry["data"] = data
    return entry


def _write_dump(root, records: dict, stacks: Optional[dict] = None) -> str:
    step = root / "step0"
    step.mkdir(parents=True)
    (step / "dump.json").write_text(json.dumps({"meta": {"format": 1, "step": 0, "mode": "stats"},
                                                "records": records}))
    if stacks is not None:
        (step / "stack.json").write_text(json.dumps(stacks))
    return str(root)


def _record(api: str, value: float, data: Optional[str] = None) -> dict:
    return {"api": api, "kind": "api", "direction": "forward", "inputs": [],
            "outputs": [_tensor_entry("output", value, data)]}


MALFORMED = {
    "records_a_list": ({"records": [1, 2]}, "'records' is not an object"),
    "record_a_number": ({"records": {"torch.tanh.0.forward": 3}}, "record 'torch.tanh.0.forward' is not an object"),
    "outputs_a_string": ({"records": {"t.0.forward": {"api": "t", "outputs": "x"}}}, "'outputs' is not a list"),
    "entry_without_name": ({"records": {"t.0.forward": {"api": "t", "outputs": [{"type": "tensor"}]}}},
                           "is not an argument summary"),
    "shape_a_string": ({"records": {"t.0.forward": {"api": "t", "outputs": [
        dict(_tensor_entry("output", 1.0), shape="2x2")]}}}, "shape '2x2' is not a list of sizes"),
    "max_a_string": ({"records": {"t.0.forward": {"api": "t", "outputs": [
        dict(_tensor_entry("output", 1.0), max="big")]}}}, "max 'big' is not a number"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_compare_of_a_malformed_dump_is_one_clear_error_naming_the_file(tmp_path, capsys, case):
    from torch_devx.__main__ import main

    content, problem = MALFORMED[case]
    bad = tmp_path / "bad" / "step0"
    bad.mkdir(parents=True)
    (bad / "dump.json").write_text(json.dumps(content))
    good = _write_dump(tmp_path / "good", {"t.0.forward": _record("t", 1.0)})
    assert main(["compare", str(tmp_path / "bad"), good]) == 2
    err = capsys.readouterr().err
    assert f"{bad}/dump.json" in err and problem in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", ["stack_not_json", "stack_wrong_shape", "data_not_a_tensor_file"])
def test_compare_of_broken_side_files_is_one_clear_error(tmp_path, capsys, case):
    from torch_devx.__main__ import main

    data = "data/t.output.0.pt" if case == "data_not_a_tensor_file" else None
    a = _write_dump(tmp_path / "a", {"t.0.forward": _record("t", 1.0, data)})
    b = _write_dump(tmp_path / "b", {"t.0.forward": _record("t", 1.0, data)})
    step = tmp_path / "a" / "step0"
    if case == "stack_not_json":
        (step / "stack.json").write_text("{oops")
        culprit, problem = step / "stack.json", "not valid JSON"
    elif case == "stack_wrong_shape":
        (step / "stack.json").write_text(json.dumps({"stacks": 5, "records": {}}))
        culprit, problem = step / "stack.json", "has no 'stacks' list"
    else:
        for root in ("a", "b"):
            (tmp_path / root / "step0" / "data").mkdir()
            torch.save(torch.ones(2), str(tmp_path / root / "step0" / data))
        (step / data).write_bytes(b"\x00garbage, not a torch.save file")
        culprit, problem = step / data, "is not a saved tensor"
    assert main(["compare", a, b]) == 2
    err = capsys.readouterr().err
    assert str(culprit) in err and problem in err, err
    assert "Traceback" not in err


def test_dump_data_paths_stay_inside_the_dump(tmp_path, capsys):
    from torch_devx.__main__ import main

    secret = tmp_path / "elsewhere" / "secret.pt"
    secret.parent.mkdir()
    torch.save(torch.ones(2), str(secret))
    for rel in ("../../elsewhere/secret.pt", str(secret)):
        root = tmp_path / ("a" if rel.startswith("..") else "abs")
        a = _write_dump(root, {"t.0.forward": _record("t", 1.0, rel)})
        b = tmp_path / "b"
        if not b.exists():
            _write_dump(b, {"t.0.forward": _record("t", 1.0, "data/t.output.0.pt")})
            (b / "step0" / "data").mkdir()
            torch.save(torch.ones(2), str(b / "step0" / "data" / "t.output.0.pt"))
        assert main(["compare", a, str(b)]) == 2
        err = capsys.readouterr().err
        assert "outside" in err and rel in err and "refusing to read it" in err, err
    # A link inside the dump that leads out of it is refused too.
    linked = tmp_path / "linked"
    _write_dump(linked, {"t.0.forward": _record("t", 1.0, "data/t.output.0.pt")})
    (linked / "step0" / "data").mkdir()
    (linked / "step0" / "data" / "t.output.0.pt").symlink_to(secret)
    assert main(["compare", str(linked), str(tmp_path / "b")]) == 2
    assert "outside" in capsys.readouterr().err


def test_csv_cells_that_look_like_formulas_are_escaped(tmp_path):
    import torch_devx.tools as tools

    names = ["=HYPERLINK(\"http://x\")", "+cmd", "-2+3", "@SUM(A1)"]
    records = {f"{n}.0.forward": _record(n, 1.0) for n in names}
    a = _write_dump(tmp_path / "a", records)
    b = _write_dump(tmp_path / "b", {k: dict(v, outputs=[_tensor_entry("output", -2.5)]) for k, v in records.items()})
    result = tools.compare(a, b, out_dir=str(tmp_path / "cmp"))
    with open(result.files["csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["api_a"] for r in rows] == ["'" + n + ".0.forward" for n in names]
    assert all(r["min_b"] == "-2.5" for r in rows)  # negative numbers stay numbers


def test_reports_replace_planted_links_and_leave_their_targets(tmp_path):
    import torch_devx.tools as tools

    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    out = tmp_path / "cmp"
    out.mkdir()
    for name in ("compare.csv", "compare.html", "ranking.csv"):
        (out / name).symlink_to(precious)
    a = _write_dump(tmp_path / "a", {"t.0.forward": _record("t", 1.0)})
    b = _write_dump(tmp_path / "b", {"t.0.forward": _record("t", 1.0)})
    tools.compare(a, b, out_dir=str(out))
    assert precious.read_text() == "keep me"
    for name in ("compare.csv", "compare.html", "ranking.csv"):
        assert not (out / name).is_symlink() and (out / name).read_text()


def test_dumper_does_not_write_through_planted_links(tools, tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    out = tmp_path / "d"
    (out / "step0" / "data").mkdir(parents=True)
    (out / "step0" / "dump.json").symlink_to(precious)
    (out / "step0" / "stack.json").symlink_to(precious)
    (out / "step0" / "data" / "Module.fc1.Linear.0.forward.output.0.pt").symlink_to(precious)
    run_model(tools, "devx", str(out), mode="full", level="mix")
    assert precious.read_text() == "keep me"
    from torch_devx.tools._dump_reader import load_dump

    assert "torch.tanh.0.forward" in load_dump(str(out)).records
    # A link planted as a step folder is refused.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out2 = tmp_path / "d2"
    out2.mkdir()
    (out2 / "step0").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="symbolic link"):
        run_model(tools, "devx", str(out2), mode="full", level="mix")
    assert list(elsewhere.iterdir()) == []
