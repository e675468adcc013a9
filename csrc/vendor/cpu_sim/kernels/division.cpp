// Rounding division (div with rounding_mode), remainder (Python's sign: the divisor's) and fmod
// (C's sign: the dividend's). Integer division by zero is ATen's "ZeroDivisionError".
#include <cmath>
#include <string>

#include "kernels/pointwise.h"
#include "kernels/pointwise_math.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// Python's floor division of floats: the quotient rounded down, computed from fmod so that it is
// exact where x / y would round up to an integer.
template <typename M>
M floor_divide(M x, M y) {
  if (y == 0) return x / y;
  const M mod = std::fmod(x, y);
  M div = (x - mod) / y;
  if (mod != 0 && (y < 0) != (mod < 0)) div -= 1;
  if (div == 0) return std::copysign(M(0), x / y);
  M floored = std::floor(div);
  if (div - floored > M(0.5)) floored += 1;
  return floored;
}

enum class IntOp { kTrunc, kFloor, kRemainder, kFmod };

// x / y rounded toward zero or down, x % y with the divisor's or the dividend's sign. y == -1 is
// special-cased: INT_MIN / -1 traps on x86.
template <IntOp Op, typename M>
M int_divide(M x, M y, const ZeroDivision& zero) {
  if (y == 0) {
    zero.raise();
    return 0;
  }
  if constexpr (std::is_signed_v<M>) {
    if (y == -1) return Op == IntOp::kTrunc || Op == IntOp::kFloor ? math::neg(x) : M(0);
  }
  if constexpr (Op == IntOp::kTrunc) {
    return static_cast<M>(x / y);
  } else if constexpr (Op == IntOp::kFloor) {
    M q = static_cast<M>(x / y);
    if (x % y != 0 && (x < 0) != (y < 0)) --q;
    return q;
  } else if constexpr (Op == IntOp::kRemainder) {
    M r = static_cast<M>(x % y);
    if (r != 0 && (r < 0) != (y < 0)) r = static_cast<M>(r + y);
    return r;
  } else {
    return static_cast<M>(x % y);
  }
}

// out = self op other in out's dtype: integers with `IntOp` (dividing by zero is an error of the
// work), floats with float_op(x, y, T{}).
template <IntOp Op, typename FloatOp>
DevxStatus divide(const char* op, DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other,
                  DevxTensor* out, FloatOp float_op) {
  if (!out) return invalid(std::string(op) + ": NULL output");
  return dispatch_in<kNumbers>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    if constexpr (std::is_integral_v<M>) {
      ZeroDivision zero;
      std::function<void()> work;
      if (DevxStatus status = Pointwise<T, T, T>::prepare(
              {self, other}, out, [zero](M x, M y) { return int_divide<Op>(x, y, zero); }, &work)) {
        return status;
      }
      return work ? launch(ctx, zero.checked(std::move(work))) : DEVX_OK;
    } else {
      return Pointwise<T, T, T>::launch_on(ctx, {self, other}, out,
                                           [float_op](M x, M y) { return float_op(x, y, T{}); });
    }
  });
}

DevxStatus div_mode_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other,
                        const char* rounding_mode, DevxTensor* out) {
  if (!rounding_mode) {
    if (!out) return invalid("div: NULL output");
    return dispatch_in<kFloats>(out->dtype, [&](auto tag) -> DevxStatus {
      using T = decltype(tag);
      using M = opmath_t<T>;
      return Pointwise<T, T, T>::launch_on(ctx, {self, other}, out, [](M x, M y) { return x / y; });
    });
  }
  const std::string mode = rounding_mode;
  if (mode == "trunc") {
    // The quotient rounded to a 16-bit float before truncation, as ATen's vectorised loop does.
    return divide<IntOp::kTrunc>("div", ctx, self, other, out, [](auto x, auto y, auto tag) {
      using M = decltype(x);
      return std::trunc(convert<M>(convert<decltype(tag)>(x / y)));
    });
  }
  if (mode == "floor") {
    return divide<IntOp::kFloor>("div", ctx, self, other, out, [](auto x, auto y, auto) { return floor_divide(x, y); });
  }
  return invalid("div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '" + mode + "'");
}

DevxStatus remainder_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, DevxTensor* out) {
  return divide<IntOp::kRemainder>("remainder", ctx, self, other, out, [](auto x, auto y, auto) {
    auto mod = std::fmod(x, y);
    if (mod != 0 && (y < 0) != (mod < 0)) mod += y;
    return mod;
  });
}

DevxStatus fmod_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, DevxTensor* out) {
  return divide<IntOp::kFmod>("fmod", ctx, self, other, out, [](auto x, auto y, auto) { return std::fmod(x, y); });
}

DEVX_SIM_REGISTER_KERNEL(div_out_mode, div_mode_out);
DEVX_SIM_REGISTER_KERNEL(remainder_Tensor_out, remainder_out);
DEVX_SIM_REGISTER_KERNEL(fmod_Tensor_out, fmod_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
