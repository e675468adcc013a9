"""Sparse (COO, CSR) and nested tensors on devx: created, computed on and differentiated as on the
CPU, bit-exact (cpu_sim runs the CPU's sparse and nested kernels on devx memory). The suite runs
this file with synchronous and with asynchronous streams (DEVX_SIM_ASYNC=1)."""
from __future__ import annotations

import copy
import unittest

import pytest
import torch
import torch.nn as nn
import torch_devx  # noqa: F401
from torch_devx import diagnostics

DEVICES = ["devx", "cuda"]  # "cuda": CUDA mocking on


def coo_example():
    i = torch.tensor([[0, 1, 1, 2, 0], [2, 0, 2, 1, 2]])
    v = torch.tensor([3.0, 4.0, 5.0, -1.5, 2.0])
    return i, v, (3, 4)


def assert_same_sparse(devx_t, cpu_t):
    assert devx_t.is_sparse and devx_t.device.type == "devx"
    back = devx_t.cpu()
    assert back.is_sparse and back.is_coalesced() == cpu_t.is_coalesced()
    assert torch.equal(back._indices(), cpu_t._indices())
    assert torch.equal(back._values(), cpu_t._values())
    assert back.shape == cpu_t.shape


@pytest.mark.parametrize("device", DEVICES)
def test_sparse_coo_creation_and_members(device):
    i, v, size = coo_example()
    cpu = torch.sparse_coo_tensor(i, v, size)
    s = torch.sparse_coo_tensor(i.to(device), v.to(device), size, device=device)
    assert s.layout == torch.sparse_coo and s.device.type == "devx"
    assert not s.is_coalesced() and s._nnz() == 5 and s.sparse_dim() == 2 and s.dense_dim() == 0
    assert s._indices().device.type == "devx" and s._values().device.type == "devx"
    assert_same_sparse(s, cpu)
    c = s.coalesce()
    assert c.is_coalesced()
    assert_same_sparse(c, cpu.coalesce())
    assert torch.equal(c.indices().cpu(), cpu.coalesce().indices())
    assert torch.equal(c.values().cpu(), cpu.coalesce().values())
    # An already coalesced tensor is returned as it is, as on the CPU.
    assert c.coalesce() is c
    assert torch.equal(s.to_dense().cpu(), cpu.to_dense())


def test_sparse_moves_between_cpu_and_devx():
    i, v, size = coo_example()
    cpu = torch.sparse_coo_tensor(i, v, size).coalesce()
    d = cpu.to("devx")
    assert_same_sparse(d, cpu)
    assert torch.equal(d.cpu().to_dense(), cpu.to_dense())


@pytest.mark.parametrize("device", DEVICES)
def test_dense_to_sparse_and_back(device):
    torch.manual_seed(0)
    x = torch.randn(5, 6) * (torch.rand(5, 6) > 0.6)
    d = x.to(device)
    assert_same_sparse(d.to_sparse(), x.to_sparse())
    assert_same_sparse(d.to_sparse(1), x.to_sparse(1))
    assert torch.equal(d.to_sparse().to_dense().cpu(), x)


def test_sparse_arithmetic_matches_the_cpu():
    torch.manual_seed(1)
    a = torch.randn(6, 5) * (torch.rand(6, 5) > 0.5)
    b = torch.randn(6, 5) * (torch.rand(6, 5) > 0.5)
    dense = torch.randn(5, 3)
    sa, sb = a.to_sparse(), b.to_sparse()
    da, db = sa.to("devx"), sb.to("devx")
    assert_same_sparse(da + db, sa + sb)
    assert_same_sparse(da * 2.5, sa * 2.5)
    assert torch.equal(torch.sparse.mm(da, dense.to("devx")).cpu(), torch.sparse.mm(sa, dense))
    assert torch.equal(torch.mm(da, dense.to("devx")).cpu(), torch.mm(sa, dense))
    assert torch.equal(torch.sparse.sum(da).cpu(), torch.sparse.sum(sa))
    assert torch.equal((a.to("devx") + db).cpu(), a + sb)
    # In place on a dense tensor with a sparse operand (what optimizers do with sparse gradients).
    x_cpu, x_devx = a.clone(), a.to("devx")
    x_cpu.add_(sb, alpha=-0.1)
    x_devx.add_(db, alpha=-0.1)
    assert torch.equal(x_devx.cpu(), x_cpu)
    # In place on a sparse tensor: its members are replaced.
    acc_cpu, acc_devx = sa.clone(), da.clone()
    acc_cpu.add_(sb)
    acc_devx.add_(db)
    assert_same_sparse(acc_devx, acc_cpu)
    z = da.clone().zero_()
    assert z._nnz() == 0 and z.device.type == "devx"


