"""The caching device allocator: block reuse, splitting and merging, empty_cache, statistics with
CUDA's keys, DEVX_ALLOC_CONF, and out-of-memory recovery."""

from __future__ import annotations

import gc

import pytest
import torch

import torch_devx  # noqa: F401
from conftest import assert_child_ok, run_python

MiB = 1 << 20


def _fresh(device: int = 1) -> None:
    gc.collect()
    torch.devx.synchronize(device)
    torch.devx.empty_cache()


@pytest.mark.devices(2)
def test_freed_blocks_are_reused_without_new_segments():
    _fresh()
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="devx:1")
    segments = torch.devx.memory_stats(1)["segment.all.current"]
    ptr = x.data_ptr()
    del x
    y = torch.empty(3 * MiB, dtype=torch.uint8, device="devx:1")
    assert y.data_ptr() == ptr
    assert torch.devx.memory_stats(1)["segment.all.current"] == segments


@pytest.mark.devices(2)
def test_small_requests_share_a_segment_and_merge_back():
    _fresh()
    before = torch.devx.memory_stats(1)
    parts = [torch.empty(1000, dtype=torch.uint8, device="devx:1") for _ in range(8)]
    stats = torch.devx.memory_stats(1)
    assert stats["segment.small_pool.current"] == before["segment.small_pool.current"] + 1  # one 2 MiB segment
    assert stats["allocation.small_pool.current"] == before["allocation.small_pool.current"] + 8
    assert torch.devx.memory_stats(1)["inactive_split.all.current"] >= 1  # the segment's unused tail
    del parts
    gc.collect()
    stats = torch.devx.memory_stats(1)
    assert stats["inactive_split.all.current"] == 0  # every piece merged back into one free block
    torch.devx.empty_cache()
    assert torch.devx.memory_stats(1)["reserved_bytes.all.current"] == before["reserved_bytes.all.current"]


