// What the reductions, scans, sorts, softmaxes and losses share: dimension lists, the split of a
// tensor into reduced and kept dimensions, a parallel reduction driver, and iteration over the
// rows along one dimension.
#pragma once

#include <array>
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/elementwise.h"

namespace devx::cpu_sim::kern::reduce_util {

// The accumulator of sums and products of T: double for the floats (float32 then matches ATen's
// cascade sums within rounding), int64 for integers and bool (wrapping, as ATen's do), complex
// double for the complex types.
template <typename T>
using acc_t = std::conditional_t<is_float_v<T>, double, std::conditional_t<is_complex_v<T>, c128, int64_t>>;

// Integer accumulation wraps like ATen's int64 arithmetic instead of being undefined.
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
template <typename A>
inline A acc_add(A a, A b) {
  if constexpr (std::is_same_v<A, int64_t>) return wrap_add(a, b);
  else return a + b;
}
template <typename A>
inline A acc_mul(A a, A b) {
  if constexpr (std::is_same_v<A, int64_t>) return wrap_mul(a, b);
  else return a * b;
}

// The losses' `reduction` argument: ATen's at::Reduction values.
constexpr int64_t kReductionNone = 0, kReductionMean = 1, kReductionSum = 2;

template <typename M>
inline bool is_nan(M v) {
  if constexpr (std::is_floating_point_v<M>) return v != v;
  else return false;
}

// Element `offset` (in elements) of `t` read as T: typed when the dtypes agree.
template <typename T>
inline T read_as(const Tensor& t, int64_t offset) {
  if (t.dtype == type_dtype<T>()) return t.ptr<const T>()[offset];
  return load_as<T>(t.data + offset * static_cast<int64_t>(t.itemsize()), t.dtype);
}

template <typename T>
inline void write_as(const Tensor& t, int64_t offset, T v) {
  if (t.dtype == type_dtype<T>()) {
    t.ptr<T>()[offset] = v;
  } else {
    store_as(t.data + offset * static_cast<int64_t>(t.itemsize()), t.dtype, v);
  }
}

// `dim` wrapped into [0, ndim) (a 0-dim tensor takes 0 and -1); false if out of range.
bool wrap_dim(int64_t* dim, int ndim);

// Which dimensions a reduction reduces.
using DimMask = SmallVec<bool, 8>;

// The reduced dimensions of an `ndim`-dim tensor: `dims` NULL or empty means all of them.
// Returns an empty string, or why `dims` is invalid.
std::string reduce_mask(int ndim, const int64_t* dims, int64_t n, DimMask* mask);
inline std::string reduce_mask(int ndim, const DevxIntList* dims, DimMask* mask) {
  return dims ? reduce_mask(ndim, dims->data, dims->len, mask) : reduce_mask(ndim, nullptr, 0, mask);
}

// `in` split into the dimensions kept (iterated by `outer`, together with the NO outputs, whose
// strides come first) and those reduced (iterated by `inner`, in row-major order, so the running
// index of a reduced element is its index in the flattened reduced dimensions).
template <size_t NO>
struct Reduction {
  Loop<NO + 1> outer;
  Loop<1> inner;
  int64_t n_out = 0;
  int64_t n_red = 0;
};

// Output k has either as many dimensions as `in` (keepdim) or the kept ones only; sizes that do
// not fit give an error message in *why.
template <size_t NO>
Reduction<NO> make_reduction(const Tensor& in, const DimMask& mask, const std::array<const Tensor*, NO>& outs,
                             std::string* why) {
  Dims kept_shape, red_shape;
  std::array<Dims, NO + 1> kept_strides;
  std::array<Dims, 1> red_strides;
  std::array<int, NO> next{};
  for (int d = 0; d < in.ndim(); ++d) {
    if (mask[d]) {
      red_shape.push_back(in.size(d));
      red_strides[0].push_back(in.stride(d));
      for (size_t k = 0; k < NO; ++k) {
        if (outs[k]->ndim() == in.ndim()) ++next[k];
      }
      continue;
    }
    kept_shape.push_back(in.size(d));
    kept_strides[NO].push_back(in.stride(d));
    for (size_t k = 0; k < NO; ++k) {
      const Tensor& o = *outs[k];
      const int od = next[k]++;
      if (od >= o.ndim() || o.size(od) != in.size(d)) {
        *why = "output shape does not match the reduction";
        kept_strides[k].push_back(0);
      } else {
        kept_strides[k].push_back(o.stride(od));
      }
    }
  }
  Reduction<NO> r{Loop<NO + 1>(kept_shape, kept_strides), Loop<1>(red_shape, red_strides)};
  r.n_out = 1;
  for (int64_t s : kept_shape) r.n_out *= s;
  r.n_red = 1;
  for (int64_t s : red_shape) r.n_red *= s;
  return r;
}

// Calls visit(input offset relative to the output's first element, index) for the reduced
// elements [begin, end), in order.
template <typename Visit>
inline void visit_reduced(const Loop<1>& inner, int64_t begin, int64_t end, Visit&& visit) {
  if (inner.shape.size() == 1) {
    const int64_t st = inner.strides[0][0];
    for (int64_t i = begin; i < end; ++i) visit(i * st, i);
    return;
  }
  int64_t index = begin;
  inner.run(begin, end, [&](const std::array<int64_t, 1>& off, int64_t len, const std::array<int64_t, 1>& st) {
    for (int64_t i = 0; i < len; ++i) visit(off[0] + i * st[0], index++);
  });
}

// No row function: run_reduction steps element by element.
struct NoRow {};

// The parts of a reduction that depend on its kernel and dtype, their types erased: the driver
// (loops, threads, blocks of outputs, chunks of a long reduction) is compiled once per number of
// outputs, not once per kernel and dtype, which cost the build minutes. `self` is the typed
// parts; an accumulator is `acc_size` bytes, trivially copyable.
struct ReduceFns {
  static constexpr size_t kMaxAcc = 64;
  const void* self = nullptr;
  size_t acc_size = 0;
  const void* init = nullptr;
  // n steps over the elements off, off + st, ..., whose indices start at `index`.
  void (*fold)(const void* self, void* acc, int64_t off, int64_t st, int64_t n, int64_t index) = nullptr;
  // The same where the index does not matter (may reorder the fold); NULL: use fold.
  void (*fold_row)(const void* self, void* acc, int64_t off, int64_t st, int64_t n) = nullptr;
  // One step each of the nb accumulators accs[b] over element off + b, all at `index`.
  void (*step_block)(const void* self, void* accs, int64_t nb, int64_t off, int64_t index) = nullptr;
  void (*combine)(const void* self, void* acc, const void* later) = nullptr;
  void (*store)(const void* self, const int64_t* outs, const void* acc) = nullptr;
};

template <size_t NO>
void run_reduction_fns(const Reduction<NO>& r, const ReduceFns& fns);
extern template void run_reduction_fns<1>(const Reduction<1>&, const ReduceFns&);
extern template void run_reduction_fns<2>(const Reduction<2>&, const ReduceFns&);

// Reduces every output: acc starts as `init`, takes step(acc, input offset, index) for each reduced
// element in order, and store(output offsets, acc) writes it. Few outputs over many elements
// are split into chunks whose accumulators merge in order with combine(acc, later_acc).
// row(acc, input offset, stride, n), where given, replaces n steps over evenly spaced elements
// (a fold whose index does not matter can unroll it).
template <size_t NO, typename Acc, typename Step, typename Combine, typename Store, typename Row = NoRow>
void run_reduction(const Reduction<NO>& r, const Acc& init, Step step, Combine combine, Store store, Row row = {}) {
  static_assert(std::is_trivially_copyable_v<Acc> && sizeof(Acc) <= ReduceFns::kMaxAcc && alignof(Acc) <= 16,
                "run_reduction keeps accumulators as bytes");
  struct Parts {
    const Step& step;
    const Combine& combine;
    const Store& store;
    const Row& row;
  };
  const Parts parts{step, combine, store, row};
  ReduceFns fns;
  fns.self = &parts;
  fns.acc_size = sizeof(Acc);
  fns.init = &init;
  fns.fold = [](const void* self, void* acc, int64_t off, int64_t st, int64_t n, int64_t index) {
    const Parts& p = *static_cast<const Parts*>(self);
    Acc& a = *static_cast<Acc*>(acc);
    for (int64_t i = 0; i < n; ++i) p.step(a, off + i * st, index + i);
  };
  if constexpr (!std::is_same_v<Row, NoRow>) {
    fns.fold_row = [](const void* self, void* acc, int64_t off, int64_t st, int64_t n) {
      static_cast<const Parts*>(self)->row(*static_cast<Acc*>(acc), off, st, n);
    };
  }
  fns.step_block = [](const void* self, void* accs, int64_t nb, int64_t off, int64_t index) {
    const Parts& p = *static_cast<const Parts*>(self);
    Acc* a = static_cast<Acc*>(accs);
    for (int64_t b = 0; b < nb; ++b) p.step(a[b], off + b, index);
  };
  fns.combine = [](const void* self, void* acc, const void* later) {
    static_cast<const Parts*>(self)->combine(*static_cast<Acc*>(acc), *static_cast<const Acc*>(later));
  };
  fns.store = [](const void* self, const int64_t* outs, const void* acc) {
    std::array<int64_t, NO> o;
    std::copy(outs, outs + NO, o.begin());
    static_cast<const Parts*>(self)->store(o, *static_cast<const Acc*>(acc));
  };
  run_reduction_fns<NO>(r, fns);
}

// Folds step(acc, offsets) over all elements of `loop` (N operands), in parallel chunks whose
// accumulators merge in order with combine(acc, later_acc).
template <size_t N, typename Acc, typename Step, typename Combine>
Acc reduce_loop(const Loop<N>& loop, const Acc& init, Step step, Combine combine) {
  const int64_t n = loop.numel();
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(num_threads(), n / kGrain));
  const int64_t chunk = (n + chunks - 1) / chunks;
  std::unique_ptr<Acc[]> partial(new Acc[static_cast<size_t>(chunks)]);
  std::fill(partial.get(), partial.get() + chunks, init);
  parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      loop.run(c * chunk, std::min(n, (c + 1) * chunk),
               [&](const std::array<int64_t, N>& off, int64_t len, const std::array<int64_t, N>& st) {
                 for (int64_t i = 0; i < len; ++i) {
                   std::array<int64_t, N> o;
                   for (size_t k = 0; k < N; ++k) o[k] = off[k] + i * st[k];
                   step(partial[c], o);
                 }
               });
    }
  });
  Acc acc = partial[0];
  for (int64_t c = 1; c < chunks; ++c) combine(acc, partial[c]);
  return acc;
}

