// The long tail of the op surface: every aten op the compute device has a kernel for, beyond the
// generated table, runs on devx memory through one boxed kernel (compute on aliases, as the
// generated kernels do, with the arguments in an IValue stack). It costs a boxing round trip per
// call instead of a generated wrapper per op, which keeps the build small; the ops that matter
// for speed are in the generated table.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

namespace devx {

void boxed_compute(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);

// Registers, for the loaded vendor, the boxed compute kernel for every aten op its compute
// device implements and devx does not, and the CPU fallback for inherited structured kernels it
// cannot run. Returns the names registered to boxed compute.
std::vector<std::string> register_long_tail();

// Names of the ops registered by register_long_tail() to boxed compute, and of those the vendor
// refused (op_supported), which run on the CPU fallback.
const std::vector<std::string>& long_tail_ops();
const std::vector<std::string>& long_tail_refused();
// Whether `name` runs on boxed compute.
bool is_long_tail_op(const c10::OperatorName& name);

}  // namespace devx
