"""Summaries of API arguments for dumps: tensor statistics, sampled or full data, plain values.

A tensor becomes a dict {"type": "tensor", dtype, shape, device, requires_grad, max, min, mean, norm,
nan, inf}: the six numbers are computed on the tensor's own device and fetched in one transfer (one
host sync per tensor). Complex tensors are summarised by their absolute values, bools as 0/1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

__all__ = ["Sampling", "STAT_KEYS", "sample", "summarize", "tensor_summary"]

STAT_KEYS = ("max", "min", "mean", "norm", "nan", "inf")
_MAX_SEQUENCE = 64  # longer lists of plain values are cut (their length is kept)


@dataclass(frozen=True)
class Sampling:
    """Which elements of a flattened tensor a "sample" dump keeps: the first `head`, the last
    `tail`, and every `every`-th element in between."""
    head: int = 64
    tail: int = 64
    every: int = 1024

    def __post_init__(self) -> None:
        if self.head < 0 or self.tail < 0 or self.every < 1:
            raise ValueError(f"sampling needs head >= 0, tail >= 0 and every >= 1, got {self}")


def sample(t: torch.Tensor, how: Sampling) -> torch.Tensor:
    """The sampled elements of `t` (1-D, on t's device); all of them when the tensor is small."""
    flat = t.detach().reshape(-1)
    n = flat.numel()
    if n <= how.head + how.tail:
        return flat
    return torch.cat([flat[:how.head], flat[how.head:n - how.tail:how.every], flat[n - how.tail:]])


def tensor_summary(t: torch.Tensor) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "tensor", "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
        "device": str(t.device), "requires_grad": bool(t.requires_grad),
    }
    if t.numel() == 0 or t.layout != torch.strided or t.is_meta:
        out.update(dict.fromkeys(STAT_KEYS))
        return out
    with torch.no_grad():
        v = t.detach()
        if v.is_complex():
            v = v.abs()
        wide = torch.float64 if v.dtype in (torch.float64, torch.int64, torch.int32) else torch.float32
        f = v.to(wide)
        values = torch.stack([f.max(), f.min(), f.mean(), torch.linalg.vector_norm(f),
                              torch.isnan(f).sum().to(wide), torch.isinf(f).sum().to(wide)]).cpu().tolist()
    for key, value in zip(STAT_KEYS[:4], values[:4]):
        # Statistics computed in float32 are written with the 9 digits that round-trip a float32, not the
        # 17 of the float64 that holds them: the same values, in a dump of every step half the size.
        out[key] = value if wide == torch.float64 else float(f"{value:.9g}")
    out["nan"], out["inf"] = int(values[4]), int(values[5])
    return out


def summarize(value: Any, label: str, on_tensor: Callable[[str, torch.Tensor], Optional[dict]],
              out: list[dict[str, Any]]) -> None:
    """Append one entry per tensor (flattening lists, tuples and dicts, labelled "args[0][1]", "out.values")
    and one per plain value to `out`. `on_tensor(label, t)` makes a tensor's entry."""
    if isinstance(value, torch.Tensor):
        entry = on_tensor(label, value)
        if entry is not None:
            out.append(entry)
    elif isinstance(value, (list, tuple)) and any(isinstance(v, (torch.Tensor, list, tuple, dict)) for v in value):
        for i, item in enumerate(value):
            summarize(item, f"{label}[{i}]", on_tensor, out)
    elif isinstance(value, dict):
        for key, item in value.items():
            summarize(item, f"{label}.{key}", on_tensor, out)
    elif isinstance(value, (bool, int, float, str)) or value is None:
        out.append({"name": label, "type": type(value).__name__, "value": value})
    elif isinstance(value, (list, tuple)):
        items = [v if isinstance(v, (bool, int, float, str)) or v is None else str(v)
                 for v in value[:_MAX_SEQUENCE]]
        out.append({"name": label, "type": type(value).__name__, "value": items, "length": len(value)})
    elif isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format, complex, slice)):
        out.append({"name": label, "type": type(value).__name__, "value": str(value)})
    else:
        out.append({"name": label, "type": type(value).__name__})
