// Binary arithmetic: add, sub, mul, div, maximum, minimum, bitwise and logical and/or (rounding
// division, remainder and fmod: division.cpp; pow: pow.cpp). Computed in the output's dtype (the
// core's meta function has promoted and broadcast), 16-bit floats in float.
#include <string>

#include "kernels/pointwise.h"
#include "kernels/pointwise_math.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

bool single_element(const DevxTensor* t) {
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] != 1) return false;
  }
  return true;
}

// out = f(self, other) computed in out's dtype T, for the dtypes of Set; make(T{}) gives f.
// `exact_scalar`: a single-element `other` (a Python number, a 0-dim tensor) enters a 16-bit float
// computation with its value as given, not rounded to float16/bfloat16 first (ATen's CPU mul and
// div do this; add and sub round).
template <int Set, typename Make>
DevxStatus binary(const char* op, DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other,
                  DevxTensor* out, Make make, bool exact_scalar = false) {
  if (!out) return invalid(std::string(op) + ": NULL output");
  return dispatch_in<Set>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    auto f = make(tag);
    if constexpr (!std::is_same_v<T, M>) {
      if (exact_scalar && other && single_element(other)) {
        return Pointwise<T, T, M>::launch_on(ctx, {self, other}, out, f);
      }
    }
    return Pointwise<T, T, T>::launch_on(ctx, {self, other}, out, f);
  });
}

DevxStatus add_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, const DevxScalar* alpha,
                   DevxTensor* out) {
  return binary<kAllTypes>("add", ctx, self, other, out, [&](auto t) {
    using M = opmath_t<decltype(t)>;
    const M a = scalar_in<decltype(t)>(alpha);
    return [a](M x, M y) { return math::add(x, y, a); };
  });
}

DevxStatus sub_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, const DevxScalar* alpha,
                   DevxTensor* out) {
  return binary<kNumbers | kComplex>("sub", ctx, self, other, out, [&](auto t) {
    using M = opmath_t<decltype(t)>;
    const M a = math::neg(scalar_in<decltype(t)>(alpha));
    return [a](M x, M y) { return math::add(x, y, a); };
  });
}

DevxStatus add_scalar_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxScalar* other,
                          const DevxScalar* alpha, DevxTensor* out) {
  if (!out) return invalid("add: NULL output");
  return dispatch_in<kAllTypes>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const M y = scalar_in<T>(other), a = scalar_in<T>(alpha);
    return Pointwise<T, T>::launch_on(ctx, {self}, out, [y, a](M x) { return math::add(x, y, a); });
  });
}

DevxStatus mul_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, DevxTensor* out) {
  return binary<kAllTypes>("mul", ctx, self, other, out, [](auto t) {
    using M = opmath_t<decltype(t)>;
    return [](M x, M y) { return math::mul(x, y); };
  }, true);
}

DevxStatus div_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, DevxTensor* out) {
  return binary<kFloats>("div", ctx, self, other, out, [](auto t) {
    using M = opmath_t<decltype(t)>;
    return [](M x, M y) { return x / y; };
  }, true);
}

DevxStatus maximum_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, DevxTensor* out) {
  return binary<kNumbers | kBool>("maximum", ctx, self, other, out, [](auto t) {
    using M = opmath_t<decltype(t)>;
    return [](M x, M y) { return math::maximum(x, y); };
  });
}

DevxStatus minimum_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, DevxTensor* out) {
  return binary<kNumbers | kBool>("minimum", ctx, self, other, out, [](auto t) {
    using M = opmath_t<decltype(t)>;
    return [](M x, M y) { return math::minimum(x, y); };
  });
}

DevxStatus bitwise_and_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, DevxTensor* out) {
  return binary<kInts | kBool>("bitwise_and", ctx, self, other, out, [](auto t) {
    using M = opmath_t<decltype(t)>;
    return [](M x, M y) { return static_cast<M>(x & y); };
  });
}

DevxStatus bitwise_or_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, DevxTensor* out) {
  return binary<kInts | kBool>("bitwise_or", ctx, self, other, out, [](auto t) {
    using M = opmath_t<decltype(t)>;
    return [](M x, M y) { return static_cast<M>(x | y); };
  });
}

template <typename M>
bool truthy(M x) {
  if constexpr (is_complex_v<M>) {
    return x.real() != 0 || x.imag() != 0;
  } else {
    return x != M(0);
  }
}

// logical_and / logical_or: each input's truth in its own dtype (a shared one when they differ:
// double, or complex128 if either is complex), the result in out's dtype (bool unless out=).
template <bool And>
DevxStatus logical_binary_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, DevxTensor* out) {
  if (!self || !other || !out) return invalid("logical: NULL tensor");
  DevxDType in = self->dtype;
  if (other->dtype != in) in = is_complex(in) || is_complex(other->dtype) ? DEVX_COMPLEX128 : DEVX_FLOAT64;
  return dispatch(in, [&](auto tag) -> DevxStatus {
    using S = decltype(tag);
    return Pointwise<bool, S, S>::launch_on(ctx, {self, other}, out, [](opmath_t<S> x, opmath_t<S> y) {
      return And ? truthy(x) && truthy(y) : truthy(x) || truthy(y);
    });
  });
}

DEVX_SIM_REGISTER_KERNEL(add_out, add_out);
DEVX_SIM_REGISTER_KERNEL(add_Scalar_out, add_scalar_out);
DEVX_SIM_REGISTER_KERNEL(sub_out, sub_out);
DEVX_SIM_REGISTER_KERNEL(mul_out, mul_out);
DEVX_SIM_REGISTER_KERNEL(div_out, div_out);
DEVX_SIM_REGISTER_KERNEL(maximum_out, maximum_out);
DEVX_SIM_REGISTER_KERNEL(minimum_out, minimum_out);
DEVX_SIM_REGISTER_KERNEL(bitwise_and_Tensor_out, bitwise_and_out);
DEVX_SIM_REGISTER_KERNEL(bitwise_or_Tensor_out, bitwise_or_out);
DEVX_SIM_REGISTER_KERNEL(logical_and_out, logical_binary_out<true>);
DEVX_SIM_REGISTER_KERNEL(logical_or_out, logical_binary_out<false>);

}  // namespace
}  // namespace devx::cpu_sim::kern
