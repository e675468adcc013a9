"""Op-argument dumps, autocompare against the CPU and Python kernel overrides: switched at run
time through os.environ or torch_devx.diagnostics, effective at the next op."""

from __future__ import annotations

import os
import re
import textwrap

import pytest
import torch

from conftest import assert_child_ok, run_python

DIAG_VARS = ("DIPU_DUMP_OP_ARGS", "DIPU_AUTOCOMPARE", "DIPU_AUTOCOMPARE_OPS_LIST", "DIPU_AUTOCOMPARE_RAISE")


@pytest.fixture
def diag():
    import torch_devx

    yield torch_devx.diagnostics
    for name in DIAG_VARS:
        os.environ.pop(name, None)
        torch_devx.diagnostics.set_setting(name, None)  # what the API set for this process
    torch_devx.diagnostics.override_kernel("mul.Tensor", None)
    torch_devx.diagnostics.override_kernel("add_.Tensor", None)
    torch_devx.diagnostics.reset_autocompare_stats()


DUMP_SCRIPT = textwrap.dedent("""
    import os, torch, torch_devx
    a = torch.arange(6.0, device="devx").reshape(2, 3)
    b = torch.ones(2, 3, device="devx")
    a + b                       # dump off: nothing printed
    os.environ["DIPU_DUMP_OP_ARGS"] = "1"
    a * b
    os.environ["DIPU_DUMP_OP_ARGS"] = "2"
    a.t().sub(1.5)
    os.environ["DIPU_DUMP_OP_ARGS"] = "3"
    torch.cos(a)
    os.environ["DIPU_DUMP_OP_ARGS"] = "0"
    a - b
""")


def test_dump_levels_switch_at_run_time():
    proc = run_python(DUMP_SCRIPT)
    assert_child_ok(proc)
    err = proc.stderr
    assert "aten::add.Tensor" not in err and "aten::sub.Tensor  kernel" in err
    # level 1: op and kernel, no arguments
    line = next(l for l in err.splitlines() if "aten::mul.Tensor" in l)
    assert line.endswith("op aten::mul.Tensor  kernel: devx  at <string>:7"), line  # the user's line, at every level
    assert "    self: Tensor" not in err.split("aten::mul.Tensor")[1].split("aten::")[0]
    # level 2: metadata of a transposed view: sizes, strides, is_view, dtype, device, scalar
    sub = err.split("aten::sub.Tensor  kernel")[1]
    assert "sizes [3, 2] strides [1, 3]" in sub and "is_view yes" in sub
    assert "dtype Float device devx:0" in sub and "data_ptr 0x" in sub
    assert "other:" in sub and "1.5" in sub
    assert "results:" in sub
    # level 3: values
    cos = err.split("aten::cos  kernel")[1]
    assert "values:" in cos and "0.5403" in cos  # cos(1)
    # back to 0: the last subtraction is not dumped
    assert err.count("aten::sub.Tensor  kernel") == 1


COPIES_SCRIPT = textwrap.dedent("""
    import os, torch, torch_devx
    host = torch.arange(4.0)
    os.environ["DIPU_DUMP_OP_ARGS"] = "2"
    a = host.to("devx")                      # line 5: host to device
    b = host.cuda()                          # line 6: the same through CUDA mocking
    c = a.cpu()                              # line 7: device to host
    d = a.clone()                            # line 8: on the device
    e = a.half()                             # line 9: a cast
    a.copy_(b)                               # line 10
    os.environ["DIPU_DUMP_OP_ARGS"] = "0"
    a.cpu()                                  # not dumped
""")


def _dump_blocks(err: str, op: str, part: str = "kernel") -> list[str]:
    """The dump records of `op`: its calls ("kernel", a line and the arguments' lines) or its
    results ("results")."""
    return [block for block in err.split("op aten::")[1:] if block.startswith(f"{op}  {part}")]


