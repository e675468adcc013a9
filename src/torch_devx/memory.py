"""torch.devx.memory: memory history, snapshots and the memory timeline, shaped like torch.cuda.memory.

`_record_memory_history()` starts recording every caching-allocator action with the stack that
caused it; `_snapshot()` returns the allocator's segments and blocks plus the recorded actions in
the format of `torch.cuda.memory._snapshot()`, so `torch.cuda._memory_viz` (segments, memory,
trace, segsum, trace_plot) and pytorch.org/memory_viz read it; `_dump_snapshot()` pickles it.
`memory_timeline()` gives, for each recorded action, live/peak/reserved bytes and how fragmented
the cache is, and `plot_memory_timeline()` draws it.
"""
from __future__ import annotations

import html
import importlib.util
import pickle
import sys
from typing import Any, NamedTuple

from . import _C
from .device_module import (  # noqa: F401  (torch.cuda.memory has these too)
    _index,
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)

_ENABLED = (None, "state", "all")
_CONTEXT = (None, "state", "alloc", "all")
_STACKS = ("python", "all")
_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom", "snapshot")
_skip_actions: frozenset[str] = frozenset()


def _record_memory_history(
    enabled: str | bool | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: Any = None,
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
    skip_actions: list[str] | None = None,
) -> None:
    """Record the devx allocator's actions and their stacks, as torch.cuda.memory._record_memory_history.

    enabled: None stops recording (the history is kept for _snapshot), "state" keeps the stacks
    of live allocations only, "all" also keeps the history of actions (True/False: "all"/None).
    context: which actions keep a stack (None, "state": live allocations, "alloc": plus alloc
    actions, "all": plus frees). stacks: "python" or "all" (plus C++ frames). max_entries: the
    newest actions kept per device. Recording covers every devx device; `device` is accepted for
    torch.cuda's signature. skip_actions leaves those actions out of _snapshot()'s traces.
    """
    if isinstance(enabled, bool):
        enabled = "all" if enabled else None
    if enabled not in _ENABLED:
        raise ValueError(f"enabled={enabled!r}: expected one of {_ENABLED}")
    if context not in _CONTEXT:
        raise ValueError(f"context={context!r}: expected one of {_CONTEXT}")
    if stacks not in _STACKS:
        raise ValueError(f"stacks={stacks!r}: expected one of {_STACKS}")
    if not isinstance(max_entries, int) or max_entries <= 0:
        raise ValueError(f"max_entries={max_entries!r}: expected a positive integer")
    unknown = set(skip_actions or ()) - set(_ACTIONS)
    if unknown:
        raise ValueError(f"skip_actions: unknown actions {sorted(unknown)}; known: {_ACTIONS}")
    global _skip_actions
    _skip_actions = frozenset(skip_actions or ())
    _C._record_memory_history(
        enabled is not None, enabled == "all", context or "none", stacks == "all", max_entries, clear_history
    )


