// Ops' arguments and results between C++ and Python, for the Python callbacks of the diagnostics:
// op hooks get them as Python objects, and kernels replaced by Python functions
// (torch_devx.diagnostics.override_kernel) run through the override runner, which the op layer
// calls for an overridden op (aten/diagnostics.h). One translation unit: both need torch's
// Python tensor type, the costliest header of the bindings.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <pybind11/pybind11.h>

namespace devx::python {

// Called with the GIL held.
pybind11::object to_python(const c10::IValue& v);
pybind11::tuple to_python_tuple(const std::vector<c10::IValue>& values);

// `fn` replaces the kernel of `op`; None restores it.
void set_override(const std::string& op, pybind11::object fn);
pybind11::list overridden_ops();
// Runs the Python function overriding `op`: arguments off the stack, its result(s) back on.
void run_override(const std::string& op, const c10::OperatorHandle& handle, torch::jit::Stack* stack);

}  // namespace devx::python