def test_dump_shows_copies_with_their_direction_and_line():
    proc = run_python(COPIES_SCRIPT)
    assert_child_ok(proc)
    copies = _dump_blocks(proc.stderr, "copy_")
    lines = [b.split("\n")[0] for b in copies]
    # one copy per line of the script, each with the user's line that issued it
    assert [l.split("  at ")[-1] for l in lines] == [f"<string>:{n}" for n in range(5, 11)], lines
    assert all("kernel: devx" in l for l in lines)
    # the arguments say where each copy goes: self is the destination, src the source
    to_devx, cuda, to_cpu, clone, half, copy = copies
    assert "self: Tensor sizes [4]" in to_devx and "device devx:0" in to_devx.split("src:")[0]
    assert "device cpu" in to_devx.split("src:")[1].split("\n")[0]
    assert "device cpu" in to_cpu.split("src:")[0] and "device devx:0" in to_cpu.split("src:")[1]
    assert "dtype Half" in half.split("src:")[0] and "dtype Float" in half.split("src:")[1]
    assert len(_dump_blocks(proc.stderr, "copy_", "results")) == 6
    assert "dtype Float device devx:0" in clone.split("src:")[0]
    assert "device devx:0" in copy.split("src:")[0] and "device devx:0" in copy.split("src:")[1]
    # the last copy, made after the switch is off, is not dumped
    assert len(copies) == 6


def test_dump_level_3_does_not_dump_its_own_copies_and_fallback_moves():
    code = textwrap.dedent("""
        import os, torch, torch_devx
        a = torch.arange(6.0, device="devx")
        os.environ["DIPU_DUMP_OP_ARGS"] = "3"
        os.environ["DIPU_FORCE_FALLBACK_OPS_LIST"] = "cos"
        b = torch.cos(a)
        os.environ["DIPU_DUMP_OP_ARGS"] = "0"
        print(b.cpu().tolist()[:2])
    """)
    proc = run_python(code)
    assert_child_ok(proc)
    assert "[1.0, 0.5403" in proc.stdout
    # reading the values to print and moving the arguments to the CPU are not the user's copies
    assert "aten::copy_" not in proc.stderr, proc.stderr
    assert "aten::cos  kernel: cpu fallback (forced)  at <string>:6" in proc.stderr


def test_forcing_copies_to_the_cpu_fallback():
    code = textwrap.dedent("""
        import os, torch, torch_devx
        os.environ["DIPU_FORCE_FALLBACK_OPS_LIST"] = "copy_"
        a = torch.arange(5.0).to("devx")
        b = (a * 2).cpu()
        c = a.clone().half()
        print(b.tolist(), c.cpu().tolist(), torch_devx.diagnostics.fallback_stats().get("copy_"))
    """)
    proc = run_python(code)
    assert_child_ok(proc)
    assert "[0.0, 2.0, 4.0, 6.0, 8.0] [0.0, 1.0, 2.0, 3.0, 4.0] " in proc.stdout, proc.stdout
    assert int(proc.stdout.split()[-1]) >= 4  # to, cpu, clone, half (and the last .cpu())
    assert "forced to the CPU: copy_" in proc.stderr and "forces nothing" not in proc.stderr


VALUES_SCRIPT = textwrap.dedent("""
    import os, torch, torch_devx
    big = torch.arange(1000.0, device="devx")
    big[3] = float("nan")
    big[5] = float("inf")
    small = torch.arange(4, device="devx")
    os.environ["DIPU_DUMP_OP_ARGS"] = "3"
    big.neg()                                # line 8
    small.neg()                              # line 9
    os.environ["DEVX_DUMP_OP_ARGS_MAX_ELEMENTS"] = "4"
    small.abs()                              # line 11
    os.environ["DIPU_DUMP_OP_ARGS"] = "0"
""")


def test_dump_values_are_capped_with_head_tail_and_statistics():
    proc = run_python(VALUES_SCRIPT)
    assert_child_ok(proc)
    err = proc.stderr
    neg = _dump_blocks(err, "neg")
    assert len(neg) == 2
    args = neg[0]
    assert args.split("\n")[0].endswith("at <string>:8")
    values = next(l for l in args.split("\n") if "values:" in l)
    # its own line, first 8 and last 8 of 1000 elements
    assert values.strip() == "values: [0, 1, 2, nan, 4, inf, 6, 7, ..., 992, 993, 994, 995, 996, 997, 998, 999] " \
                             "(first 8 and last 8 of 1000)", values
    stats = next(l for l in args.split("\n") if "stats:" in l)
    # nan is counted and left out of min, max and mean; inf is a value
    assert stats.strip() == "stats: min 0  max inf  mean inf  nan 1  inf 1", stats
    results = _dump_blocks(err, "neg", "results")[0]
    assert "values: [-0, -1, -2, nan, -4, -inf, -6, -7, ..., -992," in results
    assert "stats: min -inf  max -0  mean -inf  nan 1  inf 1" in results
    # under the cap: every value, no statistics; integers as integers
    small = neg[1]
    assert "values: [0, 1, 2, 3]" in small and "stats:" not in small
    # a cap of 4 is exactly small's size: still every value
    absolute = _dump_blocks(err, "abs")[0]
    assert "values: [0, 1, 2, 3]" in absolute
    assert "Columns" not in err and "[ devx" not in err


