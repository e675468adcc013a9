// Pointwise kernels whose operands need not share one element type (a comparison reads its
// inputs in their common type and writes bool, `where` reads a bool condition), prepared apart
// from their launch so that a _foreach_ kernel issues one launch for a whole list.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/elementwise.h"

namespace devx::cpu_sim::kern {

// Element readers and writers picked once per tensor: a loop over operands of unexpected dtypes
// pays one indirect call per element rather than a switch, and each kernel does not instantiate
// its own copy of every conversion.
template <typename V>
using Loader = V (*)(const char*);
template <typename V>
using Storer = void (*)(char*, V);

template <typename V, typename S>
V load_one(const char* p) {
  return convert<V>(*reinterpret_cast<const S*>(p));
}

template <typename V, typename S>
void store_one(char* p, V v) {
  *reinterpret_cast<S*>(p) = convert<S>(v);
}

template <typename V>
Loader<V> loader_for(DevxDType dtype) {
  return dispatch(dtype, [](auto tag) -> Loader<V> { return &load_one<V, decltype(tag)>; });
}

template <typename V>
Storer<V> storer_for(DevxDType dtype) {
  return dispatch(dtype, [](auto tag) -> Storer<V> { return &store_one<V, decltype(tag)>; });
}

// Elements per staging buffer: a few KiB on the stack per operand.
constexpr int64_t kStage = 256;

// `m` elements of a tensor (dtype `dtype`, from element `offset` with stride `stride`) as a
// contiguous array of V: the tensor's own memory when it already is one, else `buf` filled.
template <typename V>
[[gnu::noinline]] const V* stage(const char* data, DevxDType dtype, int64_t offset, int64_t stride, int64_t m,
                                 V* buf) {
  if (dtype == type_dtype<V>()) {
    const V* p = reinterpret_cast<const V*>(data) + offset;
    if (stride == 1) return p;
    for (int64_t i = 0; i < m; ++i) buf[i] = p[i * stride];
    return buf;
  }
  const Loader<V> load = loader_for<V>(dtype);
  const int64_t size = static_cast<int64_t>(itemsize(dtype));
  for (int64_t i = 0; i < m; ++i) buf[i] = load(data + (offset + i * stride) * size);
  return buf;
}

// The inverse of stage: `m` values of V written to a tensor of dtype `dtype` at `offset`, `stride`.
template <typename V>
[[gnu::noinline]] void unstage(const V* values, int64_t m, char* data, DevxDType dtype, int64_t offset,
                               int64_t stride) {
  if (dtype == type_dtype<V>()) {
    V* p = reinterpret_cast<V*>(data) + offset;
    for (int64_t i = 0; i < m; ++i) p[i * stride] = values[i];
    return;
  }
  const Storer<V> store = storer_for<V>(dtype);
  const int64_t size = static_cast<int64_t>(itemsize(dtype));
  for (int64_t i = 0; i < m; ++i) store(data + (offset + i * stride) * size, values[i]);
}

// A pointwise kernel's operands, checked, with the loop over them. Nothing here depends on the
// element function, so one function per arity builds them for every kernel.
template <size_t N>
struct Operands {
  Tensor out;
  std::array<Tensor, N> in;
  Loop<N + 1> loop;
  int64_t numel;
};

// Leaves *result empty when out has no elements. complex_in[k]: input k is read as a complex type.
template <size_t N>
DevxStatus take_operands(const std::array<const DevxTensor*, N>& ins, DevxTensor* out,
                         const std::array<bool, N>& complex_in, std::shared_ptr<const Operands<N>>* result);

// The element function of a pointwise kernel, its type erased: the loop around it (operands,
// threads, strides, staging) is compiled once per signature <O, In...>, not once per kernel. Every
// kernel's function is a lambda capturing a few scalars, copied into the inline bytes; one that
// is not trivially copyable (it holds a shared flag) is kept on the heap.
struct ErasedFn {
  static constexpr size_t kInline = 48;
  alignas(16) unsigned char bytes[kInline];
  std::shared_ptr<const void> held;

