"""torch.distributed on devx: the `devx` process group (gloo engine on cpu_sim).

Two-rank scenarios run as two child processes (RANK/WORLD_SIZE/MASTER_* in their environment,
short process-group timeouts); each child asserts what it sees and exits non-zero otherwise.
One-rank checks (backend selection, errors raised before any data moves) run in-process.
"""
from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from conftest import REPO, assert_child_ok, child_env, describe, needs_profiler_device_rows, run_many

PRELUDE = """
import datetime, os, sys, time
import torch
import torch_devx
import torch.distributed as dist
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
torch.devx.set_device(rank)
dev = torch.device("devx", rank)
dist.init_process_group("devx", timeout=datetime.timedelta(seconds=float(os.environ["PG_TIMEOUT"])))
def close(got, want):
    assert got.device == dev, got.device
    torch.testing.assert_close(got.cpu(), want)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(body: str, world: int = 2, timeout_s: float = 10, **env: str) -> list[subprocess.CompletedProcess]:
    port = str(free_port())
    jobs = [(PRELUDE + body, dict(RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                                  PG_TIMEOUT=str(timeout_s), **env))
            for r in range(world)]
    return run_many(jobs, timeout=90)


EXPECT_MISMATCH = """
def expect_mismatch(fn, *parts):
    try:
        fn()
    except dist.DistBackendError as e:
        msg = str(e)
        assert "different collective calls" in msg, msg
        for p in parts:
            assert p in msg, (p, msg)
        return
    raise AssertionError("no error")
"""

# Under DEVX_SIM_SANITIZE, gloo's threads read and write devx memory while collectives run: that
# is device work, not host code touching device memory; and detection is still on afterwards.
SANITIZED_TAIL = """
t = torch.ones(4, device=dev)
import ctypes
try:
    ctypes.string_at(t.data_ptr(), 4)
    print("UNDETECTED")
except RuntimeError as e:
    print("DETECTED", "host code read device memory" in str(e))
"""


def run_two_ranks_sanitized(body: str, sanitize: str) -> None:
    """Runs `body` on two ranks with DEVX_SIM_SANITIZE=`sanitize`; each must print OK, and with the
    sanitizer on it must still catch host code reading device memory afterwards."""
    if sanitize == "1":
        body += SANITIZED_TAIL
    for proc in run_ranks(body, DEVX_SIM_SANITIZE=sanitize):
        assert_child_ok(proc)
        assert "OK" in proc.stdout
        assert ("DETECTED True" in proc.stdout) == (sanitize == "1")


@pytest.mark.parametrize("sanitize", ["0", "1"])
def test_collectives_and_async_work_on_devx_tensors(sanitize):
    body = """
base = torch.arange(4.0) + rank                        # rank 0: 0 1 2 3, rank 1: 1 2 3 4
both = [torch.arange(4.0), torch.arange(4.0) + 1]
for op, want in [(dist.ReduceOp.SUM, both[0] + both[1]), (dist.ReduceOp.AVG, (both[0] + both[1]) / 2),
                 (dist.ReduceOp.MAX, both[1]), (dist.ReduceOp.MIN, both[0]),
                 (dist.ReduceOp.PRODUCT, both[0] * both[1])]:
    t = base.to(dev)
    ptr = t.data_ptr()
    dist.all_reduce(t, op=op)
    close(t, want)
    assert t.data_ptr() == ptr  # in place, on the devx memory itself
ints = torch.full((5,), rank + 2, dtype=torch.int64, device=dev)
dist.all_reduce(ints)
close(ints, torch.full((5,), 5, dtype=torch.int64))

t = torch.full((3,), float(rank + 1), device=dev)
dist.broadcast(t, src=1)
close(t, torch.full((3,), 2.0))

outs = [torch.empty(4, device=dev) for _ in range(world)]
dist.all_gather(outs, base.to(dev))
for r in range(world):
    close(outs[r], both[r])
out = torch.empty(8, device=dev)
dist.all_gather_into_tensor(out, base.to(dev))
close(out, torch.cat(both))

inputs = [base.to(dev) + 10 * j for j in range(world)]
out = torch.empty(4, device=dev)
dist.reduce_scatter(out, inputs)
close(out, both[0] + both[1] + 20 * rank)
out = torch.empty(2, device=dev)
dist.reduce_scatter_tensor(out, base.to(dev))
close(out, (both[0] + both[1])[2 * rank:2 * rank + 2])
dist.reduce_scatter_tensor(out, base.to(dev), op=dist.ReduceOp.AVG)
close(out, ((both[0] + both[1]) / 2)[2 * rank:2 * rank + 2])