def test_dump_cap_setting_is_validated_and_zero_prints_statistics_only(diag):
    for bad in ("-1", "many", "1.5"):
        proc = run_python(f"import os, torch_devx\nos.environ['DEVX_DUMP_OP_ARGS_MAX_ELEMENTS'] = {bad!r}\n")
        assert proc.returncode == 1 and "ValueError" in proc.stderr, proc.stderr
        assert "DEVX_DUMP_OP_ARGS_MAX_ELEMENTS" in proc.stderr
    with pytest.raises(ValueError, match="max_elements"):
        diag.set_dump_op_args(3, max_elements=-2)
    code = textwrap.dedent("""
        import torch, torch_devx
        x = torch.tensor([1.0, -2.0, 4.0], device="devx")
        torch_devx.diagnostics.set_dump_op_args(3, max_elements=0)
        x.exp()
        torch_devx.diagnostics.set_dump_op_args(0)
    """)
    proc = run_python(code)
    assert_child_ok(proc)
    args = _dump_blocks(proc.stderr, "exp")[0]
    assert "values: 3 elements, not printed (DEVX_DUMP_OP_ARGS_MAX_ELEMENTS=0)" in args
    assert "stats: min -2  max 4  mean 1  nan 0  inf 0" in args


def test_dump_of_the_backward_pass_names_the_forward_line_and_node():
    code = textwrap.dedent("""
        import os, torch, torch_devx
        w = torch.randn(3, 4, device="devx", requires_grad=True)
        x = torch.randn(2, 3, device="devx")
        os.environ["DIPU_DUMP_OP_ARGS"] = "1"
        y = (x @ w).tanh()                       # line 6
        y.sum().backward()                       # line 7
        os.environ["DIPU_DUMP_OP_ARGS"] = "0"
    """)
    proc = run_python(code)
    assert_child_ok(proc)
    lines = [l for l in proc.stderr.splitlines() if l.startswith("[devx OPS INFO] op aten::")]
    assert any(l.endswith("aten::mm  kernel: devx  at <string>:6") for l in lines), lines
    # tanh's gradient and the matmul's, each named after its forward line and autograd node
    assert any("aten::tanh_backward  kernel: devx  at <string>:6 (backward: TanhBackward0)" in l for l in lines), lines
    assert any("aten::mm  kernel: devx  at <string>:6 (backward: MmBackward0)" in l for l in lines), lines


def test_bad_dump_level_is_a_value_error():
    proc = run_python("import os, torch_devx\nos.environ['DIPU_DUMP_OP_ARGS'] = '7'\n")
    assert proc.returncode == 1, proc.stderr
    assert "ValueError" in proc.stderr and "DIPU_DUMP_OP_ARGS" in proc.stderr


def test_autocompare_matching_ops_and_stats(diag):
    a = torch.randn(4, 5, device="devx")
    b = torch.randn(4, 5, device="devx")
    diag.set_autocompare(True)
    (a * b).add_(1)
    torch.max(a, dim=1)
    torch.nn.functional.conv2d(torch.randn(1, 2, 5, 5, device="devx"), torch.randn(3, 2, 3, 3, device="devx"))
    torch.rand(3, device="devx")  # random: not compared
    stats = diag.autocompare_stats()
    assert stats["mul.Tensor"] == (1, 0)
    assert stats["add_.Tensor"] == (1, 0)
    assert stats["max.dim"] == (1, 0)
    assert stats["convolution_overrideable"] == (1, 0)
    assert not any(op.startswith("uniform") for op in stats)


def test_autocompare_catches_a_wrong_kernel(diag):
    a = torch.randn(3, 4, device="devx")
    b = torch.randn(3, 4, device="devx")
    # A planted fault: "mul" that adds.
    diag.override_kernel("mul.Tensor", lambda x, y: torch.ops.aten.add.Tensor(x, y))
    diag.set_autocompare(["mul.*"])
    wrong = a * b
    assert diag.autocompare_stats()["mul.Tensor"] == (0, 1)
    torch.testing.assert_close(wrong.cpu(), a.cpu() + b.cpu())  # the override really ran
    diag.set_autocompare(["mul.*"], raise_on_mismatch=True)
    with pytest.raises(RuntimeError) as info:
        a * b
    message = str(info.value)
    assert "mul.Tensor" in message and "differs from the CPU" in message and "max abs" in message and "max rel" in message
    assert "self: Tensor sizes [3, 4]" in message
    assert "test_diagnostics.py:" in message  # the Python line that called the op
    diag.override_kernel("mul.Tensor", None)
    torch.testing.assert_close((a * b).cpu(), a.cpu() * b.cpu())


