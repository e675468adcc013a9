// clamp, where, addcmul, addcdiv, lerp: pointwise kernels of up to three tensors.
#include <string>

#include "kernels/pointwise.h"
#include "kernels/pointwise_math.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

DevxStatus clamp_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxScalar* min, const DevxScalar* max,
                     DevxTensor* out) {
  if (!out) return invalid("clamp: NULL output");
  if (!min && !max) return invalid("clamp: At least one of 'min' or 'max' must not be None");
  return dispatch_in<kNumbers | kBool>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    if (!max) {
      const M lo = scalar_in<T>(min);
      return Pointwise<T, T>::launch_on(ctx, {self}, out, [lo](M x) { return math::clamp_min(x, lo); });
    }
    if (!min) {
      const M hi = scalar_in<T>(max);
      return Pointwise<T, T>::launch_on(ctx, {self}, out, [hi](M x) { return math::clamp_max(x, hi); });
    }
    const M lo = scalar_in<T>(min), hi = scalar_in<T>(max);
    return Pointwise<T, T>::launch_on(ctx, {self}, out, [lo, hi](M x) { return math::clamp(x, lo, hi); });
  });
}

DevxStatus clamp_min_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxScalar* min, DevxTensor* out) {
  if (!min) return invalid("clamp_min: NULL bound");
  return clamp_out(ctx, self, min, nullptr, out);
}

DevxStatus clamp_max_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxScalar* max, DevxTensor* out) {
  if (!max) return invalid("clamp_max: NULL bound");
  return clamp_out(ctx, self, nullptr, max, out);
}

DevxStatus clamp_tensor_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* min,
                            const DevxTensor* max, DevxTensor* out) {
  if (!out) return invalid("clamp: NULL output");
  if (!min && !max) return invalid("clamp: At least one of 'min' or 'max' must not be None");
  return dispatch_in<kNumbers | kBool>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    if (!max) {
      return Pointwise<T, T, T>::launch_on(ctx, {self, min}, out, [](M x, M lo) { return math::clamp_min(x, lo); });
    }
    if (!min) {
      return Pointwise<T, T, T>::launch_on(ctx, {self, max}, out, [](M x, M hi) { return math::clamp_max(x, hi); });
    }
    return Pointwise<T, T, T, T>::launch_on(ctx, {self, min, max}, out,
                                            [](M x, M lo, M hi) { return math::clamp(x, lo, hi); });
  });
}

DevxStatus where_out(DevxKernelContext* ctx, const DevxTensor* condition, const DevxTensor* self,
                     const DevxTensor* other, DevxTensor* out) {
  if (!out) return invalid("where: NULL output");
  return dispatch_in<kAllTypes>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return Pointwise<T, bool, T, T>::launch_on(ctx, {condition, self, other}, out,
                                               [](bool c, M x, M y) { return c ? x : y; });
  });
}

DevxStatus addcmul_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* tensor1,
                       const DevxTensor* tensor2, const DevxScalar* value, DevxTensor* out) {
  if (!out || !value) return invalid("addcmul: NULL argument");
  return dispatch_in<kNumbers>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const M v = scalar_as<M>(value);
    return Pointwise<T, T, T, T>::launch_on(ctx, {self, tensor1, tensor2}, out,
                                            [v](M x, M a, M b) { return math::addcmul(x, a, b, v); });
  });
}

DevxStatus addcdiv_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* tensor1,
                       const DevxTensor* tensor2, const DevxScalar* value, DevxTensor* out) {
  if (!out || !value) return invalid("addcdiv: NULL argument");
  return dispatch_in<kFloats>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const M v = scalar_as<M>(value);
    return Pointwise<T, T, T, T>::launch_on(ctx, {self, tensor1, tensor2}, out,
                                            [v](M x, M a, M b) { return math::addcdiv(x, a, b, v); });
  });
}

DevxStatus lerp_scalar_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* end,
                           const DevxScalar* weight, DevxTensor* out) {
  if (!out || !weight) return invalid("lerp: NULL argument");
  return dispatch_in<kFloats>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const M w = scalar_as<M>(weight);
    return Pointwise<T, T, T>::launch_on(ctx, {self, end}, out, [w](M a, M b) { return math::lerp(a, b, w); });
  });
}

DevxStatus lerp_tensor_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* end,
                           const DevxTensor* weight, DevxTensor* out) {
  if (!out) return invalid("lerp: NULL output");
  return dispatch_in<kFloats>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return Pointwise<T, T, T, T>::launch_on(ctx, {self, end, weight}, out,
                                            [](M a, M b, M w) { return math::lerp(a, b, w); });
  });
}

DEVX_SIM_REGISTER_KERNEL(clamp_out, clamp_out);
DEVX_SIM_REGISTER_KERNEL(clamp_min_out, clamp_min_out);
DEVX_SIM_REGISTER_KERNEL(clamp_max_out, clamp_max_out);
DEVX_SIM_REGISTER_KERNEL(clamp_Tensor_out, clamp_tensor_out);
DEVX_SIM_REGISTER_KERNEL(where_self_out, where_out);
DEVX_SIM_REGISTER_KERNEL(addcmul_out, addcmul_out);
DEVX_SIM_REGISTER_KERNEL(addcdiv_out, addcdiv_out);
DEVX_SIM_REGISTER_KERNEL(lerp_Scalar_out, lerp_scalar_out);
DEVX_SIM_REGISTER_KERNEL(lerp_Tensor_out, lerp_tensor_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
