"""torch.profiler on devx: device activities (kernels, copies) with device times from the vendor's
stream events, linked to the aten ops that launched them, memory events, schedules, traces, and
the legacy (non-kineto) path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch_devx.testing
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from conftest import REPO, assert_child_ok, child_env, needs_profiler_device_rows, run_python

needs_device_rows = needs_profiler_device_rows()

DEVICE_ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def kernel_rows(prof) -> dict[str, object]:
    return {e.key: e for e in prof.key_averages() if e.key.startswith(torch_devx_vendor() + "::")}


def torch_devx_vendor() -> str:
    import torch_devx

    return torch_devx.vendor


def trace_events(prof, tmp_path: Path) -> list[dict]:
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


@needs_device_rows
def test_kernels_have_device_time_and_belong_to_their_ops(devx):
    x = torch.randn(96, 96, device="devx")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        y = torch.mm(x, x)
        z = torch.relu(y)
    vendor = devx.vendor
    ops = {e.key: e for e in prof.key_averages()}
    assert ops[f"{vendor}::mm"].self_device_time_total > 0
    assert ops[f"{vendor}::relu"].self_device_time_total > 0
    # The op that launched a kernel carries its device time; ops that launched none carry none.
    assert ops["aten::mm"].device_time_total == pytest.approx(ops[f"{vendor}::mm"].device_time_total)
    assert ops["aten::relu"].device_time_total == pytest.approx(ops[f"{vendor}::relu"].device_time_total)
    assert ops[f"{vendor}::mm"].count == 1
    kernels = [e for e in prof.events() if e.name == f"{vendor}::mm"]
    assert kernels and all(e.device_type == DeviceType.PrivateUse1 and e.device_index == 0 for e in kernels)
    del z


@needs_device_rows
def test_table_sorted_by_device_time_lists_the_heavy_kernel_first(devx):
    # The mm does 512 times the tanh's work: a loaded machine slowing one kernel leaves the order.
    x = torch.randn(512, 512, device="devx")
    small = torch.randn(4, device="devx")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        for _ in range(3):
            x = torch.mm(x, x).tanh()
        small.add_(1)
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=4)
    first_row = table.splitlines()[3]
    assert first_row.split()[0] in ("aten::mm", f"{devx.vendor}::mm"), table
    assert "Self DEVX" in table


@pytest.mark.devices(2)
@needs_device_rows
def test_chrome_trace_has_device_rows_flows_and_kernels_inside_their_ops(devx, tmp_path):
    x = torch.randn(64, 64, device="devx")
    side = torch.devx.Stream()
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        torch.mm(x, x)
        with torch.devx.stream(side):
            torch.sigmoid(x)
        x.to("devx:1").exp()
    events = trace_events(prof, tmp_path)
    kernels = {e["name"]: e for e in events if e.get("cat") == "kernel"}
    vendor = devx.vendor
    mm, sig, exp = kernels[f"{vendor}::mm"], kernels[f"{vendor}::sigmoid"], kernels[f"{vendor}::exp"]
    # Device rows: pid is the device, tid the stream.
    assert (mm["pid"], mm["tid"]) == (0, 0)
    assert sig["pid"] == 0 and sig["tid"] == side.stream_id != 0
    assert exp["pid"] == 1
    ops = {e["name"]: e for e in events if e.get("cat") == "cpu_op"}
    for kernel, op in ((mm, ops["aten::mm"]), (sig, ops["aten::sigmoid"]), (exp, ops["aten::exp"])):
        assert kernel["dur"] > 0
        assert kernel["args"]["External id"] == op["args"]["External id"]
        # Synchronous vendor: the kernel runs while its op runs. Issued ops (DEVX_SIM_ASYNC=1) run
        # their kernels later, on the stream's thread.
        if not torch_devx.testing.async_streams():
            assert op["ts"] <= kernel["ts"] and kernel["ts"] + kernel["dur"] <= op["ts"] + op["dur"] + 1
    flows = [e for e in events if e.get("cat") == "ac2g"]
    assert {f["id"] for f in flows} >= {mm["args"]["correlation"], sig["args"]["correlation"]}
    # Each device's process is named once, after the device.
    names = [(e["pid"], e["args"]["name"]) for e in events if e.get("ph") == "M" and e.get("name") == "process_name"]
    assert sorted(n for n in names if n[0] in (0, 1)) == [(0, "devx 0"), (1, "devx 1")]


@needs_device_rows
def test_launches_start_the_flows_that_device_activities_end(devx, tmp_path):
    x = torch.randn(64, 64, device="devx")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        torch.mm(x, x).relu().cpu()
    events = trace_events(prof, tmp_path)
    work = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "privateuse1_runtime"}
    starts = {e["id"]: e for e in events if e.get("cat") == "ac2g" and e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e.get("cat") == "ac2g" and e["ph"] == "f"}
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
    assert len(work) == 3 and set(starts) == set(ends) == set(launches) == {e["args"]["correlation"] for e in work}
    for e in work:
        launch = launches[e["args"]["correlation"]]
        start, end = starts[e["args"]["correlation"]], ends[e["args"]["correlation"]]
        # The arrow leaves the launch on the host thread and lands on the work's device row.
        assert (start["pid"], start["tid"], start["ts"]) == (launch["pid"], launch["tid"], launch["ts"])
        assert (end["pid"], end["tid"], end["ts"]) == (e["pid"], e["tid"], e["ts"])
        assert launch["name"] == ("devxMemcpyAsync" if e["cat"] == "gpu_memcpy" else "devxLaunchKernel")
        # The launch is a call made inside the op that launched the work (give or take the 1 us
        # torch's op clock may differ from the host clock by).
        op = ops[e["args"]["External id"]]
        assert launch["args"]["External id"] == e["args"]["External id"]
        assert (launch["pid"], launch["tid"]) == (op["pid"], op["tid"])
        assert op["ts"] - 1 <= launch["ts"] and launch["ts"] + launch["dur"] <= op["ts"] + op["dur"] + 1
    launch_rows = {e.name: e for e in prof.events() if e.name.startswith("devx")}
    assert launch_rows["devxLaunchKernel"].cpu_parent.name in ("aten::mm", "aten::relu")
    assert launch_rows["devxLaunchKernel"].device_time_total == 0


@needs_device_rows
def test_same_device_copies_are_device_activities(devx, tmp_path):
    a = torch.randn(1 << 16, device="devx")
    vendor = devx.vendor
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        a.clone()
        a.to(torch.float16)
        a[::2].contiguous()
    events = trace_events(prof, tmp_path)
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    # A plain byte move is a memcpy, as cudaMemcpyAsync DtoD is; a cast or a strided gather is a kernel.
    assert [(e["name"], e["args"]["bytes"]) for e in copies] == [("Memcpy DtoD (devx -> devx)", 4 << 16)]
    assert [e["name"] for e in kernels] == [f"{vendor}::copy_"] * 2
    assert all(e["dur"] > 0 for e in copies + kernels)
    rows = {e.key: e for e in prof.key_averages()}
    for op in ("aten::clone", "aten::to", "aten::contiguous"):
        assert rows[op].device_time_total > 0, op
    assert rows[f"{vendor}::copy_"].count == 2


@needs_device_rows
def test_copies_are_memcpy_activities_with_bytes(devx, tmp_path):
    host = torch.randn(1000)
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        d = host.to("devx")
        back = d.cpu()
    events = trace_events(prof, tmp_path)
    copies = {e["name"]: e for e in events if e.get("cat") == "gpu_memcpy"}
    assert copies["Memcpy HtoD (host -> devx)"]["args"]["bytes"] == 4000
    assert copies["Memcpy DtoH (devx -> host)"]["args"]["bytes"] == 4000
    torch.testing.assert_close(back, host)


def test_profile_memory_reports_devx_allocations(devx):
    with profile(activities=DEVICE_ACTIVITIES, profile_memory=True) as prof:
        a = torch.empty(1 << 20, dtype=torch.uint8, device="devx")
        del a
    rows = {e.key: e for e in prof.key_averages()}
    assert rows["aten::empty"].device_memory_usage == 1 << 20
    memory = [e for e in prof.events() if e.name == "[memory]"]
    assert any(e.device_memory_usage == -(1 << 20) for e in memory)


@pytest.mark.devices(2)
def test_memory_events_of_devx_are_in_the_trace(devx, tmp_path):
    with profile(activities=DEVICE_ACTIVITIES, profile_memory=True) as prof:
        a = torch.empty(1 << 20, dtype=torch.uint8, device="devx:1")
        del a
    events = trace_events(prof, tmp_path)
    memory = [e["args"] for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 20]
    assert {(m["Device Id"], m["Bytes"]) for m in memory} == {(1, 1 << 20), (1, -(1 << 20))}


def test_kernel_allocations_stay_with_their_op(devx):
    x = torch.randn(128, 128, device="devx")
    with profile(activities=DEVICE_ACTIVITIES, profile_memory=True) as prof:
        y = torch.mm(x, x)
    rows = {e.key: e for e in prof.key_averages()}
    assert rows["aten::mm"].self_device_memory_usage == 128 * 128 * 4
    del y


@needs_device_rows
def test_the_simulators_own_aten_calls_are_not_profiled(devx):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)).to("devx")
    x = torch.randn(2, 3, 8, 8, device="devx")
    model(x).sum().backward()
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        model(x).sum().backward()
    devx_ops = ("aten::convolution_overrideable", "aten::convolution_backward_overrideable",
                "aten::native_batch_norm", "aten::native_batch_norm_backward")
    events = prof.events()
    found = {e.name for e in events if e.name in devx_ops}
    assert found == set(devx_ops)
    for e in events:
        if e.name in devx_ops:
            # Only the op's launches remain under it, as on CUDA: the CPU kernels' own ops (batch
            # norm's backward multiplies, mkldnn convolutions) are not the program's.
            assert {c.name for c in e.cpu_children} <= {"devxLaunchKernel"}, (e.name, [c.name for c in e.cpu_children])
            assert e.device_time_total > 0
    assert not [e.name for e in events if "mkldnn" in e.name]


@needs_device_rows
def test_record_function_nesting_rolls_device_time_up(devx):
    x = torch.randn(128, 128, device="devx")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        with record_function("outer"):
            with record_function("inner"):
                torch.mm(x, x)
            torch.relu(x)
    rows = {e.key: e for e in prof.key_averages()}
    vendor = devx.vendor
    inner = rows["inner"].device_time_total
    assert inner == pytest.approx(rows[f"{vendor}::mm"].device_time_total)
    assert rows["outer"].device_time_total == pytest.approx(inner + rows[f"{vendor}::relu"].device_time_total)


@needs_device_rows
def test_group_by_input_shape(devx):
    a = torch.randn(8, 8, device="devx")
    b = torch.randn(32, 32, device="devx")
    with profile(activities=DEVICE_ACTIVITIES, record_shapes=True) as prof:
        torch.mm(a, a)
        torch.mm(b, b)
        torch.mm(b, b)
    mm = [e for e in prof.key_averages(group_by_input_shape=True) if e.key == "aten::mm"]
    shapes = {str(e.input_shapes): e for e in mm}
    assert shapes["[[8, 8], [8, 8]]"].count == 1
    assert shapes["[[32, 32], [32, 32]]"].count == 2
    assert all(e.device_time_total > 0 for e in mm)


@needs_device_rows
def test_with_stack_attributes_device_time_to_the_python_caller(devx):
    x = torch.randn(16, device="devx")

    def caller_of_exp() -> torch.Tensor:
        return torch.exp(x)

    with profile(activities=DEVICE_ACTIVITIES, with_stack=True) as prof:
        caller_of_exp()
    frames = [e for e in prof.events() if "test_profiler.py" in e.name and "caller_of_exp" in e.name]
    assert frames, sorted({e.name for e in prof.events()})
    assert frames[0].device_time_total > 0


def scheduled_traces(repeat: int, steps: int) -> list:
    """The traces on_trace_ready got from `steps` profiled mm steps under schedule(wait=1,
    warmup=1, active=2, repeat=repeat)."""
    x = torch.randn(32, 32, device="devx")
    traces = []
    with profile(activities=DEVICE_ACTIVITIES, schedule=schedule(wait=1, warmup=1, active=2, repeat=repeat),
                 on_trace_ready=traces.append) as prof:
        for _ in range(steps):
            torch.mm(x, x)
            prof.step()
    return traces


@needs_device_rows
def test_schedule_records_only_active_steps(devx):
    traces = scheduled_traces(repeat=1, steps=6)
    assert len(traces) == 1
    rows = {e.key: e for e in traces[0].key_averages()}
    assert rows[f"{devx.vendor}::mm"].count == 2


# torch warns that each cycle's events replace the last's, which is what this test relies on.
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
@needs_device_rows
def test_schedule_with_repeats_hands_over_each_cycle(devx):
    traces = scheduled_traces(repeat=3, steps=14)
    assert len(traces) == 3
    for trace in traces:
        rows = {e.key: e for e in trace.key_averages()}
        assert rows[f"{devx.vendor}::mm"].count == 2
        assert rows["aten::mm"].device_time_total > 0


def test_cpu_only_profile_records_no_device_activity_and_closes_the_gate(devx, tmp_path):
    x = torch.randn(32, device="devx")
    with profile(activities=DEVICE_ACTIVITIES):
        x.exp()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x.exp()
        # Ops keep their fast path: nothing records spans for a CPU-only profile.
        assert not devx._C._diag_gate_open()
    events = trace_events(prof, tmp_path)
    assert not [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")]
    # The gate closes at the first op after the recording stopped.
    x.exp()
    assert not devx._C._diag_gate_open()


@needs_device_rows
def test_an_op_that_raises_while_profiled_leaves_the_profiler_usable(devx):
    a = torch.randn(3, 4, device="devx")
    with profile(activities=DEVICE_ACTIVITIES):
        with pytest.raises(RuntimeError):
            torch.mm(a, a)
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        torch.mm(a, a.t())
    assert {e.key for e in prof.key_averages()} >= {"aten::mm", f"{devx.vendor}::mm"}


@needs_device_rows
def test_backward_kernels_are_recorded_on_the_autograd_thread(devx):
    lin = torch.nn.Linear(16, 16).to("devx")
    x = torch.randn(4, 16, device="devx")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        lin(x).sum().backward()
    rows = {e.key: e for e in prof.key_averages()}
    vendor = devx.vendor
    assert rows[f"{vendor}::addmm"].count == 1
    assert rows[f"{vendor}::mm"].count >= 1  # weight gradient
    backward = [e for e in prof.events() if e.name.startswith("autograd::engine") and e.device_time_total > 0]
    assert backward


@needs_device_rows
def test_cuda_activity_under_mocking_profiles_devx(devx):
    x = torch.randn(64, 64).cuda()
    assert ProfilerActivity.CUDA in torch.profiler.supported_activities()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        torch.mm(x, x)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=3)
    assert f"{devx.vendor}::mm" in table
    assert {e.key: e for e in prof.key_averages()}["aten::mm"].device_time_total > 0


def test_legacy_profiler_times_ops_with_devx_events(devx):
    x = torch.randn(128, 128, device="devx")
    with torch.autograd.profiler.profile(use_device="devx", use_kineto=False) as prof:
        torch.mm(x, x)
    rows = {e.key: e for e in prof.key_averages()}
    assert rows["aten::mm"].device_time_total > 0


def test_cpu_only_and_legacy_profiles_show_only_the_programs_ops():
    # In a fresh process, so no earlier profile with device activities has loaded the plugin.
    proc = run_python(
        """
        import torch, torch_devx
        from torch.profiler import profile, ProfilerActivity
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)).to("devx")
        x = torch.randn(2, 3, 8, 8, device="devx")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(x).sum().backward()
        with torch.autograd.profiler.profile(use_kineto=False) as legacy:
            model(x).sum().backward()
        for names in ({e.name for e in prof.events()}, {e.name for e in legacy.function_events}):
            # The op itself is there; the simulator's CPU kernels' own ops (mkldnn convolution,
            # batch norm's backward reductions) are not.
            assert "aten::convolution_overrideable" in names, sorted(names)
            assert not [n for n in names if "mkldnn" in n], sorted(names)
        print("ok")
        """
    )
    assert_child_ok(proc)
    assert "ok" in proc.stdout


@needs_device_rows
def test_async_vendor_device_times_come_from_the_stream():
    proc = run_python(
        """
        import time
        import torch, torch_devx, torch_devx.testing
        from torch.profiler import profile, ProfilerActivity
        x = torch.randn(1024, 1024, device="devx")
        torch.mm(x, x).cpu()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            # Held, the stream starts the kernel only after the op has returned (and the stream's
            # thread computes nothing while the host issues); 50 ms later, so that the order
            # shows through the clocks the profiler converts between (microseconds apart).
            with torch_devx.testing.hold_stream():
                y = torch.mm(x, x)
                time.sleep(0.05)
            y.cpu()
        rows = {e.key: e for e in prof.key_averages()}
        kernel, op = rows[torch_devx.vendor + "::mm"], rows["aten::mm"]
        assert kernel.device_time_total > 5 * op.cpu_time_total, (kernel.device_time_total, op.cpu_time_total)
        assert op.device_time_total == kernel.device_time_total
        [kernel_event] = [e for e in prof.events() if e.key == torch_devx.vendor + "::mm"]
        [op_event] = [e for e in prof.events() if e.key == "aten::mm"]
        assert kernel_event.time_range.start >= op_event.time_range.end + 25_000, (
            kernel_event.time_range.start, op_event.time_range.end)
        print("ok")
        """,
        DEVX_SIM_ASYNC="1",
    )
    assert_child_ok(proc)
    assert "ok" in proc.stdout


@needs_device_rows
def test_resnet_profiling_example_runs_and_writes_a_trace(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "profile_resnet.py"), "--out", str(tmp_path),
                           "--steps", "3"], env=child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cpu_sim::convolution_overrideable" in proc.stdout
    assert "aten::native_batch_norm" in proc.stdout
    traces = list(tmp_path.glob("trace_step*.json"))
    assert len(traces) == 1
    events = json.loads(traces[0].read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert any(e["name"] == "cpu_sim::convolution_backward_overrideable" and e["dur"] > 0 for e in kernels)