t = base.to(dev)
dist.reduce(t, dst=0)
if rank == 0:
    close(t, both[0] + both[1])

gathered = [torch.empty(4, device=dev) for _ in range(world)] if rank == 0 else None
dist.gather(base.to(dev), gathered, dst=0)
if rank == 0:
    for r in range(world):
        close(gathered[r], both[r])

out = torch.empty(3, device=dev)
dist.scatter(out, [torch.full((3,), 10.0 + r, device=dev) for r in range(world)] if rank == 1 else None, src=1)
close(out, torch.full((3,), 10.0 + rank))

outs = [torch.empty(2, device=dev) for _ in range(world)]
dist.all_to_all(outs, [torch.full((2,), 10.0 * rank + j, device=dev) for j in range(world)])
for j in range(world):
    close(outs[j], torch.full((2,), 10.0 * j + rank))
out = torch.empty(4, device=dev)
dist.all_to_all_single(out, base.to(dev))
close(out, torch.cat([both[0][2 * rank:2 * rank + 2], both[1][2 * rank:2 * rank + 2]]))
# Uneven splits: rank 0 sends 1 row to 0 and 2 to 1; rank 1 sends 3 to 0 and 4 to 1.
send = [[1, 2], [3, 4]][rank]
recv = [[1, 3], [2, 4]][rank]
inp = torch.full((sum(send), 2), float(rank), device=dev)
out = torch.empty(sum(recv), 2, device=dev)
dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)
close(out, torch.cat([torch.full((recv[0], 2), 0.0), torch.full((recv[1], 2), 1.0)]))

if rank == 0:
    dist.send(torch.full((5,), 7.0, device=dev), dst=1)
else:
    t = torch.zeros(5, device=dev)
    dist.recv(t, src=0)
    close(t, torch.full((5,), 7.0))

a, b = base.to(dev), torch.ones(2, device=dev) * (rank + 1)
dist.all_reduce_coalesced([a, b])
close(a, both[0] + both[1])
close(b, torch.full((2,), 3.0))

# CPU tensors go through the same group (to gloo as they are).
c = torch.ones(2) * (rank + 1)
dist.all_reduce(c)
torch.testing.assert_close(c, torch.full((2,), 3.0))
dist.barrier()

# Asynchronous work: wait(), futures and results hold the caller's devx tensors.
t = torch.full((1 << 18,), float(rank + 1), device=dev)
work = dist.all_reduce(t, async_op=True)
future = work.get_future()
doubled = future.then(lambda f: f.value()[0] * 2)
work.wait()
assert work.is_completed()
close(t[:4], torch.full((4,), 3.0))
value = future.wait()
assert value[0].device == dev and value[0].data_ptr() == t.data_ptr()
assert work.result()[0].data_ptr() == t.data_ptr()
close(doubled.wait()[:4], torch.full((4,), 6.0))

# A tensor dropped while its collective runs keeps its memory until the engine is done.
tmp = torch.full((1 << 18,), float(rank), device=dev)
work = dist.all_reduce(tmp, async_op=True)
view = tmp[:4]
del tmp
work.wait()
close(view, torch.full((4,), 1.0))
works = [dist.broadcast(torch.full((8,), float(rank), device=dev), src=0, async_op=True) for _ in range(3)]
for w in works:
    w.wait()
    close(w.result()[0], torch.zeros(8))
print("OK", rank)
"""
    run_two_ranks_sanitized(body, sanitize)


def test_mismatched_sizes_dtypes_and_ops_are_clear_errors_and_the_group_survives():
    body = EXPECT_MISMATCH + """
expect_mismatch(lambda: dist.all_reduce(torch.ones(1000 * (rank + 1), device=dev)),
                "rank 0: all_reduce(Float[1000]", "rank 1: all_reduce(Float[2000]")
expect_mismatch(lambda: dist.all_reduce(torch.ones(10, device=dev, dtype=[torch.float32, torch.float64][rank])),
                "Float[10]", "Double[10]")
expect_mismatch(lambda: dist.all_reduce(torch.ones(10, device=dev)) if rank == 0
                else dist.broadcast(torch.ones(10, device=dev), src=0),
                "rank 0: all_reduce", "rank 1: broadcast")
