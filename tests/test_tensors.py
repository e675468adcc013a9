"""Tensors on devx: factories, copies in every direction and layout, views, in-place and out= ops,
.item() and printing, memory accounting and OOM, and mixing devices. Every numeric result is
compared with the same computation on the CPU."""

from __future__ import annotations

import gc

import warnings

import pytest
import torch
import torch_devx  # noqa: F401  (registers the devx device)
from torch.testing import assert_close

from conftest import assert_child_ok, assert_close_cpu, run_python

pytestmark = pytest.mark.usefixtures("devx")

DTYPES = [torch.float32, torch.float64, torch.int64, torch.bool, torch.float16, torch.bfloat16, torch.complex64]
MiB = 1 << 20


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# --- factories


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_factories(dtype):
    e = torch.empty(2, 3, dtype=dtype, device="devx")
    assert (e.device, e.dtype, e.shape) == (torch.device("devx", 0), dtype, (2, 3))
    assert torch.equal(torch.zeros(2, 3, dtype=dtype, device="devx").cpu(), torch.zeros(2, 3, dtype=dtype))
    assert torch.equal(torch.ones(2, 3, dtype=dtype, device="devx").cpu(), torch.ones(2, 3, dtype=dtype))
    assert torch.equal(torch.full((4,), 1, dtype=dtype, device="devx").cpu(), torch.full((4,), 1, dtype=dtype))
    assert torch.equal(torch.zeros_like(e).cpu(), torch.zeros(2, 3, dtype=dtype))
    assert torch.equal(torch.ones_like(e).cpu(), torch.ones(2, 3, dtype=dtype))
    if dtype not in (torch.bool, torch.complex64):  # the CPU has no arange for these either
        assert torch.equal(torch.arange(7, dtype=dtype, device="devx").cpu(), torch.arange(7, dtype=dtype))
    if dtype.is_floating_point or dtype.is_complex:
        for fn in (torch.rand, torch.randn):
            torch.manual_seed(3)
            got = fn(5, 4, dtype=dtype, device="devx")
            torch.manual_seed(3)
            want = fn(5, 4, dtype=dtype)
            assert got.dtype == dtype and got.device.type == "devx"
            assert torch.equal(got.cpu(), want), fn.__name__


def test_factories_with_ranges_and_values():
    assert_close_cpu(torch.arange(1.0, 3.0, 0.25, device="devx"), torch.arange(1.0, 3.0, 0.25))
    assert_close_cpu(torch.full((2, 2), 3.5, device="devx"), torch.full((2, 2), 3.5))
    assert_close_cpu(torch.tensor([[1, 2], [3, 4]], device="devx"), torch.tensor([[1, 2], [3, 4]]))
    assert_close_cpu(torch.eye(3, device="devx"), torch.eye(3))
    assert_close_cpu(torch.linspace(0, 1, 5, device="devx"), torch.linspace(0, 1, 5))
    torch.manual_seed(0)
    r = torch.randint(0, 10, (20,), device="devx")
    torch.manual_seed(0)
    assert torch.equal(r.cpu(), torch.randint(0, 10, (20,)))


# --- copies in every direction

SRC = torch.randn(4, 6)


def test_copy_cpu_to_devx_and_back():
    d = SRC.devx()
    assert d.device == torch.device("devx", 0)
    assert torch.equal(d.cpu(), SRC)
    assert torch.equal(SRC.to("devx").to("cpu"), SRC)
    out = torch.empty(4, 6)
    out.copy_(d)
    assert torch.equal(out, SRC)
    dst = torch.empty(4, 6, device="devx")
    dst.copy_(SRC)
    assert torch.equal(dst.cpu(), SRC)


def test_copy_devx_to_devx_same_device():
    d = SRC.devx()
    c = d.clone()
    assert c.device == d.device and not same_storage(c, d)
    assert torch.equal(c.cpu(), SRC)
    dst = torch.zeros(4, 6, device="devx")
    dst.copy_(d)
    assert torch.equal(dst.cpu(), SRC)
    d.add_(1)  # the copies are independent
    assert torch.equal(c.cpu(), SRC) and torch.equal(dst.cpu(), SRC)


