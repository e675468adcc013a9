"""Compare two dumps (run A, e.g. devx, against run B, e.g. the CPU) API by API.

    from torch_devx.tools import compare, parse
    result = compare("dump_devx", "dump_cpu", out_dir="cmp")   # cmp/compare.csv, compare.html, ranking.csv
    print(result.summary())
    print(parse("dump_devx", "torch.tanh.0.forward"))

Pairing follows the structure of the run, then the sequence of API names and directions (difflib):
the runs of records made in one module call are aligned by module, the records inside them by API,
and a backward aten op (whose record names its "origin", the forward call that made its autograd
node) only with a backward op of the forward call paired with its origin. So an extra or missing
call on one side (a `.cuda()` only the device script makes) leaves the rest paired, and where the two
runs compute a call differently (a fused attention kernel and its backward on one side, the
decomposed ops on the other) those records stay unpaired instead of being compared with the ops of
another call. Unpaired records are listed as "only in A/B", with the call whose backward they are
part of. An optimizer step is one record on both sides (see
dump.py), so a run whose optimizer uses foreach ops (devx's default) and one that loops over the
parameters (the CPU's) pair on that record; the API calls inside the two steps are listed as "only
in A/B" with a rule naming the step, and do not shift the pairing of the rest. Each tensor of a pair
is compared (see _metrics.py for the metrics and the verdict rules); a record's verdict is the worst
of its outputs' (of its inputs' when it has no outputs: module backward records hold gradients as
inputs).

First divergence: the first pair in call order whose inputs all pass and whose output verdict is not
pass: the API that turned agreeing inputs into disagreeing outputs. Leaf records (APIs, aten ops) are
searched before modules and optimizer steps, since those diverge whenever anything inside them does.

Ranking: module records sorted by verdict (errors, then warnings, then passes) and within a verdict
by their error, largest first: ||A - B|| / ||B|| of the worst output (a layer whose output is 5% too
large everywhere has cosine 1 but error 0.05), or the largest statistic rel diff when only statistics
were dumped. The same order is used in ranking.csv and compare.html.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from ._common import returns_uninitialised
from ._dump_reader import Dump, dump_steps, load_dump
from ._metrics import SEVERITY, Metrics, compare_entries

__all__ = ["ApiComparison", "CompareResult", "TensorComparison", "compare", "parse"]


@dataclass
class TensorComparison:
    io: str                      # "input" or "output"
    label: str                   # "args[0]", "output"
    a: dict[str, Any]
    b: dict[str, Any]
    metrics: Metrics


@dataclass
class ApiComparison:
    name_a: Optional[str]
    name_b: Optional[str]
    kind: str
    tensors: list[TensorComparison] = field(default_factory=list)
    verdict: str = "pass"
    rule: str = ""
    input_verdict: str = "pass"
    stack: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.name_a or self.name_b or ""

    @property
    def paired(self) -> bool:
        return self.name_a is not None and self.name_b is not None

    @property
    def error(self) -> float:
        outputs = [t.metrics for t in self.tensors if t.io == "output"] or [t.metrics for t in self.tensors]
        return max((m.error for m in outputs), default=0.0)


@dataclass
class CompareResult:
    dump_a: str
    dump_b: str
    apis: list[ApiComparison]
    first_divergence: Optional[ApiComparison]
    ranking: list[ApiComparison]
    basis: str                                   # "data", "sample", "stats" or "mixed"
    files: dict[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "warning": 0, "error": 0, "unpaired": 0}
        for api in self.apis:
            out[api.verdict if api.paired else "unpaired"] += 1
        return out

    def summary(self) -> str:
        c = self.counts()
        lines = [f"compared {self.dump_a} (A) with {self.dump_b} (B) on {self.basis}: {c['pass']} pass, "
                 f"{c['warning']} warning, {c['error']} error, {c['unpaired']} unpaired"]
        fd = self.first_divergence
        if fd is None:
            lines.append("no API turns agreeing inputs into disagreeing outputs")
        else:
            lines.append(f"first divergence: {fd.name} ({fd.verdict}: {fd.rule})")
            lines += [f"    {frame}" for frame in fd.stack]
        if self.ranking:
            lines.append("layers by error: "
                         + ", ".join(f"{r.name} {r.verdict} {r.error:.3g}" for r in self.ranking[:5]))
        return "\n".join(lines)


def _sequence_key(record: dict[str, Any]) -> str:
    """What two paired records share: the API, the direction and, for a backward aten op, the autograd
    node running it (a fused kernel's backward and a decomposition's may issue the same op)."""
    return f"{record.get('api')}:{record.get('direction')}:{record.get('node') or ''}"


def _scope(record: dict[str, Any]) -> tuple[str, str]:
    """Where a record was made: the optimizer step and the module running it."""
    return record.get("optimizer") or "", record.get("module") or ""


def _segments(dump: Dump, names: list[str]) -> list[list[str]]:
    """`names` cut into runs of consecutive records made in the same scope: one module call's APIs."""
    out: list[list[str]] = []
    for name in names:
        if out and _scope(dump.records[out[-1][-1]]) == _scope(dump.records[name]):
            out[-1].append(name)
        else:
            out.append([name])
    return out


