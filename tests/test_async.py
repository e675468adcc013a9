"""Asynchronous simulation (DEVX_SIM_ASYNC=1): ops are issued to the current stream and return
before their kernels run; host reads wait; streams overlap unless ordered; memory a stream may
still use is not handed to a new owner.

Each test runs in a child with DEVX_SIM_ASYNC=1 (the mode is fixed at import), whichever mode the
suite itself runs in. torch_devx.testing.hold_stream stops a stream at a point of its work, which
makes "not run yet" observable without timing.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, assert_child_ok, child_env, describe, run_many, run_python

PRELUDE = """
import threading
import torch
import torch_devx
from torch_devx.testing import async_streams, hold_stream
assert async_streams(), "the child should run with asynchronous streams"
"""


def run_async(code: str) -> None:
    assert_child_ok(run_python(PRELUDE + code, DEVX_SIM_ASYNC="1"))


def test_hold_stream_needs_async_streams():
    proc = run_python(
        """
        import torch, torch_devx
        from torch_devx.testing import async_streams, hold_stream
        assert not async_streams()
        try:
            with hold_stream():
                pass
        except RuntimeError as e:
            assert "DEVX_SIM_ASYNC=1" in str(e), e
        else:
            raise AssertionError("hold_stream on synchronous streams must refuse")
        """,
        DEVX_SIM_ASYNC="0",
    )
    assert_child_ok(proc)


def test_kernels_return_before_they_run():
    run_async("""
x = torch.ones(4096, device="devx")
torch.devx.synchronize()
done = torch.devx.Event()
with hold_stream():
    y = (x * 3 + 1).sum(0, keepdim=True)
    assert y.shape == (1,) and y.device.type == "devx"   # shapes are known at once
    done.record()
    # Deterministic: the stream is held, so nothing issued above can have run.
    assert not done.query()
    assert not torch.devx.current_stream().query()
assert y.item() == 4 * 4096   # the host read waits for the stream
assert done.query()
""")


def test_missing_wait_stream_gives_wrong_data():
    # The producer runs on s1 (held until the consumer has run); the consumer on s2 reads y. Without
    # s2.wait_stream(s1) it reads y before the producer wrote it: the mode catches the bug.
    run_async("""
s1, s2 = torch.devx.Stream(), torch.devx.Stream()
x = torch.full((1000,), 2.0, device="devx")
y = torch.zeros(1000, device="devx")

def run(wait: bool) -> torch.Tensor:
    y.zero_()
    torch.devx.synchronize()
    with hold_stream(s1):
        with torch.devx.stream(s1):
            y.add_(x)
        with torch.devx.stream(s2):
            if wait:
                s2.wait_stream(s1)
            z = y * 10
        if not wait:
            s2.synchronize()   # the consumer is done, the producer has not started
    torch.devx.synchronize()
    return z.cpu()

assert torch.equal(run(wait=False), torch.zeros(1000)), "s2 should have read y before s1 wrote it"
assert torch.equal(run(wait=True), torch.full((1000,), 20.0))
""")


def test_host_reads_and_data_dependent_ops_wait():
    run_async("""
s = torch.devx.Stream()
with torch.devx.stream(s):
    a = torch.arange(12, device="devx").reshape(3, 4)
    b = (a % 3 == 0)
    idx = b.nonzero()                      # shape depends on data: waits, then runs
    picked = a[b]                          # boolean indexing: the same
    total = (a * 2).sum()
    assert idx.tolist() == (torch.arange(12).reshape(3, 4) % 3 == 0).nonzero().tolist()
    assert picked.tolist() == [0, 3, 6, 9]
    assert total.item() == 132
    host = torch.empty(3, 4, dtype=torch.int64)
    host.copy_(a.t().contiguous().t())     # copy to the CPU waits for the stream
    assert torch.equal(host, torch.arange(12).reshape(3, 4))
""")


def test_metadata_changes_after_issue_do_not_reach_issued_work():
    run_async("""
x = torch.arange(6.0, device="devx").reshape(2, 3)
out = torch.empty(2, 3, device="devx")
torch.devx.synchronize()
with hold_stream():
    torch.mul(x, 2, out=out)   # issued with x as (2, 3)
    x.t_()                     # the host changes x's view before the kernel runs
    y = x + 0                  # issued with x as (3, 2)
