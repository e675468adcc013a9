"""Memory history, snapshots in PyTorch's format, the memory timeline and its plot."""
from __future__ import annotations

import gc
import importlib.util
import inspect
import pickle
import textwrap

import pytest

from conftest import assert_child_ok, run_python

MiB = 1 << 20


def _identity(text: str) -> str:
    return text


def _line_of(marker: str) -> int:
    """The line of this file that contains `marker` (where a test allocates what it looks for)."""
    lines = inspect.getsource(inspect.getmodule(_line_of)).splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if marker in line and "_line_of(" not in line]
    assert len(hits) == 1, marker
    return hits[0]


@pytest.fixture
def history(devx):
    import torch

    # Earlier tests' tensors held in reference cycles would otherwise be freed by a collection that
    # lands between a snapshot and the statistics it is checked against.
    gc.collect()
    torch.devx.empty_cache()  # so that the test's allocations make segments of their own
    torch.devx.memory._record_memory_history(max_entries=100_000, clear_history=True)
    yield torch.devx.memory
    torch.devx.memory._record_memory_history(enabled=None, clear_history=True)


def _model_step(torch):
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to("devx")
    x = torch.randn(32, 64, device="devx")
    loss = model(x).square().mean()
    loss.backward()
    return model, loss


def test_snapshot_of_a_model_run_agrees_with_memory_stats(history):
    import torch

    model, loss = _model_step(torch)
    marker = torch.empty(3 * MiB, dtype=torch.uint8, device="devx")  # MARKER-ALLOC
    # Kernels still queued on a stream (DEVX_SIM_ASYNC=1) allocate and free their temporaries.
    torch.devx.synchronize()
    snap = history._snapshot()
    stats = torch.devx.memory_stats(0)
    segs = [s for s in snap["segments"] if s["device"] == 0]
    assert sum(s["total_size"] for s in segs) == stats["reserved_bytes.all.current"]
    assert sum(s["allocated_size"] for s in segs) == stats["allocated_bytes.all.current"]
    assert sum(s["requested_size"] for s in segs) == stats["requested_bytes.all.current"]
    assert len(segs) == stats["segment.all.current"]
    active = [b for s in segs for b in s["blocks"] if b["state"] == "active_allocated"]
    assert len(active) == stats["allocation.all.current"]
    for s in segs:
        # Blocks tile their segment, in address order.
        addr = s["address"]
        for b in s["blocks"]:
            assert b["address"] == addr
            addr += b["size"]
        assert addr == s["address"] + s["total_size"]
        assert s["segment_type"] in ("small", "large")
        if s["segment_type"] == "small":
            assert s["total_size"] == 2 * MiB
            assert all(b["size"] <= MiB for b in s["blocks"] if b["state"] == "active_allocated")
    block = next(b for b in active if b["address"] == marker.data_ptr())
    # A 4 MiB segment (large requests round to 2 MiB); the 1 MiB left over is too small to split off.
    assert block["size"] == 4 * MiB and block["requested_size"] == 3 * MiB
    seg = next(s for s in segs if s["address"] == marker.data_ptr())
    assert seg["segment_type"] == "large" and seg["total_size"] == 4 * MiB and seg["requested_size"] == 3 * MiB
    here = [f for f in block["frames"] if f["filename"].endswith("test_memory_snapshot.py")]
    assert here and here[0]["line"] == _line_of("MARKER-ALLOC")
    assert here[0]["name"] == "test_snapshot_of_a_model_run_agrees_with_memory_stats"
    # The forward pass ran in this thread's Python: the loss carries the helper's frame.
    loss_block = next(b for b in active if b["address"] == loss.untyped_storage().data_ptr())
    assert any(f["name"] == "_model_step" for f in loss_block["frames"])


def test_snapshot_loads_in_torch_memory_viz(history):
    import torch
    from torch.cuda import _memory_viz

    _model_step(torch)
    torch.devx.synchronize()  # the step's frees, once its queued kernels have run (DEVX_SIM_ASYNC=1)
    marker = torch.empty(3 * MiB, dtype=torch.uint8, device="devx")  # VIZ-ALLOC
    line = _line_of("VIZ-ALLOC")
    snap = pickle.loads(pickle.dumps(history._snapshot()))

    segments = _memory_viz.segments(snap, format_flamegraph=_identity)
    seg = next(s for s in snap["segments"] if s["address"] == marker.data_ptr())
    rows = [r for r in segments.splitlines() if r.startswith(f"stream_0;seg_{seg['address']};active_allocated")]
    assert f"test_memory_snapshot.py:{line}:test_snapshot_loads_in_torch_memory_viz" in rows[0]
    assert rows[0].endswith(f" {3 * MiB}") and rows[1].endswith(f"<gaps> {MiB}")

    memory = _memory_viz.memory(snap, format_flamegraph=_identity)
    assert any(f"test_memory_snapshot.py:{line}:" in r and r.endswith(f" {3 * MiB}") for r in memory.splitlines())

    trace = _memory_viz.trace(snap)
    assert "Device 0 ----------------" in trace
    assert "cudaMalloc(" in trace and "3.0MiB]" in trace and "del " in trace
    summary = _memory_viz.segsum(snap)  # asserts its own accounting: blocks must add up
    assert f"segments: {len(snap['segments'])}" in summary

    alloc = next(e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["addr"] == marker.data_ptr())
    assert alloc["size"] == 3 * MiB and alloc["time_us"] > 0
    assert any(f["filename"].endswith("test_memory_snapshot.py") and f["line"] == line for f in alloc["frames"])
    html = _memory_viz.trace_plot(snap)
    assert "snapshot.pickle" in html