@pytest.mark.devices(2)
def test_whole_free_segments_move_between_pools():
    _fresh()
    base = torch.devx.memory_stats(1)
    small = [torch.empty(512 * 1024, dtype=torch.uint8, device="devx:1") for _ in range(4)]  # one full 2 MiB segment
    assert torch.devx.memory_stats(1)["segment.small_pool.current"] == base["segment.small_pool.current"] + 1
    ptr = small[0].data_ptr()
    del small
    # A 1.5 MiB request is a large one: it takes the small pool's free segment instead of a new one.
    big = torch.empty(3 * MiB // 2, dtype=torch.uint8, device="devx:1")
    stats = torch.devx.memory_stats(1)
    assert big.data_ptr() == ptr
    assert stats["reserved_bytes.all.current"] == base["reserved_bytes.all.current"] + 2 * MiB
    assert stats["segment.small_pool.current"] == base["segment.small_pool.current"]
    assert stats["segment.large_pool.current"] == base["segment.large_pool.current"] + 1
    del big
    # And back: a small request takes the whole free 2 MiB large segment.
    again = torch.empty(1000, dtype=torch.uint8, device="devx:1")
    stats = torch.devx.memory_stats(1)
    assert again.data_ptr() == ptr
    assert stats["segment.small_pool.current"] == base["segment.small_pool.current"] + 1
    assert stats["segment.large_pool.current"] == base["segment.large_pool.current"]
    assert stats["reserved_bytes.all.current"] == base["reserved_bytes.all.current"] + 2 * MiB
    del again
    # A segment bigger than 2 MiB is not carved up by small requests.
    huge = torch.empty(4 * MiB, dtype=torch.uint8, device="devx:1")
    huge_ptr = huge.data_ptr()
    del huge
    parts = [torch.empty(512 * 1024, dtype=torch.uint8, device="devx:1") for _ in range(5)]
    assert all(not (huge_ptr <= p.data_ptr() < huge_ptr + 4 * MiB) for p in parts)


@pytest.mark.devices(2)
def test_a_freed_small_block_serves_the_next_request_of_its_size_and_merges_when_described():
    """Small ops free a block and ask for the same size again: the block is kept whole for that
    size (other sizes do not split it), and is merged with its free neighbours before statistics
    or a snapshot describe the cache."""
    _fresh()
    a, b, c = (torch.empty(1024, dtype=torch.uint8, device="devx:1") for _ in range(3))
    a_ptr, b_ptr, c_ptr = a.data_ptr(), b.data_ptr(), c.data_ptr()
    assert (b_ptr, c_ptr) == (a_ptr + 1024, a_ptr + 2048)
    del b
    half = torch.empty(512, dtype=torch.uint8, device="devx:1")
    assert half.data_ptr() != b_ptr
    again = torch.empty(1024, dtype=torch.uint8, device="devx:1")
    assert again.data_ptr() == b_ptr
    del again, c, half
    stats = torch.devx.memory_stats(1)
    assert stats["allocation.all.current"] == 1 and stats["allocated_bytes.all.current"] == 1024
    assert stats["inactive_split.all.current"] == 1  # b, c, half and the tail are one free block
    [segment] = [s for s in torch.devx.memory.memory_snapshot() if s["address"] == a_ptr]
    assert [(blk["size"], blk["state"]) for blk in segment["blocks"]] == [
        (1024, "active_allocated"), (2 * MiB - 1024, "inactive")]
    del a
    torch.devx.empty_cache()
    assert torch.devx.memory_stats(1)["reserved_bytes.all.current"] == 0


def test_small_requests_fill_the_oldest_segment_first_so_younger_ones_empty_out():
    """A small request takes the first hole that fits, oldest segment first, not the smallest
    hole: the short-lived tensor below lands in the old segment's big hole instead of the young
    segment's small one, so the young segment empties out and serves a 2 MiB request whole (best
    fit would pin it and make a third segment)."""
    code = """
import torch, torch_devx
K, MiB = 1 << 10, 1 << 20
def empty(n):
    return torch.empty(n, dtype=torch.uint8, device="devx")
def stats():
    return torch.devx.memory_stats()
old = [empty(512 * K) for _ in range(4)]                                  # segment A, full
young = [empty(512 * K) for _ in range(3)] + [empty(496 * K), empty(16 * K)]  # segment B, full
young_base = young[0].data_ptr()
assert stats()["segment.small_pool.current"] == 2
hole = old[1].data_ptr()
del old[1]       # a 512 KiB hole in A
del young[4]     # a 16 KiB hole in B: the best fit for what follows
short_lived = empty(8 * K)
assert short_lived.data_ptr() == hole, "not the first fit in the oldest segment"
del young        # B is wholly free
reserved = stats()["reserved_bytes.all.current"]
activation = empty(2 * MiB)
assert activation.data_ptr() == young_base, "the free segment was not reused"
s = stats()
assert s["reserved_bytes.all.current"] == reserved and s["num_device_alloc"] == 2, s["num_device_alloc"]
assert s["segment.small_pool.current"] == 1 and s["segment.large_pool.current"] == 1
# A request larger than every hole of the older segment goes past them.
del short_lived
tail = empty(600 * K)
assert not (old[0].data_ptr() <= tail.data_ptr() < old[0].data_ptr() + 2 * MiB), "placed in a hole too small for it"
print("ok")
"""
    proc = run_python(code)
    assert_child_ok(proc)
    assert proc.stdout.strip() == "ok"


@pytest.mark.devices(2)
def test_split_block_serves_a_smaller_request():
    _fresh()
    big = torch.empty(8 * MiB, dtype=torch.uint8, device="devx:1")
    base = big.data_ptr()
    del big
    reserved = torch.devx.memory_reserved(1)
    small = torch.empty(3 * MiB, dtype=torch.uint8, device="devx:1")
    rest = torch.empty(4 * MiB, dtype=torch.uint8, device="devx:1")
    assert small.data_ptr() == base and rest.data_ptr() == base + 3 * MiB
    assert torch.devx.memory_reserved(1) == reserved


@pytest.mark.devices(2)
def test_empty_tensors_take_no_memory_as_on_cuda():
    _fresh()
    before = torch.devx.memory_stats(1)
    none = torch.empty(0, device="devx:1")
    empties = [none, torch.ones(3, 0, device="devx:1"), none * none]
    stats = torch.devx.memory_stats(1)
    # CUDA's allocator hands out a null pointer for zero bytes and counts no allocation.
    assert [t.data_ptr() for t in empties] == [0, 0, 0]
    for key in ("allocation.all.current", "allocated_bytes.all.current", "segment.all.current"):
        assert stats[key] == before[key], key
    grown = empties[0].resize_(5).fill_(2.0)
    assert grown.data_ptr() != 0 and grown.sum().item() == 10.0
    assert torch.devx.memory_allocated(1) == before["allocated_bytes.all.current"] + 512
    assert torch.cat([empties[1].reshape(0), torch.arange(2.0, device="devx:1")]).tolist() == [0.0, 1.0]


def test_stats_keys_match_cuda_and_accelerator():
    stats = torch.devx.memory_stats(0)
    for metric in ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
                   "active_bytes", "inactive_split_bytes", "requested_bytes"):
        for pool in ("all", "large_pool", "small_pool"):
            for kind in ("current", "peak", "allocated", "freed"):
                assert f"{metric}.{pool}.{kind}" in stats
    for key in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free"):
        assert key in stats
    assert torch.devx.memory_allocated(0) == torch.accelerator.memory_allocated(0)
    assert torch.devx.memory_reserved(0) == torch.accelerator.memory_reserved(0)
    assert "Allocated memory" in torch.devx.memory_summary(0)