assert torch.equal(out.cpu(), torch.arange(6.0).reshape(2, 3) * 2)
assert torch.equal(y.cpu(), torch.arange(6.0).reshape(2, 3).t())
""")


def test_freed_block_not_reused_while_a_stream_may_use_it():
    run_async("""
s = torch.devx.Stream()
n = 1 << 18
x = torch.ones(n, device="devx")
torch.devx.synchronize()
ptr = x.data_ptr()
with hold_stream(s):
    with torch.devx.stream(s):
        y = x * 2              # s reads x once released
    del x                      # the host's last reference goes
    z = torch.empty(n, device="devx")
    assert z.data_ptr() != ptr, "x's block was handed out while s may still read it"
torch.devx.synchronize()
assert y.sum().item() == 2 * n
""")


def test_threads_streams_and_allocations_in_async_mode():
    run_async("""
errors = []

def work(i: int) -> None:
    try:
        s = torch.devx.Stream()
        with torch.devx.stream(s):
            acc = torch.zeros(256, device="devx")
            for k in range(150):
                a = torch.full((1024 + 64 * (k % 7),), float(i), device="devx")
                b = a[:256] * 2 + k
                acc += b
                del a, b
                if k % 50 == 49:
                    expected = sum(2.0 * i + j for j in range(k + 1))
                    assert acc[0].item() == expected, (i, k, acc[0].item(), expected)
    except BaseException as e:  # reported by the main thread
        errors.append(repr(e))

base = torch.devx.memory_allocated()
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
torch.devx.synchronize()
assert not errors, errors
assert torch.devx.memory_allocated() == base
""")


@pytest.mark.devices(2)
def test_waiting_hosts_run_queued_work_and_keep_their_device_and_streams():
    """A host that waits for a stream may run the queued work itself (cpu_sim's synchronize does,
    rather than sleep until the worker has): the results, their order, and the waiting thread's
    current device and streams are as if the stream's worker had run it all."""
    run_async("""
torch.devx.set_device(0)
side0 = torch.devx.Stream(device="devx:0")
side1 = torch.devx.Stream(device="devx:1")
torch.devx.set_stream(side0)
acc = torch.zeros(64, device="devx:1")
for k in range(300):
    with torch.devx.stream(side1):  # devx:1's work, on a stream that is current only here
        acc = acc * 0.5 + k
    if k % 50 == 49:
        side1.synchronize()  # queued ops may run on this thread, outside any device guard
        assert torch.devx.current_device() == 0
        assert torch.devx.current_stream(0) == side0
        assert torch.devx.current_stream(1) == torch.devx.default_stream(1)
        with torch.devx.stream(side1):
            got = acc[0].item()
        expected = 0.0
        for j in range(k + 1):
            expected = expected * 0.5 + j
        assert got == expected, (k, got, expected)
        assert torch.devx.current_device() == 0
        assert torch.devx.current_stream(0) == side0
        assert torch.devx.current_stream(1) == torch.devx.default_stream(1)
""")


def test_errors_of_issued_kernels_surface_at_the_next_wait():
    run_async("""
x = torch.zeros(4, device="devx")
idx = torch.tensor([0, 7])            # out of range: only the kernel finds out
try:
    x.index_add_(0, idx.to("devx"), torch.ones(2, device="devx"))
    torch.devx.synchronize()
except (RuntimeError, IndexError) as e:
    assert "index" in str(e).lower(), e
else:
    raise AssertionError("the bad index went unreported")
assert (x + 1).sum().item() == 4 + x.sum().item()   # the device keeps working
""")


def test_record_stream_delays_reuse_until_the_stream_passes():
    # x is used on s behind the allocator's back (record_stream is all it is told): its block must
    # not be handed out until s has passed the point where x was freed, and then it is reused.
    run_async("""
s = torch.devx.Stream()
n = 1 << 20                              # 4 MiB: a segment of its own
x = torch.empty(n, device="devx")
torch.devx.synchronize()
ptr = x.data_ptr()
keep = []
with hold_stream(s):
    x.record_stream(s)
    del x
    stats = torch.devx.memory_stats()
    assert stats["active_bytes.all.current"] > stats["allocated_bytes.all.current"], stats
    keep.append(torch.empty(n, device="devx"))
    assert keep[-1].data_ptr() != ptr, "reused while s may still use it"
torch.devx.synchronize()
again = torch.empty(n, device="devx")    # s has passed: the block is back in the pool
assert again.data_ptr() == ptr
""")