expect_mismatch(lambda: dist.all_gather([torch.empty(3 + rank, device=dev) for _ in range(2)],
                                        torch.ones(3 + rank, device=dev)),
                "all_gather(Float[3], Float[3]", "all_gather(Float[4], Float[4]")
t = torch.ones(4, device=dev)
dist.all_reduce(t)
close(t, torch.full((4,), 2.0))
print("OK", rank)
"""
    for proc in run_ranks(body):
        assert_child_ok(proc)


@pytest.mark.parametrize("sanitize", ["0", "1"])
def test_repeated_calls_run_on_their_prediction_and_mismatches_stay_clear_errors(sanitize):
    body = EXPECT_MISMATCH + """
from torch_devx.distributed import call_check_counts as counts
def repeat(n, size=1000):
    for _ in range(n):
        t = torch.full((size,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        close(t, torch.full((size,), 3.0))
def expect_confirmed_mismatch(fn, *parts):
    before = counts()
    expect_mismatch(fn, *parts)
    assert counts()["confirmations"] == before["confirmations"] + 1, (before, counts())

# The first calls are checked by a round each; once the same call has followed itself twice it
# runs on its prediction, with no round.
repeat(6)
assert counts() == {"check_rounds": 3, "predicted": 3, "confirmations": 0}, counts()

# A rank that calls something else still makes the others raise, naming every rank's call, and
# the group goes on.
expect_confirmed_mismatch(lambda: dist.all_reduce(torch.ones(1000 * (rank + 1), device=dev)),
                          "rank 0: all_reduce(Float[1000], op=SUM)", "rank 1: all_reduce(Float[2000], op=SUM)")
repeat(5)
expect_confirmed_mismatch(lambda: dist.all_reduce(torch.ones(1000, device=dev, dtype=[torch.float32, torch.float64][rank])),
                          "Float[1000]", "Double[1000]")
repeat(5)
expect_confirmed_mismatch(lambda: dist.all_reduce(torch.ones(1000, device=dev)) if rank == 0
                          else dist.broadcast(torch.ones(10, device=dev), src=0),
                          "rank 0: all_reduce(Float[1000]", "rank 1: broadcast(Float[10], src=0)")
repeat(5)
assert counts()["check_rounds"] == 3 + 3 * 3, counts()  # after each error: forgotten, learnt again

# A first element that looks like another rank's doubt is confirmed, and is the right value.
before = counts()
t = torch.full((1000,), float(rank + 1), device=dev)
t[0] = float("nan")
dist.all_reduce(t)
assert t[0].isnan().item()
close(t[1:], torch.full((999,), 3.0))
assert counts()["confirmations"] == before["confirmations"] + 1
assert counts()["predicted"] == before["predicted"] + 1

# Every rank changing its call is no error: each runs the prediction blind, then its own call.
t = torch.full((500,), float(rank + 1), device=dev)
dist.all_reduce(t)
close(t, torch.full((500,), 3.0))

# Other ops and dtypes that run on their prediction: a MAX that legitimately holds +inf, MIN,
# PRODUCT, AVG, integer MAX/MIN.
for op, dtype, vals, want in [
        (dist.ReduceOp.MAX, torch.float32, [1.0, 2.0], 2.0), (dist.ReduceOp.MIN, torch.float64, [1.0, 2.0], 1.0),
        (dist.ReduceOp.PRODUCT, torch.float32, [3.0, 2.0], 6.0), (dist.ReduceOp.AVG, torch.bfloat16, [1.0, 2.0], 1.5),
        (dist.ReduceOp.MAX, torch.int32, [7, -2], 7), (dist.ReduceOp.MIN, torch.int64, [7, -2], -2)]:
    before = counts()
    for i in range(5):
        t = torch.full((16,), vals[rank], dtype=dtype, device=dev)
        if i == 4 and op == dist.ReduceOp.MAX and dtype.is_floating_point:
            t[0] = float("inf")
        dist.all_reduce(t, op=op)
        expect = torch.full((16,), want, dtype=dtype)
        if i == 4 and op == dist.ReduceOp.MAX and dtype.is_floating_point:
            expect[0] = float("inf")
        close(t, expect)
    assert counts()["predicted"] >= before["predicted"] + 2, (op, dtype, before, counts())

# Asynchronous predicted calls: futures, then(), a doubted value through a future, and a
# mismatch through a future.
for _ in range(4):
    ts = [torch.full((256,), float(rank + 1), device=dev) for _ in range(3)]
    futures = [dist.all_reduce(t, async_op=True).get_future() for t in ts]
    doubled = futures[-1].then(lambda f: f.value()[0] * 2)
    for f in futures:
        f.wait()
    for t in ts:
        close(t, torch.full((256,), 3.0))
    close(doubled.wait(), torch.full((256,), 6.0))
t = torch.full((256,), float(rank + 1), device=dev)
t[0] = float("nan")
future = dist.all_reduce(t, async_op=True).get_future()
future.wait()
close(t[1:], torch.full((255,), 3.0))
repeat(4, size=256)
# What a rank writes into a finished call's tensor before its next call (DDP's next gradients)
# does not change whether that call is confirmed: every rank decides alike.
t = torch.full((256,), float(rank + 1), device=dev)
dist.all_reduce(t, async_op=True).get_future().wait()
if rank == 0:
    t[0] = float("nan")
repeat(2, size=256)
# A doubted call is confirmed as soon as it completes, not at the rank's next call on its group:
# here rank 0 goes to another group first while rank 1 waits for the confirmation.
other = dist.new_group(backend="devx")
repeat(4, size=64)
t = torch.full((64,), float(rank + 1), device=dev)
t[0] = float("nan")
work = dist.all_reduce(t, async_op=True)
x = torch.ones(4, device=dev)
if rank == 0:
    dist.all_reduce(x, group=other)
    work.wait()
else:
    work.wait()
    dist.all_reduce(x, group=other)
close(x, torch.full((4,), 2.0))
close(t[1:], torch.full((63,), 3.0))
try:
    future = dist.all_reduce(torch.ones(256 * (rank + 1), device=dev), async_op=True).get_future()
    future.wait()
    raise AssertionError("no error")
except dist.DistBackendError as e:
    assert "rank 1: all_reduce(Float[512]" in str(e), e
repeat(3, size=256)
print("OK", rank)
"""
    run_two_ranks_sanitized(body, sanitize)


def test_three_ranks_one_of_which_leaves_the_predicted_call():
    body = """
from torch_devx.distributed import call_check_counts as counts
def repeat(n):
    for _ in range(n):
        t = torch.full((300,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        close(t, torch.full((300,), 6.0))
repeat(5)
assert counts()["predicted"] == 2, counts()
try:
    dist.all_reduce(torch.ones(300 if rank < 2 else 301, device=dev))
    raise AssertionError("no error")
except dist.DistBackendError as e:
    msg = str(e)
    assert "rank 0: all_reduce(Float[300]" in msg and "rank 2: all_reduce(Float[301]" in msg, msg
repeat(5)
print("OK", rank)
"""
    # Three ranks, each on its own device; they start slowly on two cores.
    for proc in run_ranks(body, world=3, timeout_s=30, DEVX_SIM_DEVICES="3"):
        assert_child_ok(proc)
        assert "OK" in proc.stdout


@pytest.mark.parametrize("warm_calls", [0, 4])
def test_a_rank_that_dies_is_a_clear_error_on_the_others(warm_calls):
    # After 4 repeats the all_reduce that meets the dead rank runs on its prediction.
    body = f"""
dist.barrier()
for _ in range({warm_calls}):
    dist.all_reduce(torch.ones(1 << 16, device=dev))
predicted = torch_devx.distributed.call_check_counts()["predicted"]
assert predicted == ({warm_calls} > 3), predicted
if rank == 1:
    os._exit(3)
""" + """
start = time.monotonic()
try:
    dist.all_reduce(torch.ones(1 << 16, device=dev))
except dist.DistBackendError as e:
    print("ERROR after %.1fs: %s" % (time.monotonic() - start, e))
    os._exit(0)
os._exit(5)
"""
    rank0, rank1 = run_ranks(body, timeout_s=5)
    assert rank1.returncode == 3
    assert_child_ok(rank0)
    m = re.search(r"ERROR after ([\d.]+)s: (.*)", rank0.stdout)
    assert m, describe(rank0)
    assert float(m.group(1)) < 5 + 2
    assert "devx: all_reduce" in m.group(2) and "gloo engine" in m.group(2)


SURVIVOR = """
dist.barrier()
for _ in range(4):
    dist.all_reduce(torch.ones(1 << 16, device=dev))
assert torch_devx.distributed.call_check_counts()["predicted"] == 1
if rank == 1:
    time.sleep(SLEEP)
    os._exit(3)
t = torch.ones(1 << 16, device=dev)
work = dist.all_reduce(t, async_op=True)
if SLOW_CALLBACK:
    def slow(fut):
        time.sleep(2)
        print("CALLBACK DONE", flush=True)
    work.get_future().then(slow)
    waiting = work.get_future()
else:
    waiting = work
try:
    waiting.wait()
    print("NO ERROR")
except dist.DistBackendError as e:
    print("ERROR", e)
del work, waiting, t
if DESTROY:
    dist.destroy_process_group()
print("LEAVING", flush=True)
"""


@pytest.mark.parametrize("destroy", [True, False])
def test_the_survivor_of_a_dead_rank_catches_the_error_and_exits_cleanly(destroy):
    # The all_reduce that meets the dead rank runs on its prediction: its failure is settled on a
    # thread of the ledger's, which may hold the last reference to the call's tensors. Had it ended
    # after the interpreter began to finalise, it would have died taking the GIL to release them:
    # std::terminate (1 of 12 survivors with the cores kept busy by other processes, before the
    # group and the interpreter's exit waited for that thread). Two pairs at once.
    settings = dict(SLEEP="0", SLOW_CALLBACK="False", DESTROY=str(destroy))
    body = "".join(f"{k} = {v}\n" for k, v in settings.items()) + SURVIVOR
    procs = run_many([(PRELUDE + body, dict(RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                            MASTER_PORT=port, PG_TIMEOUT="5"))
                      for port in [str(free_port()) for _ in range(2)] for r in range(2)], timeout=120)
    for rank0, rank1 in zip(procs[0::2], procs[1::2]):
        assert rank1.returncode == 3, describe(rank1)
        assert_child_ok(rank0)
        assert "ERROR devx: all_reduce" in rank0.stdout and "LEAVING" in rank0.stdout, describe(rank0)


@pytest.mark.parametrize("destroy", [True, False])
def test_callbacks_of_a_failed_predicted_call_finish_before_the_survivor_leaves(destroy):
    # The settle thread completes the work's future, and so runs its callbacks: destroying the
    # group, or leaving the interpreter, waits for them rather than killing them half-way (before,
    # the thread outlived both and was ended by the interpreter's exit, mid-callback).
    settings = dict(SLEEP="1", SLOW_CALLBACK="True", DESTROY=str(destroy))
    body = "".join(f"{k} = {v}\n" for k, v in settings.items()) + SURVIVOR
    rank0, rank1 = run_ranks(body, timeout_s=5)
    assert rank1.returncode == 3, describe(rank1)
    assert_child_ok(rank0)
    out = rank0.stdout
    assert "ERROR devx: all_reduce" in out and "CALLBACK DONE" in out and "LEAVING" in out, describe(rank0)
    if destroy:
        assert out.index("CALLBACK DONE") < out.index("LEAVING"), out


def test_a_rank_that_hangs_is_an_error_within_the_timeout():
    body = """
dist.barrier()
if rank == 1:
    time.sleep(4.5)
    os._exit(0)
start = time.monotonic()
try:
    dist.all_reduce(torch.ones(16, device=dev))
except dist.DistBackendError as e:
    print("ERROR after %.1fs: %s" % (time.monotonic() - start, e))
    os._exit(0)
os._exit(5)
"""
    rank0, _ = run_ranks(body, timeout_s=2)
    assert_child_ok(rank0)
    m = re.search(r"ERROR after ([\d.]+)s: (.*)", rank0.stdout)
    assert m, describe(rank0)
    assert 1.5 < float(m.group(1)) < 2 + 3
    assert "devx: all_reduce" in m.group(2) and "timed out" in m.group(2).lower()


def test_ddp_on_two_ranks_matches_one_process():
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
         str(REPO / "examples" / "ddp_train.py"), "--steps", "4"],
        env=child_env(), cwd=str(REPO), capture_output=True, text=True, timeout=120,
    )
    assert_child_ok(proc)
    assert "backend devx (engine gloo)" in proc.stdout, describe(proc)
    m = re.search(r"max \|DDP - single process\| over parameters: (\S+) \(OK", proc.stdout)
    assert m, describe(proc)
    assert float(m.group(1)) <= 1e-5


@pytest.fixture
def world_of_one(devx):
    import torch.distributed as dist

    yield dist
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.parametrize("backend", ["nccl", "devx", None])
def test_backend_choice_is_devx_and_honest(world_of_one, backend):
    import torch

    dist = world_of_one
    kwargs = {} if backend is None else {"backend": backend}
    dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1, **kwargs)
    pg_backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("devx"))
    assert pg_backend.name() == "devx"
    assert dist.get_backend() == "devx"
    t = torch.arange(6.0, device="cuda")  # devx under mocking
    ptr = t.data_ptr()
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert t.device.type == "devx" and t.data_ptr() == ptr
    torch.testing.assert_close(t.cpu(), torch.arange(6.0))


def test_bad_calls_are_clear_errors(world_of_one):
    import torch
    import torch_devx

    dist = world_of_one
    dist.init_process_group("devx", store=dist.HashStore(), rank=0, world_size=1)
    assert torch_devx.distributed.engine_name() == "gloo"
    with pytest.raises(ValueError, match="ReduceOp.AVG needs floating-point"):
        dist.all_reduce(torch.ones(3, dtype=torch.int64, device="devx"), op=dist.ReduceOp.AVG)
    with pytest.raises(ValueError, match="mixes devx and CPU tensors"):
        dist.all_gather([torch.empty(3, device="devx")], torch.ones(3))


def test_ddp_times_its_steps_with_devx_events(world_of_one):
    # DDP's runtime statistics come from the device's timer: without one for devx it warns that
    # time stats are only collected for CPU and CUDA, and measures host time instead.
    import warnings

    import torch

    dist = world_of_one
    dist.init_process_group("devx", store=dist.HashStore(), rank=0, world_size=1)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64).to("devx"))
    x = torch.randn(32, 64, device="devx")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            model(x).sum().backward()
    assert not [w for w in caught if "Time stats" in str(w.message)], [str(w.message) for w in caught]
    stats = model._get_ddp_logging_data()
    assert stats["avg_forward_compute_time"] > 0 and stats["avg_backward_compute_time"] > 0, stats


@needs_profiler_device_rows()
def test_collectives_have_a_device_row_in_the_profiler(world_of_one):
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    dist = world_of_one
    dist.init_process_group("devx", store=dist.HashStore(), rank=0, world_size=1)
    t = torch.ones(1 << 16, device="devx")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        dist.all_reduce(t)
        dist.all_reduce(t, async_op=True).wait()
        dist.broadcast(t, src=0)
    rows = [e for e in prof.events() if "all_reduce (gloo)" in e.name or "broadcast (gloo)" in e.name]
    assert len([e for e in rows if "all_reduce" in e.name]) == 2 and len(rows) == 3, [e.name for e in prof.events()]
    assert all(e.device_type == DeviceType.PrivateUse1 and e.device_index == 0 for e in rows)
    assert all(e.time_range.end >= e.time_range.start for e in rows)


def test_nccl_maps_to_devx_only_while_mocking(devx):
    from torch_devx import cuda_mock, distributed

    assert distributed.map_backend("nccl") == "devx"
    assert distributed.map_backend("cpu:gloo,cuda:nccl") == "cpu:gloo,devx:devx"
    assert distributed.map_backend("gloo") == "gloo"
    import torch.distributed as dist

    mocked = dist.init_process_group
    cuda_mock.disable()
    try:
        assert dist.init_process_group is not mocked
    finally:
        cuda_mock.enable()
    assert dist.init_process_group is mocked


def test_all_gather_and_all_to_all_with_per_rank_sizes():
    body = """
# all_gather: rank i contributes i + 1 elements (outs[i] of size i + 1), as NCCL allows.
def part(r):
    return torch.arange(r + 1, dtype=torch.float32) + 10 * r
outs = [torch.full((r + 1,), -1.0, device=dev) for r in range(world)]
dist.all_gather(outs, part(rank).to(dev))
for r in range(world):
    close(outs[r], part(r))
outs = [torch.empty(r + 1, 2, device=dev) for r in range(world)]
work = dist.all_gather(outs, torch.stack([part(rank), -part(rank)], 1).to(dev), async_op=True)
work.wait()
for r in range(world):
    close(outs[r], torch.stack([part(r), -part(r)], 1))

# all_to_all (lists): rank i sends i + j + 1 values to rank j.
def chunk(i, j):
    return torch.arange(i + j + 1, dtype=torch.float32) + 100 * i + 10 * j
ins = [chunk(rank, j).to(dev) for j in range(world)]
outs = [torch.full((i + rank + 1,), -1.0, device=dev) for i in range(world)]
dist.all_to_all(outs, ins)
for i in range(world):
    close(outs[i], chunk(i, rank))
# Equal sizes and several dimensions still work; so do CPU tensors (the host engine).
ins = [torch.full((2, 3), float(rank * 10 + j), device=dev) for j in range(world)]
outs = [torch.empty(2, 3, device=dev) for _ in range(world)]
dist.all_to_all(outs, ins)
for i in range(world):
    close(outs[i], torch.full((2, 3), float(i * 10 + rank)))
ins = [chunk(rank, j) for j in range(world)]
outs = [torch.empty(i + rank + 1) for i in range(world)]
dist.all_to_all(outs, ins)
for i in range(world):
    torch.testing.assert_close(outs[i], chunk(i, rank))
print("OK", rank)
"""
    for proc in run_ranks(body):
        assert_child_ok(proc)
        assert "OK" in proc.stdout


def test_uneven_collectives_that_disagree_across_ranks_are_runtime_errors_and_the_group_survives():
    body = """
def expect(fn, *parts):
    try:
        fn()
    except RuntimeError as e:  # what CUDA users catch; a DistBackendError
        assert isinstance(e, dist.DistBackendError), type(e)
        for p in parts:
            assert p in str(e), (p, str(e))
        return
    raise AssertionError("no error")
# Rank 1 expects 3 values from rank 0, which sends 2.
ins = [torch.ones(2, device=dev), torch.ones(2, device=dev)]
outs = [torch.empty(3 if rank == 1 else 2, device=dev), torch.empty(2, device=dev)]
expect(lambda: dist.all_to_all(outs, ins), "rank 0 sends 2 elements to rank 1, which expects 3")
# The ranks disagree on rank 1's part of an all_gather.
outs = [torch.empty(1, device=dev), torch.empty(2 + rank, device=dev)]
expect(lambda: dist.all_gather(outs, torch.ones(outs[rank].shape, device=dev)), "different collective calls",
       "rank 0: all_gather(Float[1], Float[2]", "rank 1: all_gather(Float[1], Float[3]")
# A size mismatch of the usual kind is a RuntimeError too.
expect(lambda: dist.all_reduce(torch.ones(10 * (rank + 1), device=dev)), "different collective calls")
t = torch.ones(4, device=dev)
dist.all_reduce(t)
close(t, torch.full((4,), 2.0))
print("OK", rank)
"""
    for proc in run_ranks(body):
        assert_child_ok(proc)
        assert "OK" in proc.stdout


def test_sync_batch_norm_under_ddp_matches_batch_norm_on_the_full_batch():
    body = """
import copy
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
def make():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 5))
reference = make()
x = torch.randn(8, 3, 6, 6)
model = nn.SyncBatchNorm.convert_sync_batchnorm(copy.deepcopy(reference)).to(dev)
assert isinstance(model[1], nn.SyncBatchNorm)
ddp = DDP(model, device_ids=[rank])
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)

half = x[4 * rank:4 * (rank + 1)].to(dev)
out = ddp(half)
want = reference(x)
torch.testing.assert_close(out.cpu(), want[4 * rank:4 * (rank + 1)], rtol=1e-5, atol=1e-5)
torch.testing.assert_close(model[1].running_mean.cpu(), reference[1].running_mean, rtol=1e-5, atol=1e-6)
torch.testing.assert_close(model[1].running_var.cpu(), reference[1].running_var, rtol=1e-5, atol=1e-6)
assert int(model[1].num_batches_tracked) == 1

out.square().mean().backward()       # DDP averages the ranks' gradients: the full batch's mean
want.square().mean().backward()
for (name, p), q in zip(model.named_parameters(), reference.parameters()):
    assert p.grad is not None and p.grad.device == dev, name
    torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=name)
opt.step()
ref_opt.step()
for (name, p), q in zip(model.named_parameters(), reference.parameters()):
    torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5, msg=name)
print("OK", rank)
"""
    for proc in run_ranks(body, timeout_s=30):
        assert_child_ok(proc)
        assert "OK" in proc.stdout
