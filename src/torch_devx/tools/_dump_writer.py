"""The dump format and its writer, shared by Dumper and Tracer.

Folder layout (one sub-folder per dumped step):

    OUT/step0/dump.json   {"meta": {...}, "records": {name: record, ...}}   one record per line, in call order
    OUT/step0/stack.json  {"stacks": [[frame, ...], ...], "records": {name: index into stacks}}
    OUT/step0/data/       NAME.input.0.pt, NAME.output.0.pt ...   (modes "sample" and "full")

A record's name is "API.N.DIRECTION": "torch.tanh.0.forward", "Tensor.add.3.forward",
"Module.fc.Linear.0.forward", "Module.fc.Linear.0.backward", "Aten.mm.default.2.backward",
"Optimizer.SGD.0.step"; N counts the calls of that API in the step. A record holds "api", "kind" (api,
module, aten, optimizer), "direction" (forward, backward, step), "module" (the innermost running
module, for APIs), "optimizer" (the optimizer step record an API call is part of), "node" (the
autograd node, for backward aten ops),
"inputs" and "outputs": lists of argument summaries (see _summary.py) labelled "args[0]", "weight",
"output", "output[1]", "grad_output[0]".
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from typing import Any, Iterable, Iterator, Optional, Sequence

import torch

from ._files import make_dir, write_file
from ._summary import Sampling, sample, summarize, tensor_summary

__all__ = ["MODES", "DumpWriter", "busy", "quiet"]


def _write_entry_per_line(obj: dict, f) -> None:
    """JSON with one line per record (or stack): grep and diff find a record on its line, and the file
    is under half the size of indented JSON, which matters for statistics dumps of every step."""
    f.write("{")
    for i, (key, value) in enumerate(obj.items()):
        f.write(",\n" if i else "\n")
        f.write(json.dumps(key) + ": ")
        if isinstance(value, dict) and value:
            f.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items()) + "\n}")
        elif isinstance(value, list) and value:
            f.write("[\n" + ",\n".join(" " + json.dumps(v) for v in value) + "\n]")
        else:
            f.write(json.dumps(value))
    f.write("\n}\n")

logger = logging.getLogger("torch_devx.tools.dump")

MODES = ("stats", "sample", "full", "stack")
FORMAT_VERSION = 1

_local = threading.local()


def busy() -> bool:
    """True while this thread runs a dump's own torch calls (statistics, hooks): they are not recorded."""
    return getattr(_local, "busy", False)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Mark the torch calls made inside as the dump's own (see busy())."""
    before = busy()
    _local.busy = True
    try:
        yield
    finally:
        _local.busy = before