def _align(a: Dump, b: Dump, names_a: list[str], names_b: list[str], pairs: dict[str, str]) -> None:
    """Pair records of the two lists with the same API and direction, keeping the order (difflib)."""
    keys_a = [_sequence_key(a.records[n]) for n in names_a]
    keys_b = [_sequence_key(b.records[n]) for n in names_b]
    for block in difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False).get_matching_blocks():
        pairs.update(zip(names_a[block.a:block.a + block.size], names_b[block.b:block.b + block.size]))


def _pairs(a: Dump, b: Dump) -> list[tuple[Optional[str], Optional[str]]]:
    """Pairs of record names in call order; None on the side that lacks the record.

    The records are paired by the structure of the run, then by their sequence: first the runs of
    records made in one module call (or optimizer step) are aligned by their scope, and the records
    inside two aligned runs by their API names; then the backward aten ops that name their origin
    (the forward call that made their autograd node) are paired only with backward ops of the
    forward call paired with that origin. So when the two runs compute something differently (a fused
    attention kernel on one side, its decomposition on the other), the records of that computation
    stay unpaired rather than being compared with the ops of another call."""
    backward_a = {n for n, r in a.records.items() if r.get("origin") in a.records}
    backward_b = {n for n, r in b.records.items() if r.get("origin") in b.records}
    rest_a = [n for n in a.records if n not in backward_a]
    rest_b = [n for n in b.records if n not in backward_b]
    pairs: dict[str, str] = {}
    seg_a, seg_b = _segments(a, rest_a), _segments(b, rest_b)
    scopes_a = [_scope(a.records[s[0]]) for s in seg_a]
    scopes_b = [_scope(b.records[s[0]]) for s in seg_b]
    for block in difflib.SequenceMatcher(None, scopes_a, scopes_b, autojunk=False).get_matching_blocks():
        for i in range(block.size):
            _align(a, b, seg_a[block.a + i], seg_b[block.b + i], pairs)
    by_origin_b: dict[str, list[str]] = {}
    for n in b.records:
        if n in backward_b:
            by_origin_b.setdefault(b.records[n]["origin"], []).append(n)
    by_origin_a: dict[str, list[str]] = {}
    for n in a.records:
        if n in backward_a:
            by_origin_a.setdefault(a.records[n]["origin"], []).append(n)
    for origin_a, names_a in by_origin_a.items():
        origin_b = pairs.get(origin_a)
        if origin_b is not None:
            _align(a, b, names_a, by_origin_b.get(origin_b, []), pairs)
    # Call order: A's records, each of B's unpaired records after the last B record before it that was
    # paired (at the start when none was).
    position = {name: i for i, name in enumerate(a.records)}
    keyed: list[tuple[tuple[int, int, int], tuple[Optional[str], Optional[str]]]] = \
        [((i, 0, 0), (name, pairs.get(name))) for i, name in enumerate(a.records)]
    after = -1
    paired_b = {nb: na for na, nb in pairs.items()}
    for j, name in enumerate(b.records):
        if name in paired_b:
            after = position[paired_b[name]]
        else:
            keyed.append(((after, 1, j), (None, name)))
    return [pair for _, pair in sorted(keyed, key=lambda item: item[0])]


