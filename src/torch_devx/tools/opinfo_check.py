"""OpInfo coverage of the devx backend: which ops of PyTorch's OpInfo database run natively on
devx (without touching the counted CPU fallback) and give the CPU's results.

For every OpInfo in torch.testing._internal.common_methods_invocations.op_db and each of float32
and int64 the op supports on CPU, the first few sample inputs run on the CPU and, copied, on devx
(same seed); forward results are compared with torch.testing.assert_close (the OpInfo's
toleranceOverride for CPU where it has one, NaN == NaN), and for float32 samples of ops that
support autograd, input gradients under a fixed random cotangent are compared too. An op is
"native" when no fallback call was counted while it ran on devx (forward or backward).

A result that is not close to the CPU's may still be no error of devx's (compare() applies these
only where assert_close fails, each documented where it is defined):
  - indices among equal values, where ATen leaves their order unspecified (sort and argsort unless
    stable, topk; msort's gradient): TieIndices checks that devx's pick the same values;
  - 16-bit and float32 results at least as close to a float64 reference (the op on the same
    inputs widened) as the CPU's own, or within the dtype's tolerance of it (Reference, _bad);
  - results within twice the spread of the CPU's computation rerun with every intermediate result
    moved by one unit in the last place (Jitter): rounding differences an ill-conditioned
    composite amplifies;
  - outputs whose dtype is the meta function's rather than the CPU's: the core allocates kernels'
    outputs from it, so the values are compared in the CPU's dtype and the difference is noted.
A kernel that is wrong (tests/test_vendor_test.py plants one off by one in one element) fails them all.

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
import torch._prims_common
import torch_devx
from torch_devx import cuda_mock, diagnostics
from torch.utils._python_dispatch import TorchDispatchMode as TorchDispatchModeBase

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


def load_foreach_db() -> list:
    """The _foreach_* OpInfos, which op_db leaves out (foreach_unary_op_db and the like)."""
    load_op_db()
    from torch.testing._internal import common_methods_invocations as cmi

    return [op for name in ("foreach_unary_op_db", "foreach_binary_op_db", "foreach_pointwise_op_db",
                            "foreach_reduce_op_db", "foreach_other_op_db") for op in getattr(cmi, name, [])]


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


def _check_layout(got: Any, want: Any, where: str) -> None:
    """A devx result laid out as the CPU's: the same strides in every dimension longer than one
    (the others carry no meaning) and the same storage offset. Asynchronous mode allocates results
    before their kernels run, from meta functions, which must then agree with the kernels."""
    for path, g, w in _pairs(got, want, where):
        if g.layout != torch.strided or w.layout != torch.strided or w.numel() == 0 or g.shape != w.shape:
            continue
        same, dim = torch._prims_common.check_significant_strides(g, w, only_cuda=False)
        if not same:
            raise AssertionError(f"{path}: strides {g.stride()}, the CPU's {w.stride()} (dimension {dim}; "
                                 f"sizes {tuple(w.shape)})")
        if g.storage_offset() != w.storage_offset():
            raise AssertionError(f"{path}: storage offset {g.storage_offset()}, the CPU's {w.storage_offset()}")


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


# Dtypes whose results may also be judged against a float64 reference (see Reference).
_REFERENCED = {torch.float16: torch.float64, torch.bfloat16: torch.float64, torch.float32: torch.float64,
               torch.complex64: torch.complex128}
# OpInfos whose values depend on the dtype's representation itself (the next representable number,
# the largest finite value, the exponent/mantissa split): a float64 run is no reference for them,
# nor is a unit in the last place a rounding difference (Jitter).
NO_REFERENCE_OPS = re.compile(r"^(nextafter|nan_to_num|frexp|ldexp|view|view_as|bfloat16|half|float|double|to"
                              r"|type_as|byte|char|short|int|long|bool|cfloat|cdouble|chalf)$")


def _bad(g: torch.Tensor, w: torch.Tensor, tol: dict[str, float],
         r: Optional[torch.Tensor]) -> tuple[torch.Tensor, float, float]:
    """(mask of g's elements that are wrong, rtol, atol). Floating elements are wrong when not close
    to w (the dtype's tolerance, or the OpInfo's) and, where there is a float64 reference r, also
    farther from r than w is and than that tolerance allows, unless no element of g is farther from r than the
    farthest of w (the tensor as a whole at least as accurate as the CPU's: an ill-conditioned result
    spreads rounding error unevenly). The CPU's own rounding error is no standard devx must
    reproduce. Non-finite values must match the CPU's either way."""
    from torch.testing._comparison import default_tolerances

    wide = torch.complex128 if w.is_complex() else torch.float64
    gv, wv = g.to(wide), w.to(wide)
    if not (w.is_floating_point() or w.is_complex()):
        return g != w, 0.0, 0.0
    rtol, atol = (tol["rtol"], tol["atol"]) if tol else default_tolerances(w)
    bad = ~torch.isclose(gv, wv, rtol=rtol, atol=atol, equal_nan=True)
    if r is not None and bad.any() and r.shape == w.shape and (r.is_floating_point() or r.is_complex()):
        rv = r.to(wide)
        finite = gv.isfinite() & wv.isfinite() & rv.isfinite()
        g_err, w_err = (gv - rv).abs(), (wv - rv).abs()
        as_close = g_err <= torch.maximum(w_err, atol + rtol * rv.abs())
        if bool(finite[bad].all()) and _max(g_err[bad]) <= _max(w_err):
            as_close = torch.ones_like(as_close)
        bad &= ~(finite & as_close)
    return bad, rtol, atol


def _pairs3(got: Any, want: Any, ref: Any, where: str) -> Iterator[tuple[str, torch.Tensor, torch.Tensor, Any]]:
    """_pairs, with the reference's tensor at the same place (None where it has none)."""
    if isinstance(want, torch.Tensor):
        if isinstance(got, torch.Tensor):
            yield where, got, want, ref if isinstance(ref, torch.Tensor) else None
    elif isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        refs = ref if isinstance(ref, (list, tuple)) and len(ref) == len(want) else [None] * len(want)
        for i, (g, w, r) in enumerate(zip(got, want, refs)):
            yield from _pairs3(g, w, r, f"{where}[{i}]")
    elif isinstance(want, dict) and isinstance(got, dict):
        for k in want:
            if k in got:
                yield from _pairs3(got[k], want[k], ref.get(k) if isinstance(ref, dict) else None, f"{where}[{k!r}]")


def first_mismatch(got: Any, want: Any, tol: dict[str, float], where: str = "output",
                   ref: Any = None) -> Optional[dict[str, Any]]:
    """The first tensor of `got` (CPU tensors) not close to its counterpart in `want` (nor, with a
    float64 reference `ref` of the same structure, as close to it as `want`, see _bad): its path,
    the number of wrong elements, the largest absolute and relative errors among them, and the
    first wrong element (row-major index, both values). None when every paired tensor is close."""
    for path, g, w, r in _pairs3(got, want, ref, where):
        if g.shape != w.shape or g.dtype != w.dtype:
            return {"where": path, "got": f"{tuple(g.shape)} {g.dtype}", "expected": f"{tuple(w.shape)} {w.dtype}"}
        bad, rtol, atol = _bad(g, w, tol, r)
        if not bad.any():
            continue
        wide = torch.complex128 if w.is_complex() else torch.float64
        gv, wv = g.to(wide), w.to(wide)
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
            "rtol": rtol, "atol": atol, **({"reference": "float64"} if r is not None else {}),
        }
    return None


