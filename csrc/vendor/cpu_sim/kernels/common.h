// What cpu_sim's own kernels share: tensors as queued work keeps them, element types (float16 and
// bfloat16 included, in plain C++), dtype dispatch, strided iteration, threads, and issuing on the
// stream. No torch here: this is the kernel library a vendor would bring.
#pragma once

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "devx_kernels.h"
#include "error.h"
#include "kernels/small_vec.h"

namespace devx::cpu_sim::kern {

// ---- element types

struct Half {
  uint16_t bits;
  Half() = default;
  Half(float f);  // NOLINT: converting, as the arithmetic types are
  operator float() const;
};

struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  BFloat16(float f);  // NOLINT
  operator float() const;
};

// The compiler's _Float16 converts with IEEE round-to-nearest-even (in software where the CPU
// has no half-precision instructions).
inline Half::Half(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  std::memcpy(&bits, &h, 2);
}

inline Half::operator float() const {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

inline BFloat16::BFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) {
    bits = 0x7fc0;
    return;
  }
  bits = static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

inline BFloat16::operator float() const {
  const uint32_t x = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

using c64 = std::complex<float>;
using c128 = std::complex<double>;

// The type arithmetic on T is done in (float for the 16-bit floats, as ATen does).
template <typename T>
struct OpMath { using type = T; };
template <> struct OpMath<Half> { using type = float; };
template <> struct OpMath<BFloat16> { using type = float; };
template <typename T>
using opmath_t = typename OpMath<T>::type;

template <typename T>
constexpr bool is_complex_v = std::is_same_v<T, c64> || std::is_same_v<T, c128>;
template <typename T>
constexpr bool is_float_v = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

size_t itemsize(DevxDType dtype);
const char* dtype_name(DevxDType dtype);
inline bool is_floating(DevxDType d) {
  return d == DEVX_FLOAT16 || d == DEVX_BFLOAT16 || d == DEVX_FLOAT32 || d == DEVX_FLOAT64;
}
inline bool is_complex(DevxDType d) { return d == DEVX_COMPLEX64 || d == DEVX_COMPLEX128; }
inline bool is_integral(DevxDType d) { return !is_floating(d) && !is_complex(d) && d != DEVX_BOOL; }

// Calls f(T{}) with T the C++ type of `dtype`.
template <typename F>
decltype(auto) dispatch(DevxDType dtype, F&& f) {
  switch (dtype) {
    case DEVX_BOOL: return f(bool{});
    case DEVX_UINT8: return f(uint8_t{});
    case DEVX_INT8: return f(int8_t{});
    case DEVX_INT16: return f(int16_t{});
    case DEVX_INT32: return f(int32_t{});
    case DEVX_INT64: return f(int64_t{});
    case DEVX_FLOAT16: return f(Half{});
    case DEVX_BFLOAT16: return f(BFloat16{});
    case DEVX_FLOAT32: return f(float{});
    case DEVX_FLOAT64: return f(double{});
    case DEVX_COMPLEX64: return f(c64{});
    case DEVX_COMPLEX128: return f(c128{});
  }
  return f(float{});
}

template <typename T>
constexpr DevxDType type_dtype() {
  if constexpr (std::is_same_v<T, bool>) return DEVX_BOOL;
  else if constexpr (std::is_same_v<T, uint8_t>) return DEVX_UINT8;
  else if constexpr (std::is_same_v<T, int8_t>) return DEVX_INT8;
  else if constexpr (std::is_same_v<T, int16_t>) return DEVX_INT16;
  else if constexpr (std::is_same_v<T, int32_t>) return DEVX_INT32;
  else if constexpr (std::is_same_v<T, int64_t>) return DEVX_INT64;
  else if constexpr (std::is_same_v<T, Half>) return DEVX_FLOAT16;
  else if constexpr (std::is_same_v<T, BFloat16>) return DEVX_BFLOAT16;
  else if constexpr (std::is_same_v<T, float>) return DEVX_FLOAT32;
  else if constexpr (std::is_same_v<T, double>) return DEVX_FLOAT64;
  else if constexpr (std::is_same_v<T, c64>) return DEVX_COMPLEX64;
  else return DEVX_COMPLEX128;
}

// Converts between element types as ATen's static_cast-based conversions do.
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_complex_v<To>) {
    if constexpr (is_complex_v<From>) {
      return To(static_cast<typename To::value_type>(v.real()), static_cast<typename To::value_type>(v.imag()));
    } else {
      return To(static_cast<typename To::value_type>(static_cast<opmath_t<From>>(v)), 0);
    }
  } else if constexpr (is_complex_v<From>) {
    return convert<To>(v.real());
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<opmath_t<From>>(v) != 0;
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(static_cast<opmath_t<From>>(v)));
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// Element `i` of a type-erased buffer, read as T.
template <typename T>
inline T load_as(const void* p, DevxDType dtype) {
  return dispatch(dtype, [&](auto tag) -> T {
    using S = decltype(tag);
    return convert<T>(*static_cast<const S*>(p));
  });
}

template <typename T>
inline void store_as(void* p, DevxDType dtype, T v) {
  dispatch(dtype, [&](auto tag) {
    using S = decltype(tag);
    *static_cast<S*>(p) = convert<S>(v);
  });
}

// ---- scalars

