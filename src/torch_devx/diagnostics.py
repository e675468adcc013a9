"""Python API of the backend's diagnostics. Each setter mirrors an environment switch but sets it
for this process only: the environment, which children inherit, is left alone."""
from __future__ import annotations

import difflib
import re
import warnings
from typing import Any, Callable

import torch
from torch import _C as _torch_c

from . import _C, _environ, _frames


def fallback_stats() -> dict[str, int]:
    """Calls per op that ran on the CPU fallback ("add.out" -> count)."""
    return dict(_C._fallback_stats())


def reset_fallback_stats() -> None:
    _C._reset_fallback_stats()


def kernel_stats() -> dict[str, Any]:
    """Which kernels ran since the last reset_kernel_stats():
    'vendor': calls per kernel of the vendor's own library ("add.out" -> count);
    'declined': calls the vendor's kernel declined, per (op, reason) (the reason is the dtype of
    the op's first tensor, or what the kernel ABI cannot carry), which then ran ATen's kernel or
    the CPU fallback; 'aten': calls of ATen's kernels of the compute device on devx memory."""
    calls, declined = _C._vendor_kernel_stats()
    return {
        "vendor": dict(calls),
        "declined": {(op, reason): n for op, reason, n in declined},
        "aten": _C._compute_calls() - _compute_calls_at_reset[0],
    }


_compute_calls_at_reset = [0]


def reset_kernel_stats() -> None:
    _C._reset_vendor_kernel_stats()
    _compute_calls_at_reset[0] = _C._compute_calls()


def set_force_fallback(patterns: list[str] | None) -> None:
    """Force ops matching any regex (overload names like 'add.out' or base names like 'conv2d')
    to the CPU fallback; None or [] turns it off. Same as DIPU_FORCE_FALLBACK_OPS_LIST."""
    patterns = [p.strip() for p in (patterns or []) if p.strip()]
    for p in patterns:
        if "," in p:
            raise ValueError(f"force-fallback pattern {p!r} contains ','; pass each pattern separately")
        _C._validate_pattern(p)
    _environ.set_value("DIPU_FORCE_FALLBACK_OPS_LIST", ",".join(patterns))


def _force_fallback_changed() -> None:
    _C._refresh_diagnostics()
    check_force_fallback_patterns()


_checked_force_patterns: set[str] = set()


def check_force_fallback_patterns() -> None:
    """Warn (once per pattern) about each force-fallback pattern that forces nothing: a typo (with
    the closest op names), a composite op that decomposes before it reaches the device, or an op
    devx runs with a kernel that cannot be forced. Run whenever the patterns change."""
    patterns = [p for p in _C._force_fallback_patterns() if p not in _checked_force_patterns]
    if not patterns:
        return
    # copy_ is hand-written, not in the coverage table, and goes through the diagnostics too.
    names = [*coverage(), "copy_"]
    bases = sorted({n.split(".")[0] for n in names})
    for pattern in patterns:
        _checked_force_patterns.add(pattern)
        regex = re.compile(pattern)
        if any(regex.fullmatch(n) or regex.fullmatch(n.split(".")[0]) for n in names):
            continue
        message = f"DIPU_FORCE_FALLBACK_OPS_LIST: the pattern {pattern!r} matches no op that devx runs, so it " \
                  "forces nothing."
        qualified = f"aten::{pattern}"
        if _has_kernel(qualified, "CompositeImplicitAutograd") or _has_kernel(qualified, "CompositeExplicitAutograd"):
            message += f" {pattern} is a composite op: it runs as other ops on every device; force those " \
                       "instead (DIPU_DUMP_OP_ARGS=1 lists the ops a run issues)."
        elif _has_kernel(qualified, "PrivateUse1"):
            message += f" {pattern} has a devx kernel of its own that does not go through the fallback."
        else:
            aten_names = {s.name[len("aten::"):] for s in _torch_c._jit_get_all_schemas() if s.name.startswith("aten::")}
            close = difflib.get_close_matches(pattern, sorted(aten_names | set(bases)), n=3, cutoff=0.6)
            if close:
                message += f" Closest op names: {', '.join(close)}."
        warnings.warn(message, stacklevel=_frames.user_stacklevel())


def _has_kernel(qualified_name: str, dispatch_key: str) -> bool:
    try:
        return _torch_c._dispatch_has_kernel_for_dispatch_key(qualified_name, dispatch_key)
    except RuntimeError:  # no such operator
        return False


def force_fallback() -> list[str]:
    """The force-fallback patterns in effect."""
    return list(_C._force_fallback_patterns())


def coverage() -> dict[str, str]:
    """For every aten op devx registers: 'vendor' (the vendor's own kernel), 'aten' (ATen's kernel
    of the vendor's compute device on devx memory, through a generated wrapper), 'aten-boxed' (the
    same through the one boxed kernel of the long tail) or 'fallback' (the CPU fallback)."""
    return dict(_C._coverage())