def test_memory_goes_back_to_the_vendor_only_after_the_device_has_run_what_uses_it():
    # cpu_sim's softmax kernel writes its result once the held stream runs; y is freed before that,
    # as a block is free once its last work is queued. Memory given back to the vendor could be
    # handed to another stream at once, so empty_cache and the out-of-memory retry wait for the
    # device first, as cudaFree does.
    proc = run_python(PRELUDE + """
n = 1 << 20                                   # 4 MiB: segments of their own
x = torch.randn(n, device="devx")
torch.devx.synchronize()

def check(give_back):
    with hold_stream():
        y = torch.softmax(x, 0)
        del y
        reserved = torch.devx.memory_reserved()
        t = threading.Thread(target=give_back)
        t.start()
        t.join(0.5)
        assert t.is_alive(), "memory the held stream will still write went back to the vendor"
        assert torch.devx.memory_reserved() == reserved
    t.join()

check(torch.devx.empty_cache)
assert torch.devx.memory_reserved() == 4 << 20   # x's segment alone
big = []
check(lambda: big.append(torch.empty(3 * n, device="devx")))   # 12 MiB: only after y's segment is back
assert big[0].shape == (3 * n,) and torch.devx.memory_stats()["num_alloc_retries"] >= 1
""", DEVX_SIM_ASYNC="1", DEVX_SIM_KERNELS="own", DEVX_SIM_MEMORY="16MiB")
    assert_child_ok(proc)


def test_random_ops_draw_in_host_order():
    # Dropout takes no generator argument; issued to a stream, its kernel would draw when it runs,
    # after the host had already saved or reset the generator state. Checkpointing saves the state
    # before the forward and restores it to recompute the same mask in the backward.
    run_async("""
import torch.nn as nn
from torch.utils.checkpoint import checkpoint
torch.manual_seed(0)
lin = nn.Linear(64, 64).to("devx")
x = torch.randn(64, 64, device="devx", requires_grad=True)

def block(t):
    return nn.functional.dropout(lin(t).relu(), 0.5) * 2

for _ in range(5):
    grads = []
    for fn in (lambda t: block(t).sum(), lambda t: checkpoint(block, t, use_reentrant=False).sum()):
        x.grad = None
        torch.manual_seed(1)
        fn(x).backward()
        grads.append(x.grad.cpu())
    assert torch.equal(grads[0], grads[1]), "the recomputed dropout drew another mask"
torch.manual_seed(2)
a = torch.rand(1000, device="devx")
state = torch.devx.get_rng_state()
b = torch.nn.functional.dropout(torch.ones(1000, device="devx"), 0.5)
torch.devx.set_rng_state(state)
c = torch.nn.functional.dropout(torch.ones(1000, device="devx"), 0.5)
assert torch.equal(b.cpu(), c.cpu())
""")


def test_random_ops_and_norms_are_issued_with_the_cpus_draws():
    # Dropout, layer norm and training batch norm are issued (the host does not wait for the
    # stream), and the draws are the CPU's: the host's generator accesses wait for issued draws.
    run_async("""
import torch.nn.functional as F
x = torch.randn(8, 16)
w, b = torch.randn(16), torch.randn(16)
bn_x = torch.randn(4, 3, 5, 5)
outs = {}
for device in ("cpu", "devx"):
    torch.manual_seed(3)
    d, dw, db, dbn = x.to(device), w.to(device), b.to(device), bn_x.to(device)
    rm, rv = torch.zeros(3, device=device), torch.ones(3, device=device)
    rng = torch.devx if device == "devx" else torch
    torch.cuda.set_sync_debug_mode("error")
    r = [F.dropout(d, 0.5), F.dropout(d, 0.2), F.layer_norm(d, (16,), dw, db),
         F.batch_norm(dbn, rm, rv, training=True), rm, rv, torch.rand(5, device=device)]
    torch.cuda.set_sync_debug_mode("default")
    state = rng.get_rng_state()
    r.append(F.dropout(d, 0.5))
    rng.set_rng_state(state)
    r.append(F.dropout(d, 0.5))
    outs[device] = r
for c, d in zip(outs["cpu"], outs["devx"]):
    assert torch.equal(c, d.cpu()), (c, d)
assert torch.equal(outs["devx"][-1].cpu(), outs["devx"][-2].cpu())
""")


