"""The vendor author's conformance kit: every kernel the loaded vendor provides, run on PyTorch's
OpInfo samples against the CPU.

    python -m torch_devx vendor-test [--ops REGEX] [--opinfos REGEX] [--dtypes float32,float64,...]
                                     [--samples N] [--jobs J] [--timeout S] [--json PATH] [--all]

A kernel ("add.out") serves aten ops (add.Tensor, add_.Tensor, add.out). The OpInfos whose names
relate to those ops' names (every applicable one with --all) run in child processes, each sample on
the CPU and on devx as torch_devx.tools.opinfo_check compares them (forward, and backward for
floating dtypes). The vendor kernels a sample called on devx share its verdict; a sample that
differs from the CPU is rerun with kernels' ops forced to the CPU fallback to find the kernel to
blame (judge_sample). What counts as differing is opinfo_check.compare()'s: besides the tolerance,
it accepts indices among equal values that pick the same values, 16-bit/float32 results at least as
close to a float64 reference as the CPU's, rounding differences within the spread one-ulp
perturbations of the CPU's own computation give, and output dtypes the core took from the op's meta
function (listed under the table as the core's, not judged against a kernel).

Verdicts, per kernel:
    pass      every sample that called it matched the CPU
    mismatch  a sample differed from the CPU because of it (max abs/rel error, first bad index)
    error     devx raised where the CPU did not, because of it (the kernel returned an error)
    joint     a sample that called it differed from the CPU, and no one of the kernels it called
              could be blamed alone
    crash     a child process died or hung in an op it serves (the crashing sample is rerun alone
              with op dumps, DIPU_DUMP_OP_ARGS=1, to name the op)
    declined  it was asked, and declined every call
    untested  no sample reached it (or only samples that failed because of other kernels)
Exit status: 1 on any mismatch, error, joint or crash, 2 when there is nothing to test.

Children read OpInfo names from stdin, one a line, and write JSON lines to their stdout (a "start"
line before each OpInfo, a "sample" line before each sample, a "done" line with the OpInfo's
result); a child that dies is replaced by a fresh one for the OpInfos left. They inherit the
environment (DEVX_VENDOR, DEVX_SIM_KERNELS, ...), with CUDA mocking off.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import faulthandler
import json
import logging
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import IO, Any, Callable, Iterator, Optional

import torch
import torch_devx
from torch_devx import diagnostics
from torch_devx.tools import opinfo_check as oc

logger = logging.getLogger("torch_devx.tools.vendor_test")

DEFAULT_DTYPES = ("float32", "float64", "float16", "bfloat16", "complex64", "int64", "int32", "bool")
# The dtypes of the kernel ABI (devx_kernel_abi.h's DevxDType).
ABI_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
              "complex64", "complex128")
STATUSES = ("crash", "mismatch", "error", "joint", "pass", "declined", "untested")
FAILING = ("crash", "mismatch", "error", "joint")
MAX_JOINT_NAMED = 4
STDERR_TAIL_LINES = 20

# --- which kernels, which OpInfos ----------------------------------------------------------------


def kernel_ops() -> dict[str, list[str]]:
    """{kernel: [aten overloads it serves]} for the loaded vendor's own kernels."""
    return {k: sorted(ops) for k, ops in torch_devx._C._kernel_ops().items()}


def draws_random(kernel: str) -> bool:
    """Whether a kernel's values come from the generator (a Generator argument; native_dropout draws
    its mask without one): devx's Philox streams differ from the CPU's, so only shapes compare."""
    name, _, overload = kernel.partition(".")
    if name == "native_dropout":
        return True
    try:
        schema = torch._C._get_schema(f"aten::{name}", overload)
    except RuntimeError:  # a kernel for an op this torch lacks
        return False
    return any("Generator" in str(a.type) for a in schema.arguments)


# Op name parts that say how, not what: cut so "max_pool2d_with_indices_backward" relates to the
# max_pool2d OpInfo.
_HOW = re.compile(r"_(backward|forward|overrideable|impl|legit|with_indices|with_update|functional|dense|data)(_|$).*")
# Ops whose OpInfos are named otherwise.
_ALIASES = {
    "convolution": ("conv",),
    "nll_loss": ("cross_entropy",),
    "nll_loss2d": ("nll_loss", "cross_entropy"),
    "log_softmax": ("cross_entropy",),
    "mm": ("matmul", "linear", "einsum"),
    "addmm": ("matmul", "linear"),
    "bmm": ("matmul", "einsum"),
    "index": ("getitem",),
    "index_put": ("setitem",),
    "upsample_nearest2d": ("interpolate",),
    "upsample_bilinear2d": ("interpolate",),
}
# Shorter names relate only when equal: OpInfo "lu" is no relative of relu, nor "t" of every op.
MIN_RELATED_CHARS = 3