@pytest.mark.devices(2)
def test_copy_between_devices_both_ways():
    d0 = SRC.devx(0)
    d1 = d0.to("devx:1")
    assert d1.device == torch.device("devx", 1)
    assert torch.equal(d1.cpu(), SRC)
    back = d1.to("devx:0")
    assert back.device == torch.device("devx", 0)
    assert torch.equal(back.cpu(), SRC)
    dst1 = torch.zeros(4, 6, device="devx:1")
    dst1.copy_(d0)
    assert torch.equal(dst1.cpu(), SRC)
    dst0 = torch.zeros(4, 6, device="devx:0")
    dst0.copy_(dst1 * 2)
    assert torch.equal(dst0.cpu(), SRC * 2)
    # the same while the other device is current
    with torch.devx.device(1):
        assert torch.equal(d0.to("devx:1").cpu(), SRC)
        assert torch.equal(torch.empty(4, 6, device="devx:0").copy_(d1).cpu(), SRC)


@pytest.mark.devices(2)
def test_non_blocking_copies():
    d = SRC.to("devx", non_blocking=True)
    assert torch.equal(d.cpu(), SRC)
    assert torch.equal(d.to("devx:1", non_blocking=True).cpu(), SRC)
    # as on CUDA, a non_blocking copy to the CPU is allowed (it lands in pinned memory)
    back = d.to("cpu", non_blocking=True)
    torch.devx.synchronize()
    assert torch.equal(back, SRC)


# sources of every layout, copied to every kind of destination
NON_CONTIGUOUS_SOURCES = {
    "transposed": lambda t: t.t(),
    "stepped": lambda t: t[::2, 1::3],
    "negative_offset_slice": lambda t: t[1:, 2:5],
    "expanded": lambda t: t[1:2].expand(5, 6),
    "permuted3d": lambda t: t.reshape(2, 2, 6).permute(2, 0, 1),
}


@pytest.mark.devices(2)
@pytest.mark.parametrize("layout", list(NON_CONTIGUOUS_SOURCES))
def test_non_contiguous_sources(layout):
    make = NON_CONTIGUOUS_SOURCES[layout]
    want = make(SRC)
    d = SRC.devx()
    # cpu -> devx
    assert torch.equal(want.devx().cpu(), want)
    # devx -> cpu
    assert torch.equal(make(d).cpu(), want)
    # devx -> devx, same device and across devices
    assert torch.equal(make(d).clone().cpu(), want)
    assert torch.equal(make(d).contiguous().cpu(), want)
    assert torch.equal(make(d).to("devx:1").cpu(), want)
    assert torch.equal(make(SRC.devx(1)).to("devx:0").cpu(), want)


def _strided_destinations(device):
    """(destination view, its base, function giving the expected base from the copied value)."""
    out = []
    base = torch.zeros(6, 4, device=device)
    out.append(("transposed", base.t(), base, lambda v: v.t().clone()))
    base = torch.zeros(4, 12, device=device)

    def stepped(v):
        r = torch.zeros(4, 12)
        r[:, ::2] = v
        return r

    out.append(("stepped", base[:, ::2], base, stepped))
    return out


@pytest.mark.parametrize("src_dev, dst_dev", [("cpu", "devx"), ("devx", "cpu"), ("devx", "devx"),
                                              ("devx", "devx:1"), ("devx:1", "devx")])
def test_non_contiguous_destinations(src_dev, dst_dev):
    src = SRC.to(src_dev)
    for name, view, base, expected in _strided_destinations(dst_dev):
        view.copy_(src)
        assert torch.equal(base.cpu(), expected(SRC)), name
        assert torch.equal(view.cpu(), SRC), name


