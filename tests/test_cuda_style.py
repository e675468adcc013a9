"""CUDA mocking: unchanged CUDA-style code runs on devx, DEVX_MOCK_CUDA=0 turns it off at import,
and cuda_mock.disable()/enable() restore and reinstall exactly what they replace."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_devx  # noqa: F401  (registers the devx device)
from torch.testing import assert_close
from torch_devx import cuda_mock

from conftest import assert_child_ok, run_python

pytestmark = pytest.mark.usefixtures("devx")

DEVX0 = torch.device("devx", 0)
DEVX1 = torch.device("devx", 1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(x, 1))


def cuda_script(model: nn.Module, data, use_cuda_apis: bool) -> list[float]:
    """A training loop written the way CUDA tutorials write it."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if use_cuda_apis:
        assert device.type == "cuda"
        model.cuda()
    else:
        device = torch.device("cpu")
        model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in data:
        if use_cuda_apis:
            x, y = x.cuda(), y.to(device)
            assert x.is_cuda and y.is_cuda and next(model.parameters()).is_cuda
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if use_cuda_apis:
            torch.cuda.synchronize()
        losses.append(loss.item())
    return losses


def test_cuda_style_training_script_runs_on_devx(fallback):
    torch.manual_seed(0)
    model = Net()
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(6, 1, 8, 8, generator=g), torch.randint(0, 3, (6,), generator=g)) for _ in range(3)]
    losses = cuda_script(model, data, use_cuda_apis=True)
    assert next(model.parameters()).device == DEVX0
    assert model.bn.running_mean.device == DEVX0
    ref_losses = cuda_script(ref, data, use_cuda_apis=False)
    assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=1e-5, rtol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.detach().cpu(), q.detach(), atol=1e-5, rtol=1e-5)
    assert fallback.fallback_stats() == {}


@pytest.mark.devices(2)
def test_cuda_queries_answer_for_devx():
    assert torch.cuda.is_available()
    assert torch.cuda.device_count() == torch.devx.device_count() >= 2
    assert torch.cuda.current_device() == 0
    assert torch.cuda.get_device_name(0) == torch.devx.get_device_name(0)
    assert torch.cuda.get_device_name() == torch.devx.get_device_name()
    assert torch.cuda.get_device_properties(1).total_memory == torch.devx.get_device_properties(1).total_memory
    assert torch.cuda.get_device_capability() == torch.devx.get_device_capability()
    assert torch.cuda.is_initialized()
    keep = torch.empty(1 << 20, device="cuda")
    assert torch.cuda.memory_allocated() == torch.devx.memory_allocated() >= keep.numel() * 4
    assert torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated()
    assert torch.cuda.memory_reserved() >= torch.cuda.memory_allocated()
    assert torch.cuda.mem_get_info() == torch.devx.mem_get_info()
    torch.cuda.synchronize()
    torch.cuda.synchronize(1)


@pytest.mark.devices(2)
def test_cuda_device_selection():
    torch.cuda.set_device(1)
    assert torch.devx.current_device() == 1
    assert torch.zeros(2, device="cuda").device == DEVX1
    assert torch.ones(2).cuda().device == DEVX1
    torch.cuda.set_device(0)
    with torch.cuda.device(1):
        assert torch.cuda.current_device() == 1
        assert torch.empty(1, device="cuda").device == DEVX1
    assert torch.cuda.current_device() == 0


def test_cuda_seeding():
    torch.cuda.manual_seed(0)
    a = torch.randn(8, device="cuda")
    torch.cuda.manual_seed(0)
    b = torch.randn(8, device="cuda")
    assert torch.equal(a.cpu(), b.cpu())
    torch.cuda.manual_seed_all(5)
    assert torch.cuda.initial_seed() == 5
    state = torch.cuda.get_rng_state()
    c = torch.rand(4, device="cuda")
    torch.cuda.set_rng_state(state)
    assert torch.equal(c.cpu(), torch.rand(4, device="cuda").cpu())


