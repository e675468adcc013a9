// fill_ and zero_: `out` is the tensor filled (self itself for the in-place ops).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/pointwise.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// ATen's names of the types in its overflow message.
const char* aten_type_name(DevxDType dtype) {
  switch (dtype) {
    case DEVX_UINT8: return "uint8_t";
    case DEVX_INT8: return "int8_t";
    case DEVX_INT16: return "int16_t";
    case DEVX_INT32: return "int";
    case DEVX_INT64: return "int64_t";
    case DEVX_FLOAT16: return "c10::Half";
    case DEVX_BFLOAT16: return "c10::BFloat16";
    case DEVX_FLOAT32: return "float";
    case DEVX_FLOAT64: return "double";
    default: return dtype_name(dtype);
  }
}

template <typename T>
double fill_finite_max() {
  if constexpr (std::is_same_v<T, Half>) {
    return 65504.0;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    BFloat16 b;
    b.bits = 0x7f7f;
    return static_cast<float>(b);
  } else {
    return static_cast<double>(std::numeric_limits<T>::max());
  }
}

// Whether `s` is out of T's range, by ATen's rules for filling: integers may not overflow (a
// negative integer wraps into an unsigned type as long as its magnitude fits), floats may not
// exceed the finite range unless infinite, NaN fits floats only, a complex value needs a complex
// T unless its imaginary part is 0, and anything fits bool.
template <typename T>
bool overflows(const DevxScalar* s) {
  if constexpr (std::is_same_v<T, bool> || is_complex_v<T>) {
    return false;
  } else {
    if (s->kind == DEVX_SCALAR_COMPLEX && s->imag != 0) return true;
    if (s->kind == DEVX_SCALAR_BOOL) return false;
    const double max = fill_finite_max<T>();
    if constexpr (std::is_integral_v<T>) {
      const double min = static_cast<double>(std::numeric_limits<T>::lowest());
      if (s->kind == DEVX_SCALAR_INT) {
        const int64_t v = s->i;
        if constexpr (std::is_unsigned_v<T>) {
          return v > static_cast<int64_t>(std::numeric_limits<T>::max()) ||
                 (v < 0 && -static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max()));
        } else {
          return v < static_cast<int64_t>(std::numeric_limits<T>::lowest()) ||
                 v > static_cast<int64_t>(std::numeric_limits<T>::max());
        }
      }
      return std::isnan(s->f) || s->f < min || s->f > max;
    } else {
      const double v = s->kind == DEVX_SCALAR_INT ? static_cast<double>(s->i) : s->f;
      return std::isfinite(v) && (v < -max || v > max);
    }
  }
}

template <typename T>
DevxStatus fill_with(DevxKernelContext* ctx, DevxTensor* out, T value) {
  Tensor o = take(out);
  const int64_t n = o.numel();
  if (n == 0) return DEVX_OK;
  if (o.contiguous()) {
    return launch(ctx, [o, n, value] {
      parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
        std::fill(o.ptr<T>() + begin, o.ptr<T>() + end, value);
      });
    });
  }
  std::function<void()> work;
  const opmath_t<T> v = convert<opmath_t<T>>(value);
  if (DevxStatus status = Pointwise<T>::prepare({}, out, [v] { return v; }, &work)) return status;
  return work ? launch(ctx, std::move(work)) : DEVX_OK;
}

DevxStatus fill_scalar_out(DevxKernelContext* ctx, const DevxTensor* /*self*/, const DevxScalar* value,
                           DevxTensor* out) {
  if (!out || !value) return invalid("fill: NULL argument");
  return dispatch(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    if (overflows<T>(value)) {
      return invalid(std::string("value cannot be converted to type ") + aten_type_name(out->dtype) +
                     " without overflow");
    }
    return fill_with<T>(ctx, out, scalar_as<T>(value));
  });
}

DevxStatus fill_tensor_out(DevxKernelContext* ctx, const DevxTensor* /*self*/, const DevxTensor* value,
                           DevxTensor* out) {
  if (!out || !value) return invalid("fill: NULL argument");
  if (value->ndim != 0) {
    return invalid("fill_ only supports 0-dimension value tensor but got tensor with " +
                   std::to_string(value->ndim) + " dimensions.");
  }
  return dispatch(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return Pointwise<T, T>::launch_on(ctx, {value}, out, [](opmath_t<T> v) { return v; });
  });
}

DevxStatus zero_out(DevxKernelContext* ctx, const DevxTensor* /*self*/, DevxTensor* out) {
  if (!out) return invalid("zero: NULL output");
  return dispatch(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return fill_with<T>(ctx, out, convert<T>(0));
  });
}

DEVX_SIM_REGISTER_KERNEL(fill_Scalar_out, fill_scalar_out);
DEVX_SIM_REGISTER_KERNEL(fill_Tensor_out, fill_tensor_out);
DEVX_SIM_REGISTER_KERNEL(zero_out, zero_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