def op_stems(overload: str) -> set[str]:
    """The names OpInfos of an aten overload may go by: "_native_batch_norm_legit.out" ->
    {"native_batch_norm_legit", "batch_norm_legit", "native_batch_norm", "batch_norm"}."""
    base = overload.split(".")[0].strip("_")
    stems = {base, base.removeprefix("native_")}
    stems |= {_HOW.sub("", s) for s in stems}
    stems |= {alias for s in stems for alias in _ALIASES.get(s, ())}
    return {s for s in stems if s}


def opinfo_key(op: Any) -> str:
    return op.name.split(".")[-1].strip("_")


def related(key: str, stems: set[str]) -> bool:
    for stem in stems:
        shorter, longer = sorted((key, stem), key=len)
        if key == stem or (len(shorter) >= MIN_RELATED_CHARS and shorter in longer):
            return True
    return False


def select_opinfos(ops: list, kernels: dict[str, list[str]]) -> list:
    stems = {s for served in kernels.values() for overload in served for s in op_stems(overload)}
    return [op for op in ops if related(opinfo_key(op), stems)]


def parse_dtypes(text: str) -> tuple[torch.dtype, ...]:
    names = ABI_DTYPES if text.strip() == "all" else [n.strip() for n in text.split(",") if n.strip()]
    dtypes = []
    for name in names:
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"--dtypes: {name!r} is not a torch dtype (e.g. float32, int64, bool, or 'all')")
        dtypes.append(dtype)
    if not dtypes:
        raise ValueError("--dtypes names no dtype")
    return tuple(dtypes)


def kit_op_db() -> list:
    """op_db and the _foreach_* OpInfos it leaves out."""
    return oc.load_op_db() + oc.load_foreach_db()


# --- the child: OpInfos from stdin, one JSON line per event --------------------------------------


