"""`make tsan`: the threaded tests under ThreadSanitizer.

torch_devx (its `_C` and the cpu_sim vendor) is built with -fsanitize=thread into build-tsan/,
as a package of its own (build-tsan/package/torch_devx: the Python sources copied, the libraries
built there), and the tests of the code that runs on several threads (streams and their workers,
the caching allocator, asynchronous issue, settings changed while ops run, process groups) run
against it, in both stream modes, with libtsan preloaded into the (uninstrumented) interpreter
and every child process. Each process writes its reports under build-tsan/reports/; any report
fails the run, and the distinct ones are summarised.

Python and torch are not instrumented: their own synchronisation is invisible to TSAN except
through the pthread calls it intercepts, so accesses that torch orders with its own atomics (the
refcounts of intrusive_ptr, released inside libtorch) can be reported though they do not race.
scripts/tsan.supp lists those, each with its reason; nothing of torch_devx's is suppressed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build-tsan"
PACKAGE_ROOT = BUILD / "package"
PACKAGE = PACKAGE_ROOT / "torch_devx"
REPORTS = BUILD / "reports"
SUPPRESSIONS = REPO / "scripts" / "tsan.supp"

TESTS = ["tests/test_streams.py", "tests/test_allocator.py", "tests/test_async.py", "tests/test_settings.py",
         "tests/test_distributed.py"]
MODES = [("sync", {}), ("async", {"DEVX_SIM_ASYNC": "1"})]


def libtsan() -> str:
    path = subprocess.run(["g++", "-print-file-name=libtsan.so"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(path) or not os.path.exists(path):
        sys.exit("make tsan: g++ has no libtsan (Debian: apt-get install libtsan2)")
    return os.path.realpath(path)


def build() -> None:
    """Configures and builds into build-tsan/; incremental after the first time."""
    if PACKAGE.exists():
        for entry in PACKAGE.iterdir():
            if not entry.name.endswith(".so") and entry.name != "include":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    shutil.copytree(REPO / "src" / "torch_devx", PACKAGE, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.so", "include", "__pycache__"))
    bin_dir = Path(sys.executable).parent
    cmake = shutil.which("cmake", path=str(bin_dir)) or "cmake"
    ninja = shutil.which("ninja", path=str(bin_dir)) or shutil.which("ninja")
    configure = [cmake, "-S", str(REPO), "-B", str(BUILD / "cmake"), f"-DPython3_EXECUTABLE={sys.executable}",
                 f"-DDEVX_PACKAGE_DIR={PACKAGE}", "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DDEVX_SANITIZE=thread",
                 "-DDEVX_NO_CUDA=ON"]
    if ninja and not (BUILD / "cmake" / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    subprocess.check_call(configure)
    subprocess.check_call([cmake, "--build", str(BUILD / "cmake"), "-j", os.environ.get("MAX_JOBS", "2")])


def summarise(reports: list[Path]) -> list[str]:
    """One line per distinct report: its headline and the first torch_devx frames."""
    seen: dict[str, int] = {}
    for report in reports:
        for block in report.read_text(errors="replace").split("==================")[1:]:
            headline = next((line.strip() for line in block.splitlines() if "ThreadSanitizer:" in line), "")
            if not headline:
                continue
            frames = re.findall(r"#\d+ (\S+) (\S*(?:csrc|torch_devx)\S*)", block)[:3]
            key = re.sub(r"\(pid=\d+\)|0x[0-9a-f]+", "", headline) + " | " + "; ".join(
                f"{fn} {where.split('/csrc/')[-1]}" for fn, where in frames)
            seen[key] = seen.get(key, 0) + 1
    return [f"{count:4d}x {key}" for key, count in sorted(seen.items(), key=lambda kv: -kv[1])]


def main() -> int:
    build()
    shutil.rmtree(REPORTS, ignore_errors=True)
    REPORTS.mkdir(parents=True)
    env = dict(os.environ)
    env.update({
        "LD_PRELOAD": libtsan(),
        "TSAN_OPTIONS": f"log_path={REPORTS}/report suppressions={SUPPRESSIONS} halt_on_error=0 "
                        "report_signal_unsafe=0 history_size=4",
        "TORCH_DEVX_PACKAGE_ROOT": str(PACKAGE_ROOT),
        "PYTHONPATH": str(PACKAGE_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""),
    })
    failed = []
    for name, mode_env in MODES:
        print(f"== make tsan: {name} streams: {' '.join(TESTS)}", flush=True)
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
                               cwd=str(REPO), env={**env, **mode_env})
        if code != 0:
            failed.append(f"{name}: pytest exited {code}")
    reports = sorted(REPORTS.glob("report*"))
    lines = summarise(reports)
    for line in lines:
        print(line)
    print(f"make tsan: {len(reports)} processes reported, {len(lines)} distinct reports"
          + (f"; {'; '.join(failed)}" if failed else ""))
    return 1 if reports or failed else 0


if __name__ == "__main__":
    sys.exit(main())