def test_trace_records_frees_segments_and_oom(history):
    import torch

    x = torch.empty(5 * MiB, dtype=torch.uint8, device="devx")
    addr = x.data_ptr()
    del x
    torch.devx.empty_cache()
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(1 << 50, dtype=torch.uint8, device="devx")
    trace = history._snapshot()["device_traces"][0]
    actions = [(e["action"], e.get("addr")) for e in trace]
    i = actions.index(("alloc", addr))
    assert actions.index(("free_requested", addr)) > i
    assert actions.index(("free_completed", addr)) > actions.index(("free_requested", addr))
    assert ("segment_free", addr) in actions and ("segment_alloc", addr) in actions
    oom = next(e for e in trace if e["action"] == "oom")
    assert oom["size"] == 1 << 50 and oom["device_free"] > 0 and "addr" not in oom
    from torch.cuda import _memory_viz

    assert "raise OutOfMemoryError" in _memory_viz.trace(history._snapshot())
    # context="all" (the default): frees carry the stack that freed them.
    free = next(e for e in trace if e["action"] == "free_requested" and e["addr"] == addr)
    assert any(f["name"] == "test_trace_records_frees_segments_and_oom" for f in free["frames"])


def test_options_ring_buffer_and_bad_arguments(devx):
    import torch

    mem = torch.devx.memory
    try:
        mem._record_memory_history(max_entries=4, clear_history=True)
        for _ in range(10):
            torch.empty(1024, device="devx")
        trace = mem._snapshot()["device_traces"][0]
        # The newest 4 actions (plus the snapshot's own mark, recorded before it was read).
        assert len(trace) == 4 and [e["action"] for e in trace][-1] == "snapshot"

        mem._record_memory_history(context=None, stacks="python", clear_history=True)
        keep = torch.empty(1024, device="devx")
        assert all(not e["frames"] for e in mem._snapshot()["device_traces"][0])

        mem._record_memory_history(enabled="state", context="state", clear_history=True)
        keep = torch.empty(2048, device="devx")  # STATE-ALLOC
        snap = mem._snapshot()
        assert snap["device_traces"][0] == []
        block = next(b for s in snap["segments"] for b in s["blocks"] if b["address"] == keep.data_ptr())
        assert any(f["line"] == _line_of("STATE-ALLOC") for f in block["frames"])

        mem._record_memory_history(stacks="all", clear_history=True)
        keep = torch.empty(4096, device="devx")
        frames = next(e for e in mem._snapshot()["device_traces"][0] if e["action"] == "alloc")["frames"]
        cpp = [f for f in frames if f["line"] == 0]
        assert cpp and any("libtorch" in f["filename"] for f in cpp)
        # C++ frames come first (innermost), then Python's.
        assert frames.index(cpp[-1]) < min(i for i, f in enumerate(frames) if f["line"] > 0)
        del keep

        for bad in ({"enabled": "sometimes"}, {"context": "most"}, {"stacks": "cpp"}, {"max_entries": 0},
                    {"skip_actions": ["allocate"]}):
            with pytest.raises(ValueError, match=next(iter(bad))):
                mem._record_memory_history(**bad)
    finally:
        mem._record_memory_history(enabled=None, clear_history=True)
    # Off: nothing is recorded any more.
    torch.empty(1024, device="devx")
    assert mem._snapshot()["device_traces"][0] == []


