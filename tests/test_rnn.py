"""nn.LSTM/GRU/RNN on devx run the CPU's own whole-sequence path on devx memory
(csrc/aten/rnn_sequence.cpp), so outputs and every gradient (input, h0/c0, weights) are the
CPU's bit for bit, for every argument combination of the modules; nn.LSTMCell/GRUCell keep the
fused cells."""
from __future__ import annotations

import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

import torch_devx  # noqa: F401

from conftest import needs_profiler_device_rows

SEQ, BATCH, IN, HIDDEN = 6, 3, 5, 7

CASES = {
    "lstm": (torch.nn.LSTM, {}),
    "lstm 2 layers bidirectional batch_first": (torch.nn.LSTM, {"num_layers": 2, "bidirectional": True,
                                                                "batch_first": True}),
    "lstm dropout": (torch.nn.LSTM, {"num_layers": 3, "dropout": 0.4}),
    "lstm proj_size": (torch.nn.LSTM, {"num_layers": 2, "proj_size": 3, "bidirectional": True}),
    "lstm no bias": (torch.nn.LSTM, {"bias": False, "num_layers": 2}),
    "gru 2 layers bidirectional batch_first": (torch.nn.GRU, {"num_layers": 2, "bidirectional": True,
                                                              "batch_first": True}),
    "gru dropout": (torch.nn.GRU, {"num_layers": 2, "dropout": 0.5}),
    "rnn tanh bidirectional": (torch.nn.RNN, {"num_layers": 2, "bidirectional": True}),
    "rnn relu dropout": (torch.nn.RNN, {"nonlinearity": "relu", "num_layers": 2, "dropout": 0.3}),
}


def hidden_shapes(module: torch.nn.RNNBase) -> list[tuple[int, ...]]:
    layers = module.num_layers * (2 if module.bidirectional else 1)
    h = (layers, BATCH, module.proj_size or module.hidden_size)
    return [h, (layers, BATCH, module.hidden_size)] if isinstance(module, torch.nn.LSTM) else [h]


def run(module: torch.nn.RNNBase, device: str, packed: bool, train: bool, seed_data: int = 1):
    """Outputs and gradients (input, hidden states, weights) of one forward and backward."""
    module = copy.deepcopy(module).to(device).train(train)
    g = torch.Generator().manual_seed(seed_data)
    shape = (BATCH, SEQ, IN) if module.batch_first else (SEQ, BATCH, IN)
    x = torch.randn(*shape, generator=g).to(device).requires_grad_()
    hidden = [torch.randn(*s, generator=g).to(device).requires_grad_() for s in hidden_shapes(module)]
    inp = x
    if packed:
        inp = pack_padded_sequence(x, torch.tensor([SEQ, SEQ - 2, 2]), batch_first=module.batch_first)
    torch.manual_seed(7)
    out, h = module(inp, tuple(hidden) if len(hidden) == 2 else hidden[0])
    outputs = [out.data if packed else out, *(h if isinstance(h, tuple) else (h,))]
    grads = [torch.randn(*o.shape, generator=g).to(device) for o in outputs]
    torch.autograd.backward(outputs, grads)
    return ([o.detach().cpu() for o in outputs],
            [t.grad.cpu() for t in (x, *hidden)] + [p.grad.cpu() for p in module.parameters()])


def ops_of(fn) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events() if e.name.startswith("aten::")]


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("case", CASES)
def test_forward_and_backward_are_the_cpus_bit_for_bit(case, packed):
    cls, kwargs = CASES[case]
    torch.manual_seed(0)
    module = cls(IN, HIDDEN, **kwargs)
    cpu_out, cpu_grads = run(module, "cpu", packed, train=True)
    devx_out, devx_grads = run(module, "devx", packed, train=True)
    assert len(devx_grads) == len(cpu_grads)
    for want, got in zip(cpu_out + cpu_grads, devx_out + devx_grads):
        assert torch.equal(want, got), (want - got).abs().max()


def test_eval_and_no_grad_match_the_cpu():
    torch.manual_seed(0)
    module = torch.nn.LSTM(IN, HIDDEN, num_layers=2, dropout=0.5, bidirectional=True)
    x = torch.randn(SEQ, BATCH, IN)
    want = module.eval()(x)[0]
    devx = copy.deepcopy(module).devx().eval()
    with torch.no_grad():
        got = devx(x.devx())[0]
    assert got.grad_fn is None and torch.equal(got.cpu(), want.detach())
    with torch.inference_mode():
        got = devx(x.devx())[0]
    assert torch.equal(got.cpu(), want.detach())