def compare(got: Any, want: Any, tol: dict[str, float], meta_only: bool = False,
            on_devx: bool = True, where: str = "output", reference: Optional[Callable[[], Any]] = None,
            accept: Optional[Callable[[Any, Any], Any]] = None, meta: Optional[Callable[[], Any]] = None,
            notes: Optional[list[str]] = None, envelope: Optional[Callable[[], Any]] = None) -> None:
    """Raises AssertionError unless devx's `got` matches the CPU's `want` (and, with on_devx,
    tensors the CPU returned on the CPU came back on devx); a MismatchError where values differ.

    Where they differ, two policies may still accept a difference that is no error of devx's:
    `accept(got, want)` (CPU tensors) returns `got` with the parts that are equivalent to the CPU's
    replaced by them (indices among equal values, TieIndices); `reference()` returns the op's
    result computed in float64 from the same inputs (or None), and floating results at least as
    close to it as the CPU's own, up to the dtype's tolerance, are accepted (_bad).

    `meta()` returns the op's result on the meta device: a devx output whose dtype differs from the
    CPU's but is the meta function's is the core's doing (it allocates a kernel's outputs from the
    meta function), no kernel's; its values are compared in the CPU's dtype and the difference goes
    to `notes` with META_DTYPE_NOTE.

    Last, `envelope()` returns the CPU's result computed again a few times with every intermediate
    result moved by one unit in the last place (Jitter): a floating result within (twice) their
    spread around the CPU's is accepted. Rounding differences of single kernels, each no error,
    can grow large in an ill-conditioned composite (a gradient that is exactly 0 as a difference of
    large terms); a wrong kernel moves results far outside that spread."""
    if on_devx:
        _check_devices(got, want, where)
        _check_layout(got, want, where)
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
        return
    except AssertionError as e:
        error = e
    if meta is not None:
        got = _meta_dtypes(got, want, meta, where, notes)
    if accept is not None:
        got = accept(got, want)
    ref = None
    if reference is not None and first_mismatch(got, want, tol, where) is not None:
        ref = _to_cpu(reference())
        if ref is not None:
            # Judged tensor by tensor against the reference with the tolerance `tol` gives _bad.
            got = _accepted_tol(got, want, ref, tol)
    if envelope is not None and first_mismatch(got, want, tol, where, ref) is not None:
        runs = envelope()
        if runs:
            got = _within_envelope(got, want, runs, tol, where)
    try:
        torch.testing.assert_close(got, want, equal_nan=True, check_device=False, **tol)
    except AssertionError as e:
        error = e
    else:
        return
    raise MismatchError(str(error), first_mismatch(got, want, tol, where, ref) or {"where": where}) from None


