// What the generated op wrappers (build/generated/ops_*.cpp) are written against.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include "aten/async_ops.h"
#include "aten/compute_scope.h"
#include "aten/diagnostics.h"
#include "aten/op_registry.h"
#include "runtime/device.h"

namespace devx {

// The devx device an op runs on: that of its first devx tensor (or devx device argument).
inline std::optional<c10::Device> device_of_arg(const at::Tensor& t) {
  if (t.defined() && t.device().type() == kDevx) return t.device();
  return std::nullopt;
}
inline std::optional<c10::Device> device_of_arg(const std::optional<at::Tensor>& t) {
  return t.has_value() ? device_of_arg(*t) : std::nullopt;
}
inline std::optional<c10::Device> device_of_arg(at::TensorList ts) {
  for (const auto& t : ts) {
    if (auto d = device_of_arg(t)) return d;
  }
  return std::nullopt;
}
inline std::optional<c10::Device> device_of_arg(const at::ITensorListRef& ts) {
  for (const auto& t : ts) {
    if (auto d = device_of_arg(t)) return d;
  }
  return std::nullopt;
}
inline std::optional<c10::Device> device_of_arg(const c10::List<std::optional<at::Tensor>>& ts) {
  for (const std::optional<at::Tensor>& t : ts) {
    if (auto d = device_of_arg(t)) return d;
  }
  return std::nullopt;
}
inline std::optional<c10::Device> device_of_arg(std::optional<c10::Device> d) {
  if (d && d->type() == kDevx) return d;
  return std::nullopt;
}

template <typename... Args>
std::optional<c10::Device> guard_device(const Args&... args) {
  std::optional<c10::Device> found;
  ((found = found ? found : device_of_arg(args)), ...);
  return found;
}

template <typename Sig, typename... Args>
decltype(auto) call_boxed(const c10::BoxedKernel& kernel, int op, c10::DispatchKeySet ks, Args&&... args) {
  return c10::impl::BoxedKernelWrapper<Sig>::call(kernel, op_handle(op), ks, std::forward<Args>(args)...);
}

// The bias sizes convolution_backward wants, from the weight's layout.
inline std::vector<c10::SymInt> conv_bias_sizes(const at::Tensor& weight, bool transposed, c10::SymInt groups) {
  return {transposed ? weight.sym_size(1) * groups : weight.sym_size(0)};
}

// native_dropout computed as the CPU's dropout computes it (same random draws, same rounding), on
// compute-device tensors.
inline std::tuple<at::Tensor, at::Tensor> dropout_as_cpu(const at::Tensor& input, double p, std::optional<bool> train,
                                                        const at::Generator& generator) {
  if (!train.value_or(true) || p == 0) {
    return {input.clone(), at::ones_like(input, input.options().dtype(c10::kBool))};
  }
  if (p == 1) {
    return {input.mul(at::zeros({}, input.options())), at::zeros_like(input, input.options().dtype(c10::kBool))};
  }
  at::Tensor noise = at::empty_like(input);
  noise.bernoulli_(1 - p, generator);
  at::Tensor mask = noise.to(c10::kBool);
  noise.div_(1 - p);
  return {input.mul(noise), mask};
}

}  // namespace devx
