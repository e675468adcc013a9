"""Command line: `python -m torch_devx COMMAND`.

    coverage [--all]                          which ops run natively on each vendor
    settings                                  every setting: its value, where it came from, what it does
    dump [--out DIR] [--mode M] [--level L] [--steps N,N...] [--range START END] script.py [args...]
                                              run a script with every API call dumped; each optimizer.step()
                                              ends a step (steps count from 0; a script without an
                                              optimizer is step 0)
    compare DUMP_A DUMP_B [--out DIR] [--step N] [--atol A]
                                              compare two dumps: summary, compare.csv/.html, ranking.csv
    parse DUMP RECORD [--step N]              one record's stack and statistics
    divergence [--out DIR] [--keep-going] [--ops REGEX,REGEX...] [--rtol R] [--atol A] script.py [args...]
                                              run a script with every devx op checked against the CPU;
                                              exit status 1 when an op diverged, 2 when the script failed
    vendor-test [--ops REGEX] [--opinfos REGEX] [--dtypes float32,float64,...] [--samples N] [--jobs J]
                [--timeout S] [--json PATH] [--all]
                                              the vendor's conformance kit: each of its kernels on OpInfo
                                              samples against the CPU (in child processes): pass, mismatch,
                                              error, crash, declined or untested; exit status 1 on a
                                              mismatch, error or crash
    pytorch-tests --source CHECKOUT [--files F[:KEYWORD],...] [--as privateuse1,cuda] [--expectations YAML]
                  [-k EXPR] [--timeout S] [--out DIR] [--json PATH]
                                              PyTorch's device-generic test files run for devx, as the
                                              PrivateUse1 device and as CUDA under mocking; a table of
                                              counts; exit status 1 on a failure, error or timeout
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any, Callable


# Exit statuses of `divergence` (and `vendor-test`): 1 is a finding, 2 means the check could not be made.
EXIT_DIVERGED = 1
EXIT_SCRIPT_FAILED = 2


def comma_list(item_type: Callable[[str], Any]) -> Callable[[str], list]:
    """An argparse type for "a,b,c": the items, each converted by `item_type`. With action="extend"
    the option may also be repeated. One value per option, so a list never swallows the script."""
    def parse(text: str) -> list:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        try:
            return [item_type(item) for item in items]
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"invalid item in {text!r}: {e}") from None
    return parse


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
    from torch_devx import _vendors

    for other in sorted(_vendors.available()):
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


def settings() -> None:
    import torch_devx

    rows = torch_devx.diagnostics.settings()
    width = max(len(name) for name, *_ in rows)
    for name, value, source, help_text in rows:
        print(f"{name:<{width}}  {value or '(empty)':<16} {source:<11}  {help_text}")


def effects() -> None:
    import torch._dynamo  # noqa: F401  (what devx registers with as dynamo is imported is listed too)
    import torch_devx

    rows = torch_devx.effects()
    for undoable, heading in ((True, "undone by torch_devx.uninstall()"), (False, "permanent")):
        print(f"{heading}:")
        for group, what, can_undo, why in rows:
            if can_undo == undoable:
                print(f"  [{group}] {what}" + (f"\n      why: {why}" if why else ""))


def dump(args: argparse.Namespace) -> int:
    import torch_devx  # noqa: F401  (devx exists before the script runs)
    from torch_devx.tools import Dumper
    from torch_devx.tools._common import run_as_main

    dumper = Dumper(args.out, mode=args.mode, level=args.level, backward=not args.no_backward, apis=args.apis,
                    steps=args.steps, range=tuple(args.range) if args.range else None, optimizer_steps=True)
    with dumper:
        run_as_main(args.script, args.script_args)
    print(f"dump written to {', '.join(dumper.writer.written) or '(nothing recorded)'}")
    return 0


def compare(args: argparse.Namespace) -> int:
    from torch_devx.tools import compare as compare_dumps

    result = compare_dumps(args.dump_a, args.dump_b, out_dir=args.out, step=args.step, atol=args.atol)
    print(result.summary())
    for kind, path in result.files.items():
        print(f"{kind}: {path}")
    return 0


def parse(args: argparse.Namespace) -> int:
    from torch_devx.tools import parse as parse_record

    try:
        parse_record(args.dump, args.record, step=args.step)
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        return 2
    return 0


def float_tolerances(rtol: float | None, atol: float | None) -> dict | None:
    """--rtol/--atol as the finder's `tolerances`: one or both replace every floating dtype's default."""
    if rtol is None and atol is None:
        return None
    import torch
    from torch_devx.tools.divergence import DEFAULT_TOLERANCES, OTHER_TOLERANCE

    for name, value in (("--rtol", rtol), ("--atol", atol)):
        if value is not None and not value >= 0:
            raise ValueError(f"{name} must be a number >= 0, got {value}")
    dtypes = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)
    table = {}
    for dtype in dtypes:
        default_rtol, default_atol = DEFAULT_TOLERANCES.get(dtype, OTHER_TOLERANCE)
        table[dtype] = (default_rtol if rtol is None else rtol, default_atol if atol is None else atol)
    return table


def divergence(args: argparse.Namespace) -> int:
    import torch_devx  # noqa: F401
    from torch_devx.tools import run_script

    finder = run_script(args.script, args.script_args, raise_script_errors=False, out_dir=args.out,
                        stop=not args.keep_going, ops=args.ops, tolerances=float_tolerances(args.rtol, args.atol),
                        log=False)
    print(f"divergence finder: {finder.checked} devx ops matched the CPU"
          + (f", {sum(finder.unchecked.values())} could not be replayed on the CPU "
             f"({', '.join(sorted(finder.unchecked))})" if finder.unchecked else ""))
    for d in finder.divergences.values():
        print(d.describe().replace("first divergence", "divergence", 1) if d is not finder.first else d.describe())
    if finder.script_error is not None:
        print(finder.script_traceback, end="", file=sys.stderr)
        print(f"python -m torch_devx divergence: the script failed ({type(finder.script_error).__name__}"
              + (" after the divergence above)" if finder.first is not None else "); its ops up to the failure "
                 "matched the CPU"), file=sys.stderr)
    if finder.first is not None:
        return EXIT_DIVERGED
    if finder.module_divergence is not None:
        print(finder.module_divergence.describe())
        return EXIT_DIVERGED
    if finder.script_error is not None:
        return EXIT_SCRIPT_FAILED
    print("no op diverged from the CPU")
    return 0


def vendor_test(args: argparse.Namespace) -> int:
    from torch_devx.tools import vendor_test as kit

    try:
        report = kit.run_kit(ops=args.ops, opinfos=args.opinfos, dtypes=args.dtypes or ",".join(kit.DEFAULT_DTYPES),
                             samples=args.samples, jobs=args.jobs, timeout=args.timeout, all_opinfos=args.all)
    except RuntimeError as e:  # a child that cannot even start: the environment, not a kernel
        print(f"python -m torch_devx vendor-test: {e}", file=sys.stderr)
        return 2
    print(kit.format_report(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"report: {args.json}")
    return report["exit_status"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m torch_devx")
    sub = parser.add_subparsers(dest="command", required=True)
    cov = sub.add_parser("coverage", help="which ops run natively on each vendor")
    cov.add_argument("--all", action="store_true", help="list every op, not only those that fall back")
    sub.add_parser("settings", help="every setting of torch_devx: its value, where it came from (default, "
                                    "environment) and what it does")
    sub.add_parser("effects", help="what `import torch_devx` changes in the process outside the package, "
                                   "and which of those torch_devx.uninstall() undoes")

    dmp = sub.add_parser("dump", help="run a script, dumping every API call's inputs and outputs",
                         description="Run SCRIPT as __main__ with every API call's inputs and outputs recorded "
                                     "under --out; each optimizer.step() ends a step (steps count from 0).")
    dmp.add_argument("--out", default="dump", help="dump folder (default: dump)")
    dmp.add_argument("--mode", default="stats", choices=["stats", "sample", "full", "stack"],
                     help="what each record keeps: stats (dtype, shape, max, min, mean, norm, nan and inf counts per "
                          "tensor; the default), sample (stats and some elements saved), full (stats and every "
                          "tensor saved), stack (names and the user's call stacks only)")
    dmp.add_argument("--level", default="api", choices=["api", "module", "mix", "aten"],
                     help="what is recorded: api (torch functions and Tensor methods; the default), module "
                          "(nn.Module forward/backward), mix (both), aten (every aten op the device runs)")
    dmp.add_argument("--apis", type=comma_list(str), action="extend", metavar="REGEX[,REGEX...]",
                     help="only APIs whose name matches one of these patterns (comma-separated; the option may "
                          "be repeated)")
    dmp.add_argument("--no-backward", action="store_true", help="leave the backward pass out")
    dmp.add_argument("--steps", type=comma_list(int), action="extend", metavar="N[,N...]",
                     help="dump only these steps, e.g. --steps 0,1 (a step ends at each optimizer.step(); the "
                          "first is 0)")
    dmp.add_argument("--range", nargs=2, metavar=("START", "END"),
                     help='dump only the records from START to END in each step ("torch.tanh.0", '
                          '"Module.fc1.Linear.0.forward")')
    dmp.add_argument("script", help="the Python script to run")
    dmp.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")

    cmp_ = sub.add_parser("compare", help="compare two dumps (A: the device run, B: the reference)")
    cmp_.add_argument("dump_a", help="the dump folder of the run under test (usually devx)")
    cmp_.add_argument("dump_b", help="the dump folder of the reference run (usually the CPU or CUDA)")
    cmp_.add_argument("--out", help="folder for compare.csv, compare.html and ranking.csv")
    cmp_.add_argument("--step", type=int, help="step to compare (default: the first step both dumps hold)")
    cmp_.add_argument("--atol", type=float, metavar="A",
                      help="absolute floor of every floating verdict: elements within A of the reference agree "
                           "whatever their relative error, so that a gradient that is mathematically zero "
                           "(rounding noise on both sides) is not an error (default per dtype: float32, "
                           "float16 and bfloat16 1e-5, float64 1e-7; each row of compare.csv gives the one used)")

    prs = sub.add_parser("parse", help="show one record of a dump: its stack and statistics")
    prs.add_argument("dump", help="the dump folder")
    prs.add_argument("record", help='"torch.tanh.0.forward", or "torch.tanh.0" for both directions')
    prs.add_argument("--step", type=int, help="the step the record is in (default: the first step)")

    div = sub.add_parser("divergence", help="run a script with every devx op also run on the CPU; "
                                            "report the first op that differs, with a repro",
                         description="Run SCRIPT with every devx op also run on the CPU and compared. Exit "
                                     "status: 0 no op diverged, 1 an op diverged (a repro is written under --out) or "
                                     "no op did but a module's output differs from the CPU's shadow run, "
                                     "2 the script failed before any op diverged, or bad options.")
    div.add_argument("--out", default="divergence", help="repro folder (default: divergence)")
    div.add_argument("--keep-going", action="store_true", help="check the whole run; list every op that diverged")
    div.add_argument("--ops", type=comma_list(str), action="extend", metavar="REGEX[,REGEX...]",
                     help="check only ops whose name matches one of these patterns (comma-separated; the option "
                          "may be repeated)")
    div.add_argument("--rtol", type=float, help="relative tolerance for every floating dtype "
                                                "(default per dtype: float32 1.3e-6, float16 1e-3, bfloat16 1.6e-2)")
    div.add_argument("--atol", type=float, help="absolute tolerance for every floating dtype (default 1e-5)")
    div.add_argument("script", help="the Python script to run")
    div.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")

    vt = sub.add_parser("vendor-test", help="the vendor's conformance kit: each of its kernels on OpInfo samples "
                                            "against the CPU")
    vt.add_argument("--ops", metavar="REGEX", help="only kernels whose name (\"add.out\") matches")
    vt.add_argument("--opinfos", metavar="REGEX", help="only OpInfos whose full name (name.variant) matches")
    vt.add_argument("--dtypes", metavar="LIST",
                    help="comma-separated dtypes, or 'all' (the kernel ABI's 12); default: float32, float64, "
                         "float16, bfloat16, complex64, int64, int32, bool")
    vt.add_argument("--samples", type=int, default=3, metavar="N", help="samples per OpInfo and dtype (default 3)")
    vt.add_argument("--jobs", type=int, default=2, metavar="J", help="child processes at once (default 2)")
    vt.add_argument("--timeout", type=float, default=300.0, metavar="S",
                    help="seconds an OpInfo may take before its child is killed as hung (default 300)")
    vt.add_argument("--json", metavar="PATH", help="write the report to PATH")
    vt.add_argument("--all", action="store_true",
                    help="every applicable OpInfo, not only those named like the ops the kernels serve")

    pt = sub.add_parser("pytorch-tests", help="PyTorch's device-generic test files, run for devx",
                        description="Run test files of a PyTorch source checkout (of the installed torch's version) "
                                    "for devx, each in its own pytest child. Exit status: 0 all ran and passed, 1 a "
                                    "failure, error or timeout, 2 bad options.")
    pt.add_argument("--source", required=True, metavar="CHECKOUT", help="the PyTorch source checkout (holds test/)")
    pt.add_argument("--files", type=comma_list(str), action="extend", metavar="FILE[:KEYWORD][,...]",
                    help="test files under test/, each optionally with a -k keyword (default: "
                         "test_ops.py:TestCommon, test_view_ops.py, test_indexing.py, test_binary_ufuncs.py, "
                         "test_reductions.py)")
    pt.add_argument("--as", dest="modes", type=comma_list(str), action="extend", metavar="MODE[,MODE]",
                    help="privateuse1 (the devx device type, mocking off) and/or cuda (CUDA-instantiated tests "
                         "under mocking); default both")
    pt.add_argument("--expectations", metavar="YAML",
                    help="the vendor's skips (with reasons) and tolerances: a mapping with 'skip' and "
                         "'tolerance' lists of {test: REGEX, reason: ...} / {test: REGEX, atol: A, rtol: R}")
    pt.add_argument("-k", dest="keyword", metavar="EXPR", help="a pytest -k expression applied to every file")
    pt.add_argument("--timeout", type=float, default=3600.0, metavar="S",
                    help="seconds one file may run before its child is killed (default 3600)")
    pt.add_argument("--out", default="pytorch-tests", metavar="DIR", help="folder for the JUnit reports")
    pt.add_argument("--json", metavar="PATH", help="write every file's counts and failures to PATH")

    return parser


def pytorch_tests(args: argparse.Namespace) -> int:
    from torch_devx.tools import pytorch_tests as runner

    return runner.main(args.source, args.files, args.modes, args.expectations, args.timeout, args.out,
                       args.keyword, args.json)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "coverage":
        coverage(args.all)
        return 0
    if args.command == "settings":
        settings()
        return 0
    if args.command == "effects":
        effects()
        return 0
    command = {"dump": dump, "compare": compare, "parse": parse, "divergence": divergence,
               "vendor-test": vendor_test, "pytorch-tests": pytorch_tests}[args.command]
    try:
        return command(args)
    except (FileNotFoundError, ValueError) as e:  # bad paths or options: a message, not a traceback
        print(f"python -m torch_devx {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