class KernelWindow(oc.FallbackWindow):
    """Also the vendor kernels called, and the calls declined, while the devx side of a sample runs."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: Counter = Counter()
        self.declined: Counter = Counter()  # (op, reason) -> calls

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        diagnostics.reset_kernel_stats()
        try:
            with super().__call__():
                yield
        finally:
            stats = diagnostics.kernel_stats()
            self.kernels.update(stats["vendor"])
            self.declined.update(stats["declined"])
            diagnostics.reset_kernel_stats()


def describe_sample(sample: Any, limit: int = 300) -> str:
    """"Tensor[5, 5] float32, Tensor[5] float32, alpha=2": what a vendor author needs to rebuild it."""
    def describe(x: Any) -> str:
        if isinstance(x, torch.Tensor):
            layout = "" if x.dim() < 2 or x.is_contiguous() else " non-contiguous"
            return f"Tensor{list(x.shape)} {oc.dtype_name(x.dtype)}{layout}"
        if isinstance(x, (list, tuple)):
            inner = ", ".join(describe(i) for i in x)
            return f"[{inner}]" if isinstance(x, list) else f"({inner})"
        if isinstance(x, dict):
            return "{" + ", ".join(f"{k}: {describe(v)}" for k, v in x.items()) + "}"
        return repr(x)

    text = ", ".join([describe(sample.input)] + [describe(a) for a in sample.args]
                     + [f"{k}={describe(v)}" for k, v in sample.kwargs.items()])
    return text if len(text) <= limit else text[:limit] + "..."


def _rerun(op: Any, case: oc.SampleCase, forced: list[str]) -> oc.OpResult:
    """The sample again, with the aten overloads `forced` on the CPU fallback."""
    before = diagnostics.force_fallback()
    diagnostics.set_force_fallback(before + [re.escape(o) for o in forced])
    try:
        res = oc.OpResult(oc.full_name(op))
        oc.check_sample(op, case, res, oc.FallbackWindow())
        return res
    finally:
        diagnostics.set_force_fallback(before)


def _ok(res: oc.OpResult) -> bool:
    return bool(res.samples) and not res.failures


def _forcing(served: dict[str, list[str]], kernels: list[str]) -> list[str]:
    return [o for k in kernels for o in served.get(k, [])]


# How the core reports a kernel that returned an error status.
_KERNEL_ERROR = re.compile(r"devx: vendor \S+ kernel (\S+) \(for ")


def judge_sample(op: Any, case: oc.SampleCase, res: oc.OpResult, called: list[str],
                 served: dict[str, list[str]]) -> tuple[list[str], Optional[dict[str, Any]]]:
    """(the called kernels the sample vouches for, the failure with the kernels it blames or None).

    A kernel that returned an error status is blamed by name. Otherwise the failing sample is rerun
    with each called kernel's ops forced to the CPU fallback: those whose removal alone fixes it are
    blamed. Failing that: if the sample fails with every called kernel on the fallback, no kernel is
    to blame; else those that alone on devx make it fail are; else every called kernel, jointly.
    Kernels that draw random numbers are on the fallback throughout (their values cannot match the
    CPU's) and are judged by the shapes of what they produced."""
    if not res.failures:
        return called, None
    failure = res.failures[0]
    named = _KERNEL_ERROR.search(failure["message"]) if failure["kind"] == "error" else None
    if named:
        return [], {**failure, "kernels": [named.group(1)], "joint": False}
    drawn = [k for k in called if draws_random(k)] if not case.meta_only else []
    forced = _forcing(served, drawn)
    if drawn and _ok(_rerun(op, case, forced)):
        shapes = replace(case, meta_only=True)
        res = _rerun(op, shapes, [])
        if _ok(res):
            return called, None
        blamed = [k for k in drawn if _ok(_rerun(op, shapes, _forcing(served, [k])))]
        return ([k for k in called if k not in drawn],
                {**res.failures[0], "kernels": blamed or drawn, "joint": not blamed})
    candidates = [k for k in called if k not in drawn]
    blamed = [k for k in candidates if _ok(_rerun(op, case, forced + _forcing(served, [k])))]
    if blamed:
        return [], {**failure, "kernels": blamed, "joint": False}
    # Still failing with every vendor kernel on the CPU: not theirs (one candidate's removal was that run).
    if len(candidates) < 2 or not _ok(_rerun(op, case, forced + _forcing(served, candidates))):
        return [], {**failure, "kernels": [], "joint": False}
    alone = [k for k in candidates
             if not _ok(_rerun(op, case, forced + _forcing(served, [c for c in candidates if c != k])))]
    return [], {**failure, "kernels": alone or candidates, "joint": not alone}


def check_opinfo(op: Any, served: dict[str, list[str]], dtypes: tuple[torch.dtype, ...], samples: int,
                 emit: Callable[[dict[str, Any]], None], only_sample: Optional[str] = None) -> dict[str, Any]:
    """One OpInfo's samples on the CPU and devx: per kernel the samples that called it and passed or
    failed because of it, the calls it declined, and each failing sample with its blamed kernels."""
    name = oc.full_name(op)
    kernel_of = {o: k for k, ops in served.items() for o in ops}
    t0 = time.perf_counter()
    notes: list[str] = []
    kernels: dict[str, Counter] = collections.defaultdict(Counter)
    declined: dict[str, Counter] = collections.defaultdict(Counter)
    fallback: Counter = Counter()
    failures: list[dict[str, Any]] = []
    tested = 0
    for case in oc.iter_samples(op, samples, 0, dtypes, notes):
        if only_sample is not None and case.tag != only_sample:
            continue
        emit({"event": "sample", "opinfo": name, "sample": case.tag})
        window = KernelWindow()
        res = oc.OpResult(name)
        if only_sample is not None:
            diagnostics.set_dump_op_args(1)
        oc.check_sample(op, case, res, window)
        notes.extend(res.notes)
        if not res.samples:
            continue
        tested += 1
        fallback.update(window.calls)
        for (o, reason), n in window.declined.items():
            declined[kernel_of.get(o, o)][reason] += n
        called = sorted(window.kernels)
        for k in called:
            kernels[k]["calls"] += window.kernels[k]
        passed, failure = judge_sample(op, case, res, called, served)
        for k in passed:
            kernels[k]["passed"] += 1
        if failure is not None:
            for k in failure["kernels"]:
                kernels[k]["failed"] += 1
            failures.append({**failure, "description": describe_sample(case.sample), "called": called})
    return {"opinfo": name, "seconds": time.perf_counter() - t0, "samples": tested,
            "kernels": {k: dict(c) for k, c in kernels.items()},
            "declined": {k: dict(c) for k, c in declined.items()},
            "fallback": dict(fallback), "failures": failures, "notes": notes}


def child_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m torch_devx.tools.vendor_test",
                                 description="a vendor-test child: OpInfo names on stdin, JSON lines on stdout")
    ap.add_argument("--child", action="store_true", required=True)
    ap.add_argument("--dtypes", default=",".join(DEFAULT_DTYPES))
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--probe", nargs=2, metavar=("OPINFO", "SAMPLE"),
                    help="run this one sample with op dumps on (after a crash) instead of reading stdin")
    args = ap.parse_args(argv)
    faulthandler.enable()
    # The events get the real stdout; whatever else writes there (ops, the vendor) goes to stderr.
    events = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def emit(event: dict[str, Any]) -> None:
        events.write(json.dumps(event) + "\n")
        events.flush()

    dtypes = parse_dtypes(args.dtypes)
    served = kernel_ops()
    by_name = {oc.full_name(op): op for op in kit_op_db()}
    names = [args.probe[0]] if args.probe else (line.strip() for line in sys.stdin)
    with oc.devx_checks(), warnings.catch_warnings():
        # Deprecation notices of the ops themselves (torch.lu, torch.qr, ...) are no finding.
        warnings.simplefilter("ignore")
        emit({"event": "ready"})
        for name in names:
            if not name:
                continue
            emit({"event": "start", "opinfo": name})
            result = check_opinfo(by_name[name], served, dtypes, args.samples, emit,
                                  only_sample=args.probe[1] if args.probe else None)
            emit({"event": "done", "opinfo": name, "result": result})
    return 0


