"""The CPU fallback: ops without a devx kernel, ops forced there by DIPU_FORCE_FALLBACK_OPS_LIST
or diagnostics.set_force_fallback, and the counters and coverage report that make it visible.
Every test starts and ends with no forced ops and zeroed counters (the `fallback` fixture)."""

from __future__ import annotations

import copy
import os
import warnings

import pytest
import torch
import torch_devx  # noqa: F401  (registers the devx device)
from torch.testing import assert_close

from conftest import assert_close_cpu

ENV = "DIPU_FORCE_FALLBACK_OPS_LIST"

A = torch.randn(3, 4)
B = torch.randn(3, 4)


@pytest.fixture
def ab(fallback):
    a, b = A.devx(), B.devx()
    fallback.reset_fallback_stats()
    return a, b


# --- coverage and ops without a devx kernel


def test_coverage_report(fallback):
    cov = fallback.coverage()
    assert cov, "empty coverage report"
    assert set(cov.values()) <= {"aten", "aten-boxed", "vendor", "fallback"}
    # a signature group from the table: functional, in-place and out= variants
    for op in ("add.Tensor", "add_.Tensor", "add.out", "mm", "convolution_overrideable", "native_batch_norm"):
        assert cov.get(op) in ("aten", "vendor"), op
    # ops the table lacks are not listed as native
    for op in ("_fft_r2c", "_linalg_det", "take"):
        assert cov.get(op, "fallback") == "fallback", op


def test_fft_falls_back_with_the_cpu_result(fallback):
    x = torch.randn(16)
    got = torch.fft.fft(x.devx())
    assert got.device == torch.device("devx", 0)
    assert got.dtype == torch.complex64
    assert_close(got.cpu(), torch.fft.fft(x))
    stats = fallback.fallback_stats()
    assert stats.get("_fft_r2c") == 1, stats
    # and complex input (another fallback op)
    z = torch.randn(8, dtype=torch.complex64)
    assert_close(torch.fft.ifft(z.devx()).cpu(), torch.fft.ifft(z))
    assert any(k.startswith("_fft_c2c") for k in fallback.fallback_stats())


def test_linalg_det_falls_back_with_the_cpu_result(fallback):
    m = torch.randn(4, 4, dtype=torch.float64)
    got = torch.linalg.det(m.devx())
    assert got.device.type == "devx"
    assert_close(got.cpu(), torch.linalg.det(m))
    stats = fallback.fallback_stats()
    assert stats and all(k.startswith("_linalg_det") for k in stats), stats


