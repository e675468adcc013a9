// Pointwise kernels whose operands need not share one element type (a comparison reads its
// inputs in their common type and writes bool, `where` reads a bool condition), prepared apart
// from their launch so that a _foreach_ kernel issues one launch for a whole list.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
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

// out = f(ins...): input k is read as In_k and handed to f in opmath_t<In_k>; f's result is
// stored as O. Inputs broadcast to out's shape; any strides; inputs of other dtypes than In_k
// (and an output of another dtype than O) are converted element by element, through In_k (and O).
template <typename O, typename... In>
struct Pointwise {
  static constexpr size_t N = sizeof...(In);
  using Ins = std::array<const DevxTensor*, N>;

  // The work computing out, to be launched; left empty when out has no elements.
  template <typename F>
  static DevxStatus prepare(const Ins& ins, DevxTensor* out, F f, std::function<void()>* work) {
    *work = nullptr;
    return with_work(ins, out, std::move(f), [&](auto&& w) {
      *work = std::move(w);
      return DEVX_OK;
    });
  }

  template <typename F>
  static DevxStatus launch_on(DevxKernelContext* ctx, const Ins& ins, DevxTensor* out, F f) {
    return with_work(ins, out, std::move(f), [&](auto&& w) { return launch(ctx, std::move(w)); });
  }

 private:
  // Checks the operands and returns then(work computing out); DEVX_OK without calling `then`
  // when out has no elements.
  template <typename F, typename Then>
  static DevxStatus with_work(const Ins& ins, DevxTensor* out, F f, Then then) {
    if (!out) return invalid("NULL output");
    std::array<Tensor, N> in;
    std::array<Dims, N + 1> strides;
    Tensor o = take(out);
    strides[0] = o.strides;
    constexpr std::array<bool, N> complex_in = {is_complex_v<In>...};
    for (size_t k = 0; k < N; ++k) {
      if (!ins[k]) return invalid("NULL input");
      // Reading a complex value as a real type would drop its imaginary part.
      if (is_complex(ins[k]->dtype) && !complex_in[k]) return decline("complex input");
      in[k] = take(ins[k]);
      strides[k + 1] = broadcast_strides(in[k], o.sizes);
    }
    Loop<N + 1> loop(o.sizes, strides);
    const int64_t n = loop.numel();
    if (n == 0) return DEVX_OK;
    return then([o, in, loop, n, f] { run(o, in, loop, n, f, std::make_index_sequence<N>{}); });
  }

  // A single value of another dtype (a Python number, a 0-dim tensor) converted to In once, so
  // that the typed loop serves `x * 0.5` too.
  template <typename V>
  static void retype_single(const Tensor& t, char* buf, const char** data, DevxDType* dtype) {
    if (t.numel() != 1 || t.dtype == type_dtype<V>()) return;
    const V v = loader_for<V>(t.dtype)(t.data);
    std::memcpy(buf, &v, sizeof(V));
    *data = buf;
    *dtype = type_dtype<V>();
  }

  template <typename F, size_t... I>
  static void run(const Tensor& o, const std::array<Tensor, N>& in, const Loop<N + 1>& loop, int64_t n, const F& f,
                  std::index_sequence<I...>) {
    // (Unused by a fill, which has no inputs.)
    [[maybe_unused]] alignas(16) char single[N > 0 ? N : 1][16];
    [[maybe_unused]] std::array<const char*, N> data = {in[I].data...};
    [[maybe_unused]] std::array<DevxDType, N> dtype = {in[I].dtype...};
    (retype_single<In>(in[I], single[I], &data[I], &dtype[I]), ...);
    const bool typed = o.dtype == type_dtype<O>() && ((dtype[I] == type_dtype<In>()) && ...);
    if (typed) {
      parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
        loop.run(begin, end, [&](const std::array<int64_t, N + 1>& off, int64_t len,
                                 const std::array<int64_t, N + 1>& st) {
          O* po = o.ptr<O>() + off[0];
          const std::tuple<const In*...> pi{reinterpret_cast<const In*>(data[I]) + off[I + 1]...};
          if (st[0] == 1 && ((st[I + 1] == 1) && ...)) {
            // Unit strides spelled out, so that the compiler can vectorise.
            for (int64_t i = 0; i < len; ++i) {
              po[i] = convert<O>(f(convert<opmath_t<In>>(std::get<I>(pi)[i])...));
            }
          } else {
            for (int64_t i = 0; i < len; ++i) {
              po[i * st[0]] = convert<O>(f(convert<opmath_t<In>>(std::get<I>(pi)[i * st[I + 1]])...));
            }
          }
        });
      });
      return;
    }
    // As ATen's TensorIterator: inputs cast to their compute type, the result cast to out's.
    const Storer<O> store = storer_for<O>(o.dtype);
    const std::tuple<Loader<In>...> loads{loader_for<In>(dtype[I])...};
    const int64_t osize = static_cast<int64_t>(o.itemsize());
    const std::array<int64_t, N> isize = {static_cast<int64_t>(itemsize(dtype[I]))...};
    parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      loop.run(begin, end, [&](const std::array<int64_t, N + 1>& off, int64_t len,
                               const std::array<int64_t, N + 1>& st) {
        for (int64_t i = 0; i < len; ++i) {
          store(o.data + (off[0] + i * st[0]) * osize,
                convert<O>(f(convert<opmath_t<In>>(
                    std::get<I>(loads)(data[I] + (off[I + 1] + i * st[I + 1]) * isize[I]))...)));
        }
      });
    });
  }
};

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
