// Order statistics along one dim (or of all elements): median (the lower of the two middle values,
// NaN if the row has one) and mode (the most frequent value, the smallest among equally frequent
// ones), with their indices. Rows run in parallel.
#include <algorithm>
#include <numeric>
#include <optional>

#include "kernels/reduce_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

using namespace reduce_util;

// The rows along `dim` of `in`, with the output positions of each (keepdim or not).
struct MedianRows {
  Tensor in;
  int dim = 0;
  Reduction<2> r;
};

DevxStatus median_rows(const std::string& op, const DevxTensor* self, int64_t dim, const std::array<const Tensor*, 2>& outs,
                   std::optional<MedianRows>* result) {
  const Tensor in = at_least_1d(take(self));
  if (!wrap_dim(&dim, self->ndim)) return invalid(op + ": dimension out of range");
  DimMask mask(static_cast<size_t>(in.ndim()), false);
  mask[static_cast<size_t>(dim)] = true;
  std::string why;
  const MedianRows& rows = result->emplace(MedianRows{in, static_cast<int>(dim), make_reduction<2>(in, mask, outs, &why)});
  if (!why.empty()) return invalid(op + ": " + why);
  if (rows.r.n_red == 0 && rows.r.n_out > 0) {
    return invalid(op + "(): Expected reduction dim " + std::to_string(dim) + " to have non-zero size.");
  }
  return DEVX_OK;
}

// Runs row(input offset of the row's first element, output offsets) for every row, in parallel.
template <typename Row>
void for_rows(const MedianRows& rows, Row row) {
  parallel_for(rows.r.n_out, std::max<int64_t>(1, kGrain / std::max<int64_t>(rows.r.n_red, 1)),
               [&](int64_t begin, int64_t end) {
                 rows.r.outer.run(begin, end, [&](const std::array<int64_t, 3>& off, int64_t n,
                                                  const std::array<int64_t, 3>& st) {
                   for (int64_t i = 0; i < n; ++i) row(off[2] + i * st[2], std::array<int64_t, 2>{off[0] + i * st[0], off[1] + i * st[1]});
                 });
               });
}

// The lower median of `n` values read by value(i) and its index: the NaN of lowest index where
// there is one, else the ((n - 1) / 2)-th smallest, equal values ordered by index.
template <typename M, typename Value>
std::pair<M, int64_t> lower_median(int64_t n, Value value, std::vector<int64_t>& idx) {
  for (int64_t i = 0; i < n; ++i) {
    if (is_nan(value(i))) return {value(i), i};
  }
  idx.resize(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  const auto nth = idx.begin() + (n - 1) / 2;
  std::nth_element(idx.begin(), nth, idx.end(), [&](int64_t a, int64_t b) {
    const M va = value(a), vb = value(b);
    return va < vb || (va == vb && a < b);
  });
  return {value(*nth), *nth};
}

DevxStatus median_dim_values(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, int, DevxTensor* values,
                             DevxTensor* indices) {
  if (!self || !values || !indices) return invalid("median: NULL tensor");
  const Tensor v = take(values), ix = take(indices);
  if (v.dtype != self->dtype) return decline("median: values of another dtype than the input");
  if (ix.dtype != DEVX_INT64) return decline("median: indices that are not int64");
  std::optional<MedianRows> found;
  if (DevxStatus s = median_rows("median", self, dim, {&v, &ix}, &found)) return s;
  const MedianRows& rows = *found;
  return dispatch_in<kNumbers>(rows.in.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return launch(ctx, [rows, v, ix] {
      const int64_t n = rows.in.size(rows.dim), st = rows.in.stride(rows.dim);
      const T* x = rows.in.ptr<const T>();
      for_rows(rows, [&](int64_t base, const std::array<int64_t, 2>& out) {
        thread_local std::vector<int64_t> idx;
        const auto [m, i] = lower_median<M>(n, [&](int64_t k) { return static_cast<M>(x[base + k * st]); }, idx);
        v.ptr<T>()[out[0]] = convert<T>(m);
        ix.ptr<int64_t>()[out[1]] = i;
      });
    });
  });
}

// median() of all elements, in row-major order; NaN for an empty input.
DevxStatus median_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  if (!self || !out) return invalid("median: NULL tensor");
  const Tensor in = take(self), o = take(out);
  if (o.dtype != in.dtype) return decline("median: output of another dtype than the input");
  return dispatch_in<kNumbers>(in.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return launch(ctx, [in, o] {
      const Loop<1> loop(in.sizes, {in.strides});
      std::vector<M> vals;
      vals.reserve(static_cast<size_t>(loop.numel()));
      loop.run(0, loop.numel(), [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
        for (int64_t i = 0; i < n; ++i) vals.push_back(static_cast<M>(in.ptr<const T>()[off[0] + i * st[0]]));
      });
      if (vals.empty()) {
        o.ptr<T>()[0] = convert<T>(std::numeric_limits<double>::quiet_NaN());
        return;
      }
      std::vector<int64_t> idx;
      const auto [m, i] = lower_median<M>(static_cast<int64_t>(vals.size()), [&](int64_t k) { return vals[k]; }, idx);
      (void)i;
      o.ptr<T>()[0] = convert<T>(m);
    });
  });
}

// The most frequent value of each row: the values sorted (with their indices, by value only, as
// ATen's CPU kernel sorts them), the first longest run wins, with the index its last element carries.
DevxStatus mode_values(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, int, DevxTensor* values,
                       DevxTensor* indices) {
  if (!self || !values || !indices) return invalid("mode: NULL tensor");
  const Tensor v = take(values), ix = take(indices);
  if (v.dtype != self->dtype) return decline("mode: values of another dtype than the input");
  if (ix.dtype != DEVX_INT64) return decline("mode: indices that are not int64");
  std::optional<MedianRows> found;
  if (DevxStatus s = median_rows("mode", self, dim, {&v, &ix}, &found)) return s;
  const MedianRows& rows = *found;
  return dispatch_in<kNumbers | kBool>(rows.in.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return launch(ctx, [rows, v, ix] {
      const int64_t n = rows.in.size(rows.dim), st = rows.in.stride(rows.dim);
      const T* x = rows.in.ptr<const T>();
      for_rows(rows, [&](int64_t base, const std::array<int64_t, 2>& out) {
        std::vector<std::pair<M, int64_t>> e(static_cast<size_t>(n));
        for (int64_t k = 0; k < n; ++k) e[k] = {static_cast<M>(x[base + k * st]), k};
        std::sort(e.begin(), e.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        M mode = M(0);
        int64_t mode_index = 0, run = 0, best = 0;
        for (int64_t k = 0; k < n; ++k) {
          ++run;
          if (k == n - 1 || e[k].first != e[k + 1].first) {
            if (run > best) {
              mode = e[k].first;
              mode_index = e[k].second;
              best = run;
            }
            run = 0;
          }
        }
        v.ptr<T>()[out[0]] = convert<T>(mode);
        ix.ptr<int64_t>()[out[1]] = mode_index;
      });
    });
  });
}

DEVX_SIM_REGISTER_KERNEL(median_out, median_out);
DEVX_SIM_REGISTER_KERNEL(median_dim_values, median_dim_values);
DEVX_SIM_REGISTER_KERNEL(mode_values, mode_values);

}  // namespace
}  // namespace devx::cpu_sim::kern