def test_autocompare_catches_a_kernel_that_writes_its_input(diag):
    a = torch.randn(5, device="devx")
    b = torch.randn(5, device="devx")

    def clobbering_add_(self, other, alpha=1):
        other.zero_()  # writes an argument the schema says is read-only
        return self

    diag.override_kernel("add_.Tensor", clobbering_add_)
    diag.set_autocompare(["add_.*"])
    a.add_(b)
    assert diag.autocompare_stats()["add_.Tensor"] == (0, 1)


def test_autocompare_of_the_long_tail_and_env_switch(diag):
    x = torch.randn(16, device="devx")
    os.environ["DIPU_AUTOCOMPARE_OPS_LIST"] = "_fft_.*,cos"
    torch.cos(x)
    os.environ["DIPU_AUTOCOMPARE_OPS_LIST"] = ""
    torch.cos(x)
    assert diag.autocompare_stats().get("cos") == (1, 0)


LEAK_SCRIPT = textwrap.dedent("""
    import torch, torch_devx
    keep = []
    def make_buffers():
        keep.append(torch.zeros(1000, device="devx"))  # LEAK
    temporary = torch.ones(10, device="devx")
    del temporary
    make_buffers()
    print("live", torch_devx._C._mem_check_live())
""")


def test_mem_check_reports_a_leak_with_size_and_line():
    proc = run_python(LEAK_SCRIPT, DIPU_MEM_CHECK="1")
    assert_child_ok(proc)
    assert "live 1" in proc.stdout
    report = proc.stderr
    assert "1 allocation (4000 bytes) not released" in report
    group = next(l for l in report.splitlines() if "<string>:5" in l)  # the line of the LEAK
    assert group.split() == ["3.9", "KiB", "1x", "devx:0", "<string>:5", "aten::zeros"], group
    assert "C++ backtrace" not in report


def test_mem_check_backtraces_and_off_switch():
    proc = run_python(LEAK_SCRIPT, DIPU_MEM_CHECK="1", DIPU_MEM_CHECK_ENABLE_BACKTRACE="1")
    assert_child_ok(proc)
    assert "Python stack (most recent call last):" in proc.stderr and "make_buffers" in proc.stderr
    assert "C++ backtrace:" in proc.stderr and "empty" in proc.stderr
    proc = run_python(LEAK_SCRIPT, DIPU_MEM_CHECK="0")
    assert_child_ok(proc)
    assert "live 0" in proc.stdout and "not released" not in proc.stderr
    proc = run_python(LEAK_SCRIPT, DIPU_MEM_CHECK="maybe")
    assert proc.returncode == 1 and "DIPU_MEM_CHECK" in proc.stderr and "ValueError" in proc.stderr


def test_mem_check_on_demand_while_running():
    code = textwrap.dedent("""
        import os, torch, torch_devx
        os.environ["DIPU_MEM_CHECK"] = "1"
        a = torch.empty(256, device="devx")
        b = torch.empty(512, device="devx")
        del a
        print(torch_devx.diagnostics.mem_check_report())
        del b
        print(torch_devx.diagnostics.mem_check_report())
    """)
    proc = run_python(code)
    assert_child_ok(proc)
    first, second = proc.stdout.split("devx memory check:")[1:3]
    assert "1 allocation (2048 bytes)" in first and "2.0 KiB    1x  devx:0  <string>:5  aten::empty" in first
    assert "0 allocations (0 bytes)" in second


GPT_LEAK_SCRIPT = textwrap.dedent("""
    import torch, torch_devx
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)                      # line 16
            q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))                   # line 20

    class GPT(nn.Module):
        def __init__(self, vocab=64, d=32, layers=2, heads=4, ctx=16):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
            self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    torch.manual_seed(0)
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    seen = []
    for step in range(8):
        idx = torch.randint(0, 64, (4, 16), device="cuda")
        logits = model(idx)
        loss = F.cross_entropy(logits.flatten(0, 1), idx.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen.append(logits.softmax(-1))                                          # line 47: LEAK
""")


