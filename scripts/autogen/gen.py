"""Generates the devx op wrappers from ops.yaml and PyTorch's own op model (torchgen).

For every overload in the table it writes two functions into one of N shard files:
  * a compute kernel: runs ATen's kernel of the vendor's compute device on aliases of the devx
    arguments (scope.in / scope.out / scope.sync_back in csrc/aten/compute_scope.h);
  * the wrapper registered for PrivateUse1: device guard -> diagnostics gate -> the vendor's
    kernel table (ATen's kernels issued on the stream when kernels are host functions on
    streams, csrc/aten/async_ops.h; the vendor's own kernels queue themselves) -> CPU fallback.
Schemas, C++ types and alias annotations all come from torchgen; nothing here parses a schema.
"""
from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field

import torchgen
import yaml
from torchgen.api.types import DispatcherSignature
from torchgen.context import native_function_manager
from torchgen.gen import parse_native_yaml
from torchgen.model import BaseTy, BaseType, ListType, NativeFunction, OptionalType, Type

from kernel_abi import Kernel, header, parse_kernel, serves

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Entry:
    f: NativeFunction
    call: str | None = None
    includes: set[str] = field(default_factory=set)
    kernel: Kernel | None = None
    # The dtype ("long" or "self") of an output whose size depends on the data (nonzero): no meta
    # function can give its shape, so the kernel sizes it.
    dynamic_output: str | None = None
    # The op has no meta function (no Meta kernel, C++ or Python): the adapters of its in-place and
    # out= forms call the kernel on the arguments as given (the kernel checks them), and its
    # functional form, whose outputs nothing could size, has no adapter.
    no_meta: bool = False

    @property
    def name(self) -> str:
        return str(self.f.func.name)

    @property
    def ident(self) -> str:
        return self.f.func.name.unambiguous_name()


def load_native_functions() -> list[NativeFunction]:
    packaged = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native")
    parsed = parse_native_yaml(
        os.path.join(packaged, "native_functions.yaml"), os.path.join(packaged, "tags.yaml")
    )
    return parsed.native_functions


def expand_table(table: list, fns: list[NativeFunction]) -> tuple[list[Entry], list[Kernel]]:
    by_name = {str(f.func.name): f for f in fns}
    by_ident = {f.func.name.unambiguous_name(): f for f in fns}
    by_signature: dict[object, list[NativeFunction]] = {}
    for f in fns:
        by_signature.setdefault(f.func.signature(), []).append(f)

    entries: dict[str, Entry] = {}
    kernels: dict[str, Kernel] = {}
    for raw in table:
        spec = {"op": raw} if isinstance(raw, str) else dict(raw)
        unknown = set(spec) - {"op", "only", "call", "kernel", "dynamic_output", "meta"}
        if unknown:
            raise SystemExit(f"ops.yaml: entry {spec} has unknown keys {sorted(unknown)}")
        if "op" not in spec:
            # A kernel the core calls from hand-written code (copy_), registering no op.
            kernel = parse_kernel(spec["kernel"], spec["kernel"], by_name, len(kernels))
            kernels[kernel.name] = kernel
            continue
        name = spec["op"]
        if name not in by_name:
            raise SystemExit(f"ops.yaml: '{name}' is not an overload in native_functions.yaml")
        root = by_name[name]
        group = [root] if spec.get("only") or spec.get("call") else by_signature[root.func.signature()]
        kernel = None
        if spec.get("kernel"):
            kernel = parse_kernel(spec["kernel"], name, by_name, len(kernels))
            if kernel.name in kernels:
                raise SystemExit(f"ops.yaml: {name}: kernel '{kernel.name}' is declared twice")
            if not any(serves(kernel, f) for f in group):
                raise SystemExit(f"ops.yaml: {name}: kernel '{kernel.name}' serves none of its variants")
            kernels[kernel.name] = kernel
        for f in group:
            if draws_from_default_generator(f):
                continue
            if f.has_composite_implicit_autograd_kernel and not has_backend_kernel(f):
                if f is root:
                    raise SystemExit(
                        f"ops.yaml: '{name}' is CompositeImplicitAutograd; list the ops it decomposes into"
                    )
                continue
            key = str(f.func.name)
            if key in entries:
                continue
            e = Entry(f, spec.get("call"))
            e.includes.add(f.root_name)
            no_meta = spec.get("meta", True) is False
            if kernel and serves(kernel, f) and not (no_meta and f.func.kind().name == "functional"):
                e.kernel = kernel
                e.dynamic_output = spec.get("dynamic_output")
                e.no_meta = no_meta
            if e.call:
                for ident in re.findall(r"at::_ops::(\w+)::", e.call):
                    if ident not in by_ident:
                        raise SystemExit(f"ops.yaml: '{name}' calls unknown at::_ops::{ident}")
                    e.includes.add(by_ident[ident].root_name)
            entries[key] = e
    return list(entries.values()), list(kernels.values())