def _unpaired_rule(a: Dump, b: Dump, name_a: Optional[str], name_b: Optional[str],
                   partners: dict[tuple[str, str], str]) -> str:
    """Why a record has no partner: the side it is on, and the optimizer step or the forward call
    whose backward it belongs to."""
    side, dump, other = ("A", a, "B") if name_a else ("B", b, "A")
    record = dump.records[name_a or name_b or ""]
    rule = "only in " + side
    step = record.get("optimizer")
    if step:
        rule += (f", inside {step}: the two runs update the parameters differently (foreach ops vs "
                 "a per-parameter loop); that step's record compares the update as a whole")
    origin = record.get("origin")
    if origin in dump.records:
        partner = partners.get((side, origin))
        if partner:
            rule += (f", in the backward of {origin} (paired with {other}'s {partner}): the two runs "
                     "differentiate that call with different aten ops")
        else:
            rule += f", in the backward of {origin}, which is only in {side}"
    return rule


def _worst(metrics: list[Metrics]) -> Optional[Metrics]:
    return max(metrics, key=lambda m: SEVERITY[m.verdict], default=None)


def _compare_pair(a: Dump, b: Dump, name_a: Optional[str], name_b: Optional[str],
                  partners: dict[tuple[str, str], str], atol: Optional[float]) -> ApiComparison:
    rec_a = a.records.get(name_a, {}) if name_a else {}
    rec_b = b.records.get(name_b, {}) if name_b else {}
    result = ApiComparison(name_a, name_b, (rec_a or rec_b).get("kind", "api"),
                           stack=a.stack(name_a) if name_a else b.stack(name_b or ""))
    if not result.paired:
        result.verdict, result.rule = "error", _unpaired_rule(a, b, name_a, name_b, partners)
        return result
    for io in ("input", "output"):
        entries_a = {e["name"]: e for e in rec_a.get(io + "s", [])}
        for entry_b in rec_b.get(io + "s", []):
            entry_a = entries_a.get(entry_b["name"])
            if entry_a is None:
                continue
            if io == "output" and returns_uninitialised(rec_b.get("api", "")):
                metrics = Metrics("none", "pass", "uninitialised memory (empty): not compared")
            else:
                metrics = compare_entries(entry_a, entry_b, a.data(entry_a), b.data(entry_b), atol)
            result.tensors.append(TensorComparison(io, entry_b["name"], entry_a, entry_b, metrics))
    inputs = [t.metrics for t in result.tensors if t.io == "input"]
    outputs = [t.metrics for t in result.tensors if t.io == "output"]
    worst_in = _worst(inputs)
    result.input_verdict = worst_in.verdict if worst_in else "pass"
    worst = _worst(outputs) or worst_in
    if worst is not None:
        result.verdict, result.rule = worst.verdict, worst.rule
    if "error" in rec_a or "error" in rec_b:
        result.verdict = "error"
        result.rule = f"raised: {rec_a.get('error') or rec_b.get('error')}"
    return result


# Records that hold other records (a module's forward, an optimizer step): they diverge whenever
# anything inside them does, so they are named only when no leaf inside explains it.
_CONTAINERS = ("module", "optimizer")


def _first_divergence(apis: list[ApiComparison]) -> Optional[ApiComparison]:
    def diverges(api: ApiComparison) -> bool:
        has_outputs = any(t.io == "output" for t in api.tensors)
        return api.paired and has_outputs and api.input_verdict == "pass" and api.verdict != "pass"
    leaves = [api for api in apis if api.kind not in _CONTAINERS]
    return next((api for api in leaves if diverges(api)), None) or \
        next((api for api in apis if api.kind in _CONTAINERS and diverges(api)), None)


def _is_step_folder(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "dump.json"))


def _load_pair(dump_a: str, dump_b: str, step: Optional[int]) -> tuple[Dump, Dump]:
    """The two dumps to compare. Without `step`, root folders are read at the first step both hold (a
    step folder counts as its own step): step 1 of one run against step 0 of the other would differ
    everywhere, so dumps that share no step are an error."""
    if step is not None:
        return load_dump(dump_a, step), load_dump(dump_b, step)
    paths = (dump_a, dump_b)
    steps: list[list[int]] = []
    step_folders: dict[str, Dump] = {}  # loaded once, for their step and as the dump itself
    for path in paths:
        if _is_step_folder(path):
            step_folders[path] = load_dump(path)
            steps.append([step_folders[path].meta.get("step")])
        else:
            steps.append(dump_steps(path))
            if not steps[-1]:
                load_dump(path)  # raises: not a dump folder
    shared = sorted(set(steps[0]) & set(steps[1]) - {None})
    if not shared and len(step_folders) < 2:
        raise ValueError(f"dumps {dump_a!r} (steps {steps[0]}) and {dump_b!r} (steps {steps[1]}) share no step; "
                         "choose one with step= (--step N), or pass two step folders")
    # Two step folders that share no step are compared as given.
    a, b = (step_folders[p] if p in step_folders else load_dump(p, shared[0]) for p in paths)
    return a, b