def set_dump_op_args(level: int, max_elements: int | None = None) -> None:
    """Op-argument dumps, as DIPU_DUMP_OP_ARGS: 0 off, 1 op, kernel and the user's line per call,
    2 plus argument and result metadata, 3 plus tensor values. `max_elements`
    (DEVX_DUMP_OP_ARGS_MAX_ELEMENTS, default 16) caps the values printed per tensor: beyond it the
    first and last ones and statistics (min, max, mean, nan and inf counts)."""
    if level not in (0, 1, 2, 3):
        raise ValueError(f"dump level {level!r} is not one of 0, 1, 2, 3")
    if max_elements is not None:
        if isinstance(max_elements, bool) or not isinstance(max_elements, int) or max_elements < 0:
            raise ValueError(f"max_elements {max_elements!r} is not a non-negative integer")
        _environ.set_value("DEVX_DUMP_OP_ARGS_MAX_ELEMENTS", str(max_elements))
    _environ.set_value("DIPU_DUMP_OP_ARGS", str(level))


def set_autocompare(ops: bool | list[str], raise_on_mismatch: bool = False) -> None:
    """Compare ops with the CPU: True for every op, a list of regexes for some, False/[] for none
    (DIPU_AUTOCOMPARE / DIPU_AUTOCOMPARE_OPS_LIST / DIPU_AUTOCOMPARE_RAISE)."""
    if isinstance(ops, bool):
        _environ.set_value("DIPU_AUTOCOMPARE", "1" if ops else "0")
        _environ.set_value("DIPU_AUTOCOMPARE_OPS_LIST", "")
    else:
        for p in ops:
            _C._validate_pattern(p)
        _environ.set_value("DIPU_AUTOCOMPARE", "0")
        _environ.set_value("DIPU_AUTOCOMPARE_OPS_LIST", ",".join(ops))
    _environ.set_value("DIPU_AUTOCOMPARE_RAISE", "1" if raise_on_mismatch else "0")


def autocompare_stats() -> dict[str, tuple[int, int]]:
    """Per op: (comparisons that matched the CPU, comparisons that did not)."""
    return {op: tuple(v) for op, v in _C._autocompare_stats().items()}


def reset_autocompare_stats() -> None:
    _C._reset_autocompare_stats()


def override_kernel(op: str, fn: Callable[..., Any] | None) -> None:
    """Run the Python function `fn` instead of op `op`'s devx kernel ("add.Tensor"; None
    restores the kernel). It receives the op's arguments (devx tensors, numbers, lists) and
    returns its result(s). For prototyping a kernel before writing it for the device, and for
    planting faults that the other diagnostics must catch. Diagnostics such as autocompare see
    the override as the op's kernel. A name that is no aten overload is a ValueError."""
    if fn is not None:
        _check_op_name(op)
    _C._set_override(op, fn)
    if fn is None:
        _override_functions.pop(op, None)
    else:
        _override_functions[op] = fn


# The functions override_kernel installed, by op name: the divergence finder writes repros that
# replay the kernel that ran, and for an override that is this function.
_override_functions: dict[str, Callable[..., Any]] = {}


def overridden_kernels() -> list[str]:
    """The ops whose kernel override_kernel has replaced."""
    return list(_C._overridden_ops())


def kernel_override(op: str) -> Callable[..., Any] | None:
    """The Python function override_kernel installed for `op` ("add.Tensor", "relu"), or None."""
    return _override_functions.get(op)


def _check_op_name(op: str) -> None:
    """Raises a ValueError unless `op` ("add.Tensor", "relu") names an aten overload: an override
    of a name no op has would never fire."""
    name, _, overload = op.partition(".") if isinstance(op, str) else ("", "", "")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{name}", overload)
    except RuntimeError:
        raise ValueError(f"override_kernel: {op!r} names no aten op overload (expected e.g. 'add.Tensor', "
                         "'relu')") from None


def mem_check_report() -> str:
    """The devx allocations made while DIPU_MEM_CHECK=1 and not yet released, grouped by origin
    (the user's line and the op; for the backward pass, the forward line and the autograd node)
    with count and bytes, in sections by what holds them: Python objects, nothing reachable,
    autograd graphs, then gradients, optimizer state, parameters and buffers. With
    DIPU_MEM_CHECK_ENABLE_BACKTRACE=1, the Python stack and C++ backtrace of each group's oldest
    allocation."""
    from . import _mem_report

    return _mem_report.report()


def autocompare_summary() -> str:
    """A table of the ops autocompare checked: checks, mismatches, ops with mismatches first."""
    rows = sorted(autocompare_stats().items(), key=lambda kv: (-kv[1][1], kv[0]))
    lines = [f"{'checked':>8} {'differed':>8}  op"]
    lines += [f"{ok + bad:>8} {bad:>8}  {op}" for op, (ok, bad) in rows]
    return "\n".join(lines)