@pytest.mark.parametrize("src_dev, dst_dev", [("cpu", "devx"), ("devx", "cpu"), ("devx", "devx"), ("devx:1", "devx")])
def test_broadcasting_copy(src_dev, dst_dev):
    row = SRC[0].to(src_dev)
    dst = torch.zeros(3, 4, 6, device=dst_dev)
    dst.copy_(row)
    assert torch.equal(dst.cpu(), SRC[0].expand(3, 4, 6))
    dst.copy_(SRC.to(src_dev))
    assert torch.equal(dst.cpu(), SRC.expand(3, 4, 6))
    # scalar into everything
    dst.copy_(torch.tensor(2.5, device=src_dev))
    assert torch.equal(dst.cpu(), torch.full((3, 4, 6), 2.5))


@pytest.mark.parametrize("src_dev, dst_dev", [("cpu", "devx"), ("devx", "cpu"), ("devx", "devx"), ("devx", "devx:1")])
@pytest.mark.parametrize("dst_dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.bool], ids=str)
def test_dtype_change_during_copy(src_dev, dst_dev, dst_dtype):
    src_cpu = (SRC * 10).round()
    src = src_cpu.to(src_dev)
    want = src_cpu.to(dst_dtype)
    got = src.to(dst_dev, dst_dtype)
    assert got.dtype == dst_dtype and got.device == torch.empty(0, device=dst_dev).device
    assert torch.equal(got.cpu(), want)
    dst = torch.empty(4, 6, dtype=dst_dtype, device=dst_dev)
    dst.copy_(src)
    assert torch.equal(dst.cpu(), want)
    # into a strided destination of another dtype
    dst = torch.zeros(6, 4, dtype=dst_dtype, device=dst_dev)
    dst.t().copy_(src)
    assert torch.equal(dst.cpu(), want.t())


Z = torch.randn(3, 4, dtype=torch.complex64)
DIRECTIONS = [("cpu", "devx"), ("devx", "cpu"), ("devx", "devx"), ("devx", "devx:1")]


@pytest.mark.parametrize("src_dev, dst_dev", DIRECTIONS)
def test_conj_view_source(src_dev, dst_dev):
    src = Z.to(src_dev).conj()
    assert src.is_conj()
    want = Z.conj().resolve_conj()
    assert torch.equal(src.to(dst_dev).cpu().resolve_conj(), want)
    dst = torch.empty(3, 4, dtype=torch.complex64, device=dst_dev)
    dst.copy_(src)
    assert not dst.is_conj()
    assert torch.equal(dst.cpu(), want)


@pytest.mark.parametrize("src_dev, dst_dev", DIRECTIONS)
def test_conj_view_destination(src_dev, dst_dev):
    dst = torch.zeros(3, 4, dtype=torch.complex64, device=dst_dev)
    dst.conj().copy_(Z.to(src_dev))
    # writing Z through the conjugate view stores conj(Z)
    assert_close(dst.cpu(), Z.conj().resolve_conj(), rtol=0, atol=0)


@pytest.mark.parametrize("src_dev, dst_dev", DIRECTIONS)
def test_neg_view_source(src_dev, dst_dev):
    src = Z.to(src_dev)._neg_view()
    assert src.is_neg()
    want = -Z
    assert torch.equal(src.to(dst_dev).cpu().resolve_neg(), want)
    dst = torch.empty(3, 4, dtype=torch.complex64, device=dst_dev)
    dst.copy_(src)
    assert torch.equal(dst.cpu(), want)
    # neg views also come from the imaginary part of a conjugate
    imag = Z.to(src_dev).conj().imag
    assert torch.equal(torch.empty(3, 4, device=dst_dev).copy_(imag).cpu(), Z.conj().imag)


@pytest.mark.parametrize("src_dev, dst_dev", DIRECTIONS)
def test_neg_view_destination(src_dev, dst_dev):
    dst = torch.zeros(3, 4, dtype=torch.complex64, device=dst_dev)
    dst._neg_view().copy_(Z.to(src_dev))
    # writing Z through the negative view stores -Z
    assert_close(dst.cpu(), -Z, rtol=0, atol=0)


def test_conj_and_neg_resolution_on_devx():
    d = Z.devx()
    assert torch.equal(d.conj().resolve_conj().cpu(), Z.conj().resolve_conj())
    assert torch.equal(d._neg_view().resolve_neg().cpu(), -Z)
    assert torch.equal((d.conj() * 2).cpu(), Z.conj() * 2)


def test_kernel_argument_objects_reused_between_ops_hold_no_state():
    """The CPU-kernel views of devx arguments are recycled from op to op: one that held a conj or
    neg flag, another shape or dtype, or the bytes of a tensor since freed, must show none of it."""
    torch.devx.synchronize()
    before = torch.devx.memory_allocated()
    z = Z.devx()
    assert torch.equal((z.conj() * 2).cpu(), Z.conj() * 2)
    assert torch.equal((z * 2).cpu(), Z * 2)
    assert torch.equal((z._neg_view() + 1).cpu(), -Z + 1)
    assert torch.equal((z + 1).cpu(), Z + 1)
    a = torch.arange(6.0).reshape(2, 3)
    assert torch.equal((a.devx().t() * 2).cpu(), a.t() * 2)
    i = torch.arange(5)
    assert torch.equal((i.devx() * 3).cpu(), i * 3)
    big = torch.ones(1 << 20, device="devx")
    (big * 2).sum().item()
    # Fresh tensors that get the bytes (and often the storage object's address) of freed ones.
    for k in range(20):
        t = torch.full((16,), float(k), device="devx")
        assert torch.equal((t * 2).cpu(), torch.full((16,), 2.0 * k))
        del t
    # A storage whose bytes change between ops (resize_ moves them).
    r = torch.ones(4, device="devx")
    assert (r * 2).sum().item() == 8
    r.resize_(1000).fill_(3)
    assert (r * 2).sum().item() == 6000
    del z, big, r
    torch.devx.synchronize()
    assert torch.devx.memory_allocated() == before


def test_results_become_devx_tensors_in_place():
    x = torch.randn(3, 4, device="devx", requires_grad=True)
    y = x * 2
    assert y.device == x.device and y.is_devx and not y.is_cpu
    (y.sum() * 1).backward()
    assert x.grad.device == x.device
    assert torch.equal(x.grad.cpu(), torch.full((3, 4), 2.0))
    values, indices = torch.randn(5, device="devx").sort()
    assert values.device == indices.device == x.device
    assert torch.equal(values.cpu().sort().values, values.cpu())


# --- views


VIEWS = {
    "view": lambda t: t.view(24),
    "view_rows": lambda t: t.view(2, 12)[1],
    "reshape": lambda t: t.reshape(3, 8)[0],
    "transpose": lambda t: t.transpose(0, 1)[2],
    "select": lambda t: t.select(1, 3),
    "narrow": lambda t: t.narrow(1, 2, 3),
    "unsqueeze": lambda t: t.unsqueeze(0)[0, 1],
    "as_strided": lambda t: t.as_strided((2, 2), (7, 1), 3),
    "expand": lambda t: t[0:1].expand(3, 6),
    "diagonal": lambda t: t.diagonal(),
    "stepped_slice": lambda t: t[::2, 1::2],
    "permute": lambda t: t.permute(1, 0)[0],
    "unbind": lambda t: t.unbind(0)[2],
    "split": lambda t: t.split(2, dim=1)[1],
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_views_share_storage(name):
    make = VIEWS[name]
    base_cpu = torch.arange(24.0).reshape(4, 6)
    base = base_cpu.devx()
    v, v_cpu = make(base), make(base_cpu)
    assert v.device == base.device
    assert same_storage(v, base)
    assert (v.shape, v.stride(), v.storage_offset()) == (v_cpu.shape, v_cpu.stride(), v_cpu.storage_offset())
    assert torch.equal(v.cpu(), v_cpu)
    # writing through the view changes the base
    v.fill_(-1.0)
    v_cpu.fill_(-1.0)
    assert torch.equal(base.cpu(), base_cpu)
    # and writing the base shows through the view
    base.mul_(3)
    base_cpu.mul_(3)
    assert torch.equal(v.cpu(), v_cpu)


def test_inplace_ops_on_views():
    base_cpu = torch.arange(24.0).reshape(4, 6) - 10
    base = base_cpu.devx()
    for a in (base, base_cpu):
        a.t()[1].mul_(2)
        a[:, ::2].add_(1)
        a.select(0, 2).neg_()
        a.narrow(1, 1, 2).clamp_(max=5.0)
        a.view(24)[::5].sub_(3)
        a.diagonal().zero_()
        a[1:3, 2:4].copy_(torch.tensor([[7.0, 8.0], [9.0, 10.0]]))
        a.unsqueeze(0).relu_()
        a[3].exp_()
        a[:, 5].masked_fill_(a[:, 5] > 3, 42.0)
        a.as_strided((2,), (7,), 1).sqrt_()
    assert_close(base.cpu(), base_cpu)


def test_out_ops():
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    ad, bd = a.devx(), b.devx()
    o = torch.empty(3, 4, device="devx")
    r = torch.add(ad, bd, alpha=2, out=o)
    assert r is o
    assert_close(o.cpu(), torch.add(a, b, alpha=2))
    o = torch.empty(3, 3, device="devx")
    torch.mm(ad, bd.t(), out=o)
    assert_close(o.cpu(), a @ b.t())
    # a non-contiguous out keeps its layout
    o = torch.empty(4, 3, device="devx").t()
    torch.mul(ad, bd, out=o)
    assert o.stride() == (1, 3)
    assert_close(o.cpu(), a * b)


@pytest.mark.parametrize("wrong_shape", [(0,), (7, 7), (2,)], ids=str)
def test_out_of_the_wrong_size_is_resized(wrong_shape):
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    ad, bd = a.devx(), b.devx()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "An output with one or more elements was resized"
        o = torch.empty(wrong_shape, device="devx")
        r = torch.add(ad, bd, out=o)
        assert r is o and o.shape == (3, 4)
        assert_close(o.cpu(), a + b)
        o = torch.empty(wrong_shape, device="devx")
        torch.sum(ad, 1, out=o)
        assert o.shape == (3,)
        assert_close(o.cpu(), a.sum(1))
        o = torch.empty(wrong_shape, device="devx")
        torch.cat([ad, bd], out=o)
        assert o.shape == (6, 4)
        assert_close(o.cpu(), torch.cat([a, b]))
        v = torch.empty(wrong_shape, device="devx")
        i = torch.empty(wrong_shape, dtype=torch.long, device="devx")
        torch.max(ad, 1, out=(v, i))
        assert v.shape == i.shape == (3,)
        assert_close((v.cpu(), i.cpu()), tuple(torch.max(a, 1)))
        # an out that is a view of a larger buffer grows its storage as on the CPU
        for dev in ("cpu", "devx"):
            base = torch.zeros(10, device=dev)
            o = base[2:4]
            torch.add(a.to(dev), b.to(dev), out=o)
            assert o.shape == (3, 4) and o.storage_offset() == 2
            assert_close(o.cpu(), a + b)
            assert_close(base.cpu()[2:4], (a + b).flatten()[:2])


@pytest.mark.parametrize("op", ["copy_", "add_", "mul_out"])
def test_partial_overlap_is_rejected_as_on_the_cpu(op):
    """Writing a tensor from a shifted view of itself is refused by PyTorch (CPU and CUDA) rather
    than giving a result that depends on the kernel's traversal order."""
    calls = {
        "copy_": lambda x: x[1:].copy_(x[:-1]),
        "add_": lambda x: x[1:].add_(x[:-1]),
        "mul_out": lambda x: torch.mul(x[:-1], 2, out=x[1:]),
    }
    with pytest.raises(RuntimeError, match="unsupported operation") as on_cpu:
        calls[op](torch.arange(6.0))
    x = torch.arange(6.0, device="devx")
    with pytest.raises(RuntimeError, match="unsupported operation"):
        calls[op](x)
    assert "single memory location" in str(on_cpu.value)
    # a full overlap (the same elements) is fine on both
    y = torch.arange(6.0, device="devx")
    y.add_(y)
    assert y.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


# --- .item() and printing


@pytest.mark.devices(2)
def test_item():
    assert torch.tensor(3.5).devx().item() == 3.5
    assert torch.tensor([7, 8]).devx()[1].item() == 8
    assert torch.tensor(True).devx().item() is True
    assert torch.tensor(1.5, dtype=torch.bfloat16).devx().item() == 1.5
    assert torch.tensor(0.25, dtype=torch.float16, device="devx:1").item() == 0.25
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    assert z.devx()[1].item() == 3 - 4j
    assert z.devx().conj()[1].item() == 3 + 4j
    assert z.devx()._neg_view()[0].item() == -1 - 2j
    x = torch.arange(10.0).devx()
    assert x[7].item() == 7.0 and x.sum().item() == 45.0
    with pytest.raises(RuntimeError):
        x.item()  # more than one element


@pytest.mark.devices(2)
def test_printing():
    t = torch.tensor([1.5, 2.25]).devx()
    r = repr(t)
    assert "device='devx:0'" in r and "1.5000" in r and "2.2500" in r
    r1 = repr(torch.tensor([[1, 2], [3, 4]], device="devx:1"))
    assert "device='devx:1'" in r1 and "[3, 4]" in r1
    s = str(torch.tensor([0.5], dtype=torch.float16, device="devx"))
    assert "device='devx:0'" in s and "0.5000" in s and "float16" in s
    assert "1.+2.j" in repr(torch.tensor([1 + 2j], device="devx"))
    big = repr(torch.arange(2000.0, device="devx"))
    assert "..." in big and "1.9990e+03" in big
    assert "size=(0, 3)" in repr(torch.empty(0, 3, device="devx"))
    g = repr(torch.ones(2, device="devx", requires_grad=True) * 2)
    assert "grad_fn=<MulBackward0>" in g and "device='devx:0'" in g


# --- memory accounting


@pytest.mark.devices(2)
def test_memory_stats_follow_allocations():
    gc.collect()  # tensors of earlier tests waiting in reference cycles would be freed mid-test
    torch.devx.synchronize()
    before = torch.devx.memory_allocated(0)
    before1 = torch.devx.memory_allocated(1)
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="devx")
    assert torch.devx.memory_allocated(0) >= before + 4 * MiB
    assert torch.devx.memory_allocated(1) == before1
    assert torch.devx.memory_reserved(0) >= torch.devx.memory_allocated(0)
    assert torch.devx.max_memory_allocated(0) >= before + 4 * MiB
    free_before = torch.devx.mem_get_info(0)[0]
    y = torch.empty(2 * MiB, dtype=torch.uint8, device="devx:1")
    assert torch.devx.memory_allocated(1) >= before1 + 2 * MiB
    del x
    assert torch.devx.memory_allocated(0) == before
    stats = torch.devx.memory_stats(0)
    assert stats["allocated_bytes.all.current"] == before
    assert stats["allocated_bytes.all.peak"] >= before + 4 * MiB
    torch.devx.reset_peak_memory_stats(0)
    assert torch.devx.max_memory_allocated(0) == torch.devx.memory_allocated(0)
    del y
    assert torch.devx.memory_allocated(1) == before1
    torch.devx.empty_cache()
    assert torch.devx.mem_get_info(0)[0] >= free_before


OOM_SCRIPT = """
import torch, torch_devx
MiB = 1 << 20
assert torch.devx.get_device_properties(0).total_memory == 64 * MiB
free, total = torch.devx.mem_get_info()
assert total == 64 * MiB, (free, total)

# one allocation larger than the device
try:
    torch.empty(100 * MiB, dtype=torch.uint8, device="devx")
except torch.OutOfMemoryError as e:
    msg = str(e)
    assert isinstance(e, RuntimeError)
    assert "100.00 MiB" in msg and "64.00 MiB" in msg, msg
else:
    raise AssertionError("no OOM for 100 MiB on a 64 MiB device")
assert torch.devx.memory_allocated() == 0

# filling the device up, then one more
keep = [torch.empty(10 * MiB, dtype=torch.uint8, device="devx") for _ in range(5)]
try:
    keep.append(torch.ones(30 * MiB, dtype=torch.uint8, device="devx"))
except torch.OutOfMemoryError as e:
    msg = str(e)
    assert "30.00 MiB" in msg and "50.00 MiB" in msg, msg
else:
    raise AssertionError("no OOM with 50 of 64 MiB in use")

# normal use afterwards, in the same process
a = torch.randn(256, 256)
d = a.devx()
torch.testing.assert_close((d @ d).cpu(), a @ a)
del keep
big = torch.ones(10 * MiB, dtype=torch.float32, device="devx")  # 40 MiB
assert big.sum().item() == 10 * MiB
other = torch.ones(40 * MiB, dtype=torch.uint8, device="devx:1")  # each device has its own 64 MiB
print("OOM-OK")
"""


def test_out_of_memory_then_normal_use():
    proc = run_python(OOM_SCRIPT, DEVX_SIM_MEMORY="64MiB")
    assert_child_ok(proc)
    assert "OOM-OK" in proc.stdout


# --- mixing devices


@pytest.mark.devices(2)
def test_mixing_devices_raises():
    a0 = torch.ones(3, device="devx:0")
    a1 = torch.ones(3, device="devx:1")
    c = torch.ones(3)
    for fn in (lambda: a0 + a1, lambda: a1 * a0, lambda: a0 + c, lambda: c + a0,
               lambda: torch.mm(a0.view(3, 1), a1.view(1, 3)), lambda: torch.cat([a0, c])):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device") as info:
            fn()
        msg = str(info.value)
        assert "devx:0" in msg or "devx:1" in msg, msg
        assert ("devx:1" in msg and "devx:0" in msg) or "cpu" in msg, msg


def test_mixing_with_a_cpu_scalar_is_allowed():
    a = torch.arange(3.0, device="devx")
    assert_close_cpu(a + torch.tensor(2.0), torch.arange(3.0) + 2)
    assert_close_cpu(a * torch.tensor(3), torch.arange(3.0) * 3)


@pytest.mark.parametrize("other", ["cpu", "devx:1"])
def test_mixing_devices_raises_for_ops_on_the_cpu_fallback(fallback, other):
    """The same rule holds for ops without a devx kernel (the CPU fallback and ATen composites)."""
    x = torch.randn(3, 4, device="devx:0")
    calls = {
        "cdist": lambda o: torch.cdist(x, torch.randn(2, 4, device=o)),
        "take": lambda o: torch.take(x, torch.tensor([0, 5], device=o)),
        "bucketize": lambda o: torch.bucketize(x, torch.tensor([0.0, 1.0], device=o)),
        # structured op whose functional form is a composite around the out= overload
        "linalg_solve": lambda o: torch.linalg.solve(x[:, :3], torch.eye(3, device=o)),
    }
    accepted = {}
    for name, call in calls.items():
        try:
            result = call(other)
        except RuntimeError as e:
            assert "Expected all tensors to be on the same device" in str(e), (name, str(e))
        else:
            accepted[name] = str(result.device)
    assert not accepted, f"ops mixing devx:0 with {other} ran instead of raising: {accepted}"
