"""torch.compile on devx: graphs captured by dynamo with fake tensors on the devx device, autograd
traced ahead of time (aot_eager), dynamic shapes, graph breaks, checkpointed dropout, and on cpu_sim
the default backend running devx graphs with aot_eager (inductor asked for: a clear error)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

from conftest import assert_child_ok, assert_close_cpu, run_many


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def small_cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 8 * 8, 10))


def test_aot_eager_forward_and_backward_match_eager(devx):
    torch.manual_seed(0)
    model = small_cnn().to("devx")
    reference = small_cnn().to("devx")
    reference.load_state_dict(model.state_dict())
    x = torch.randn(4, 3, 8, 8, device="devx")
    compiled = torch.compile(model, backend="aot_eager")
    out = compiled(x)
    out.sum().backward()
    ref = reference(x)
    ref.sum().backward()
    assert out.device.type == "devx"
    assert_close_cpu(out, ref)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert p.grad.device.type == "devx"
        assert_close_cpu(p.grad, q.grad)


@pytest.mark.devices(2)
def test_fake_tensors_in_the_captured_graph_carry_the_devx_device(devx):
    seen: list[torch.device] = []

    def recording_backend(gm: torch.fx.GraphModule, example_inputs):
        for node in gm.graph.nodes:
            value = node.meta.get("example_value")
            if isinstance(value, torch.Tensor):
                seen.append(value.device)
        return gm.forward

    fn = torch.compile(lambda a, b: (a @ b).relu() + 1, backend=recording_backend)
    a = torch.randn(3, 3, device="devx:1")
    out = fn(a, a)
    assert seen and all(d == torch.device("devx:1") for d in seen)
    assert_close_cpu(out, (a.cpu() @ a.cpu()).relu() + 1)


def test_dynamic_shapes_compile_once_and_stay_correct(devx):
    frames = []

    def counting_backend(gm, example_inputs):
        frames.append(gm)
        from torch._dynamo.backends.common import aot_autograd
        from functorch.compile import make_boxed_func

        return aot_autograd(fw_compiler=lambda g, _: make_boxed_func(g.forward))(gm, example_inputs)

    lin = nn.Linear(6, 3).to("devx")
    compiled = torch.compile(lin, backend=counting_backend, dynamic=True)
    for n in (2, 5, 9):
        x = torch.randn(n, 6, device="devx", requires_grad=True)
        y = compiled(x)
        y.sum().backward()
        assert y.shape == (n, 3)
        assert_close_cpu(y, lin(x))
    assert len(frames) == 1


def test_mark_dynamic_compiles_once_for_every_batch_size(devx):
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("aot_eager")
    lin = nn.Linear(6, 3).to("devx")
    compiled = torch.compile(lin, backend=counter)
    for n in (3, 7, 11):
        x = torch.randn(n, 6, device="devx", requires_grad=True)
        torch._dynamo.mark_dynamic(x, 0)
        y = compiled(x)
        y.sum().backward()
        assert_close_cpu(y, lin(x))
        assert_close_cpu(x.grad, lin.weight.sum(0).expand(n, 6))
    assert counter.frame_count == 1


def test_graph_break_splits_the_function_and_keeps_results_and_gradients(devx):
    from torch._dynamo.testing import CompileCounterWithBackend

    def fn(x):
        y = torch.relu(x @ x.T)
        if y.sum().item() > 0:  # data-dependent branch: a graph break
            y = y * 2
        return y.softmax(-1)

    counter = CompileCounterWithBackend("aot_eager")
    x = torch.randn(4, 4, device="devx", requires_grad=True)
    out = torch.compile(fn, backend=counter)(x)
    out.pow(2).sum().backward()
    grad = x.grad.clone()
    x.grad = None
    ref = fn(x)
    ref.pow(2).sum().backward()
    assert counter.frame_count == 2
    assert_close_cpu(out, ref)
    assert_close_cpu(grad, x.grad)


def test_reduce_overhead_mode_with_aot_eager_runs_on_devx(devx):
    lin = nn.Linear(4, 4).to("devx")
    compiled = torch.compile(lin, backend="aot_eager", mode="reduce-overhead")
    for _ in range(3):  # repeated calls reuse the compiled graph
        x = torch.randn(2, 4, device="devx")
        out = compiled(x)
        assert out.device.type == "devx"
        assert_close_cpu(out, lin(x))


def test_cuda_style_script_compiles_with_aot_eager(devx):
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 2)).cuda()
    x = torch.randn(5, 8).cuda()
    out = torch.compile(model, backend="aot_eager")(x)
    assert out.is_cuda and out.device.type == "devx"
    assert_close_cpu(out, model(x))


@pytest.fixture
def cpu_kernel_vendor(devx):
    if devx._C._compute_device_type() != 0:
        pytest.skip("the vendor computes with CUDA kernels: inductor generates Triton code for it")
    return devx


needs_default_backend_hook = pytest.mark.skipif(
    not hasattr(torch.compiler, "set_default_backend"),
    reason="this PyTorch has no torch.compiler.set_default_backend: inductor stays the default")


@needs_default_backend_hook
def test_default_backend_on_cpu_sim_runs_devx_graphs_with_aot_eager_and_warns_once(cpu_kernel_vendor, monkeypatch):
    from torch_devx import _inductor_backend

    monkeypatch.setattr(_inductor_backend, "_warned_about_aot_eager", False)
    torch.manual_seed(0)
    model = small_cnn().to("devx")
    reference = small_cnn().to("devx")
    reference.load_state_dict(model.state_dict())
    x = torch.randn(4, 3, 8, 8, device="devx")
    with pytest.warns(UserWarning, match="no code generator for devx.*backend='aot_eager'") as caught:
        out = torch.compile(model)(x)
    out.sum().backward()
    ref = reference(x)
    ref.sum().backward()
    assert_close_cpu(out, ref)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_close_cpu(p.grad, q.grad)
    assert sum("no code generator for devx" in str(w.message) for w in caught) == 1
    lin = nn.Linear(4, 4).to("devx")
    x = torch.randn(2, 4, device="devx")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*no code generator for devx")
        out = torch.compile(lin, mode="reduce-overhead")(x)  # once is enough
    assert_close_cpu(out, lin(x))


def test_inductor_asked_for_on_cpu_sim_is_a_clear_error_and_eager_still_works(cpu_kernel_vendor):
    """backend="inductor", or the default once torch.compiler.set_default_backend(None) gave inductor
    back, raises inductor's clear error for devx graphs."""
    model = nn.Linear(4, 4).to("devx")
    x = torch.randn(2, 4, device="devx")
    devx_default = torch.compiler.get_default_backend() if hasattr(torch.compiler, "get_default_backend") else None
    # No compiled graph from an earlier run may stand in for the code generation.
    with torch._inductor.config.patch(force_disable_caches=True):
        with pytest.raises(Exception, match="backend='aot_eager'"):
            torch.compile(model, backend="inductor")(x)
        if hasattr(torch.compiler, "set_default_backend"):
            torch._dynamo.reset()
            torch.compiler.set_default_backend(None)
            try:
                with pytest.raises(Exception, match="backend='aot_eager'"):
                    torch.compile(model)(x)
            finally:
                torch.compiler.set_default_backend(devx_default)
    assert_close_cpu(model(x), model.cpu()(x.cpu()))


