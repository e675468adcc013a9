"""Comparing one tensor of run A (the device) with the same tensor of run B (the reference).

On data (full or sampled dumps): cosine similarity, max absolute error, max relative error, the
shares of elements within 0.1% and 1%, and the relative error of the whole tensor ||A - B|| / ||B||.
The relative error of an element is |a - b| / max(|b|, floor), floor = eps(dtype) * max|b|, so that
elements near zero in a tensor of large values do not dominate. On statistics only: the relative
differences of max, min, mean and norm, each divided by max(|statistic of B|, rms of B) (the mean of
a tensor centred on zero is not a scale).

Every verdict has an absolute floor `atol` (per dtype in ABS_TOLERANCES, the atol of autocompare and
the divergence finder, or one value for all): an element is within r when |a - b| <= atol + r * |b|,
a tensor whose every element is within atol of B passes whatever its cosine, and a statistic passes
when it differs by at most atol (atol * sqrt(numel) for the norm). Without it a gradient that is
mathematically zero (a key bias in attention: softmax ignores what is added to every score of a row)
is rounding noise of 1e-12 on both sides, with a random cosine, and two runs whose algorithms round
differently "disagree" on it.

Verdicts, first rule that fires wins (the rule is reported, with the atol used):
  error    dtype or shape differ; nan or inf counts differ; integer/bool values differ;
           data: cosine < 0.99 or share within 1% < 0.9;  stats: a rel diff > 10 * stats_tol
  warning  data: cosine < pass_cosine or share within the dtype's band < pass_share;
           stats: a rel diff > stats_tol
  pass     otherwise, or every |A - B| <= atol
Per dtype: (band, pass_share, pass_cosine, stats_tol) in THRESHOLDS.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

__all__ = ["ABS_TOLERANCES", "Metrics", "SEVERITY", "THRESHOLDS", "abs_tolerance", "compare_entries",
           "compare_tensors"]

SEVERITY = {"pass": 0, "warning": 1, "error": 2}

# dtype -> (band of the pass share, pass share, pass cosine, stats tolerance)
THRESHOLDS: dict[str, tuple[str, float, float, float]] = {
    "float64": ("0.1%", 0.999, 0.99999, 1e-7),
    "float32": ("0.1%", 0.999, 0.9999, 1e-4),
    "complex64": ("0.1%", 0.999, 0.9999, 1e-4),
    "float16": ("1%", 0.999, 0.999, 1e-3),
    "bfloat16": ("1%", 0.99, 0.999, 1e-2),
}
_DEFAULT = THRESHOLDS["float32"]
# dtype -> absolute floor: the atol of csrc/aten/autocompare.cpp's table (and the divergence finder's).
ABS_TOLERANCES: dict[str, float] = {"float32": 1e-5, "complex64": 1e-5, "float16": 1e-5, "bfloat16": 1e-5}
_OTHER_ABS_TOLERANCE = 1e-7  # float64, complex128
_ERROR_COSINE, _ERROR_SHARE_1PCT, _STATS_ERROR_FACTOR = 0.99, 0.9, 10.0
_FLOAT_EPS = {"float64": 2.2e-16, "float16": 9.8e-4, "bfloat16": 7.8e-3}


@dataclass
class Metrics:
    basis: str                                  # "data", "sample", "stats" or "none"
    verdict: str
    rule: str
    cosine: Optional[float] = None
    max_abs: Optional[float] = None
    max_rel: Optional[float] = None
    within_01: Optional[float] = None           # share of elements within 0.1%
    within_1: Optional[float] = None            # share of elements within 1%
    norm_rel: Optional[float] = None            # ||A - B|| / ||B||
    atol: Optional[float] = None                # the absolute floor the verdict used
    stats_rel: dict[str, float] = field(default_factory=dict)

    @property
    def error(self) -> float:
        """How far A is from B, for ranking within a verdict: ||A - B|| / ||B|| on data (unlike 1 - cosine
        it sees a tensor that is 5% too large everywhere), the largest statistic rel diff on statistics,
        inf when dtype, shape or nan/inf counts differ (nothing is comparable)."""
        if self.norm_rel is not None:
            return self.norm_rel
        if self.basis == "none" and self.verdict == "error":
            return math.inf
        return max(self.stats_rel.values(), default=0.0)


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "complex", "bfloat"))


def abs_tolerance(dtype: str, atol: Optional[float] = None) -> float:
    """The absolute floor for a floating dtype ("float32"): `atol` when given, else ABS_TOLERANCES'."""
    return atol if atol is not None else ABS_TOLERANCES.get(dtype, _OTHER_ABS_TOLERANCE)


