"""CUDA idioms real scripts use, under CUDA mocking (issue 19): generators, streams and events,
NVTX ranges, the memory fraction, peer access, the sync debug mode, device capabilities, and
DIPU's name for the mocking switch. PyTorch's behaviour on CUDA is the reference."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch_devx  # noqa: F401  (registers the devx device)
from torch.testing import assert_close
from torch_devx import cuda_mock

from conftest import assert_child_ok, describe, needs_cuda_alias, run_python

pytestmark = [
    pytest.mark.usefixtures("devx"),
    pytest.mark.skipif(not cuda_mock.enabled(), reason="the suite's mock-off pass runs with DEVX_MOCK_CUDA=0"),
]

DEVX0 = torch.device("devx", 0)


def test_default_generators_are_the_devices_generators():
    gens = torch.devx.default_generators
    assert len(gens) == torch.devx.device_count() and all(g.device == torch.device("devx", i) for i, g in enumerate(gens))
    assert len(torch.cuda.default_generators) == len(gens)
    torch.cuda.default_generators[1].manual_seed(11)
    assert gens[1].initial_seed() == 11
    gens[0].manual_seed(7)
    a = torch.randn(4, device="cuda")
    torch.devx.manual_seed(7)
    assert_close(a, torch.randn(4, device="cuda"))


def test_generators_made_for_cuda_are_devx_generators():
    """torch.Generator("cuda") (or device="cuda:N", a torch.device) makes a devx generator; what it
    makes is torch's own Generator type, which TorchScript, dynamo and isinstance recognise."""
    made = [torch.Generator("cuda"), torch.Generator(device="cuda:1"), torch.Generator(torch.device("cuda", 0))]
    assert [g.device for g in made] == [DEVX0, torch.device("devx", 1), DEVX0]
    assert all(type(g) is torch._C.Generator for g in made)
    assert torch.Generator().device == torch.device("cpu") and torch.Generator("cpu").device == torch.device("cpu")
    assert isinstance(made[0], torch.Generator) and isinstance(torch.default_generator, torch.Generator)
    assert issubclass(torch._C.Generator, torch.Generator) and not isinstance(3, torch.Generator)
    a = torch.randn(5, device="cuda", generator=made[0].manual_seed(3))
    b = torch.randn(5, device="cuda", generator=torch.Generator("cuda").manual_seed(3))
    assert a.device == DEVX0 and torch.equal(a, b)
    assert not torch.equal(a, torch.randn(5, device="cuda", generator=made[0]))
    with pytest.raises(RuntimeError, match="invalid device index 7"):
        torch.Generator("cuda:7")

    @torch.jit.script
    def fill_uniform(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        return x.uniform_(generator=g)

    drawn = fill_uniform(torch.empty(4, device="cuda"), torch.Generator("cuda").manual_seed(5))
    assert drawn.device == DEVX0
    assert torch.equal(drawn, torch.empty(4, device="cuda").uniform_(generator=torch.Generator("cuda").manual_seed(5)))

    @torch.compile(backend="eager", fullgraph=False)
    def noisy(x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand(4, generator=torch.Generator().manual_seed(1))

    assert torch.equal(noisy(torch.zeros(4)), torch.rand(4, generator=torch.Generator().manual_seed(1)))


@needs_cuda_alias()
def test_streams_and_events_made_for_cuda_are_devx_ones():
    stream = torch.Stream(device="cuda")
    least, greatest = torch.cuda.Stream.priority_range()
    assert least == 0 and greatest < 0
    s = torch.cuda.Stream(priority=greatest)
    assert s.priority == greatest
    assert isinstance(s.cuda_stream, int) and s.cuda_stream != 0
    assert s._as_parameter_.value == s.cuda_stream
    assert torch.cuda.current_stream().cuda_stream != s.cuda_stream
    event = torch.Event(device="cuda", enable_timing=True)
    with torch.cuda.stream(s):
        x = torch.ones(1000, device="cuda") * 2
        event.record()
    event.synchronize()
    assert event.query() and x.sum().item() == 2000
    assert stream.query()


@pytest.mark.skipif(cuda_mock._has_nvtx(),
                    reason="this torch has NVTX (a CUDA build): torch.cuda.nvtx stays NVTX's, for Nsight")
def test_nvtx_ranges_reach_the_profiler():
    from torch.profiler import profile

    with profile() as prof:
        assert torch.cuda.nvtx.range_push("step") == 0
        with torch.cuda.nvtx.range("forward {}", 1):
            torch.ones(4, device="cuda").sum()
        torch.cuda.nvtx.mark("checkpoint")
        assert torch.cuda.nvtx.range_pop() == 0
        torch.cuda.nvtx.range_end(torch.cuda.nvtx.range_start("async"))
    names = {e.name for e in prof.events()}
    assert {"step", "forward 1", "checkpoint", "async"} <= names, names
    assert torch.cuda.nvtx.range_pop() == -1
    with pytest.raises(ValueError, match="no range"):
        torch.cuda.nvtx.range_end(123456)


def test_the_memory_fraction_limits_what_the_allocator_reserves():
    torch.cuda.empty_cache()
    total = torch.cuda.mem_get_info(0)[1]
    try:
        torch.cuda.set_per_process_memory_fraction(0.25, 0)
        assert torch.devx.get_per_process_memory_fraction(0) == 0.25
        keep = torch.empty(int(total * 0.15), dtype=torch.uint8, device="cuda")
        with pytest.raises(torch.OutOfMemoryError, match="set_per_process_memory_fraction"):
            torch.empty(int(total * 0.15), dtype=torch.uint8, device="cuda")
        del keep
        torch.cuda.empty_cache()
        torch.empty(int(total * 0.2), dtype=torch.uint8, device="cuda")   # the limit, not a leak
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, 0)
    torch.cuda.empty_cache()
    with pytest.raises(TypeError, match="must be `float`"):
        torch.cuda.set_per_process_memory_fraction(1, 0)
    with pytest.raises(ValueError, match="Allowed range"):
        torch.cuda.set_per_process_memory_fraction(1.5, 0)


def test_peer_access():
    assert torch.cuda.can_device_access_peer(0, 1) and torch.cuda.can_device_access_peer(1, 0)
    assert not torch.cuda.can_device_access_peer(0, 0)
    with pytest.raises(RuntimeError, match="invalid device"):
        torch.cuda.can_device_access_peer(0, 9)


def test_sync_debug_mode_warns_and_raises_on_host_waits():
    x = torch.ones(4, device="cuda")
    assert torch.cuda.get_sync_debug_mode() == 0
    try:
        torch.cuda.set_sync_debug_mode("warn")
        assert torch.cuda.get_sync_debug_mode() == 1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = x * 2                                  # device work only: no warning
            assert not caught, [str(w.message) for w in caught]
            y.sum().item()
        messages = [str(w.message) for w in caught]
        assert any("synchronizing devx operation" in m and "test_cuda_idioms.py" in m for m in messages), messages
        torch.cuda.set_sync_debug_mode(2)
        with pytest.raises(RuntimeError, match="synchronizing devx operation"):
            x.cpu()
        torch.cuda.synchronize()                       # explicit device-wide waits are not reported
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert x.cpu().sum().item() == 4
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.cuda.set_sync_debug_mode("loud")


def test_init_and_device_capability():
    torch.cuda.init()
    torch.devx.init()
    caps = torch.accelerator.get_device_capability("devx:0")
    supported = caps["supported_dtypes"]
    assert torch.float32 in supported and torch.bfloat16 in supported and torch.qint8 not in supported
    with pytest.raises(RuntimeError, match="invalid device index"):
        torch.accelerator.get_device_capability("devx:9")


@pytest.mark.parametrize("value, mocked", [("0", False), ("1", True)])
def test_dipu_mock_cuda_is_a_synonym(value, mocked):
    proc = run_python("""
import torch, torch_devx
print("MOCKED", torch_devx.cuda_mock.enabled())
""", DIPU_MOCK_CUDA=value, DEVX_MOCK_CUDA=None)
    assert_child_ok(proc)
    assert f"MOCKED {mocked}" in proc.stdout, describe(proc)


LEGACY = [("FloatTensor", torch.float32), ("DoubleTensor", torch.float64), ("HalfTensor", torch.float16),
          ("BFloat16Tensor", torch.bfloat16), ("LongTensor", torch.int64), ("IntTensor", torch.int32),
          ("ShortTensor", torch.int16), ("CharTensor", torch.int8), ("ByteTensor", torch.uint8),
          ("BoolTensor", torch.bool)]


@pytest.mark.parametrize("name, dtype", LEGACY)
def test_legacy_typed_tensors_construct_test_and_convert_on_devx(name, dtype):
    cls = getattr(torch.cuda, name)
    assert cls is getattr(torch.devx, name) and cls.dtype == dtype and cls.is_cuda
    data = cls([1, 0, 1])
    assert data.device == DEVX0 and data.dtype == dtype and data.tolist() == torch.tensor([1, 0, 1], dtype=dtype).tolist()
    assert cls(2, 3).shape == (2, 3) and cls(torch.Size([4])).shape == (4,) and cls().shape == (0,)
    assert cls(data) is data
    assert isinstance(data, cls) and isinstance(data, torch.Tensor)
    assert not isinstance(data.cpu(), cls)
    assert not isinstance(torch.ones(1, device="devx", dtype=torch.complex64), cls)
    cpu = torch.tensor([3, 2])
    for spelling in (cls, f"torch.cuda.{name}", f"torch.devx.{name}"):
        moved = cpu.type(spelling)
        assert moved.device == DEVX0 and moved.dtype == dtype and isinstance(moved, cls)
    assert data.type(cls) is data  # nothing to change: the tensor itself, as on CUDA


@pytest.mark.devices(2)
def test_legacy_types_keep_the_device_and_refuse_what_the_cpu_refuses():
    on1 = torch.ones(2, device="devx:1")
    assert on1.type(torch.cuda.DoubleTensor).device == torch.device("devx", 1)
    assert torch.cuda.FloatTensor([1.0], device=1).device == torch.device("devx", 1)
    with pytest.raises(TypeError, match="expected torch.devx.FloatTensor"):
        torch.cuda.FloatTensor(torch.ones(1, device="devx", dtype=torch.float64))
    # What the C method does itself is untouched: dtypes, CPU type names, the type's name.
    assert torch.ones(1).type(torch.float64).dtype == torch.float64
    assert torch.ones(1).type("torch.IntTensor").dtype == torch.int32
    assert torch.ones(1, device="devx").type() == "torch.devx.FloatTensor"


@pytest.mark.devices(2)
def test_cuda_bindings_pytorchs_test_framework_calls_act_on_devx():
    # CudaNonDefaultStream (every CUDA-instantiated PyTorch test) sets streams through torch._C.
    side = torch.cuda.Stream(device=1)
    before = torch.cuda.current_device()
    torch._C._cuda_setStream(stream_id=side.stream_id, device_index=side.device_index, device_type=side.device_type)
    try:
        assert torch.devx.current_stream(1) == side
        assert torch._C._cuda_getCurrentStream(1) == (side.stream_id, 1, side.device_type)
    finally:
        default = torch.devx.default_stream(1)
        torch._C._cuda_setStream(stream_id=0, device_index=1, device_type=default.device_type)
        torch._C._cuda_setDevice(before)
    assert torch.devx.current_stream(1).stream_id == 0 and torch._C._cuda_getDevice() == before
    assert torch._C._cuda_exchangeDevice(1) == before and torch.devx.current_device() == 1
    torch._C._cuda_setDevice(before)
    torch._C._cuda_clearCublasWorkspaces()
    assert torch._C._cuda_cudaCachingAllocator_is_enabled() is True
    # Its presence would tell torch that it was built with CUDA: never added.
    assert not torch.cuda._is_compiled() or torch.backends.cuda.is_built()


DEVICE_AS_CUDA_SCRIPT = """
import torch, torch.nn as nn, torch_devx
from torch.utils.checkpoint import checkpoint
from torch_devx._real_device import real_device

x = torch.ones(2).cuda()
assert x.device == torch.device("cuda", 0) and str(x.device) == "cuda:0" and x.is_cuda, x.device
assert "device='cuda:0'" in repr(x)
assert real_device(x) == torch.device("devx", 0)
assert real_device(torch.zeros(2, device=x.device)).type == "devx"  # the reported device leads back to devx
assert isinstance(x, torch.cuda.FloatTensor) and torch.device("cpu") == torch.ones(1).device

# A training step whose code branches on the device type takes its CUDA path, and stays on devx.
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.1), nn.Linear(16, 4)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
scaler = torch.amp.GradScaler("cuda")
data = torch.randn(32, 8, device="cuda")
assert data.device.type == "cuda"
for _ in range(2):
    with torch.autocast(device_type=data.device.type, dtype=torch.bfloat16):
        loss = checkpoint(model, data, use_reentrant=False).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
states = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0]
assert states and all(real_device(v).type == "devx" for v in states)
assert torch.isfinite(loss).item()

try:
    torch.compile(nn.Linear(2, 2).cuda())(torch.ones(1, 2, device="cuda"))
except Exception as e:
    assert "DEVX_DEVICE_AS_CUDA=1" in str(e), e
else:
    raise AssertionError("the default backend compiled a graph it traced as CUDA")
assert torch.compile(nn.Linear(2, 2).cuda(), backend="eager")(torch.ones(1, 2, device="cuda")).shape == (1, 2)

# torch._refs under TorchRefsMode(strict=True) reads the device through the reported getter.
from torch._prims.context import TorchRefsMode
from torch._prims_common import torch_function_passthrough
with TorchRefsMode(strict=True):
    assert x.device == torch.device("cuda", 0)
    doubled = torch._refs.add(x, x)
assert real_device(doubled).type == "devx" and doubled.tolist() == [2.0, 2.0]

torch_devx.cuda_mock.disable()
assert x.device == torch.device("devx", 0)
assert not any(getattr(f, "__self__", None).__class__ is property for f in torch_function_passthrough)
print("OK")
"""


@needs_cuda_alias()
@pytest.mark.parametrize("variable", ["DEVX_DEVICE_AS_CUDA", "DIPU_PYTHON_DEVICE_AS_CUDA"])
def test_device_as_cuda_reports_devx_tensors_as_cuda(variable):
    proc = run_python(DEVICE_AS_CUDA_SCRIPT, **{variable: "1"})
    assert_child_ok(proc)
    assert "OK" in proc.stdout, describe(proc)


def test_device_as_cuda_is_off_by_default_and_checked():
    assert not cuda_mock.reports_devx_as_cuda() and torch.ones(1).cuda().device == DEVX0
    proc = run_python("import torch, torch_devx", DEVX_DEVICE_AS_CUDA="sure")
    assert proc.returncode != 0 and "DEVX_DEVICE_AS_CUDA='sure' is not a boolean" in proc.stderr, describe(proc)