  template <typename F>
  static ErasedFn of(const F& f) {
    ErasedFn e;
    if constexpr (std::is_trivially_copyable_v<F> && sizeof(F) <= kInline && alignof(F) <= 16) {
      ::new (static_cast<void*>(e.bytes)) F(f);
    } else {
      e.held = std::make_shared<const F>(f);
    }
    return e;
  }
  const void* get() const { return held ? held.get() : static_cast<const void*>(bytes); }
};

// A single value of another dtype (a Python number, a 0-dim tensor) converted to V once, so that
// the typed loop serves `x * 0.5` too.
template <typename V>
void retype_single(const Tensor& t, char* buf, const char** data, DevxDType* dtype) {
  if (t.numel() != 1 || t.dtype == type_dtype<V>()) return;
  const V v = loader_for<V>(t.dtype)(t.data);
  std::memcpy(buf, &v, sizeof(V));
  *data = buf;
  *dtype = type_dtype<V>();
}

template <typename V>
const void* stage_as(const char* data, DevxDType dtype, int64_t offset, int64_t stride, int64_t m, void* buf) {
  return stage<V>(data, dtype, offset, stride, m, static_cast<V*>(buf));
}

template <typename V>
void unstage_as(const void* values, int64_t m, char* data, DevxDType dtype, int64_t offset, int64_t stride) {
  unstage<V>(static_cast<const V*>(values), m, data, dtype, offset, stride);
}

// A pointwise signature's element types <O, In...>, as the driver below needs them: the dtypes
// and the typed staging and conversion functions, instantiated once per type.
template <size_t N>
struct PointwiseSignature {
  DevxDType out;
  int64_t out_size;
  std::array<int64_t, N> in_size;
  void (*unstage)(const void* values, int64_t m, char* data, DevxDType dtype, int64_t offset, int64_t stride);
  std::array<DevxDType, N> in;
  std::array<const void* (*)(const char*, DevxDType, int64_t, int64_t, int64_t, void*), N> stage;
  std::array<void (*)(const Tensor&, char*, const char**, DevxDType*), N> retype;
};

// f over `len` contiguous values: out and in[k] point to arrays of the signature's types.
using PointwiseRow = void (*)(const void* fn, int64_t len, void* out, const void* const* in);

// The work of one pointwise kernel: the driver (threads, strides, staging of other dtypes and
// layouts) is compiled once per arity, in pointwise.cpp; only the row is the kernel's own.
template <size_t N>
struct PointwiseWork {
  std::shared_ptr<const Operands<N>> ops;
  ErasedFn fn;
  PointwiseRow row = nullptr;
  const PointwiseSignature<N>* sig = nullptr;
  void operator()() const;
};

template <size_t N>
DevxStatus launch_pointwise(DevxKernelContext* ctx, PointwiseWork<N>&& work);
template <size_t N>
void keep_pointwise(PointwiseWork<N>&& work, std::function<void()>* out);

#define DEVX_SIM_POINTWISE_ARITY(N)                                                                              \
  extern template DevxStatus take_operands<N>(const std::array<const DevxTensor*, N>&, DevxTensor*,               \
                                              const std::array<bool, N>&, std::shared_ptr<const Operands<N>>*); \
  extern template void PointwiseWork<N>::operator()() const;                                                     \
  extern template DevxStatus launch_pointwise<N>(DevxKernelContext*, PointwiseWork<N>&&);                        \
  extern template void keep_pointwise<N>(PointwiseWork<N>&&, std::function<void()>*);
DEVX_SIM_POINTWISE_ARITY(0)
DEVX_SIM_POINTWISE_ARITY(1)
DEVX_SIM_POINTWISE_ARITY(2)
DEVX_SIM_POINTWISE_ARITY(3)
DEVX_SIM_POINTWISE_ARITY(4)
#undef DEVX_SIM_POINTWISE_ARITY

// out = f(ins...): input k is read as In_k and handed to f in opmath_t<In_k>; f's result is
// stored as O. Inputs broadcast to out's shape; any strides; inputs of other dtypes than In_k
// (and an output of another dtype than O) are converted through In_k (and O).
template <typename O, typename... In>
struct Pointwise {
  static constexpr size_t N = sizeof...(In);
  using Ins = std::array<const DevxTensor*, N>;

  // The work computing out, to be launched; left empty when out has no elements.
  template <typename F>
  static DevxStatus prepare(const Ins& ins, DevxTensor* out, const F& f, std::function<void()>* work) {
    *work = nullptr;
    PointwiseWork<N> w;
    if (DevxStatus status = take_operands<N>(ins, out, {is_complex_v<In>...}, &w.ops)) return status;
    if (!w.ops) return DEVX_OK;
    fill_in(f, &w);
    keep_pointwise<N>(std::move(w), work);
    return DEVX_OK;
  }