template <typename T>
T scalar_as(const DevxScalar* s) {
  if (s->kind == DEVX_SCALAR_COMPLEX) return convert<T>(c128(s->f, s->imag));
  if (s->kind == DEVX_SCALAR_FLOAT) return convert<T>(s->f);
  return convert<T>(s->i);
}

// ---- tensors as queued work keeps them

// Sizes or strides: up to 6 dimensions without a heap allocation.
using Dims = SmallVec<int64_t, 6>;

struct Tensor {
  char* data = nullptr;
  DevxDType dtype = DEVX_FLOAT32;
  Dims sizes;
  Dims strides;  // elements
  bool host_scalar = false;

  Tensor() = default;
  // A host scalar's data is its own copy of the value (host_value), which travels with it.
  Tensor(const Tensor& other) { *this = other; }
  Tensor& operator=(const Tensor& other) {
    if (this == &other) return *this;
    data = other.data;
    dtype = other.dtype;
    sizes = other.sizes;
    strides = other.strides;
    host_scalar = other.host_scalar;
    if (host_scalar) {
      std::memcpy(host_value, other.host_value, sizeof host_value);
      data = host_value;
    }
    return *this;
  }

  int ndim() const { return static_cast<int>(sizes.size()); }
  int64_t numel() const;
  bool contiguous() const;
  size_t itemsize() const { return kern::itemsize(dtype); }
  int64_t size(int d) const { return sizes[static_cast<size_t>(d)]; }
  int64_t stride(int d) const { return strides[static_cast<size_t>(d)]; }
  template <typename T>
  T* ptr() const { return reinterpret_cast<T*>(data); }

  // A host scalar's value, copied when the kernel was called: the CPU tensor it lives in may be
  // gone when the work runs.
  alignas(16) char host_value[16] = {};
};

// A copy of `d` (NULL gives an empty Tensor: data == nullptr, sizes {0}), host scalar values included.
Tensor take(const DevxTensor* d);

// ---- issuing

// Whether work launched on `ctx`'s stream runs now, on this thread: the streams are synchronous,
// or this is the stream's own worker (a kernel called by work it runs).
bool runs_now(DevxKernelContext* ctx);
// Runs call(arg) as the stream would run work now: what it throws becomes DEVX_ERROR.
DevxStatus run_now(DevxKernelContext* ctx, void (*call)(void*), void* arg);
DevxStatus submit(DevxKernelContext* ctx, std::function<void()> work);
// Queues the heap object `work` (owned from here on): run(work) runs it, destroy(work) frees it.
// Two small thunks per work type, where a std::function instantiated a manager and an invoker.
DevxStatus submit_owned(DevxKernelContext* ctx, void* work, void (*run)(void*), void (*destroy)(void*));

// Queues `work` on the kernel's stream (run now by a synchronous stream). The kernel's arguments
// must have been copied into `work`. Work run now is called where it is, never wrapped in a
// std::function (a heap allocation for every small kernel).
template <typename F>
DevxStatus launch(DevxKernelContext* ctx, F&& work) {
  if (runs_now(ctx)) {
    return run_now(ctx, [](void* w) { (*static_cast<std::remove_reference_t<F>*>(w))(); },
                   const_cast<void*>(static_cast<const void*>(&work)));
  }
  using W = std::remove_cvref_t<F>;
  return submit_owned(
      ctx, new W(std::forward<F>(work)), [](void* w) { (*static_cast<W*>(w))(); },
      [](void* w) { delete static_cast<W*>(w); });
}

// Kernel-side errors and declines.
DevxStatus decline(const std::string& why);
DevxStatus invalid(const std::string& why);

// ---- threads

// Runs body(begin, end) over [0, n) split into chunks of at least `grain`, on the kernel thread
// pool (DEVX_SIM_THREADS threads, default: the machine's cores).
int num_threads();
// body(begin, end) through `call`, a thunk per body type rather than a std::function (whose
// manager and invoker every kernel's loop instantiated).
using RangeBody = void (*)(const void* body, int64_t begin, int64_t end);
void parallel_for_on_pool(int64_t n, int64_t grain, RangeBody call, const void* body);
template <typename F>
void parallel_for(int64_t n, int64_t grain, const F& body) {
  if (n <= 0) return;
  // Called where it is when it runs on this thread alone: no std::function (a heap allocation
  // for most bodies) for a small kernel.
  if (n <= grain || num_threads() == 1) {
    body(int64_t{0}, n);
    return;
  }
  parallel_for_on_pool(
      n, grain, [](const void* b, int64_t begin, int64_t end) { (*static_cast<const F*>(b))(begin, end); }, &body);
}

// ---- strided iteration

// Broadcast strides of `t` against output shape `shape` (0 where t is broadcast).
Dims broadcast_strides(const Tensor& t, const Dims& shape);

// Iterates a shape with N operands (strides in elements): calls
// inner(offsets[N] of the first element of a row, n, inner_strides[N]) once per innermost row,
// after merging dimensions that are contiguous with each other for every operand.
template <size_t N>
struct Loop {
  Dims shape;
  SmallVec<std::array<int64_t, N>, 4> strides;  // per dim

  Loop(const Dims& shape_, const std::array<Dims, N>& operand_strides);
  int64_t numel() const;
  template <typename F>
  void run(int64_t begin, int64_t end, F&& inner) const;
};

}  // namespace devx::cpu_sim::kern

#include "kernels/loop_impl.h"