def draws_from_default_generator(f: NativeFunction) -> bool:
    """Random overloads without a generator argument (randperm(n)) forward to their generator
    overload through a composite kernel. Left to that kernel they reach devx's generator; run on
    the compute device directly they would draw from the CPU's default generator instead."""
    takes_generator = any(classify(a.type) == "generator" for a in f.func.arguments.flat_all)
    return (
        "nondeterministic_seeded" in f.tags
        and not takes_generator
        and f.has_composite_explicit_autograd_kernel
    )


def has_backend_kernel(f: NativeFunction) -> bool:
    """Ops that are composite for other backends but have real CPU kernels may be registered."""
    return f.structured_delegate is not None or any(str(k) == "CPU" for k in f.dispatch)


def is_tensor(t: Type) -> bool:
    return isinstance(t, BaseType) and t.name == BaseTy.Tensor


def classify(t: Type) -> str:
    """How an argument of type `t` crosses into the compute device."""
    if is_tensor(t):
        return "tensor"
    if isinstance(t, OptionalType) and is_tensor(t.elem):
        return "opt_tensor"
    if isinstance(t, ListType) and is_tensor(t.elem):
        return "tensor_list"
    if isinstance(t, ListType) and isinstance(t.elem, OptionalType) and is_tensor(t.elem.elem):
        return "opt_tensor_list"
    base = t.elem if isinstance(t, OptionalType) else t
    if isinstance(base, BaseType) and base.name == BaseTy.Generator:
        return "generator"
    if isinstance(base, BaseType) and base.name == BaseTy.Device:
        return "device"
    return "plain"


