"""Repro folders of the divergence finder: inputs.pt plus a generated pytest file that replays the op.

inputs.pt holds {"op": "aten::mul.Tensor", "leaves": [...], "spec": pytree spec (JSON) of (args,
kwargs), "devices": {leaf index: "devx:0"}}: the op's arguments flattened, on the CPU, with dtypes,
devices, layouts and memory formats written as {"kind": ..., "value": ...} (torch.save cannot pickle
memory formats). Its test file is named after the folder (repro_test_name). `load_case` rebuilds
(args, kwargs) for the CPU or, moving the leaves listed in "devices" back, for devx; the generated
test uses it.

An op whose devx kernel was a Python override (diagnostics.override_kernel) is replayed with that
override: the test file names its module, qualified name and the sys.path entry it was imported
from (override_source), and installs it while the op runs (replayed_override). An override that no
import can find again (a lambda, a local function, one defined in the script run as __main__) makes
the test fail with that reason: testing the built-in kernel instead would pass whatever the override
does.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import textwrap
from typing import Any, Callable, Iterator, Optional

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten, treespec_dumps, treespec_loads

from ._files import make_dir, write_file

__all__ = ["load_case", "override_source", "replayed_override", "repro_test_name", "save_repro"]

_ENCODED = {torch.dtype: "dtype", torch.device: "device", torch.layout: "layout", torch.memory_format: "memory_format"}


def _encode(x: Any) -> Any:
    kind = _ENCODED.get(type(x))
    if kind is not None:
        return {"kind": kind, "value": str(x)}
    return x


def _decode(x: Any, path: str) -> Any:
    if isinstance(x, dict) and set(x) == {"kind", "value"}:
        if x["kind"] == "device":
            return torch.device(x["value"])
        kind = next((t for t, k in _ENCODED.items() if k == x["kind"]), None)
        value = getattr(torch, str(x["value"]).replace("torch.", ""), None)
        if kind is None or not isinstance(value, kind):
            raise ValueError(f"{path}: {x!r} is not a dtype, device, layout or memory format")
        return value
    return x


_ATEN_OP = re.compile(r"aten::([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?")


def _aten_op(name: Any, path: str) -> Any:
    """The aten overload a case names ("aten::mul.Tensor"); a case chooses nothing else to run."""
    m = _ATEN_OP.fullmatch(name) if isinstance(name, str) else None
    if m is None:
        raise ValueError(f"{path}: op {name!r} is not an aten overload (aten::NAME[.OVERLOAD])")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{m.group(1)}", m.group(2) or "")
    except RuntimeError:
        raise ValueError(f"{path}: op {name!r} is not an aten overload of this torch") from None
    return getattr(getattr(torch.ops.aten, m.group(1)), m.group(2) or "default")


def load_case(path: str, device: str = "cpu") -> tuple[Any, tuple, dict]:
    """(op, args, kwargs) of a saved case; device="devx" puts the arguments that were on devx back there.
    The file is loaded as data only (weights_only) and may name only an aten overload."""
    case = torch.load(path, weights_only=True)
    if not isinstance(case, dict) or not {"op", "leaves", "spec", "devices"} <= set(case):
        raise ValueError(f"{path}: not a divergence repro case (op, leaves, spec, devices)")
    op = _aten_op(case["op"], path)
    leaves = [_decode(x, path) for x in case["leaves"]]
    if device != "cpu":
        for i, original in case["devices"].items():
            leaf = leaves[int(i)]
            if isinstance(leaf, torch.Tensor):
                leaves[int(i)] = leaf.to(original)
            elif isinstance(leaf, torch.device):
                leaves[int(i)] = torch.device(original)
    args, kwargs = tree_unflatten(leaves, treespec_loads(case["spec"]))
    return op, args, kwargs


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def override_source(fn: Callable[..., Any]) -> tuple[Optional[tuple[str, str, str]], str]:
    """((module, qualified name, sys.path entry), "") naming where an import finds `fn` again, or
    (None, why it cannot be found)."""
    module = getattr(fn, "__module__", None) or ""
    qualname = getattr(fn, "__qualname__", None) or ""
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    if "<lambda>" in qualname:
        return None, f"a lambda{where}"
    if "<locals>" in qualname:
        return None, f"the local function {qualname}{where}"
    if module == "__main__":
        return None, f"{qualname}, defined in the script run as __main__{where}"
    if not _DOTTED.fullmatch(module) or not _DOTTED.fullmatch(qualname):
        return None, f"{fn!r}, which has no importable module and name"
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is not fn:
        return None, f"{module}.{qualname}, which names another object now"
    path = getattr(sys.modules[module], "__file__", None) or ""
    root = os.path.dirname(os.path.abspath(path)) if path else ""
    for _ in range(module.count(".") + (os.path.basename(path) == "__init__.py")):
        root = os.path.dirname(root)
    return (module, qualname, root), ""


@contextlib.contextmanager
def replayed_override(op: str, source: tuple[str, str, str]) -> Iterator[None]:
    """Install the override named by `source` (override_source's) for `op` while the block runs;
    the override in place before is restored after."""
    from .. import diagnostics

    module, qualname, root = source
    if root and root not in sys.path:
        sys.path.insert(0, root)
    fn: Any = importlib.import_module(module)
    for part in qualname.split("."):
        fn = getattr(fn, part)
    before = diagnostics.kernel_override(op)
    diagnostics.override_kernel(op, fn)
    try:
        yield
    finally:
        diagnostics.override_kernel(op, before)


_TEMPLATE = '''\
r"""Repro of a divergence between devx and the CPU, written by torch_devx's divergence finder.

op:     {qualified} ({direction}{node})
module: {module}
line:   {location}
        {source}{forward}
found:  {detail}
kernel: {kernel}

Replays the op on the saved inputs (inputs.pt, as they were before the op ran) on devx, with the
kernel that ran there, and on the CPU, and asserts the results agree: it fails while the devx
kernel is wrong.
Run: python -m pytest {test_path}
"""
import contextlib
import os

import pytest
import torch
import torch_devx  # noqa: F401  (registers the devx device)
from torch.utils._pytree import tree_flatten
from torch_devx.tools._repro import load_case, replayed_override

CASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inputs.pt")
TOLERANCES = {tolerances}  # dtype name -> (rtol, atol)
WRITTEN = {written}  # (position, name) of the arguments the op writes
OP = {op_name!r}
# The Python override (diagnostics.override_kernel) that was the op's devx kernel: (module, qualified
# name, sys.path entry), imported while the op runs. These are literals the divergence finder wrote
# here from the function that ran, never read from inputs.pt (which stays data only); importing the
# module runs it, as importing it from the script did.
OVERRIDE = {override!r}
OVERRIDE_MISSING = {override_missing!r}  # why the override that ran cannot be imported, or ""


def _results(op, args, kwargs):
    out = op(*args, **kwargs)
    written = [args[i] if i < len(args) else kwargs.get(name) for i, name in WRITTEN]
    return tree_flatten((out, written))[0]


def test_{test_name}_matches_cpu():
    if OVERRIDE_MISSING:
        pytest.fail(OVERRIDE_MISSING, pytrace=False)
    op, cpu_args, cpu_kwargs = load_case(CASE, "cpu")
    _, devx_args, devx_kwargs = load_case(CASE, "devx")
    want = _results(op, cpu_args, cpu_kwargs)
    with replayed_override(OP, OVERRIDE) if OVERRIDE else contextlib.nullcontext():
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
               tolerances: dict[torch.dtype, tuple[float, float]], divergence: Any,
               override: Optional[Callable[..., Any]] = None) -> str:
    """Write inputs.pt and the test file (repro_test_name) for op `func` with CPU arguments `inputs`
    ((args, kwargs)); `devices` maps flattened leaf indices to the devx device they were on;
    `override` is the Python function that was the op's devx kernel, if one was. Returns the test
    file's path."""
    make_dir(folder)
    leaves, spec = tree_flatten(inputs)
    qualified = f"{func._schema.name}" + (f".{func._overloadname}" if func._overloadname != "default" else "")
    with write_file(os.path.join(folder, "inputs.pt"), "wb") as f:
        torch.save({"op": qualified, "leaves": [_encode(x) for x in leaves], "spec": treespec_dumps(spec),
                    "devices": {str(i): d for i, d in devices.items()}}, f)
    written = [(i, a.name) for i, a in enumerate(func._schema.arguments)
               if a.alias_info is not None and a.alias_info.is_write]
    float_tolerances = {str(dt).replace("torch.", ""): tol for dt, tol in tolerances.items()}
    for dt in (torch.float64, torch.complex128):
        float_tolerances.setdefault(str(dt).replace("torch.", ""), (1e-7, 1e-7))
    test_path = os.path.join(folder, repro_test_name(folder))
    def clean(text: str) -> str:  # safe inside the generated docstring
        return text.replace('""' + '"', "''" + "'")

    op_name = qualified.split("::")[-1]
    source, missing = override_source(override) if override is not None else (None, "")
    if missing:
        missing = (f"the devx kernel of {op_name} that diverged was a Python override, {missing}, which this "
                   "repro cannot import: replaying the built-in kernel instead would not test what ran. Define "
                   "the override at the top level of an importable module and run the finder again.")
    kernel = "the built-in devx kernel" if override is None else \
        (f"the Python override {source[0]}.{source[1]}" if source else "a Python override that cannot be imported")
    text = _TEMPLATE.format(
        qualified=qualified, direction=divergence.direction,
        node=f", autograd node {divergence.node}" if divergence.node else "",
        module=clean(divergence.module or "-"), location=clean(divergence.location or "-"),
        source=clean(divergence.source), detail=clean(divergence.detail), test_path=test_path,
        forward=clean(f"\nbackward of the call at {divergence.forward_location}\n        {divergence.forward_source}")
        if divergence.forward_location else "",
        tolerances=repr(float_tolerances), written=repr(written), op_name=op_name, override=source,
        override_missing=missing, kernel=clean(kernel),
        test_name="".join(c if c.isalnum() else "_" for c in qualified.split("::")[-1]))
    with write_file(test_path) as f:
        f.write(textwrap.dedent(text))
    return test_path