def _snapshot(device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
    """The allocator's state as torch.cuda.memory._snapshot() gives it: "segments" (every device's
    segments with their blocks, states and the stacks that allocated them), "device_traces" (the
    recorded actions per device, oldest first) and "allocator_settings"."""
    snap = _C._memory_snapshot()
    if _skip_actions:
        snap["device_traces"] = [
            [e for e in trace if e["action"] not in _skip_actions] for trace in snap["device_traces"]
        ]
    return snap


def memory_snapshot() -> list[dict[str, Any]]:
    """The segments of _snapshot(), as torch.cuda.memory_snapshot()."""
    return _snapshot()["segments"]


def _dump_snapshot(filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False) -> None:
    """Pickle _snapshot() to `filename` (what pytorch.org/memory_viz opens)."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


class TimelineEvent(NamedTuple):
    time_us: int  # microseconds since the epoch
    action: str  # as in the snapshot's device_traces
    addr: int
    size: int
    allocated: int  # live bytes after the action
    peak_allocated: int  # peak live bytes so far (since the last reset_peak_memory_stats)
    reserved: int  # bytes the cache holds from the device
    largest_free: int  # the largest cached free block: the biggest request served without the device

    @property
    def fragmentation(self) -> int:
        """Reserved bytes that are free but out of reach of a request as big as the largest free block."""
        return self.reserved - self.allocated - self.largest_free

    @property
    def fragmentation_ratio(self) -> float:
        """fragmentation as a share of the free cached bytes (0: one free block; near 1: crumbs)."""
        free = self.reserved - self.allocated
        return self.fragmentation / free if free > 0 else 0.0


def memory_timeline(device: Any = None) -> list[TimelineEvent]:
    """Every allocator action recorded on `device` (recording must be on, enabled="all"), oldest
    first, with the device's live, peak and reserved bytes and the largest free block after it."""
    return [TimelineEvent(*row) for row in _C._memory_timeline(_index(device))]


class Marker(NamedTuple):
    time_us: int  # the clock of the timeline: microseconds since the epoch
    kind: str  # "begin"/"end" of a record_function range (torch.profiler.record_function, an
    #            optimizer step, an nvtx range) or "mark" (mark())
    name: str


def mark(name: str) -> None:
    """A named point on the memory timeline ("step 3", "after load"), kept while history is recorded."""
    if _C._memory_history_recording():
        _C._memory_mark(str(name))


def memory_markers() -> list[Marker]:
    """The markers kept while history was recorded, oldest first: record_function ranges opened
    and closed by the user's code (optimizer steps among them) and mark() points."""
    return [Marker(*m) for m in _C._memory_markers()]


class PeakGroup(NamedTuple):
    where: str  # the user's line that allocated, "(no Python frame: ...)" or "(before the recorded history)"
    count: int
    bytes: int


class MemoryPeak(NamedTuple):
    time_us: int
    allocated: int
    phase: str  # the record_function ranges open at the peak, outermost first ("" outside any)
    live: list[PeakGroup]  # what was live at the peak, by the line that allocated it, most bytes first


def _allocating_line(frames: list[dict[str, Any]]) -> str:
    from ._frames import is_library_file

    for f in frames:
        # C++ frames (stacks="all") come with line 0.
        if f["line"] > 0 and not is_library_file(f["filename"]):
            return f"{f['filename']}:{f['line']}"
    return "(no Python frame: autograd's backward, or a thread without Python)"


def _phase_at(time_us: int) -> str:
    open_ranges: list[str] = []
    for m in memory_markers():
        if m.time_us > time_us:
            break
        if m.kind == "begin":
            open_ranges.append(m.name)
        elif m.kind == "end" and m.name in open_ranges:
            del open_ranges[len(open_ranges) - 1 - open_ranges[::-1].index(m.name)]
    return " > ".join(open_ranges)


def memory_peak(device: Any = None) -> MemoryPeak:
    """When the recorded history peaked in live bytes on `device`, in which record_function ranges,
    and what was live then, grouped by the user's line that allocated it."""
    index = _index(device)
    events = memory_timeline(index)
    if not events:
        raise RuntimeError("no memory history recorded: call torch.devx.memory._record_memory_history() before the run")
    at = max(range(len(events)), key=lambda i: events[i].allocated)
    trace = _C._memory_snapshot()["device_traces"][index]
    live: dict[int, tuple[int, str]] = {}
    for entry in trace[: at + 1]:
        if entry["action"] == "alloc":
            live[entry["addr"]] = (entry["size"], _allocating_line(entry["frames"]))
        elif entry["action"] in ("free_requested", "free_completed"):
            live.pop(entry["addr"], None)
    groups: dict[str, list[int]] = {}
    for size, where in live.values():
        g = groups.setdefault(where, [0, 0])
        g[0] += 1
        g[1] += size
    unseen = events[at].allocated - sum(size for size, _ in live.values())
    if unseen > 0:
        groups["(before the recorded history)"] = [0, unseen]
    rows = sorted((PeakGroup(w, c, b) for w, (c, b) in groups.items()), key=lambda g: -g.bytes)
    return MemoryPeak(events[at].time_us, events[at].allocated, _phase_at(events[at].time_us), rows)


def _format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


_MAX_DRAWN_MARKERS = 40


def _svg(events: list[TimelineEvent], markers: list[Marker] = (), width: int = 900, height: int = 320) -> str:
    left, right, top, bottom = 80, 20, 20, 40
    t0 = events[0].time_us
    span_t = max(events[-1].time_us - t0, 1)
    top_bytes = max(max(e.reserved for e in events), 1)

    def point(e: TimelineEvent, value: int) -> str:
        x = left + (e.time_us - t0) / span_t * (width - left - right)
        y = top + (1 - value / top_bytes) * (height - top - bottom)
        return f"{x:.1f},{y:.1f}"

    def steps(field: str) -> str:
        pts = []
        prev = None
        for e in events:
            if prev is not None:
                pts.append(point(e, getattr(prev, field)))  # values hold until the next action
            pts.append(point(e, getattr(e, field)))
            prev = e
        return " ".join(pts)

    ticks = "".join(
        f'<text x="{left - 6}" y="{top + (1 - f) * (height - top - bottom) + 4:.1f}" text-anchor="end">'
        f"{_format_bytes(top_bytes * f)}</text>"
        for f in (0, 0.25, 0.5, 0.75, 1)
    )
    # Where ranges begin and points were marked, within the drawn span (the first ones, if many).
    shown = [m for m in markers if m.kind != "end" and t0 <= m.time_us <= events[-1].time_us][:_MAX_DRAWN_MARKERS]
    for m in shown:
        x = left + (m.time_us - t0) / span_t * (width - left - right)
        ticks += (f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" stroke="#bbb" '
                  f'stroke-dasharray="3,3"><title>{html.escape(m.name)}</title></line>')
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="11" '
        f'font-family="sans-serif">'
        f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
        f'fill="none" stroke="#999"/>{ticks}'
        f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">time (ms): 0 to {span_t / 1000:.1f}</text>'
        f'<polyline fill="none" stroke="#e15759" stroke-width="1.5" points="{steps("reserved")}"/>'
        f'<polyline fill="none" stroke="#4e79a7" stroke-width="1.5" points="{steps("allocated")}"/>'
        f"</svg>"
    )