def test_cuda_memory_functions_reach_devx_under_mocking(devx, tmp_path):
    import torch

    try:
        torch.cuda.memory._record_memory_history(max_entries=1000, clear_history=True)
        x = torch.empty(MiB // 2, dtype=torch.uint8, device="cuda")
        path = tmp_path / "snap.pickle"
        torch.cuda.memory._dump_snapshot(str(path))
        with open(path, "rb") as f:
            snap = pickle.load(f)
        assert any(e["action"] == "alloc" and e["addr"] == x.data_ptr() for e in snap["device_traces"][0])
        assert any(s["address"] <= x.data_ptr() < s["address"] + s["total_size"] for s in torch.cuda.memory_snapshot())
        assert torch.cuda.memory._snapshot()["segments"]
    finally:
        torch.cuda.memory._record_memory_history(enabled=None, clear_history=True)
    import torch_devx.memory

    assert torch.devx.memory is torch_devx.memory
    import torch.devx.memory as via_torch

    assert via_torch is torch_devx.memory


FRAGMENT_SCRIPT = textwrap.dedent("""
    import torch, torch_devx
    mem = torch.devx.memory
    mem._record_memory_history()
    K = 256 * 1024
    a, b, c, d = (torch.empty(K, dtype=torch.uint8, device="devx") for _ in range(4))
    del a, c
    tl = mem.memory_timeline()
    last = tl[-1]
    print("ROW", last.action, last.allocated, last.peak_allocated, last.reserved, last.largest_free,
          last.fragmentation, round(last.fragmentation_ratio, 4))
    print("ACTIONS", ",".join(e.action for e in tl))
    print("ALLOCS", [e.allocated for e in tl if e.action == "alloc"])
    mem.plot_memory_timeline("{html}")
""")


def test_timeline_live_peak_and_fragmentation(tmp_path):
    html_path = tmp_path / "timeline.html"
    proc = run_python(FRAGMENT_SCRIPT.replace("{html}", str(html_path)))
    assert_child_ok(proc)
    K = 256 * 1024
    row = next(line for line in proc.stdout.splitlines() if line.startswith("ROW")).split()
    action, allocated, peak, reserved, largest, frag = row[1], *map(int, row[2:7])
    # One 2 MiB small-pool segment holds a b c d and a 1 MiB tail; a and c are free holes.
    assert (action, allocated, peak, reserved, largest) == ("free_completed", 2 * K, 4 * K, 2 * MiB, MiB)
    assert frag == 2 * K and float(row[7]) == pytest.approx(2 * K / (2 * MiB - 2 * K), abs=1e-4)
    actions = next(line for line in proc.stdout.splitlines() if line.startswith("ACTIONS")).split()[1]
    assert actions.startswith("segment_alloc,alloc,alloc,alloc,alloc,free_requested,free_completed")
    assert "ALLOCS [262144, 524288, 786432, 1048576]" in proc.stdout
    page = html_path.read_text()
    assert "<svg" in page and page.count("<polyline") == 2 and "devx:0" in page
    assert "peak allocated 1.0 MiB" in page and "peak reserved 2.0 MiB" in page
    # Self-contained: nothing fetched from anywhere.
    assert "https://" not in page and "src=" not in page and "<script" not in page


def test_plot_without_history_or_with_bad_path(devx, tmp_path):
    import torch

    mem = torch.devx.memory
    mem._record_memory_history(enabled=None, clear_history=True)
    with pytest.raises(RuntimeError, match="_record_memory_history"):
        mem.plot_memory_timeline(str(tmp_path / "t.html"))
    try:
        mem._record_memory_history(clear_history=True)
        keep = torch.empty(1024, device="devx")
        with pytest.raises(ValueError, match=r"\.html or \.png"):
            mem.plot_memory_timeline(str(tmp_path / "t.svg"))
        png = tmp_path / "t.png"
        if importlib.util.find_spec("matplotlib") is None:
            with pytest.raises(ImportError, match="matplotlib"):
                mem.plot_memory_timeline(str(png))
        else:
            mem.plot_memory_timeline(str(png))
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        del keep
    finally:
        mem._record_memory_history(enabled=None, clear_history=True)


def test_timeline_markers_and_what_is_live_at_the_peak(history, tmp_path):
    import torch

    model = torch.nn.Linear(8, 8).to("devx")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history.mark("start")
    with torch.profiler.record_function("phase big"):
        big = [torch.empty(MiB, device="devx") for _ in range(3)]  # BIG
        del big
    model(torch.ones(2, 8, device="devx")).sum().backward()
    opt.step()
    history.mark("end")

    markers = [(m.kind, m.name) for m in history.memory_markers()]
    assert markers[0] == ("mark", "start") and markers[-1] == ("mark", "end"), markers
    assert ("begin", "phase big") in markers and ("end", "phase big") in markers
    assert any(kind == "begin" and name.startswith("Optimizer.step#SGD") for kind, name in markers), markers
    times = [m.time_us for m in history.memory_markers()]
    assert times == sorted(times)

    peak = history.memory_peak()
    assert peak.phase == "phase big"
    top = peak.live[0]
    assert top.where.endswith(f"test_memory_snapshot.py:{_line_of('# BIG')}") and top.count == 3, peak.live
    assert top.bytes == 3 * 4 * MiB and peak.allocated >= top.bytes
    page = history.plot_memory_timeline(str(tmp_path / "t.html"))
    text = open(page, encoding="utf-8").read()
    assert "phase big" in text and f"test_memory_snapshot.py:{_line_of('# BIG')}" in text