# --- the parent: children, crashes, the report ----------------------------------------------------


@dataclass
class _Child:
    proc: subprocess.Popen
    stderr: IO[bytes]
    probe: Optional[dict[str, Any]] = None  # the crash this child reruns
    ready: bool = False
    current: Optional[str] = None  # OpInfo sent and not yet done
    sample: Optional[str] = None
    since: float = 0.0
    timed_out: bool = False
    pending: bytes = b""

    def stderr_lines(self) -> list[str]:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace").splitlines()


def _death(rc: int, timed_out: bool, timeout: float) -> str:
    if timed_out:
        return f"timed out after {timeout:.0f} s"
    if rc < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-rc).name}"
    return f"exit status {rc}"


_DUMPED_OP = re.compile(r"op aten::(\S+)\s+kernel:")


class _Runner:
    """Runs OpInfos in up to `jobs` children; a child that dies costs the OpInfo it was on."""

    def __init__(self, names: list[str], child_args: list[str], jobs: int, timeout: float,
                 kernel_of: dict[str, str]) -> None:
        self.queue = collections.deque(names)
        self.total = len(names)
        self.child_args = child_args
        self.jobs = jobs
        self.timeout = timeout
        self.kernel_of = kernel_of
        self.results: dict[str, dict[str, Any]] = {}
        self.crashes: list[dict[str, Any]] = []
        self.probes: collections.deque = collections.deque()
        self.children: list[_Child] = []
        self.selector = selectors.DefaultSelector()

    def _spawn(self, probe: Optional[dict[str, Any]] = None) -> None:
        env = dict(os.environ, DEVX_MOCK_CUDA="0")
        args = list(self.child_args)
        if probe:
            # The op dumps must reach the stderr this process reads.
            env.pop("DEVX_LOG_PATH", None)
            args += ["--probe", probe["opinfo"], probe["sample"]]
        stderr = tempfile.TemporaryFile()
        proc = subprocess.Popen([sys.executable, "-m", "torch_devx.tools.vendor_test", "--child", *args],
                                stdin=subprocess.DEVNULL if probe else subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr, env=env)
        child = _Child(proc, stderr, probe=probe)
        self.children.append(child)
        self.selector.register(proc.stdout, selectors.EVENT_READ, child)

    def _feed(self, child: _Child) -> None:
        if child.probe:
            return
        if self.queue:
            child.current = self.queue.popleft()
            child.sample = None
            child.since = time.monotonic()
            # A child that died meanwhile is seen at the end of its stdout.
            with contextlib.suppress(BrokenPipeError):
                child.proc.stdin.write(child.current.encode() + b"\n")
                child.proc.stdin.flush()
        else:
            with contextlib.suppress(BrokenPipeError):
                child.proc.stdin.close()

    def _event(self, child: _Child, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "ready":
            child.ready = True
            self._feed(child)
        elif kind == "start":
            child.since = time.monotonic()
        elif kind == "sample":
            child.sample = event["sample"]
            if child.probe:
                child.since = time.monotonic()
        elif kind == "done" and not child.probe:
            self.results[event["opinfo"]] = event["result"]
            logger.info("[%d/%d] %s: %.1f s", len(self.results) + len(self.crashes), self.total, event["opinfo"],
                        event["result"]["seconds"])
            child.current = child.sample = None
            self._feed(child)

    def _ended(self, child: _Child) -> None:
        self.selector.unregister(child.proc.stdout)
        child.proc.stdout.close()
        rc = child.proc.wait()
        self.children.remove(child)
        if child.probe:
            self._probed(child, rc)
        elif child.current is not None or rc != 0:
            if not child.ready:
                tail = "\n".join(child.stderr_lines()[-STDERR_TAIL_LINES:])
                child.stderr.close()
                raise RuntimeError(f"a vendor-test child failed to start ({_death(rc, child.timed_out, self.timeout)}):"
                                   f"\n{tail}")
            crash = {"opinfo": child.current, "sample": child.sample,
                     "reason": _death(rc, child.timed_out, self.timeout),
                     "stderr": child.stderr_lines()[-STDERR_TAIL_LINES:],
                     "kernel": None, "op": None, "reproduced": None}
            logger.warning("%s %s: %s", crash["opinfo"], crash["sample"] or "", crash["reason"])
            self.crashes.append(crash)
            if child.current is not None and child.sample is not None:
                self.probes.append(crash)
        child.stderr.close()

    def _probed(self, child: _Child, rc: int) -> None:
        crash = child.probe
        crash["reproduced"] = rc != 0 and child.sample is not None
        if crash["reproduced"]:
            dumped = [m.group(1) for m in map(_DUMPED_OP.search, child.stderr_lines()) if m]
            if dumped:
                crash["op"] = dumped[-1]
                crash["kernel"] = self.kernel_of.get(dumped[-1])

    def _top_up(self) -> None:
        while len(self.children) < self.jobs:
            if self.probes:
                self._spawn(self.probes.popleft())
            elif len(self.queue) > sum(not c.probe and c.current is None for c in self.children):
                self._spawn()
            else:
                return

    def run(self) -> None:
        try:
            self._top_up()
            while self.children:
                for key, _ in self.selector.select(timeout=1.0):
                    child: _Child = key.data
                    data = os.read(key.fileobj.fileno(), 1 << 16)
                    if not data:
                        self._ended(child)
                        continue
                    *lines, child.pending = (child.pending + data).split(b"\n")
                    for line in lines:
                        try:
                            event = json.loads(line)
                        except ValueError:  # written before the child took stdout for its events
                            logger.debug("vendor-test child: %r", line)
                            continue
                        self._event(child, event)
                now = time.monotonic()
                for child in self.children:
                    busy = child.current is not None or (child.probe and child.sample is not None)
                    if busy and not child.timed_out and now - child.since > self.timeout:
                        child.timed_out = True
                        child.proc.kill()
                self._top_up()
        finally:
            for child in self.children:
                child.proc.kill()
                child.proc.wait()
                child.stderr.close()


@dataclass
class KernelReport:
    serves: list[str]
    status: str = "untested"
    calls: int = 0
    samples_passed: int = 0
    samples_failed: int = 0
    declined: dict[str, int] = field(default_factory=dict)
    opinfos: list[str] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    crashes: list[dict[str, Any]] = field(default_factory=list)

    def judge(self) -> None:
        own = [f for f in self.failures if not f["joint"]]
        if self.crashes:
            self.status = "crash"
        elif any(f["kind"] == "mismatch" for f in own):
            self.status = "mismatch"
        elif own:
            self.status = "error"
        elif self.failures:
            self.status = "joint"
        elif self.samples_passed:
            self.status = "pass"
        elif self.declined and not self.calls:
            self.status = "declined"
        else:
            self.status = "untested"


def _regex(option: str, pattern: Optional[str]) -> Optional[re.Pattern]:
    try:
        return re.compile(pattern) if pattern else None
    except re.error as e:
        raise ValueError(f"{option} {pattern!r}: {e}") from None


def _settings() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(("DEVX_", "DIPU_"))}