def gen_entry(e: Entry, op_index: int) -> tuple[str, str, str]:
    f = e.f
    sig = DispatcherSignature.from_schema(f.func)
    bindings = sig.arguments()
    ret_type = sig.returns_type().cpp_type()
    params = ", ".join(f"{b.type} {b.name}" for b in bindings)
    names = [b.name for b in bindings]
    fn_type = f"{ret_type}({', '.join(b.type for b in bindings)})"

    kinds = {b.name: classify(b.argument.type) for b in bindings}
    writes = {b.name for b in bindings if b.argument.annotation and b.argument.annotation.is_write}

    # The op's parameters outlive the scope: it need not hold their storages.
    body = ["  devx::ComputeScope scope{devx::ArgumentsOutliveScope()};"]
    call_args = []
    for b in bindings:
        kind = kinds[b.name]
        if kind in ("tensor", "opt_tensor", "tensor_list", "opt_tensor_list"):
            # Aliases are held by reference (the scope keeps them), which spares a copy's reference
            # counting; a written tensor's is mutable, as out= overloads take `Tensor&`. Written
            # optionals and lists are copies.
            if b.name in writes:
                ref = "&" if kind == "tensor" else ""
                body.append(f"  auto{ref} a_{b.name} = scope.in_written({b.name});")
            else:
                body.append(f"  const auto& a_{b.name} = scope.in({b.name});")
            call_args.append(f"a_{b.name}")
        elif kind == "generator":
            body.append(f"  auto a_{b.name} = scope.generator({b.name});")
            call_args.append(f"a_{b.name}")
        elif kind == "device":
            body.append(f"  auto a_{b.name} = scope.device({b.name});")
            call_args.append(f"a_{b.name}")
        else:
            call_args.append(b.name)
    call = e.call or f"at::_ops::{e.ident}::redispatch(ks, {', '.join(call_args)})"
    # Custom code that calls ops through the dispatcher again needs no compute key set.
    if re.search(r"\bks\b", call):
        body.insert(1, "  const c10::DispatchKeySet ks = scope.keyset();")

    returns = f.func.returns
    syncs = [f"  scope.sync_back({name}, a_{name});" for name in names if name in writes]

    def arg_for_alias(ret) -> str | None:
        if ret.annotation is None or not ret.annotation.is_write:
            return None
        for b in bindings:
            a = b.argument.annotation
            if a is not None and a.is_write and a.alias_set == ret.annotation.alias_set:
                return b.name
        raise SystemExit(f"gen: {e.name}: return aliases no argument")

    result = None
    if ret_type != "void":
        if len(returns) == 1:
            alias = arg_for_alias(returns[0])
            if alias:
                result = alias
            elif returns[0].type.is_tensor_like():
                result = "scope.out(std::move(r))"
            else:
                result = "r"
        else:
            parts = []
            for i, ret in enumerate(returns):
                alias = arg_for_alias(ret)
                if alias:
                    parts.append(alias)
                elif ret.type.is_tensor_like():
                    parts.append(f"scope.out(std::get<{i}>(std::move(r)))")
                else:
                    parts.append(f"std::get<{i}>(r)")
            result = f"{ret_type}({', '.join(parts)})"
    # An out= op returns its own argument: the kernel's result is not needed.
    uses_r = result is not None and re.search(r"\br\b", result) is not None
    body.append(f"  auto&& r = {call};" if uses_r else f"  {call};")
    body.extend(syncs)
    if result is not None:
        body.append(f"  return {result};")

    guard_args = [b.name for b in bindings if kinds[b.name] not in ("plain", "generator")]
    guard = f"devx::guard_device({', '.join(guard_args)})" if guard_args else "std::optional<c10::Device>()"
    arglist = ", ".join(names)
    maybe_return = "" if ret_type == "void" else "return "
    compute = (
        f"// {f.func}\n"
        f"{ret_type} compute_{e.ident}({params}) try {{\n" + "\n".join(body) + "\n}"
        f" catch (c10::NotImplementedError& e) {{\n"
        f"  devx::explain_compute_error(e, \"aten::{e.name}\");\n"
        f"  throw;\n"
        f"}}\n"
    )
    wrapper = (
        f"{ret_type} wrap_{e.ident}(c10::DispatchKeySet dks{', ' if params else ''}{params}) {{\n"
        f"  devx::DevxGuard guard({guard});\n"
        f"  if (C10_UNLIKELY(devx::diag::gate_open()) && devx::diag::intercepts({op_index})) {{\n"
        f"    {maybe_return}devx::call_boxed<{fn_type}>(devx::diag::slow_path(), {op_index}, dks{', ' if names else ''}{arglist});\n"
        f"    {'return;' if ret_type == 'void' else ''}\n"
        f"  }}\n"
        f"  if (auto fn = reinterpret_cast<{ret_type} (*)({', '.join(b.type for b in bindings)})>(devx::g_kernels[{op_index}])) {{\n"
        f"    if (C10_UNLIKELY(devx::g_async_host_streams) && devx::async::issuing() && devx::kernel_source({op_index}) == devx::KernelSource::kCompute) {{\n"
        f"      {maybe_return}devx::call_boxed<{fn_type}>(devx::async::issue_kernel(), {op_index}, dks{', ' if names else ''}{arglist});\n"
        f"      {'return;' if ret_type == 'void' else ''}\n"
        f"    }}\n"
        f"    {maybe_return}fn({arglist});\n"
        f"    {'return;' if ret_type == 'void' else ''}\n"
        f"  }}\n"
        f"  {maybe_return}devx::call_boxed<{fn_type}>(devx::fallback_kernel(), {op_index}, dks{', ' if names else ''}{arglist});\n"
        f"}}\n"
    )
    bench = ""
    if e.name in BENCH_OPS:
        # For bench/'s extension: this wrapper, and the same with the diagnostics compiled out.
        gate = wrapper[wrapper.index("  if (C10_UNLIKELY(devx::diag::gate_open())"):wrapper.index("  if (auto fn =")]
        bench = wrapper + "\n" + wrapper.replace(gate, "").replace(f"wrap_{e.ident}(", f"wrap_nodiag_{e.ident}(", 1)
    return compute + "\n" + wrapper, f'  m.impl("{e.name}", TORCH_FN(wrap_{e.ident}));', bench


