"""The cuda vendor library (libdevx_vendor_cuda.so) tested through its C table, with no torch.

The table is mirrored in ctypes, so these tests also catch a vendor built against a different
vendor_api.h than this mirror. Where no GPU is present, only the "no device" path is checked,
in a subprocess, because a vendor that crashes on a GPU-less machine would take pytest down too.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Optional

import pytest

from vendor_abi import (API_VERSION, DEVICE_FUNCTIONS, KERNEL_ABI_VERSION, P, DeviceProperties, DType, HostFn,
                        KernelContext, MemcpyKind, Status, Tensor, VendorApi, c_float, c_int,
                        c_size_t, c_void_p)

REPO = Path(__file__).resolve().parents[1]
LIB_NAME = "libdevx_vendor_cuda.so"
C10_DEVICE_TYPE_CUDA = 1
MiB = 1 << 20


def find_library() -> tuple[Optional[Path], list[Path]]:
    """The built vendor library, looked for where a build leaves it; also the places searched."""
    roots = [REPO / "src" / "torch_devx", REPO / "build"]
    if os.environ.get("DEVX_VENDOR_LIB_DIR"):
        roots.insert(0, Path(os.environ["DEVX_VENDOR_LIB_DIR"]))
    for root in roots:
        if root.is_dir():
            found = sorted(root.rglob(LIB_NAME))
            if found:
                return found[0], roots
    return None, roots


def load_api(lib_path: Path) -> VendorApi:
    lib = ctypes.CDLL(str(lib_path))
    lib.devx_vendor_get_api.restype = P(VendorApi)
    return lib.devx_vendor_get_api().contents


def last_error(api: VendorApi) -> str:
    return api.last_error().decode()


def check(api: VendorApi, status: int) -> None:
    assert status == Status.OK, f"{Status(status).name}: {last_error(api)}"


def probe(lib_path: Path) -> dict:
    """Runs in the subprocess: init twice (it must be idempotent), then, where init failed,
    calls that must fail cleanly rather than crash."""
    api = load_api(lib_path)
    report = {"init": [api.init(), api.init()], "init_error": last_error(api)}
    if report["init"][0] != Status.OK:
        count, ptr = c_int(), c_void_p()
        report["device_count"] = [api.device_count(ctypes.byref(count)), last_error(api)]
        report["malloc"] = [api.malloc(0, MiB, ctypes.byref(ptr)), last_error(api)]
    return report


@pytest.fixture(scope="module")
def lib_path() -> Path:
    path, searched = find_library()
    if path is None:
        pytest.skip(
            f"{LIB_NAME} was not built (needs the CUDA toolkit at build time); searched "
            + ", ".join(str(p) for p in searched)
        )
    return path


@pytest.fixture(scope="module")
def probed(lib_path: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, str(lib_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"probe exited with {proc.returncode}: {proc.stderr}"
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def api(lib_path: Path, probed: dict) -> VendorApi:
    if probed["init"][0] != Status.OK:
        pytest.skip("no CUDA device")
    loaded = load_api(lib_path)
    check(loaded, loaded.init())
    return loaded


@pytest.fixture
def device_buffer(api: VendorApi) -> Iterator[int]:
    ptr = c_void_p()
    check(api, api.malloc(0, MiB, ctypes.byref(ptr)))
    yield ptr.value
    check(api, api.free(0, ptr))


@pytest.fixture
def stream(api: VendorApi) -> Iterator[int]:
    least, greatest = c_int(), c_int()
    check(api, api.stream_priority_range(ctypes.byref(least), ctypes.byref(greatest)))
    handle = c_void_p()
    check(api, api.stream_create(0, greatest.value, ctypes.byref(handle)))
    yield handle.value
    check(api, api.stream_destroy(handle))


def make_event(api: VendorApi, enable_timing: bool) -> int:
    handle = c_void_p()
    check(api, api.event_create(0, int(enable_timing), ctypes.byref(handle)))
    return handle.value


def test_table(lib_path: Path) -> None:
    api = load_api(lib_path)
    assert api.api_version == API_VERSION
    assert api.name == b"cuda"
    assert api.compute_device_type == C10_DEVICE_TYPE_CUDA
    assert api.kernel_abi_version == KERNEL_ABI_VERSION
    assert api.collective_engine == b"nccl"
    # Its own kernels: softmax forward (cuda_softmax.cu), then the terminator.
    assert api.kernels[0].op == b"_softmax.out" and api.kernels[0].fn
    assert api.kernels[1].op is None and api.kernels[1].fn is None
    missing = [name for name, _ in DEVICE_FUNCTIONS if not getattr(api, name)]
    assert not missing, f"null entries: {missing}"


def test_init_is_idempotent_and_exits_cleanly(probed: dict) -> None:
    first, second = probed["init"]
    assert first in (Status.OK, Status.NO_DEVICE)
    assert second == first


def test_init_without_device(probed: dict) -> None:
    if probed["init"][0] == Status.OK:
        pytest.skip("a CUDA device is present")
    assert probed["init"][0] == Status.NO_DEVICE
    assert "no usable CUDA device" in probed["init_error"]
    assert "cudaGetDeviceCount" in probed["init_error"]
    status, message = probed["device_count"]
    assert status != Status.OK and "cudaGetDeviceCount" in message
    status, message = probed["malloc"]
    assert status != Status.OK and message.startswith("cuda vendor: cuda")


def test_devices(api: VendorApi) -> None:
    count, current = c_int(), c_int()
    check(api, api.device_count(ctypes.byref(count)))
    assert count.value >= 1
    check(api, api.set_device(0))
    check(api, api.get_device(ctypes.byref(current)))
    assert current.value == 0
    props = DeviceProperties()
    check(api, api.device_properties(0, ctypes.byref(props)))
    assert props.name and props.total_memory > 0 and props.major >= 1
    assert props.multi_processor_count > 0
    check(api, api.device_synchronize(0))

    assert api.set_device(count.value) == Status.INVALID
    assert "cudaSetDevice" in last_error(api)
    check(api, api.get_device(ctypes.byref(current)))
    assert current.value == 0


def test_malloc_free_and_mem_info(api: VendorApi) -> None:
    free_before, total = c_size_t(), c_size_t()
    check(api, api.mem_get_info(0, ctypes.byref(free_before), ctypes.byref(total)))
    assert 0 < free_before.value <= total.value
    ptr = c_void_p()
    check(api, api.malloc(0, 64 * MiB, ctypes.byref(ptr)))
    assert ptr.value
    check(api, api.free(0, ptr))


def test_memcpy_round_trip(api: VendorApi, device_buffer: int) -> None:
    src = (ctypes.c_ubyte * MiB).from_buffer_copy(bytes(i % 251 for i in range(MiB)))
    dst = (ctypes.c_ubyte * MiB)()
    other = c_void_p()
    check(api, api.malloc(0, MiB, ctypes.byref(other)))
    try:
        check(api, api.memcpy_sync(device_buffer, src, MiB, MemcpyKind.H2D))
        check(api, api.memcpy_sync(other, device_buffer, MiB, MemcpyKind.D2D))
        check(api, api.memset_sync(other, 7, 16))
        check(api, api.memcpy_sync(dst, other, MiB, MemcpyKind.D2H))
    finally:
        check(api, api.free(0, other))
    assert bytes(dst)[:16] == b"\x07" * 16
    assert bytes(dst)[16:] == bytes(src)[16:]


def test_host_memory_async_copies(api: VendorApi, device_buffer: int, stream: int) -> None:
    pinned = c_void_p()
    check(api, api.host_malloc(2 * MiB, ctypes.byref(pinned)))
    try:
        upload = (ctypes.c_ubyte * MiB).from_address(pinned.value)
        download = (ctypes.c_ubyte * MiB).from_address(pinned.value + MiB)
        ctypes.memset(upload, 0x5A, MiB)
        check(api, api.memcpy_async(device_buffer, upload, MiB, MemcpyKind.H2D, stream))
        check(api, api.memset_async(device_buffer, 0x11, 8, stream))
        check(api, api.memcpy_async(download, device_buffer, MiB, MemcpyKind.D2H, stream))
        check(api, api.stream_synchronize(stream))
        check(api, api.stream_query(stream))
        assert bytes(download)[:8] == b"\x11" * 8
        assert bytes(download)[8:] == b"\x5a" * (MiB - 8)
    finally:
        check(api, api.host_free(pinned))


def test_default_stream(api: VendorApi, device_buffer: int) -> None:
    out = (ctypes.c_ubyte * 4)()
    check(api, api.memset_async(device_buffer, 3, 4, None))
    check(api, api.memcpy_async(out, device_buffer, 4, MemcpyKind.D2H, None))
    check(api, api.stream_synchronize(None))
    assert bytes(out) == b"\x03" * 4


def test_stream_wait_event_and_host_func(api: VendorApi, stream: int) -> None:
    least, greatest = c_int(), c_int()
    check(api, api.stream_priority_range(ctypes.byref(least), ctypes.byref(greatest)))
    assert greatest.value <= least.value
    waiter = c_void_p()
    check(api, api.stream_create(0, least.value, ctypes.byref(waiter)))
    event = make_event(api, enable_timing=False)
    ran = []
    callback = HostFn(lambda _: ran.append(True))  # kept alive until the stream has run it
    try:
        check(api, api.event_record(event, stream))
        check(api, api.stream_wait_event(waiter, event))
        check(api, api.launch_host_func(waiter, callback, None))
        check(api, api.stream_synchronize(waiter))
        assert ran == [True]
        check(api, api.event_query(event))
    finally:
        check(api, api.event_destroy(event))
        check(api, api.stream_destroy(waiter))


def test_event_elapsed_time(api: VendorApi, stream: int) -> None:
    size = 256 * MiB
    big = c_void_p()
    check(api, api.malloc(0, size, ctypes.byref(big)))
    start, end = make_event(api, True), make_event(api, True)
    untimed = make_event(api, False)
    try:
        check(api, api.event_record(start, stream))
        check(api, api.memset_async(big, 1, size, stream))
        check(api, api.event_record(end, stream))
        check(api, api.event_record(untimed, stream))
        check(api, api.event_synchronize(end))
        check(api, api.event_query(end))
        ms = c_float()
        check(api, api.event_elapsed_ms(start, end, ctypes.byref(ms)))
        assert ms.value > 0.0
        assert api.event_elapsed_ms(start, untimed, ctypes.byref(ms)) != Status.OK
        assert "cudaEventElapsedTime" in last_error(api)
    finally:
        for event in (start, end, untimed):
            check(api, api.event_destroy(event))
        check(api, api.free(0, big))


def test_oom_then_allocation_still_works(api: VendorApi) -> None:
    ptr = c_void_p()
    assert api.malloc(0, 1 << 50, ctypes.byref(ptr)) == Status.OOM
    message = last_error(api)
    assert "cudaMalloc" in message and str(1 << 50) in message and "free of" in message
    check(api, api.malloc(0, MiB, ctypes.byref(ptr)))
    check(api, api.free(0, ptr))


if __name__ == "__main__":
    print(json.dumps(probe(Path(sys.argv[1]))))


SoftmaxKernel = ctypes.CFUNCTYPE(c_int, P(KernelContext), P(Tensor), ctypes.c_int64, c_int, P(Tensor))


def test_own_softmax_kernel_matches_a_reference(api: VendorApi, device_buffer: int, stream: int) -> None:
    import math
    import random

    softmax = SoftmaxKernel(ctypes.cast(api.kernels[0].fn, c_void_p).value)
    outer, n, inner = 3, 300, 2  # dim 1 of a (3, 300, 2) float32 tensor; n > the block size
    count = outer * n * inner
    rng = random.Random(0)
    values = [rng.uniform(-8, 8) for _ in range(count)]
    host = (ctypes.c_float * count)(*values)
    sizes = (ctypes.c_int64 * 3)(outer, n, inner)
    strides = (ctypes.c_int64 * 3)(n * inner, inner, 1)
    out = c_void_p()
    check(api, api.malloc(0, count * 4, ctypes.byref(out)))
    try:
        check(api, api.memcpy_sync(device_buffer, host, count * 4, MemcpyKind.H2D))
        src = Tensor(device_buffer, DType.FLOAT32, 3, sizes, strides, 0, 0)
        dst = Tensor(out, DType.FLOAT32, 3, sizes, strides, 0, 0)
        ctx = KernelContext(device=0, stream=stream)
        check(api, softmax(ctypes.byref(ctx), ctypes.byref(src), 1, 0, ctypes.byref(dst)))
        check(api, api.stream_synchronize(stream))
        result = (ctypes.c_float * count)()
        check(api, api.memcpy_sync(result, out, count * 4, MemcpyKind.D2H))
        # A declined case: float16 is not handled, and says so without touching memory.
        half = Tensor(device_buffer, DType.FLOAT16, 3, sizes, strides, 0, 0)
        assert softmax(ctypes.byref(ctx), ctypes.byref(half), 1, 0, ctypes.byref(half)) == Status.DECLINED
    finally:
        check(api, api.free(0, out))
    for o in range(outer):
        for i in range(inner):
            row = [values[o * n * inner + k * inner + i] for k in range(n)]
            top = max(row)
            total = sum(math.exp(v - top) for v in row)
            for k in range(n):
                want = math.exp(row[k] - top) / total
                assert result[o * n * inner + k * inner + i] == pytest.approx(want, rel=1e-5, abs=1e-7)
