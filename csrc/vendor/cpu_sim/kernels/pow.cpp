// pow with a tensor or a Scalar as base or exponent.
#include <cmath>
#include <string>

#include "kernels/pointwise.h"
#include "kernels/pointwise_math.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// Integer power by squaring, wrapping as ATen's does; a negative exponent gives 1 / base**-e
// truncated toward zero (only 1 and -1 survive).
template <typename M>
M int_pow(M base, M exp) {
  if constexpr (std::is_signed_v<M>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? M(-1) : M(1);
      return 0;
    }
  }
  uint64_t result = 1;
  uint64_t b = static_cast<uint64_t>(static_cast<int64_t>(base));
  for (uint64_t e = static_cast<uint64_t>(exp); e != 0; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<M>(result);
}

template <typename M>
M power(M base, M exp) {
  if constexpr (std::is_integral_v<M>) {
    return int_pow(base, exp);
  } else {
    return std::pow(base, exp);
  }
}

DevxStatus pow_tensor_tensor_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* exponent,
                                 DevxTensor* out) {
  if (!out) return invalid("pow: NULL output");
  return dispatch_in<kNumbers>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return Pointwise<T, T, T>::launch_on(ctx, {self, exponent}, out, [](M x, M e) { return power(x, e); });
  });
}

// The exponent as ATen's CPU kernel takes it: double for float32/float64, rounded to the tensor's
// type for the 16-bit floats. Squares, cubes, square roots and reciprocals are computed as such
// (except for float16), which differs from pow() at -0 and -inf.
template <typename T>
DevxStatus pow_float_scalar(DevxKernelContext* ctx, const DevxTensor* self, const DevxScalar* exponent,
                            DevxTensor* out) {
  using M = opmath_t<T>;
  const double e = std::is_same_v<T, M> ? scalar_as<double>(exponent) : convert<double>(scalar_as<T>(exponent));
  auto run = [&](auto f) { return Pointwise<T, T>::launch_on(ctx, {self}, out, f); };
  if (!std::is_same_v<T, Half>) {
    if (e == 0.5) return run([](M x) { return std::sqrt(x); });
    if (e == -0.5) return run([](M x) { return M(1) / std::sqrt(x); });
    if (e == -1.0) return run([](M x) { return M(1) / x; });
    if (e == 2.0) return run([](M x) { return x * x; });
    if (e == 3.0) return run([](M x) { return x * x * x; });
    if (e == -2.0) return run([](M x) { return M(1) / (x * x); });
  }
  if constexpr (std::is_same_v<T, M>) {
    return run([e](M x) { return static_cast<M>(std::pow(static_cast<double>(x), e)); });
  } else {
    const M em = static_cast<M>(e);
    return run([em](M x) { return std::pow(x, em); });
  }
}

DevxStatus pow_tensor_scalar_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxScalar* exponent,
                                 DevxTensor* out) {
  if (!out || !exponent) return invalid("pow: NULL argument");
  return dispatch_in<kNumbers>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    if constexpr (std::is_integral_v<M>) {
      const M e = scalar_as<M>(exponent);
      return Pointwise<T, T>::launch_on(ctx, {self}, out, [e](M x) { return int_pow(x, e); });
    } else {
      return pow_float_scalar<T>(ctx, self, exponent, out);
    }
  });
}

DevxStatus pow_scalar_out(DevxKernelContext* ctx, const DevxScalar* self, const DevxTensor* exponent,
                          DevxTensor* out) {
  if (!out || !self) return invalid("pow: NULL argument");
  return dispatch_in<kNumbers>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    // The base rounded to out's dtype, as a wrapped number is before ATen's kernel runs.
    const M base = convert<M>(scalar_as<T>(self));
    return Pointwise<T, T>::launch_on(ctx, {exponent}, out, [base](M e) { return power(base, e); });
  });
}

DEVX_SIM_REGISTER_KERNEL(pow_Tensor_Tensor_out, pow_tensor_tensor_out);
DEVX_SIM_REGISTER_KERNEL(pow_Tensor_Scalar_out, pow_tensor_scalar_out);
DEVX_SIM_REGISTER_KERNEL(pow_Scalar_out, pow_scalar_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
