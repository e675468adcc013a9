"""OpInfo coverage of the devx backend: which ops of PyTorch's OpInfo database run natively on
devx (without touching the counted CPU fallback) and give the CPU's results.

For every OpInfo in torch.testing._internal.common_methods_invocations.op_db and each of float32
and int64 the op supports on CPU, the first few sample inputs run on the CPU and, copied, on devx
(same seed); forward results are compared with torch.testing.assert_close (the OpInfo's
toleranceOverride for CPU where it has one, NaN == NaN), and for float32 samples of ops that
support autograd, input gradients under a fixed random cotangent are compared too. An op is
"native" when no fallback call was counted while it ran on devx (forward or backward).

    python -m torch_devx.tools.opinfo_check [--ops REGEX] [--limit-samples N] [--json OUT]

tests/test_opinfo.py and the vendor conformance kit (vendor_test.py) build on this module.

With CUDA mocked, torch.cuda.is_available() is True and torch.testing._internal takes the CUDA
paths; torch_devx (imported before this module, which lives in its package) mocks CUDA unless
DEVX_MOCK_CUDA=0. So load_op_db() and devx_checks() switch the mocking off around the import and
the checks.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import random
import re
import sys
import time
import types
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator, Optional

import torch
import torch_devx
from torch_devx import cuda_mock, diagnostics

DTYPES = (torch.float32, torch.int64)

# Ops whose values are random (or undefined, the empty family): only shapes and dtypes are
# compared. Matched against the OpInfo's name.
RANDOM_OPS = re.compile(
    r"^(rand\w*|normal|bernoulli|multinomial|uniform|exponential|geometric|cauchy|log_normal"
    r"|nn\.functional\.\w*dropout\w*|nn\.functional\.rrelu|nn\.functional\.fractional_max_pool\dd)$"
)
UNDEFINED_OPS = re.compile(r"^(new_)?empty\w*$")
# Sparse- and quantization-only OpInfos: not applicable to a dense device.
SPARSE_QUANT_OPS = re.compile(r"^(sparse\.|to_sparse)|quantize")

MAX_ERROR_CHARS = 400


# --- loading op_db ---------------------------------------------------------------------------


@contextlib.contextmanager
def cuda_mock_off() -> Iterator[None]:
    """CUDA mocking off for the duration (restored after, whatever its state was)."""
    was_on = cuda_mock.enabled()
    if was_on:
        cuda_mock.disable()
    try:
        yield
    finally:
        if was_on and not cuda_mock.enabled():
            cuda_mock.enable()


def load_op_db() -> list:
    """op_db, imported with CUDA mocking off and without leaving torch.backends flags frozen
    (common_utils freezes them at import; the rest of a test process may set them)."""
    frozen = torch.backends.flags_frozen()
    with cuda_mock_off():
        from torch.testing._internal.common_methods_invocations import op_db
    if not frozen:
        setattr(torch.backends, "__allow_nonbracketed_mutation_flag", True)
    return op_db


def full_name(op: Any) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def not_applicable_reason(op: Any, dtypes: tuple[torch.dtype, ...] = DTYPES) -> Optional[str]:
    if SPARSE_QUANT_OPS.search(op.name):
        return "sparse/quantized op"
    if not any(op.supports_dtype(dt, "cpu") for dt in dtypes):
        return f"supports none of {', '.join(map(dtype_name, dtypes))} on CPU"
    return None


def applicable_ops(op_db: list, dtypes: tuple[torch.dtype, ...] = DTYPES) -> tuple[list, dict[str, str]]:
    """(applicable OpInfos, {full name: reason} for the others)."""
    ops, skipped = [], {}
    for op in op_db:
        reason = not_applicable_reason(op, dtypes)
        if reason:
            skipped[full_name(op)] = reason
        else:
            ops.append(op)
    return ops, skipped


# --- moving samples and results between devices ----------------------------------------------


def _map(obj: Any, fn: Callable[[torch.Tensor], Any], device: str, memo: dict[int, Any]) -> Any:
    """Tensors in nested lists/tuples/dicts through fn (each tensor once, so aliases stay
    aliases); a `device` keyword, and torch.device("cpu") anywhere, become `device`."""
    if isinstance(obj, torch.Tensor):
        if id(obj) not in memo:
            memo[id(obj)] = fn(obj)
        return memo[id(obj)]
    if isinstance(obj, torch.device):
        return torch.device(device) if obj.type == "cpu" else obj
    if isinstance(obj, list):
        return [_map(o, fn, device, memo) for o in obj]
    if isinstance(obj, tuple):
        items = [_map(o, fn, device, memo) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, dict):
        return {k: device if k == "device" and isinstance(v, str) and v.startswith("cpu")
                else _map(v, fn, device, memo)
                for k, v in obj.items()}
    return obj


def _leaf_copy(device: str) -> Callable[[torch.Tensor], torch.Tensor]:
    def copy(t: torch.Tensor) -> torch.Tensor:
        c = t.detach().to(device, copy=True)
        if t.requires_grad:
            c.requires_grad_(True)
        return c

    return copy


class _Mismatch(Exception):
    pass


def _is_devx_device(v: Any) -> bool:
    return (isinstance(v, torch.device) and v.type == "devx") or (isinstance(v, str) and v.startswith("devx"))


def _merge(c: Any, d: Any, memo: dict[int, Any]) -> Any:
    """The devx side of a sample: the CPU sample `c`'s values, placed as OpInfo placed them in
    `d`, the same sample generated for device "devx" (tensors an op wants on the CPU, such as
    tensor_split's indices, stay there; device arguments name devx)."""
    if isinstance(d, torch.Tensor):
        if not isinstance(c, torch.Tensor) or c.shape != d.shape or c.dtype != d.dtype:
            raise _Mismatch
        if id(c) not in memo:
            memo[id(c)] = _leaf_copy("devx" if d.device.type == "devx" else str(d.device))(c)
        return memo[id(c)]
    if isinstance(d, (list, tuple)):
        if not isinstance(c, (list, tuple)) or len(c) != len(d):
            raise _Mismatch
        items = [_merge(ci, di, memo) for ci, di in zip(c, d)]
        if isinstance(c, list):
            return items
        return type(c)(*items) if hasattr(c, "_fields") else tuple(items)
    if isinstance(d, dict):
        if not isinstance(c, dict) or c.keys() != d.keys():
            raise _Mismatch
        return {k: _merge(c[k], d[k], memo) for k in c}
    if _is_devx_device(d):
        return d
    if isinstance(c, torch.Tensor):
        raise _Mismatch
    return c  # other values from the CPU sample (sample functions may draw them at random)


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu() if obj.layout == torch.strided else obj.detach().to_dense().cpu()
    if isinstance(obj, list):
        return [_to_cpu(o) for o in obj]
    if isinstance(obj, tuple):
        return tuple(_to_cpu(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    return obj


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


# --- comparing -------------------------------------------------------------------------------


def tolerance(op: Any, dtype: torch.dtype) -> dict[str, float]:
    """Widest CPU toleranceOverride/precisionOverride the OpInfo declares for dtype ({} when it has none, which
    leaves assert_close's defaults)."""
    atol = rtol = None
    for info in getattr(op, "decorators", ()) or ():
        if getattr(info, "device_type", None) not in (None, "cpu"):
            continue
        for dec in getattr(info, "decorators", ()) or ():
            d = getattr(dec, "d", None)
            if isinstance(d, dict) and dtype in d:
                t = d[dtype]  # toleranceOverride: tol(atol, rtol); precisionOverride: atol
                atol = max(atol or 0.0, getattr(t, "atol", t))
                rtol = max(rtol or 0.0, getattr(t, "rtol", 0.0))
    if atol is None:
        return {}
    from torch.testing._comparison import default_tolerances

    rt, at = default_tolerances(dtype)
    return {"atol": max(atol, at), "rtol": max(rtol, rt)}


def _check_devices(got: Any, want: Any, where: str = "output") -> None:
    """Every tensor the CPU run returned on the CPU must come back from devx on devx."""
    if isinstance(want, torch.Tensor):
        if isinstance(got, torch.Tensor) and want.device.type == "cpu" and got.device.type != "devx":
            raise AssertionError(f"{where} is on {got.device}, expected devx")
    elif isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        for i, (g, w) in enumerate(zip(got, want)):
            _check_devices(g, w, f"{where}[{i}]")
    elif isinstance(want, dict) and isinstance(got, dict):
        for k in want:
            if k in got:
                _check_devices(got[k], want[k], f"{where}[{k!r}]")


def _compare_meta(got: Any, want: Any, where: str = "output") -> None:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"{where}: got {type(got).__name__}, expected a tensor")
        if got.shape != want.shape or got.dtype != want.dtype:
            raise AssertionError(f"{where}: got {tuple(got.shape)} {got.dtype}, "
                                 f"expected {tuple(want.shape)} {want.dtype}")
    elif isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            raise AssertionError(f"{where}: structure differs")
        for i, (g, w) in enumerate(zip(got, want)):
            _compare_meta(g, w, f"{where}[{i}]")


class MismatchError(AssertionError):
    """A comparison that failed; `details` (JSON-ready) says where and by how much, as far as
    first_mismatch() can tell."""

    def __init__(self, message: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.details = details


def _pairs(got: Any, want: Any, where: str) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """(path, got tensor, wanted tensor) at the places where both structures hold a tensor."""
    if isinstance(want, torch.Tensor):
        if isinstance(got, torch.Tensor):
            yield where, got, want
    elif isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        for i, (g, w) in enumerate(zip(got, want)):
            yield from _pairs(g, w, f"{where}[{i}]")
    elif isinstance(want, dict) and isinstance(got, dict):
        for k in want:
            if k in got:
                yield from _pairs(got[k], want[k], f"{where}[{k!r}]")


def _json_number(x: Any) -> Any:
    """Element values as JSON holds them: complex and non-finite numbers as strings."""
    if isinstance(x, complex) or (isinstance(x, float) and not math.isfinite(x)):
        return str(x)
    return x


def _max(t: torch.Tensor) -> float:
    """Largest value, NaN only when there is nothing else."""
    t = t[~t.isnan()]
    return t.max().item() if t.numel() else math.nan


def first_mismatch(got: Any, want: Any, tol: dict[str, float], where: str = "output") -> Optional[dict[str, Any]]:
    """The first tensor of `got` (CPU tensors) not close to its counterpart in `want`: its path, the
    number of wrong elements, the largest absolute and relative errors among them, and the first
    wrong element (row-major index, both values). None when every paired tensor is close."""
    from torch.testing._comparison import default_tolerances

    for path, g, w in _pairs(got, want, where):
        if g.shape != w.shape or g.dtype != w.dtype:
            return {"where": path, "got": f"{tuple(g.shape)} {g.dtype}", "expected": f"{tuple(w.shape)} {w.dtype}"}
        wide = torch.complex128 if w.is_complex() else torch.float64
        gv, wv = g.to(wide), w.to(wide)
        if w.is_floating_point() or w.is_complex():
            rtol, atol = (tol["rtol"], tol["atol"]) if tol else default_tolerances(w)
            bad = ~torch.isclose(gv, wv, rtol=rtol, atol=atol, equal_nan=True)
        else:
            rtol = atol = 0.0
            bad = g != w
        if not bad.any():
            continue
        abs_err = (gv - wv).abs()[bad]
        rel_err = abs_err / wv.abs()[bad]
        flat = int(bad.reshape(-1).nonzero()[0].item())
        index, rest = [], flat
        for size in reversed(w.shape):
            index.append(rest % size)
            rest //= size
        return {
            "where": path, "numel": w.numel(), "mismatched": int(bad.sum().item()),
            "max_abs": _json_number(_max(abs_err)), "max_rel": _json_number(_max(rel_err)),
            "first_bad_index": index[::-1],
            "got": _json_number(g.reshape(-1)[flat].item()), "expected": _json_number(w.reshape(-1)[flat].item()),
            "rtol": rtol, "atol": atol,
        }
    return None


def compare(got: Any, want: Any, tol: dict[str, float], meta_only: bool = False,
            on_devx: bool = True, where: str = "output") -> None:
    """Raises AssertionError unless devx's `got` matches the CPU's `want` (and, with on_devx,
    tensors the CPU returned on the CPU came back on devx); a MismatchError where values differ."""
    if on_devx:
        _check_devices(got, want, where)
    got, want = _to_cpu(got), _to_cpu(want)
    if meta_only:
        _compare_meta(got, want, where)
        return
    if want is None or isinstance(want, (str, torch.dtype, torch.device, bool, torch.Size)):
        if got != want:
            raise AssertionError(f"got {got!r}, expected {want!r}")
        return
    try:
        torch.testing.assert_close(got, want, equal_nan=True, check_device=False, **tol)
    except AssertionError as e:
        raise MismatchError(str(e), first_mismatch(got, want, tol, where) or {"where": where}) from None


# --- one op ----------------------------------------------------------------------------------


@dataclass
class OpResult:
    name: str
    native: bool = True
    fallback_ops: dict[str, int] = field(default_factory=dict)
    forward_ok: bool = True
    backward_ok: Optional[bool] = None  # None: no float32 backward checked
    samples: int = 0
    errors: list[str] = field(default_factory=list)
    # The errors as records: sample (tag), phase (forward/backward), kind (mismatch: results differ;
    # error: devx raised), message, details (MismatchError's, else None).
    failures: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.forward_ok and self.backward_ok is not False


def _err(e: BaseException) -> str:
    msg = f"{type(e).__name__}: {e}".strip().replace("\n", " | ")
    return msg[:MAX_ERROR_CHARS] + ("..." if len(msg) > MAX_ERROR_CHARS else "")


class FallbackWindow:
    """Fallback calls counted while the devx side of an op runs."""

    def __init__(self) -> None:
        self.calls: Counter = Counter()

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        diagnostics.reset_fallback_stats()
        try:
            yield
        finally:
            self.calls.update(diagnostics.fallback_stats())
            diagnostics.reset_fallback_stats()


def _run(op: Any, sample: Any) -> Any:
    return op(sample.input, *sample.args, **sample.kwargs)


def _diff_outputs(out: Any) -> list[torch.Tensor]:
    return [t for t in _tensors(out) if t.requires_grad and (t.is_floating_point() or t.is_complex())]


def _grad_leaves(sample: Any) -> list[torch.Tensor]:
    seen, leaves = set(), []
    for t in _tensors([sample.input, sample.args, sample.kwargs]):
        if t.requires_grad and t.is_leaf and id(t) not in seen:
            seen.add(id(t))
            leaves.append(t)
    return leaves


def _seed(seed: int) -> None:
    # Not torch.manual_seed: that also queues a lazy CUDA/XPU/MTIA seeding call, with a
    # formatted stack, every time it runs before those devices are initialised.
    torch.default_generator.manual_seed(seed)
    torch.devx.manual_seed_all(seed)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def _samples(op: Any, device: str, dtype: torch.dtype, requires_grad: bool, seed: int,
             limit: int) -> list:
    # op.sample_inputs_func rather than op.sample_inputs: the latter wraps the samples in a
    # TrackedInputIter, which walks the Python stack with inspect.stack() (source lines of every
    # frame) to find a unittest test, twice per call; that tripled the time of a pytest run.
    _seed(seed)
    return list(itertools.islice(iter(op.sample_inputs_func(op, device, dtype, requires_grad)), limit))


def _runs_on_devx(parts: Any) -> bool:
    """Whether a sample puts the op on devx: it holds a devx tensor or names devx, and names no
    CPU device (`zeros_like(x, device="cpu")`, or a factory given only CPU values, runs on the
    CPU by design, on devx as on CUDA)."""
    found_devx = False

    def walk(o: Any) -> bool:
        nonlocal found_devx
        if isinstance(o, torch.Tensor):
            found_devx |= o.device.type == "devx"
        elif isinstance(o, torch.device) or (isinstance(o, str) and o.split(":")[0] in ("cpu", "devx")):
            if torch.device(o).type == "cpu":
                return False
            found_devx = True
        elif isinstance(o, (list, tuple)):
            return all(walk(i) for i in o)
        elif isinstance(o, dict):
            return all(walk(i) for i in o.values())
        return True

    return walk(parts) and found_devx


def _devx_parts(sample: Any, placed: Any) -> list:
    """[input, args, kwargs] for devx: placed as in `placed` (the sample generated for devx)
    where its structure matches, else every tensor on devx."""
    parts = [sample.input, sample.args, sample.kwargs]
    if placed is not None:
        try:
            return _merge(parts, [placed.input, placed.args, placed.kwargs], {})
        except _Mismatch:
            pass
    return _map(parts, _leaf_copy("devx"), "devx", {})


@dataclass
class SampleCase:
    """One OpInfo sample to check, and how."""
    tag: str  # "float32 sample 0"
    sample: Any  # the SampleInput generated for the CPU
    placed: Any  # the same sample generated for devx: where OpInfo puts each tensor (None: all on devx)
    seed: int
    backward: bool
    tol: dict[str, float]
    meta_only: bool  # random or undefined values: shapes and dtypes compared


def values_undefined(op: Any) -> bool:
    return bool(RANDOM_OPS.match(op.name) or UNDEFINED_OPS.match(op.name)
                or getattr(op, "nondeterministic_seeded", False))


def iter_samples(op: Any, limit_samples: int, seed: int, dtypes: tuple[torch.dtype, ...],
                 notes: list[str]) -> Iterator[SampleCase]:
    """The op's first `limit_samples` samples of each of `dtypes` it supports on the CPU (floating
    dtypes with backward where the op has one there); why a dtype yields none goes to `notes`."""
    meta_only = values_undefined(op)
    for dtype in dtypes:
        if not op.supports_dtype(dtype, "cpu"):
            continue
        backward = (dtype.is_floating_point and op.supports_autograd
                    and dtype in op.supported_backward_dtypes("cpu"))
        tol = tolerance(op, dtype)
        try:
            samples = _samples(op, "cpu", dtype, backward, seed, limit_samples)
        except Exception as e:  # noqa: BLE001
            notes.append(f"{dtype}: sample_inputs raised {_err(e)}")
            continue
        # The same samples generated for devx tell which tensors OpInfo puts on the device
        # and which it keeps on the CPU; their values are not used.
        try:
            placed = _samples(op, "devx", dtype, backward, seed, limit_samples)
        except Exception as e:  # noqa: BLE001
            notes.append(f"{dtype}: sample_inputs('devx') raised {_err(e)}; all tensors moved to devx")
            placed = []
        for i, sample in enumerate(samples):
            yield SampleCase(f"{dtype_name(dtype)} sample {i}", sample, placed[i] if i < len(placed) else None,
                             seed + i, backward, tol, meta_only)


def _fail(res: OpResult, tag: str, phase: str, e: BaseException, mismatch: bool, grad: Optional[int] = None) -> None:
    what = phase + (" mismatch" if mismatch else "") + (f" (grad {grad})" if grad is not None else "")
    res.errors.append(f"{tag} {what}: {_err(e)}")
    res.failures.append({"sample": tag, "phase": phase, "kind": "mismatch" if mismatch else "error",
                         "message": _err(e), "details": getattr(e, "details", None)})
    if phase == "forward":
        res.forward_ok = False
    else:
        res.backward_ok = False


def check_sample(op: Any, case: SampleCase, res: OpResult, window: FallbackWindow) -> None:
    """Runs one sample on the CPU and devx and records in `res` whether devx agrees (a sample the
    CPU rejects counts for nothing: res.samples is not incremented)."""
    sample, tag, tol, meta_only, seed = case.sample, case.tag, case.tol, case.meta_only, case.seed
    inp_cpu = _map([sample.input, sample.args, sample.kwargs], _leaf_copy("cpu"), "cpu", {})
    inp_dev = _devx_parts(sample, case.placed)
    on_devx = _runs_on_devx(inp_dev)
    cpu = types.SimpleNamespace(input=inp_cpu[0], args=inp_cpu[1], kwargs=inp_cpu[2])
    dev = types.SimpleNamespace(input=inp_dev[0], args=inp_dev[1], kwargs=inp_dev[2])
    post = sample.output_process_fn_grad or (lambda x: x)

    # CPU reference; a sample the CPU rejects is not a test of devx.
    try:
        _seed(seed)
        want = _run(op, cpu)
    except Exception as e:  # noqa: BLE001
        res.notes.append(f"{tag}: CPU raised {_err(e)}")
        return
    res.samples += 1
    try:
        with window():
            _seed(seed)
            got = _run(op, dev)
    except Exception as e:  # noqa: BLE001
        _fail(res, tag, "forward", e, mismatch=False)
        if case.backward:
            res.backward_ok = False
        return
    try:
        compare(got, want, tol, meta_only, on_devx)
        if not meta_only:
            # Arguments an op writes to (resize_, out-like kwargs, in-place samples) too.
            compare(_tensors(inp_dev), _tensors(inp_cpu), tol, on_devx=False, where="arguments")
    except Exception as e:  # noqa: BLE001
        _fail(res, tag, "forward", e, mismatch=True)

    if not case.backward:
        return
    try:
        outs_cpu = _diff_outputs(post(want))
        leaves_cpu = _grad_leaves(cpu)
        if not outs_cpu or not leaves_cpu:
            return
        gen = torch.Generator().manual_seed(seed + 1)
        cots_cpu = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs_cpu]
        grads_cpu = torch.autograd.grad(outs_cpu, leaves_cpu, cots_cpu, allow_unused=True)
    except Exception as e:  # noqa: BLE001
        res.notes.append(f"{tag}: CPU backward raised {_err(e)}")
        return
    if res.backward_ok is None:
        res.backward_ok = True
    try:
        cots_dev = [c.to("devx") for c in cots_cpu]
        with window():
            outs_dev = _diff_outputs(post(got))
            leaves_dev = _grad_leaves(dev)
            if len(outs_dev) != len(outs_cpu) or len(leaves_dev) != len(leaves_cpu):
                raise AssertionError(f"{len(outs_dev)} differentiable outputs and {len(leaves_dev)} "
                                     f"leaves on devx, {len(outs_cpu)} and {len(leaves_cpu)} on CPU")
            grads_dev = torch.autograd.grad(outs_dev, leaves_dev, cots_dev, allow_unused=True)
    except Exception as e:  # noqa: BLE001
        _fail(res, tag, "backward", e, mismatch=False)
        return
    for i, (g, w) in enumerate(zip(grads_dev, grads_cpu)):
        if g is None and w is None:
            continue
        g = torch.zeros_like(leaves_dev[i]) if g is None else g
        w = torch.zeros_like(leaves_cpu[i]) if w is None else w
        try:
            compare(g, w, tol, meta_only, on_devx, where=f"grad {i}")
        except Exception as e:  # noqa: BLE001
            _fail(res, tag, "backward", e, mismatch=True, grad=i)
            return


def check_op(op: Any, limit_samples: int = 3, seed: int = 0, dtypes: tuple[torch.dtype, ...] = DTYPES) -> OpResult:
    """Runs the op's first `limit_samples` samples of each of `dtypes` (floating dtypes forward
    and backward, others forward) on the CPU and devx and compares them. Call under devx_checks()."""
    with warnings.catch_warnings():
        # Deprecation notices of the ops themselves (torch.lu, torch.qr, ...) are no finding.
        warnings.simplefilter("ignore")
        return _check_op(op, limit_samples, seed, dtypes)


def _check_op(op: Any, limit_samples: int, seed: int, dtypes: tuple[torch.dtype, ...]) -> OpResult:
    res = OpResult(full_name(op))
    t0 = time.perf_counter()
    window = FallbackWindow()
    if values_undefined(op):
        res.notes.append("random or undefined values: shapes and dtypes compared")
    for case in iter_samples(op, limit_samples, seed, dtypes, res.notes):
        check_sample(op, case, res, window)
    res.fallback_ops = dict(window.calls.most_common())
    res.native = not res.fallback_ops
    res.seconds = time.perf_counter() - t0
    return res


@contextlib.contextmanager
def devx_checks() -> Iterator[None]:
    """The process state check_op needs: CUDA mocking off, default device unset, fallback
    counters zeroed before and after (what other code counted is not attributed to an op)."""
    with cuda_mock_off():
        prev_grad = torch.is_grad_enabled()
        torch.set_grad_enabled(True)
        diagnostics.reset_fallback_stats()
        try:
            yield
        finally:
            diagnostics.reset_fallback_stats()
            torch.set_grad_enabled(prev_grad)


# --- summary ---------------------------------------------------------------------------------


def summarize(results: list[OpResult], not_applicable: dict[str, str]) -> dict[str, Any]:
    # An op none of whose samples the CPU runs (the jiterator ops are CUDA-only) tests nothing.
    not_applicable = dict(not_applicable)
    for r in results:
        if r.samples == 0:
            not_applicable[r.name] = "no sample input runs on the CPU" + (
                f" ({r.notes[-1]})" if r.notes else "")
    results = [r for r in results if r.samples > 0]
    n = len(results)
    with_bwd = [r for r in results if r.backward_ok is not None]
    falls: Counter = Counter()
    for r in results:
        falls.update(r.fallback_ops.keys())
    return {
        "applicable": n,
        "not_applicable": not_applicable,
        "native_pct": 100.0 * sum(r.native for r in results) / max(n, 1),
        "forward_correct_pct": 100.0 * sum(r.forward_ok for r in results) / max(n, 1),
        "backward_checked": len(with_bwd),
        "backward_correct_pct": 100.0 * sum(bool(r.backward_ok) for r in with_bwd) / max(len(with_bwd), 1),
        "fallback_op_frequency": dict(falls.most_common()),
        "fell_back": {r.name: r.fallback_ops for r in results if not r.native},
        "failed": {r.name: r.errors for r in results if not r.ok},
    }


def print_summary(s: dict[str, Any], seconds: float, out: Any = sys.stdout) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"OpInfo coverage of devx ({torch_devx.vendor}, torch {torch.__version__}), {seconds:.0f} s")
    p(f"  ops applicable      {s['applicable']}  (not applicable: {len(s['not_applicable'])})")
    p(f"  native              {s['native_pct']:.1f}%")
    p(f"  forward correct     {s['forward_correct_pct']:.1f}%")
    p(f"  backward correct    {s['backward_correct_pct']:.1f}%  (of {s['backward_checked']} ops with a "
      f"float32 backward)")
    p(f"\nnot applicable ({len(s['not_applicable'])}):")
    for name, why in sorted(s["not_applicable"].items()):
        p(f"  {name}: {why}")
    p(f"\nfallback ops, by number of OpInfo ops that touch them ({len(s['fallback_op_frequency'])}):")
    for name, count in s["fallback_op_frequency"].items():
        p(f"  {count:4d}  {name}")
    p(f"\nops that fell back ({len(s['fell_back'])}):")
    for name, calls in sorted(s["fell_back"].items()):
        p(f"  {name}: {', '.join(calls)}")
    p(f"\nops that failed ({len(s['failed'])}):")
    for name, errors in sorted(s["failed"].items()):
        p(f"  {name}:")
        for e in errors:
            p(f"      {e}")


def run(ops_regex: Optional[str] = None, limit_samples: int = 3,
        progress: bool = False) -> tuple[list[OpResult], dict[str, str]]:
    ops, not_applicable = applicable_ops(load_op_db())
    if ops_regex:
        rx = re.compile(ops_regex)
        ops = [op for op in ops if rx.search(full_name(op))]
        not_applicable = {k: v for k, v in not_applicable.items() if rx.search(k)}
    results = []
    with devx_checks():
        for i, op in enumerate(ops):
            if progress:
                print(f"[{i + 1}/{len(ops)}] {full_name(op)}", file=sys.stderr, flush=True)
            results.append(check_op(op, limit_samples))
    return results, not_applicable


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", help="regex: only OpInfos whose full name (name.variant) matches")
    ap.add_argument("--limit-samples", type=int, default=3, help="samples per op and dtype (default 3)")
    ap.add_argument("--json", metavar="OUT", help="write per-op results and the summary to OUT")
    ap.add_argument("--progress", action="store_true", help="print each op's name to stderr")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results, not_applicable = run(args.ops, args.limit_samples, args.progress)
    seconds = time.perf_counter() - t0
    summary = summarize(results, not_applicable)
    print_summary(summary, seconds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "seconds": seconds, "limit_samples": args.limit_samples,
                       "vendor": torch_devx.vendor, "torch": torch.__version__,
                       "ops": [asdict(r) for r in results]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