def test_issued_results_follow_changing_scalars():
    # The issuer remembers result layouts per signature of arguments, without the values of
    # floating-point arguments (an optimizer's step sizes change every step); arange's length
    # comes from its values, and is issued without waiting for the stream.
    run_async("""
torch.cuda.set_sync_debug_mode("error")
x = torch.randn(6, device="devx")
for step in range(1, 6):
    alpha = 1.0 / step
    y = x.add(x, alpha=alpha)
    r = torch.arange(0.0, step * 1.5, device="devx")  # its empty out= result resized by the host
    torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(y.cpu(), x.cpu().add(x.cpu(), alpha=alpha))
    assert torch.equal(r.cpu(), torch.arange(0.0, step * 1.5)), (r, step)
    torch.cuda.set_sync_debug_mode("error")
""")


def test_a_kernel_error_reaches_the_work_that_waits_for_it_on_other_streams():
    # As CUDA's errors reach work that depends on the failed kernel: a read on stream b after b
    # waited for stream a (wait_stream or wait_event) must not return data as if all went well.
    run_async("""
a, b = torch.devx.Stream(), torch.devx.Stream()
empty = torch.empty(0, device="devx")
with torch.devx.stream(a):
    empty.max()                          # fails in its kernel, on stream a
for how in ("wait_stream", "wait_event", "event_synchronize"):
    event = torch.devx.Event()
    event.record(a)
    if how == "event_synchronize":
        try:
            event.synchronize()
        except RuntimeError as e:
            assert "numel() == 0" in str(e), e
        else:
            raise AssertionError("event.synchronize() after failed work reported nothing")
        continue
    with torch.devx.stream(b):
        b.wait_stream(a) if how == "wait_stream" else b.wait_event(event)
        y = torch.ones(3, device="devx") * 2
        try:
            y.cpu()
        except RuntimeError as e:
            assert "aten::max failed in its kernel" in str(e) and "waited for an event" in str(e), e
        else:
            raise AssertionError(f"a read after {how} on a failed stream reported nothing")
try:
    a.synchronize()                      # a still reports its own error once
except RuntimeError as e:
    assert "aten::max failed in its kernel" in str(e) and "numel() == 0" in str(e), e
else:
    raise AssertionError("stream a lost its error")
with torch.devx.stream(b):
    assert torch.ones(2, device="devx").sum().item() == 2   # reported: the streams work again
""")


def test_a_kernel_error_names_the_op_and_the_line_that_issued_it(tmp_path):
    # Raised at a later, unrelated synchronisation: the message must lead back to the op's line,
    # the innermost frame of the user's code, and carry no C++ backtrace of the stream's thread.
    script = tmp_path / "model_step.py"
    script.write_text(textwrap.dedent("""\
        import torch, torch_devx
        def step(x):
            return x.max()
        empty = torch.empty(0, device="devx")
        m = step(empty)
        y = torch.ones(3, device="devx") + 1
        try:
            y.sum().item()
        except RuntimeError as e:
            print("ERROR", e)
        """))
    proc = subprocess.run([sys.executable, str(script)], env=child_env(DEVX_SIM_ASYNC="1"), capture_output=True,
                          text=True, timeout=120)
    assert_child_ok(proc)
    assert f"aten::max failed in its kernel (issued asynchronously at {script}:3): max(): " in proc.stdout, \
        describe(proc)
    assert "frame #" not in proc.stdout, describe(proc)


FORK_CHILD = """
import os, signal, sys, time
x = torch.ones(4, device="devx") * 2
assert x.sum().item() == 8
pid = os.fork()
if pid == 0:
    signal.alarm(20)                     # a hang ends the child by SIGALRM, which the parent sees
    try:
        assert torch.devx._is_in_bad_fork()
        if sys.argv[-1] == "touch":
            # In-place ops too: with synchronous streams a CPU kernel would write the child's
            # copy of the parent's memory without any runtime call that refuses.
            for use in (lambda: (x + 1).sum().item(), lambda: torch.ones(2, device="devx"),
                        lambda: x.cpu(), torch.devx.synchronize, lambda: x.fill_(3), lambda: x.zero_(),
                        lambda: x.add_(1)):
                try:
                    use()
                    os._exit(3)
                except RuntimeError as e:
                    if "Cannot re-initialize devx in forked subprocess" not in str(e):
                        print(e)
                        os._exit(4)
        else:
            assert torch.ones(3).sum().item() == 3   # CPU work, as a DataLoader worker's
    except BaseException as e:
        print("child:", repr(e))
        os._exit(5)
    sys.exit(0)                          # a normal exit: the parent's tensors are let go
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
assert not torch.devx._is_in_bad_fork()
assert (x + 1).sum().item() == 12        # the parent is unaffected
print("OK")
"""