def gen_adapter(e: Entry, op_index: int) -> str:
    """The adapter that serves variant `e` with its vendor kernel (csrc/aten/vendor_call.h)."""
    f, k = e.f, e.kernel
    sig = DispatcherSignature.from_schema(f.func)
    bindings = sig.arguments()
    by_name = {b.name: b for b in bindings}
    ret_type = sig.returns_type().cpp_type()
    params = ", ".join(f"{b.type} {b.name}" for b in bindings)
    fn_type = f"{ret_type}({', '.join(b.type for b in bindings)})"
    variant = f.func.kind().name

    body = [f"  devx::VendorCall call({op_index}, {k.index});"]

    # Boolean masks among advanced indices become the long indices of their nonzero elements
    # (as ATen does) before the meta function, which cannot know how many there are.
    expanded = {}
    for b in bindings:
        if classify(b.argument.type) == "opt_tensor_list":
            body.append(f"  auto x_{b.name} = call.expand_masks({b.name});")
            expanded[b.name] = f"x_{b.name}"

    # Meta copies are locals: out= overloads take their outputs by non-const reference.
    def meta_arg(b) -> str:
        if b.name in expanded:
            body.append(f"    auto m_{b.name} = call.meta({expanded[b.name]});")
            return f"m_{b.name}"
        kind = classify(b.argument.type)
        if kind in ("tensor", "opt_tensor", "tensor_list", "opt_tensor_list", "device"):
            writes = b.argument.annotation is not None and b.argument.annotation.is_write
            body.append(f"    auto m_{b.name} = call.{'meta_out' if writes and variant == 'out' else 'meta'}({b.name});")
            return f"at::ITensorListRef(m_{b.name})" if "ITensorListRef" in b.type else f"m_{b.name}"
        return b.name

    def meta_call() -> str:
        return f"at::_ops::{e.ident}::redispatch(devx::kMetaKeys, {', '.join(meta_arg(b) for b in bindings)})"

    outs = [a.name for a in k.args if a.output]
    if e.no_meta:
        out_expr = {outs[0]: "self"} if variant == "inplace" else {name: name for name in outs}
        if ret_type == "void":
            result = None
        elif variant == "inplace":
            result = "self"
        else:
            result = outs[0] if len(f.func.returns) == 1 else f"{ret_type}({', '.join(outs)})"
    elif e.dynamic_output:
        if len(outs) != 1:
            raise SystemExit(f"ops.yaml: {e.name}: dynamic_output needs a single output")
        if variant == "functional":
            dtype = "c10::kLong" if e.dynamic_output == "long" else "self.scalar_type()"
            body.append(f"  auto o0 = call.result_to_size({dtype});")
        out_expr = {outs[0]: "o0"} if variant == "functional" else (
            {outs[0]: "self"} if variant == "inplace" else {name: name for name in outs})
        result = outs[0] if variant == "out" else ("self" if variant == "inplace" else "o0")
    else:
        # The meta function's answer is cached per signature of the arguments (vendor_call.h).
        lookup = ", ".join(expanded.get(b.name, b.name) for b in bindings)
        list_outs = [r.type.is_list_like() is not None for r in f.func.returns]
        if variant == "functional":
            body += [f"  {'std::vector<at::Tensor>' if is_list else 'at::Tensor'} o{i};"
                     for i, is_list in enumerate(list_outs)]
            body.append(f"  if (const devx::MetaResult* hit = call.lookup({lookup})) {{")
            body += [f"    o{i} = call.{'result_list' if is_list else 'result'}(hit, {i});"
                     for i, is_list in enumerate(list_outs)]
            body.append("  } else {")
            body.append(f"    auto m = {meta_call()};")
            if len(outs) == 1:
                body.append("    o0 = call.result(m);")
            else:
                body += [f"    o{i} = call.result(std::get<{i}>(m));" for i in range(len(outs))]
            body.append(f"    call.remember({{{', '.join(f'c10::IValue(o{i})' for i in range(len(outs)))}}});")
            body.append("  }")
            out_expr = {name: f"o{i}" for i, name in enumerate(outs)}
            result = "o0" if len(outs) == 1 else f"{ret_type}({', '.join(f'o{i}' for i in range(len(outs)))})"
        elif variant == "inplace":
            body.append(f"  if (!call.lookup({lookup})) {{")
            body.append(f"    {meta_call()};")
            body.append("    call.remember({});")
            body.append("  }")
            out_expr = {outs[0]: "self"}
            result = None if ret_type == "void" else "self"
        else:
            out_ivalues = ", ".join(f"c10::IValue({name})" for name in outs)
            body.append(f"  if (const devx::MetaResult* hit = call.lookup({lookup})) {{")
            body.append(f"    call.resize_outputs_to(hit, {{{out_ivalues}}});")
            body.append("  } else {")
            body.append(f"    {meta_call()};")
            body.append("    call.resize_outputs();")
            body.append(f"    call.remember({{{out_ivalues}}});")
            body.append("  }")
            out_expr = {name: name for name in outs}
            if ret_type == "void":
                result = None
            elif len(f.func.returns) == 1:
                result = outs[0]
            else:
                result = f"{ret_type}({', '.join(outs)})"
    c_args = []
    for a in k.args:
        if a.output:
            c_args.append(f"call.out({out_expr[a.name]})")
        else:
            c_args.append(f"call.arg({expanded.get(a.name, a.name)})")
    body.append(f"  auto* fn = reinterpret_cast<{k.typedef}>(devx::g_vendor_kernels[{k.index}]);")
    body += [f"  auto c{i} = {c};" for i, c in enumerate(c_args)]
    args = ", ".join(["call.context()"] + [f"c{i}" for i in range(len(c_args))])
    body.append(f"  if (call.finish(call.ready() ? fn({args}) : DEVX_DECLINED)) {{")
    body.append(f"    return{' ' + result if result else ''};")
    body.append("  }")
    names = ", ".join(b.name for b in bindings)
    ret = "" if ret_type == "void" else "return "
    body.append(f"  {ret}devx::run_declined<{fn_type}>({op_index}{', ' if names else ''}{names});")
    return f"{ret_type} vendor_{e.ident}({params}) {{\n" + "\n".join(body) + "\n}\n"