def test_bad_alloc_conf_fails_at_import():
    proc = run_python("import torch_devx", DEVX_ALLOC_CONF="max_split_size_mb:abc")
    assert proc.returncode == 1 and "ValueError" in proc.stderr and "DEVX_ALLOC_CONF" in proc.stderr
    proc = run_python("import torch_devx", DEVX_ALLOC_CONF="garbage_threshold:0.5")
    assert proc.returncode == 1 and "unknown setting 'garbage_threshold'" in proc.stderr


@pytest.mark.parametrize("value", ["99999999999999999999999", "17592186044416"])
def test_alloc_conf_sizes_that_overflow_are_value_errors(value):
    # 10^23 MiB overflows the parse; 2^44 MiB is 2^64 bytes, which wrapped to a split limit of 0.
    proc = run_python("import torch_devx", DEVX_ALLOC_CONF=f"max_split_size_mb:{value}")
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError") and "DEVX_ALLOC_CONF" in last and value in last, proc.stderr


def test_out_of_memory_frees_the_cache_and_retries():
    code = """
import gc, torch, torch_devx
MiB = 1 << 20
blocks = [torch.empty(8 * MiB, dtype=torch.uint8, device="devx") for _ in range(6)]
del blocks   # 48 MiB cached in 8 MiB blocks
gc.collect()
big = torch.empty(40 * MiB, dtype=torch.uint8, device="devx")   # only fits once the cache is given back
stats = torch.devx.memory_stats()
assert stats["num_alloc_retries"] >= 1, stats["num_alloc_retries"]
del big
try:
    torch.empty(100 * MiB, dtype=torch.uint8, device="devx")
except torch.OutOfMemoryError as e:
    assert "tried to allocate 100.00 MiB" in str(e) and "reserved" in str(e), e
else:
    raise AssertionError("no OOM")
assert torch.devx.memory_stats()["num_ooms"] == 1
print(torch.ones(4, device="devx").sum().item())
"""
    proc = run_python(code, DEVX_SIM_MEMORY="64MiB")
    assert_child_ok(proc)
    assert proc.stdout.strip() == "4.0"



