"""Mixed precision on devx: GradScaler's kernels run natively, its overflow and growth steps,
torch.devx.amp, CUDA's autocast policy for promote ops, and CUDA scripts' amp API under mocking."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

from conftest import assert_close_cpu

AMP_OPS = ("_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_")


def test_grad_scaler_kernels_run_natively_and_match_cpu(fallback):
    coverage = fallback.coverage()
    for op in AMP_OPS:
        assert coverage.get(op) not in (None, "fallback"), (op, coverage.get(op))
    results = {}
    for dev in ("cpu", "devx"):
        grads = [torch.full((3,), 8.0, device=dev), torch.tensor([[-4.0, float("inf")]], device=dev)]
        found_inf = torch.zeros(1, device=dev)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, torch.full((1,), 0.25, device=dev))
        scale, growth_tracker = torch.full((1,), 64.0, device=dev), torch.zeros(1, dtype=torch.int32, device=dev)
        torch._amp_update_scale_(scale, growth_tracker, found_inf, 2.0, 0.5, 3)
        results[dev] = (grads, found_inf, scale, growth_tracker)
    assert_close_cpu(results["devx"], results["cpu"])
    assert results["devx"][1].item() == 1.0 and results["devx"][2].item() == 32.0
    assert not any(op in fallback.fallback_stats() for op in AMP_OPS)


def fp16_step(model, scaler, opt, x):
    opt.zero_grad()
    with torch.autocast("devx", dtype=torch.float16):
        loss = model(x).float().sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()


def test_grad_scaler_overflow_skips_the_step_and_halves_the_scale(fallback):
    torch.manual_seed(0)
    model = nn.Linear(8, 4).to("devx")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # d(loss)/d(out) is the scale itself: 2**24 does not fit in float16, the backward overflows.
    scaler = torch.amp.GradScaler("devx", init_scale=2.0**24, growth_interval=2)
    before = [p.detach().clone() for p in model.parameters()]
    fp16_step(model, scaler, opt, torch.randn(5, 8, device="devx"))
    assert scaler.get_scale() == 2.0**23
    for p, q in zip(model.parameters(), before):
        assert torch.equal(p.detach().cpu(), q.cpu())
    assert not any(op in fallback.fallback_stats() for op in AMP_OPS)


def test_grad_scaler_grows_the_scale_after_growth_interval_clean_steps(devx):
    torch.manual_seed(0)
    model = nn.Linear(8, 4).to("devx")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("devx", init_scale=16.0, growth_interval=3)
    x = torch.randn(5, 8, device="devx")
    scales = []
    for _ in range(4):
        before = model.weight.detach().clone()
        fp16_step(model, scaler, opt, x)
        assert not torch.equal(model.weight.detach().cpu(), before.cpu())  # every step was taken
        scales.append(scaler.get_scale())
    assert scales == [16.0, 16.0, 32.0, 32.0]


def test_autocast_is_available_for_devx_and_torch_devx_amp_helpers(devx):
    import torch.devx.amp as devx_amp

    assert torch.amp.is_autocast_available("devx")
    assert devx_amp is torch.devx.amp
    assert devx_amp.is_autocast_available()
    assert devx_amp.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    a = torch.randn(4, 4, device="devx")
    with devx_amp.autocast(dtype=torch.bfloat16) as ctx:
        assert isinstance(ctx, torch.autocast) and torch.is_autocast_enabled("devx")
        assert torch.get_autocast_dtype("devx") == torch.bfloat16
        assert (a @ a).dtype == torch.bfloat16
    with devx_amp.autocast():
        assert (a @ a).dtype == torch.float16  # float16 by default, as torch.cuda.amp.autocast
    assert not torch.is_autocast_enabled("devx")
    assert issubclass(devx_amp.autocast, torch.autocast)
    scaler = devx_amp.GradScaler(init_scale=8.0)
    assert isinstance(scaler, torch.amp.GradScaler) and scaler.get_scale() == 8.0
    assert scaler.scale(torch.ones(1, device="devx")).item() == 8.0


class MatmulInFloat32(torch.autograd.Function):
    """A custom function that insists on float32 under autocast, written for CUDA."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        ctx.forward_saw = (torch.is_autocast_enabled("devx"), a.dtype, b.dtype)
        return a @ b

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.T, a.T @ grad


