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

template <typename T, typename M, typename F, size_t N, size_t... I>
inline T apply_typed(const F& f, const std::array<const T*, N>& p, const std::array<int64_t, N + 1>& st, int64_t i,
                     std::index_sequence<I...>) {
  return convert<T>(f(static_cast<M>(p[I][i * st[I + 1]])...));
}

// out = f(ins...) computed in T (see above); f takes opmath_t<T> values and returns one, or
// a bool for a predicate.
template <typename T, size_t NIN, typename F>
DevxStatus elementwise(DevxKernelContext* ctx, const std::array<const DevxTensor*, NIN>& ins, DevxTensor* out, F f) {
  using M = opmath_t<T>;
  if (!out) return invalid("NULL output");
  for (const DevxTensor* in : ins) {
    if (!in) return invalid("NULL input");
  }
  Tensor o = take(out);
  std::array<Tensor, NIN> in;
  for (size_t k = 0; k < NIN; ++k) in[k] = take(ins[k]);
  std::array<Dims, NIN + 1> strides;
  strides[0] = o.strides;
  for (size_t k = 0; k < NIN; ++k) strides[k + 1] = broadcast_strides(in[k], o.sizes);
  Loop<NIN + 1> loop(o.sizes, strides);
  const int64_t n = loop.numel();
  if (n == 0) return DEVX_OK;
  return launch(ctx, [o, in, loop, n, f] {
    bool same = o.dtype == type_dtype<T>();
    for (const Tensor& t : in) same = same && t.dtype == type_dtype<T>();
    parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      loop.run(begin, end, [&](const std::array<int64_t, NIN + 1>& off, int64_t len,
                               const std::array<int64_t, NIN + 1>& st) {
        if (same) {
          T* po = o.ptr<T>() + off[0];
          std::array<const T*, NIN> pi;
          for (size_t k = 0; k < NIN; ++k) pi[k] = in[k].template ptr<const T>() + off[k + 1];
          for (int64_t i = 0; i < len; ++i) {
            po[i * st[0]] = apply_typed<T, M>(f, pi, st, i, std::make_index_sequence<NIN>{});
          }
          return;
        }
        const int64_t osize = static_cast<int64_t>(o.itemsize());
        for (int64_t i = 0; i < len; ++i) {
          std::array<M, NIN> v;
          for (size_t k = 0; k < NIN; ++k) {
            v[k] = load_as<M>(in[k].data + (off[k + 1] + i * st[k + 1]) * static_cast<int64_t>(in[k].itemsize()),
                              in[k].dtype);
          }
          store_as(o.data + (off[0] + i * st[0]) * osize, o.dtype, std::apply(f, v));
        }
      });
    });
  });
}

}  // namespace devx::cpu_sim::kern
