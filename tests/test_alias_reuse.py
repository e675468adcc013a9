"""Aliases reused between ops (csrc/aten/compute_scope.cpp): an alias TensorImpl parked in its
storage's cache slot is taken again by the next op on that storage, with the geometry, dtype and
conjugation of the tensor the op is given then. Every result is compared with the CPU's."""

from __future__ import annotations

import pytest
import torch
import torch_devx  # noqa: F401  (registers the devx device)
from torch.testing import assert_close

pytestmark = pytest.mark.usefixtures("devx")


def test_one_storage_seen_through_changing_views():
    base = torch.randn(6, 8)
    x = base.to("devx")
    views = [
        lambda t: t,
        lambda t: t.t(),
        lambda t: t[1:, ::2],
        lambda t: t.reshape(8, 6),
        lambda t: t.view(torch.int32),
        lambda t: t[2],
        lambda t: t,
    ]
    # Each op follows one on the same storage with other sizes, strides, offset or dtype.
    for _ in range(3):
        for view in views:
            assert_close((view(x) * 3).cpu(), view(base) * 3)
            assert_close(view(x).sum().cpu(), view(base).sum())


def test_conjugate_and_plain_views_alternate():
    base = torch.randn(4, 4, dtype=torch.complex64)
    x = base.to("devx")
    for _ in range(3):
        assert_close((x.conj() + 1).cpu(), base.conj() + 1)
        assert_close((x + 1).cpu(), base + 1)
        assert_close(torch.mul(x.conj(), x).cpu(), torch.mul(base.conj(), base))


def test_in_place_and_resized_out_after_reuse():
    a, b = torch.randn(5, 5), torch.randn(5, 5)
    x, y = a.to("devx"), b.to("devx")
    for _ in range(3):
        x.add_(y)
        a.add_(b)
        assert_close(x.cpu(), a)
    # The out= tensor's storage has a parked alias from earlier ops; the kernel grows it.
    out, out_cpu = torch.zeros(0).to("devx"), torch.zeros(0)
    for _ in range(2):
        (out + 1, out_cpu + 1)
        torch.add(x, y, out=out)
        torch.add(a, b, out=out_cpu)
        assert out.shape == (5, 5)
        assert_close(out.cpu(), out_cpu)
        out.resize_(0)
        out_cpu.resize_(0)


def test_freed_storages_reused_addresses():
    # New tensors land at addresses (of StorageImpls and bytes) freed tensors had: a parked alias
    # of a dead storage must never show the new one's op the old bytes or shape.
    for i in range(50):
        n = 3 + i % 5
        cpu = torch.arange(n * n, dtype=torch.float32).reshape(n, n) + i
        t = cpu.to("devx")
        assert_close((t * 2).cpu(), cpu * 2)
        assert_close(t[:, 1:].sum().cpu(), cpu[:, 1:].sum())
        del t


def test_argument_passed_twice_shares_one_alias():
    a = torch.randn(5, 1)
    x = a.to("devx")
    x * 2  # parks an alias of x's storage
    # One alias for both arguments: the kernel knows the output is also an input and refuses to
    # resize it, as on the CPU.
    with pytest.raises(RuntimeError) as cpu_error:
        a.clone().ldexp_(torch.ones(5, 5, dtype=torch.int64))
    with pytest.raises(RuntimeError) as devx_error:
        x.ldexp_(torch.ones(5, 5, dtype=torch.int64, device="devx"))
    assert str(devx_error.value).split("\n")[0] == str(cpu_error.value).split("\n")[0]
    assert_close(x.cpu(), a)


def test_aliases_made_in_inference_mode_serve_autograd_after_it():
    # Aliases made under inference mode are reused after it, where the whole-sequence LSTM
    # detaches its aliases and gives them the arguments' version counters.
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 3)
    x = torch.randn(5, 2, 4)
    dx = x.to("devx")
    dlstm = torch.nn.LSTM(4, 3).to("devx")
    dlstm.load_state_dict(lstm.state_dict())
    with torch.inference_mode():
        for p in dlstm.parameters():
            p * 2
        dx * 2
    out, _ = lstm(x.requires_grad_())
    dout, _ = dlstm(dx.requires_grad_())
    out.sum().backward()
    dout.sum().backward()
    assert_close(dout.cpu(), out)
    assert_close(dx.grad.cpu(), x.grad)