FACTORY_CALLS = {
    "zeros": lambda d: torch.zeros(2, 3, device=d),
    "ones": lambda d: torch.ones(2, device=d),
    "empty": lambda d: torch.empty(2, device=d),
    "full": lambda d: torch.full((2,), 4.0, device=d),
    "arange": lambda d: torch.arange(5, device=d),
    "rand": lambda d: torch.rand(3, device=d),
    "randn": lambda d: torch.randn(3, device=d),
    "randint": lambda d: torch.randint(0, 5, (3,), device=d),
    "tensor": lambda d: torch.tensor([1.0, 2.0], device=d),
    "as_tensor": lambda d: torch.as_tensor([1, 2], device=d),
    "eye": lambda d: torch.eye(2, device=d),
    "linspace": lambda d: torch.linspace(0, 1, 4, device=d),
    "zeros_like": lambda d: torch.zeros_like(torch.ones(2), device=d),
    "randn_like": lambda d: torch.randn_like(torch.ones(2), device=d),
    "new_zeros": lambda d: torch.ones(2).new_zeros(3, device=d),
    "new_tensor": lambda d: torch.ones(2).new_tensor([5.0], device=d),
    "to_positional": lambda d: torch.ones(2).to(d),
    "to_keyword": lambda d: torch.ones(2).to(device=d),
    "to_with_dtype": lambda d: torch.ones(2).to(d, torch.float64),
}


@pytest.mark.parametrize("spec, expected", [("cuda", DEVX0), ("cuda:1", DEVX1), (torch.device("cuda"), DEVX0),
                                            (torch.device("cuda", 1), DEVX1)], ids=["cuda", "cuda:1", "device", "device1"])
@pytest.mark.parametrize("call", list(FACTORY_CALLS))
def test_cuda_devices_mean_devx(call, spec, expected):
    t = FACTORY_CALLS[call](spec)
    assert t.device == expected
    assert t.is_cuda and t.is_devx


@pytest.mark.devices(2)
def test_tensor_cuda_method_and_is_cuda():
    cpu = torch.arange(4.0)
    assert not cpu.is_cuda
    assert cpu.cuda().device == DEVX0
    assert cpu.cuda(1).device == DEVX1
    assert cpu.cuda("cuda:1").device == DEVX1
    assert cpu.cuda(torch.device("cuda", 1)).device == DEVX1
    assert cpu.cuda().is_cuda
    assert torch.equal(cpu.cuda(1).cpu(), cpu)
    x = torch.ones(2, device="devx")
    assert x.is_cuda  # devx tensors are what "cuda" means now
    # "cuda" and "devx" tensors are the same device, so they mix
    assert_close((torch.ones(2, device="cuda") + x).cpu(), torch.full((2,), 2.0))


@pytest.mark.parametrize("move, expected", [
    (lambda m: m.cuda(), DEVX0),
    (lambda m: m.cuda(1), DEVX1),
    (lambda m: m.to("cuda"), DEVX0),
    (lambda m: m.to("cuda:1"), DEVX1),
    (lambda m: m.to(device="cuda:1"), DEVX1),
    (lambda m: m.to(torch.device("cuda", 1), torch.float64), DEVX1),
], ids=["cuda()", "cuda(1)", "to(cuda)", "to(cuda:1)", "to(device=cuda:1)", "to(device, dtype)"])
def test_module_moves_to_cuda_mean_devx(move, expected):
    m = nn.Linear(3, 2)
    w = m.weight
    move(m)
    assert m.weight is w
    assert m.weight.device == expected and m.bias.device == expected
    assert m(torch.ones(1, 3, device=expected, dtype=m.weight.dtype)).device == expected


@pytest.mark.devices(2)
def test_load_checkpoint_with_cuda_map_location(tmp_path):
    """torch.load(path, map_location=device) with device = torch.device("cuda"), as CUDA scripts
    load their checkpoints."""
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.arange(4.0), "step": 3}, path)
    failures = {}
    for location, expected in (("cuda", DEVX0), ("cuda:1", DEVX1), (torch.device("cuda"), DEVX0),
                               ({"cpu": "cuda:0"}, DEVX0)):
        try:
            ckpt = torch.load(path, map_location=location)
            assert ckpt["w"].device == expected and ckpt["w"].is_cuda, ckpt["w"].device
            assert torch.equal(ckpt["w"].cpu(), torch.arange(4.0))
        except Exception as e:  # collect them all: one message for every spelling
            failures[str(location)] = f"{type(e).__name__}: {e}"
    assert not failures, failures


