"""Seeded random numbers on devx equal the CPU's, so whole runs can be compared with the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_devx  # noqa: F401


def draws(device: str) -> list[torch.Tensor]:
    torch.manual_seed(123)
    out = [
        torch.rand(5, device=device), torch.randn(5, device=device), torch.randint(0, 10, (5,), device=device),
        torch.empty(5, device=device).normal_(), torch.empty(5, device=device).uniform_(-2, 2),
        torch.empty(5, device=device).bernoulli_(0.3), F.dropout(torch.ones(16, device=device), 0.5),
        torch.randperm(10, device=device), torch.multinomial(torch.ones(6, device=device), 3),
        torch.empty(5, device=device).exponential_(), torch.normal(torch.zeros(3, device=device), 1.0),
    ]
    return [t.cpu() for t in out]


def test_random_ops_draw_the_cpu_numbers():
    for name, (c, d) in enumerate(zip(draws("cpu"), draws("devx"))):
        assert torch.equal(c, d), name


def test_dropout_forward_and_backward_match_cpu():
    x = torch.randn(64)
    xc, xd = x.clone().requires_grad_(), x.devx().requires_grad_()
    torch.manual_seed(1)
    F.dropout(xc, 0.4).sum().backward()
    torch.manual_seed(1)
    yd = F.dropout(xd, 0.4)
    yd.sum().backward()
    torch.manual_seed(1)
    assert torch.equal(F.dropout(x, 0.4), yd.detach().cpu())
    assert torch.equal(xc.grad, xd.grad.cpu())


@pytest.mark.devices(2)
def test_generators_and_rng_state():
    g = torch.Generator(device="devx")
    assert g.device == torch.device("devx", 0)
    g.manual_seed(5)
    cpu_g = torch.Generator().manual_seed(5)
    assert torch.equal(torch.rand(4, device="devx", generator=g).cpu(), torch.rand(4, generator=cpu_g))
    state = torch.devx.get_rng_state()
    first = torch.rand(3, device="devx").cpu()
    torch.devx.set_rng_state(state)
    assert torch.equal(torch.rand(3, device="devx").cpu(), first)
    torch.devx.manual_seed(7)
    assert torch.devx.initial_seed() == 7
    torch.devx.manual_seed_all(9)
    a = torch.rand(2, device="devx:0").cpu()
    b = torch.rand(2, device="devx:1").cpu()
    assert torch.equal(a, b)  # every device's default generator got the same seed