# The perturbed CPU runs of an envelope (see Jitter), and the factor their spread is widened by.
ENVELOPE_RUNS = 3
ENVELOPE_FACTOR = 2.0
_JITTERED = (torch.float16, torch.bfloat16, torch.float32)


def _within_envelope(got: Any, want: Any, runs: list, tol: dict[str, float], where: str) -> Any:
    """`got` with each floating tensor whose every element lies within ENVELOPE_FACTOR times the
    spread of the perturbed CPU runs around the CPU's result (plus the dtype's tolerance) replaced by
    the CPU's."""
    from torch.testing._comparison import default_tolerances

    spreads: dict[str, torch.Tensor] = {}
    for run in runs:
        for path, p, w in _pairs(_to_cpu(run), want, where):
            if p.shape == w.shape and w.is_floating_point() and p.is_floating_point():
                d = (p.double() - w.double()).abs().nan_to_num(nan=0.0, posinf=0.0)
                spreads[path] = torch.maximum(spreads[path], d) if path in spreads else d
    accepted = set()
    for path, g, w in _pairs(got, want, where):
        if path not in spreads or g.shape != w.shape or g.dtype != w.dtype or not w.is_floating_point():
            continue
        rtol, atol = (tol["rtol"], tol["atol"]) if tol else default_tolerances(w)
        gv, wv = g.double(), w.double()
        close = torch.isclose(gv, wv, rtol=rtol, atol=atol, equal_nan=True)
        inside = gv.isfinite() & wv.isfinite() & ((gv - wv).abs() <= ENVELOPE_FACTOR * spreads[path] + atol
                                                  + rtol * wv.abs())
        if bool((close | inside).all()):
            accepted.add(path)

    def walk(g: Any, w: Any, path: str) -> Any:
        if isinstance(w, torch.Tensor):
            return w if path in accepted else g
        if isinstance(w, (list, tuple)) and isinstance(g, (list, tuple)) and len(g) == len(w):
            return type(g)(walk(gi, wi, f"{path}[{i}]") for i, (gi, wi) in enumerate(zip(g, w)))
        return g

    return walk(got, want, where) if accepted else got


class Jitter(TorchDispatchModeBase):  # type: ignore[misc, valid-type]
    """Moves every floating result of a 16-bit or float32 dtype that an op computes (not views) one
    unit in the last place up or down at random: a run under it is the CPU's computation with each
    kernel rounding otherwise than ATen's does, as another correct kernel may."""

    def __init__(self, gen: torch.Generator) -> None:
        super().__init__()
        self.gen = gen

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        returns = func._schema.returns
        if any(r.alias_info is not None and not r.alias_info.is_write for r in returns):
            return out  # a view: its base was moved already
        for t in _tensors(out):
            if t.dtype in _JITTERED and t.numel() and t.layout == torch.strided:
                v = t.double()
                finite = v.isfinite() & (v != 0)
                ulp = torch.where(finite, torch.exp2(torch.floor(torch.log2(v.abs().clamp_min(1e-300))))
                                  * torch.finfo(t.dtype).eps, torch.zeros_like(v))
                sign = torch.randint(0, 2, v.shape, generator=self.gen, dtype=torch.int64).double() * 2 - 1
                t.copy_((v + sign * ulp).to(t.dtype))
        return out