@needs_default_backend_hook
def test_default_backend_on_cpu_sim_compiles_cpu_graphs_with_inductor(cpu_kernel_vendor):
    import torch._inductor.metrics as metrics

    def fn(t):
        return (t.sin() + 1).relu().sum(0)

    x = torch.randn(8, 4)
    metrics.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        out = torch.compile(fn, mode="max-autotune-no-cudagraphs")(x)
    assert metrics.generated_kernel_count > 0
    assert_close_cpu(out, fn(x))


@pytest.mark.devices(2)
def test_dynamo_device_interface_for_devx(devx):
    from torch._dynamo.device_interface import get_interface_for_device

    interface = get_interface_for_device("devx")
    assert interface.device_count() == torch.devx.device_count()
    with interface.device(1):
        assert interface.current_device() == 1
    assert interface.exchange_device(1) == 0
    assert interface.exchange_device(0) == 1
    assert interface.get_raw_stream(0) != 0
    assert not interface.is_triton_capable() or devx._C._compute_device_type() == 1



FIND_INTERFACE = """
from torch._dynamo.device_interface import get_interface_for_device
assert get_interface_for_device("devx").device_count() == torch.devx.device_count()
assert get_interface_for_device(torch.device("devx", 1)) is get_interface_for_device("devx")
print("INTERFACE-OK")
"""