def _data_metrics(a: torch.Tensor, b: torch.Tensor, dtype: str, basis: str, atol: float) -> Metrics:
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    a64, b64 = a.reshape(-1).double(), b.reshape(-1).double()
    if not _is_float(dtype):
        differ = int((a64 != b64).sum())
        if differ:
            n_diff, nb = float((a64 - b64).norm()), float(b64.norm())
            return Metrics(basis, "error", f"{differ} of {a64.numel()} integer values differ",
                           max_abs=float((a64 - b64).abs().max()), norm_rel=n_diff / nb if nb else math.inf)
        return Metrics(basis, "pass", "integer values equal", max_abs=0.0, max_rel=0.0, within_01=1.0, within_1=1.0,
                       cosine=1.0, norm_rel=0.0)
    finite = torch.isfinite(a64) & torch.isfinite(b64)
    a64, b64 = a64[finite], b64[finite]
    if a64.numel() == 0:
        return Metrics(basis, "pass", "no finite elements to compare")
    diff = (a64 - b64).abs()
    scale = b64.abs()
    floor = max(float(scale.max()) * _FLOAT_EPS.get(dtype, 1.2e-7), 1e-30)
    rel = diff / scale.clamp_min(floor)
    na, nb = float(a64.norm()), float(b64.norm())
    if na == 0.0 and nb == 0.0:
        cosine = 1.0
    elif na == 0.0 or nb == 0.0:
        cosine = 0.0
    else:
        cosine = max(-1.0, min(1.0, float((a64 @ b64) / (na * nb))))
    n_diff = float(diff.norm())
    norm_rel = n_diff / nb if nb > 0.0 else (0.0 if n_diff == 0.0 else math.inf)
    m = Metrics(basis, "pass", "", cosine=cosine, max_abs=float(diff.max()), max_rel=float(rel.max()),
                within_01=float((diff <= atol + 1e-3 * scale).double().mean()),
                within_1=float((diff <= atol + 1e-2 * scale).double().mean()), norm_rel=norm_rel, atol=atol)
    band, pass_share, pass_cosine, _ = THRESHOLDS.get(dtype, _DEFAULT)
    share = m.within_01 if band == "0.1%" else m.within_1
    prefix = "sampled " if basis == "sample" else ""
    floor_note = f" + atol {atol:g}"
    beyond_floor = f"max |A-B| {m.max_abs:.3g} > atol {atol:g}"
    if m.max_abs <= atol:
        m.rule = f"{prefix}every |A-B| <= atol {atol:g} ({dtype})"
    elif cosine < _ERROR_COSINE:
        m.verdict, m.rule = "error", f"{prefix}cosine {cosine:.6f} < {_ERROR_COSINE} ({beyond_floor})"
    elif m.within_1 < _ERROR_SHARE_1PCT:
        m.verdict, m.rule = "error", f"{prefix}within 1%{floor_note}: {m.within_1:.4f} < {_ERROR_SHARE_1PCT}"
    elif cosine < pass_cosine:
        m.verdict, m.rule = "warning", f"{prefix}cosine {cosine:.6f} < {pass_cosine} ({dtype}, {beyond_floor})"
    elif share < pass_share:
        m.verdict, m.rule = "warning", f"{prefix}within {band}{floor_note}: {share:.4f} < {pass_share} ({dtype})"
    else:
        m.rule = f"{prefix}cosine >= {pass_cosine} and {pass_share:.1%} within {band}{floor_note} ({dtype})"
    return m