// Calls f(offsets) for every element of `loop` (N operands), in parallel.
template <size_t N, typename F>
void for_each_element(const Loop<N>& loop, F f) {
  parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
    loop.run(begin, end, [&](const std::array<int64_t, N>& off, int64_t len, const std::array<int64_t, N>& st) {
      for (int64_t i = 0; i < len; ++i) {
        std::array<int64_t, N> o;
        for (size_t k = 0; k < N; ++k) o[k] = off[k] + i * st[k];
        f(o);
      }
    });
  });
}

// The rows of `shape` along `dim`: row(offsets) is called with the offsets of each row's first
// element in N operands laid out by `strides` (the rows are run in parallel).
template <size_t N, typename F>
void for_each_row(const Dims& shape, int dim, const std::array<Dims, N>& strides, F row) {
  Dims rows_shape = shape;
  const int64_t len = rows_shape[dim];
  rows_shape[dim] = 1;
  const Loop<N> loop(rows_shape, strides);
  const int64_t n = loop.numel();
  parallel_for(n, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, len)), [&](int64_t begin, int64_t end) {
    loop.run(begin, end, [&](const std::array<int64_t, N>& off, int64_t count, const std::array<int64_t, N>& st) {
      for (int64_t i = 0; i < count; ++i) {
        std::array<int64_t, N> o;
        for (size_t k = 0; k < N; ++k) o[k] = off[k] + i * st[k];
        row(o);
      }
    });
  });
}

// A 0-dim tensor seen as one element along one dimension, so that dim-wise kernels need no case of
// their own for it.
inline Tensor at_least_1d(Tensor t) {
  if (t.ndim() == 0) {
    t.sizes = {1};
    t.strides = {1};
  }
  return t;
}

// The first error a parallel body met: thrown by the launched work once the threads are done,
// since an exception must not leave a parallel_for body.
class WorkError {
 public:
  void set(std::string message) {
    bool expected = false;
    if (failed_.compare_exchange_strong(expected, true)) message_ = std::move(message);
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  void throw_if_failed() const;

 private:
  std::atomic<bool> failed_{false};
  std::string message_;
};

}  // namespace devx::cpu_sim::kern::reduce_util