def test_device_interface_is_registered_whichever_is_imported_first():
    """Dynamo finds the devx interface with nothing called first: registered as
    torch._dynamo.device_interface is imported, or at once when dynamo came before torch_devx;
    importing torch_devx does not import dynamo."""
    devx_first = "import sys, torch, torch_devx\nassert 'torch._dynamo' not in sys.modules\n"
    dynamo_first = "import torch, torch._dynamo, torch_devx\n"
    for proc in run_many([(devx_first + FIND_INTERFACE, {}), (dynamo_first + FIND_INTERFACE, {})]):
        assert_child_ok(proc)
        assert "INTERFACE-OK" in proc.stdout


@pytest.mark.parametrize("device", ["devx", "devx:1"])
def test_checkpointed_dropout_compiled_and_eager_draw_the_same_masks(devx, device):
    """checkpoint(use_reentrant=False) recomputes dropout in the backward from the forward's RNG
    state: eager (torch.utils.checkpoint reads torch.devx._initialized) and compiled with aot_eager
    (run_and_save_rng_state / run_with_rng_state on devx) give the gradients of the same run
    without checkpointing."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    lin = nn.Linear(8, 8).to(device)
    x = torch.randn(6, 8, device=device, requires_grad=True)

    def block(t):
        return nn.functional.dropout(lin(t).relu(), 0.5) * 2

    def plain(t):
        return block(t).sum()

    def checkpointed(t):
        return checkpoint(block, t, use_reentrant=False).sum()

    results = []
    for fn in (plain, checkpointed, torch.compile(checkpointed, backend="aot_eager")):
        x.grad = lin.weight.grad = None
        torch.manual_seed(1)
        out = fn(x)
        out.backward()
        results.append((out.detach().cpu(), x.grad.cpu(), lin.weight.grad.cpu()))
    assert results[0][1].count_nonzero() < results[0][1].numel()  # dropout did drop
    for got in results[1:]:
        for a, b in zip(got, results[0]):
            assert torch.equal(a, b)


@pytest.mark.devices(2)
def test_rng_state_operators_on_devx_fake_and_real(devx):
    """The RNG-state operators AOT autograd puts into checkpointed graphs: run_with_rng_state
    replays what run_and_save_rng_state drew, on devx and CPU alike; under fake tensors (as inductor
    runs them) run_and_save_rng_state gives a devx fake result."""
    from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    rand_like = torch.ops.aten.rand_like.default
    for like in (torch.ones(5, device="devx:1"), torch.ones(5)):
        state, first = run_and_save_rng_state(rand_like, like)
        assert torch.equal(run_with_rng_state(state, rand_like, like).cpu(), first.cpu())
        assert not torch.equal(rand_like(like).cpu(), first.cpu())  # the generator had moved on
    state, first = run_and_save_rng_state(torch.rand, 4, device="devx")
    assert first.device.type == "devx"
    assert torch.equal(run_with_rng_state(state, torch.rand, 4, device="devx").cpu(), first.cpu())
    with FakeTensorMode():
        _, out = run_and_save_rng_state(rand_like, torch.empty(3, device="devx"))
    assert isinstance(out, FakeTensor) and out.device == torch.device("devx:0")