META_DTYPE_NOTE = "core: output dtype from the meta function"


def _meta_dtypes(got: Any, want: Any, meta: Callable[[], Any], where: str, notes: Optional[list[str]]) -> Any:
    """`got` with tensors whose dtype is the meta function's where the CPU's differs cast to the
    CPU's dtype (see compare())."""
    pairs = [(p, g, w) for p, g, w in _pairs(got, want, where) if g.shape == w.shape and g.dtype != w.dtype]
    if not pairs:
        return got
    m = meta()
    if m is None:
        return got
    promised = {p: t.dtype for p, t, _ in _pairs(m, want, where) if isinstance(t, torch.Tensor)}
    cast = {p for p, g, w in pairs if promised.get(p) == g.dtype}
    if not cast:
        return got
    if notes is not None:
        notes.extend(f"{META_DTYPE_NOTE}: {p} is {dtype_name(g.dtype)} on devx, {dtype_name(w.dtype)} on the CPU"
                     for p, g, w in pairs if p in cast)

    def walk(g: Any, w: Any, path: str) -> Any:
        if isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor):
            return g.to(w.dtype) if path in cast else g
        if isinstance(w, (list, tuple)) and isinstance(g, (list, tuple)) and len(g) == len(w):
            return type(g)(walk(gi, wi, f"{path}[{i}]") for i, (gi, wi) in enumerate(zip(g, w)))
        return g

    return walk(got, want, where)


def _meta_output(op: Any, sample: Any) -> Any:
    """The op's result on the meta device for a sample (None when it has none there)."""
    try:
        parts = _map([sample.input, sample.args, sample.kwargs], lambda t: t.detach().to("meta"), "meta", {})
        with torch.no_grad():
            return op(parts[0], *parts[1], **parts[2])
    except Exception:  # noqa: BLE001
        return None


def _accepted_tol(got: Any, want: Any, ref: Any, tol: dict[str, float]) -> Any:
    if isinstance(want, torch.Tensor):
        if (isinstance(got, torch.Tensor) and isinstance(ref, torch.Tensor) and got.shape == want.shape
                and got.dtype == want.dtype and not _bad(got, want, tol, ref)[0].any()):
            return want
        return got
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)) and len(got) == len(want):
        refs = ref if isinstance(ref, (list, tuple)) and len(ref) == len(want) else [None] * len(want)
        items = [_accepted_tol(g, w, r, tol) for g, w, r in zip(got, want, refs)]
        return type(got)(*items) if hasattr(got, "_fields") else type(got)(items)
    if isinstance(want, dict) and isinstance(got, dict):
        return {k: _accepted_tol(v, want[k], ref.get(k) if isinstance(ref, dict) else None, tol) if k in want else v
                for k, v in got.items()}
    return got


# --- policies for differences that are no error ----------------------------------------------

# OpInfos that order values where ATen leaves the order of equal values unspecified (so which of
# them gets which gradient too): name -> (which output holds the indices (None: the result is
# them; -1: there are none), the positional index of `dim` among the sample's args (None: fixed),
# its default). sort and argsort with stable=True are exact.
TIE_INDEX_OPS = {
    "sort": (1, 0, -1),
    "argsort": (None, 0, -1),
    "topk": (1, 1, -1),
    "msort": (-1, None, 0),
}