def test_sparse_and_devices_mixed_is_an_error():
    i, v, size = coo_example()
    # PyTorch's own check, as on CUDA.
    with pytest.raises(RuntimeError, match=r"backend of indices \(CPU\) must match backend of values"):
        torch.sparse_coo_tensor(i, v.to("devx"), size)
    s = torch.sparse_coo_tensor(i, v, size).to("devx")
    with pytest.raises(RuntimeError, match="device"):
        s + torch.sparse_coo_tensor(i, v, size)


@pytest.mark.parametrize("device", DEVICES)
def test_sparse_embedding_forward_backward(device):
    torch.manual_seed(0)
    cpu = nn.Embedding(10, 4, sparse=True)
    dev = copy.deepcopy(cpu).to(device)
    idx = torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]])
    out_cpu, out_dev = cpu(idx), dev(idx.to(device))
    assert torch.equal(out_dev.cpu(), out_cpu)
    grad = torch.randn_like(out_cpu)
    out_cpu.backward(grad)
    out_dev.backward(grad.to(device))
    g = dev.weight.grad
    assert g.is_sparse and g.device.type == "devx"
    assert torch.equal(g.cpu().to_dense(), cpu.weight.grad.to_dense())
    # A second backward adds sparse gradients.
    cpu(idx).sum().backward()
    dev(idx.to(device)).sum().backward()
    assert torch.equal(dev.weight.grad.cpu().to_dense(), cpu.weight.grad.to_dense())


@pytest.mark.parametrize("optimizer", ["SparseAdam", "SGD"])
def test_sparse_embedding_bag_trains_as_on_the_cpu(optimizer):
    torch.manual_seed(0)
    cpu = nn.EmbeddingBag(20, 6, mode="sum", sparse=True)
    dev = copy.deepcopy(cpu).cuda()
    make = {"SparseAdam": lambda p: torch.optim.SparseAdam(p, lr=0.01),
            "SGD": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)}[optimizer]
    opt_cpu, opt_dev = make(list(cpu.parameters())), make(list(dev.parameters()))
    for step in range(3):
        idx = torch.randint(0, 20, (12,))
        offsets = torch.tensor([0, 3, 7])
        target = torch.randn(3, 6)
        for model, opt, dv in ((cpu, opt_cpu, "cpu"), (dev, opt_dev, "cuda")):
            opt.zero_grad()
            loss = ((model(idx.to(dv), offsets.to(dv)) - target.to(dv)) ** 2).sum()
            loss.backward()
            opt.step()
        assert torch.equal(dev.weight.detach().cpu(), cpu.weight.detach()), f"step {step}"


def test_sparse_csr_creation_and_to_dense():
    torch.manual_seed(2)
    x = torch.randn(4, 5) * (torch.rand(4, 5) > 0.5)
    csr_cpu = x.to_sparse_csr()
    csr = x.to("devx").to_sparse_csr()
    assert csr.layout == torch.sparse_csr and csr.device.type == "devx"
    assert torch.equal(csr.crow_indices().cpu(), csr_cpu.crow_indices())
    assert torch.equal(csr.col_indices().cpu(), csr_cpu.col_indices())
    assert torch.equal(csr.values().cpu(), csr_cpu.values())
    assert torch.equal(csr.to_dense().cpu(), x)
    made = torch.sparse_csr_tensor(csr_cpu.crow_indices(), csr_cpu.col_indices(), csr_cpu.values(), x.shape,
                                   device="devx")
    assert made.device.type == "devx"
    assert torch.equal(made.to_dense().cpu(), x)
    assert torch.equal((made @ torch.ones(5, 2, device="devx")).cpu(), csr_cpu @ torch.ones(5, 2))