def compare(dump_a: str, dump_b: str, out_dir: Optional[str] = None, step: Optional[int] = None,
            atol: Optional[float] = None) -> CompareResult:
    """Compare run A's dump with run B's (folders from Dumper/Tracer: a root or one step folder; `step`
    picks a step of root folders, default the first step both dumps hold). `atol` is the absolute
    floor of every floating verdict (default per dtype: _metrics.ABS_TOLERANCES). With `out_dir`,
    write compare.csv, compare.html and ranking.csv there."""
    if atol is not None and not atol >= 0:
        raise ValueError(f"atol must be a number >= 0, got {atol}")
    a, b = _load_pair(dump_a, dump_b, step)
    pairs = _pairs(a, b)
    partners = {("A", na): nb for na, nb in pairs if na and nb} | {("B", nb): na for na, nb in pairs if na and nb}
    apis = [_compare_pair(a, b, na, nb, partners, atol) for na, nb in pairs]
    bases = {t.metrics.basis for api in apis for t in api.tensors if t.metrics.basis != "none"}
    basis = bases.pop() if len(bases) == 1 else ("mixed" if bases else "none")
    if basis == "none" and "stack" in (a.meta.get("mode"), b.meta.get("mode")):
        basis = "names only (a stack dump)"
    ranking = sorted((api for api in apis if api.kind == "module" and api.paired and api.tensors),
                     key=lambda api: (-SEVERITY[api.verdict], -api.error, api.name))
    result = CompareResult(a.folder, b.folder, apis, _first_divergence(apis), ranking, basis)
    if out_dir is not None:
        from ._report import write_reports

        os.makedirs(out_dir, exist_ok=True)
        result.files = write_reports(result, out_dir)
    return result


def _format_entry(entry: dict[str, Any]) -> str:
    if entry.get("type") != "tensor":
        value = entry.get("value", "")
        return f"{entry['name']}: {entry.get('type')} {value!r}" if "value" in entry else \
            f"{entry['name']}: {entry.get('type')}"
    line = f"{entry['name']}: {entry['dtype']} {tuple(entry['shape'])} {entry.get('device', '')}"
    if entry.get("max") is not None:
        line += (f" max={entry['max']:.6g} min={entry['min']:.6g} mean={entry['mean']:.6g} "
                 f"norm={entry['norm']:.6g} nan={entry['nan']} inf={entry['inf']}")
    if entry.get("data"):
        line += f" data={entry['data']}"
    return line


def parse(dump: str, api: str, step: Optional[int] = None) -> str:
    """The stack and statistics of one record ("torch.tanh.0.forward"; "torch.tanh.0" shows both
    directions) of a dump, as text (also printed)."""
    d = load_dump(dump, step)
    names = [n for n in d.records if n == api or n.rsplit(".", 1)[0] == api]
    if not names:
        close = difflib.get_close_matches(api, list(d.records), n=5)
        hint = f"; close: {', '.join(close)}" if close else ""
        raise KeyError(f"no record {api!r} in {d.folder}{hint}")
    lines = []
    for name in names:
        record = d.records[name]
        lines.append(f"{name}  ({record.get('kind')}" + (f", in {record['module']}" if record.get("module") else "")
                     + (f", node {record['node']}" if record.get("node") else "") + ")")
        lines.append("  stack:")
        lines += [f"    {frame}" for frame in d.stack(name)] or ["    (none recorded)"]
        for io in ("inputs", "outputs"):
            lines.append(f"  {io}:")
            lines += [f"    {_format_entry(e)}" for e in record.get(io, [])] or ["    (none)"]
        if record.get("error"):
            lines.append(f"  raised: {record['error']}")
    text = "\n".join(lines)
    print(text)
    return text
