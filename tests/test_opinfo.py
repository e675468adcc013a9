"""Every applicable op of PyTorch's OpInfo database against the CPU, through its OpInfo samples,
and the coverage bars of issue 4 (share of ops that run without touching the CPU fallback).

One test per OpInfo (name.variant): its first two float32 samples forward and backward (input
gradients under a fixed random cotangent) and its first two int64 samples forward run on the CPU
and on devx, and must agree (torch.testing.assert_close, NaN == NaN, the OpInfo's CPU tolerance
overrides). The check itself is torch_devx/tools/opinfo_check.py's, so this file and the coverage
report measure the same thing.

torch.testing._internal takes CUDA paths when torch.cuda.is_available() is True, which CUDA
mocking makes it; the rest of this process wants mocking on. So op_db is imported, and every
check runs, with mocking switched off for the duration (opinfo_check.cuda_mock_off).
"""
from __future__ import annotations

import copy

import pytest

from torch_devx.tools import opinfo_check as oc

SAMPLES_PER_OP = 2
# The coverage bars: issue 4 asks for at least these, measured on one sample per op and dtype.
NATIVE_BAR = 95.0
FORWARD_BAR = 99.0
BACKWARD_BAR = 98.0
# op_db of torch 2.13 has 702 OpInfos, 685 of them applicable here (dense, float32/int64): a
# much smaller count means op_db did not load as expected, not that coverage is good.
MIN_APPLICABLE = 600

OP_DB = oc.load_op_db()
OPS, NOT_APPLICABLE = oc.applicable_ops(OP_DB)
BY_NAME = {oc.full_name(op): op for op in OPS}


@pytest.fixture
def checks():
    with oc.devx_checks():
        yield


def _report(res: oc.OpResult) -> str:
    lines = [f"{res.name}: devx differs from the CPU"]
    lines += [f"  {e}" for e in res.errors]
    if res.fallback_ops:
        lines.append(f"  (ran on the CPU fallback: {', '.join(res.fallback_ops)})")
    return "\n".join(lines)


@pytest.mark.parametrize("op", OPS, ids=[oc.full_name(op) for op in OPS])
def test_op_matches_cpu(op, checks):
    res = oc.check_op(op, limit_samples=SAMPLES_PER_OP)
    if res.samples == 0:
        # Not a devx failure: no sample of this op runs on the CPU (jiterator ops are CUDA-only).
        pytest.skip("no sample input runs on the CPU: " + "; ".join(res.notes))
    assert res.ok, _report(res)


# The two checks of the check: the bars below mean something only if an op on the fallback is
# seen as not native, and a devx result that differs from the CPU's is seen as wrong.


def test_check_detects_fallback(checks, devx):
    devx.diagnostics.set_force_fallback(["add.Tensor"])
    res = oc.check_op(BY_NAME["add"], limit_samples=1)
    devx.diagnostics.set_force_fallback([])
    assert not res.native and "add.Tensor" in res.fallback_ops, res
    assert res.ok, _report(res)


def test_check_detects_wrong_results(checks):
    import torch

    wrong = copy.copy(BY_NAME["mul"])
    wrong.op = lambda x, *args, **kwargs: torch.mul(x, *args, **kwargs) * (2 if x.device.type == "devx" else 1)
    res = oc.check_op(wrong, limit_samples=1)
    assert res.native and res.samples == 2, res
    assert not res.forward_ok and res.backward_ok is False, res
    assert any("int64 sample 0 forward mismatch" in e for e in res.errors), res.errors


def test_coverage_bars(checks):
    results = [oc.check_op(op, limit_samples=1) for op in OPS]
    s = oc.summarize(results, NOT_APPLICABLE)
    assert s["applicable"] >= MIN_APPLICABLE, f"only {s['applicable']} OpInfo ops applicable"
    fell_back = "\n".join(f"  {name}: {', '.join(calls)}" for name, calls in sorted(s["fell_back"].items()))
    failed = "\n".join(f"  {name}: {errors[0]}" for name, errors in sorted(s["failed"].items()))
    assert s["native_pct"] >= NATIVE_BAR, (
        f"{s['native_pct']:.1f}% of {s['applicable']} OpInfo ops native (bar {NATIVE_BAR}%); "
        f"fell back:\n{fell_back}")
    assert s["forward_correct_pct"] >= FORWARD_BAR, (
        f"{s['forward_correct_pct']:.1f}% forward correct (bar {FORWARD_BAR}%); failed:\n{failed}")
    assert s["backward_correct_pct"] >= BACKWARD_BAR, (
        f"{s['backward_correct_pct']:.1f}% backward correct (bar {BACKWARD_BAR}%); failed:\n{failed}")


def test_check_detects_other_strides(checks):
    import torch

    # Equal values, laid out column-major on devx only: the layout check must name the strides.
    def transposed_on_devx(x, *args, **kwargs):
        result = torch.mm(x, *args, **kwargs)
        if x.device.type == "devx" and result.dim() >= 2 and min(result.shape[-2:]) > 1:
            result = result.transpose(-1, -2).contiguous().transpose(-1, -2)
        return result

    wrong = copy.copy(BY_NAME["mm"])
    wrong.op = transposed_on_devx
    res = oc.check_op(wrong, limit_samples=2)
    assert not res.ok and any("strides" in e and "the CPU's" in e for e in res.errors), res.errors