def _html(events_by_device: dict[int, list[TimelineEvent]]) -> str:
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>devx memory timeline</title></head>",
        "<body style='font-family:sans-serif'><h1>devx memory timeline</h1>",
        "<p><span style='color:#4e79a7'>&#9632; allocated (live)</span> &nbsp; "
        "<span style='color:#e15759'>&#9632; reserved (cached)</span></p>",
    ]
    markers = memory_markers()
    for device, events in events_by_device.items():
        peak = max(events, key=lambda e: e.allocated)
        worst = max(events, key=lambda e: e.fragmentation)
        at_peak = memory_peak(device)
        parts.append(f"<h2>devx:{device}</h2>")
        parts.append(_svg(events, markers))
        parts.append(
            "<ul>"
            f"<li>{len(events)} allocator actions</li>"
            f"<li>peak allocated {html.escape(_format_bytes(peak.allocated))}, "
            f"peak reserved {html.escape(_format_bytes(max(e.reserved for e in events)))}</li>"
            f"<li>worst fragmentation {html.escape(_format_bytes(worst.fragmentation))} "
            f"({worst.fragmentation_ratio:.0%} of the free cached bytes outside the largest free block)</li>"
            f"<li>at the peak{' (in ' + html.escape(at_peak.phase) + ')' if at_peak.phase else ''}, live by "
            "the line that allocated it:<ul>"
            + "".join(f"<li>{html.escape(_format_bytes(g.bytes))} in {g.count} allocations: {html.escape(g.where)}</li>"
                      for g in at_peak.live[:10])
            + "</ul></li></ul>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


def plot_memory_timeline(path: str, device: Any = None) -> str:
    """Draw live and reserved bytes over time from the recorded history. A path ending in .html
    gets a self-contained page (inline SVG, every device with history unless `device` is given);
    .png needs matplotlib. Returns `path`."""
    devices = [_index(device)] if device is not None else range(_C._device_count())
    events_by_device = {d: memory_timeline(d) for d in devices}
    events_by_device = {d: ev for d, ev in events_by_device.items() if ev}
    if not events_by_device:
        raise RuntimeError(
            "no memory history recorded: call torch.devx.memory._record_memory_history() before the run"
        )
    if path.endswith(".html"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(_html(events_by_device))
        return path
    if not path.endswith(".png"):
        raise ValueError(f"plot path {path!r} must end in .html or .png")
    if importlib.util.find_spec("matplotlib") is None:
        raise ImportError("a .png memory plot needs matplotlib (pip install matplotlib); .html needs nothing")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(events_by_device), 1, figsize=(10, 3.5 * len(events_by_device)), squeeze=False)
    for ax, (d, events) in zip(axes[:, 0], events_by_device.items()):
        t0 = events[0].time_us
        t = [(e.time_us - t0) / 1000 for e in events]
        ax.step(t, [e.allocated / 2**20 for e in events], where="post", label="allocated")
        ax.step(t, [e.reserved / 2**20 for e in events], where="post", label="reserved")
        ax.set_title(f"devx:{d}")
        ax.set_xlabel("ms")
        ax.set_ylabel("MiB")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