class TieIndices:
    """For an OpInfo of TIE_INDEX_OPS, the `accept` policies of compare(). Forward: devx's indices
    stand for the CPU's when they are distinct in-range positions along `dim` and the input
    gathered with them equals the input gathered with the CPU's (they pick equal values, in the same
    order); the values output itself is compared as usual. Backward: the input's gradient is then
    the CPU's moved from the positions the CPU's indices picked to those devx's picked (each
    gradient value follows the value it belongs to), compared with the usual tolerance."""

    def __init__(self, op: Any, sample: Any) -> None:
        self.which, dim_pos, dim = TIE_INDEX_OPS[op.name]
        if dim_pos is not None:
            dim = sample.args[dim_pos] if len(sample.args) > dim_pos else sample.kwargs.get("dim", dim)
        self.dim = dim
        self.input = sample.input
        x = sample.input.detach().cpu()
        self.x = x.reshape(1) if x.dim() == 0 else x
        self.moved: Optional[tuple[torch.Tensor, torch.Tensor, int]] = None  # (devx's, CPU's indices, dim)

    @staticmethod
    def make(op: Any, sample: Any) -> Optional["TieIndices"]:
        if op.name not in TIE_INDEX_OPS or not isinstance(sample.input, torch.Tensor) or sample.kwargs.get("stable"):
            return None
        return TieIndices(op, sample)

    def _same(self, g: Any, w: Any) -> bool:
        if not (isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor)) or g.dtype != torch.int64 \
                or w.dtype != torch.int64 or g.shape != w.shape or g.dim() != self.input.dim():
            return False
        g1, w1 = (t.reshape(1) if t.dim() == 0 else t for t in (g, w))
        d = self.dim % self.x.dim()
        if ((g1 < 0) | (g1 >= self.x.shape[d])).any():
            return False
        if g1.shape[d] > 1 and (g1.sort(dim=d).values.diff(dim=d) == 0).any():
            return False
        picked, wanted = self.x.gather(d, g1), self.x.gather(d, w1)
        if not bool(((picked == wanted) | (picked.isnan() & wanted.isnan())).all()):
            return False
        self.moved = (g1, w1, d)
        return True

    def accept(self, got: Any, want: Any) -> Any:
        if self.which == -1:
            return got
        if self.which is None:
            return want if self._same(got, want) else got
        k = self.which
        if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)) and len(got) == len(want) > k \
                and self._same(got[k], want[k]):
            got = list(got)
            got[k] = want[k]
            return tuple(got)
        return got

    def accept_grad(self, tol: dict[str, float]) -> Callable[[Any, Any], Any]:
        """The policy for the input's gradient (after accept() took devx's indices)."""
        def accept(got: Any, want: Any) -> Any:
            if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.shape != self.input.shape:
                return got
            if self.moved is not None:
                g1, w1, d = self.moved
                w = want.reshape(1) if want.dim() == 0 else want
                expected = w.clone().scatter_(d, w1, 0).scatter_(d, g1, w.gather(d, w1)).reshape(want.shape)
                mine = got
            elif self.which == -1:  # no indices to follow: equal values' gradients, in any order
                mine, expected = self._canonical(got), self._canonical(want)
            else:
                return got
            try:
                torch.testing.assert_close(mine, expected, equal_nan=True, check_device=False, **tol)
            except AssertionError:
                return got
            return want
        return accept

    def _canonical(self, grad: torch.Tensor) -> torch.Tensor:
        """grad along dim, ordered by the input's value and, among equal values, by itself."""
        d = self.dim % self.x.dim()
        g = grad.reshape(self.x.shape)
        by_grad = g.argsort(dim=d, stable=True)
        x1, g1 = self.x.gather(d, by_grad), g.gather(d, by_grad)
        return g1.gather(d, x1.argsort(dim=d, stable=True))


def _upcast(obj: Any, memo: dict[int, Any]) -> Any:
    """A sample's parts with floating tensors (and dtype arguments) of _REFERENCED dtypes widened
    to float64 / complex128, leaves that required grad still requiring it."""
    if isinstance(obj, torch.Tensor):
        if id(obj) not in memo:
            t = obj.detach()
            t = t.to(_REFERENCED.get(t.dtype, t.dtype), copy=True)
            memo[id(obj)] = t.requires_grad_(obj.requires_grad) if t.is_floating_point() or t.is_complex() else t
        return memo[id(obj)]
    if isinstance(obj, torch.dtype):
        return _REFERENCED.get(obj, obj)
    if isinstance(obj, list):
        return [_upcast(o, memo) for o in obj]
    if isinstance(obj, tuple):
        items = [_upcast(o, memo) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, dict):
        return {k: _upcast(v, memo) for k, v in obj.items()}
    return obj


