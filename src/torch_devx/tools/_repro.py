"""Repro folders of the divergence finder: inputs.pt plus a generated pytest file that replays the op.

inputs.pt holds {"op": "aten::mul.Tensor", "leaves": [...], "spec": pytree spec (JSON) of (args,
kwargs), "devices": {leaf index: "devx:0"}}: the op's arguments flattened, on the CPU, with dtypes,
devices, layouts and memory formats written as {"kind": ..., "value": ...} (torch.save cannot pickle
memory formats). Its test file is named after the folder (repro_test_name). `load_case` rebuilds
(args, kwargs) for the CPU or, moving the leaves listed in "devices" back, for devx; the generated
test uses it.
"""
from __future__ import annotations

import os
import re
import textwrap
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten, treespec_dumps, treespec_loads

__all__ = ["load_case", "repro_test_name", "save_repro"]

_ENCODED = {torch.dtype: "dtype", torch.device: "device", torch.layout: "layout", torch.memory_format: "memory_format"}


def _encode(x: Any) -> Any:
    kind = _ENCODED.get(type(x))
    if kind is not None:
        return {"kind": kind, "value": str(x)}
    return x


def _decode(x: Any) -> Any:
    if isinstance(x, dict) and set(x) == {"kind", "value"}:
        if x["kind"] == "device":
            return torch.device(x["value"])
        return getattr(torch, x["value"].replace("torch.", ""))
    return x


def load_case(path: str, device: str = "cpu") -> tuple[Any, tuple, dict]:
    """(op, args, kwargs) of a saved case; device="devx" puts the arguments that were on devx back there."""
    case = torch.load(path, weights_only=True)
    ns, rest = case["op"].split("::")
    base, _, overload = rest.partition(".")
    op = getattr(getattr(getattr(torch.ops, ns), base), overload or "default")
    leaves = [_decode(x) for x in case["leaves"]]
    if device != "cpu":
        for i, original in case["devices"].items():
            leaf = leaves[int(i)]
            if isinstance(leaf, torch.Tensor):
                leaves[int(i)] = leaf.to(original)
            elif isinstance(leaf, torch.device):
                leaves[int(i)] = torch.device(original)
    args, kwargs = tree_unflatten(leaves, treespec_loads(case["spec"]))
    return op, args, kwargs


_TEMPLATE = '''\
r"""Repro of a divergence between devx and the CPU, written by torch_devx's divergence finder.

op:     {qualified} ({direction}{node})
module: {module}
line:   {location}
        {source}{forward}
found:  {detail}

Replays the op on the saved inputs (inputs.pt, as they were before the op ran) on devx and on the
CPU and asserts the results agree: it fails while the devx kernel is wrong.
Run: python -m pytest {test_path}
"""
import os

import torch
import torch_devx  # noqa: F401  (registers the devx device)
from torch.utils._pytree import tree_flatten
from torch_devx.tools._repro import load_case

CASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inputs.pt")
TOLERANCES = {tolerances}  # dtype name -> (rtol, atol)
WRITTEN = {written}  # (position, name) of the arguments the op writes


def _results(op, args, kwargs):
    out = op(*args, **kwargs)
    written = [args[i] if i < len(args) else kwargs.get(name) for i, name in WRITTEN]
    return tree_flatten((out, written))[0]


def test_{test_name}_matches_cpu():
    op, cpu_args, cpu_kwargs = load_case(CASE, "cpu")
    _, devx_args, devx_kwargs = load_case(CASE, "devx")
    want = _results(op, cpu_args, cpu_kwargs)
    got = _results(op, devx_args, devx_kwargs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if not isinstance(w, torch.Tensor):
            continue
        rtol, atol = TOLERANCES.get(str(w.dtype).replace("torch.", ""), (0.0, 0.0))
        torch.testing.assert_close(g.cpu(), w, rtol=rtol, atol=atol, equal_nan=True)
'''


def repro_test_name(folder: str) -> str:
    """The repro test file of a repro folder: "test_repro_00_gelu.py" for folder ".../00_gelu". Each file
    name is unique within a finder's output folder, so `pytest OUT` collects every repro (pytest imports
    test files of folders without __init__.py by their base name: two "test_repro.py" would clash)."""
    stem = re.sub(r"[^A-Za-z0-9_]", "_", os.path.basename(os.path.normpath(folder)))
    return f"test_repro_{stem}.py"


def save_repro(folder: str, func: Any, inputs: tuple, devices: dict[int, str],
               tolerances: dict[torch.dtype, tuple[float, float]], divergence: Any) -> str:
    """Write inputs.pt and the test file (repro_test_name) for op `func` with CPU arguments `inputs`
    ((args, kwargs)); `devices` maps flattened leaf indices to the devx device they were on. Returns
    the test file's path."""
    os.makedirs(folder, exist_ok=True)
    leaves, spec = tree_flatten(inputs)
    qualified = f"{func._schema.name}" + (f".{func._overloadname}" if func._overloadname != "default" else "")
    torch.save({"op": qualified, "leaves": [_encode(x) for x in leaves], "spec": treespec_dumps(spec),
                "devices": {str(i): d for i, d in devices.items()}}, os.path.join(folder, "inputs.pt"))
    written = [(i, a.name) for i, a in enumerate(func._schema.arguments)
               if a.alias_info is not None and a.alias_info.is_write]
    float_tolerances = {str(dt).replace("torch.", ""): tol for dt, tol in tolerances.items()}
    for dt in (torch.float64, torch.complex128):
        float_tolerances.setdefault(str(dt).replace("torch.", ""), (1e-7, 1e-7))
    test_path = os.path.join(folder, repro_test_name(folder))
    def clean(text: str) -> str:  # safe inside the generated docstring
        return text.replace('""' + '"', "''" + "'")

    text = _TEMPLATE.format(
        qualified=qualified, direction=divergence.direction,
        node=f", autograd node {divergence.node}" if divergence.node else "",
        module=clean(divergence.module or "-"), location=clean(divergence.location or "-"),
        source=clean(divergence.source), detail=clean(divergence.detail), test_path=test_path,
        forward=clean(f"\nbackward of the call at {divergence.forward_location}\n        {divergence.forward_source}")
        if divergence.forward_location else "",
        tolerances=repr(float_tolerances), written=repr(written),
        test_name="".join(c if c.isalnum() else "_" for c in qualified.split("::")[-1]))
    with open(test_path, "w") as f:
        f.write(textwrap.dedent(text))
    return test_path