@pytest.mark.parametrize("spec", ["cuda", "devx"])
def test_set_default_device(spec):
    """torch.set_default_device("cuda") (as many scripts do) must send factories to devx."""
    try:
        torch.set_default_device(spec)
        assert torch.get_default_device().type == "devx"
        assert torch.ones(2).device == DEVX0
        assert torch.empty(3).device == DEVX0
        assert torch.tensor([1.0]).device == DEVX0
    finally:
        torch.set_default_device(None)
    assert torch.ones(2).device.type == "cpu"


def test_disable_enable_round_trip():
    mocked = {
        "Tensor.cuda": torch.Tensor.cuda,
        "Tensor.to": torch.Tensor.to,
        "Module.to": torch.nn.Module.to,
        "zeros": torch.zeros,
        "cuda.is_available": torch.cuda.is_available,
        "Tensor.type": torch.Tensor.type,
        "cuda.FloatTensor": torch.cuda.FloatTensor,
        "_C._cuda_setStream": torch._C._cuda_setStream,
        "Generator": torch.Generator,
    }
    assert cuda_mock.enabled()
    cuda_mock.disable()
    assert not cuda_mock.enabled()
    assert torch.Tensor.to is torch._C.TensorBase.to
    assert torch.Tensor.cuda is torch._C.TensorBase.cuda
    assert type(torch.zeros).__name__ == "builtin_function_or_method"
    assert not hasattr(torch.nn.Module.to, "__wrapped__")
    assert torch.Tensor.type is torch._C.TensorBase.type
    assert torch.Generator is torch._C.Generator
    assert torch.cuda.FloatTensor in torch._tensor_classes  # PyTorch's own class again
    assert torch.backends.cuda.is_built() or not hasattr(torch._C, "_cuda_setStream")
    assert not torch.cuda.is_available()
    assert torch.cuda.device_count() == 0
    assert not torch.ones(1, device="devx").is_cuda
    with pytest.raises((AssertionError, RuntimeError)):
        torch.ones(1).cuda()
    with pytest.raises((AssertionError, RuntimeError)):
        torch.zeros(1, device="cuda")
    # devx itself is untouched
    assert torch.ones(2).to("devx").device == DEVX0
    cuda_mock.disable()  # twice is harmless
    cuda_mock.enable()
    assert cuda_mock.enabled()
    cuda_mock.enable()  # twice is harmless: no double wrapping
    assert torch.Tensor.cuda is mocked["Tensor.cuda"]
    assert torch.Tensor.to is mocked["Tensor.to"]
    assert torch.nn.Module.to is mocked["Module.to"]
    assert torch.zeros is mocked["zeros"]
    assert torch.cuda.is_available is mocked["cuda.is_available"]
    assert torch.Tensor.type is mocked["Tensor.type"]
    assert torch.cuda.FloatTensor is mocked["cuda.FloatTensor"]
    assert torch.Generator is mocked["Generator"] and torch.Generator is not torch._C.Generator
    assert torch._C._cuda_setStream is mocked["_C._cuda_setStream"]
    assert torch.ones(1).cuda().device == DEVX0