class MatmulUnderCallersAutocast(torch.autograd.Function):
    """custom_bwd runs the backward under the autocast state the forward ran in."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        ctx.backward_saw = (torch.is_autocast_enabled("devx"), (grad @ b.T).dtype)
        return grad @ b.T, a.T @ grad


def test_torch_devx_amp_custom_fwd_casts_devx_inputs(devx):
    class Float32(torch.autograd.Function):
        @staticmethod
        @torch.devx.amp.custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, a):
            return a * 1

        @staticmethod
        @torch.devx.amp.custom_bwd
        def backward(ctx, grad):
            return grad

    a = torch.randn(3, 3, device="devx", requires_grad=True)
    with torch.autocast("devx", dtype=torch.float16):
        out = Float32.apply((a @ a))
    assert out.dtype == torch.float32
    out.sum().backward()
    assert a.grad.dtype == torch.float32


def test_cuda_autocast_state_queries_under_mocking(devx):
    """Inside torch.autocast("cuda"), CUDA's queries answer for devx: torch.is_autocast_enabled()
    and ("cuda") are True and the dtype is the one given; set_autocast_enabled("cuda") sets devx's."""
    a = torch.randn(4, 4).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled() and torch.is_autocast_enabled("cuda")
        assert torch.is_autocast_enabled(device_type="cuda")
        assert torch.get_autocast_dtype("cuda") == torch.bfloat16
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # CUDA-only spelling, deprecated by torch
            assert torch.get_autocast_gpu_dtype() == torch.bfloat16
        assert (a @ a).dtype == torch.bfloat16
    assert not torch.is_autocast_enabled() and not torch.is_autocast_enabled("cuda")
    torch.set_autocast_enabled("cuda", True)
    try:
        assert torch.is_autocast_enabled("devx")
    finally:
        torch.set_autocast_enabled("cuda", False)
    assert not torch.is_autocast_enabled("devx")


def test_custom_fwd_and_custom_bwd_for_cuda_under_mocking(devx):
    """custom_fwd(device_type="cuda", cast_inputs=torch.float32) runs the forward on float32 inputs
    with autocast off; custom_bwd(device_type="cuda") runs the backward under the forward's autocast."""
    a = torch.randn(4, 4).cuda().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        low = a @ a
        out = MatmulInFloat32.apply(low, a)
    assert out.grad_fn.forward_saw == (False, torch.float32, torch.float32)
    assert out.dtype == torch.float32
    out.sum().backward()
    assert a.grad.dtype == torch.float32
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = MatmulUnderCallersAutocast.apply(a, a)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert out.grad_fn.backward_saw == (True, torch.bfloat16)


def test_cuda_amp_grad_scaler_and_autocast_under_mocking(devx):
    torch.manual_seed(0)
    model = nn.Linear(8, 4).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.cuda.amp's spellings are deprecated
        scaler = torch.cuda.amp.GradScaler(init_scale=2.0**24)
        x = torch.randn(5, 8).cuda()
        before = model.weight.detach().clone()
        opt.zero_grad()
        with torch.cuda.amp.autocast():
            out = model(x)
            assert out.dtype == torch.float16 and out.is_cuda
            loss = out.float().sum()
    assert scaler.is_enabled()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 2.0**23  # overflow: step skipped, scale halved
    assert torch.equal(model.weight.detach().cpu(), before.cpu())


def test_promote_ops_take_the_widest_type_under_autocast(devx):
    """CUDA's policy: stack and addcmul (promote list) run in the widest input type."""
    a = torch.randn(4, 4, device="devx")
    with torch.autocast("devx", dtype=torch.float16):
        low = a @ a
        assert low.dtype == torch.float16
        assert torch.stack([low, a]).dtype == torch.float32
        assert torch.addcmul(a, low, low).dtype == torch.float32
        assert torch.stack([low, low]).dtype == torch.float16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = torch.addcmul(a.cpu(), a.cpu().bfloat16(), a.cpu().bfloat16())
    with torch.autocast("devx", dtype=torch.bfloat16):
        got = torch.addcmul(a, a.bfloat16(), a.bfloat16())
    assert got.dtype == want.dtype == torch.float32
    assert_close_cpu(got, want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_inside_a_compiled_function(devx, dtype):
    """torch.compile (aot_eager) traces torch.autocast("devx") and torch.devx.amp.autocast in one graph."""
    from torch._dynamo.testing import CompileCounterWithBackend

    def fn(x):
        with torch.devx.amp.autocast(dtype=dtype):
            y = x @ x
        with torch.autocast("devx", dtype=dtype):
            return y.float() @ x

    counter = CompileCounterWithBackend("aot_eager")
    torch._dynamo.reset()
    x = torch.randn(4, 4, device="devx")
    out = torch.compile(fn, backend=counter)(x)
    assert out.dtype == dtype and counter.frame_count == 1
    assert_close_cpu(out, fn(x))
