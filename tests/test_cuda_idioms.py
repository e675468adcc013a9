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

from conftest import assert_child_ok, describe, run_python

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
