"""Command line: `python -m torch_devx coverage [--all]`."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import Counter


def coverage(show_all: bool) -> None:
    import torch_devx

    table = torch_devx.diagnostics.coverage()
    counts = Counter(table.values())
    print(f"vendor {torch_devx.vendor}: {len(table)} aten ops — {counts['vendor']} vendor kernels, "
          f"{counts['aten']} ATen kernels on devx memory through generated wrappers, "
          f"{counts['aten-boxed']} through the boxed long-tail kernel, {counts['fallback']} CPU fallback")
    for op, source in sorted(table.items()):
        if show_all or source == "fallback":
            print(f"  {source:8s} {op}")
    # Other vendors can only be loaded in their own process.
    for other in ("cpu_sim", "cuda"):
        if other == torch_devx.vendor or os.environ.get("_DEVX_COVERAGE_CHILD"):
            continue
        env = dict(os.environ, DEVX_VENDOR=other, _DEVX_COVERAGE_CHILD="1")
        result = subprocess.run([sys.executable, "-m", "torch_devx", "coverage"] + (["--all"] if show_all else []),
                                env=env, capture_output=True, text=True)
        if result.returncode == 0:
            print(result.stdout, end="")
        else:
            reason = (result.stderr.strip().splitlines() or ["unknown error"])[-1]
            print(f"vendor {other}: not usable here ({reason})")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m torch_devx")
    sub = parser.add_subparsers(dest="command", required=True)
    cov = sub.add_parser("coverage", help="which ops run natively on each vendor")
    cov.add_argument("--all", action="store_true", help="list every op, not only those that fall back")
    args = parser.parse_args()
    if args.command == "coverage":
        coverage(args.all)


if __name__ == "__main__":
    main()
