"""The cpu_sim vendor library (libdevx_vendor_cpu_sim.so) tested through its C table, with no torch.

The table is mirrored in ctypes, so these tests also catch a vendor built against a different
vendor_api.h than this mirror. cpu_sim reads its settings (DEVX_SIM_*) once, in init(), so every
test that initialises it runs in a fresh interpreter with its own environment: `run_sim` starts one
with `PRELUDE` (which loads the library through this module) followed by the test's code, and
fails the test with the child's output when the child fails.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable, Optional, Union

import pytest

from vendor_abi import (API_VERSION, DEVICE_FUNCTIONS, KERNEL_ABI_VERSION, P, HostFn,
                        Status, VendorApi, c_float, c_size_t, c_void_p)

REPO = Path(__file__).resolve().parents[1]
LIB_NAME = "libdevx_vendor_cpu_sim.so"
C10_DEVICE_TYPE_CPU = 0
MiB = 1 << 20
GiB = 1 << 30


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


class Sim:
    """The table plus the few helpers the child processes' code uses."""

    def __init__(self, lib_path: str) -> None:
        lib = ctypes.CDLL(lib_path)
        lib.devx_vendor_get_api.restype = P(VendorApi)
        self.api = lib.devx_vendor_get_api().contents
        self._callbacks: list[HostFn] = []  # ctypes callbacks must outlive the streams' use

    def error(self) -> str:
        return self.api.last_error().decode()

    def check(self, status: int) -> None:
        assert status == Status.OK, f"{Status(status).name}: {self.error()}"

    def fails(self, status: int, expected: Status, *fragments: str) -> str:
        """Asserts `status` is `expected` and the message contains every fragment."""
        message = self.error()
        assert status == expected, f"got {Status(status).name}, expected {expected.name}: {message}"
        for fragment in fragments:
            assert fragment in message, f"{fragment!r} not in {message!r}"
        return message

    def malloc(self, device: int, size: int) -> int:
        ptr = c_void_p()
        self.check(self.api.malloc(device, size, ctypes.byref(ptr)))
        assert ptr.value
        return ptr.value

    def mem_info(self, device: int) -> tuple[int, int]:
        free, total = c_size_t(), c_size_t()
        self.check(self.api.mem_get_info(device, ctypes.byref(free), ctypes.byref(total)))
        return free.value, total.value

    def stream(self, device: int = 0, priority: int = 0) -> int:
        handle = c_void_p()
        self.check(self.api.stream_create(device, priority, ctypes.byref(handle)))
        return handle.value

    def event(self, device: int = 0, timing: bool = True) -> int:
        handle = c_void_p()
        self.check(self.api.event_create(device, int(timing), ctypes.byref(handle)))
        return handle.value

    def host_func(self, stream: Optional[int], fn: Union[HostFn, Callable[[], object]]) -> None:
        callback = fn if isinstance(fn, HostFn) else HostFn(lambda _: fn())
        self._callbacks.append(callback)
        self.check(self.api.launch_host_func(stream, callback, None))

    def elapsed_ms(self, start: int, end: int) -> float:
        ms = c_float()
        self.check(self.api.event_elapsed_ms(start, end, ctypes.byref(ms)))
        return ms.value


RunSim = Callable[..., subprocess.CompletedProcess]
CompileHelper = Callable[..., Path]

PRELUDE = """
import ctypes, sys, threading, time
sys.path.insert(0, {tests_dir!r})
from test_cpu_sim_vendor import GiB, MiB, Sim
from vendor_abi import DeviceProperties, HostFn, MemcpyKind, Status
from ctypes import byref, c_float, c_int, c_size_t, c_void_p
sim = Sim({lib!r})
api = sim.api
"""


@pytest.fixture(scope="module")
def lib_path() -> Path:
    path, searched = find_library()
    if path is None:
        pytest.skip(
            f"{LIB_NAME} is not built (cmake -S csrc/vendor/cpu_sim -B build/cpu_sim && "
            "cmake --build build/cpu_sim, or set DEVX_VENDOR_LIB_DIR); searched "
            + ", ".join(str(p) for p in searched)
        )
    return path


