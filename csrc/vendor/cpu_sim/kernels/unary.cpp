// Unary pointwise kernels: arithmetic, rounding, bitwise and logical not, NaN tests.
#include <cmath>
#include <limits>
#include <string>

#include "kernels/pointwise.h"
#include "kernels/pointwise_math.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// out = f(self) computed in out's dtype (for the dtypes of Set); f is generic over opmath_t.
template <int Set, typename F>
DevxStatus unary(const char* op, DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out, F f) {
  if (!out) return invalid(std::string(op) + ": NULL output");
  return dispatch_in<Set>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return Pointwise<T, T>::launch_on(ctx, {self}, out, [f](M x) -> M { return f(x); });
  });
}

// out = pred(self) read in self's own dtype; out is bool unless given with out=.
template <int Set, typename F>
DevxStatus predicate(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out, F pred) {
  if (!self) return invalid("NULL input");
  return dispatch_in<Set>(self->dtype, [&](auto tag) -> DevxStatus {
    using S = decltype(tag);
    return Pointwise<bool, S>::launch_on(ctx, {self}, out, [pred](opmath_t<S> x) -> bool { return pred(x); });
  });
}

template <typename M>
constexpr bool is_int_v = math::is_int_v<M>;

DevxStatus neg_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return unary<kNumbers | kComplex>("neg", ctx, self, out, [](auto x) { return math::neg(x); });
}

DevxStatus reciprocal_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return unary<kFloats>("reciprocal", ctx, self, out, [](auto x) { return decltype(x)(1) / x; });
}

DevxStatus abs_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return unary<kNumbers>("abs", ctx, self, out, [](auto x) {
    using M = decltype(x);
    if constexpr (std::is_unsigned_v<M>) {
      return x;
    } else if constexpr (is_int_v<M>) {
      return x < 0 ? math::neg(x) : x;
    } else {
      return std::abs(x);
    }
  });
}

DevxStatus sign_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  // NaN gives 0, as ATen's (0 < x) - (x < 0) does.
  return unary<kNumbers | kBool>("sign", ctx, self, out, [](auto x) {
    using M = decltype(x);
    if constexpr (std::is_same_v<M, bool> || std::is_unsigned_v<M>) {
      return static_cast<M>(x > M(0));
    } else {
      return static_cast<M>(static_cast<int>(M(0) < x) - static_cast<int>(x < M(0)));
    }
  });
}

DevxStatus sqrt_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return unary<kFloats>("sqrt", ctx, self, out, [](auto x) { return std::sqrt(x); });
}

DevxStatus rsqrt_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return unary<kFloats>("rsqrt", ctx, self, out, [](auto x) { return decltype(x)(1) / std::sqrt(x); });
}

DevxStatus exp_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return unary<kFloats>("exp", ctx, self, out, [](auto x) { return std::exp(x); });
}

DevxStatus log_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return unary<kFloats>("log", ctx, self, out, [](auto x) { return std::log(x); });
}

// Integers are their own ceil, floor and round.
template <typename F>
auto rounding(F f) {
  return [f](auto x) {
    if constexpr (std::is_integral_v<decltype(x)>) {
      return x;
    } else {
      return f(x);
    }
  };
}

DevxStatus ceil_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return unary<kNumbers>("ceil", ctx, self, out, rounding([](auto x) { return std::ceil(x); }));
}

DevxStatus floor_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return unary<kNumbers>("floor", ctx, self, out, rounding([](auto x) { return std::floor(x); }));
}

DevxStatus round_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  // Half to even: nearbyint in the default rounding mode.
  return unary<kNumbers>("round", ctx, self, out, rounding([](auto x) { return std::nearbyint(x); }));
}

DevxStatus bitwise_not_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return unary<kInts | kBool>("bitwise_not", ctx, self, out, [](auto x) {
    using M = decltype(x);
    if constexpr (std::is_same_v<M, bool>) {
      return !x;
    } else {
      return static_cast<M>(~x);
    }
  });
}

DevxStatus logical_not_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return predicate<kAllTypes>(ctx, self, out, [](auto x) { return x == decltype(x)(0); });
}