@pytest.mark.parametrize("device", DEVICES)
def test_nested_tensor_ops_match_the_cpu(device):
    torch.manual_seed(0)
    parts = [torch.randn(2, 4), torch.randn(3, 4), torch.randn(1, 4)]
    cpu = torch.nested.nested_tensor(parts)
    nt = torch.nested.nested_tensor(parts, device=device)
    assert nt.is_nested and nt.device.type == "devx"
    for a, b in zip(nt.unbind(), parts):
        assert a.device.type == "devx" and torch.equal(a.cpu(), b)
    pairs = [
        (lambda t: t + t, "add"),
        (lambda t: t.relu(), "relu"),
        (lambda t: t * 2.0, "mul"),
        (lambda t: torch.nn.functional.softmax(t, -1), "softmax"),
        (lambda t: torch.nested.to_padded_tensor(t, 0.0), "to_padded_tensor"),
    ]
    for fn, name in pairs:
        r_cpu, r_dev = fn(cpu), fn(nt)
        assert r_dev.device.type == "devx", name
        if r_cpu.is_nested:
            assert r_dev.is_nested, name
            r_dev, r_cpu = torch.nested.to_padded_tensor(r_dev, 0.0), torch.nested.to_padded_tensor(r_cpu, 0.0)
        assert torch.equal(r_dev.cpu(), r_cpu), name
    back = nt.cpu()
    assert back.is_nested and back.device.type == "cpu"
    assert torch.equal(torch.nested.to_padded_tensor(back, 0.0), torch.nested.to_padded_tensor(cpu, 0.0))


def test_transformer_encoder_fast_path_with_padding_mask():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, batch_first=True)
    cpu = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=True).eval()
    dev = copy.deepcopy(cpu).cuda()
    x = torch.randn(3, 7, 16)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[0, 5:] = True
    pad[2, 3:] = True
    diagnostics.reset_fallback_stats()
    with torch.no_grad():
        out_cpu = cpu(x, src_key_padding_mask=pad)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out_dev = dev(x.cuda(), src_key_padding_mask=pad.cuda())
    names = {e.name for e in prof.events()}
    # The fast path: the batch becomes a nested tensor and each layer runs the fused kernel on it.
    assert "aten::_nested_tensor_from_mask" in names and "aten::_transformer_encoder_layer_fwd" in names
    assert not any("nested" in op for op in diagnostics.fallback_stats())
    assert out_dev.device.type == "devx" and not out_dev.is_nested
    assert torch.equal(out_dev.cpu(), out_cpu)


@pytest.mark.parametrize("device", DEVICES)
def test_quantized_tensors_match_the_cpu(device):
    torch.manual_seed(3)
    x = torch.randn(3, 5)
    for dtype in (torch.qint8, torch.quint8, torch.qint32):
        q_cpu = torch.quantize_per_tensor(x, 0.05, 7, dtype)
        q = torch.quantize_per_tensor(x.to(device), 0.05, 7, dtype)
        assert q.is_quantized and q.device.type == "devx" and q.dtype == dtype
        assert q.q_scale() == 0.05 and q.q_zero_point() == 7 and q.qscheme() == torch.per_tensor_affine
        assert q.int_repr().device.type == "devx"
        assert torch.equal(q.int_repr().cpu(), q_cpu.int_repr())
        assert torch.equal(q.dequantize().cpu(), q_cpu.dequantize())
        assert torch.equal(torch.relu(q).int_repr().cpu(), torch.relu(q_cpu).int_repr())
        back = q.cpu()
        assert back.is_quantized and back.device.type == "cpu" and torch.equal(back.int_repr(), q_cpu.int_repr())
        moved = q_cpu.to(device)
        assert moved.device.type == "devx" and torch.equal(moved.int_repr().cpu(), q_cpu.int_repr())
    scales, zero_points = torch.tensor([0.1, 0.02, 0.3]), torch.tensor([0, 3, -2])
    qc_cpu = torch.quantize_per_channel(x, scales, zero_points, 0, torch.qint8)
    qc = torch.quantize_per_channel(x.to(device), scales.to(device), zero_points.to(device), 0, torch.qint8)
    assert qc.qscheme() == torch.per_channel_affine
    assert torch.equal(qc.int_repr().cpu(), qc_cpu.int_repr())
    assert torch.equal(qc.dequantize().cpu(), qc_cpu.dequantize())


