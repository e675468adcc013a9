"""Checks PyTorch makes on the CPU and CUDA that devx must make too (issue 20): a CPU tensor an op
would write, in-place results that would need a larger shape, outputs that are also inputs, and
ops whose composite kernels refuse devices they do not know."""
from __future__ import annotations

import re

import pytest
import torch

SAME_DEVICE = "Expected all tensors to be on the same device"

UNARY = ["exp", "sin", "tanh", "sigmoid", "sqrt", "neg", "abs", "log", "floor", "erf", "reciprocal"]
BINARY = ["add", "mul", "sub", "div", "maximum", "atan2", "pow", "remainder"]


@pytest.mark.parametrize("name", UNARY + BINARY)
def test_a_0dim_cpu_out_for_devx_inputs_is_the_same_device_error(devx, name):
    fn = getattr(torch, name)
    args = [torch.tensor(0.5, device="devx")] + ([torch.tensor(2.0, device="devx")] if name in BINARY else [])
    out = torch.full((), -7.0)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        fn(*args, out=out)
    assert out.item() == -7.0  # not written


def test_a_0dim_cpu_tensor_written_in_place_by_a_devx_op_is_the_same_device_error(devx):
    x = torch.tensor(1.0)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        x.add_(torch.tensor(2.0, device="devx"))
    assert x.item() == 1.0
    # Read, a 0-dim CPU tensor is still a scalar operand, as on CUDA.
    y = torch.tensor(1.0, device="devx")
    y.add_(torch.tensor(2.0))
    assert y.item() == 3.0


def test_a_0dim_cpu_out_of_a_long_tail_op_and_of_the_fallback_is_the_same_device_error(devx):
    boxed = [n for n, source in devx.diagnostics.coverage().items() if source == "aten-boxed"]
    assert "special_i0e.out" in boxed, "special_i0e.out is expected to run through the boxed long-tail kernel"
    a = torch.tensor(0.5, device="devx")
    out = torch.full((), -7.0)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.special.i0e(a, out=out)
    devx.diagnostics.set_force_fallback(["exp"])
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.exp(a, out=out)
    assert out.item() == -7.0


def _error(fn):
    try:
        return None, fn()
    except Exception as e:  # noqa: BLE001 - the CPU's exception, whatever it is, is the reference
        return e, None


def _normalise(message: str) -> str:
    # With DEVX_SIM_ASYNC=1 a kernel's own error (a dtype it does not take) is reported by the
    # next synchronisation, prefixed with the op and the line that issued it.
    message = re.sub(r"^.*failed in its kernel \(issued asynchronously at [^)]*\): ", "", message.split("\n")[0])
    # devx names the compute-device kernel that raised a NotImplementedError.
    message = re.sub(r" \(raised by the \w+ kernel that devx's \S+ runs on \w+\)$", "", message)
    return message.replace("devx:0", "cpu").replace("devx", "cpu")


def _run_devx(fn):
    fn()
    torch.devx.synchronize()


def _inplace_args(schema, device, dtype):
    """(self, other tensors...) as x (5, 1) and (5, 5) tensors, other arguments a plain value; None
    for a schema with arguments this cannot fill."""
    gen = torch.Generator().manual_seed(0)
    args = []
    for i, arg in enumerate(schema.arguments):
        if arg.kwarg_only and arg.has_default_value():
            continue
        t = str(arg.type)
        if t == "Tensor":
            shape = (5, 1) if i == 0 else (5, 5)
            v = torch.randint(1, 4, shape, generator=gen).to(dtype)
            args.append(v.to(device))
        elif t.endswith("?"):
            args.append(None)
        elif t in ("Scalar", "float"):
            args.append(2.0 if dtype.is_floating_point else 2)
        elif t == "int":
            args.append(1)
        elif t == "bool":
            args.append(False)
        else:
            return None
    return args


def _inplace_ops(coverage):
    for name in sorted(coverage):
        base, _, overload = name.partition(".")
        if not base.endswith("_") or base.startswith("_") or base in ("resize_", "resize_as_", "set_", "copy_"):
            continue
        packet = getattr(torch.ops.aten, base, None)
        op = getattr(packet, overload or "default", None) if packet is not None else None
        if op is None or torch.Tag.inplace_view in op.tags:
            continue
        yield name, op


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_every_inplace_op_refuses_a_result_larger_than_self_as_the_cpu_does(devx, dtype):
    checked, differ = [], []
    for name, op in _inplace_ops(devx.diagnostics.coverage()):
        cpu_args = _inplace_args(op._schema, "cpu", dtype)
        if cpu_args is None:
            continue
        devx_args = _inplace_args(op._schema, "devx", dtype)
        cpu_error, _ = _error(lambda: op(*cpu_args))
        devx_error, _ = _error(lambda: _run_devx(lambda: op(*devx_args)))
        checked.append(name)
        got = (type(devx_error), _normalise(str(devx_error))) if devx_error else None
        want = (type(cpu_error), _normalise(str(cpu_error))) if cpu_error else None
        if got != want or tuple(devx_args[0].shape) != tuple(cpu_args[0].shape):
            differ.append((name, want, got, tuple(devx_args[0].shape)))
        elif cpu_error is None and torch.Tag.nondeterministic_seeded not in op.tags:
            torch.testing.assert_close(devx_args[0].cpu(), cpu_args[0], equal_nan=True, msg=name)
    assert len(checked) > 100 and "mul_.Tensor" in checked, checked
    assert not differ, "\n".join(map(str, differ))