DevxStatus isnan_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return predicate<kAllTypes>(ctx, self, out, [](auto x) {
    using M = decltype(x);
    if constexpr (is_complex_v<M>) {
      return x.real() != x.real() || x.imag() != x.imag();
    } else {
      return math::is_nan(x);
    }
  });
}

// ATen rejects complex inputs of isposinf and isneginf; integers and bools are never infinite.
template <bool Positive>
DevxStatus isinf_signed_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  if (self && is_complex(self->dtype)) {
    return invalid(std::string(Positive ? "isposinf" : "isneginf") + " does not support complex inputs.");
  }
  return predicate<kNumbers | kBool>(ctx, self, out, [](auto x) {
    using M = decltype(x);
    if constexpr (std::is_floating_point_v<M>) {
      return Positive ? x == std::numeric_limits<M>::infinity() : x == -std::numeric_limits<M>::infinity();
    } else {
      return false;
    }
  });
}

template <typename T>
float nan_to_num_finite_max() {
  if constexpr (std::is_same_v<T, Half>) {
    return 65504.0f;
  } else {
    BFloat16 b;
    b.bits = 0x7f7f;
    return static_cast<float>(b);
  }
}

DevxStatus nan_to_num_out(DevxKernelContext* ctx, const DevxTensor* self, const double* nan, const double* posinf,
                          const double* neginf, DevxTensor* out) {
  if (!out) return invalid("nan_to_num: NULL output");
  return dispatch_in<kNumbers | kBool>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    if constexpr (!is_float_v<T>) {
      return Pointwise<T, T>::launch_on(ctx, {self}, out, [](M x) { return x; });
    } else {
      M max, lowest;
      if constexpr (std::is_same_v<T, M>) {
        max = std::numeric_limits<M>::max();
        lowest = std::numeric_limits<M>::lowest();
      } else {
        max = nan_to_num_finite_max<T>();
        lowest = -max;
      }
      // Replacements as T holds them (a posinf beyond float16's range becomes inf, as in ATen).
      const M n = nan ? convert<M>(convert<T>(*nan)) : M(0);
      const M p = posinf ? convert<M>(convert<T>(*posinf)) : max;
      const M m = neginf ? convert<M>(convert<T>(*neginf)) : lowest;
      return Pointwise<T, T>::launch_on(ctx, {self}, out, [n, p, m](M x) {
        if (x != x) return n;
        if (x == std::numeric_limits<M>::infinity()) return p;
        if (x == -std::numeric_limits<M>::infinity()) return m;
        return x;
      });
    }
  });
}

DEVX_SIM_REGISTER_KERNEL(neg_out, neg_out);
DEVX_SIM_REGISTER_KERNEL(reciprocal_out, reciprocal_out);
DEVX_SIM_REGISTER_KERNEL(abs_out, abs_out);
DEVX_SIM_REGISTER_KERNEL(sign_out, sign_out);
DEVX_SIM_REGISTER_KERNEL(sqrt_out, sqrt_out);
DEVX_SIM_REGISTER_KERNEL(rsqrt_out, rsqrt_out);
DEVX_SIM_REGISTER_KERNEL(exp_out, exp_out);
DEVX_SIM_REGISTER_KERNEL(log_out, log_out);
DEVX_SIM_REGISTER_KERNEL(ceil_out, ceil_out);
DEVX_SIM_REGISTER_KERNEL(floor_out, floor_out);
DEVX_SIM_REGISTER_KERNEL(round_out, round_out);
DEVX_SIM_REGISTER_KERNEL(bitwise_not_out, bitwise_not_out);
DEVX_SIM_REGISTER_KERNEL(logical_not_out, logical_not_out);
DEVX_SIM_REGISTER_KERNEL(isnan_out, isnan_out);
DEVX_SIM_REGISTER_KERNEL(isposinf_out, isinf_signed_out<true>);
DEVX_SIM_REGISTER_KERNEL(isneginf_out, isinf_signed_out<false>);
DEVX_SIM_REGISTER_KERNEL(nan_to_num_out, nan_to_num_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
