"""torch.devx streams and events (and torch.cuda's under mocking), shaped like torch.cuda's."""

from __future__ import annotations

import pytest
import torch

import torch_devx  # noqa: F401


def test_pool_streams_priorities_and_current_stream():
    s = torch.devx.Stream(priority=-1)
    assert isinstance(s, torch.Stream) and s.device == torch.device("devx", 0)
    assert s.priority == -1 and s.stream_id != 0
    assert torch.devx.Stream().priority == 0
    assert torch.devx.current_stream() == torch.devx.default_stream()
    with torch.devx.stream(s):
        assert torch.devx.current_stream() == s
        x = torch.ones(10, device="devx") * 3
    assert torch.devx.current_stream() == torch.devx.default_stream()
    # x was made on s: the default stream must wait for it (asynchronous streams read 0 otherwise).
    torch.devx.current_stream().wait_stream(s)
    assert x.sum().item() == 30


@pytest.mark.devices(2)
def test_stream_context_switches_device():
    s1 = torch.devx.Stream(device=1)
    assert s1.device == torch.device("devx", 1)
    with torch.devx.stream(s1):
        assert torch.devx.current_device() == 1
        assert torch.devx.current_stream(1) == s1
        y = torch.zeros(2, device="devx")
    assert y.device == torch.device("devx", 1)
    assert torch.devx.current_device() == 0
    assert torch.devx.default_stream(1).device_index == 1


def test_events_time_and_order_streams():
    start, end = torch.devx.Event(enable_timing=True), torch.devx.Event(enable_timing=True)
    a = torch.randn(256, 256, device="devx")
    start.record()
    b = a @ a
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) > 0
    other = torch.devx.Stream()
    other.wait_event(end)
    other.wait_stream(torch.devx.current_stream())
    other.synchronize()
    assert other.query()
    torch.testing.assert_close(b.cpu(), a.cpu() @ a.cpu())


def test_elapsed_time_needs_timing_events():
    plain, timed = torch.devx.Event(), torch.devx.Event(enable_timing=True)
    plain.record()
    timed.record()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing"):
        timed.elapsed_time(plain)


def test_cuda_streams_under_mocking():
    s = torch.cuda.Stream()
    assert s.device.type == "devx"
    with torch.cuda.stream(s):
        assert torch.cuda.current_stream() == s
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    e.synchronize()
    x = torch.ones(4, device="cuda")
    x.record_stream(s)
    assert torch.accelerator.current_stream().device.type == "devx"


def test_pinned_dataloader_and_non_blocking_copies():
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(12, 3), torch.arange(12))
    seen = 0
    for x, y in DataLoader(data, batch_size=4, pin_memory=True):
        assert x.is_pinned() and y.is_pinned()
        xd = x.to("devx", non_blocking=True)
        back = xd.to("cpu", non_blocking=True)
        torch.devx.synchronize()
        assert back.is_pinned()
        assert torch.equal(back, x)
        seen += len(y)
    assert seen == 12
    assert not torch.ones(3).is_pinned()


# --- bad streams and events


@pytest.mark.devices(2)
def test_a_stream_that_cannot_be_made_current_leaves_the_device_as_it_was():
    bad = torch.Stream(stream_id=9999, device_index=1, device_type=20)
    with pytest.raises(RuntimeError, match="invalid stream id 9999"):
        with torch.devx.stream(bad):
            raise AssertionError("entered the block")
    assert torch.devx.current_device() == 0
    assert torch.devx.current_stream(1) == torch.devx.default_stream(1)


@pytest.mark.parametrize("stream_id", [-5, 9999, 1 << 40])
def test_made_up_stream_ids_are_refused_wherever_a_stream_is_taken(stream_id):
    bad = torch.Stream(stream_id=stream_id, device_index=0, device_type=20)
    for use in (lambda: torch.devx.set_stream(bad), lambda: torch.devx.stream(bad).__enter__(),
                bad.synchronize, bad.query, lambda: torch.devx.current_stream().wait_stream(bad),
                lambda: torch.devx.Event().record(bad)):
        with pytest.raises(RuntimeError, match=f"invalid stream id {stream_id}"):
            use()
    assert torch.devx.current_stream() == torch.devx.default_stream()


@pytest.mark.devices(2)
def test_elapsed_time_between_events_of_two_devices_raises_as_on_cuda():
    start = torch.devx.Event(enable_timing=True)
    end = torch.Event(device="devx:1", enable_timing=True)
    start.record()
    with torch.devx.device(1):
        end.record()
    end.synchronize()
    start.synchronize()
    with pytest.raises(RuntimeError, match="device 0 and the end event on device 1"):
        start.elapsed_time(end)


@pytest.mark.devices(2)
def test_an_event_cannot_be_recorded_on_another_devices_stream():
    event = torch.devx.Event()
    event.record(torch.devx.current_stream(0))
    with pytest.raises(RuntimeError, match="device 0"):
        event.record(torch.devx.Stream(1))