def test_ldexp_inplace_keeps_the_cpu_broadcast_error(devx):
    x, y = torch.ones(5, 1), torch.ones(5, 5)
    with pytest.raises(RuntimeError) as cpu:
        x.ldexp_(y)
    xd = x.to("devx")
    with pytest.raises(RuntimeError) as dev:
        xd.ldexp_(y.to("devx"))
    assert "output with shape [5, 1] doesn't match the broadcast shape [5, 5]" in str(cpu.value)
    assert str(dev.value).split("\n")[0] == str(cpu.value).split("\n")[0]
    assert xd.shape == (5, 1)


def test_an_output_that_is_also_an_input_is_not_resized(devx):
    x, y = torch.ones(5, 1, device="devx"), torch.ones(5, 5, device="devx")
    with pytest.raises(RuntimeError, match=r"output with shape \[5, 1\] doesn't match the broadcast shape"):
        torch.mul(x, y, out=x)
    assert x.shape == (5, 1)
    # A distinct output is resized, as on the CPU.
    out = torch.ones(0, device="devx")
    torch.mul(x, y, out=out)
    assert out.shape == (5, 5)


def test_cat_into_one_of_its_empty_inputs_is_the_overlap_error(devx):
    for device in ("cpu", "devx"):
        x, y = torch.empty(0, device=device), torch.ones(3, device=device)
        with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor and the "
                                               "written-to tensor refer to a single memory location"):
            torch.cat((x, y), dim=0, out=x)
    # A distinct output is fine.
    out = torch.empty(0, device="devx")
    torch.cat((x, y), dim=0, out=out)
    assert out.cpu().tolist() == [1.0, 1.0, 1.0]


def test_mode_with_out_tuple_runs_on_devx(devx):
    x = torch.tensor([[1.0, 2.0, 2.0, 3.0], [4.0, 4.0, 1.0, 1.0]])
    want = torch.mode(x, 0)
    xd = x.to("devx")
    v, i = torch.empty(0, device="devx"), torch.empty(0, dtype=torch.long, device="devx")
    got = torch.mode(xd, 0, out=(v, i))
    assert got[0] is v and got[1] is i
    assert v.device.type == "devx"
    torch.testing.assert_close(v.cpu(), want.values)
    torch.testing.assert_close(i.cpu(), want.indices)
    v1, i1 = torch.mode(xd, 1)
    torch.testing.assert_close((v1.cpu(), i1.cpu()), tuple(torch.mode(x, 1)))


def test_an_op_only_cuda_has_is_an_error_naming_devx_not_the_cpu(devx):
    x = torch.randn(4, 8, device="devx")
    with pytest.raises(NotImplementedError, match=r"devx: aten::_fused_dropout has no devx kernel, and the CPU, "
                                                  r"which devx falls back to, has none either \(ATen has it for "):
        torch._fused_dropout(x, 0.5)


@pytest.mark.parametrize("make", [lambda d: torch.ones(2, dtype=torch.complex32, device=d).sum(),
                                  lambda d: torch.ones(3, dtype=torch.int32, device=d).histc(),
                                  lambda d: torch.ones(2, 2, dtype=torch.complex32, device=d).prod(1)],
                         ids=["sum", "histc", "prod"])
def test_a_dtype_the_compute_kernel_lacks_names_the_devx_op_that_ran_it(devx, make):
    # The CPU's message names its own kernel ("sum_cpu"): on devx it is the same error, and says
    # which devx op ran that kernel, so that nobody looks for a CPU tensor in their model.
    with pytest.raises(NotImplementedError) as cpu:
        make("cpu")
    from torch_devx.testing import async_streams

    # Asynchronously the kernel fails on the stream, and the next synchronisation reports it.
    with pytest.raises(RuntimeError if async_streams() else NotImplementedError) as dev:
        _run_devx(lambda: make("devx"))
    first_line = str(dev.value).split("\n")[0]
    assert _normalise(first_line) == str(cpu.value).split("\n")[0]
    assert re.search(r"\(raised by the cpu kernel that devx's aten::\w+\S* runs on cpu_sim\)$", first_line), first_line
