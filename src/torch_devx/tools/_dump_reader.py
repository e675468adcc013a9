"""Reading dump folders written by Dumper or Tracer (format in _dump_writer.py)."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ._files import inside

__all__ = ["Dump", "load_dump", "dump_steps"]


@dataclass
class Dump:
    folder: str                                   # the step folder holding dump.json
    meta: dict[str, Any]
    records: dict[str, dict[str, Any]]            # in call order
    stacks: dict[str, list[str]] = field(default_factory=dict)

    def stack(self, name: str) -> list[str]:
        return self.stacks.get(name, [])

    def data(self, entry: dict[str, Any]) -> Optional[torch.Tensor]:
        """The saved values of a tensor entry (sampled or full), or None in statistics mode."""
        rel = entry.get("data")
        if not rel:
            return None
        path = inside(self.folder, rel, f"{self.folder}/dump.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"dump {self.folder}: data file {rel} named in dump.json is missing")
        try:
            data = torch.load(path, weights_only=True)
        except Exception as e:  # truncated or foreign files fail in many ways inside torch.load
            raise ValueError(f"{path} (named in {self.folder}/dump.json) is not a saved tensor: {e}") from None
        if not isinstance(data, torch.Tensor):
            raise ValueError(f"{path} (named in {self.folder}/dump.json) holds a {type(data).__name__}, not a tensor")
        return data


def dump_steps(path: str) -> list[int]:
    """The steps present under a dump's root folder, ascending."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"dump folder {path!r} does not exist")
    steps = []
    for name in os.listdir(path):
        m = re.fullmatch(r"step(\d+)", name)
        if m and os.path.isfile(os.path.join(path, name, "dump.json")):
            steps.append(int(m.group(1)))
    return sorted(steps)


def load_dump(path: str, step: Optional[int] = None) -> Dump:
    """A dump step: `path` is a step folder (holding dump.json) or a dump's root folder, whose step
    `step` (default: the first) is read."""
    if os.path.isfile(os.path.join(path, "dump.json")):
        if step is not None and os.path.basename(os.path.normpath(path)) != f"step{step}":
            raise ValueError(f"{path!r} is a step folder; step={step} cannot be chosen in it")
        folder = path
    else:
        steps = dump_steps(path)
        if not steps:
            raise FileNotFoundError(f"{path!r} holds neither dump.json nor step*/dump.json: not a dump folder")
        if step is None:
            step = steps[0]
        elif step not in steps:
            raise ValueError(f"dump {path!r} has no step {step} (it has {steps})")
        folder = os.path.join(path, f"step{step}")
    try:
        with open(os.path.join(folder, "dump.json")) as f:
            content = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{folder}/dump.json is not valid JSON: {e}") from None
    if not isinstance(content, dict) or "records" not in content:
        raise ValueError(f"{folder}/dump.json has no 'records': not written by torch_devx's dump tools")
    _check_content(content, f"{folder}/dump.json")
    stacks: dict[str, list[str]] = {}
    stack_path = os.path.join(folder, "stack.json")
    if os.path.isfile(stack_path):
        try:
            with open(stack_path) as f:
                stack_file = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{stack_path} is not valid JSON: {e}") from None
        table = stack_file.get("stacks") if isinstance(stack_file, dict) else None
        index = stack_file.get("records") if isinstance(stack_file, dict) else None
        if not isinstance(table, list) or not isinstance(index, dict):
            raise ValueError(f"{stack_path} has no 'stacks' list and 'records' table: not written by torch_devx")
        stacks = {name: table[i] for name, i in index.items() if isinstance(i, int) and 0 <= i < len(table)}
    return Dump(folder, content.get("meta", {}), content["records"], stacks)


def _check_content(content: dict[str, Any], where: str) -> None:
    """Raises a ValueError naming `where` and the first thing compare could not read."""
    if not isinstance(content.get("meta", {}), dict):
        raise ValueError(f"{where}: 'meta' is not an object")
    records = content["records"]
    if not isinstance(records, dict):
        raise ValueError(f"{where}: 'records' is not an object of named records")
    for name, record in records.items():
        if not isinstance(record, dict):
            raise ValueError(f"{where}: record {name!r} is not an object")
        for key in ("api", "kind", "direction"):
            if not isinstance(record.get(key, ""), str):
                raise ValueError(f"{where}: record {name!r}: {key!r} is not a string")
        for io in ("inputs", "outputs"):
            entries = record.get(io, [])
            if not isinstance(entries, list):
                raise ValueError(f"{where}: record {name!r}: {io!r} is not a list")
            for i, entry in enumerate(entries):
                _check_entry(entry, f"{where}: record {name!r}, {io}[{i}]")


def _check_entry(entry: Any, where: str) -> None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ValueError(f"{where} is not an argument summary with a 'name'")
    if entry.get("type") != "tensor":
        return
    if not isinstance(entry.get("dtype"), str):
        raise ValueError(f"{where}: a tensor without a dtype")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                              for n in shape):
        raise ValueError(f"{where}: shape {shape!r} is not a list of sizes")
    for key in ("max", "min", "mean", "norm", "nan", "inf"):
        value = entry.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{where}: {key} {value!r} is not a number")
    data = entry.get("data")
    if data is not None and not isinstance(data, str):
        raise ValueError(f"{where}: data {data!r} is not a file name")
    sampling = entry.get("sampling")
    if sampling is not None and not isinstance(sampling, list):
        raise ValueError(f"{where}: sampling {sampling!r} is not a list")