@pytest.fixture
def run_sim(lib_path: Path) -> RunSim:
    """run_sim(code, init=True, **env): runs `code` after PRELUDE in a fresh interpreter whose
    DEVX_SIM_* variables are exactly `env`; returns the finished process (stdout as text)."""

    def run(
        code: str, init: bool = True, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess:
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("DEVX_SIM_")}
        child_env.update(env)
        source = PRELUDE.format(tests_dir=str(Path(__file__).parent), lib=str(lib_path))
        if init:
            source += "sim.check(api.init())\n"
        source += textwrap.dedent(code)
        proc = subprocess.run(
            [sys.executable, "-c", source],
            env=child_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, (
            f"child exited with {proc.returncode}\n--- stdout\n{proc.stdout}\n"
            f"--- stderr\n{proc.stderr}"
        )
        return proc

    return run


@pytest.fixture
def compile_helper(tmp_path: Path) -> CompileHelper:
    """compile_helper(name, source, *flags): builds `source` (C++) with the system compiler into
    tmp_path/name and returns its path; skips the test where no compiler is installed."""
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the test helper")

    def build(name: str, source: str, *flags: str) -> Path:
        src, out = tmp_path / f"{name}.cpp", tmp_path / name
        src.write_text(textwrap.dedent(source))
        cmd = [compiler, "-O2", "-std=c++17", f"-I{REPO / 'csrc'}", str(src), "-o", str(out)]
        proc = subprocess.run(cmd + list(flags), capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.fail(f"could not build the test helper {name}:\n{proc.stderr}")
        return out

    return build


def test_table(lib_path: Path) -> None:
    api = Sim(str(lib_path)).api
    assert api.api_version == API_VERSION
    assert api.name == b"cpu_sim"
    assert api.compute_device_type == C10_DEVICE_TYPE_CPU
    assert api.kernel_abi_version == KERNEL_ABI_VERSION
    assert api.collective_engine == b"gloo"
    # Its own kernels are offered unless DEVX_SIM_KERNELS=aten (the default), read by init().
    assert api.kernels[0].op is None and api.kernels[0].fn is None
    functions = [name for name, _ in DEVICE_FUNCTIONS] + ["op_supported", "async_host_streams", "host_access"]
    missing = [name for name in functions if not getattr(api, name)]
    assert not missing, f"null entries: {missing}"
    host_access = api.host_access.contents
    missing = [name for name, _ in host_access._fields_ if not getattr(host_access, name)]
    assert not missing, f"null host_access entries: {missing}"


def test_host_access_is_recorded_outside_device_work_only(run_sim: RunSim) -> None:
    # The table's host_access on its own, without the core: cpu_sim memory is host memory, so a
    # watched range is closed to host code, which is let through and recorded.
    proc = run_sim("""
        import platform
        from vendor_abi import AccessKind, HostAccess
        watch = api.host_access.contents
        page = c_size_t()
        sim.check(watch.start(byref(page)))
        raw = sim.malloc(0, 3 * page.value)
        base = (raw + page.value - 1) // page.value * page.value
        sim.check(api.memset_sync(base, 0xAB, page.value))
        sim.fails(watch.watch(base + 1, page.value, 0), Status.INVALID, "not whole pages")
        sim.check(watch.watch(base, page.value, 7))
        sim.fails(watch.watch(base, page.value, 7), Status.INVALID, "watched already")
        records = (HostAccess * 8)()
        dropped = ctypes.c_uint64()

        def take():
            n = watch.take(records, 8, byref(dropped))
            return [(r.address - base, r.range == base, r.tag, r.kind) for r in records[:n]]

        print("READ", ctypes.string_at(base + 5, 2).hex())       # let through
        x86 = platform.machine() in ("x86_64", "AMD64")
        print("TOOK", take() == [(5, True, 7, AccessKind.READ if x86 else AccessKind.UNKNOWN)], dropped.value)
        watch.set_tag(base, 9)
        ctypes.memmove(base + 9, b"\x01", 1)                    # closed again by take()
        print("WROTE", take() == [(9, True, 9, AccessKind.WRITE if x86 else AccessKind.UNKNOWN)])
        sim.check(watch.enter_device_work())                      # device work: not host code's
        ctypes.memmove(base + 10, b"\x02", 1)
        watch.leave_device_work()
        print("DEVICE", take())
        watch.unwatch(base)
        print("UNWATCHED", ctypes.string_at(base + 8, 4).hex(), take())
        sim.check(api.free(0, raw))
        """)
    assert "READ abab" in proc.stdout
    assert "TOOK True 0" in proc.stdout
    assert "WROTE True" in proc.stdout
    assert "DEVICE []" in proc.stdout
    assert "UNWATCHED ab0102ab []" in proc.stdout


def test_only_the_entry_symbol_is_exported(lib_path: Path) -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm")
    out = subprocess.run(
        [nm, "-D", "--defined-only", str(lib_path)], check=True, capture_output=True, text=True
    ).stdout
    assert [line.split()[-1] for line in out.splitlines()] == ["devx_vendor_get_api"]


def test_use_before_init_fails_cleanly(run_sim: RunSim) -> None:
    run_sim(
        """
        count = c_int()
        sim.fails(api.device_count(byref(count)), Status.ERROR, "init()")
        sim.fails(api.malloc(0, 16, byref(c_void_p())), Status.ERROR, "init()")
        """,
        init=False,
    )


def test_device_count_default_and_from_env(run_sim: RunSim) -> None:
    code = """
        sim.check(api.init())  # a second init is a no-op
        count = c_int()
        sim.check(api.device_count(byref(count)))
        print(count.value)
        """
    assert run_sim(code).stdout.split() == ["2"]
    assert run_sim(code, DEVX_SIM_DEVICES="5").stdout.split() == ["5"]
    assert run_sim(code, DEVX_SIM_DEVICES=" 1 ").stdout.split() == ["1"]


@pytest.mark.parametrize(
    "name, value, accepted",
    [
        ("DEVX_SIM_DEVICES", "0", "from 1 to 64"),
        ("DEVX_SIM_DEVICES", "65", "from 1 to 64"),
        ("DEVX_SIM_DEVICES", "two", "from 1 to 64"),
        ("DEVX_SIM_DEVICES", "1.5", "from 1 to 64"),
        ("DEVX_SIM_MEMORY", "12XB", "K/M/G/T suffix such as 8GiB"),
        ("DEVX_SIM_MEMORY", "-1G", "K/M/G/T suffix such as 8GiB"),
        ("DEVX_SIM_MEMORY", "G", "K/M/G/T suffix such as 8GiB"),
        ("DEVX_SIM_MEMORY", "0", "out of range"),
        ("DEVX_SIM_MEMORY", "99999999T", "out of range"),
        ("DEVX_SIM_ASYNC", "maybe", "1/0, true/false, on/off or yes/no"),
    ],
)
def test_bad_setting_fails_init(run_sim: RunSim, name: str, value: str, accepted: str) -> None:
    run_sim(
        f"""
        for _ in range(2):  # a failed init is not remembered as a success
            sim.fails(api.init(), Status.INVALID, "{name}='{value}'", {accepted!r})
        """,
        init=False,
        **{name: value},
    )


@pytest.mark.parametrize(
    "value, capacity",
    [
        ("", 16 * GiB),
        ("4096", 4096),
        ("1000", 1024),  # rounded up to the 512-byte allocation granule
        ("512k", 512 << 10),
        ("64MB", 64 * MiB),
        ("2MiB", 2 * MiB),
        ("1.5G", 3 * GiB // 2),
        ("8gib", 8 * GiB),
        ("2T", 2 << 40),
        ("100b", 512),
    ],
)
def test_memory_setting(run_sim: RunSim, value: str, capacity: int) -> None:
    out = run_sim("print(*sim.mem_info(0), *sim.mem_info(1))", DEVX_SIM_MEMORY=value).stdout
    assert out.split() == [str(capacity)] * 4


@pytest.mark.parametrize(
    "value, expected", [("on", True), ("TRUE", True), ("yes", True), ("0", False), ("off", False)]
)
def test_async_setting(run_sim: RunSim, value: str, expected: bool) -> None:
    # Async mode shows as a submission that returns before its work ran (a host that then
    # synchronizes may run the work itself, so the thread it ran on tells nothing).
    out = run_sim(
        """
        ran = []
        sim.host_func(None, lambda: (time.sleep(0.2), ran.append(1)))
        print(not ran)
        sim.check(api.stream_synchronize(None))
        assert ran == [1]
        """,
        DEVX_SIM_ASYNC=value,
    ).stdout
    assert out.split() == [str(expected)]


def test_devices_and_properties(run_sim: RunSim) -> None:
    run_sim(
        """
        import os
        current = c_int()
        sim.check(api.get_device(byref(current)))
        assert current.value == 0
        sim.check(api.set_device(1))
        sim.check(api.get_device(byref(current)))
        assert current.value == 1
        seen = c_int(-1)  # the current device is per thread
        t = threading.Thread(target=lambda: api.get_device(byref(seen)))
        t.start(); t.join()
        assert seen.value == 0

        sim.fails(api.set_device(5), Status.INVALID,
                  "invalid device index 5: cpu_sim has 2 devices")
        sim.fails(api.set_device(-1), Status.INVALID, "invalid device index -1")
        sim.fails(api.malloc(2, 16, byref(c_void_p())), Status.INVALID, "invalid device index 2")
        sim.check(api.get_device(byref(current)))
        assert current.value == 1

        props = DeviceProperties()
        sim.check(api.device_properties(1, byref(props)))
        assert props.name == b"devx cpu_sim device 1"
        assert props.total_memory == 256 * MiB
        assert (props.major, props.minor) == (1, 0)
        assert props.multi_processor_count == os.cpu_count()
        sim.fails(api.device_properties(3, byref(props)), Status.INVALID, "invalid device index 3")
        sim.check(api.device_synchronize(0))
        sim.check(api.device_synchronize(1))
        """,
        DEVX_SIM_MEMORY="256M",
    )


def test_alloc_free_reuse_and_alignment(run_sim: RunSim) -> None:
    run_sim(
        """
        a = sim.malloc(0, 1000)
        b = sim.malloc(0, 1)
        assert a % 512 == 0 and b % 512 == 0 and b - a == 1024
        sim.check(api.free(0, a))
        assert sim.malloc(0, 700) == a  # best fit: the freed hole, not the tail
        empty1, empty2 = sim.malloc(0, 0), sim.malloc(0, 0)
        assert empty1 and empty2 and empty1 != empty2  # size 0: unique, freeable pointers
        for ptr in (a, b, empty1, empty2):
            sim.check(api.free(0, ptr))
        assert sim.mem_info(0)[0] == sim.mem_info(0)[1]
        # Devices have separate arenas.
        on1 = sim.malloc(1, 4096)
        assert sim.malloc(0, 4096) != on1
        """
    )


def test_coalescing(run_sim: RunSim) -> None:
    run_sim(
        """
        sizes = (3 * MiB, 512 * 1024, 5 * MiB)
        a, b, c = (sim.malloc(0, n) for n in sizes)
        fence = sim.malloc(0, 4096)  # so the merged block is not simply the arena's tail
        for ptr in (b, a, c):  # middle first: each later free merges with a neighbour
            sim.check(api.free(0, ptr))
        assert sim.malloc(0, sum(sizes)) == a
        """
    )


def test_best_fit_picks_the_smallest_hole(run_sim: RunSim) -> None:
    run_sim(
        """
        blocks = [sim.malloc(0, n * 4096) for n in (8, 1, 4, 1, 6, 1)]
        for i in (0, 2, 4):  # holes of 8, 4 and 6 pages, kept apart by the 1-page blocks
            sim.check(api.free(0, blocks[i]))
        assert sim.malloc(0, 5 * 4096) == blocks[4]
        assert sim.malloc(0, 3 * 4096) == blocks[2]
        """
    )


def test_oom_message_and_recovery(run_sim: RunSim) -> None:
    run_sim(
        """
        big = sim.malloc(0, 48 * MiB)
        small = sim.malloc(0, 4 * MiB)
        ptr = c_void_p()
        msg = sim.fails(api.malloc(0, 32 * MiB, byref(ptr)), Status.OOM,
                        "cpu_sim device 0 out of memory: tried to allocate "
                        "32.00 MiB (33554432 bytes)",
                        "52.00 MiB (54525952 bytes) in use of 64.00 MiB (67108864 bytes) capacity",
                        "largest free block 12.00 MiB (12582912 bytes)", "DEVX_SIM_MEMORY")
        sim.fails(api.malloc(0, 2**63, byref(ptr)), Status.OOM, "out of memory")
        sim.check(api.malloc(1, 32 * MiB, byref(ptr)))  # other devices are unaffected
        sim.check(api.free(0, big))
        sim.malloc(0, 32 * MiB)
        sim.malloc(0, 16 * MiB)
        """,
        DEVX_SIM_MEMORY="64MiB",
    )


def test_bad_free(run_sim: RunSim) -> None:
    run_sim(
        """
        sim.fails(api.free(0, 0x1234), Status.INVALID, "cannot free 0x1234",
                  "not a live allocation on this device")
        a = sim.malloc(0, 4096)
        sim.fails(api.free(0, a + 512), Status.INVALID, hex(a + 512),
                  "not the start of an allocation")
        sim.fails(api.free(1, a), Status.INVALID, "cpu_sim device 1", "in device 0's memory")
        sim.check(api.free(0, a))
        sim.fails(api.free(0, a), Status.INVALID, "already freed")
        sim.fails(api.free(7, a), Status.INVALID, "invalid device index 7")
        """
    )


def test_mem_get_info(run_sim: RunSim) -> None:
    run_sim(
        """
        assert sim.mem_info(0) == (1 * GiB, 1 * GiB)
        a = sim.malloc(0, 10 * MiB)
        b = sim.malloc(0, 1)  # counted as its rounded size
        assert sim.mem_info(0) == (1 * GiB - 10 * MiB - 512, 1 * GiB)
        assert sim.mem_info(1) == (1 * GiB, 1 * GiB)
        sim.check(api.free(0, a))
        assert sim.mem_info(0) == (1 * GiB - 512, 1 * GiB)
        sim.check(api.free(0, b))
        assert sim.mem_info(0) == (1 * GiB, 1 * GiB)
        sim.fails(api.mem_get_info(2, byref(c_size_t()), byref(c_size_t())), Status.INVALID)
        """,
        DEVX_SIM_MEMORY="1G",
    )


@pytest.mark.parametrize("async_mode", ["0", "1"])
def test_memcpy_and_memset_across_devices(run_sim: RunSim, async_mode: str) -> None:
    run_sim(
        """
        n = 3 * MiB + 5
        src = (ctypes.c_ubyte * n).from_buffer_copy(bytes(i % 251 for i in range(n)))
        dst = (ctypes.c_ubyte * n)()
        d0, d1 = sim.malloc(0, n), sim.malloc(1, n)
        sim.check(api.memcpy_sync(d0, src, n, MemcpyKind.H2D))
        sim.check(api.memcpy_sync(d1, d0, n, MemcpyKind.D2D))
        sim.check(api.memset_sync(d1, 7, 16))
        sim.check(api.memcpy_sync(dst, d1, n, MemcpyKind.D2H))
        assert bytes(dst) == b"\\x07" * 16 + bytes(src)[16:]

        # The same on streams, the default stream of device 1 and a created one on device 0.
        sim.check(api.set_device(1))
        s0 = sim.stream(0)
        back = (ctypes.c_ubyte * n)()
        sim.check(api.memset_async(d1, 9, n, None))
        sim.check(api.stream_synchronize(None))
        sim.check(api.memcpy_async(d0, d1, n, MemcpyKind.D2D, s0))
        sim.check(api.memset_async(d0, 1, 3, s0))
        sim.check(api.memcpy_async(back, d0, n, MemcpyKind.D2H, s0))
        sim.check(api.stream_synchronize(s0))
        assert bytes(back) == b"\\x01" * 3 + b"\\x09" * (n - 3)

        # Overlapping copies within one allocation behave like memmove.
        sim.check(api.memcpy_sync(d0, src, 64, MemcpyKind.H2D))
        sim.check(api.memcpy_sync(d0 + 8, d0, 32, MemcpyKind.D2D))
        sim.check(api.memcpy_sync(back, d0, 40, MemcpyKind.D2H))
        assert bytes(back)[:40] == bytes(src)[:8] + bytes(src)[:32]

        # Host pointers where device memory belongs fail as they would on a real device.
        sim.fails(api.memcpy_sync(dst, src, 16, MemcpyKind.H2D), Status.INVALID,
                  "memcpy H2D: destination", "is not cpu_sim device memory")
        sim.fails(api.memcpy_sync(dst, src, 16, MemcpyKind.D2H), Status.INVALID, "D2H: source")
        sim.fails(api.memcpy_sync(d0, dst, 16, MemcpyKind.D2D), Status.INVALID, "D2D: source")
        sim.fails(api.memset_async(dst, 0, 16, s0), Status.INVALID, "memset")
        sim.fails(api.memcpy_sync(d0, src, 16, 9), Status.INVALID, "unknown kind 9")
        sim.check(api.memcpy_sync(dst, src, 16, MemcpyKind.H2H))
        sim.check(api.memcpy_sync(None, None, 0, MemcpyKind.H2D))
        sim.check(api.stream_destroy(s0))
        """,
        DEVX_SIM_ASYNC=async_mode,
    )


def test_host_memory(run_sim: RunSim) -> None:
    run_sim(
        """
        import mmap
        ptr = c_void_p()
        sim.check(api.host_malloc(10000, byref(ptr)))
        assert ptr.value % mmap.PAGESIZE == 0
        ctypes.memset(ptr.value, 1, 10000)
        sim.check(api.host_free(ptr))
        sim.fails(api.host_free(ptr), Status.INVALID, "not allocated by host_malloc")
        sim.fails(api.host_free(0x5000), Status.INVALID, "0x5000")
        """
    )


def test_freed_memory_goes_back_to_the_os(run_sim: RunSim) -> None:
    run_sim(
        """
        import mmap
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * mmap.PAGESIZE
        keep = sim.malloc(0, 4096)  # a live neighbour: only whole interior pages may go
        ptr = sim.malloc(0, 256 * MiB)
        before = rss()
        sim.check(api.memset_sync(ptr, 1, 256 * MiB))
        assert rss() - before > 200 * MiB
        sim.check(api.free(0, ptr))
        assert rss() - before < 16 * MiB
        again = sim.malloc(0, 256 * MiB)  # reused memory reads as zeros, as fresh pages do
        out = (ctypes.c_ubyte * 64)()
        sim.check(api.memcpy_sync(out, again + 128 * MiB, 64, MemcpyKind.D2H))
        assert bytes(out) == bytes(64)
        """
    )


@pytest.mark.parametrize("async_mode", ["0", "1"])
def test_event_elapsed_time_around_a_sleep(run_sim: RunSim, async_mode: str) -> None:
    out = run_sim(
        """
        s = sim.stream()
        start, end = sim.event(), sim.event()
        sim.check(api.event_record(start, s))
        sim.host_func(s, lambda: time.sleep(0.02))
        sim.check(api.event_record(end, s))
        sim.check(api.event_synchronize(end))
        sim.check(api.event_query(end))
        print(sim.elapsed_ms(start, end))
        # On the default stream too.
        sim.check(api.event_record(start, None))
        sim.host_func(None, lambda: time.sleep(0.02))
        sim.check(api.event_record(end, None))
        sim.check(api.stream_synchronize(None))
        print(sim.elapsed_ms(start, end))
        """,
        DEVX_SIM_ASYNC=async_mode,
    ).stdout
    for ms in map(float, out.split()):
        assert 19.0 <= ms < 1000.0


def test_elapsed_time_errors(run_sim: RunSim) -> None:
    run_sim(
        """
        timed, untimed, unrecorded = sim.event(), sim.event(timing=False), sim.event()
        for e in (timed, untimed):
            sim.check(api.event_record(e, None))
        ms = c_float()
        sim.fails(api.event_elapsed_ms(timed, untimed, byref(ms)), Status.INVALID,
                  "end event was created without timing")
        sim.fails(api.event_elapsed_ms(untimed, timed, byref(ms)), Status.INVALID,
                  "start event was created without timing")
        sim.fails(api.event_elapsed_ms(timed, unrecorded, byref(ms)), Status.INVALID,
                  "end event has not been recorded")
        sim.check(api.event_query(unrecorded))  # never recorded counts as complete, as in CUDA
        sim.check(api.event_synchronize(unrecorded))
        sim.fails(api.event_record(sim.event(device=1), None), Status.INVALID,
                  "event of device 1 cannot be recorded on a stream of device 0")
        sim.check(api.event_destroy(timed))
        sim.fails(api.event_destroy(timed), Status.INVALID, "unknown cpu_sim event")
        sim.fails(api.event_query(timed), Status.INVALID, "already destroyed")
        sim.fails(api.stream_synchronize(0x1000), Status.INVALID, "unknown cpu_sim stream 0x1000")
        sim.fails(api.stream_destroy(None), Status.INVALID, "default stream")
        """
    )


def test_stream_priority_range_and_creation(run_sim: RunSim) -> None:
    run_sim(
        """
        least, greatest = c_int(), c_int()
        sim.check(api.stream_priority_range(byref(least), byref(greatest)))
        assert (least.value, greatest.value) == (0, -2)
        for priority in (-100, -1, 0, 7):
            sim.check(api.stream_destroy(sim.stream(1, priority)))
        sim.fails(api.stream_create(2, 0, byref(c_void_p())), Status.INVALID,
                  "invalid device index 2")
        """
    )


def test_sync_mode_runs_work_on_the_caller(run_sim: RunSim) -> None:
    run_sim(
        """
        ran = []
        sim.host_func(None, lambda: ran.append(threading.get_ident()))
        assert ran == [threading.get_ident()]
        sim.check(api.stream_query(None))
        """
    )


def test_async_host_func_returns_at_once(run_sim: RunSim) -> None:
    run_sim(
        """
        s = sim.stream()
        done = sim.event(timing=False)
        ran = []
        t0 = time.perf_counter()
        sim.host_func(s, lambda: (time.sleep(0.3), ran.append(1)))
        sim.check(api.event_record(done, s))
        assert time.perf_counter() - t0 < 0.1
        assert api.stream_query(s) == Status.NOT_READY
        assert api.event_query(done) == Status.NOT_READY
        assert api.device_synchronize(1) == Status.OK  # another device's streams are not waited for
        assert api.stream_query(s) == Status.NOT_READY
        sim.check(api.stream_synchronize(s))
        assert ran == [1]
        sim.check(api.stream_query(s))
        sim.check(api.event_query(done))

        sim.host_func(s, lambda: time.sleep(0.2))
        sim.host_func(None, lambda: time.sleep(0.2))
        sim.check(api.device_synchronize(0))  # waits for every stream of the device
        sim.check(api.stream_query(s))
        sim.check(api.stream_query(None))
        """,
        DEVX_SIM_ASYNC="1",
    )


def test_streams_ordered_by_events(run_sim: RunSim) -> None:
    run_sim(
        """
        buf = (ctypes.c_int * 4)()
        producer, consumer = sim.stream(), sim.stream(0, -2)
        ready = sim.event(timing=False)
        seen = []

        def produce():
            time.sleep(0.2)
            buf[0] = 42

        sim.host_func(producer, produce)
        sim.check(api.event_record(ready, producer))
        sim.check(api.stream_wait_event(consumer, ready))
        sim.host_func(consumer, lambda: seen.append(buf[0]))
        # Re-recording now must not move what the consumer waits for (still the first recording).
        sim.host_func(producer, lambda: time.sleep(0.3))
        sim.check(api.event_record(ready, producer))
        sim.check(api.stream_synchronize(consumer))
        assert seen == [42]
        assert api.stream_query(producer) == Status.NOT_READY
        sim.check(api.stream_synchronize(producer))

        # A wait on an event never recorded is a no-op.
        fresh = sim.event(timing=False)
        sim.check(api.stream_wait_event(consumer, fresh))
        sim.check(api.stream_synchronize(consumer))

        # Across devices, and an event destroyed while work still refers to it.
        other = sim.stream(1)
        mark = sim.event(device=1, timing=False)
        sim.host_func(other, lambda: (time.sleep(0.1), buf.__setitem__(1, 7)))
        sim.check(api.event_record(mark, other))
        sim.check(api.stream_wait_event(consumer, mark))
        sim.check(api.event_destroy(mark))
        sim.host_func(consumer, lambda: seen.append(buf[1]))
        sim.check(api.stream_synchronize(consumer))
        assert seen == [42, 7]
        for s in (producer, consumer, other):
            sim.check(api.stream_destroy(s))
        """,
        DEVX_SIM_ASYNC="1",
    )


def test_stream_destroy_finishes_its_work(run_sim: RunSim) -> None:
    run_sim(
        """
        s = sim.stream()
        ran = []
        sim.host_func(s, lambda: (time.sleep(0.1), ran.append(1)))
        sim.check(api.stream_destroy(s))
        assert ran == [1]
        sim.fails(api.stream_query(s), Status.INVALID, "unknown cpu_sim stream")
        """,
        DEVX_SIM_ASYNC="1",
    )


@pytest.mark.parametrize("async_mode", ["0", "1"])
def test_host_function_exception(
    run_sim: RunSim, compile_helper: CompileHelper, async_mode: str
) -> None:
    thrower = compile_helper(
        "libthrower.so",
        """
        #include <stdexcept>
        extern "C" void devx_test_throw(void*) { throw std::runtime_error("kernel exploded"); }
        """,
        "-shared",
        "-fPIC",
    )
    run_sim(
        f"""
        thrower = ctypes.CDLL({str(thrower)!r})
        fn = HostFn(ctypes.cast(thrower.devx_test_throw, c_void_p).value)
        status = api.launch_host_func(None, fn, None)
        if {async_mode!r} == "1":
            sim.check(status)  # reported by the next synchronize, once
            status = api.stream_synchronize(None)
        sim.fails(status, Status.ERROR, "host function on cpu_sim device 0 threw: kernel exploded")
        sim.check(api.stream_synchronize(None))
        ran = []
        sim.host_func(None, lambda: ran.append(1))  # the stream keeps working
        sim.check(api.stream_synchronize(None))
        assert ran == [1]
        """,
        DEVX_SIM_ASYNC=async_mode,
    )


def test_exit_with_busy_workers(run_sim: RunSim) -> None:
    """Exit drops queued work and waits only for what is running: a pure C host function
    (usleep) on several streams, and a Python one that wakes up while Python finalises."""
    t0 = time.perf_counter()
    proc = run_sim(
        """
        libc = ctypes.CDLL(None)
        usleep = HostFn(ctypes.cast(libc.usleep, c_void_p).value)  # usleep(user_data µs)
        streams = [sim.stream(d) for d in (0, 1)] + [None]
        for s in streams:
            for _ in range(20):
                sim.check(api.launch_host_func(s, usleep, 300_000))
        waiter = sim.stream()
        never = sim.event()
        sim.check(api.event_record(never, streams[0]))  # queued behind 6 s of sleeps
        sim.check(api.stream_wait_event(waiter, never))
        sim.host_func(sim.stream(1), lambda: time.sleep(0.5))
        time.sleep(0.1)
        print("exiting")
        """,
        timeout=30,
        DEVX_SIM_ASYNC="1",
    )
    assert proc.stdout.split() == ["exiting"]
    assert time.perf_counter() - t0 < 4.0, "exit ran the queued work instead of dropping it"


def test_alloc_free_cost(lib_path: Path, compile_helper: CompileHelper) -> None:
    """Steady-state cost of a small malloc/free pair, measured in C (ctypes would dominate)."""
    bench = compile_helper(
        "alloc_bench",
        """
        #include <dlfcn.h>
        #include <chrono>
        #include <cstdio>
        #include <vector>
        #include "runtime/vendor_api.h"

        int main(int, char** argv) {
          void* lib = dlopen(argv[1], RTLD_NOW);
          auto get = reinterpret_cast<DevxVendorGetApiFn>(dlsym(lib, DEVX_VENDOR_ENTRY_SYMBOL));
          const DevxVendorApi* api = get();
          if (api->init() != DEVX_OK) return 1;
          // Some fragmentation first, so the trees are not trivially small.
          std::vector<void*> live(2000);
          for (size_t i = 0; i < live.size(); ++i) api->malloc(0, 512 * (1 + i % 7), &live[i]);
          for (size_t i = 0; i < live.size(); i += 2) api->free(0, live[i]);
          const int n = 1000000;
          for (int pass = 0; pass < 2; ++pass) {  // the first pass warms up
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < n; ++i) {
              void* p;
              if (api->malloc(0, 4096, &p) != DEVX_OK || api->free(0, p) != DEVX_OK) return 2;
            }
            std::chrono::duration<double, std::nano> dt = std::chrono::steady_clock::now() - t0;
            if (pass == 1) std::printf("%.1f\\n", dt.count() / n);
          }
          return 0;
        }
        """,
        "-ldl",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVX_SIM_")}
    proc = subprocess.run(
        [str(bench), str(lib_path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    ns = float(proc.stdout)
    print(f"cpu_sim malloc+free pair: {ns:.1f} ns")
    assert ns < 2000, f"{ns:.0f} ns per malloc/free pair"