def test_dropout_draws_from_the_devx_generator():
    """Dropout between layers advances devx's generator, as the CPU's advances on the CPU."""
    module = torch.nn.GRU(IN, HIDDEN, num_layers=3, dropout=0.5)
    devx = copy.deepcopy(module).devx()
    x = torch.randn(SEQ, BATCH, IN)
    torch.manual_seed(3)
    cpu_before = torch.get_rng_state()
    devx_before = torch.devx.get_rng_state()
    out = devx(x.devx())[0]
    assert torch.equal(torch.get_rng_state(), cpu_before), "the CPU's generator must be left as it was"
    devx_after = torch.devx.get_rng_state()
    assert not torch.equal(devx_after, devx_before)
    torch.manual_seed(3)
    assert torch.equal(out.cpu(), module(x)[0].detach())
    # Equal states once both made the same draws.
    assert torch.equal(devx_after, torch.get_rng_state())


def test_an_lstm_step_runs_as_one_op_not_cell_by_cell():
    torch.manual_seed(0)
    module = torch.nn.LSTM(IN, HIDDEN, num_layers=2, bidirectional=True)
    x = torch.randn(SEQ, BATCH, IN)

    def step(m, inp):
        return lambda: m(inp)[0].sum().backward()

    cpu_ops = ops_of(step(module, x))
    devx_ops = ops_of(step(copy.deepcopy(module).devx(), x.devx()))
    assert "aten::lstm" in devx_ops
    assert not any("fused_lstm_cell" in name for name in devx_ops), devx_ops
    # Cell by cell, this step was 2 layers x 2 directions x 6 steps fused cells and their
    # matmuls (hundreds of ops); the CPU's own path is a few dozen.
    assert len(devx_ops) <= len(cpu_ops), (len(devx_ops), len(cpu_ops))


def test_double_backward_is_refused_by_name():
    module = torch.nn.GRU(IN, HIDDEN).devx()
    x = torch.randn(SEQ, BATCH, IN, device="devx", requires_grad=True)
    out = module(x)[0].sum()
    with pytest.raises(RuntimeError, match="aten::gru.*double backward"):
        torch.autograd.grad(out, x, create_graph=True)


def test_backward_twice_and_inplace_changes_are_refused_as_on_the_cpu():
    module = torch.nn.LSTM(IN, HIDDEN).devx()
    x = torch.randn(SEQ, BATCH, IN, device="devx", requires_grad=True)
    out = module(x)[0]
    out.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.sum().backward()
    # A weight changed in place after the forward: its saved value is stale.
    out = module(x)[0]
    with torch.no_grad():
        module.weight_hh_l0.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell])
def test_cells_keep_the_fused_cells(cls):
    torch.manual_seed(0)
    cpu = cls(IN, HIDDEN)
    dev = copy.deepcopy(cpu).devx()
    x = torch.randn(BATCH, IN)
    outs = []
    for model, inp in ((cpu, x), (dev, x.devx())):
        out = model(inp)
        y = out[0] if isinstance(out, tuple) else out
        ops = ops_of(lambda: y.pow(2).sum().backward())
        outs.append((y.detach().cpu(), [p.grad.cpu() for p in model.parameters()], ops))
    assert any("fused" in name for name in outs[1][2]), outs[1][2]
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=1e-5, rtol=1e-5)
    for got, want in zip(outs[1][1], outs[0][1]):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_autocast_runs_the_op_in_low_precision_as_the_cpus_autocast():
    torch.manual_seed(0)
    module = torch.nn.LSTM(IN, HIDDEN, num_layers=2)
    x = torch.randn(SEQ, BATCH, IN)
    devx = copy.deepcopy(module).devx()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = module(x)[0]
    with torch.autocast("devx", dtype=torch.bfloat16):
        got = devx(x.devx())[0]
    assert got.dtype == want.dtype == torch.bfloat16
    assert torch.equal(got.cpu(), want)
    want.float().sum().backward()
    got.float().sum().backward()
    for p, q in zip(module.parameters(), devx.parameters()):
        assert q.grad.dtype == torch.float32 and torch.equal(q.grad.cpu(), p.grad)


@needs_profiler_device_rows()
def test_the_profiler_shows_the_ops_kernels_on_the_device_rows():
    from torch.autograd import DeviceType

    module = torch.nn.LSTM(IN, HIDDEN).devx()
    x = torch.randn(SEQ, BATCH, IN, device="devx")
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]
    with torch.profiler.profile(activities=activities) as prof:
        module(x)[0].sum().backward()
        torch.devx.synchronize()
    kernels = {e.name for e in prof.events() if e.device_type == DeviceType.PrivateUse1}
    assert {f"{torch_devx.vendor}::lstm", f"{torch_devx.vendor}::lstm_backward"} <= kernels, kernels