def run_kit(ops: Optional[str] = None, opinfos: Optional[str] = None, dtypes: str = ",".join(DEFAULT_DTYPES),
            samples: int = 3, jobs: int = 2, timeout: float = 300.0, all_opinfos: bool = False) -> dict[str, Any]:
    """Runs the kit; the report (what --json writes): per kernel its verdict and evidence, per
    OpInfo what it reached, the crashes, and the failing samples no vendor kernel is to blame for."""
    t0 = time.perf_counter()
    chosen_dtypes = parse_dtypes(dtypes)
    if samples < 1 or jobs < 1:
        raise ValueError("--samples and --jobs must be at least 1")
    served = kernel_ops()
    if not served:
        raise ValueError(f"vendor {torch_devx.vendor} provides no kernels of its own (for cpu_sim: "
                         f"DEVX_SIM_KERNELS=own or own-only)")
    rx = _regex("--ops", ops)
    selected = {k: v for k, v in served.items() if rx is None or rx.search(k)}
    if not selected:
        raise ValueError(f"--ops {ops!r} matches none of the {len(served)} kernels of vendor {torch_devx.vendor}")
    applicable, _ = oc.applicable_ops(kit_op_db(), chosen_dtypes)
    chosen = applicable if all_opinfos else select_opinfos(applicable, selected)
    orx = _regex("--opinfos", opinfos)
    if orx:
        chosen = [op for op in chosen if orx.search(oc.full_name(op))]
    names = [oc.full_name(op) for op in chosen]
    logger.info("vendor-test: %d kernels, %d OpInfos", len(selected), len(names))

    runner = _Runner(names, ["--dtypes", ",".join(map(oc.dtype_name, chosen_dtypes)), "--samples", str(samples)],
                     jobs, timeout, {o: k for k, v in served.items() for o in v})
    runner.run()

    kernels = {k: KernelReport(serves=v) for k, v in sorted(selected.items())}
    unattributed: list[dict[str, Any]] = []
    for name in names:
        result = runner.results.get(name)
        if result is None:
            continue
        for k, c in result["kernels"].items():
            if k in kernels:
                r = kernels[k]
                r.calls += c.get("calls", 0)
                r.samples_passed += c.get("passed", 0)
                r.samples_failed += c.get("failed", 0)
                r.opinfos.append(name)
        for k, reasons in result["declined"].items():
            if k in kernels:
                kernels[k].declined = dict(Counter(kernels[k].declined) + Counter(reasons))
        for f in result["failures"]:
            if not f["kernels"]:
                unattributed.append({"opinfo": name, **f})
            for k in f["kernels"]:
                if k in kernels:
                    kernels[k].failures.append({"opinfo": name, **f})
    for crash in runner.crashes:
        if crash["kernel"] in kernels:
            kernels[crash["kernel"]].crashes.append(crash)
    for r in kernels.values():
        r.judge()
    unattributed_crashes = [c for c in runner.crashes if c["kernel"] not in kernels]
    # Differences of the core's, not of a kernel's (opinfo_check.compare): listed, not judged.
    # (A _foreach OpInfo's outputs, one per tensor of the list, are named once.)
    core_findings = sorted({f"{name}: " + (re.sub(r": output\[\d+\] is ", ": output[*] is ", note)
                                           if name.startswith("_foreach") else note)
                            for name in names for note in (runner.results.get(name) or {}).get("notes", [])
                            if note.startswith("core: ")})
    counts = Counter(r.status for r in kernels.values())
    failed = any(r.status in FAILING for r in kernels.values()) or bool(unattributed_crashes)
    return {
        "vendor": torch_devx.vendor, "torch": torch.__version__, "settings": _settings(),
        "dtypes": list(map(oc.dtype_name, chosen_dtypes)), "samples": samples, "jobs": jobs,
        "selection": {"ops": ops, "opinfos": opinfos, "all": all_opinfos},
        "seconds": time.perf_counter() - t0,
        "summary": {s: counts[s] for s in STATUSES},
        "kernels": {k: vars(r) for k, r in kernels.items()},
        "opinfo_count": len(names),
        "opinfos": {n: runner.results[n] for n in names if n in runner.results},
        "crashes": runner.crashes,
        "unattributed_crashes": unattributed_crashes,
        "unattributed_failures": unattributed,
        "core_findings": core_findings,
        "exit_status": 1 if failed else 0,
    }