def test_mem_check_report_of_a_gpt_leak_is_grouped_and_names_the_leak_first():
    proc = run_python(GPT_LEAK_SCRIPT, DIPU_MEM_CHECK="1")
    assert_child_ok(proc)
    report = proc.stderr[proc.stderr.index("devx memory check:"):].rstrip().splitlines()
    assert len(report) <= 40, "\n".join(report)
    text = "\n".join(report)
    # the first group is the leak: 8 softmax results of 16 KiB, kept by a Python list
    assert report[1].startswith("  held by Python objects"), text
    assert report[2].split()[:6] == ["128.0", "KiB", "8x", "devx:0", "<string>:47", "aten::softmax"], text
    sections = [l.split(":")[0].strip() for l in report if l.startswith("  ") and not l.startswith("    ")]
    assert sections[-3:] == ["gradients (.grad)", "optimizer state", "module parameters and buffers"], text
    # gradients are attributed to the forward line they differentiate and to their autograd node
    grads = text.split("gradients (.grad)")[1].split("optimizer state")[0]
    assert "<string>:16  AddmmBackward0 (backward)" in grads or "<string>:20  AddmmBackward0 (backward)" in grads, text
    assert "?" not in grads.split("\n", 1)[1], text
    # optimizer state comes from the line that ran opt.step()
    optimizer = text.split("optimizer state")[1].split("module parameters")[0]
    assert "<string>:46" in optimizer, text
    params = text.split("module parameters and buffers")[1]
    assert "<string>:37" in params, text  # model = GPT().cuda()


def test_mem_check_one_stack_per_group_and_interval_summaries():
    proc = run_python(GPT_LEAK_SCRIPT, DIPU_MEM_CHECK="1", DIPU_MEM_CHECK_ENABLE_BACKTRACE="1",
                      DIPU_MEM_CHECK_LOG_INTERVAL="100")
    assert_child_ok(proc)
    report = proc.stderr[proc.stderr.index("devx memory check:"):]
    groups = [l for l in report.splitlines() if l.startswith("    ") and "x  devx:" in l]
    # Forward allocations carry their Python stack. On cpu_sim the backward runs on the thread
    # that called .backward(), so its allocations may carry that stack too (on a device thread, or
    # allocated by a stream's worker, they have none).
    forward = [g for g in groups if "(backward)" not in g]
    stacks = report.count("Python stack (most recent call last):")
    assert len(forward) > 3 and len(forward) <= stacks <= len(groups), (stacks, groups)
    assert report.count("C++ backtrace:") == len(groups)
    summaries = [l for l in proc.stderr.splitlines() if "memory check after " in l]
    assert re.search(r"memory check after 100 allocations: \d+ live \([\d.]+ [KM]iB\); largest origins:$",
                     summaries[0]), summaries[0]
    # every 100th allocation, each with its five largest origins
    assert [int(l.split("after ")[1].split()[0]) for l in summaries] == [100 * (i + 1) for i in range(len(summaries))]
    first = proc.stderr.split(summaries[0])[1].splitlines()[1:6]
    assert all(re.match(r"\s+[\d.]+ [KM]?i?B\s+\d+x  <string>:\d+  \S+", l) for l in first), first


def test_mem_check_log_interval_is_validated():
    proc = run_python("import torch_devx", DIPU_MEM_CHECK_LOG_INTERVAL="-5")
    assert proc.returncode == 1 and "ValueError" in proc.stderr and "DIPU_MEM_CHECK_LOG_INTERVAL" in proc.stderr


TRACE_SCRIPT = textwrap.dedent("""
    import os, torch, torch_devx
    x = torch.randn(100, device="devx")
    torch.devx.empty_cache()
    os.environ["DEVX_TRACE_RUNTIME"] = "sync=1,malloc=1,memcpy=1"
    for _ in range(3):
        value = (x * 2).sum().item()          # line 7: three host waits
    big = torch.empty(64 << 20, dtype=torch.uint8, device="devx")  # line 8: a new segment
    torch.devx.synchronize()                  # line 9
    os.environ["DEVX_TRACE_RUNTIME"] = "0"
    x.cpu()                                   # not traced
    print(torch_devx.diagnostics.sync_summary())
""")