# Binary ops (self, other, alpha) whose wrappers bench/'s extension times with and without the
# diagnostics gate (bench_wrappers.cpp, built into that extension only).
BENCH_OPS = ("add.Tensor", "sub.Tensor")


def write_if_changed(path: str, text: str) -> None:
    if os.path.exists(path):
        with open(path) as fh:
            if fh.read() == text:
                return
    with open(path, "w") as fh:
        fh.write(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--include-out", required=True, help="where the installed devx_kernels.h goes")
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--table", default=os.path.join(HERE, "ops.yaml"))
    args = parser.parse_args()

    with open(args.table) as fh:
        table = yaml.safe_load(fh)
    fns = load_native_functions()
    entries, kernels = expand_table(table, fns)
    os.makedirs(args.out, exist_ok=True)

    # Functional and in-place variants of structured ops get a CompositeExplicitAutogradNonFunctional
    # kernel that any backend without its own inherits, and that kernel computes through a
    # DispatchStub which has no devx entry. Those not in the table are registered at run time, to
    # the boxed compute kernel or the CPU fallback (a backend fallback ranks below composite kernels).
    native = {e.name for e in entries}
    inherited = sorted(
        str(f.func.name) for f in fns
        if f.structured_delegate is not None and str(f.func.name) not in native
    )
    write_if_changed(
        os.path.join(args.out, "fallback_ops.cpp"),
        "// Generated by scripts/autogen/gen.py. Do not edit.\n"
        "namespace devx::gen {\n\n"
        f"extern const int kNumInheritedStructured = {len(inherited)};\n"
        "extern const char* const kInheritedStructured[] = {\n"
        + "".join(f'    "{name}",\n' for name in inherited)
        + "};\n\n}  // namespace devx::gen\n",
    )

    names = ",\n".join(f'  {{"aten::{e.f.func.name.name}", "{e.f.func.name.overload_name}"}}' for e in entries)
    write_if_changed(
        os.path.join(args.out, "op_table.h"),
        "// Generated by scripts/autogen/gen.py. Do not edit.\n#pragma once\n\n"
        f"namespace devx::gen {{\nconstexpr int kNumOps = {len(entries)};\n"
        f"constexpr int kNumKernels = {max(len(kernels), 1)};\n}}\n",
    )
    os.makedirs(args.include_out, exist_ok=True)
    write_if_changed(os.path.join(args.include_out, "devx_kernels.h"), header(kernels))
    kernel_names = "".join(f'    "{k.name}",\n' for k in kernels) or '    "",\n'
    op_kernels = ", ".join(str(e.kernel.index if e.kernel else -1) for e in entries)
    op_meta = ", ".join("false" if e.dynamic_output or e.no_meta else "true" for e in entries)
    write_if_changed(
        os.path.join(args.out, "op_table.cpp"),
        "// Generated by scripts/autogen/gen.py. Do not edit.\n"
        '#include "aten/op_registry.h"\n\nnamespace devx {\n\n'
        f"const OpName kOpNames[gen::kNumOps] = {{\n{names}\n}};\n\n"
        f"extern const char* const kKernelNames[gen::kNumKernels] = {{\n{kernel_names}}};\n"
        f"extern const int kOpKernel[gen::kNumOps] = {{{op_kernels}}};\n"
        f"extern const bool kOpAdapterNeedsMeta[gen::kNumOps] = {{{op_meta}}};\n\n}}  // namespace devx\n",
    )

    bench_code, bench_includes, bench_pairs = [], set(), []
    for shard in range(args.shards):
        chunk = [(i, e) for i, e in enumerate(entries) if i % args.shards == shard]
        includes = sorted({inc for _, e in chunk for inc in e.includes})
        bodies, impls, tables = [], [], []
        for i, e in chunk:
            # torchgen's type choices (const refs for mutable tensors, ITensorListRef) depend on
            # per-function settings that its own generators set up exactly like this.
            with native_function_manager(e.f):
                code, impl, bench = gen_entry(e, i)
                if e.kernel:
                    code += "\n" + gen_adapter(e, i)
            bodies.append(code)
            impls.append(impl)
            tables.append(f"  devx::g_compute_kernels[{i}] = reinterpret_cast<void*>(&compute_{e.ident});")
            if e.kernel:
                tables.append(f"  devx::g_vendor_adapters[{i}] = reinterpret_cast<void*>(&vendor_{e.ident});")
            if bench:
                bench_code.append(bench)
                bench_includes.update(e.includes)
                bench_pairs.append(f'  {{"{e.name}", &wrap_{e.ident}, &wrap_nodiag_{e.ident}}},')
        text = (
            "// Generated by scripts/autogen/gen.py from scripts/autogen/ops.yaml. Do not edit.\n"
            '#include "aten/op_wrapper.h"\n'
            + ('#include "aten/vendor_call.h"\n#include "devx_kernels.h"\n' if any(e.kernel for _, e in chunk) else "")
        + "".join(f"#include <ATen/ops/{inc}_ops.h>\n" for inc in includes)
            + "\nnamespace {\n\n"
            + "\n".join(bodies)
            + "\nstruct FillComputeKernels {\n  FillComputeKernels() {\n"
            + "\n".join(tables)
            + "\n  }\n} fill_compute_kernels;\n\n}  // namespace\n\n"
            + "TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {\n"
            + "\n".join(impls)
            + "\n}\n"
        )
        write_if_changed(os.path.join(args.out, f"ops_{shard}.cpp"), text)
    write_if_changed(
        os.path.join(args.out, "bench_wrappers.cpp"),
        "// Generated by scripts/autogen/gen.py. Do not edit.\n"
        '#include "aten/op_wrapper.h"\n#include "bench_wrappers.h"\n'
        + "".join(f"#include <ATen/ops/{inc}_ops.h>\n" for inc in sorted(bench_includes))
        + "\nnamespace {\n\n" + "\n".join(bench_code) + "\n}  // namespace\n\n"
        + "namespace devx::bench {\n\nextern const WrapperPair kWrapperPairs[] = {\n"
        + "\n".join(bench_pairs) + "\n  {nullptr, nullptr, nullptr},\n};\n\n}  // namespace devx::bench\n",
    )


if __name__ == "__main__":
    main()