# --- the table ------------------------------------------------------------------------------------


def _g(x: Any, digits: int = 3) -> str:
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def describe_failure(f: dict[str, Any]) -> str:
    """"mul float32 sample 0 forward output: max abs 1 rel 0.25, first bad at [4] got 5 expected 4
    (1/5 wrong)", with the sample's arguments and, when blamed jointly, the kernels blamed."""
    d = f.get("details") or {}
    head = f"{f['opinfo']} {f['sample']} {f['phase']}"
    if "max_abs" in d:
        what = (f"{d['where']}: max abs {_g(d['max_abs'])} rel {_g(d['max_rel'])}, first bad "
                f"at {d['first_bad_index']} got {_g(d['got'], 7)} expected {_g(d['expected'], 7)} "
                f"({d['mismatched']}/{d['numel']} wrong)")
    elif "where" in d and "got" in d:
        what = f"{d['where']}: got {d['got']}, expected {d['expected']}"
    else:
        what = f["message"]
    kernels = ", ".join(f["kernels"]) if len(f["kernels"]) <= MAX_JOINT_NAMED else f"{len(f['kernels'])} kernels"
    joint = f"; blamed jointly on {kernels}" if f["joint"] else ""
    return f"{head} {what}{joint}; sample: {f['description']}"


def describe_crash(c: dict[str, Any]) -> str:
    where = f" in op {c['op']}" if c["op"] else ""
    again = " (not when rerun alone)" if c["reproduced"] is False else ""
    return f"{c['opinfo'] or '(between OpInfos)'} {c['sample'] or ''}: {c['reason']}{where}{again}"