def test_runtime_trace_logs_calls_and_sums_host_waits():
    proc = run_python(TRACE_SCRIPT)
    assert_child_ok(proc)
    err = proc.stderr
    assert "[devx TRACE INFO] stream_synchronize(" in err and "at <string>:7" in err
    assert "malloc(0, 67108864" in err  # the 64 MiB segment, with its arguments
    assert "memcpy_async(" in err and " us" in err
    assert "device_synchronize(0)" in err and "at <string>:9" in err
    assert "at <string>:11" not in err  # tracing off again
    rows = [l.split() for l in proc.stdout.splitlines()[1:]]
    waits = {r[2]: int(r[0]) for r in rows}
    assert waits["<string>:7"] == 3 and waits["<string>:9"] == 1
    assert "<string>:11" not in waits


def test_sync_summary_rows_name_the_module_path():
    # A host wait inside a layer's forward: every layer shares the line, the path says which one.
    proc = run_python(textwrap.dedent("""
        import os, torch, torch_devx
        class Block(torch.nn.Module):
            def __init__(self, check):
                super().__init__()
                self.fc, self.check = torch.nn.Linear(4, 4), check
            def forward(self, x):
                y = self.fc(x)
                if self.check:
                    y.sum().item()                    # line 10: a host wait in blocks.1 only
                return y
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = torch.nn.ModuleList([Block(False), Block(True)])
            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                return x
        net = Net().to("devx")
        x = torch.ones(2, 4, device="devx")
        os.environ["DEVX_TRACE_RUNTIME"] = "sync=1"
        net(x)
        x.sum().item()                                # line 24: outside any module
        os.environ["DEVX_TRACE_RUNTIME"] = "0"
        print(torch_devx.diagnostics.sync_summary())
    """))
    assert_child_ok(proc)
    rows = proc.stdout.splitlines()[1:]
    assert any(r.rstrip().endswith("<string>:10 in blocks.1 (Block)") for r in rows), rows
    assert any(r.rstrip().endswith("<string>:24") for r in rows), rows


def test_runtime_trace_bad_value():
    proc = run_python("import torch_devx", DEVX_TRACE_RUNTIME="sync=3")
    assert proc.returncode == 1 and "DEVX_TRACE_RUNTIME" in proc.stderr and "ValueError" in proc.stderr


def test_one_logger_for_cpp_and_python_with_a_file_per_process(tmp_path):
    code = textwrap.dedent("""
        import logging, os, torch, torch_devx
        logging.getLogger("torch_devx.demo").info("python says hello")
        logging.getLogger("torch_devx.demo").debug("below the PYTHON level")
        os.environ["DIPU_FORCE_FALLBACK_OPS_LIST"] = "mul.*"
        torch.ones(2, device="devx") * 3
        print(os.getpid())
    """)
    proc = run_python(code, DEVX_LOG_PATH=str(tmp_path / "logs"), DEVX_LOG_LEVEL="WARN,PYTHON=INFO")
    assert_child_ok(proc)
    log_file = tmp_path / "logs" / f"devx_{proc.stdout.strip()}.log"
    text = log_file.read_text()
    assert "[devx PYTHON INFO] torch_devx.demo: python says hello" in text
    assert "below the PYTHON level" not in text
    assert "[devx FALLBACK WARN] op mul.Tensor runs on the CPU" in text
    assert "python says hello" not in proc.stderr  # the file replaces stderr


def test_bad_log_settings_are_value_errors():
    proc = run_python("import torch_devx", DEVX_LOG_LEVEL="WARN,OPS=LOUD")
    assert proc.returncode == 1 and "DEVX_LOG_LEVEL" in proc.stderr and "LOUD" in proc.stderr
    proc = run_python("import torch_devx", DEVX_LOG_LEVEL="NOPE=INFO")
    assert proc.returncode == 1 and "unknown module 'NOPE'" in proc.stderr


def test_op_hook_sees_selected_ops_with_arguments_and_results(diag):
    seen = []
    a = torch.arange(4.0, device="devx")
    diag.set_op_hook(lambda op, args, results: seen.append((op, args, results)), ["mul.Tensor", "cos"])
    try:
        b = a * a
        torch.cos(a)
        a + a  # not selected
    finally:
        diag.set_op_hook(None)
    a * a  # hook removed
    assert [s[0] for s in seen] == ["mul.Tensor", "cos"]
    op, args, results = seen[0]
    assert args[0].device.type == "devx" and torch.equal(results[0].cpu(), b.cpu())


