"""Reading dump folders written by Dumper or Tracer (format in _dump_writer.py)."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

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
        path = os.path.join(self.folder, rel)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"dump {self.folder}: data file {rel} named in dump.json is missing")
        return torch.load(path, weights_only=True)


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
    stacks: dict[str, list[str]] = {}
    stack_path = os.path.join(folder, "stack.json")
    if os.path.isfile(stack_path):
        with open(stack_path) as f:
            stack_file = json.load(f)
        table = stack_file.get("stacks", [])
        stacks = {name: table[i] for name, i in stack_file.get("records", {}).items() if 0 <= i < len(table)}
    return Dump(folder, content.get("meta", {}), content["records"], stacks)