  template <typename F>
  static DevxStatus launch_on(DevxKernelContext* ctx, const Ins& ins, DevxTensor* out, const F& f) {
    PointwiseWork<N> w;
    if (DevxStatus status = take_operands<N>(ins, out, {is_complex_v<In>...}, &w.ops)) return status;
    if (!w.ops) return DEVX_OK;
    fill_in(f, &w);
    return launch_pointwise<N>(ctx, std::move(w));
  }

 private:
  static constexpr PointwiseSignature<N> kSignature{
      type_dtype<O>(),      sizeof(O),           {int64_t{sizeof(In)}...},
      &unstage_as<O>,       {type_dtype<In>()...}, {&stage_as<In>...},
      {&retype_single<In>...}};

  template <typename F>
  static void fill_in(const F& f, PointwiseWork<N>* w) {
    w->fn = ErasedFn::of(f);
    w->row = &row<F>;
    w->sig = &kSignature;
  }

  template <typename F, size_t... I>
  static void typed_row(const F& f, int64_t len, O* out, const void* const* in, std::index_sequence<I...>) {
    const std::tuple<const In*...> p{static_cast<const In*>(in[I])...};
    for (int64_t i = 0; i < len; ++i) out[i] = convert<O>(f(convert<opmath_t<In>>(std::get<I>(p)[i])...));
  }

  // The one element loop a kernel instantiates, written with unit strides so that the compiler
  // vectorises it. Every other layout is staged through buffers rather than given loops of its
  // own (one per kernel and dtype, which the build paid for in minutes).
  template <typename F>
  [[gnu::noinline]] static void row(const void* fn, int64_t len, void* out, const void* const* in) {
    typed_row(*std::launder(static_cast<const F*>(fn)), len, static_cast<O*>(out), in, std::make_index_sequence<N>{});
  }
};

template <typename T, size_t>
using Repeat = T;

// out = f(ins...) computed in T: every input read as T, f takes opmath_t<T> values and returns
// one, stored as T.
template <typename T, size_t NIN, typename F>
DevxStatus elementwise(DevxKernelContext* ctx, const std::array<const DevxTensor*, NIN>& ins, DevxTensor* out,
                       const F& f) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    return Pointwise<T, Repeat<T, I>...>::launch_on(ctx, ins, out, f);
  }(std::make_index_sequence<NIN>{});
}

// dst = src converted to dst's dtype elementwise, same shape, any strides (a complex source gives
// its real part, as ATen's copy does); inside queued work. Compiled once, in pointwise.cpp.
void convert_elements(const Tensor& src, const Tensor& dst);

// A Scalar as ATen's kernels mostly read it: converted to T (rounded, for the 16-bit floats), then
// computed with in opmath_t<T>.
template <typename T>
opmath_t<T> scalar_in(const DevxScalar* s) {
  return convert<opmath_t<T>>(scalar_as<T>(s));
}

// Runs prepared works (NULL ones skipped) as one launch.
inline DevxStatus launch_all(DevxKernelContext* ctx, std::vector<std::function<void()>> works) {
  std::vector<std::function<void()>> todo;
  for (auto& w : works) {
    if (w) todo.push_back(std::move(w));
  }
  if (todo.empty()) return DEVX_OK;
  return launch(ctx, [todo = std::move(todo)] {
    for (const auto& w : todo) w();
  });
}

// Integer division by zero. The element loop cannot throw (it may run on a pool thread, where an
// exception would end the process), so it raises this flag and the work throws once the loop is
// done, with ATen's message.
struct ZeroDivision {
  std::shared_ptr<std::atomic<bool>> hit = std::make_shared<std::atomic<bool>>(false);
  void raise() const { hit->store(true, std::memory_order_relaxed); }
  // `work`, then the error if any element divided by zero.
  std::function<void()> checked(std::function<void()> work) const {
    if (!work) return work;
    return [work = std::move(work), hit = hit] {
      work();
      if (hit->load()) throw std::runtime_error("ZeroDivisionError");
    };
  }
};

}  // namespace devx::cpu_sim::kern
