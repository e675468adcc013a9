"""Which forward call created an autograd node, so that a backward op can be named after the module
and the Python line of the forward op whose gradient it computes.

Autograd numbers the nodes it creates, per thread (`Node._sequence_nr()`), and the number the next
node will get can be read (`torch._C._autograd._get_sequence_nr()`). A TorchDispatchMode sees each
forward op after autograd made that op's node, so the numbers taken since the previous op belong to
this op: `note()`, called for every forward op, keeps (module, file, line) for them. In the backward
pass `lookup(node)` finds the entry holding the node's number. The dumper also keeps the name of the
record that was open (the API call, or the module, being recorded), so that compare can pair a
backward op with the backward of the same call in the other run. Nodes made by a custom
autograd.Function (after its forward ran) go to the next op; those made before start(), on another
thread, or while differentiating the backward pass (create_graph) are not known.
"""
from __future__ import annotations

import bisect
import linecache
import sys
from dataclasses import dataclass
from typing import Any, Optional

import torch

from ._common import user_frame

__all__ = ["ForwardOrigins", "Origin"]


@dataclass(frozen=True)
class Origin:
    module: str        # "act (GELU)", or "" outside modules
    filename: str
    lineno: int
    record: str = ""   # the dump record open when the node was made ("torch.tanh.3.forward")

    @property
    def location(self) -> str:
        return f"{self.filename}:{self.lineno}" if self.filename else ""

    @property
    def source(self) -> str:
        return linecache.getline(self.filename, self.lineno).strip() if self.filename else ""


class ForwardOrigins:
    """`limit` entries at most (one per forward op that made nodes): when a graph is kept for
    longer than that many ops, its oldest nodes are forgotten rather than the memory growing."""

    def __init__(self, limit: int = 1 << 18) -> None:
        self.limit = limit
        self._ends: list[int] = []              # ascending: the next sequence number after each entry's op
        self._origins: list[Origin] = []
        self._floor = 0                         # numbers below this one are not known
        self._interned: dict[Origin, Origin] = {}

    def start(self) -> None:
        self.clear()
        self._floor = torch._C._autograd._get_sequence_nr()

    def clear(self) -> None:
        self._ends.clear()
        self._origins.clear()
        self._interned.clear()

    def note(self, module: str, record: str = "") -> None:
        """Called for each forward op, from its __torch_dispatch__, on the thread being followed."""
        end = torch._C._autograd._get_sequence_nr()
        last = self._ends[-1] if self._ends else self._floor
        if end <= last:
            return  # the op made no node
        frame = user_frame(sys._getframe(1))
        origin = Origin(module, frame.f_code.co_filename, frame.f_lineno, record) if frame is not None \
            else Origin(module, "", 0, record)
        self._ends.append(end)
        self._origins.append(self._interned.setdefault(origin, origin))
        if len(self._ends) > self.limit:
            drop = len(self._ends) // 2
            self._floor = self._ends[drop - 1]
            del self._ends[:drop], self._origins[:drop]

    def lookup(self, node: Any) -> Optional[Origin]:
        """The origin of autograd node `node` (the one running a backward op), or None."""
        if node is None:
            return None
        seq = node._sequence_nr()
        if seq < self._floor:
            return None
        i = bisect.bisect_right(self._ends, seq)
        return self._origins[i] if i < len(self._origins) else None
