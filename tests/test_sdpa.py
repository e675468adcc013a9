"""scaled_dot_product_attention on devx takes the algorithm the CPU takes (PyTorch's OVERRIDEABLE
route where the CPU runs its flash kernel, the math path elsewhere), so results and gradients
are bit-exact with the CPU, for every argument of the API."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch_devx  # noqa: F401

FLASH_CPU = "aten::_scaled_dot_product_flash_attention_for_cpu"
FUSED_DEVX = "aten::_scaled_dot_product_fused_attention_overrideable"
MATH = "aten::_scaled_dot_product_attention_math"


def ops_run(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = fn()
    return out, {e.name for e in prof.events()}


def run_both(shapes, dtype=torch.float32, **kwargs):
    torch.manual_seed(0)
    q, k, v = (torch.randn(*s, dtype=dtype, requires_grad=True) for s in shapes)
    cpu_out, cpu_ops = ops_run(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs))
    qd, kd, vd = (t.detach().to("devx").requires_grad_() for t in (q, k, v))
    devx_kwargs = {n: (a.to("devx") if isinstance(a, torch.Tensor) else a) for n, a in kwargs.items()}
    devx_out, devx_ops = ops_run(lambda: F.scaled_dot_product_attention(qd, kd, vd, **devx_kwargs))
    grad = torch.randn_like(cpu_out)
    cpu_out.backward(grad)
    devx_out.backward(grad.to("devx"))
    return (cpu_out, devx_out.cpu(), (q.grad, k.grad, v.grad), tuple(t.grad.cpu() for t in (qd, kd, vd)),
            cpu_ops, devx_ops)


CASES = {
    "plain": ([(2, 4, 8, 16)] * 3, {}),
    "causal": ([(2, 4, 8, 16)] * 3, {"is_causal": True}),
    "float mask": ([(2, 4, 8, 16)] * 3, {"attn_mask": torch.randn(8, 8)}),
    "bool mask": ([(2, 4, 8, 16)] * 3, {"attn_mask": torch.rand(2, 1, 8, 8) > 0.3}),
    "scale": ([(2, 4, 8, 16)] * 3, {"scale": 0.3}),
    "cross attention": ([(2, 4, 8, 16), (2, 4, 5, 16), (2, 4, 5, 16)], {}),
    "grouped query": ([(2, 8, 8, 16), (2, 2, 8, 16), (2, 2, 8, 16)], {"enable_gqa": True}),
    "3-d inputs": ([(4, 8, 16)] * 3, {}),
}


@pytest.mark.parametrize("case", CASES)
def test_devx_computes_what_the_cpu_computes(case):
    shapes, kwargs = CASES[case]
    cpu_out, devx_out, cpu_grads, devx_grads, cpu_ops, devx_ops = run_both(shapes, **kwargs)
    assert torch.equal(cpu_out, devx_out)
    for c, d in zip(cpu_grads, devx_grads):
        assert torch.equal(c, d)
    # The same algorithm: the CPU's flash kernel through devx's fused op, or math on both.
    assert (FLASH_CPU in cpu_ops) == (FUSED_DEVX in devx_ops)
    assert (MATH in cpu_ops) == (MATH in devx_ops)


def test_the_common_case_takes_the_fused_route():
    *_, cpu_ops, devx_ops = run_both([(2, 4, 8, 16)] * 3, is_causal=True)
    assert FLASH_CPU in cpu_ops and FUSED_DEVX in devx_ops and MATH not in devx_ops


def test_a_mask_that_requires_grad_gets_the_cpus_gradient():
    """The CPU leaves its flash kernel, which gives a mask no gradient, for the math path when the
    mask requires grad; devx decides the same (its choice runs on aliases, which require no grad)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16, requires_grad=True) for _ in range(3))
    mask = torch.randn(2, 4, 8, 8, requires_grad=True)
    qd, kd, vd, maskd = (t.detach().to("devx").requires_grad_() for t in (q, k, v, mask))
    cpu_out, cpu_ops = ops_run(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    devx_out, devx_ops = ops_run(lambda: F.scaled_dot_product_attention(qd, kd, vd, attn_mask=maskd))
    assert MATH in cpu_ops and MATH in devx_ops and FUSED_DEVX not in devx_ops
    cpu_out.sum().backward()
    devx_out.sum().backward()
    assert torch.equal(cpu_out, devx_out.cpu())
    for c, d in zip((q, k, v, mask), (qd, kd, vd, maskd)):
        assert torch.equal(c.grad, d.grad.cpu())


def test_bfloat16_and_dropout():
    cpu_out, devx_out, *_ = run_both([(1, 2, 8, 16)] * 3, dtype=torch.bfloat16)
    assert torch.equal(cpu_out, devx_out)
    torch.manual_seed(0)
    q = torch.randn(1, 2, 8, 16, device="devx")
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert out.shape == q.shape and out.device.type == "devx" and torch.isfinite(out.cpu()).all()


def test_a_transformer_layer_trains_bit_exact():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    x = torch.randn(2, 10, 32)
    ref = layer(x, is_causal=True, src_mask=torch.nn.Transformer.generate_square_subsequent_mask(10))
    ref.sum().backward()
    dev = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    dev.load_state_dict(layer.state_dict())
    dev = dev.to("devx")
    out = dev(x.to("devx"), is_causal=True,
              src_mask=torch.nn.Transformer.generate_square_subsequent_mask(10, device="devx"))
    out.sum().backward()
    assert torch.equal(ref, out.cpu())
    for (name, p), q in zip(layer.named_parameters(), dev.parameters()):
        assert torch.equal(p.grad, q.grad.cpu()), name
