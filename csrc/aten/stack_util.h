// Helpers for boxed kernels (the CPU fallback, the long-tail compute kernel, diagnostics) that
// walk an op's arguments on the IValue stack.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <utility>
#include <vector>

namespace devx {

// Replaces `v` (a tensor, a tensor list or an optional-tensor list) by the same with `f` applied
// to each tensor. Lists are rebuilt, not edited: c10::List shares its elements with every copy,
// and the caller keeps the originals.
template <typename F>
void map_tensors(c10::IValue& v, F f) {
  if (v.isTensor()) {
    v = f(v.toTensor());
  } else if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    v = std::move(out);
  } else if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      out.push_back(t.has_value() ? std::optional<at::Tensor>(f(*t)) : std::nullopt);
    }
    v = std::move(out);
  }
}

// Calls `f` on each tensor of `v` (a tensor, a tensor list or an optional-tensor list).
template <typename F>
void for_each_tensor(const c10::IValue& v, F f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) f(t);
  } else if (v.isOptionalTensorList()) {
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      if (t.has_value()) f(*t);
    }
  }
}

bool is_generator_arg(const c10::Argument& arg);

// Whether the op writes argument `i`: its schema says so (`Tensor(a!)`), or it is one of the few
// legacy ops that mutate arguments their schema does not mark (native_batch_norm's running
// statistics).
bool argument_written(const c10::FunctionSchema& schema, size_t i);

// The op's devx device; every devx tensor argument must be on it and CPU tensors must be 0-dim
// scalars the op only reads, the same rule the native path (and CUDA) applies. The current
// device if no argument is on devx. The op's arguments start at stack[first].
c10::DeviceIndex device_of_args(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t first);

// For a result the schema declares as a written argument (`Tensor(a!)`), that argument as the
// caller passed it, from `written` (argument index, original value); nullptr otherwise.
const c10::IValue* written_argument_for(const c10::FunctionSchema& schema, const c10::Argument& ret,
                                        const std::vector<std::pair<size_t, c10::IValue>>& written);

// A boxed kernel's call of the compute device's kernel for `op` (the long tail, the layout kernel),
// its NotImplementedError explained (explain_compute_error).
void redispatch_on_compute(const c10::OperatorHandle& op, c10::DispatchKeySet compute_ks, torch::jit::Stack* stack);

}  // namespace devx
