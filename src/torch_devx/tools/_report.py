"""compare.csv, ranking.csv and compare.html of a CompareResult."""
from __future__ import annotations

import csv
import html
import os
from typing import Any, Optional

from ._files import write_file
from .compare import ApiComparison, CompareResult, TensorComparison

__all__ = ["CSV_COLUMNS", "write_reports"]

CSV_COLUMNS = ["api_a", "api_b", "kind", "io", "tensor", "dtype_a", "dtype_b", "shape_a", "shape_b",
               "cosine", "max_abs_err", "max_rel_err", "within_0.1%", "within_1%", "norm_rel_err", "atol",
               "max_a", "max_b", "min_a", "min_b", "mean_a", "mean_b", "norm_a", "norm_b",
               "nan_a", "nan_b", "inf_a", "inf_b", "basis", "verdict", "rule", "api_verdict", "api_rule"]
_STAT_KEYS = ("max", "min", "mean", "norm", "nan", "inf")


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.8g}"
    return str(value)


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> Any:
    """A cell a spreadsheet shows as text: one starting like a formula (op and module names come from
    the dumped program) gets a leading apostrophe; numbers, negative ones included, stay numbers."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START):
        return value
    try:
        float(value)
        return value
    except ValueError:
        return "'" + value


def _tensor_row(api: ApiComparison, t: Optional[TensorComparison]) -> dict[str, str]:
    row = {"api_a": api.name_a or "", "api_b": api.name_b or "", "kind": api.kind,
           "api_verdict": api.verdict if api.paired else "unpaired", "api_rule": api.rule}
    if t is None:
        return row
    m = t.metrics
    row.update({"io": t.io, "tensor": t.label, "dtype_a": _fmt(t.a.get("dtype")), "dtype_b": _fmt(t.b.get("dtype")),
                "shape_a": _fmt(t.a.get("shape")), "shape_b": _fmt(t.b.get("shape")),
                "cosine": _fmt(m.cosine), "max_abs_err": _fmt(m.max_abs), "max_rel_err": _fmt(m.max_rel),
                "within_0.1%": _fmt(m.within_01), "within_1%": _fmt(m.within_1), "norm_rel_err": _fmt(m.norm_rel),
                "atol": _fmt(m.atol),
                "basis": m.basis, "verdict": m.verdict, "rule": m.rule})
    for key in _STAT_KEYS:
        row[f"{key}_a"], row[f"{key}_b"] = _fmt(t.a.get(key)), _fmt(t.b.get(key))
    return row


def _write_csv(result: CompareResult, path: str) -> None:
    with write_file(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, restval="")
        writer.writeheader()
        for api in result.apis:
            for t in api.tensors or [None]:
                writer.writerow({k: _csv_cell(v) for k, v in _tensor_row(api, t).items()})


def _write_ranking(result: CompareResult, path: str) -> None:
    with write_file(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["rank", "module", "error", "verdict", "rule"])
        for i, api in enumerate(result.ranking, 1):
            writer.writerow([_csv_cell(v) for v in (i, api.name, _fmt(api.error), api.verdict, api.rule)])


_STYLE = """
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #bbb; padding: 2px 6px; text-align: left; }
tr.pass td.v { background: #d8f0d8; } tr.warning td.v { background: #fff0b0; }
tr.error td.v { background: #f6c6c6; } tr.unpaired td.v { background: #ddd; }
.box { border: 2px solid #c33; padding: 0.6em 1em; margin-bottom: 1.2em; background: #fff6f6; }
.ok { border-color: #3a3; background: #f6fff6; }
pre { margin: 0.3em 0; }
"""


def _cell(value: Any) -> str:
    return f"<td>{html.escape(_fmt(value))}</td>"


def _html(result: CompareResult) -> str:
    counts = result.counts()
    esc = html.escape
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>torch_devx compare</title>",
             f"<style>{_STYLE}</style></head><body>",
             "<h1>torch_devx compare</h1>",
             f"<p>A: {esc(result.dump_a)}<br>B: {esc(result.dump_b)}<br>basis: {esc(result.basis)} &mdash; "
             + ", ".join(f"{v} {k}" for k, v in counts.items()) + "</p>"]
    fd = result.first_divergence
    if fd is None:
        parts.append("<div class='box ok'>No API turns agreeing inputs into disagreeing outputs.</div>")
    else:
        parts.append(f"<div class='box' id='first-divergence'><b>First divergence:</b> {esc(fd.name)} "
                     f"&mdash; {esc(fd.verdict)}: {esc(fd.rule)}<pre>{esc(chr(10).join(fd.stack))}</pre></div>")
    if result.ranking:
        parts.append("<h2>Layers by verdict, then error</h2><table id='ranking'><tr><th>rank</th><th>module</th>"
                     "<th>error (||A-B||/||B||, or worst statistic rel diff)</th>"
                     "<th>verdict</th><th>rule</th></tr>")
        for i, api in enumerate(result.ranking, 1):
            parts.append(f"<tr class='{api.verdict}'><td>{i}</td>{_cell(api.name)}{_cell(api.error)}"
                         f"<td class='v'>{esc(api.verdict)}</td>{_cell(api.rule)}</tr>")
        parts.append("</table>")
    columns = ["api", "io", "tensor", "dtype", "shape", "cosine", "max abs err", "max rel err", "within 0.1%",
               "within 1%", "||A-B||/||B||", "atol", "norm A", "norm B", "verdict", "rule"]
    parts.append("<h2>APIs</h2><table id='apis'><tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>")
    for api in result.apis:
        label = api.name if api.paired else f"{api.name} (only in {'A' if api.name_a else 'B'})"
        if not api.tensors:
            cls = api.verdict if api.paired else "unpaired"
            parts.append(f"<tr class='{cls}'>{_cell(label)}" + "<td></td>" * (len(columns) - 3)
                         + f"<td class='v'>{esc(cls)}</td>{_cell(api.rule)}</tr>")
            continue
        for t in api.tensors:
            m = t.metrics
            parts.append(f"<tr class='{m.verdict}'>{_cell(label)}{_cell(t.io)}{_cell(t.label)}"
                         f"{_cell(t.a.get('dtype'))}{_cell(t.a.get('shape'))}{_cell(m.cosine)}{_cell(m.max_abs)}"
                         f"{_cell(m.max_rel)}{_cell(m.within_01)}{_cell(m.within_1)}{_cell(m.norm_rel)}{_cell(m.atol)}"
                         f"{_cell(t.a.get('norm'))}{_cell(t.b.get('norm'))}<td class='v'>{esc(m.verdict)}</td>"
                         f"{_cell(m.rule)}</tr>")
    parts.append("</table></body></html>")
    return "\n".join(parts)


def write_reports(result: CompareResult, out_dir: str) -> dict[str, str]:
    files = {"csv": os.path.join(out_dir, "compare.csv"), "html": os.path.join(out_dir, "compare.html"),
             "ranking": os.path.join(out_dir, "ranking.csv")}
    _write_csv(result, files["csv"])
    _write_ranking(result, files["ranking"])
    with write_file(files["html"]) as f:
        f.write(_html(result))
    return files
