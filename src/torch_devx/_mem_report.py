"""The memory checker's report (DIPU_MEM_CHECK): the live devx allocations, grouped by origin and
told apart by what still holds them.

The C++ checker records, for each allocation, the user's Python line, the outermost op running and,
for an allocation made in the backward pass, the autograd node and the forward line of the op that
made it. Who holds an allocation now is only known to Python, so it is found here, at report time:
the storages of module parameters and buffers, of gradients, of optimizer state, of every other
tensor the garbage collector knows (lists, dicts, frames), and of the tensors that the autograd
graphs of those tensors saved for backward. What none of them holds is kept by nothing Python can
reach: a reference held in C++, or an op still in flight.

Sections are ordered so that a leak comes first: memory held by plain Python objects, then memory
nothing reachable holds, then memory kept by autograd graphs; the state a training program keeps on
purpose (parameters, gradients, optimizer state) comes last. Within a section, groups are sorted by
bytes.
"""
from __future__ import annotations

import gc
import linecache
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

import torch

from . import _C
from ._real_device import is_devx

__all__ = ["report"]

PYTHON = "held by Python objects (lists, dicts, variables) other than the program state below"
UNREACHABLE = "held by nothing Python can reach (a C++ reference, or an op in flight)"
GRAPH = "saved for backward by autograd graphs of tensors Python holds"
GRADIENTS = "gradients (.grad)"
OPTIMIZER = "optimizer state"
PARAMETERS = "module parameters and buffers"

# Section order, and how many groups each shows before summing up the rest.
SECTIONS = ((PYTHON, 6), (UNREACHABLE, 6), (GRAPH, 6), (GRADIENTS, 3), (OPTIMIZER, 3), (PARAMETERS, 3))
MAX_GRAPH_NODES = 1 << 16


@dataclass
class Group:
    origin: str
    count: int = 0
    bytes: int = 0
    first: Optional[tuple] = None  # the oldest record of the group (for its stack)
    devices: set = field(default_factory=set)


def _size(n: int) -> str:
    if n < 1 << 10:
        return f"{n} B"
    if n < 1 << 20:
        return f"{n / (1 << 10):.1f} KiB"
    if n < 1 << 30:
        return f"{n / (1 << 20):.2f} MiB"
    return f"{n / (1 << 30):.2f} GiB"


def _storage_ptr(t: Any) -> Optional[int]:
    if not isinstance(t, torch.Tensor) or not is_devx(t):
        return None
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # no storage (sparse, nested, wrapper subclasses)
        return None


def _saved_tensors(node: Any) -> Iterable[torch.Tensor]:
    for name in dir(node):
        if not name.startswith("_saved_"):
            continue
        try:
            value = getattr(node, name)
        except RuntimeError:  # freed by a backward pass
            continue
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (tuple, list)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


def _holders() -> dict[int, str]:
    """Storage data pointer -> section, for the devx storages Python can reach (the first
    section that claims one keeps it)."""
    holders: dict[int, str] = {}

    def claim(t: Any, section: str) -> None:
        ptr = _storage_ptr(t)
        if ptr:
            holders.setdefault(ptr, section)

    with warnings.catch_warnings():
        # isinstance() reads __class__, which some deprecated objects warn about when asked.
        warnings.simplefilter("ignore")
        objects = gc.get_objects()
        tensors = [o for o in objects if isinstance(o, torch.Tensor)]
        objects = [o for o in objects if isinstance(o, (torch.nn.Module, torch.optim.Optimizer))]
    for o in objects:
        if isinstance(o, torch.nn.Module):
            # A module whose __init__ has not run (or failed) has no parameter dicts yet.
            for t in (*getattr(o, "_parameters", {}).values(), *getattr(o, "_buffers", {}).values()):
                if t is not None:
                    claim(t, PARAMETERS)
        else:
            for state in getattr(o, "state", {}).values():
                for v in state.values() if isinstance(state, dict) else ():
                    claim(v, OPTIMIZER)
    for t in tensors:
        if t.is_leaf and t.requires_grad:
            claim(t.grad, GRADIENTS)
    for t in tensors:
        claim(t, PYTHON)
    seen: set[int] = set()
    stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
    while stack and len(seen) < MAX_GRAPH_NODES:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for saved in _saved_tensors(node):
            claim(saved, GRAPH)
        stack.extend(n for n, _ in node.next_functions)
    return holders


def _origin(line: str, op: str, backward: bool, forward: str) -> str:
    if backward:
        where = forward or "?"
        what = f"{op} (backward)"
    else:
        where = line or "?"
        what = op or "-"
    source = ""
    file, _, lineno = where.rpartition(":")
    if file and lineno.isdigit():
        source = linecache.getline(file, int(lineno)).strip()
        if len(source) > 48:
            source = source[:45] + "..."
    return f"{where}  {what}" + (f"  | {source}" if source else "")


def _stack_lines(record: tuple) -> list[str]:
    ptr, *_, python_stack = record
    lines = []
    if python_stack:
        lines.append("          Python stack (most recent call last):")
        lines += [f"            {f}:{n} in {name}" for f, n, name in reversed(python_stack)]
    cpp = _C._mem_check_backtrace(ptr)
    if cpp:
        lines.append("          C++ backtrace:")
        lines += ["        " + l for l in cpp.rstrip("\n").split("\n")]
    return lines


def report() -> str:
    records = _C._mem_check_records()  # (ptr, size, device, serial, line, op, backward, forward, stack), oldest first
    total = sum(r[1] for r in records)
    out = [f"devx memory check: {len(records)} allocation{'' if len(records) == 1 else 's'} "
           f"({total} bytes) not released"]
    if not records:
        return out[0]
    holders = _holders()
    sections: dict[str, dict[str, Group]] = {name: {} for name, _ in SECTIONS}
    for r in records:
        ptr, size, device, _, line, op, backward, forward, _ = r
        origin = _origin(line, op, backward, forward)
        group = sections[holders.get(ptr, UNREACHABLE)].setdefault(origin, Group(origin))
        group.count += 1
        group.bytes += size
        group.devices.add(device)
        if group.first is None:
            group.first = r
    for name, shown in SECTIONS:
        groups = sorted(sections[name].values(), key=lambda g: (-g.bytes, -g.count))
        if not groups:
            continue
        out.append(f"  {name}: {sum(g.count for g in groups)} allocations, {_size(sum(g.bytes for g in groups))}")
        for g in groups[:shown]:
            devices = ",".join(f"devx:{d}" for d in sorted(g.devices))
            out.append(f"    {_size(g.bytes):>10} {g.count:>4}x  {devices}  {g.origin}")
            out += _stack_lines(g.first)
        rest = groups[shown:]
        if rest:
            out.append(f"    {_size(sum(g.bytes for g in rest)):>10} {sum(g.count for g in rest):>4}x  "
                       f"in {len(rest)} more origin{'' if len(rest) == 1 else 's'}")
    return "\n".join(out)