def _report_autocompare_at_exit() -> None:
    import sys

    stats = autocompare_stats()
    if stats:
        differed = sum(bad for _, bad in stats.values())
        print(f"devx autocompare: {sum(ok + bad for ok, bad in stats.values())} checks of {len(stats)} ops, "
              f"{differed} differed from the CPU\n" + autocompare_summary(), file=sys.stderr)


def _report_leaks_at_exit() -> None:
    import sys

    if _C._mem_check_live():
        print(mem_check_report(), file=sys.stderr)


def set_sanitize(on: bool) -> None:
    """The memory sanitizer, as DEVX_SIM_SANITIZE: guard zones around every allocation made from
    now on (the caching allocator steps aside), poisoned and quarantined frees, bounds checks on
    copies and guard checks after each op. Reports are RuntimeErrors naming the allocation."""
    _environ.set_value("DEVX_SIM_SANITIZE", "1" if on else "0")


def set_mem_check(on: bool, backtrace: bool = False, log_interval: int = 0) -> None:
    """The memory checker, as DIPU_MEM_CHECK (DIPU_MEM_CHECK_ENABLE_BACKTRACE: a C++ backtrace per
    allocation; DIPU_MEM_CHECK_LOG_INTERVAL: a summary every `log_interval` allocations, 0 never)."""
    _environ.set_value("DIPU_MEM_CHECK_ENABLE_BACKTRACE", "1" if backtrace else "0")
    _environ.set_value("DIPU_MEM_CHECK_LOG_INTERVAL", str(log_interval))
    _environ.set_value("DIPU_MEM_CHECK", "1" if on else "0")


def set_trace_runtime(kinds: dict[str, int] | None) -> None:
    """Runtime-call tracing, as DEVX_TRACE_RUNTIME: {"malloc": 1, "memcpy": 2} logs those vendor
    calls (2: with stacks), {"all": 1} every kind; None or {} turns it off."""
    _environ.set_value("DEVX_TRACE_RUNTIME", ",".join(f"{kind}={level}" for kind, level in (kinds or {}).items()))


def settings() -> list[tuple[str, str, str, str]]:
    """Every setting of torch_devx: (name, value, source, what it does); source is "default",
    "environment" or "api" (set in this process through this module). `python -m torch_devx
    settings` prints the same."""
    return _environ.entries()


def set_setting(name: str, value: str | None) -> None:
    """Set any setting by its environment name for this process only, validated as the environment
    is; None returns it to the environment's value (or the default)."""
    _environ.set_value(name, value)


def sanitize_check() -> None:
    """Check every guarded allocation's guard zones and every freed one's poison now (as
    synchronize does under DEVX_SIM_SANITIZE); raise RuntimeError naming what was damaged."""
    _C._sanitize_check()


def sync_summary() -> str:
    """Where the host waited for the device while DEVX_TRACE_RUNTIME had sync=1: per Python
    source line, the number of waits (.item(), .cpu(), synchronize, copies to the host) and
    their total time, longest first."""
    rows = _C._sync_summary()
    lines = [f"{'waits':>8} {'total ms':>10}  where"]
    lines += [f"{count:>8} {ms:>10.3f}  {where}" for where, count, ms in rows]
    return "\n".join(lines)


def reset_sync_summary() -> None:
    _C._reset_sync_summary()


def _report_syncs_at_exit() -> None:
    import sys

    if _C._sync_summary():
        print("devx host waits by Python line (DEVX_TRACE_RUNTIME sync):\n" + sync_summary(), file=sys.stderr)


def set_op_hook(fn: Callable[[str, tuple, tuple], None] | None, ops: list[str] | None = None) -> None:
    """Call fn(op_name, args, results) after every op whose name matches one of the regexes in
    `ops` ("add.Tensor", "conv.*"; None: every op). One hook at a time; None removes it. Ops
    that match pay for boxing and for converting their arguments to Python."""
    patterns = [".*"] if ops is None else list(ops)
    for p in patterns:
        _C._validate_pattern(p)
    _C._set_op_hook(fn, patterns)


def set_runtime_hook(fn: Callable[[str, str, str, int, float], None] | None, kinds: list[str] | None = None) -> None:
    """Call fn(kind, call, args, status, microseconds) after every vendor call of the given kinds
    (malloc, free, memcpy, sync, event, stream, set_device; None: all of them). One hook at a
    time; None removes it — and with no hook and no DEVX_TRACE_RUNTIME the shims are gone."""
    all_kinds = ["malloc", "free", "memcpy", "sync", "event", "stream", "set_device"]
    _C._set_runtime_hook(fn, all_kinds if kinds is None else list(kinds))
