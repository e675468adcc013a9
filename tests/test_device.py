"""The devx device itself: counting, selecting and guarding devices, torch.accelerator,
torch.Stream/torch.Event, properties, memory and RNG queries, and how import-time settings
(DEVX_VENDOR, DEVX_SIM_*) are honoured or rejected."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
import torch_devx

from conftest import describe, run_many, run_python

pytestmark = pytest.mark.usefixtures("devx")

NDEV = torch.devx.device_count()
GiB = 1 << 30


# --- counting and selecting devices


def test_device_count_and_availability():
    assert torch.devx.is_available()
    if torch_devx.vendor == "cpu_sim":
        # Two simulated devices unless told otherwise, so that multi-device code is tested.
        assert NDEV == int(os.environ.get("DEVX_SIM_DEVICES") or 2)
    assert torch.accelerator.device_count() == NDEV >= 1
    assert torch.accelerator.is_available()


def test_current_accelerator_is_devx():
    acc = torch.accelerator.current_accelerator()
    assert acc is not None
    assert acc.type == "devx"
    assert torch._C._get_privateuse1_backend_name() == "devx"


def test_current_device_defaults_to_zero():
    assert torch.devx.current_device() == 0
    assert torch.accelerator.current_device_index() == 0
    t = torch.empty(3, device="devx")
    assert t.device == torch.device("devx", 0)
    assert t.is_devx


@pytest.mark.devices(2)
@pytest.mark.parametrize("spec", [1, "devx:1", torch.device("devx", 1)])
def test_set_device_switches_where_new_tensors_go(spec):
    torch.devx.set_device(spec)
    assert torch.devx.current_device() == 1
    assert torch.accelerator.current_device_index() == 1
    assert torch.ones(2, device="devx").device == torch.device("devx", 1)
    assert torch.zeros(2).devx().device == torch.device("devx", 1)
    torch.devx.set_device(0)
    assert torch.devx.current_device() == 0
    assert torch.ones(2, device="devx").device == torch.device("devx", 0)


@pytest.mark.devices(2)
def test_accelerator_set_device_index_is_the_same_state():
    torch.accelerator.set_device_index(1)
    assert torch.devx.current_device() == 1
    torch.accelerator.set_device_index(0)
    assert torch.devx.current_device() == 0


@pytest.mark.devices(2)
def test_device_context_manager_switches_and_restores():
    with torch.devx.device(1):
        assert torch.devx.current_device() == 1
        inside = torch.full((2,), 7.0, device="devx")
        inside_method = torch.arange(3).devx()
    assert torch.devx.current_device() == 0
    assert inside.device == torch.device("devx", 1)
    assert inside_method.device == torch.device("devx", 1)
    assert inside.cpu().tolist() == [7.0, 7.0]
    assert torch.ones(1, device="devx").device == torch.device("devx", 0)


@pytest.mark.devices(2)
def test_device_context_manager_nests_and_restores_on_exception():
    with pytest.raises(KeyError):
        with torch.devx.device("devx:1"):
            with torch.devx.device(0):
                assert torch.devx.current_device() == 0
                assert torch.empty(1, device="devx").device.index == 0
            assert torch.devx.current_device() == 1
            raise KeyError("boom")
    assert torch.devx.current_device() == 0


@pytest.mark.devices(2)
def test_device_context_none_is_a_no_op():
    torch.devx.set_device(1)
    with torch.devx.device(None):
        assert torch.devx.current_device() == 1
    assert torch.devx.current_device() == 1


@pytest.mark.devices(2)
def test_device_of_uses_the_tensors_device():
    t1 = torch.ones(1, device="devx:1")
    with torch.devx.device_of(t1):
        assert torch.devx.current_device() == 1
        assert torch.empty(1, device="devx").device.index == 1
    assert torch.devx.current_device() == 0
    with torch.devx.device_of(torch.ones(1)):  # a CPU tensor changes nothing
        assert torch.devx.current_device() == 0


@pytest.mark.devices(2)
def test_ops_run_on_their_tensors_device_whatever_the_current_device():
    x0 = torch.arange(6.0).reshape(2, 3).devx(0)
    with torch.devx.device(1):
        y = x0 * 2 + 1
        s = x0.sum()
    assert y.device == torch.device("devx", 0)
    assert s.device == torch.device("devx", 0)
    torch.testing.assert_close(y.cpu(), torch.arange(6.0).reshape(2, 3) * 2 + 1)
    assert s.item() == 15.0


# --- streams and events


def test_stream_and_event_basics():
    s = torch.Stream(device="devx")
    assert s.device == torch.device("devx", 0)
    start = torch.Event(device="devx", enable_timing=True)
    end = torch.Event(device="devx", enable_timing=True)
    start.record(s)
    with s:
        assert torch.accelerator.current_stream() == s
        a = torch.randn(64, 64, device="devx")
        b = a @ a
    assert torch.accelerator.current_stream() != s
    end.record(s)
    end.synchronize()
    s.synchronize()
    assert start.query() and end.query() and s.query()
    elapsed = start.elapsed_time(end)
    assert isinstance(elapsed, float)
    assert elapsed >= 0.0
    torch.testing.assert_close(b.cpu(), a.cpu() @ a.cpu())


@pytest.mark.devices(2)
def test_stream_on_second_device_and_cross_stream_waits():
    s1 = torch.Stream(device="devx:1")
    assert s1.device == torch.device("devx", 1)
    s1b = torch.Stream(device="devx:1")
    ev = s1.record_event()
    s1b.wait_event(ev)
    s1b.wait_stream(s1)
    torch.accelerator.synchronize(1)
    torch.devx.synchronize(1)
    torch.devx.synchronize()
    assert ev.query()


def test_record_stream():
    """tensor.record_stream(s), as CUDA code does when a tensor is used on a side stream."""
    s = torch.Stream(device="devx")
    x = torch.ones(1024, device="devx")
    with s:
        y = x * 2
    x.record_stream(s)
    y.record_stream(s)
    del x
    s.synchronize()
    assert y.sum().item() == 2048.0


def test_elapsed_time_needs_timing_events():
    a, b = torch.Event(device="devx"), torch.Event(device="devx")
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises((ValueError, RuntimeError), match="enable_timing"):
        a.elapsed_time(b)


# --- properties, memory and RNG queries


@pytest.mark.devices(2)
def test_device_properties():
    for i in range(NDEV):
        p = torch.devx.get_device_properties(i)
        assert isinstance(p.name, str) and p.name
        assert p.name == torch.devx.get_device_name(i)
        assert p.total_memory == 16 * GiB  # DEVX_SIM_MEMORY default
        assert p.multi_processor_count >= 1
        major, minor = torch.devx.get_device_capability(i)
        assert (major, minor) == (p.major, p.minor)
        assert isinstance(major, int) and isinstance(minor, int)
        free, total = torch.devx.mem_get_info(i)
        assert total == p.total_memory
        assert 0 < free <= total
    assert "devx" in repr(torch.devx.get_device_properties(0))
    # None and "devx" mean the current device
    torch.devx.set_device(1)
    assert torch.devx.get_device_properties() == torch.devx.get_device_properties(1)
    assert torch.devx.get_device_name("devx") == torch.devx.get_device_name(1)


@pytest.mark.devices(2)
def test_memory_queries_agree_with_torch_accelerator():
    keep = torch.empty(3 << 20, dtype=torch.uint8, device="devx:1")
    for i in range(NDEV):
        assert torch.devx.memory_allocated(i) == torch.accelerator.memory_allocated(i)
        assert torch.devx.memory_reserved(i) == torch.accelerator.memory_reserved(i)
        assert torch.devx.max_memory_allocated(i) == torch.accelerator.max_memory_allocated(i)
        assert torch.devx.max_memory_reserved(i) == torch.accelerator.max_memory_reserved(i)
        stats = torch.devx.memory_stats(i)
        assert stats["allocated_bytes.all.current"] == torch.devx.memory_allocated(i)
    assert torch.devx.memory_allocated(1) >= keep.numel()
    del keep


def test_manual_seed_matches_cpu_stream_of_numbers():
    torch.manual_seed(1234)
    on_devx = torch.randn(16, device="devx")
    torch.manual_seed(1234)
    on_cpu = torch.randn(16)
    torch.testing.assert_close(on_devx.cpu(), on_cpu, rtol=0, atol=0)

    torch.devx.manual_seed(7)
    assert torch.devx.initial_seed() == 7
    a = torch.rand(8, device="devx")
    torch.devx.manual_seed(7)
    b = torch.rand(8, device="devx")
    assert torch.equal(a.cpu(), b.cpu())


@pytest.mark.devices(2)
def test_manual_seed_all_seeds_every_device():
    torch.devx.manual_seed_all(99)
    a0 = torch.rand(8, device="devx:0")
    a1 = torch.rand(8, device="devx:1")
    assert torch.equal(a0.cpu(), a1.cpu())
    with torch.devx.device(1):
        assert torch.devx.initial_seed() == 99


def test_rng_state_round_trip():
    state = torch.devx.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    first = torch.randn(10, device="devx")
    torch.devx.set_rng_state(state)
    again = torch.randn(10, device="devx")
    assert torch.equal(first.cpu(), again.cpu())
    torch.devx.seed()
    assert torch.devx.get_rng_state().shape == state.shape


# --- bad device indices

BAD_INDEX_CALLS = {
    "factory": (5, lambda: torch.ones(2, device="devx:5")),
    "to": (3, lambda: torch.ones(2).to("devx:3")),
    "set_device": (7, lambda: torch.devx.set_device(7)),
    "set_device_negative": (-1, lambda: torch.devx.set_device(-1)),
    "device_context": (2, lambda: torch.devx.device(2).__enter__()),
    "properties": (5, lambda: torch.devx.get_device_properties(5)),
    "mem_get_info": (9, lambda: torch.devx.mem_get_info(9)),
    "synchronize": (4, lambda: torch.devx.synchronize(4)),
    "stream": (4, lambda: torch.Stream(device="devx:4")),
    "cuda_mocked": (5, lambda: torch.ones(1).cuda(5)),
    # Indices beyond an 8-bit device index must not wrap to a real device (256 -> 0, 257 -> 1).
    "set_device_256": (256, lambda: torch.devx.set_device(256)),
    "set_device_257": (257, lambda: torch.devx.set_device(257)),
    "set_device_-129": (-129, lambda: torch.devx.set_device(-129)),
    "synchronize_256": (256, lambda: torch.devx.synchronize(256)),
    "mem_get_info_257": (257, lambda: torch.devx.mem_get_info(257)),
    "get_rng_state_256": (256, lambda: torch.devx.get_rng_state(256)),
    "set_rng_state_256": (256, lambda: torch.devx.set_rng_state(torch.devx.get_rng_state(0), 256)),
    "device_context_256": (256, lambda: torch.devx.device(256).__enter__()),
    "properties_256": (256, lambda: torch.devx.get_device_properties(256)),
    "device_name": (7, lambda: torch.devx.get_device_name(7)),
    "capability": (7, lambda: torch.devx.get_device_capability(7)),
    "memory_stats_256": (256, lambda: torch.devx.memory_stats(256)),
    "memory_allocated": (9, lambda: torch.devx.memory_allocated(9)),
    "max_memory_allocated": (9, lambda: torch.devx.max_memory_allocated(9)),
    "memory_reserved_257": (257, lambda: torch.devx.memory_reserved(257)),
    "max_memory_reserved": (9, lambda: torch.devx.max_memory_reserved(9)),
    "reset_peak": (9, lambda: torch.devx.reset_peak_memory_stats(9)),
    "reset_accumulated": (9, lambda: torch.devx.reset_accumulated_memory_stats(9)),
    "memory_summary": (9, lambda: torch.devx.memory_summary(9)),
    "memory_timeline": (7, lambda: torch.devx.memory.memory_timeline(7)),
    "plot_memory_timeline": (7, lambda: torch.devx.memory.plot_memory_timeline("unused.html", 7)),
    "devx_stream": (256, lambda: torch.devx.Stream(256)),
    "current_stream": (7, lambda: torch.devx.current_stream(7)),
    "default_stream_256": (256, lambda: torch.devx.default_stream(256)),
    "device_string": (9, lambda: torch.devx.synchronize("devx:9")),
    "memory_fraction": (9, lambda: torch.devx.set_per_process_memory_fraction(0.5, 9)),
    "get_memory_fraction": (256, lambda: torch.devx.get_per_process_memory_fraction(256)),
    "peer": (9, lambda: torch.devx.can_device_access_peer(0, 9)),
    "peer_device": (9, lambda: torch.devx.can_device_access_peer(9, 0)),
    "stream_handle": (9, lambda: torch.devx.Stream(stream_id=1, device_index=9, device_type=20).cuda_stream),
}


@pytest.mark.parametrize("call", list(BAD_INDEX_CALLS))
def test_bad_device_index_names_index_and_count(call):
    index, fn = BAD_INDEX_CALLS[call]
    with pytest.raises(RuntimeError) as info:
        fn()
    msg = str(info.value)
    assert re.search(rf"invalid device index {index}\b", msg), msg
    assert f"has {NDEV} device" in msg, msg
    # nothing changed, and the process is still usable
    assert torch.devx.current_device() == 0
    assert torch.ones(1, device="devx").item() == 1.0


# --- import-time settings, each in a fresh interpreter

PROBE = """
import torch, torch_devx
n = torch.devx.device_count()
t = torch.ones(2, device=f"devx:{n - 1}")
print("count", n, torch.accelerator.device_count(), t.device, torch_devx.vendor)
"""

ENV_CASES = {
    "three_devices": {"DEVX_SIM_DEVICES": "3"},
    "bad_vendor": {"DEVX_VENDOR": "bogus"},
    "zero_devices": {"DEVX_SIM_DEVICES": "0"},
    "word_devices": {"DEVX_SIM_DEVICES": "two"},
    "bad_memory": {"DEVX_SIM_MEMORY": "lots"},
    "bad_mock_flag": {"DEVX_MOCK_CUDA": "maybe"},
}


@pytest.fixture(scope="module")
def env_children():
    names = list(ENV_CASES)
    results = run_many([(PROBE, ENV_CASES[n]) for n in names])
    return dict(zip(names, results))


def test_three_simulated_devices(env_children):
    proc = env_children["three_devices"]
    assert proc.returncode == 0, describe(proc)
    assert "count 3 3 devx:2 cpu_sim" in proc.stdout, describe(proc)


@pytest.mark.parametrize(
    "case, variable, error",
    [
        ("bad_vendor", "DEVX_VENDOR", "ValueError"),
        ("zero_devices", "DEVX_SIM_DEVICES", "ValueError"),
        ("word_devices", "DEVX_SIM_DEVICES", "ValueError"),
        ("bad_memory", "DEVX_SIM_MEMORY", "ValueError"),
        ("bad_mock_flag", "DEVX_MOCK_CUDA", "ValueError"),
    ],
)
def test_bad_settings_fail_cleanly_at_import(env_children, case, variable, error):
    proc = env_children[case]
    # a Python exception (exit status 1), not a signal (negative) or a hang
    assert proc.returncode == 1, describe(proc)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(error), describe(proc)
    assert variable in last, describe(proc)
    assert repr(ENV_CASES[case][variable]) in last or ENV_CASES[case][variable] in last, describe(proc)
    for crash in ("Segmentation fault", "Aborted", "terminate called", "core dumped"):
        assert crash not in proc.stderr, describe(proc)


def test_cuda_vendor_without_a_usable_gpu_is_a_clear_error():
    """DEVX_VENDOR=cuda on a machine without a usable CUDA device fails at import with a message
    naming the vendor and the reason, never a crash; where a GPU works, the cuda vendor loads."""
    proc = run_python("import torch_devx; print(torch_devx.vendor)", DEVX_VENDOR="cuda")
    if proc.returncode == 0:
        assert proc.stdout.strip() == "cuda"
        return
    assert proc.returncode == 1, describe(proc)
    if not (Path(torch_devx.__file__).parent / "libdevx_vendor_cuda.so").exists():
        # A build without the CUDA toolkit (or with DEVX_NO_CUDA=1) has no cuda vendor to load.
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("ValueError: DEVX_VENDOR='cuda' is not a vendor found here"), describe(proc)
        return
    assert "RuntimeError" in proc.stderr and "cuda" in proc.stderr
    assert "DEVX_ERROR_NO_DEVICE" in proc.stderr or "cannot load" in proc.stderr