def test_runtime_hook_sees_vendor_calls(diag):
    events = []
    x = torch.randn(8, device="devx")
    diag.set_runtime_hook(lambda kind, call, args, status, us: events.append((kind, call, status)), ["sync", "memcpy"])
    try:
        x.sum().item()
        torch.devx.synchronize()
    finally:
        diag.set_runtime_hook(None)
    x.cpu()  # not seen once removed
    calls = [c for _, c, _ in events]
    assert "memcpy_async" in calls and "stream_synchronize" in calls and calls[-1] == "device_synchronize"
    assert all(status == 0 for _, _, status in events)
    assert {k for k, _, _ in events} <= {"sync", "memcpy"}
    with pytest.raises(ValueError, match="unknown runtime event kind"):
        diag.set_runtime_hook(print, ["kernels"])


ALL_SWITCHES = dict(DIPU_DUMP_OP_ARGS="2", DIPU_AUTOCOMPARE="1", DIPU_MEM_CHECK="1", DIPU_FORCE_FALLBACK_OPS_LIST="mul",
                    DEVX_TRACE_RUNTIME="all=1")


def test_with_every_switch_on_an_empty_script_prints_nothing():
    proc = run_python("import torch, torch_devx", **ALL_SWITCHES)
    assert_child_ok(proc)
    assert proc.stdout == "" and proc.stderr == ""


def test_the_exit_drain_runs_only_on_used_devices_and_is_not_reported():
    proc = run_python("""
        import sys, torch, torch_devx
        from torch_devx import _exit
        x = torch.ones(2, device="devx:0", requires_grad=True)
        (x * 2).sum().backward()
        print("user done", file=sys.stderr, flush=True)
        _exit._settle_at_exit()
        print("devx:1 allocations", torch.devx.memory_stats(1).get("allocation.all.allocated", 0))
    """, **ALL_SWITCHES)
    assert_child_ok(proc)
    assert "devx:1 allocations 0" in proc.stdout
    user_part, _, drain_part = proc.stderr.partition("user done")
    assert "mul" in user_part  # the user's own ops are reported ...
    # ... the drain's are not: nothing is logged after the user's last line (only the exit reports).
    assert [line for line in drain_part.splitlines() if line.startswith("[devx")] == []


def test_autocompare_reports_the_mismatch_alone_and_a_summary_at_exit():
    proc = run_python("""
        import torch, torch_devx
        from torch_devx import diagnostics as d
        a = torch.randn(3, device="devx")
        d.override_kernel("mul.Tensor", lambda x, y: torch.ops.aten.add.Tensor(x, y))
        for _ in range(5):
            a + a
        a * a
    """, DIPU_AUTOCOMPARE="1")
    assert_child_ok(proc)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("[devx") and "autocompare:" in line]
    [mismatch] = lines  # the passes are counted, not printed
    assert mismatch.startswith("[devx OPS WARN] autocompare: mul.Tensor on devx differs from the CPU: result: max abs")
    assert "(rtol 1.3e-06, atol 1e-05); called from <string>:8" in mismatch
    # The override's own add is checked too: 5 + 1 adds.
    assert "devx autocompare: 7 checks of 2 ops, 1 differed from the CPU" in proc.stderr
    summary = proc.stderr.split("differed  op")[1].split("\n")
    assert summary[1].split() == ["1", "1", "mul.Tensor"] and summary[2].split() == ["6", "0", "add.Tensor"]


# --- bad input and files the diagnostics are given


@pytest.mark.parametrize("name", ["not_an_op.Tensor", "add.NoSuchOverload", "relu.default", "mul", ""])
def test_override_kernel_of_a_name_no_op_has_is_a_value_error(diag, name):
    with pytest.raises(ValueError, match="names no aten op overload"):
        diag.override_kernel(name, lambda *args: None)
    a = torch.arange(3.0, device="devx")
    assert torch.equal((a * a).cpu(), torch.tensor([0.0, 1.0, 4.0]))


def test_dumping_values_of_complex_tensors_warns_nothing():
    code = textwrap.dedent("""
        import os, warnings
        warnings.simplefilter("error")
        import torch, torch_devx
        os.environ["DIPU_DUMP_OP_ARGS"] = "3"
        z = torch.tensor([1 + 2j, 3 - 4j], device="devx")
        w = (z * z).conj()
        os.environ["DIPU_DUMP_OP_ARGS"] = "0"
        print(w.cpu().tolist())
    """)
    proc = run_python(code)
    assert_child_ok(proc)
    assert "[(-3-4j), (-7+24j)]" in proc.stdout, proc.stdout
    # the values are there, as (real, imaginary) pairs
    assert "values:" in proc.stderr and "-7" in proc.stderr and "24" in proc.stderr, proc.stderr