def _detail(r: dict[str, Any]) -> str:
    declined = ", ".join(f"{reason} x{n}" for reason, n in sorted(r["declined"].items()))
    if r["status"] == "crash":
        return describe_crash(r["crashes"][0])
    if r["status"] in ("mismatch", "error", "joint"):
        first = next(f for f in r["failures"] if r["status"] == "joint"
                     or (not f["joint"] and (r["status"] == "error" or f["kind"] == "mismatch")))
        return describe_failure(first)
    if r["status"] == "declined":
        return f"declined: {declined}"
    if r["status"] == "untested" and r["calls"]:
        return "reached only by samples that failed because of other kernels"
    return f"declined: {declined}" if declined else ""


def format_report(report: dict[str, Any]) -> str:
    kernels = report["kernels"]
    settings = " ".join(f"{k}={v}" for k, v in report["settings"].items())
    lines = [f"vendor-test: vendor {report['vendor']}{' (' + settings + ')' if settings else ''}, "
             f"torch {report['torch']}: {len(kernels)} kernels, {report['opinfo_count']} OpInfos, "
             f"{','.join(report['dtypes'])} x {report['samples']} samples, {report['seconds']:.0f} s"]
    width = max([len("kernel")] + [len(k) for k in kernels])
    lines.append(f"{'kernel':{width}}  {'status':8}  {'calls':>6}  {'samples ok/bad':>14}  detail")
    for k, r in kernels.items():
        samples = f"{r['samples_passed']}/{r['samples_failed']}"
        lines.append(f"{k:{width}}  {r['status']:8}  {r['calls']:>6}  {samples:>14}  {_detail(r)}".rstrip())
    for c in report["unattributed_crashes"]:
        lines.append(f"crash: {describe_crash(c)}")
    if report["unattributed_failures"]:
        lines.append(f"{len(report['unattributed_failures'])} failing samples fail with the vendor's kernels on the "
                     f"CPU fallback too (not theirs), e.g.: {describe_failure(report['unattributed_failures'][0])}")
    findings = report.get("core_findings", [])
    if findings:
        lines.append(f"{len(findings)} differences are the core's (outputs it allocated from the op's meta "
                     f"function), compared in the CPU's dtype, e.g.: {findings[0]}")
    summary = ", ".join(f"{n} {s}" for s, n in report["summary"].items() if n)
    lines.append(f"{len(kernels)} kernels: {summary}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
