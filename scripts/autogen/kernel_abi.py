"""The vendor kernel ABI (csrc/runtime/devx_kernel_abi.h) as the generator sees it.

A kernel is declared in ops.yaml by the schema of the out= overload it implements
(`kernel: "add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"`).
The declaration, not the installed torch, fixes the kernel's C signature, so a vendor library built
once keeps loading on every supported torch; the build checks the declaration against torchgen's
schema of that overload and stops where they disagree.
"""
from __future__ import annotations

from dataclasses import dataclass

from torchgen.model import Argument, BaseTy, BaseType, FunctionSchema, ListType, NativeFunction, OptionalType, Type


def _base(t: Type) -> tuple[str, bool]:
    """(kind, optional) of a schema type, kind one of the ABI's argument kinds."""
    optional = isinstance(t, OptionalType)
    inner = t.elem if optional else t
    if isinstance(inner, BaseType):
        return {
            BaseTy.Tensor: "tensor",
            BaseTy.Scalar: "scalar",
            BaseTy.int: "int",
            BaseTy.SymInt: "int",
            BaseTy.float: "float",
            BaseTy.bool: "bool",
            BaseTy.ScalarType: "dtype",
            BaseTy.str: "str",
            BaseTy.Generator: "generator",
        }.get(inner.name, f"unsupported {inner}"), optional
    if isinstance(inner, ListType):
        elem = inner.elem
        if isinstance(elem, OptionalType) and isinstance(elem.elem, BaseType) and elem.elem.name == BaseTy.Tensor:
            return "tensor_list", optional
        if isinstance(elem, BaseType):
            kind = {
                BaseTy.Tensor: "tensor_list",
                BaseTy.int: "int_list",
                BaseTy.SymInt: "int_list",
                BaseTy.float: "float_list",
                BaseTy.bool: "bool_list",
                BaseTy.Scalar: "scalar_list",
            }.get(elem.name)
            if kind:
                return kind, optional
    return f"unsupported {t}", optional


# C type of each kind: (plain, optional).
_C_TYPES = {
    "scalar": ("const DevxScalar*", "const DevxScalar*"),
    "int": ("int64_t", "const int64_t*"),
    "float": ("double", "const double*"),
    "bool": ("int", "const int*"),
    "dtype": ("DevxDType", "const DevxDType*"),
    "str": ("const char*", "const char*"),
    "generator": ("DevxGenerator", "DevxGenerator"),
    "int_list": ("DevxIntList", "const DevxIntList*"),
    "float_list": ("DevxFloatList", "const DevxFloatList*"),
    "bool_list": ("DevxBoolList", "const DevxBoolList*"),
    "scalar_list": ("DevxScalarList", "const DevxScalarList*"),
}


@dataclass
class KernelArg:
    name: str
    kind: str
    optional: bool
    output: bool

    @property
    def c_type(self) -> str:
        if self.kind == "tensor":
            return "DevxTensor*" if self.output else "const DevxTensor*"
        if self.kind == "tensor_list":
            return "DevxTensorList"
        return _C_TYPES[self.kind][1 if self.optional else 0]


@dataclass
class Kernel:
    schema: FunctionSchema
    index: int

    @property
    def name(self) -> str:
        return str(self.schema.name)

    @property
    def ident(self) -> str:
        return self.schema.name.unambiguous_name()

    @property
    def typedef(self) -> str:
        return f"DevxKernel_{self.ident}"

    @property
    def args(self) -> list[KernelArg]:
        outs = {a.name for a in self.schema.arguments.out}
        result = []
        for a in self.schema.arguments.flat_all:
            kind, optional = _base(a.type)
            result.append(KernelArg(a.name, kind, optional, a.name in outs))
        return result

    def c_declaration(self) -> str:
        params = ", ".join(["DevxKernelContext* ctx"] + [f"{a.c_type} {a.name}" for a in self.args])
        return f"/* {self.schema} */\ntypedef DevxStatus (*{self.typedef})({params});\n"


def _shape(args: list[Argument]) -> list[tuple[str, str, bool]]:
    return [(a.name, str(a.type), a.annotation is not None and a.annotation.is_write) for a in args]


def parse_kernel(decl: str, owner: str, by_name: dict[str, NativeFunction], index: int) -> Kernel:
    """The kernel declared by `decl` for the ops.yaml entry `owner`, checked against torch."""
    try:
        schema = FunctionSchema.parse(decl)
    except Exception as exc:  # torchgen raises AssertionError and others for bad syntax
        raise SystemExit(f"ops.yaml: {owner}: kernel '{decl}' is not a schema: {exc}") from None
    name = str(schema.name)
    if name not in by_name:
        raise SystemExit(f"ops.yaml: {owner}: kernel '{name}' is not an overload of this torch")
    theirs = by_name[name].func
    if _shape(list(schema.arguments.flat_all)) != _shape(list(theirs.arguments.flat_all)):
        raise SystemExit(
            f"ops.yaml: {owner}: kernel declared as\n  {schema}\nbut this torch has\n  {theirs}\n"
            "(the declaration is the vendor ABI: change it only with DEVX_KERNEL_ABI_VERSION)"
        )
    if not schema.arguments.out:
        raise SystemExit(f"ops.yaml: {owner}: kernel '{name}' is not an out= overload")
    kernel = Kernel(schema, index)
    for a in kernel.args:
        if a.kind.startswith("unsupported"):
            raise SystemExit(f"ops.yaml: {owner}: kernel '{name}': argument {a.name} has a type the ABI lacks ({a.kind})")
    return kernel


def serves(kernel: Kernel, f: NativeFunction) -> bool:
    """Whether `kernel` can serve variant `f` (same argument list; a functional form returns what
    the kernel writes, an in-place form writes its one output to self)."""
    if f.func.signature() != kernel.schema.signature():
        return False
    kind = f.func.kind().name
    if kind == "inplace":
        return len(kernel.schema.arguments.out) == 1
    if kind == "functional":
        # A functional form of an op that also mutates inputs returns those too: not served.
        return len(f.func.returns) == len(kernel.schema.arguments.out)
    return kind == "out"


def header(kernels: list[Kernel]) -> str:
    lines = [
        "// Generated by scripts/autogen/gen.py from scripts/autogen/ops.yaml. Do not edit.\n",
        "// The C signature of every kernel a vendor may provide (see devx_kernel_abi.h).\n",
        "#ifndef DEVX_KERNELS_H\n#define DEVX_KERNELS_H\n\n#include \"devx_kernel_abi.h\"\n\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n",
    ]
    lines += [k.c_declaration() + "\n" for k in kernels]
    lines.append("// X(identifier, overload) for each kernel: DEVX_KERNEL_LIST(X).\n#define DEVX_KERNEL_LIST(X)")
    lines += [f" \\\n  X({k.ident}, \"{k.name}\")" for k in kernels]
    lines.append("\n\n#ifdef __cplusplus\n}  // extern \"C\"\n#endif\n\n#endif  // DEVX_KERNELS_H\n")
    return "".join(lines)