def test_window_functions_on_devx(fallback):
    """Factories with no devx kernel, some of which ATen implements with per-device kernel stubs."""
    for name, args in (("hann_window", (16,)), ("hamming_window", (16,)), ("blackman_window", (16,)),
                       ("bartlett_window", (16,)), ("kaiser_window", (16, True, 8.0))):
        fn = getattr(torch, name)
        got = fn(*args, device="devx")
        assert got.device.type == "devx", name
        assert_close(got.cpu(), fn(*args), msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("calls", [1, 3, 5])
def test_counts_increase_by_exactly_the_number_of_calls(fallback, calls):
    x = torch.randn(16).devx()
    m = torch.randn(3, 3).devx()
    torch.fft.fft(x)
    torch.linalg.det(m)
    once = fallback.fallback_stats()
    assert once, "nothing was counted"
    fallback.reset_fallback_stats()
    assert fallback.fallback_stats() == {}
    for _ in range(calls):
        torch.fft.fft(x)
        torch.linalg.det(m)
    assert fallback.fallback_stats() == {k: v * calls for k, v in once.items()}


@pytest.mark.devices(2)
def test_fallback_on_the_second_device(fallback):
    x = torch.randn(16)
    got = torch.fft.fft(x.devx(1))
    assert got.device == torch.device("devx", 1)
    assert_close(got.cpu(), torch.fft.fft(x))


def test_native_ops_are_not_counted(ab, fallback):
    a, b = ab
    (a + b) * a - b
    torch.mm(a, b.t()).sum()
    assert fallback.fallback_stats() == {}


# --- forcing ops to the fallback


def test_set_force_fallback_takes_effect_at_the_next_op(ab, fallback):
    a, b = ab
    r = a + b
    assert fallback.fallback_stats() == {}
    fallback.set_force_fallback(["add.Tensor"])
    assert fallback.force_fallback() == ["add.Tensor"]
    assert ENV not in os.environ  # this process only: children do not inherit it
    r2 = a + b
    assert fallback.fallback_stats() == {"add.Tensor": 1}
    assert r2.device == a.device
    assert_close(r2.cpu(), A + B)
    assert_close(r2.cpu(), r.cpu())
    a * b  # not forced
    assert fallback.fallback_stats() == {"add.Tensor": 1}


def test_force_through_os_environ_takes_effect_at_the_next_op(ab, fallback):
    a, b = ab
    a * b
    assert fallback.fallback_stats() == {}
    os.environ[ENV] = "mul.*"
    assert fallback.force_fallback() == ["mul.*"]
    r = a * b
    r2 = a.clone().mul_(b)
    assert fallback.fallback_stats() == {"mul.Tensor": 1, "mul_.Tensor": 1}
    assert_close(r.cpu(), A * B)
    assert_close(r2.cpu(), A * B)
    a + b
    assert "add.Tensor" not in fallback.fallback_stats()
    os.environ[ENV] = ""
    fallback.reset_fallback_stats()
    a * b
    assert fallback.fallback_stats() == {}


def test_env_list_is_trimmed_and_unquoted(fallback):
    os.environ[ENV] = " add.Tensor , 'mul.Tensor' ,, "
    assert fallback.force_fallback() == ["add.Tensor", "mul.Tensor"]


def test_base_name_forces_every_overload(ab, fallback):
    a, b = ab
    fallback.set_force_fallback(["add"])
    r1 = a + b
    r2 = torch.ops.aten.add.Scalar(a, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        o = torch.empty(0, device="devx")
        r3 = torch.add(a, b, alpha=3, out=o)
    stats = fallback.fallback_stats()
    assert stats == {"add.Tensor": 1, "add.Scalar": 1, "add.out": 1}, stats
    assert r3 is o
    assert_close_cpu((r1, r2, r3), (A + B, A + 2, A + 3 * B))
    # the base name does not match other ops that merely start with it
    torch.addmm(a, a, torch.randn(4, 4, device="devx"))
    a.addcmul(a, b)
    assert set(fallback.fallback_stats()) == {"add.Tensor", "add.Scalar", "add.out"}


def test_forced_in_place_op(ab, fallback):
    a, b = ab
    fallback.set_force_fallback(["add_.Tensor"])
    x = a.clone()
    r = x.add_(b, alpha=2)
    assert r is x
    assert_close(x.cpu(), A + 2 * B)
    # in place on non-contiguous views of a base
    base_cpu = torch.arange(24.0).reshape(4, 6)
    base = base_cpu.devx()
    base.t()[1:3].add_(torch.ones(2, 4, device="devx"))
    base[:, ::2].add_(5.0)
    base_cpu.t()[1:3].add_(torch.ones(2, 4))
    base_cpu[:, ::2].add_(5.0)
    assert_close(base.cpu(), base_cpu)
    assert fallback.fallback_stats() == {"add_.Tensor": 3}


@pytest.mark.parametrize("out_shape", [(0,), (5,), (7, 7), (3, 4)], ids=str)
def test_forced_out_op_with_an_out_of_the_wrong_size(ab, fallback, out_shape):
    a, b = ab
    fallback.set_force_fallback(["add.out"])
    c = torch.empty(out_shape, device="devx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        r = torch.add(a, b, out=c)
    assert r is c
    assert c.shape == (3, 4) and c.device == a.device
    assert_close(c.cpu(), A + B)
    assert fallback.fallback_stats() == {"add.out": 1}


def test_forced_out_op_into_a_non_contiguous_out(ab, fallback):
    a, b = ab
    fallback.set_force_fallback(["add.out"])
    base = torch.zeros(4, 3, device="devx")
    c = base.t()
    torch.add(a, b, out=c)
    assert c.stride() == (1, 3)
    assert_close(base.cpu(), (A + B).t())


def test_forced_op_returning_a_tuple(ab, fallback):
    a, _ = ab
    fallback.set_force_fallback(["max.dim"])
    res = torch.max(a, dim=0)
    want = torch.max(A, dim=0)
    assert isinstance(res, tuple) and type(res).__name__ == "max"
    assert res.values.device == a.device and res.indices.device == a.device
    assert res.indices.dtype == torch.int64
    assert_close(res.values.cpu(), want.values)
    assert torch.equal(res.indices.cpu(), want.indices)
    v, i = torch.max(a, 1, keepdim=True)
    assert v.shape == (3, 1)
    assert fallback.fallback_stats() == {"max.dim": 2}


@pytest.mark.devices(2)
def test_forced_op_on_the_second_device(fallback):
    fallback.set_force_fallback(["mul.Tensor"])
    a1, b1 = A.devx(1), B.devx(1)
    r = a1 * b1
    assert r.device == torch.device("devx", 1)
    assert_close(r.cpu(), A * B)
    assert fallback.fallback_stats() == {"mul.Tensor": 1}


def test_forced_ops_inside_autograd(fallback):
    fallback.set_force_fallback(["mul.Tensor", "sum.*"])
    x_cpu = A.clone().requires_grad_()
    x = A.clone().devx().requires_grad_()
    for t in (x, x_cpu):
        (t * t * 3).sum().backward()
    assert_close(x.grad.cpu(), x_cpu.grad)
    assert fallback.fallback_stats().get("mul.Tensor", 0) >= 2


def test_view_op_on_the_fallback_keeps_aliasing(fallback):
    # unfold has no devx kernel: it runs on the fallback, and must still return a view
    base_cpu = torch.arange(12.0)
    base = base_cpu.devx()
    u = base.unfold(0, 3, 3)
    assert fallback.fallback_stats() == {"unfold": 1}
    u_cpu = base_cpu.unfold(0, 3, 3)
    assert u.shape == u_cpu.shape and u.stride() == u_cpu.stride()
    assert u.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    u[1].fill_(-1.0)
    u_cpu[1].fill_(-1.0)
    assert_close(base.cpu(), base_cpu)
    base.mul_(2)
    assert_close(u.cpu(), u_cpu * 2)
    # view_as_real too
    z = torch.randn(3, dtype=torch.complex64)
    zd = z.devx()
    r = torch.view_as_real(zd)
    assert r.shape == (3, 2)
    r[0, 0] = 42.0
    assert zd[0].item().real == 42.0


def test_bad_regex_is_rejected(ab, fallback):
    a, b = ab
    fallback.set_force_fallback(["mul.Tensor"])
    with pytest.raises(ValueError, match=r"\("):
        fallback.set_force_fallback(["add.Tensor", "("])
    # the list in effect is unchanged
    assert fallback.force_fallback() == ["mul.Tensor"]
    with pytest.raises(ValueError):
        fallback.set_force_fallback(["a,b"])
    a * b
    assert fallback.fallback_stats() == {"mul.Tensor": 1}


def test_bad_regex_in_the_environment_fails_at_the_assignment(ab, fallback):
    a, b = ab
    with pytest.raises(ValueError, match=ENV):
        os.environ[ENV] = "add.Tensor,[z-a]"
    os.environ[ENV] = ""
    assert fallback.force_fallback() == []
    assert_close((a + b).cpu(), A + B)
    assert fallback.fallback_stats() == {}


@pytest.mark.parametrize("how", ["api", "env_empty", "env_deleted"])
def test_turning_it_off_stops_the_counting(ab, fallback, how):
    a, b = ab
    if how == "api":
        fallback.set_force_fallback(["add.Tensor", "mul.Tensor"])
    else:  # the environment can only take back what was set there
        os.environ[ENV] = "add.Tensor,mul.Tensor"
    a + b
    a * b
    assert fallback.fallback_stats() == {"add.Tensor": 1, "mul.Tensor": 1}
    if how == "api":
        fallback.set_force_fallback([])
    elif how == "env_empty":
        os.environ[ENV] = ""
    else:
        del os.environ[ENV]
    assert fallback.force_fallback() == []
    fallback.reset_fallback_stats()
    r = (a + b) * a
    assert fallback.fallback_stats() == {}
    assert_close(r.cpu(), (A + B) * A)


# --- ops that write into lists of tensors, convolution, random ops


def test_forced_in_place_list_op_writes_back(fallback):
    """_foreach_add_.List mutates a list of tensors: forced to the CPU, the results must still land
    in the caller's devx tensors (the optimizers' foreach paths depend on it)."""
    fallback.set_force_fallback(["_foreach_add_.List", "_foreach_mul_.Scalar"])
    xs_cpu = [A.clone(), B.clone()]
    xs = [t.devx() for t in xs_cpu]
    torch._foreach_add_(xs, [B.devx(), A.devx()])
    torch._foreach_mul_(xs, 3.0)
    torch._foreach_add_(xs_cpu, [B, A])
    torch._foreach_mul_(xs_cpu, 3.0)
    assert fallback.fallback_stats() == {"_foreach_add_.List": 1, "_foreach_mul_.Scalar": 1}
    for got, want in zip(xs, xs_cpu):
        assert got.device.type == "devx"
        assert_close(got.cpu(), want)


def test_list_op_on_the_fallback_writes_back(fallback):
    """_amp_foreach_non_finite_check_and_unscale_ (GradScaler's unscale) takes a list of tensors to
    update in place; forced to the fallback, it must write the unscaled values back into the devx
    gradients."""
    fallback.set_force_fallback(["_amp_foreach_non_finite_check_and_unscale_"])
    grads_cpu = [torch.full((3,), 8.0), torch.full((2, 2), -4.0)]
    found_cpu, inv_cpu = torch.zeros(1), torch.full((1,), 0.25)
    grads = [g.devx() for g in grads_cpu]
    found, inv = found_cpu.devx(), inv_cpu.devx()
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    torch._amp_foreach_non_finite_check_and_unscale_(grads_cpu, found_cpu, inv_cpu)
    assert "_amp_foreach_non_finite_check_and_unscale_" in fallback.fallback_stats()
    assert_close_cpu(grads, grads_cpu)
    assert_close_cpu(found, found_cpu)
    # and an inf is reported
    grads[0][1] = float("inf")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    assert found.item() == 1.0


def test_forced_convolution_forward_and_backward(fallback):
    """The table's convolution ops reach the fallback under their PrivateUse1 names
    (convolution_overrideable); forced there they must still compute the CPU's convolution."""
    fallback.set_force_fallback(["convolution_overrideable", "convolution_backward_overrideable"])
    x_cpu = torch.randn(2, 3, 7, 7, requires_grad=True)
    w_cpu = torch.randn(4, 3, 3, 3, requires_grad=True)
    b_cpu = torch.randn(4, requires_grad=True)
    x, w, b = (t.detach().devx().requires_grad_() for t in (x_cpu, w_cpu, b_cpu))
    y = torch.nn.functional.conv2d(x, w, b, stride=2, padding=1)
    y_cpu = torch.nn.functional.conv2d(x_cpu, w_cpu, b_cpu, stride=2, padding=1)
    assert_close(y.detach().cpu(), y_cpu.detach(), atol=1e-5, rtol=1e-5)
    y.square().sum().backward()
    y_cpu.square().sum().backward()
    for got, want in ((x, x_cpu), (w, w_cpu), (b, b_cpu)):
        assert_close(got.grad.cpu(), want.grad, atol=1e-4, rtol=1e-5)
    stats = fallback.fallback_stats()
    assert stats.get("convolution_overrideable") == 1 and stats.get("convolution_backward_overrideable") == 1


def test_training_with_every_native_op_forced_matches_cpu(fallback):
    """DIPU_FORCE_FALLBACK_OPS_LIST='.*' sends every table op to the CPU: slower, never different."""
    torch.manual_seed(0)
    model_cpu = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    model = copy.deepcopy(model_cpu).devx()
    x, y = torch.randn(5, 6), torch.tensor([0, 1, 2, 1, 0])
    os.environ[ENV] = ".*"
    for m, dev in ((model, "devx"), (model_cpu, "cpu")):
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(x.to(dev)), y.to(dev)).backward()
            opt.step()
    assert len(fallback.fallback_stats()) > 5
    for p, q in zip(model.parameters(), model_cpu.parameters()):
        assert p.device.type == "devx"
        assert_close(p.detach().cpu(), q.detach(), atol=1e-6, rtol=1e-5)


def test_random_op_on_the_fallback_uses_the_devx_generator(fallback):
    """multinomial has no devx kernel; seeding the devx device must still make it reproducible,
    and it must not draw from (and advance) the CPU's generator."""
    probs = torch.rand(10).devx()
    torch.devx.manual_seed(5)
    first = torch.multinomial(probs, 6, replacement=True)
    torch.devx.manual_seed(5)
    cpu_state = torch.get_rng_state()
    again = torch.multinomial(probs, 6, replacement=True)
    assert "multinomial" in fallback.fallback_stats()
    assert torch.equal(first.cpu(), again.cpu()), (first.cpu().tolist(), again.cpu().tolist())
    assert torch.equal(torch.get_rng_state(), cpu_state), "the CPU generator was used"
    # an explicit devx generator is accepted too
    g = torch.Generator(device="devx")
    g.manual_seed(3)
    a = torch.multinomial(probs, 6, replacement=True, generator=g)
    g.manual_seed(3)
    b = torch.multinomial(probs, 6, replacement=True, generator=g)
    assert torch.equal(a.cpu(), b.cpu())


def test_patterns_as_the_dump_and_torch_ops_print_them(fallback):
    diag = torch_devx.diagnostics
    m = torch.nn.Linear(3, 2).to("devx")
    x = torch.randn(4, 3, device="devx")
    for pattern in ("aten::addmm", "addmm.default", "aten::addmm.default"):
        diag.set_force_fallback([pattern])
        assert diag.force_fallback() == ["addmm"]
        diag.reset_fallback_stats()
        assert_close(m(x).cpu(), torch.nn.functional.linear(x.cpu(), m.weight.cpu(), m.bias.cpu()))
        assert diag.fallback_stats() == {"addmm": 1}


@pytest.mark.parametrize("pattern, says", [
    ("lineer", "Closest op names: linear"),
    ("linear", "linear is a composite op"),
    ("mull", "Closest op names: mul"),
])
def test_a_pattern_that_forces_nothing_is_warned_about(fallback, pattern, says):
    torch_devx.diagnostics._checked_force_patterns.discard(pattern)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch_devx.diagnostics.set_force_fallback([pattern])
    [warning] = [w for w in caught if "DIPU_FORCE_FALLBACK_OPS_LIST" in str(w.message)]
    assert f"the pattern {pattern!r} matches no op that devx runs" in str(warning.message)
    assert says in str(warning.message)
    assert warning.filename == __file__  # the user's line, not the library's


def test_a_pattern_that_matches_is_not_warned_about_and_is_confirmed(fallback, capfd):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch_devx.diagnostics.set_force_fallback(["add.*", "mul.Tensor"])
    a = torch.ones(3, device="devx")
    a * a
    assert "forced to the CPU: mul.Tensor (DIPU_FORCE_FALLBACK_OPS_LIST pattern 'mul.Tensor')" in capfd.readouterr().err