class Reference:
    """The op run on the CPU in float64 (complex128) from a sample's inputs widened, the
    reference compare() judges 16-bit and float32 results against when they differ from the
    CPU's: computed on first use, None when the op rejects the wider dtypes or the sample holds no
    dtype to widen."""

    def __init__(self, op: Any, sample: Any, seed: int) -> None:
        self.op, self.sample, self.seed = op, sample, seed
        self._parts: Any = None
        self._out: Any = None
        self._done = False

    def usable(self) -> bool:
        return not NO_REFERENCE_OPS.match(self.op.name) and any(
            t.dtype in _REFERENCED for t in _tensors([self.sample.input, self.sample.args, self.sample.kwargs]))

    def output(self) -> Any:
        if not self._done:
            self._done = True
            if self.usable():
                try:
                    parts = _upcast([self.sample.input, self.sample.args, self.sample.kwargs], {})
                    _seed(self.seed)
                    self._out = _run(self.op, types.SimpleNamespace(input=parts[0], args=parts[1], kwargs=parts[2]))
                    self._parts = parts
                except Exception:  # noqa: BLE001
                    self._out = None
        return self._out

    def arguments(self) -> Any:
        return _tensors(self._parts) if self.output() is not None else None

    def jittered(self, post: Optional[Callable[[Any], Any]] = None,
                 cotangents: Optional[list[torch.Tensor]] = None) -> list:
        """ENVELOPE_RUNS runs of the op on the CPU at the sample's own dtypes under Jitter: its
        results, or with `cotangents` its inputs' gradients ([] when the op has none to move)."""
        if NO_REFERENCE_OPS.match(self.op.name) or not any(
                t.dtype in _JITTERED for t in _tensors([self.sample.input, self.sample.args, self.sample.kwargs])):
            return []
        runs = []
        for k in range(ENVELOPE_RUNS):
            try:
                parts = _map([self.sample.input, self.sample.args, self.sample.kwargs], _leaf_copy("cpu"), "cpu", {})
                ns = types.SimpleNamespace(input=parts[0], args=parts[1], kwargs=parts[2])
                with Jitter(torch.Generator().manual_seed(self.seed * 1000 + k)):
                    _seed(self.seed)
                    out = _run(self.op, ns)
                    if cotangents is None:
                        runs.append(out)
                        continue
                    outs = _diff_outputs(post(out))
                    leaves = _grad_leaves(ns)
                    if len(outs) != len(cotangents):
                        return []
                    runs.append(list(torch.autograd.grad(outs, leaves, cotangents, allow_unused=True)))
            except Exception:  # noqa: BLE001
                return []
        return runs

    def grads(self, post: Callable[[Any], Any], cotangents: list[torch.Tensor]) -> Any:
        out = self.output()
        if out is None:
            return None
        try:
            outs = _diff_outputs(post(out))
            leaves = _grad_leaves(types.SimpleNamespace(input=self._parts[0], args=self._parts[1],
                                                        kwargs=self._parts[2]))
            if len(outs) != len(cotangents):
                return None
            cots = [c.to(o.dtype) for c, o in zip(cotangents, outs)]
            return list(torch.autograd.grad(outs, leaves, cots, allow_unused=True, retain_graph=True))
        except Exception:  # noqa: BLE001
            return None


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
    # A sample's inputs untouched by the runs (in-place ops write to theirs) for the policies.
    pristine = types.SimpleNamespace(**dict(zip(("input", "args", "kwargs"), _map(
        [sample.input, sample.args, sample.kwargs], _leaf_copy("cpu"), "cpu", {}))))
    reference = Reference(op, pristine, seed)
    ties = TieIndices.make(op, pristine)
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
        compare(got, want, tol, meta_only, on_devx, reference=reference.output,
                accept=ties.accept if ties else None, meta=lambda: _meta_output(op, pristine), notes=res.notes,
                envelope=reference.jittered)
        if not meta_only:
            # Arguments an op writes to (resize_, out-like kwargs, in-place samples) too.
            compare(_tensors(inp_dev), _tensors(inp_cpu), tol, on_devx=False, where="arguments",
                    reference=reference.arguments)
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
    ref_grads: list = []
    jittered: list = []

    def jittered_grad(i: int) -> list:
        if not jittered:
            jittered.append(reference.jittered(post, cots_cpu))
        return [run[i] if run[i] is not None else torch.zeros_like(leaves_cpu[i]) for run in jittered[0]
                if len(run) == len(grads_cpu)]

    def ref_grad(i: int) -> Any:
        if not ref_grads:
            ref_grads.append(reference.grads(post, cots_cpu))
        grads = ref_grads[0]
        if grads is None or len(grads) != len(grads_cpu):
            return None
        return torch.zeros_like(leaves_cpu[i], dtype=torch.float64) if grads[i] is None else grads[i]

    for i, (g, w) in enumerate(zip(grads_dev, grads_cpu)):
        if g is None and w is None:
            continue
        g = torch.zeros_like(leaves_dev[i]) if g is None else g
        w = torch.zeros_like(leaves_cpu[i]) if w is None else w
        try:
            compare(g, w, tol, meta_only, on_devx, where=f"grad {i}", reference=lambda i=i: ref_grad(i),
                    envelope=lambda i=i: jittered_grad(i),
                    accept=ties.accept_grad(tol) if ties and leaves_cpu[i] is cpu.input else None)
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