def _stats_metrics(a: dict[str, Any], b: dict[str, Any], dtype: str, atol: float) -> Metrics:
    numel = math.prod(b.get("shape") or [1]) or 1
    rms = abs(b.get("norm") or 0.0) / math.sqrt(numel)
    rel: dict[str, float] = {}
    beyond: dict[str, float] = {}  # the rel diffs of the statistics that differ by more than the floor
    for key in ("max", "min", "mean", "norm"):
        x, y = a.get(key), b.get(key)
        if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
            continue
        denominator = max(abs(y), rms)
        rel[key] = 0.0 if x == y else (abs(x - y) / denominator if denominator > 0 else math.inf)
        # Elements each within atol move the norm by at most atol * sqrt(numel).
        if abs(x - y) > atol * (math.sqrt(numel) if key == "norm" else 1.0):
            beyond[key] = rel[key]
    tol = THRESHOLDS.get(dtype, _DEFAULT)[3] if _is_float(dtype) else 0.0
    m = Metrics("stats", "pass", f"statistics only: rel diffs <= {tol:g} or |diffs| <= atol {atol:g}",
                stats_rel=rel, atol=atol)
    if not rel:
        m.rule = "statistics only: nothing comparable"
        return m
    if not beyond:
        return m
    worst = max(beyond, key=lambda k: beyond[k])
    if beyond[worst] > tol * _STATS_ERROR_FACTOR:
        m.verdict = "error"
        m.rule = (f"statistics only: {worst} rel diff {beyond[worst]:.3g} > {tol * _STATS_ERROR_FACTOR:g} "
                  f"(beyond atol {atol:g})")
    elif beyond[worst] > tol:
        m.verdict = "warning"
        m.rule = f"statistics only: {worst} rel diff {beyond[worst]:.3g} > {tol:g} (beyond atol {atol:g})"
    return m


def compare_entries(a: dict[str, Any], b: dict[str, Any], data_a: Optional[torch.Tensor],
                    data_b: Optional[torch.Tensor], atol: Optional[float] = None) -> Metrics:
    """Compare two argument summaries (see _summary.py) with their saved data when both have it;
    `atol` replaces every floating dtype's absolute floor (ABS_TOLERANCES)."""
    if a.get("type") != "tensor" or b.get("type") != "tensor":
        if a.get("type") != b.get("type"):
            return Metrics("none", "error", f"kinds differ: {a.get('type')} vs {b.get('type')}")
        if a.get("value") != b.get("value") and a.get("type") in ("int", "bool", "str"):
            return Metrics("none", "warning", f"values differ: {a.get('value')!r} vs {b.get('value')!r}")
        return Metrics("none", "pass", "not a tensor")
    dtype = b.get("dtype", "")
    if a.get("dtype") != dtype:
        return Metrics("none", "error", f"dtype {a.get('dtype')} vs {dtype}")
    if a.get("shape") != b.get("shape"):
        return Metrics("none", "error", f"shape {a.get('shape')} vs {b.get('shape')}")
    for key in ("nan", "inf"):
        if (a.get(key) or 0) != (b.get(key) or 0):
            return Metrics("none", "error", f"{key} count {a.get(key)} vs {b.get(key)}")
    if a.get("max") is None and b.get("max") is None:
        return Metrics("none", "pass", "empty tensor" if 0 in (b.get("shape") or []) else "no statistics")
    if data_a is not None and data_b is not None and data_a.shape == data_b.shape \
            and a.get("sampling") == b.get("sampling"):
        return _data_metrics(data_a, data_b, dtype, "sample" if a.get("sampling") else "data",
                             abs_tolerance(dtype, atol))
    return _stats_metrics(a, b, dtype, abs_tolerance(dtype, atol) if _is_float(dtype) else 0.0)


def compare_tensors(a: torch.Tensor, b: torch.Tensor, atol: Optional[float] = None) -> Metrics:
    """Compare two CPU tensors of the same dtype and shape on their data."""
    dtype = str(b.dtype).replace("torch.", "")
    return _data_metrics(a, b, dtype, "data", abs_tolerance(dtype, atol))