def test_sparse_copy_between_devices():
    i, v, size = coo_example()
    cpu = torch.sparse_coo_tensor(i, v, size).coalesce()
    dst = torch.zeros(size, device="devx").to_sparse()
    dst.copy_(cpu)
    assert_same_sparse(dst, cpu)
    host = torch.zeros(size).to_sparse()
    host.copy_(dst)
    assert host.device.type == "cpu" and torch.equal(host.to_dense(), cpu.to_dense())


SPARSE_OPINFO_LAYOUTS = {
    "coo": ("supports_sparse", torch.sparse_coo),
    "csr": ("supports_sparse_csr", torch.sparse_csr),
    "csc": ("supports_sparse_csc", torch.sparse_csc),
    "bsr": ("supports_sparse_bsr", torch.sparse_bsr),
    "bsc": ("supports_sparse_bsc", torch.sparse_bsc),
}


def _to(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(a, device) for a in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


def _outcome(fn):
    """The result as dense CPU tensors, or the exception type (a CPU result some samples make
    cannot be densified: that is an outcome too)."""
    try:
        r = fn()
        rs = r if isinstance(r, (list, tuple)) else [r]
        return [t.cpu().to_dense() if isinstance(t, torch.Tensor) and t.layout != torch.strided
                else (t.cpu() if isinstance(t, torch.Tensor) else t) for t in rs]
    except Exception as e:  # noqa: BLE001 - any exception the CPU raises, devx must raise too
        return type(e)


def _compare_samples(op, samples, outcome, mismatches) -> int:
    """Runs each sample on the CPU and on devx: the same exception type on both, or bit-equal
    results. Appends what differs to `mismatches`; returns how many results were compared."""
    compared = 0
    for s in samples:
        expected = outcome(lambda: op(s.input, *s.args, **s.kwargs))
        got = outcome(lambda: op(_to(s.input, "devx"), *_to(s.args, "devx"), **_to(s.kwargs, "devx")))
        if isinstance(expected, type) or isinstance(got, type):
            if expected is not got:
                mismatches.append(f"{op.name}: cpu {expected!r}, devx {got!r}")
            continue
        try:
            torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
            compared += 1
        except AssertionError as e:
            mismatches.append(f"{op.name}: {str(e).splitlines()[0]}")
    return compared


@pytest.mark.parametrize("layout", SPARSE_OPINFO_LAYOUTS)
def test_sparse_opinfo_samples_match_the_cpu(layout):
    from torch.testing._internal.common_methods_invocations import op_db

    attr, torch_layout = SPARSE_OPINFO_LAYOUTS[layout]
    compared, mismatches = 0, []
    for op in op_db:
        if not getattr(op, attr, False):
            continue
        torch.manual_seed(0)
        try:
            samples = list(op.sample_inputs_sparse(torch_layout, "cpu", torch.float32))
        except (NotImplementedError, unittest.SkipTest):  # no sample function, or no samples, for this layout
            continue
        compared += _compare_samples(op, samples, _outcome, mismatches)
    assert not mismatches, "\n".join(mismatches)
    assert compared >= 100


def test_quantized_operator_library_matches_the_cpu():
    import torch.ao.nn.quantized.functional as qF

    torch.manual_seed(4)
    x = torch.quantize_per_tensor(torch.randn(1, 2, 6, 6), 0.05, 10, torch.quint8)
    w = torch.quantize_per_tensor(torch.randn(3, 2, 3, 3), 0.02, 0, torch.qint8)
    b = torch.randn(3)
    xd, wd, bd = x.to("devx"), w.to("devx"), b.to("devx")
    conv_cpu = qF.conv2d(x, w, b, padding=1, scale=0.1, zero_point=5)
    conv = qF.conv2d(xd, wd, bd, padding=1, scale=0.1, zero_point=5)
    assert conv.device.type == "devx" and torch.equal(conv.int_repr().cpu(), conv_cpu.int_repr())
    add = torch.ops.quantized.add(xd, xd, 0.07, 3)
    assert torch.equal(add.int_repr().cpu(), torch.ops.quantized.add(x, x, 0.07, 3).int_repr())
    lin_w = torch.quantize_per_tensor(torch.randn(4, 6), 0.03, 0, torch.qint8)
    lin_x = torch.quantize_per_tensor(torch.randn(5, 6), 0.04, 2, torch.quint8)
    lin_cpu = qF.linear(lin_x, lin_w, scale=0.2, zero_point=1)
    lin = qF.linear(lin_x.to("devx"), lin_w.to("devx"), scale=0.2, zero_point=1)
    assert lin.device.type == "devx" and torch.equal(lin.int_repr().cpu(), lin_cpu.int_repr())


def _nested_outcome(fn):
    try:
        r = fn()
        rs = r if isinstance(r, (list, tuple)) else [r]
        out = []
        for t in rs:
            if isinstance(t, torch.Tensor):
                t = t.cpu()
                t = list(t.unbind()) if t.is_nested else t
            out.append(t)
        return out
    except Exception as e:  # noqa: BLE001 - any exception the CPU raises, devx must raise too
        return type(e)


def test_nested_opinfo_samples_match_the_cpu():
    from torch.testing._internal.opinfo.definitions.nested import njt_op_db

    compared, mismatches = 0, []
    for op in njt_op_db:
        torch.manual_seed(0)
        try:
            samples = list(op.sample_inputs("cpu", torch.float32))
        except (NotImplementedError, unittest.SkipTest, RuntimeError):  # no NJT samples for this op
            continue
        # The first samples of each op cover its argument forms; all of them take minutes.
        compared += _compare_samples(op, samples[:2], _nested_outcome, mismatches)
    assert not mismatches, "\n".join(mismatches)
    assert compared >= 300


def test_diagnostics_see_sparse_nested_and_quantized_ops(devx, capfd):
    """Autocompare replays these ops with the CPU kernel of their kind and compares them as the
    dense tensors they stand for; the op dump describes them (they have no strides or data pointer)."""
    x = torch.randn(4, 5) * (torch.rand(4, 5) > 0.5)
    diagnostics.reset_autocompare_stats()
    diagnostics.set_autocompare(True, raise_on_mismatch=True)
    diagnostics.set_dump_op_args(2)
    try:
        s = x.to("devx").to_sparse()
        (s + s).to_dense()
        torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(1, 3)], device="devx").relu()
        torch.quantize_per_tensor(x.to("devx"), 0.1, 0, torch.qint8).int_repr()
    finally:
        for name in ("DIPU_AUTOCOMPARE", "DIPU_AUTOCOMPARE_RAISE", "DIPU_DUMP_OP_ARGS"):
            diagnostics.set_setting(name, None)  # back to the environment's value, as before the test
    stats = diagnostics.autocompare_stats()
    diagnostics.reset_autocompare_stats()  # no summary table at the test process's exit
    for op in ("_to_sparse", "add.Tensor", "_to_dense", "relu", "quantize_per_tensor", "int_repr"):
        assert stats.get(op, (0, 0))[0] >= 1 and stats[op][1] == 0, (op, stats.get(op))
    err = capfd.readouterr().err
    assert "Tensor layout Sparse sizes [4, 5]" in err and "Tensor nested, dim 3" in err