def test_a_child_forked_after_devx_was_used_gets_the_fork_error_at_once():
    for mode in ("1", "0"):
        for what in ("touch", "cpu_only"):
            proc = subprocess.run([sys.executable, "-c", "import torch, torch_devx\n" + FORK_CHILD, what],
                                  env=child_env(DEVX_SIM_ASYNC=mode), cwd=str(REPO), capture_output=True,
                                  text=True, timeout=120)
            assert proc.returncode == 0 and "OK" in proc.stdout, (mode, what, proc.stdout, proc.stderr)


def test_waits_for_the_stream_release_the_gil():
    # UntypedStorage.copy_ waits for the stream holding the GIL. The stream's last item drops the
    # last reference but one to a storage that has a Python object, which takes the GIL: unless
    # the wait releases it, neither side ever goes on (as the thread releasing the hold cannot).
    run_async("""
import time
from torch_devx import _C

x = torch.arange(4.0, device="devx")
storage = x.untyped_storage()
torch.devx.synchronize()
stream = torch.devx.current_stream()
token = _C._hold_stream(stream.device_index, stream.stream_id)
y = x + 1
del x
waiting = threading.Event()

def release():
    waiting.wait()
    time.sleep(0.1)  # the main thread is in the wait by now, or holds the GIL for good
    _C._release_stream(token)

releaser = threading.Thread(target=release)
releaser.start()
waiting.set()
assert storage.cpu().tolist() == list(torch.arange(4.0).untyped_storage().tolist())
releaser.join()
assert y.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
""")


EXIT_WITH_WORK_QUEUED = PRELUDE + """
xs = [torch.randn(300, 300, device="devx") for _ in range(200)]
storages = [x.untyped_storage() for x in xs]   # tensors whose storages have Python objects
torch.devx.synchronize()
for _ in range(3):
    for x in xs:
        y = x @ x
print("issued", flush=True)
"""


def test_a_script_that_ends_with_work_queued_exits_cleanly():
    # The script ends while the worker still has ~600 matmuls to run. Left running into the
    # interpreter's finalisation and C++'s exit, the worker would take the GIL (ending the thread
    # through a noexcept frame: std::terminate) or free into the destroyed allocator (a segfault);
    # before the fix, 7 of 9 such runs died.
    for proc in run_many([(EXIT_WITH_WORK_QUEUED, {"DEVX_SIM_ASYNC": "1"})] * 3):
        assert_child_ok(proc)
        assert proc.stdout == "issued\n" and proc.stderr == "", describe(proc)


def test_sparse_member_accessors_do_not_wait_for_the_stream():
    # Reading a sparse tensor's members is metadata work: it returns while the stream is held (a
    # watchdog releases the hold after 30 s, and the test then fails, rather than hang).
    run_async("""
import time
from torch_devx import _C

s = torch.sparse_coo_tensor(torch.tensor([[0, 1, 3]]), torch.tensor([1.0, 2.0, 3.0]), (4,), device="devx").coalesce()
torch.devx.synchronize()
stream = torch.devx.current_stream()
token = _C._hold_stream(stream.device_index, stream.stream_id)
lock, state = threading.Lock(), {}

def release(late):
    with lock:
        if "late" not in state:
            state["late"] = late
            _C._release_stream(token)

watchdog = threading.Timer(30, release, args=(True,))
watchdog.start()
doubled = s._values() * 2   # issued behind the hold
members = (s._nnz(), s.is_coalesced(), s.sparse_dim(), s.dense_dim(), s._indices().shape, s.values().shape)
same_values = s._values().data_ptr() == s.values().data_ptr()
release(False)
watchdog.cancel()
assert state["late"] is False, "a member accessor waited for the stream"
assert members == (3, True, 1, 0, (1, 3), (3,)), members
assert same_values
assert doubled.cpu().tolist() == [2.0, 4.0, 6.0]
assert s._indices().device == s._values().device == torch.device("devx", 0)
""")