@pytest.mark.devices(2)
def test_threads_streams_and_allocations_interleaved():
    """Several threads, each on its own stream and device, allocating, computing and freeing at
    once (ops release the GIL): no deadlock, no crash, right answers, nothing leaked."""
    import threading

    errors = []
    gc.collect()
    before = [torch.devx.memory_allocated(d) for d in range(2)]

    def work(seed: int) -> None:
        try:
            device = seed % 2
            gen = torch.Generator().manual_seed(seed)
            stream = torch.devx.Stream(device=device)
            with torch.devx.stream(stream):
                for step in range(40):
                    n = 1 + (seed * 37 + step * 101) % 5000
                    a = torch.randn(n, generator=gen)
                    d = a.to(f"devx:{device}")
                    keep = [torch.empty(1 + (step * 13) % 3000, device=f"devx:{device}") for _ in range(3)]
                    got = (d * 2 + 1).sum().item()
                    want = (a * 2 + 1).sum().item()
                    assert abs(got - want) <= 1e-3 * max(1.0, abs(want)), (got, want)
                    del keep
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert not errors, errors
    gc.collect()
    assert [torch.devx.memory_allocated(d) for d in range(2)] == before


def test_blocks_are_reused_by_the_stream_that_freed_them(devx):
    """CUDA's rule: a freed block serves its own stream again, not another one (whose work is not
    ordered after the work that used it)."""
    import torch

    n = 3 << 18  # 3 MiB: a large-pool block of its own segment
    side = torch.devx.Stream()
    with torch.devx.stream(side):
        a = torch.empty(n, device="devx")
        side_ptr = a.data_ptr()
        del a
    b = torch.empty(n, device="devx")
    assert b.data_ptr() != side_ptr
    with torch.devx.stream(side):
        c = torch.empty(n, device="devx")
        assert c.data_ptr() == side_ptr
    del b, c
    torch.devx.synchronize()


@pytest.mark.devices(2)
def test_record_stream_on_synchronous_streams_reuses_at_once(devx):
    """Once the recorded stream has passed the free, the block is reused."""
    n = 3 << 18
    side = torch.devx.Stream()
    x = torch.empty(n, device="devx")
    ptr = x.data_ptr()
    x.record_stream(side)
    del x
    torch.devx.synchronize()
    y = torch.empty(n, device="devx")
    assert y.data_ptr() == ptr
    with pytest.raises(RuntimeError, match="devx:1"):
        torch.empty(4, device="devx").record_stream(torch.devx.Stream(device=1))


def test_compute_allocator_entry_points_hand_out_devx_memory():
    # What the cuda vendor installs as CUDA's pluggable allocator (C functions, called here the
    # way torch calls them), on whatever vendor this is: the bytes come from the devx allocator.
    proc = run_python("""
        import ctypes, torch, torch_devx
        lib = ctypes.CDLL(torch_devx._C.__file__)
        malloc, free = lib.devx_compute_malloc, lib.devx_compute_free
        malloc.restype = ctypes.c_void_p
        malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        size = 4 << 20
        before = torch.devx.memory_allocated(1)
        ptr = malloc(size, 1, None)
        assert ptr and torch.devx.memory_allocated(1) == before + size
        assert torch.devx.memory_allocated(0) == 0
        free(ptr, size, 1, None)
        assert torch.devx.memory_allocated(1) == before
        # A pointer devx never handed out is reported, not freed and not fatal.
        stray = ctypes.create_string_buffer(64)
        free(ctypes.addressof(stray), 64, 0, None)
        print("alive")
    """)
    assert_child_ok(proc)
    assert proc.stdout.strip() == "alive"
    assert "which devx never handed it" in proc.stderr


def test_runtime_allocator_settings_are_checked_and_applied():
    proc = run_python("""
import torch, torch_devx
big = 32 << 20
def oversize_after_alloc():
    x = torch.empty(big, dtype=torch.uint8, device="devx")
    n = torch.devx.memory_stats()["oversize_segments.current"]
    del x
    torch.devx.empty_cache()
    return n
assert oversize_after_alloc() == 0
try:
    torch._C._accelerator_setAllocatorSettings("bogus:1")
    raise AssertionError("an unknown allocator setting was accepted")
except ValueError as e:
    assert "bogus" in str(e), e
torch._C._accelerator_setAllocatorSettings("max_split_size_mb:21")
assert oversize_after_alloc() == 1          # 32 MiB is above the new split limit
torch._C._accelerator_setAllocatorSettings("expandable_segments:False,roundup_power2_divisions:[64:8,256:4]")
print("OK")
""")
    assert_child_ok(proc)
    assert "OK" in proc.stdout
