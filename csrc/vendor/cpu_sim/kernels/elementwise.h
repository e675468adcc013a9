// Elementwise kernels: out = f(in0, in1, ...), inputs broadcast to the output's shape (the core's
// meta function has checked the shapes and chosen the output dtype), any strides, any mix of
// dtypes: every value is converted to the compute type's arithmetic type (float for the 16-bit
// floats), f runs there, and the result is converted to the output's dtype.
#pragma once

#include <array>

#include "kernels/common.h"

namespace devx::cpu_sim::kern {

// Sets of dtypes a kernel computes in.
enum TypeSet : int {
  kFloats = 1,    // float16, bfloat16, float32, float64
  kInts = 2,      // uint8, int8, int16, int32, int64
  kBool = 4,
  kComplex = 8,
  kNumbers = kFloats | kInts,
  kAllTypes = kFloats | kInts | kBool | kComplex,
};

inline int type_set_of(DevxDType d) {
  if (d == DEVX_BOOL) return kBool;
  if (is_floating(d)) return kFloats;
  if (is_complex(d)) return kComplex;
  return kInts;
}

// Calls f(T{}) for `dtype` if it is in `Set` (only those types are instantiated); otherwise
// declines.
template <int Set, typename F>
DevxStatus dispatch_in(DevxDType dtype, F&& f) {
  if (!(type_set_of(dtype) & Set)) {
    return decline(std::string("dtype ") + dtype_name(dtype) + " is not supported");
  }
  return dispatch(dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    constexpr int set = std::is_same_v<T, bool> ? kBool
                        : is_float_v<T>         ? kFloats
                        : is_complex_v<T>       ? kComplex
                                                : kInts;
    if constexpr ((set & Set) != 0) {
      return f(tag);
    } else {
      return DEVX_DECLINED;
    }
  });
}

// The dtype two tensors' values promote to (for comparisons, whose output is bool): the core's
// meta function has already rejected what cannot be promoted. Host scalars take part only if
// of a higher category (as wrapped numbers do in ATen).
DevxDType compute_dtype(std::initializer_list<const DevxTensor*> tensors);

constexpr int64_t kGrain = 32768;

}  // namespace devx::cpu_sim::kern
