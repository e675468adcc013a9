"""CUDA mocking without Python wrappers over torch's builtins (issue 19): on a torch without CUDA,
a "cuda" device reaches ATen's CUDA dispatch key, where a fallback runs the op again on devx. The
factories stay PyTorch's own functions, so whatever recognises builtins keeps working, and entry
points nobody listed land on devx too."""

from __future__ import annotations

import pytest
import torch
import torch_devx  # noqa: F401  (registers the devx device)
from torch.testing import assert_close
from torch_devx import cuda_mock

from conftest import needs_cuda_alias

pytestmark = [
    pytest.mark.usefixtures("devx"),
    pytest.mark.skipif(not cuda_mock.enabled(), reason="the suite's mock-off pass runs with DEVX_MOCK_CUDA=0"),
]

DEVX0 = torch.device("devx", 0)
DEVX1 = torch.device("devx", 1)


@needs_cuda_alias()
def test_factories_are_torch_builtins_on_a_torch_without_cuda():
    assert not cuda_mock.wraps_factories()
    assert type(torch.zeros).__name__ == "builtin_function_or_method"
    assert type(torch.Tensor.new_zeros).__name__ == "method_descriptor"


@pytest.mark.parametrize("make", [
    lambda: torch.zeros(3, device="cuda"),
    lambda: torch.tensor([1.0, 2.0], device="cuda"),
    lambda: torch.as_tensor([1, 2], device="cuda"),
    lambda: torch.asarray([1, 2], device="cuda"),
    lambda: torch.arange(5, device="cuda"),
    lambda: torch.randn(3, device="cuda"),
    lambda: torch.randint(0, 5, (3,), device="cuda"),
    lambda: torch.randperm(5, device="cuda"),
    lambda: torch.normal(0.0, 1.0, (3,), device="cuda"),
    lambda: torch.eye(3, device="cuda"),
    lambda: torch.full((2,), 3.0, device="cuda"),
    lambda: torch.linspace(0, 1, 5, device="cuda"),
    lambda: torch.tril_indices(3, 3, device="cuda"),
    lambda: torch.hann_window(4, device="cuda"),
    lambda: torch.blackman_window(4, device="cuda"),
    lambda: torch.fft.rfftfreq(4, device="cuda"),
    lambda: torch.fft.fftfreq(4, device="cuda"),
    lambda: torch.empty_permuted((2, 3), (1, 0), device="cuda"),
    lambda: torch.empty_like(torch.ones(2), device="cuda"),
    lambda: torch.zeros(3).new_ones(2, device="cuda"),
    lambda: torch.ones(3).cuda(),
    lambda: torch.ones(3).to("cuda"),
    lambda: torch.nn.Linear(2, 2).cuda().weight,
    # A quantized dtype or a sparse layout selects a CUDA key of its own.
    lambda: torch.empty(2, dtype=torch.qint8, device="cuda"),
    # Not among the wrapped factories: only the fallback on the QuantizedCUDA key redirects it.
    pytest.param(lambda: torch._empty_affine_quantized([2], scale=0.1, zero_point=3, dtype=torch.quint8, device="cuda"),
                 marks=needs_cuda_alias()),
    lambda: torch.zeros((2, 2), layout=torch.sparse_coo, device="cuda"),
    lambda: torch.empty((2, 2), layout=torch.sparse_csr, device="cuda"),
], ids=lambda f: "")
def test_idioms_land_on_devx(make):
    assert make().device == DEVX0


def test_factories_follow_the_device_index_and_compute_what_the_cpu_computes():
    assert torch.ones(2, 2, device="cuda:1").device == DEVX1
    assert torch.ones(2).to("cuda:1").device == DEVX1
    with torch.cuda.device(1):
        assert torch.zeros(1, device="cuda").device == DEVX1
    assert_close(torch.hann_window(8, device="cuda").cpu(), torch.hann_window(8))
    assert_close(torch.fft.rfftfreq(6, d=0.5, device="cuda").cpu(), torch.fft.rfftfreq(6, d=0.5))
    assert_close(torch.tril_indices(4, 3, 1, device="cuda").cpu(), torch.tril_indices(4, 3, 1))
    torch.manual_seed(3)
    on_devx = torch.randn(4, device="cuda")
    torch.manual_seed(3)
    assert_close(on_devx, torch.randn(4, device="devx"))


@needs_cuda_alias()
def test_a_cuda_device_context_builds_modules_on_devx():
    # LLM loading code: `with torch.device("cuda"): model = Model(config)`.
    with torch.device("cuda"):
        layer = torch.nn.Linear(2, 2)
        assert torch.empty(4).device == DEVX0
    assert layer.weight.device == DEVX0 and layer.bias.device == DEVX0


@needs_cuda_alias()
def test_torchscript_scripts_and_traces_factory_calls():
    @torch.jit.script
    def zeros_plus(n: int, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(n, device=x.device) + x

    x = torch.ones(3, device="cuda")
    assert_close(zeros_plus(3, x).cpu(), torch.ones(3))
    traced = torch.jit.trace(lambda t: t + torch.ones(3, device=t.device), (x,))
    assert_close(traced(x).cpu(), torch.full((3,), 2.0))


@needs_cuda_alias()
def test_torch_distributed_optim_imports():
    import torch.distributed.optim  # noqa: F401  (scripted optimizers call factories)


@needs_cuda_alias()
def test_refs_under_torch_refs_mode():
    from torch._prims.context import TorchRefsMode

    with TorchRefsMode(strict=True):
        eye = torch._refs.eye(3)
    assert_close(eye, torch.eye(3))


def test_gradcheck_of_views():
    x = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: torch.unbind(t, 1), (x,))
    assert torch.autograd.gradcheck(lambda t: torch.as_strided(t, (2, 2), (1, 2)), (x,))


def test_functorch_transforms_of_factory_calls():
    x = torch.randn(4, 3, device="cuda")
    out = torch.func.vmap(lambda row: row + torch.ones(3, device="cuda"))(x)
    assert_close(out.cpu(), x.cpu() + 1)
    grad = torch.func.grad(lambda t: (t * torch.arange(3.0, device="cuda")).sum())(torch.ones(3, device="cuda"))
    assert_close(grad.cpu(), torch.arange(3.0))


@needs_cuda_alias()
def test_compile_under_a_devx_device_context_builds_on_devx():
    def fn():
        return torch.empty(4).fill_(1) + 1

    with torch.device("devx"):
        eager = fn()
        compiled = torch.compile(fn, backend="aot_eager")()
    assert eager.device == DEVX0 and compiled.device == DEVX0
    assert_close(compiled.cpu(), eager.cpu())
