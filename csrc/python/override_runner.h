// Kernels replaced by Python functions (torch_devx.diagnostics.override_kernel): the table of
// those functions, and the runner the op layer calls for an overridden op (aten/diagnostics.h).
#pragma once

#include <string>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <pybind11/pybind11.h>

namespace devx::python {

// `fn` replaces the kernel of `op`; None restores it.
void set_override(const std::string& op, pybind11::object fn);
pybind11::list overridden_ops();
// Runs the Python function overriding `op`: arguments off the stack, its result(s) back on.
void run_override(const std::string& op, const c10::OperatorHandle& handle, torch::jit::Stack* stack);

}  // namespace devx::python