MOCK_OFF_SCRIPT = """
import torch, torch_devx
from torch_devx import cuda_mock

assert not cuda_mock.enabled()
assert torch.cuda.is_available() is False
assert torch.cuda.device_count() == 0

def raises(fn):
    try:
        fn()
    except (AssertionError, RuntimeError) as e:
        return str(e)
    raise AssertionError("no error")

raises(lambda: torch.ones(2).cuda())
raises(lambda: torch.zeros(2, device="cuda"))
x = torch.ones(2).to("devx")
assert x.device == torch.device("devx", 0) and not x.is_cuda
assert torch.devx.device_count() == 2
(x * 2).sum().item()

# what enable() replaces, and disable() must put back exactly
own_before = {name for name in ("cuda", "to", "is_cuda", "new_zeros") if name in torch.Tensor.__dict__}
originals = {
    "Tensor.cuda": torch.Tensor.__dict__.get("cuda", torch.Tensor.cuda),
    "Tensor.to": torch.Tensor.to,
    "Tensor.is_cuda": torch.Tensor.is_cuda,
    "Tensor.new_zeros": torch.Tensor.new_zeros,
    "Module.to": torch.nn.Module.to,
    "zeros": torch.zeros,
    "tensor": torch.tensor,
    "cuda.is_available": torch.cuda.is_available,
    "cuda.synchronize": torch.cuda.synchronize,
    "cuda.manual_seed": torch.cuda.manual_seed,
    "is_autocast_enabled": torch.is_autocast_enabled,
    "get_autocast_gpu_dtype": torch.get_autocast_gpu_dtype,
    "amp._cast": torch.amp.autocast_mode._cast,
}
torch_has_cuda_kernels = torch._C._dispatch_has_kernel_for_dispatch_key("aten::empty.memory_format", "CUDA")
cuda_mock.enable()
assert torch.cuda.is_available() and torch.ones(2).cuda().device.type == "devx"
assert torch.zeros(1, device="cuda:1").device == torch.device("devx", 1)
# A CPU build of torch: factories stay torch's builtins, "cuda" is mapped below Python; a CUDA
# build's "cuda" is a real device, which only wrappers redirect.
assert cuda_mock.wraps_factories() == torch_has_cuda_kernels
assert (torch.zeros is originals["zeros"]) == (not torch_has_cuda_kernels)
assert torch.tensor([1.0], device="cuda").device == torch.device("devx", 0)
assert torch.is_autocast_enabled is not originals["is_autocast_enabled"]
cuda_mock.disable()
now = {
    "Tensor.cuda": torch.Tensor.__dict__.get("cuda", torch.Tensor.cuda),
    "Tensor.to": torch.Tensor.to,
    "Tensor.is_cuda": torch.Tensor.is_cuda,
    "Tensor.new_zeros": torch.Tensor.new_zeros,
    "Module.to": torch.nn.Module.to,
    "zeros": torch.zeros,
    "tensor": torch.tensor,
    "cuda.is_available": torch.cuda.is_available,
    "cuda.synchronize": torch.cuda.synchronize,
    "cuda.manual_seed": torch.cuda.manual_seed,
    "is_autocast_enabled": torch.is_autocast_enabled,
    "get_autocast_gpu_dtype": torch.get_autocast_gpu_dtype,
    "amp._cast": torch.amp.autocast_mode._cast,
}
changed = [k for k in originals if now[k] is not originals[k]]
assert not changed, changed
own_after = {name for name in ("cuda", "to", "is_cuda", "new_zeros") if name in torch.Tensor.__dict__}
assert own_after == own_before, (own_before, own_after)  # inherited attributes are not left behind
assert torch.cuda.is_available() is False
raises(lambda: torch.ones(2).cuda())
# The fallback on the CUDA key, its device guard and CUDA's lazy initialisation are undone too:
# torch's own CUDA error ("not compiled with CUDA", or a CUDA build's "no NVIDIA driver").
for make in (lambda: torch.zeros(2, device="cuda"), lambda: torch.ones(2).to("cuda")):
    message = raises(make)
    assert "CUDA" in message or "NVIDIA" in message, message
print("MOCK-OFF-OK")
"""


def test_mock_cuda_off_at_import():
    proc = run_python(MOCK_OFF_SCRIPT, DEVX_MOCK_CUDA="0")
    assert_child_ok(proc)
    assert "MOCK-OFF-OK" in proc.stdout


def test_cuda_autocast_means_devx_autocast():
    """torch.autocast("cuda") and torch.cuda.amp.autocast cast devx matmuls, as on a GPU."""
    a = torch.randn(4, 4).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert (a @ a).dtype == torch.bfloat16
        assert torch.softmax(a, -1).dtype == torch.float32  # an fp32-policy op stays fp32
    with torch.cuda.amp.autocast(dtype=torch.float16):
        assert (a @ a).dtype == torch.float16
    assert (a @ a).dtype == torch.float32