def test_a_raising_runtime_hook_changes_nothing_the_runtime_does(diag):
    import sys

    torch.devx.synchronize()
    torch.devx.empty_cache()
    free_before = torch.devx.mem_get_info(0)[0]
    reserved_before = torch.devx.memory_reserved(0)
    reported = []

    def hook(kind, call, args, status, us):
        raise KeyError(f"the hook refuses {call}")

    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: reported.append(str(u.exc_value))
    diag.set_runtime_hook(hook, ["malloc", "free"])
    try:
        x = torch.ones(8 << 20, device="devx")  # 32 MiB: a new segment from the vendor
        assert x.sum().item() == 8 << 20
        del x
        torch.devx.empty_cache()  # the segment goes back to the vendor
    finally:
        diag.set_runtime_hook(None)
        sys.unraisablehook = old_hook
    assert any("refuses malloc" in r for r in reported), reported
    assert any("refuses free" in r for r in reported), reported
    assert torch.devx.memory_reserved(0) == reserved_before
    assert torch.devx.mem_get_info(0)[0] == free_before


LOG_PATH_CHILD = """
import logging, os, torch, torch_devx
os.environ["DEVX_LOG_LEVEL"] = "WARN,PYTHON=INFO"
os.environ["DEVX_LOG_PATH"] = os.environ["GOOD_DIR"]
try:
    os.environ["DEVX_LOG_PATH"] = os.environ["BAD_PATH"]
except ValueError as e:
    print("ERROR", e)
logging.getLogger("torch_devx.demo").info("still logged")
print(os.getpid())
"""


def _bad_log_paths(tmp_path):
    regular = tmp_path / "a_file"
    regular.write_text("not a folder")
    return {"regular_file": str(regular), "under_a_file": str(regular / "logs"),
            "unwritable": "/proc/self/devx_logs"}


@pytest.mark.parametrize("case", ["regular_file", "under_a_file", "unwritable"])
def test_a_log_path_that_cannot_be_written_is_a_value_error_at_import(tmp_path, case):
    bad = _bad_log_paths(tmp_path)[case]
    proc = run_python("import torch_devx", DEVX_LOG_PATH=bad)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError") and "DEVX_LOG_PATH" in last and bad in last, proc.stderr


@pytest.mark.parametrize("case", ["regular_file", "under_a_file", "unwritable"])
def test_a_log_path_that_cannot_be_written_is_a_value_error_on_change_and_the_log_stays(tmp_path, case):
    good = tmp_path / "good"
    bad = _bad_log_paths(tmp_path)[case]
    proc = run_python(LOG_PATH_CHILD, GOOD_DIR=str(good), BAD_PATH=bad)
    assert_child_ok(proc)
    assert f"ERROR DEVX_LOG_PATH='{bad}'" in proc.stdout, proc.stdout
    pid = proc.stdout.strip().splitlines()[-1]
    assert "still logged" in (good / f"devx_{pid}.log").read_text()


def test_the_log_file_does_not_follow_a_planted_link(tmp_path):
    logs, target = tmp_path / "logs", tmp_path / "precious"
    logs.mkdir()
    target.write_text("keep me\n")
    code = textwrap.dedent(f"""
        import os, torch, torch_devx
        os.symlink({str(target)!r}, os.path.join({str(logs)!r}, f"devx_{{os.getpid()}}.log"))
        try:
            os.environ["DEVX_LOG_PATH"] = {str(logs)!r}
        except ValueError as e:
            print("ERROR", e)
    """)
    proc = run_python(code)
    assert_child_ok(proc)
    assert "ERROR DEVX_LOG_PATH=" in proc.stdout and "symbolic link" in proc.stdout, proc.stdout
    assert target.read_text() == "keep me\n"


def test_aten_compute_calls_count_every_thread_including_ended_ones(diag):
    # Counted per thread (no shared atomic on the hot path): a thread's count must survive its end.
    import threading

    a = torch.ones(4, device="devx")
    a * a  # the first op issued asynchronously runs one more compute call
    torch.devx.synchronize()
    diag.reset_kernel_stats()
    a * a
    torch.devx.synchronize()
    per_op = diag.kernel_stats()["aten"]
    assert per_op == 1

    def work() -> None:
        for _ in range(5):
            a * a

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.devx.synchronize()
    assert diag.kernel_stats()["aten"] == 16 * per_op
