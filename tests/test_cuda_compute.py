"""ATen's CUDA kernels on devx memory (the cuda vendor), seen through torch: results land in devx
memory without a copy, kernels run on the devx current stream, and what the routed allocator
cannot do is handled. Each check runs in a child with DEVX_VENDOR=cuda; they need the installed
torch to have CUDA and a CUDA device, and skip otherwise."""
from __future__ import annotations

import pytest
import torch

from conftest import assert_child_ok, run_python


def _cuda_device_count() -> int:
    # The CUDA build's own count: under CUDA mocking torch.cuda.device_count() answers for devx.
    get = getattr(torch._C, "_cuda_getDeviceCount", None)
    return get() if get is not None else 0


pytestmark = [
    pytest.mark.skipif(not torch.backends.cuda.is_built(),
                       reason=f"torch {torch.__version__} has no CUDA, so no ATen CUDA kernels to run on devx memory"),
    pytest.mark.skipif(torch.backends.cuda.is_built() and _cuda_device_count() == 0, reason="no CUDA device"),
]


def run_on_cuda_vendor(code: str, **env: str) -> str:
    proc = run_python(code, DEVX_VENDOR="cuda", **env)
    assert_child_ok(proc)
    return proc.stdout


def test_results_are_adopted_into_devx_memory_not_copied():
    run_on_cuda_vendor("""
        import torch, torch_devx
        assert torch_devx.vendor == "cuda", torch_devx.vendor
        assert torch_devx._C._compute_allocations_routed()
        x = torch.randn(1024, 1024, device="devx")
        (x @ x).sum().item()  # cuBLAS's workspace is allocated (from devx memory) once, here
        torch.devx.synchronize()
        count = lambda: torch.devx.memory_stats()["allocation.all.allocated"]
        before_bytes, before_count = torch.devx.memory_allocated(), count()
        y = x @ x
        # One allocation, the result's own: a copy into devx memory would have made two.
        assert count() - before_count == 1, count() - before_count
        assert torch.devx.memory_allocated() - before_bytes == y.nbytes
        assert y.device.type == "devx" and y.untyped_storage().device.type == "devx"
        torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-3, atol=1e-3)
        del y
        assert torch.devx.memory_allocated() == before_bytes
    """)


def test_kernels_run_on_the_devx_current_stream():
    run_on_cuda_vendor("""
        import torch, torch_devx
        torch.backends.cuda.matmul.allow_tf32 = False
        a = torch.randn(8192, 8192, device="devx")
        torch.devx.synchronize()
        side = torch.devx.Stream()
        with torch.devx.stream(side):
            for _ in range(10):
                b = a @ a  # about 0.2 s of fp32 work
            done = torch.devx.Event()
            done.record()
        # The work went to `side`: its event is pending while the default stream is idle.
        assert not done.query()
        assert torch.devx.default_stream().query()
        # Ordered by devx streams: the default stream waits for `side`, then reads b.
        torch.devx.current_stream().wait_stream(side)
        c = b[:4, :4].clone()
        torch.devx.synchronize()
        torch.testing.assert_close(c.cpu(), (a[:4].cpu() @ a.cpu())[:, :4], rtol=1e-3, atol=1e-2)
    """)


def test_out_argument_of_the_wrong_size_is_resized_in_devx_memory():
    run_on_cuda_vendor("""
        import torch, torch_devx
        x = torch.arange(6.0, device="devx")
        out = torch.empty(0, device="devx")
        torch.add(x, 1, out=out)
        assert out.shape == (6,) and out.untyped_storage().device.type == "devx"
        assert out.cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    """)


def test_cudnn_benchmark_is_turned_off_with_a_warning():
    out = run_on_cuda_vendor("""
        import warnings
        import torch, torch_devx
        conv = torch.nn.Conv2d(3, 8, 3).to("devx")
        x = torch.randn(2, 3, 16, 16, device="devx")
        # Set after the tensors are made: any op (randn too) turns it off.
        torch.backends.cudnn.benchmark = True
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = conv(x)
        torch.testing.assert_close(y.cpu(), conv.cpu()(x.cpu()), rtol=1e-3, atol=1e-3)
        assert not torch.backends.cudnn.benchmark
        print([str(w.message) for w in caught])
    """)
    assert "torch.backends.cudnn.benchmark has been turned off" in out


def test_cuda_in_use_before_import_falls_back_to_copies_with_a_warning():
    out = run_on_cuda_vendor("""
        import warnings
        import torch
        torch.zeros(1, device="cuda")  # CUDA's own allocator is now in use
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch_devx
        assert not torch_devx._C._compute_allocations_routed()
        x = torch.randn(64, 64, device="devx")
        torch.testing.assert_close((x @ x).cpu(), x.cpu() @ x.cpu(), rtol=1e-3, atol=1e-3)
        # The copies into devx memory are ordered on the devx stream the kernels ran on.
        big = torch.randn(4096, 4096, device="devx")
        side = torch.devx.Stream()
        side.wait_stream(torch.devx.current_stream())
        with torch.devx.stream(side):
            y = big @ big
            z = y[:8, :8] * 2
        torch.devx.current_stream().wait_stream(side)
        torch.testing.assert_close(z.cpu(), (big[:8].cpu() @ big.cpu())[:, :8] * 2, rtol=1e-3, atol=1e-2)
        print([str(w.message) for w in caught])
    """)
    assert "was already in use before `import torch_devx`" in out