class DumpWriter:
    def __init__(self, out_dir: str, mode: str = "stats", apis: Optional[Sequence[str]] = None,
                 range: Optional[tuple[str, str]] = None, steps: Optional[Iterable[int]] = None,
                 sampling: Sampling = Sampling(), meta: Optional[dict[str, Any]] = None) -> None:
        if mode not in MODES:
            raise ValueError(f"dump mode {mode!r} is not one of {', '.join(MODES)}")
        if range is not None and (len(range) != 2 or not all(isinstance(r, str) and r for r in range)):
            raise ValueError(f"range must be two record names (start, end), got {range!r}")
        self.out_dir = os.path.abspath(out_dir)
        self.mode = mode
        self.sampling = sampling
        self._apis = [re.compile(p) for p in apis] if apis else None
        self._range = range
        self._range_state = "before" if range else "inside"
        self.steps = None if steps is None else frozenset(int(s) for s in steps)
        self.meta = dict(meta or {})
        self.step = 0
        self._lock = threading.Lock()
        self._records: dict[str, dict[str, Any]] = {}
        self._stacks: dict[tuple[str, ...], int] = {}
        self._record_stack: dict[str, int] = {}
        self._counts: dict[tuple[str, str], int] = {}
        self.written: list[str] = []   # step folders written so far

    # -- selection --------------------------------------------------------------------------------
    @property
    def selected(self) -> bool:
        """Whether the current step is dumped (the range may still exclude records)."""
        return (self.steps is None or self.step in self.steps) and self._range_state != "after"

    def _in_range(self, name: str) -> bool:
        if self._range is None:
            return True
        def hit(pattern: str) -> bool:
            return name == pattern or name.rsplit(".", 1)[0] == pattern
        if self._range_state == "before" and hit(self._range[0]):
            self._range_state = "inside"
        if self._range_state != "inside":
            return False
        if hit(self._range[1]):
            self._range_state = "after"
        return True

    def wants(self, api: str) -> bool:
        return self.selected and (self._apis is None or any(p.search(api) for p in self._apis))

    # -- records ----------------------------------------------------------------------------------
    def next_index(self, api: str, direction: str) -> int:
        key = (api, direction)
        with self._lock:
            n = self._counts.get(key, 0)
            self._counts[key] = n + 1
        return n

    def begin(self, api: str, direction: str, kind: str, inputs: Iterable[tuple[str, Any]],
              stack: Sequence[str], index: Optional[int] = None, **extra: Any) -> Optional[str]:
        """Start a record, summarising `inputs` ((label, value) pairs) now, before the call can change
        them. Returns the record's name, or None when the scope leaves it out."""
        if not self.wants(api):
            return None
        if index is None:
            index = self.next_index(api, direction)
        name = f"{api}.{index}.{direction}"
        if not self._in_range(name):
            return None
        record: dict[str, Any] = {"api": api, "kind": kind, "direction": direction, "index": index}
        record.update({k: v for k, v in extra.items() if v})
        record["inputs"] = self._summaries(name, "input", inputs)
        record["outputs"] = []
        with self._lock:
            self._records[name] = record
            key = tuple(stack)
            self._record_stack[name] = self._stacks.setdefault(key, len(self._stacks))
        return name

    def has(self, name: str) -> bool:
        return name in self._records

    def end(self, name: str, outputs: Iterable[tuple[str, Any]]) -> None:
        self.add(name, "output", outputs)

    def add(self, name: str, io: str, values: Iterable[tuple[str, Any]]) -> None:
        """Append summaries of more values to a record's inputs (io="input") or outputs ("output")."""
        record = self._records.get(name)
        if record is not None:
            entries = record[io + "s"]
            entries.extend(self._summaries(name, io, values, start=len(entries)))

    def fail(self, name: str, error: BaseException) -> None:
        record = self._records.get(name)
        if record is not None:
            record["error"] = f"{type(error).__name__}: {error}"

    def _summaries(self, name: str, io: str, values: Iterable[tuple[str, Any]], start: int = 0) -> list[dict]:
        if self.mode == "stack":
            return []
        out: list[dict[str, Any]] = []
        counter = [start]

        def on_tensor(label: str, t: torch.Tensor) -> dict[str, Any]:
            entry = {"name": label, **tensor_summary(t)}
            if self.mode in ("sample", "full") and t.numel() and t.layout == torch.strided:
                entry["data"] = self._save(f"{name}.{io}.{counter[0]}", t)
                if self.mode == "sample":
                    entry["sampling"] = [self.sampling.head, self.sampling.tail, self.sampling.every]
            counter[0] += 1
            return entry

        with quiet(), torch.no_grad():
            for label, value in values:
                summarize(value, label, on_tensor, out)
        return out

    def _save(self, stem: str, t: torch.Tensor) -> str:
        values = sample(t, self.sampling) if self.mode == "sample" else t.detach()
        make_dir(self._step_dir())
        make_dir(os.path.join(self._step_dir(), "data"))
        rel = f"data/{stem}.pt"
        with write_file(os.path.join(self._step_dir(), rel), "wb") as f:
            # A fresh compact copy: saving a view would write its whole storage.
            torch.save(values.cpu().clone(), f)
        return rel

    # -- steps and files --------------------------------------------------------------------------
    def _step_dir(self) -> str:
        return os.path.join(self.out_dir, f"step{self.step}")

    def flush(self) -> Optional[str]:
        """Write the current step's dump.json and stack.json (if it recorded anything); returns the folder."""
        with self._lock:
            records, stacks, record_stack = self._records, self._stacks, self._record_stack
            self._records, self._stacks, self._record_stack, self._counts = {}, {}, {}, {}
        if not records:
            return None
        folder = self._step_dir()
        make_dir(folder)
        meta = {"format": FORMAT_VERSION, "step": self.step, "mode": self.mode, "torch": torch.__version__}
        if self.mode == "sample":
            meta["sampling"] = [self.sampling.head, self.sampling.tail, self.sampling.every]
        meta.update(self.meta)
        with write_file(os.path.join(folder, "dump.json")) as f:
            _write_entry_per_line({"meta": meta, "records": records}, f)
        with write_file(os.path.join(folder, "stack.json")) as f:
            _write_entry_per_line({"stacks": [list(s) for s in stacks], "records": record_stack}, f)
        self.written.append(folder)
        logger.info("dumped %d records of step %d to %s", len(records), self.step, folder)
        return folder

    def next_step(self) -> None:
        self.flush()
        self.step += 1
        if self._range is not None:
            self._range_state = "before"
